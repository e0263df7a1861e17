//! One process as the unwinder knows it: its executable mappings, the
//! framehop unwinder built over them, its entry functions, the JIT code its
//! jitdump describes.
//!
//! In: mappings (binary, address range, file offset) and a jitdump file as
//! the process maps them. Out: a [`ProcessUnwinder`] the unwinders build on
//! first use and drop when the mappings change; whether an address is code
//! or in an entry function.

use std::sync::Arc;

use framehop::x86_64::UnwinderX86_64;
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder};

use super::binary::SectionBytes;
use crate::binaries::jitdump::{JitCode, JitdumpTail};
use crate::binaries::{Binaries, BinaryIndex};

/// A mapping as the unwinder needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Mapping {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) pgoff: u64,
    pub(super) binary: BinaryIndex,
    /// When its record says it was mapped (monotonic ns; 0: before the
    /// recording, from `/proc`): an exec whose record is older leaves it
    /// (`Unwinders::exec`).
    pub(super) mapped_ns: u64,
}

/// Return addresses this close after a program's entry point are in its
/// `_start` (or, for the dynamic loader, `_dl_start_user` right after
/// `_start`'s call): the bottom of the main thread's stack, which has no
/// caller to unwind to.
const ENTRY_FUNCTION_BYTES: u64 = 128;

/// Whether return address `addr` is in the entry function at `entry`.
pub(super) fn is_in_entry_function(addr: u64, entry: u64) -> bool {
    addr > entry && addr - entry <= ENTRY_FUNCTION_BYTES
}

pub(super) struct ProcessUnwinder<R> {
    pub(super) mappings: Vec<Mapping>,
    /// The mappings it had before its last exec, until the window ends: a
    /// stack taken before the exec may be handed over after it (the
    /// sideband of a batch is applied before its stacks), and a vfork
    /// child's, taken in its parent's image, always is.
    pub(super) before_exec: Vec<Mapping>,
    /// Built on first use; dropped when the mappings change.
    pub(super) unwinder: Option<UnwinderX86_64<SectionBytes>>,
    /// Entry points (`_start`) of the mapped binaries, as absolute
    /// addresses; filled when the unwinder is built.
    pub(super) entries: Vec<u64>,
    /// The jitdump file the process mapped, read as it grows.
    pub(super) jitdump: Option<(BinaryIndex, JitdumpTail, std::time::Instant)>,
    /// JIT code with unwind tables, from the jitdump: (start, end, module).
    pub(super) jit_modules: Vec<(u64, u64, Module<SectionBytes>)>,
    /// Monotonic ns of its exit, for pruning.
    pub(super) exited_ns: Option<u64>,
    /// A JVM whose compiled methods have rows in the kernel: where they begin.
    pub(super) jit_base: Option<u64>,
    /// The runtimes it runs, found when its entry is written (the
    /// runtimes layer's, [`super::RuntimeDetection`]).
    pub(super) runtime: R,
    /// When its last exec's record says it exec'd (0: none seen): a fork
    /// record read after it is older than the process it would reset.
    pub(super) exec_ns: u64,
}

/// How often a process's jitdump is read for new code.
const JITDUMP_POLL: std::time::Duration = std::time::Duration::from_millis(20);
/// Most bytes of jitdump read per poll.
const JITDUMP_POLL_BYTES: usize = 4 << 20;

/// A framehop module for JIT code and the unwind table its jitdump gave:
/// the `.eh_frame` lies (in the table's own address arithmetic) right
/// after the code rounded up to 8 bytes, its header after it, as perf
/// places them when it injects JIT code into an ELF file.
fn jit_module(code: &JitCode) -> Module<SectionBytes> {
    let start = code.start;
    let eh_start = start + code.size.next_multiple_of(8);
    let eh_end = eh_start + code.eh_frame.len() as u64;
    let hdr = (!code.eh_frame_hdr.is_empty()).then(|| {
        (
            eh_end..eh_end + code.eh_frame_hdr.len() as u64,
            SectionBytes(Arc::new(code.eh_frame_hdr.clone())),
        )
    });
    let info = ExplicitModuleSectionInfo {
        base_svma: start,
        text_svma: Some(start..start + code.size),
        text: None,
        eh_frame_svma: Some(eh_start..eh_end),
        eh_frame: Some(SectionBytes(Arc::new(code.eh_frame.clone()))),
        eh_frame_hdr_svma: hdr.as_ref().map(|h| h.0.clone()),
        eh_frame_hdr: hdr.map(|h| h.1),
        debug_frame: None,
        got_svma: None,
        stubs_svma: None,
        stub_helper_svma: None,
        unwind_info: None,
        text_segment_svma: None,
        text_segment: None,
    };
    Module::new(
        format!("JIT code at {start:#x}"),
        start..start + code.size,
        start,
        info,
    )
}

/// jitdump files are mapped executable so profilers find them; they are no ELF.
pub fn is_jitdump(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with("jit-") && name.ends_with(".dump")
}

impl<R: Default> ProcessUnwinder<R> {
    pub(super) fn new(mappings: Vec<Mapping>) -> ProcessUnwinder<R> {
        ProcessUnwinder {
            mappings,
            before_exec: Vec::new(),
            unwinder: None,
            entries: Vec::new(),
            jitdump: None,
            jit_modules: Vec::new(),
            exited_ns: None,
            jit_base: None,
            runtime: R::default(),
            exec_ns: 0,
        }
    }

    /// Read new code from the jitdump, at most every JITDUMP_POLL.
    pub(super) fn poll_jitdump(&mut self, binaries: &Binaries) {
        let Some((binary, tail, last)) = self.jitdump.as_mut() else {
            return;
        };
        if last.elapsed() < JITDUMP_POLL && !self.jit_modules.is_empty() {
            return;
        }
        *last = std::time::Instant::now();
        let Some(file) = binaries.get(*binary).file.as_ref() else {
            return;
        };
        for code in tail.poll(file, JITDUMP_POLL_BYTES) {
            let (start, end) = (code.start, code.start + code.size);
            // Code memory is reused: a new load replaces what overlapped it.
            let mut kept = Vec::with_capacity(self.jit_modules.len() + 1);
            for (s, e, m) in self.jit_modules.drain(..) {
                if e <= start || s >= end {
                    kept.push((s, e, m));
                } else if let Some(u) = self.unwinder.as_mut() {
                    u.remove_module(s);
                }
            }
            self.jit_modules = kept;
            let module = jit_module(&code);
            if let Some(u) = self.unwinder.as_mut() {
                u.add_module(module.clone());
            }
            self.jit_modules.push((start, end, module));
        }
    }

    /// Whether `addr` lies in an executable mapping of the process.
    pub(super) fn is_code(&self, addr: u64) -> bool {
        mapping_at(&self.mappings, addr).is_some()
    }

    /// Whether `addr` is in an entry function: a stack that reached it is whole.
    pub(super) fn is_entry(&self, addr: u64) -> bool {
        self.entries.iter().any(|&e| is_in_entry_function(addr, e))
    }
}

/// The mapping of `mappings` that holds `addr`, if any.
pub(super) fn mapping_at(mappings: &[Mapping], addr: u64) -> Option<&Mapping> {
    mappings.iter().find(|m| m.start <= addr && addr < m.end)
}

#[cfg(test)]
mod jit_tests {
    use super::*;
    use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64};

    /// The trampoline's eh_frame and hdr as tests/workloads/jit.c builds them, for code at `a` of size 11.
    fn tables(a: u64) -> (Vec<u8>, Vec<u8>) {
        let r = 16u64;
        let mut eh = vec![0u8; 48];
        eh[0..4].copy_from_slice(&20u32.to_le_bytes());
        eh[8] = 1;
        eh[9..12].copy_from_slice(b"zR\0");
        eh[12] = 1;
        eh[13] = 0x78;
        eh[14] = 16;
        eh[15] = 1;
        eh[16] = 0x1b;
        eh[17..20].copy_from_slice(&[0x0c, 7, 8]);
        eh[20..22].copy_from_slice(&[0x90, 1]);
        eh[24..28].copy_from_slice(&20u32.to_le_bytes());
        eh[28..32].copy_from_slice(&28u32.to_le_bytes());
        eh[32..36].copy_from_slice(&((a as i64 - (a + r + 32) as i64) as i32).to_le_bytes());
        eh[36..40].copy_from_slice(&11u32.to_le_bytes());
        eh[40] = 0;
        eh[41..47].copy_from_slice(&[0x44, 0x0e, 16, 0x46, 0x0e, 8]);
        let mut hdr = vec![1u8, 0x1b, 0x03, 0x3b];
        hdr.extend((-(48i32 + 4)).to_le_bytes());
        hdr.extend(1u32.to_le_bytes());
        hdr.extend((-(r as i32 + 48)).to_le_bytes());
        hdr.extend((-(48i32 - 24)).to_le_bytes());
        (eh, hdr)
    }

    /// Check that JIT code described by a jitdump unwinding record unwinds:
    /// from its call site (CFA rsp+16 there) to the return address its caller left.
    #[test]
    fn jit_code_unwinds_with_its_jitdump_table() {
        let a = 0x7f00_0000_1000u64;
        let (eh_frame, eh_frame_hdr) = tables(a);
        for with_hdr in [true, false] {
            let code = JitCode {
                start: a,
                size: 11,
                eh_frame: eh_frame.clone(),
                eh_frame_hdr: if with_hdr {
                    eh_frame_hdr.clone()
                } else {
                    Vec::new()
                },
            };
            let mut unwinder = UnwinderX86_64::new();
            unwinder.add_module(jit_module(&code));
            let mut cache = CacheX86_64::new();
            // At a+6 (just returned from the call): rsp+8 holds the return address into the caller.
            let sp = 0x7ffc_0000_0000u64;
            let caller_ret = 0x5555_0000_1234u64;
            let mut read_stack = |addr: u64| -> Result<u64, ()> {
                if addr == sp + 8 {
                    Ok(caller_ret)
                } else {
                    Ok(0)
                }
            };
            let mut frames = unwinder.iter_frames(
                a + 6,
                UnwindRegsX86_64::new(a + 6, sp, 0),
                &mut cache,
                &mut read_stack,
            );
            let mut got = Vec::new();
            while let Ok(Some(f)) = frames.next() {
                got.push(f.address());
                if got.len() > 3 {
                    break;
                }
            }
            assert_eq!(got[..2], [a + 6, caller_ret], "with hdr: {with_hdr}");
        }
    }
}
