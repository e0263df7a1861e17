//! DWARF unwinding of copied user stacks, with framehop.
//!
//! In: per process, its executable mappings (binary, address range, file
//! offset) as the sideband reports them, and per sample the user registers
//! and the top of the user stack copied by the kernel. Out: the user return
//! addresses, leaf first, and whether unwinding reached the thread's root or
//! stopped early (and why). Each binary's unwind sections (.eh_frame and
//! .eh_frame_hdr, or .debug_frame when it has no .eh_frame) are read once,
//! within byte budgets, from the file opened when it was mapped, and shared
//! by every process that maps it; framehop
//! caches each unwind rule it looks up, so a hot address is decoded once.
//! Where an address has no unwind information framehop falls back to the
//! frame pointer. JIT code gets its unwind tables from the jitdump file its
//! process maps, read as it grows.
//!
//! The unwind sections are copied into memory, not mapped: any user can
//! truncate a binary while we profile it, and touching a mapping past the new
//! end of file would kill the profiler with SIGBUS. (`.text`, which framehop
//! only uses to refine leaf frames, is left out for the same reason and for
//! its size.)

pub mod kernel;
pub mod tables;

use std::ops::{Deref, Range};
use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder};
use rustc_hash::FxHashMap;

use crate::binaries::{BinaryIndex, Binaries};
use crate::binaries::elf::{ElfLimits, ElfReader};
use crate::binaries::jitdump::{JitCode, JitdumpTail};

/// A section's bytes, shared between the processes that map the binary
/// (in the `Vec` they were read into: no copy).
#[derive(Clone)]
pub struct SectionBytes(Arc<Vec<u8>>);

impl Deref for SectionBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// What one binary contributes to unwinding.
struct BinaryUnwindInfo {
    /// (svma range, bytes) of the sections framehop wants.
    eh_frame: Option<(Range<u64>, SectionBytes)>,
    eh_frame_hdr: Option<(Range<u64>, SectionBytes)>,
    debug_frame: Option<SectionBytes>,
    got: Option<Range<u64>>,
    /// Executable PT_LOAD segments (all of them if none is marked so):
    /// (p_vaddr, p_offset, p_filesz).
    segments: Vec<(u64, u64, u64)>,
    /// The ELF entry point (`_start`), as an address of the file.
    entry: u64,
    /// Bytes of CFI held that count against [`MAX_HELD_USER_CFI_BYTES`].
    held_user_bytes: usize,
}

/// Most bytes of CFI held, in all, from files root does not own: each file's
/// CFI is within its own budget ([`ElfLimits::max_cfi_bytes`]), and this
/// bounds what a user's many files can make us keep for hand-overs. Files
/// root owns (the system's programs and libraries) are not counted: no user
/// can make one. Past it a file's frames are walked by frame pointer.
const MAX_HELD_USER_CFI_BYTES: usize = 256 << 20;

impl BinaryUnwindInfo {
    /// Read what unwinding needs, with the tolerant reader: a damaged
    /// symbol table or DWARF costs nothing here, and CFI is read only as far
    /// as its entries go, within the CFI budget (see [`ElfReader::cfi`]).
    /// `.eh_frame_hdr` is read as far as the FDEs it indexes, and
    /// `.debug_frame` only when `.eh_frame` has none (framehop, like the
    /// table compiler, then never looks at it).
    fn read(binaries: &Binaries, index: BinaryIndex) -> Result<BinaryUnwindInfo, String> {
        let bin = binaries.get(index);
        let file = bin.file.as_ref().ok_or_else(|| bin.open_error.clone().unwrap_or_else(|| "not a file".into()))?;
        let elf = ElfReader::new(file, ElfLimits::default());
        let segments = code_segments(&elf)?;
        let eh_frame = elf.cfi(".eh_frame").ok().flatten().filter(|c| c.fdes > 0);
        let eh_frame_hdr = eh_frame.as_ref().and_then(|c| elf.eh_frame_hdr(c.fdes));
        // Compressed .debug_frame is left out (cfi refuses it).
        let debug_frame = match &eh_frame {
            Some(_) => None,
            None => elf.cfi(".debug_frame").ok().flatten().filter(|c| c.fdes > 0).map(|c| SectionBytes(Arc::new(c.bytes))),
        };
        // Without unwind tables the module still serves: framehop walks
        // its frames by frame pointer. A section's range is what was read
        // of it (framehop resolves addresses relative to its start).
        Ok(BinaryUnwindInfo {
            eh_frame: eh_frame.map(|c| (c.info.addr..c.info.addr + c.bytes.len() as u64, SectionBytes(Arc::new(c.bytes)))),
            eh_frame_hdr: eh_frame_hdr.map(|(info, bytes)| (info.addr..info.addr + info.size, SectionBytes(Arc::new(bytes)))),
            debug_frame,
            got: elf.section(".got").map(|s| s.addr..s.addr + s.size),
            segments,
            entry: elf.entry()?,
            held_user_bytes: 0,
        })
    }

    /// Bytes of CFI it holds.
    fn cfi_bytes(&self) -> usize {
        self.eh_frame.as_ref().map_or(0, |e| e.1.len()) + self.eh_frame_hdr.as_ref().map_or(0, |h| h.1.len()) + self.debug_frame.as_ref().map_or(0, |d| d.len())
    }

    /// A framehop module for this binary mapped at `start..end` from file offset `pgoff`.
    fn module(&self, name: &str, start: u64, end: u64, pgoff: u64) -> Option<Module<SectionBytes>> {
        let base_avma = base_avma(&self.segments, start, pgoff)?;
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: None,
            text: None,
            eh_frame_svma: self.eh_frame.as_ref().map(|t| t.0.clone()),
            eh_frame: self.eh_frame.as_ref().map(|t| t.1.clone()),
            eh_frame_hdr_svma: self.eh_frame_hdr.as_ref().map(|t| t.0.clone()),
            eh_frame_hdr: self.eh_frame_hdr.as_ref().map(|t| t.1.clone()),
            debug_frame: self.debug_frame.clone(),
            got_svma: self.got.clone(),
            stubs_svma: None,
            stub_helper_svma: None,
            unwind_info: None,
            text_segment_svma: None,
            text_segment: None,
        };
        Some(Module::new(name.to_string(), start..end, base_avma, info))
    }
}

/// The load segments a mapping of `elf` may begin: (p_vaddr, p_offset,
/// p_filesz). Only executable mappings reach the unwinder (the sideband and
/// the /proc snapshot keep no others), so only executable segments can be
/// the one a mapping begins (with lld, the read-only segment before the
/// code shares its first file page); all of them if none is marked so.
fn code_segments(elf: &ElfReader) -> Result<Vec<(u64, u64, u64)>, String> {
    let all = elf.segments()?;
    let mut segments: Vec<(u64, u64, u64)> = all.iter().filter(|s| s.executable).map(|s| (s.vaddr, s.offset, s.filesz)).collect();
    if segments.is_empty() {
        segments = all.iter().map(|s| (s.vaddr, s.offset, s.filesz)).collect();
    }
    Ok(segments)
}

/// Where the ELF's address 0 lands for an executable mapping of it at
/// `start` from file offset `pgoff`: through the executable load segment the
/// mapping begins, the last one whose page-aligned file offset is at or
/// below `pgoff`. A segment rarely starts on a page boundary, and where its
/// address and file offset differ by more than the segment before it (lld's
/// layout: Rust binaries, LLVM-built programs) the segment whose file range
/// holds pgoff is the previous one; its bias is off by a page and every
/// unwind through the module goes astray.
fn base_avma(segments: &[(u64, u64, u64)], start: u64, pgoff: u64) -> Option<u64> {
    const PAGE: u64 = 4096;
    let &(vaddr, offset, _) =
        segments.iter().filter(|(_, off, _)| off & !(PAGE - 1) <= pgoff).max_by_key(|(_, off, _)| *off).or_else(|| segments.first())?;
    Some(start.wrapping_sub(pgoff).wrapping_add(offset).wrapping_sub(vaddr))
}

/// A mapping as the unwinder needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mapping {
    start: u64,
    end: u64,
    pgoff: u64,
    binary: BinaryIndex,
}

/// Return addresses this close after a program's entry point are in its
/// `_start` (or, for the dynamic loader, `_dl_start_user` right after
/// `_start`'s call): the bottom of the main thread's stack, which has no
/// caller to unwind to.
const ENTRY_FUNCTION_BYTES: u64 = 128;

struct ProcessUnwinder {
    mappings: Vec<Mapping>,
    /// Built on first use; dropped when the mappings change.
    unwinder: Option<UnwinderX86_64<SectionBytes>>,
    /// Entry points (`_start`) of the mapped binaries, as absolute
    /// addresses; filled when the unwinder is built.
    entries: Vec<u64>,
    /// The jitdump file the process mapped, read as it grows.
    jitdump: Option<(BinaryIndex, JitdumpTail, std::time::Instant)>,
    /// JIT code with unwind tables, from the jitdump: (start, end, module).
    jit_modules: Vec<(u64, u64, Module<SectionBytes>)>,
    /// Monotonic ns of its exit, for pruning.
    exited_ns: Option<u64>,
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
    let hdr = (!code.eh_frame_hdr.is_empty()).then(|| (eh_end..eh_end + code.eh_frame_hdr.len() as u64, SectionBytes(Arc::new(code.eh_frame_hdr.clone()))));
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
    Module::new(format!("JIT code at {start:#x}"), start..start + code.size, start, info)
}

/// jitdump files are mapped executable so profilers find them; they are no ELF.
pub fn is_jitdump(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with("jit-") && name.ends_with(".dump")
}

impl ProcessUnwinder {
    fn new(mappings: Vec<Mapping>) -> ProcessUnwinder {
        ProcessUnwinder { mappings, unwinder: None, entries: Vec::new(), jitdump: None, jit_modules: Vec::new(), exited_ns: None }
    }

    /// Read new code from the jitdump, at most every JITDUMP_POLL.
    fn poll_jitdump(&mut self, binaries: &Binaries) {
        let Some((binary, tail, last)) = self.jitdump.as_mut() else { return };
        if last.elapsed() < JITDUMP_POLL && !self.jit_modules.is_empty() {
            return;
        }
        *last = std::time::Instant::now();
        let Some(file) = binaries.get(*binary).file.as_ref() else { return };
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
    fn is_code(&self, addr: u64) -> bool {
        self.mappings.iter().any(|m| m.start <= addr && addr < m.end)
    }

    /// Whether `addr` is in an entry function: a stack that reached it is whole.
    fn is_entry(&self, addr: u64) -> bool {
        self.entries.iter().any(|&e| addr > e && addr - e <= ENTRY_FUNCTION_BYTES)
    }
}

pub use crate::bpf::abi::Regs;
pub use crate::model::stack_end::StackEnd;
pub use crate::model::recording::UnwindStats;


/// Per-process unwinders over shared per-binary unwind data.
#[derive(Default)]
pub struct Unwinders {
    binaries: FxHashMap<BinaryIndex, Option<Arc<BinaryUnwindInfo>>>,
    processes: FxHashMap<u32, ProcessUnwinder>,
    /// Exits in order: (when, pid), to forget processes once their last samples are in.
    exited: std::collections::VecDeque<(u64, u32)>,
    cache: Option<Box<CacheX86_64>>,
    /// Totals since the last [`Unwinders::take_stats`].
    stats: UnwindStats,
    /// Binaries whose unwind data could not be read, with why.
    failures: Vec<String>,
    /// The in-kernel unwinder's tables and process entries, when it runs.
    kernel: Option<kernel::KernelTables>,
    /// Per binary, where its code lies in the file (for the kernel's
    /// entries): None where it has no unwind data.
    layouts: FxHashMap<BinaryIndex, Option<Arc<Layout>>>,
    /// Bytes of CFI held from files root does not own.
    held_user_cfi: usize,
}

/// What the kernel's process entries need of a binary.
struct Layout {
    /// Executable PT_LOAD segments: (p_vaddr, p_offset, p_filesz).
    segments: Vec<(u64, u64, u64)>,
    /// The ELF entry point.
    entry: u64,
}

impl Layout {
    /// Read from the binary's headers (no section is read).
    fn read(binaries: &Binaries, index: BinaryIndex) -> Result<Layout, String> {
        let bin = binaries.get(index);
        let file = bin.file.as_ref().ok_or_else(|| bin.open_error.clone().unwrap_or_else(|| "not a file".into()))?;
        let elf = ElfReader::new(file, ElfLimits::default());
        Ok(Layout { segments: code_segments(&elf)?, entry: elf.entry()? })
    }
}

/// The unwind data of `binary`, read on first use and cached (None: it
/// has none, or reading it failed, which is noted once in `failures`). CFI
/// of files root does not own is kept while `held_user` (the bytes held
/// from such files) stays within `limit` ([`MAX_HELD_USER_CFI_BYTES`]),
/// else dropped.
fn binary_info(
    cache: &mut FxHashMap<BinaryIndex, Option<Arc<BinaryUnwindInfo>>>,
    failures: &mut Vec<String>,
    (held_user, limit): (&mut usize, usize),
    binaries: &Binaries,
    binary: BinaryIndex,
) -> Option<Arc<BinaryUnwindInfo>> {
    use std::os::unix::fs::MetadataExt;
    cache
        .entry(binary)
        .or_insert_with(|| match BinaryUnwindInfo::read(binaries, binary) {
            Ok(mut i) => {
                let bin = binaries.get(binary);
                let users = bin.file.as_ref().is_none_or(|f| f.metadata().map_or(true, |m| m.uid() != 0));
                let bytes = i.cfi_bytes();
                if users && bytes > 0 {
                    if *held_user + bytes <= limit {
                        *held_user += bytes;
                        i.held_user_bytes = bytes;
                    } else {
                        (i.eh_frame, i.eh_frame_hdr, i.debug_frame) = (None, None, None);
                        failures.push(format!(
                            "{}: its {} KiB of CFI not kept (files root does not own may hold {} MiB in all)",
                            bin.path,
                            bytes >> 10,
                            limit >> 20
                        ));
                    }
                }
                Some(Arc::new(i))
            }
            Err(e) => {
                // Anonymous memory (JIT code) has no file: it is walked by
                // frame pointer, which is not a failure.
                let path = &binaries.get(binary).path;
                if path.starts_with('/') && !path.starts_with("//") {
                    failures.push(format!("{path}: {e}"));
                }
                None
            }
        })
        .clone()
}

/// Exited processes are kept this long: their last samples may still be queued.
const KEEP_EXITED_NS: u64 = 2_000_000_000;

impl Unwinders {
    /// No processes yet.
    pub fn new() -> Unwinders {
        Unwinders { cache: Some(Box::new(CacheX86_64::new())), ..Default::default() }
    }

    fn process(&mut self, pid: u32) -> &mut ProcessUnwinder {
        self.processes.entry(pid).or_insert_with(|| ProcessUnwinder::new(Vec::new()))
    }

    /// An executable mapping appeared in `pid`.
    pub fn add_mapping(&mut self, pid: u32, start: u64, len: u64, pgoff: u64, binary: BinaryIndex) {
        let end = start.saturating_add(len);
        let p = self.process(pid);
        p.mappings.retain(|m| m.end <= start || m.start >= end);
        p.mappings.push(Mapping { start, end, pgoff, binary });
        p.unwinder = None;
        if let Some(k) = self.kernel.as_mut() {
            k.dirty.insert(pid);
        }
    }

    /// `pid` mapped a jitdump file: its JIT code's unwind tables come from it.
    pub fn add_jitdump(&mut self, pid: u32, binary: BinaryIndex) {
        self.process(pid).jitdump = Some((binary, JitdumpTail::default(), std::time::Instant::now()));
    }

    /// Add the binaries the unwinders hold to `live`.
    pub fn live_binaries(&self, live: &mut rustc_hash::FxHashSet<BinaryIndex>) {
        for p in self.processes.values() {
            live.extend(p.mappings.iter().map(|m| m.binary));
            if let Some((b, _, _)) = &p.jitdump {
                live.insert(*b);
            }
        }
    }

    /// Forget the unwind data of released binaries (their indices will be reused).
    pub fn forget_binaries(&mut self, released: &[BinaryIndex]) {
        for b in released {
            if let Some(Some(info)) = self.binaries.remove(b) {
                self.held_user_cfi -= info.held_user_bytes;
            }
            self.layouts.remove(b);
            if let Some(k) = self.kernel.as_mut() {
                k.forget(*b);
            }
        }
    }

    /// Forget processes that are gone without their exit having been seen.
    pub fn retain_processes(&mut self, keep: impl Fn(u32) -> bool) {
        let kernel = &mut self.kernel;
        self.processes.retain(|&pid, _| {
            let kept = keep(pid);
            if !kept {
                if let Some(k) = kernel.as_mut() {
                    k.remove_process(pid);
                }
            }
            kept
        });
    }

    /// `pid` exec'd: its old mappings are gone.
    pub fn exec(&mut self, pid: u32) {
        let p = self.process(pid);
        p.mappings.clear();
        p.unwinder = None;
        p.jitdump = None;
        p.jit_modules.clear();
        p.exited_ns = None;
        if let Some(k) = self.kernel.as_mut() {
            // The kernel dropped its entry at the exec, and its uid may have
            // changed with it (a launcher that dropped root, a setuid
            // program): its place is given back and asked for again, by its
            // uid now, when its new mappings are written.
            k.remove_process(pid);
            k.dirty.insert(pid);
        }
    }

    /// `child` was forked from `parent`: it starts with the same mappings.
    pub fn fork(&mut self, parent: u32, child: u32) {
        let mappings = self.processes.get(&parent).map(|p| p.mappings.clone()).unwrap_or_default();
        self.processes.insert(child, ProcessUnwinder::new(mappings));
        if let Some(k) = self.kernel.as_mut() {
            k.dirty.insert(child);
        }
    }

    /// `pid` exited at `now_ns`; forget processes that exited long ago
    /// (oldest first, from a queue: a fork storm's exits must not each scan
    /// every process).
    pub fn exit(&mut self, pid: u32, now_ns: u64) {
        if let Some(p) = self.processes.get_mut(&pid) {
            p.exited_ns = Some(now_ns);
            self.exited.push_back((now_ns, pid));
        }
        if let Some(k) = self.kernel.as_mut() {
            k.remove_process(pid);
            k.dirty.remove(&pid);
        }
        while let Some(&(t, old)) = self.exited.front() {
            if now_ns.saturating_sub(t) < KEEP_EXITED_NS {
                break;
            }
            self.exited.pop_front();
            // Unless the pid was reused since (a new process under it has not exited).
            if self.processes.get(&old).is_some_and(|p| p.exited_ns == Some(t)) {
                self.processes.remove(&old);
            }
        }
    }

    /// Start feeding the in-kernel unwinder: every process known gets its entry.
    pub fn enable_kernel(&mut self, maps: kernel::KernelUnwindMaps) {
        let mut k = kernel::KernelTables::new(maps);
        k.dirty.extend(self.processes.iter().filter(|(_, p)| p.exited_ns.is_none()).map(|(&pid, _)| pid));
        self.kernel = Some(k);
    }

    /// Bring the in-kernel unwinder's maps up to date: take the tables
    /// compiled since, ask for those of new binaries, rewrite the entries
    /// of processes whose mappings or tables changed. Called after each
    /// drain of the sideband, so a process's entry follows its mmaps within
    /// one drain.
    pub fn sync_kernel(&mut self, binaries: &Binaries) {
        self.sync_kernel_until(binaries, None);
    }

    /// [`Unwinders::sync_kernel`], and wait until `deadline` for the tables
    /// it asked for: at the start, so the processes already running walk in
    /// the kernel from the first sample instead of handing over.
    pub fn sync_kernel_waiting(&mut self, binaries: &Binaries, deadline: std::time::Instant) {
        self.sync_kernel_until(binaries, None);
        self.sync_kernel_until(binaries, Some(deadline));
    }

    fn sync_kernel_until(&mut self, binaries: &Binaries, deadline: Option<std::time::Instant>) {
        let Some(mut k) = self.kernel.take() else { return };
        let ready = match deadline {
            Some(d) => k.wait_pending(d),
            None => k.receive(),
        };
        if !ready.is_empty() {
            let ready: rustc_hash::FxHashSet<BinaryIndex> = ready.into_iter().collect();
            for (&pid, p) in &self.processes {
                if p.exited_ns.is_none() && p.mappings.iter().any(|m| ready.contains(&m.binary)) {
                    k.dirty.insert(pid);
                }
            }
        }
        let dirty: Vec<u32> = k.dirty.drain().collect();
        let mut entry = Vec::new();
        for pid in dirty {
            let Some(p) = self.processes.get(&pid).filter(|p| p.exited_ns.is_none()) else {
                k.remove_process(pid);
                continue;
            };
            entry.clear();
            let mut entries = Vec::new();
            let mappings = p.mappings.clone();
            // JIT code with a jitdump: its tables are in the jitdump, which
            // only userspace reads; the kernel hands those stacks over.
            let jit_tables = p.jitdump.is_some();
            for m in &mappings {
                if is_jitdump(&binaries.get(m.binary).path) {
                    continue;
                }
                // The binary's layout, read once from its headers; its
                // unwind sections are read by the table compiler and not
                // kept (framehop reads them again should a hand-over need
                // them): every binary of every process would otherwise stay
                // copied in our memory.
                let layout = match self.layouts.get(&m.binary) {
                    Some(l) => l.clone(),
                    None => {
                        let l = Layout::read(binaries, m.binary).ok().map(Arc::new);
                        let bin = binaries.get(m.binary);
                        let file = l.as_ref().and(bin.file.as_ref());
                        k.want(m.binary, &bin.path, kernel::table_owner(bin), file);
                        self.layouts.insert(m.binary, l.clone());
                        l
                    }
                };
                // Where the file's address 0 lands; unknown (anonymous
                // memory): no table, frame pointers only.
                let bias = layout.as_ref().and_then(|l| {
                    let base = base_avma(&l.segments, m.start, m.pgoff)?;
                    entries.push(base.wrapping_add(l.entry));
                    Some(base)
                });
                // No bias (no segment the mapping begins): no table either,
                // or its rows would be looked up at the wrong addresses.
                entry.push((m.start, m.end, bias.unwrap_or(0), m.binary, jit_tables && layout.is_none(), bias.is_some()));
            }
            entries.sort_unstable();
            entries.dedup();
            if let Some(p) = self.processes.get_mut(&pid) {
                p.entries = entries;
            }
            k.write_process(pid, &mut entry);
        }
        self.kernel = Some(k);
    }

    /// Whether `addr` lies in an executable mapping of `pid`.
    pub fn is_code(&self, pid: u32, addr: u64) -> bool {
        self.processes.get(&pid).is_some_and(|p| p.is_code(addr))
    }

    /// Whether `addr` is in an entry function of `pid`'s binaries (known
    /// once its entry was written for the kernel, or its stacks unwound
    /// here): a stack that ends there is whole.
    pub fn is_entry(&self, pid: u32, addr: u64) -> bool {
        self.processes.get(&pid).is_some_and(|p| p.is_entry(addr))
    }

    /// Unwind one sample of `pid` from `regs` over `stack`
    /// (bytes from sp up). Appends return addresses, leaf (ip) first, to `out`.
    pub fn unwind(&mut self, binaries: &Binaries, pid: u32, regs: Regs, stack: &[u8], out: &mut Vec<u64>, max: usize) -> StackEnd {
        let started = std::time::Instant::now();
        let end = self.unwind_inner(binaries, pid, regs, stack, out, max);
        self.stats.unwind_ns += started.elapsed().as_nanos() as u64;
        self.stats.unwinds += 1;
        match end {
            StackEnd::Root => self.stats.reached_root += 1,
            StackEnd::CopyExhausted => {
                self.stats.copy_exhausted += 1;
                if pid == std::process::id() {
                    self.stats.copy_exhausted_in_profiler += 1;
                }
            }
            StackEnd::BadReturnAddress => self.stats.bad_return_address += 1,
            _ => self.stats.no_unwind_info += 1,
        }
        end
    }

    /// A stack the kernel walked for `pid`, ended by `UNWIND_END_*` `end`
    /// (hand-overs included), counted with the kernel's tables.
    pub fn kernel_walked(&mut self, pid: u32, end: u32) {
        if let Some(k) = self.kernel.as_mut() {
            k.stats.ends[(end as usize).min(crate::bpf::abi::UNWIND_ENDS - 1)] += 1;
            k.sampled(pid);
        }
    }

    /// A stack the kernel walked to its end without handing over, counted
    /// as this unwinder counts its own: a cut at the most frames as an
    /// exhausted copy, every other cut as missing unwind information.
    pub fn count_kernel_end(&mut self, end: StackEnd) {
        let st = &mut self.stats;
        st.unwinds += 1;
        match end {
            StackEnd::Root => st.reached_root += 1,
            StackEnd::BadReturnAddress => st.bad_return_address += 1,
            StackEnd::MaxDepth => st.copy_exhausted += 1,
            _ => st.no_unwind_info += 1,
        }
    }

    /// A stack the kernel could not read, replaced by the one its thread had
    /// at a switch-out in the same system call: counted as whole after all.
    pub fn recovered_from_switch(&mut self) {
        self.stats.no_unwind_info = self.stats.no_unwind_info.saturating_sub(1);
        self.stats.reached_root += 1;
        if let Some(k) = self.kernel.as_mut() {
            k.stats.recovered_from_switch += 1;
        }
    }

    /// The totals since the last call, starting again from zero.
    pub fn take_stats(&mut self) -> UnwindStats {
        std::mem::take(&mut self.stats)
    }

    /// What went wrong since the last call, one line each: unwind data that
    /// could not be read, tables not built, processes refused an entry.
    pub fn take_warnings(&mut self) -> Vec<String> {
        let mut warnings: Vec<String> =
            self.failures.drain(..).map(|f| format!("cannot read unwind information of {f}; its frames are walked by frame pointer")).collect();
        if let Some(k) = self.kernel.as_mut() {
            warnings.extend(k.failures.drain(..).map(|f| format!("no in-kernel unwind table for {f}")));
            warnings.extend(k.take_refusal_warnings());
        }
        warnings
    }

    /// What the in-kernel unwinder refused, per uid, all time (empty when it does not run).
    pub fn kernel_refusals(&self) -> Vec<(u32, kernel::UidRefusals)> {
        self.kernel.as_ref().map(|k| k.refusals()).unwrap_or_default()
    }

    /// The in-kernel unwinder's table totals, if it runs.
    pub fn kernel_table_stats(&self) -> Option<kernel::KernelTableStats> {
        self.kernel.as_ref().map(|k| k.stats)
    }

    fn unwind_inner(&mut self, binaries: &Binaries, pid: u32, regs: Regs, stack: &[u8], out: &mut Vec<u64>, max: usize) -> StackEnd {
        let Some(p) = self.processes.get_mut(&pid) else {
            // Unknown process (its mappings not seen): keep the leaf.
            out.push(regs.ip);
            return StackEnd::NoUnwindInfo;
        };
        p.poll_jitdump(binaries);
        if p.unwinder.is_none() {
            let mappings = p.mappings.clone();
            let mut unwinder = UnwinderX86_64::new();
            let mut entries = Vec::new();
            for m in mappings.iter().filter(|m| !is_jitdump(&binaries.get(m.binary).path)) {
                let info = binary_info(&mut self.binaries, &mut self.failures, (&mut self.held_user_cfi, MAX_HELD_USER_CFI_BYTES), binaries, m.binary);
                if let Some(info) = info {
                    if let Some(base) = base_avma(&info.segments, m.start, m.pgoff) {
                        entries.push(base.wrapping_add(info.entry));
                    }
                    if let Some(module) = info.module(&binaries.get(m.binary).path, m.start, m.end, m.pgoff) {
                        unwinder.add_module(module);
                    }
                }
            }
            entries.sort_unstable();
            entries.dedup();
            let p = self.processes.get_mut(&pid).expect("present");
            for (_, _, m) in &p.jit_modules {
                unwinder.add_module(m.clone());
            }
            p.unwinder = Some(unwinder);
            p.entries = entries;
        }
        let p = &self.processes[&pid];
        let unwinder = p.unwinder.as_ref().expect("built");
        let Regs { ip, sp, bp } = regs;
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            let off = addr.checked_sub(sp).ok_or(())? as usize;
            let bytes = stack.get(off..off.checked_add(8).ok_or(())?).ok_or(())?;
            Ok(u64::from_ne_bytes(bytes.try_into().map_err(|_| ())?))
        };
        let cache = self.cache.as_mut().expect("cache");
        let mut frames = unwinder.iter_frames(ip, UnwindRegsX86_64::new(ip, sp, bp), cache, &mut read_stack);
        let stack_end = sp + stack.len() as u64;
        let first = out.len();
        loop {
            if out.len() >= max {
                return StackEnd::CopyExhausted;
            }
            let end = match frames.next() {
                Ok(Some(f)) => {
                    let addr = f.address();
                    // The first frame is the instruction pointer itself; every
                    // later one is a return address and must point into code.
                    if out.len() > first && !p.is_code(addr) {
                        return StackEnd::BadReturnAddress;
                    }
                    out.push(addr);
                    continue;
                }
                Ok(None) => return StackEnd::Root,
                Err(framehop::Error::CouldNotReadStack(addr)) if addr >= stack_end.saturating_sub(8) => StackEnd::CopyExhausted,
                Err(_) => StackEnd::NoUnwindInfo
            };
            // A stack that reached a program's entry function is whole,
            // whatever the unwinder makes of the nothing below it.
            if out.len() > first && p.is_entry(out[out.len() - 1]) {
                return StackEnd::Root;
            }
            return end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::base_avma;

    /// Check the module base for lld's layout, where the code segment's
    /// address and file offset differ by a page more than the segment before
    /// it: the executable mapping must give the base the first, read-only
    /// mapping shows (program headers and /proc/PID/maps of real binaries).
    #[test]
    fn base_follows_the_segment_a_mapping_begins() {
        // The executable segment of our release binary (R 0x0/0x0, R E
        // 0x20f840/0x20e840, RW ...), mapped r-xp at 0x558d90789000 from
        // pgoff 0x20e000, with the first (r--p) mapping at 0x558d9057a000.
        let code = [(0x20f840, 0x20e840, 0x4f04a0)];
        assert_eq!(base_avma(&code, 0x558d_9078_9000, 0x20e000), Some(0x558d_9057_a000));
        // A small lld binary: the code's segment begins inside the first
        // file page (R E at offset 0x8f0, address 0x18f0), so its mapping has
        // pgoff 0 like the read-only one before it.
        assert_eq!(base_avma(&[(0x18f0, 0x8f0, 0x3a0)], 0x5555_0000_1000, 0), Some(0x5555_0000_0000));
        // GNU ld's layout (address = offset in every segment) is unchanged.
        let gnu = [(0x0, 0x0, 0x628), (0x1000, 0x1000, 0x1d5), (0x2000, 0x2000, 0x10c)];
        assert_eq!(base_avma(&gnu, 0x5600_0000_1000, 0x1000), Some(0x5600_0000_0000));
    }
}

#[cfg(test)]
mod held_tests {
    use super::*;
    use crate::sideband::MmapEvent;

    /// Check that the CFI of files root does not own is held within one
    /// budget in all: past it a file's CFI is dropped (and said), a file
    /// released gives its share back, and root's files never count.
    #[test]
    fn files_root_does_not_own_share_one_cfi_budget() {
        let libc = "/lib/x86_64-linux-gnu/libc.so.6";
        let dir = std::env::temp_dir().join(format!("sysprof-held-cfi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let copies: Vec<String> = ["a.so", "b.so"].iter().map(|n| dir.join(n).to_string_lossy().into_owned()).collect();
        for c in &copies {
            if std::fs::copy(libc, c).is_err() {
                eprintln!("SKIPPED: no {libc} to copy");
                return;
            }
            // As root, the copies must be another user's to count.
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } == 0 {
                std::os::unix::fs::chown(c, Some(65534), Some(65534)).unwrap();
            }
        }
        let ev = |path: &str| MmapEvent { time: 0, pid: std::process::id(), start: 0x1000, len: 0x1000, pgoff: 0, path: path.to_string(), build_id: None, inode: None };
        let mut binaries = Binaries::new();
        let (a, b, system) = (binaries.intern(&ev(&copies[0])), binaries.intern(&ev(&copies[1])), binaries.intern(&ev(libc)));
        let mut u = Unwinders::new();
        // A budget that holds one copy's CFI, not two.
        let one = BinaryUnwindInfo::read(&binaries, a).unwrap().cfi_bytes();
        assert!(one > 100_000, "libc has {one} bytes of CFI");
        let limit = one + one / 2;
        let info = |u: &mut Unwinders, binary| binary_info(&mut u.binaries, &mut u.failures, (&mut u.held_user_cfi, limit), &binaries, binary).unwrap();
        assert!(info(&mut u, a).eh_frame.is_some());
        assert_eq!(u.held_user_cfi, one);
        assert!(info(&mut u, b).eh_frame.is_none(), "past the budget, no CFI is kept");
        assert!(u.failures.iter().any(|f| f.contains("b.so") && f.contains("not kept")), "{:?}", u.failures);
        assert!(info(&mut u, system).eh_frame.is_some(), "root's files do not count");
        assert_eq!(u.held_user_cfi, one);
        u.forget_binaries(&[a, b]);
        assert_eq!(u.held_user_cfi, 0, "a released file gives its share back");
        assert!(info(&mut u, b).eh_frame.is_some(), "and the next file has it");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[cfg(test)]
mod jit_tests {
    use super::*;

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
            let code = JitCode { start: a, size: 11, eh_frame: eh_frame.clone(), eh_frame_hdr: if with_hdr { eh_frame_hdr.clone() } else { Vec::new() } };
            let mut unwinder = UnwinderX86_64::new();
            unwinder.add_module(jit_module(&code));
            let mut cache = CacheX86_64::new();
            // At a+6 (just returned from the call): rsp+8 holds the return address into the caller.
            let sp = 0x7ffc_0000_0000u64;
            let caller_ret = 0x5555_0000_1234u64;
            let mut read_stack = |addr: u64| -> Result<u64, ()> { if addr == sp + 8 { Ok(caller_ret) } else { Ok(0) } };
            let mut frames = unwinder.iter_frames(a + 6, UnwindRegsX86_64::new(a + 6, sp, 0), &mut cache, &mut read_stack);
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
