//! Memory cgroups for tests: one made and limited for a test (v1 or v2, as
//! the machine has), and a child that joins one before it execs.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::*;

/// Have `command`'s process move itself into the cgroup whose
/// `cgroup.procs` is `procs` before it execs, so that everything it
/// allocates (its BPF maps' kernel memory too) is charged there from the
/// start, as under a systemd unit; its spawn fails if it cannot.
pub fn join_cgroup_at_exec(command: &mut Command, procs: &Path) {
    use std::os::unix::process::CommandExt;
    let path = std::ffi::CString::new(procs.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: between fork and exec only async-signal-safe calls
    // (open, write, close) on memory prepared before the fork.
    unsafe {
        command.pre_exec(move || {
            let fd = libc_open(path.as_ptr(), 1 /* O_WRONLY */);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // "0": the writing process itself.
            let written = libc_write(fd, b"0".as_ptr(), 1);
            libc_close(fd);
            if written != 1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A memory cgroup made for a test (v1's controller or v2's, as the
/// machine has), limited to `limit` bytes; removed when dropped.
pub struct MemoryCgroup {
    /// Its directory.
    pub dir: PathBuf,
    v2: bool,
}

impl MemoryCgroup {
    /// Make it, or None (said why) if the machine has no memory controller.
    pub fn make(name: &str, limit: u64) -> Option<MemoryCgroup> {
        let v1 = PathBuf::from("/sys/fs/cgroup/memory");
        let (dir, v2) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(name), false)
        } else if std::fs::read_to_string("/sys/fs/cgroup/cgroup.subtree_control")
            .is_ok_and(|c| c.split_whitespace().any(|w| w == "memory"))
        {
            (PathBuf::from("/sys/fs/cgroup").join(name), true)
        } else {
            return None;
        };
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir(&dir).ok()?;
        let file = if v2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        std::fs::write(dir.join(file), limit.to_string()).ok()?;
        Some(MemoryCgroup { dir, v2 })
    }

    /// Its `cgroup.procs`.
    pub fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    fn number(&self, file: &str) -> u64 {
        std::fs::read_to_string(self.dir.join(file))
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Bytes charged now (page cache, anonymous and kernel memory).
    pub fn usage(&self) -> u64 {
        self.number(if self.v2 {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        })
    }

    /// The most charged so far (v1's own figure; v2's `memory.peak` where
    /// the kernel has it, else 0).
    pub fn peak(&self) -> u64 {
        self.number(if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        })
    }

    /// One figure of `memory.stat` (v2's names: `anon`, `file`, `kernel`;
    /// v1's `rss` and `cache` stand for the first two), bytes; 0 if absent.
    pub fn stat(&self, key: &str) -> u64 {
        let key = match (self.v2, key) {
            (false, "anon") => "rss",
            (false, "file") => "cache",
            (false, "kernel") => return self.number("memory.kmem.usage_in_bytes"),
            _ => key,
        };
        std::fs::read_to_string(self.dir.join("memory.stat"))
            .ok()
            .and_then(|s| {
                s.lines().find_map(|l| {
                    let (k, v) = l.split_once(' ')?;
                    (k == key).then(|| v.trim().parse().ok()).flatten()
                })
            })
            .unwrap_or(0)
    }

    /// What the kernel cannot take back by dropping page cache: anonymous
    /// and kernel memory (BPF maps, page tables, slabs), bytes.
    pub fn unreclaimable(&self) -> u64 {
        self.stat("anon") + self.stat("kernel")
    }

    /// Kernel memory charged now (v1's `memory.kmem.usage_in_bytes`, v2's
    /// `kernel` of `memory.stat` where the kernel has it, else 0): BPF
    /// maps, page tables, slabs.
    pub fn kernel(&self) -> u64 {
        self.stat("kernel")
    }

    /// Processes of it the kernel's OOM killer ended.
    pub fn oom_kills(&self) -> u64 {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        std::fs::read_to_string(self.dir.join(file))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("oom_kill "))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(0)
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

pub(crate) fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string()
}
