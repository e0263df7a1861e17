//! This process's memory as its cgroup counts it, against the cgroup's limit.
//!
//! In: `/proc/self/cgroup` and the memory controller's files (cgroup v1's
//! `memory.usage_in_bytes`, `memory.limit_in_bytes`, or v2's
//! `memory.current`, `memory.max`, `memory.high`; `memory.stat` for both).
//! Out: [`CgroupMemory::reading`]: the working set (usage less the page
//! cache the kernel may drop first, as the kubelet counts it) and the
//! limit, when there is one. What the cgroup charges includes the kernel
//! memory of the BPF maps sysprof made, which its own RSS does not show,
//! and the page cache of the files it writes, which [`drop_cached_pages`]
//! gives back.

use std::path::PathBuf;

/// Ask the kernel to drop `file`'s pages from the page cache, once they
/// are written: a page of a file this process wrote (or first read) is
/// charged to its cgroup until reclaimed, and counts toward a unit's
/// `MemoryMax` and its "at rest" figure meanwhile. Only clean, unmapped
/// pages go (call it after `sync_data`); pages another process maps stay.
/// For files sysprof itself keeps and rarely reads back soon (the store's
/// segments, the unwind-table cache); best effort: an error only means the
/// pages stay until the kernel reclaims them.
pub fn drop_cached_pages(file: &std::fs::File) {
    use std::os::fd::AsRawFd;
    // SAFETY: an open file descriptor; the call reads no memory of ours.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
    }
}

/// A cgroup's memory files.
#[derive(Debug, Clone)]
pub struct CgroupMemory {
    dir: PathBuf,
    v2: bool,
}

/// One reading: (working set, limit), bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryReading {
    /// Charged to the cgroup, less its inactive page cache.
    pub working_set: u64,
    /// The lowest of its limits.
    pub limit: u64,
}

fn number(path: PathBuf) -> Option<u64> {
    crate::sys::kernel_text::read_to_string(path)
        .ok()?
        .trim()
        .parse()
        .ok()
}

impl CgroupMemory {
    /// The memory cgroup this process is in, if the machine has the controller.
    pub fn of_self() -> Option<CgroupMemory> {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        // v1: "N:memory:/path" (possibly beside other controllers).
        for line in own.lines() {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            if controllers.split(',').any(|c| c == "memory") {
                let dir = PathBuf::from("/sys/fs/cgroup/memory").join(path.trim_start_matches('/'));
                if dir.join("memory.usage_in_bytes").exists() {
                    return Some(CgroupMemory { dir, v2: false });
                }
            }
        }
        let path = own.lines().find_map(|l| l.strip_prefix("0::"))?;
        ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
            .iter()
            .map(|root| PathBuf::from(root).join(path.trim_start_matches('/')))
            .find(|dir| dir.join("memory.current").exists())
            .map(|dir| CgroupMemory { dir, v2: true })
    }

    /// Its working set and limit now; None without a limit (or unreadable).
    pub fn reading(&self) -> Option<MemoryReading> {
        let (usage, limit, inactive_key) = if self.v2 {
            let limit = ["memory.max", "memory.high"]
                .iter()
                .filter_map(|f| number(self.dir.join(f)))
                .min()?;
            (
                number(self.dir.join("memory.current"))?,
                limit,
                "inactive_file ",
            )
        } else {
            (
                number(self.dir.join("memory.usage_in_bytes"))?,
                number(self.dir.join("memory.limit_in_bytes"))?,
                "total_inactive_file ",
            )
        };
        // v1 writes "no limit" as a page-rounded 2^63.
        if limit >= 1 << 62 {
            return None;
        }
        let inactive = crate::sys::kernel_text::read_to_string(self.dir.join("memory.stat"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix(inactive_key))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            })
            .unwrap_or(0);
        Some(MemoryReading {
            working_set: usage.saturating_sub(inactive),
            limit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check, in a memory cgroup of its own with a 1-GiB limit (v1 or v2,
    /// as the machine has; as root), that the reading finds this process's
    /// cgroup, its limit, and a working set that grows by what the process
    /// touches. Without root or the controller it says so and checks nothing.
    #[test]
    fn the_cgroup_limit_and_working_set_are_read() {
        // SAFETY: geteuid has no arguments.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED the_cgroup_limit_and_working_set_are_read: not root");
            return;
        }
        let name = format!("sysprof-unit-{}", std::process::id());
        let v1 = PathBuf::from("/sys/fs/cgroup/memory");
        let (dir, limit_file) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(&name), "memory.limit_in_bytes")
        } else if std::fs::read_to_string("/sys/fs/cgroup/cgroup.subtree_control")
            .is_ok_and(|c| c.contains("memory"))
        {
            (PathBuf::from("/sys/fs/cgroup").join(&name), "memory.max")
        } else {
            eprintln!("SKIPPED the_cgroup_limit_and_working_set_are_read: no memory controller to make a cgroup in");
            return;
        };
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join(limit_file), "1073741824").unwrap();
        // A child moves itself in, then reads.
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "sys::cgroup_memory::tests::reading_in_a_child",
                "--nocapture",
            ])
            .env("SYSPROF_CGROUP_TEST_PROCS", dir.join("cgroup.procs"))
            .output()
            .unwrap();
        let _ = std::fs::remove_dir(&dir);
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("READ OK"), "the child ran the check: {text}");
    }

    /// The child of the test above (does nothing when run on its own).
    #[test]
    fn reading_in_a_child() {
        let Some(procs) = std::env::var_os("SYSPROF_CGROUP_TEST_PROCS") else {
            return;
        };
        std::fs::write(&procs, std::process::id().to_string()).unwrap();
        let cg = CgroupMemory::of_self().expect("this process's memory cgroup");
        let before = cg.reading().expect("a limit");
        assert_eq!(before.limit, 1 << 30);
        let touched = vec![1u8; 64 << 20];
        let after = cg.reading().unwrap();
        assert!(
            after.working_set >= before.working_set + (48 << 20),
            "{before:?} -> {after:?} after touching 64 MiB ({})",
            touched.iter().map(|&b| b as u64).sum::<u64>()
        );
        println!("READ OK {before:?} -> {after:?}");
    }
}
