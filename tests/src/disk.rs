//! Disks only a test touches: a loop device with direct I/O, and the
//! kernel's own counts of one disk (`/sys/block/NAME/stat`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A loop block device over a file in a scratch directory, with direct I/O:
/// a disk nothing else on the machine touches, so its `/sys/block/NAME/stat`
/// counts exactly what a test's workload did. Detached when dropped.
pub struct LoopDevice {
    /// `/dev/loopN`.
    pub path: PathBuf,
    /// `loopN`, as sysfs and the profile name it.
    pub name: String,
}

impl LoopDevice {
    /// Attach a new loop device over a `mib` MiB file in `dir`, with its
    /// blocks written out (reads of holes would be answered without I/O on
    /// the backing file, but the loop device itself still sees every request).
    ///
    /// The loop device reads its backing file with direct I/O, so each of
    /// its requests completes in the interrupt of the disk under it, in the
    /// context of whatever task that CPU was running: for tests of who wakes
    /// a disk wait.
    pub fn new(dir: &Path, mib: usize) -> LoopDevice {
        LoopDevice::attach(dir, mib, "on")
    }

    /// A loop device as [`LoopDevice::new`], whose backing file is read
    /// through the page cache: each request completes in the loop's worker
    /// (the block softirq then runs in ksoftirqd), never in an interrupt
    /// taken in another task's context. For tests that count every request:
    /// this VM runs no BPF program in the context of its PID 1, whose
    /// threads in a CI run were on the disk interrupt's CPU for 42 of 200
    /// completions (each counted as untracked); `perf record -e
    /// block:block_rq_complete` here sees 200 of 200 in ksoftirqd.
    pub fn through_page_cache(dir: &Path, mib: usize) -> LoopDevice {
        LoopDevice::attach(dir, mib, "off")
    }

    fn attach(dir: &Path, mib: usize, direct_io: &str) -> LoopDevice {
        let backing = dir.join("loop.img");
        let f = std::fs::File::create(&backing).unwrap();
        for _ in 0..mib {
            std::io::Write::write_all(&mut &f, &vec![7u8; 1 << 20]).unwrap();
        }
        f.sync_all().unwrap();
        drop(f);
        let out = Command::new("losetup")
            .args(["--find", "--show", &format!("--direct-io={direct_io}")])
            .arg(&backing)
            .output()
            .expect("losetup (util-linux) is needed for the block I/O tests");
        assert!(
            out.status.success(),
            "losetup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        LoopDevice { path, name }
    }

    /// The device's counters now.
    pub fn stat(&self) -> DiskStat {
        DiskStat::read(&self.name)
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.path).status();
    }
}

/// Completed requests and sectors of one disk, from `/sys/block/NAME/stat`
/// (Documentation/block/stat.rst): the kernel's own accounting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskStat {
    /// Read requests completed.
    pub reads: u64,
    /// Sectors (512 bytes) read.
    pub read_sectors: u64,
    /// Write requests completed.
    pub writes: u64,
    /// Sectors written.
    pub write_sectors: u64,
    /// Discard requests completed.
    pub discards: u64,
    /// Flush requests completed.
    pub flushes: u64,
}

impl DiskStat {
    /// Read the counters of `/sys/block/NAME`.
    pub fn read(name: &str) -> DiskStat {
        let text = std::fs::read_to_string(format!("/sys/block/{name}/stat")).unwrap();
        let f: Vec<u64> = text
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect();
        let at = |i: usize| f.get(i).copied().unwrap_or(0);
        DiskStat {
            reads: at(0),
            read_sectors: at(2),
            writes: at(4),
            write_sectors: at(6),
            discards: at(11),
            flushes: at(15),
        }
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &DiskStat) -> DiskStat {
        DiskStat {
            reads: self.reads - earlier.reads,
            read_sectors: self.read_sectors - earlier.read_sectors,
            writes: self.writes - earlier.writes,
            write_sectors: self.write_sectors - earlier.write_sectors,
            discards: self.discards - earlier.discards,
            flushes: self.flushes - earlier.flushes,
        }
    }
}
