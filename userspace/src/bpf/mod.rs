//! Loading the eBPF side and reading what it sends.
//!
//! In: the committed `ebpf/sample.bpf.o` and `ebpf/sched.bpf.o` (embedded
//! in the binary), the sampling frequency and an optional pid filter. Out: a
//! [`Sampler`] and a [`Tracer`] whose ring buffers yield raw records
//! (decoded by [`abi`]) through [`BpfRing`] (`ring.rs`; not aya's
//! `RingBuf`), and the drop counters the kernel side kept. Loading uses
//! aya; CO-RE relocations are resolved against `/sys/kernel/btf/vmlinux`.

pub mod abi;
pub mod jited;
mod ring;
mod sampler;
mod tracer;
pub mod unwind_maps;

use aya::programs::PerfEvent;
use aya::Ebpf;

use crate::error::RecordError;
pub use ring::BpfRing;
pub use sampler::{KernelDrops, Sampler, SamplerOptions};
pub use tracer::{Tracer, TracerDrops, TracerOptions};

/// `include_bytes!` with 8-byte alignment, which ELF parsing needs.
macro_rules! include_bytes_aligned {
    ($path:expr) => {{
        #[repr(C, align(8))]
        struct Aligned<B: ?Sized>(B);
        static ALIGNED: &Aligned<[u8]> = &Aligned(*include_bytes!($path));
        &ALIGNED.0
    }};
}
pub(crate) use include_bytes_aligned;

/// How long loading took, per step: an object (its maps and BTF) or a
/// program (the kernel's verifier): the wait before recording starts.
pub type LoadTimes = Vec<(&'static str, std::time::Duration)>;

/// How many times the kernel skipped a run of the program behind `fd`
/// because it was already running on that CPU (an interrupt's tracepoint
/// inside the same program): `recursion_misses` in its fdinfo (Linux 5.12+),
/// counted whether or not BPF statistics are on. 0 where it is not said.
fn recursion_misses(fd: std::os::fd::BorrowedFd<'_>) -> u64 {
    use std::os::fd::AsRawFd;
    fdinfo_recursion_misses(
        &crate::sys::kernel_text::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))
            .unwrap_or_default(),
    )
}

fn fdinfo_recursion_misses(info: &str) -> u64 {
    info.lines()
        .find_map(|l| l.strip_prefix("recursion_misses:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The perf_event program `name` of `ebpf`.
fn perf_program<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut PerfEvent, RecordError> {
    ebpf.program_mut(name)
        .ok_or_else(|| RecordError::no_program(name))?
        .try_into()
        .map_err(RecordError::program(name))
}

fn take(ebpf: &mut Ebpf, name: &str) -> Result<aya::maps::Map, RecordError> {
    ebpf.take_map(name).ok_or_else(|| RecordError::no_map(name))
}

/// A private bpffs mount, where the sampler's loader pins the unwind maps
/// and the tracer's loader opens them: aya gives every object its own maps,
/// and a pinned path is the one way it offers to hand one object's map to
/// another. Dropped once both are loaded: the pins are removed and the
/// mount detached; the maps live on in the programs that use them.
pub struct SharedMapDir {
    dir: std::path::PathBuf,
}

impl SharedMapDir {
    /// Mount a fresh bpffs on a new directory of our own.
    pub fn new() -> std::io::Result<SharedMapDir> {
        use std::os::unix::fs::DirBuilderExt;
        let base = if std::path::Path::new("/run").is_dir() {
            std::path::PathBuf::from("/run")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!(
            "sysprof-bpf-{}",
            crate::sys::random::random_suffix()
        ));
        // mkdir fails on anything already there (a symlink planted by a
        // local user included); nobody but root can enter it.
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
            .map_err(std::io::Error::other)?;
        // SAFETY: mounting a new bpffs instance on a directory we created.
        let r = unsafe {
            libc::mount(
                c"bpf".as_ptr(),
                path.as_ptr(),
                c"bpf".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            )
        };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            let _ = std::fs::remove_dir(&dir);
            return Err(e);
        }
        Ok(SharedMapDir { dir })
    }

    /// The directory the loaders pin in.
    pub fn path(&self) -> &std::path::Path {
        &self.dir
    }
}

impl Drop for SharedMapDir {
    fn drop(&mut self) {
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        if let Ok(path) = std::ffi::CString::new(self.dir.as_os_str().as_encoded_bytes()) {
            // SAFETY: unmounting what new() mounted.
            unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// How many CPUs there can be (`bpf_get_smp_processor_id()` is below it).
fn possible_cpus() -> Result<u32, RecordError> {
    aya::util::nr_cpus()
        .map(|n| n as u32)
        .map_err(|(path, source)| RecordError::Cpus {
            path: path.to_string(),
            source,
        })
}

/// The online CPUs, from `/sys/devices/system/cpu/online`.
pub fn online_cpus() -> Result<Vec<u32>, RecordError> {
    crate::sys::cpus::online().map_err(|source| RecordError::Cpus {
        path: "the online CPUs".into(),
        source,
    })
}

/// Whether the running kernel is at least major.minor.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = crate::error::kernel_release();
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    let (ma, mi) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (ma, mi) >= (major, minor)
}

#[cfg(test)]
mod tests {
    /// Check that a program's skipped runs are read from its fdinfo as the
    /// kernel prints it (and that a kernel without the line gives 0).
    #[test]
    fn recursion_misses_are_read_from_fdinfo() {
        let info = "pos:\t0\nflags:\t02000002\nprog_type:\t17\nrun_cnt:\t0\nrecursion_misses:\t42\nverified_insns:\t931\n";
        assert_eq!(super::fdinfo_recursion_misses(info), 42);
        assert_eq!(super::fdinfo_recursion_misses("prog_type:\t17\n"), 0);
    }
}
