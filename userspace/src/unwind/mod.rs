//! DWARF unwinding of copied user stacks, with framehop.
//!
//! In: per process, its executable mappings (binary, address range, file
//! offset) as the sideband reports them, and per sample the user registers
//! and the top of the user stack copied by the kernel. Out: the user return
//! addresses, leaf first, and how the stack ended ([`StackEnd`]: the
//! thread's root, or why it stopped early), counted in [`UnwindStats`]
//! ([`Unwinders::take_stats`]). Each binary's unwind sections (.eh_frame and
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
//!
//! `binary` reads one binary's unwind data, `process` keeps one
//! process's mappings and unwinder, [`kernel`] feeds the in-kernel unwinder
//! (`kernel_entries` writes each process's entry),
//! [`tables`] compiles its tables; this module holds them together.

mod binary;
pub mod kernel;
mod kernel_entries;
mod process;
pub mod tables;

use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::Unwinder;
use rustc_hash::FxHashMap;

use crate::binaries::jitdump::JitdumpTail;
use crate::binaries::{Binaries, BinaryIndex};
use binary::{base_avma, binary_info, BinaryUnwindInfo, Layout, MAX_HELD_USER_CFI_BYTES};
pub use binary::{SectionBytes, UnwindInfoError};
pub use process::is_jitdump;
use process::{is_in_entry_function, mapping_at, Mapping, ProcessUnwinder};

pub use crate::bpf::abi::Regs;
pub use crate::model::recording::UnwindStats;
pub use crate::model::stack_end::StackEnd;

/// Per-process unwinders over shared per-binary unwind data.
#[derive(Default)]
pub struct Unwinders<R: RuntimeDetection = ()> {
    binaries: FxHashMap<BinaryIndex, Option<Arc<BinaryUnwindInfo>>>,
    processes: FxHashMap<u32, ProcessUnwinder<R::Process>>,
    cache: Option<Box<CacheX86_64>>,
    /// Totals since the last [`Unwinders::take_stats`].
    stats: UnwindStats,
    /// `--stack-size` with `--call-graph dwarf-copy`, the bytes a copy
    /// holds at most (a main thread's stack is copied to its top where
    /// that is less): a copy exhausted at exactly that length is one a
    /// larger copy would take deeper. None otherwise (the kernel's
    /// hand-overs have limits of their own).
    copy_size: Option<usize>,
    /// Binaries whose unwind data could not be read, with why.
    failures: Vec<String>,
    /// The in-kernel unwinder's tables and process entries, when it runs.
    kernel: Option<kernel::KernelTables>,
    /// Per binary, where its code lies in the file (for the kernel's
    /// entries): None where it has no unwind data.
    layouts: FxHashMap<BinaryIndex, Option<Arc<Layout>>>,
    /// Bytes of CFI held from files root does not own.
    held_user_cfi: usize,
    /// The runtimes (interpreters, JITs) the processes run, found as their
    /// kernel entries are written: the runtimes layer's, behind
    /// [`RuntimeDetection`].
    runtimes: R,
}

/// The kernel entry's fields for the runtimes one process runs, as the
/// runtimes layer found them (`crate::runtimes`): the native unwinder
/// writes them without knowing which runtime each comes from.
#[derive(Debug, Default, Clone)]
pub struct RuntimeEntry {
    /// Where its CPython's thread states and frames are
    /// (`python_procs`).
    pub python: Option<crate::bpf::abi::PythonProcess>,
    /// An interpreter's code, whose frames the kernel reads a method of.
    pub interpreter: Option<(u64, u64)>,
    /// Code heaps walked by their blobs' frame sizes, in place of the
    /// anonymous mappings they cover.
    pub code_heaps: Option<crate::bpf::abi::HotSpotCode>,
    /// A JavaScript engine's frame constants.
    pub js: Option<crate::bpf::abi::V8Frames>,
}

/// What the unwinder asks of the runtimes layer as it writes a process's
/// kernel entry: which runtimes the process's binaries are, kept per
/// process (in [`Self::Process`], which lives and goes with the
/// unwinder's own entry for the process: at exec it starts again).
pub trait RuntimeDetection: Default {
    /// What one process runs, as the runtimes layer keeps it.
    type Process: Default;
    /// `pid`'s file-backed mappings with a load bias, in mapping order
    /// (binary, where its address 0 lands): update `process` and say what
    /// its kernel entry carries.
    fn detect(
        &mut self,
        binaries: &Binaries,
        mapped: &[(BinaryIndex, u64)],
        process: &mut Self::Process,
    ) -> RuntimeEntry;
    /// Binaries released (their indices will be reused): forget what was read of them.
    fn forget_binaries(&mut self, released: &[BinaryIndex]);
    /// What could not be read since the last call, one line each.
    fn take_warnings(&mut self, into: &mut Vec<String>);
    /// The kernel entry's runtime fields (`RuntimeEntry::python`) of a
    /// process about to exec `file` (named `name`), where they hold
    /// wherever the file is loaded; None where they depend on that (an
    /// interpreter's addresses) or it runs no runtime. Written before the
    /// exec ([`Unwinders::prime_before_exec`]).
    fn before_exec(
        &mut self,
        _file: &std::fs::File,
        _name: &str,
    ) -> Option<crate::bpf::abi::PythonProcess> {
        None
    }
}

/// No runtime read: native frames only (the unwinder's own tests).
impl RuntimeDetection for () {
    type Process = ();
    fn detect(&mut self, _: &Binaries, _: &[(BinaryIndex, u64)], _: &mut ()) -> RuntimeEntry {
        RuntimeEntry::default()
    }
    fn forget_binaries(&mut self, _: &[BinaryIndex]) {}
    fn take_warnings(&mut self, _: &mut Vec<String>) {}
}

/// A JIT's compiled frames as kernel rows (a JVM's, from its methods'
/// prologues: `crate::runtimes::hotspot::frame_sizes`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct JitFrames {
    /// The address the rows' `pc` is relative to (the lowest method's start).
    pub base: u64,
    /// Rows sorted by pc: each method's three rules, then "no rule" at its end.
    pub rows: Vec<crate::bpf::abi::Row>,
    /// Methods given rows.
    pub methods: usize,
    /// Methods (or other blobs) whose start did not read as a prologue.
    pub without_prologue: usize,
}

impl<R: RuntimeDetection> Unwinders<R> {
    /// No processes yet.
    pub fn new() -> Unwinders<R> {
        Unwinders {
            cache: Some(Box::new(CacheX86_64::new())),
            ..Default::default()
        }
    }

    /// Copies hold at most `bytes` (`--stack-size`; 0: not said).
    pub fn set_copy_size(&mut self, bytes: usize) {
        self.copy_size = (bytes > 0).then_some(bytes);
    }

    fn process(&mut self, pid: u32) -> &mut ProcessUnwinder<R::Process> {
        self.processes
            .entry(pid)
            .or_insert_with(|| ProcessUnwinder::new(Vec::new()))
    }

    /// An executable mapping appeared in `pid` at `mapped_ns` (monotonic,
    /// the sideband's; 0: it was there before the recording).
    pub fn add_mapping(
        &mut self,
        pid: u32,
        mapped_ns: u64,
        (start, len, pgoff): (u64, u64, u64),
        binary: BinaryIndex,
    ) {
        let end = start.saturating_add(len);
        let p = self.process(pid);
        p.mappings.retain(|m| m.end <= start || m.start >= end);
        p.mappings.push(Mapping {
            start,
            end,
            pgoff,
            binary,
            mapped_ns,
        });
        p.unwinder = None;
        if let Some(k) = self.kernel.as_mut() {
            k.mapped(pid);
            k.dirty.insert(pid);
        }
    }

    /// `pid` mapped a jitdump file: its JIT code's unwind tables come from it.
    pub fn add_jitdump(&mut self, pid: u32, binary: BinaryIndex) {
        self.process(pid).jitdump =
            Some((binary, JitdumpTail::default(), std::time::Instant::now()));
    }

    /// The compiled Java methods of JVM `pid` (from its perf map, with the
    /// frame sizes their prologues set up): the kernel walks its compiled
    /// frames from these rows instead of stopping at the first.
    pub fn set_jit_frames(&mut self, pid: u32, frames: JitFrames) {
        let Some(p) = self
            .processes
            .get_mut(&pid)
            .filter(|p| p.exited_ns.is_none())
        else {
            return;
        };
        p.jit_base = (!frames.rows.is_empty()).then_some(frames.base);
        if let Some(k) = self.kernel.as_mut() {
            k.stats.jit_methods = frames.methods as u64;
            let uid = k.uid_of(pid);
            k.put_jit_table(pid, uid, frames.rows);
            k.dirty.insert(pid);
        }
    }

    /// Add the binaries the unwinders hold to `live`.
    pub fn live_binaries(&self, live: &mut rustc_hash::FxHashSet<BinaryIndex>) {
        for p in self.processes.values() {
            live.extend(p.mappings.iter().map(|m| m.binary));
            live.extend(p.before_exec.iter().map(|m| m.binary));
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
        // Called each window: the rows' pages the walks of handed-over
        // stacks touched leave the resident set, and the images processes
        // exec'd from are gone (their binaries were kept live until now).
        if let Some(k) = self.kernel.as_mut() {
            k.unmap_row_reads();
        }
        for p in self.processes.values_mut() {
            p.before_exec = Vec::new();
        }
        self.runtimes.forget_binaries(released);
    }

    /// Forget processes that are gone without their exit having been seen.
    pub fn retain_processes(&mut self, mut keep: impl FnMut(u32) -> bool) {
        let kernel = &mut self.kernel;
        self.processes.retain(|&pid, _| {
            let kept = keep(pid);
            if !kept {
                if let Some(k) = kernel.as_mut() {
                    k.remove_process(pid);
                    k.exec_seen.remove(&pid);
                }
            }
            kept
        });
    }

    /// `pid` exec'd at `time_ns` (monotonic, the sideband's): its mappings
    /// from before then are gone. Returns the mappings that stay: those
    /// made after it, where its record came late (as (time, (start,
    /// length, file offset), binary)), for the other followers to be told
    /// of again.
    ///
    /// A process that moves CPU while it starts can exec on one and map on
    /// another, and a read of the per-CPU rings that falls between the two
    /// takes the mappings with one read and the exec with the next; a
    /// hand-over sorts its reads' records, but two hand-overs can split them.
    pub fn exec(&mut self, pid: u32, time_ns: u64) -> Vec<(u64, (u64, u64, u64), BinaryIndex)> {
        let p = self.process(pid);
        // A record without a time (0) is no later than anything.
        let (before, after): (Vec<Mapping>, Vec<Mapping>) = std::mem::take(&mut p.mappings)
            .into_iter()
            .partition(|m| time_ns == 0 || m.mapped_ns < time_ns);
        let kept = after
            .iter()
            .map(|m| (m.mapped_ns, (m.start, m.end - m.start, m.pgoff), m.binary))
            .collect();
        p.before_exec = before;
        p.mappings = after;
        p.unwinder = None;
        p.jitdump = None;
        p.jit_modules.clear();
        p.runtime = R::Process::default();
        p.jit_base = None;
        p.exited_ns = None;
        p.exec_ns = time_ns;
        if let Some(k) = self.kernel.as_mut() {
            // The kernel dropped its entry at the exec, and its uid may have
            // changed with it (a launcher that dropped root, a setuid
            // program): its place is given back and asked for again, by its
            // uid now, when its new mappings are written. A late exec's
            // entry, written from the mappings kept, is rewritten at the
            // same hand-over (its sideband is applied, then the entries
            // written), charged anew.
            k.remove_at_exec(pid);
            k.dirty.insert(pid);
            // Without a time, any exec record of the pid's would do.
            if time_ns != 0 {
                k.exec_seen.insert(pid, time_ns);
            }
        }
        kept
    }

    /// Whether the in-kernel unwinder's maps are fed.
    pub fn kernel_enabled(&self) -> bool {
        self.kernel.is_some()
    }

    /// The runtime fields a process about to exec `file` will have, where
    /// they can be known before it is mapped ([`RuntimeDetection::before_exec`]).
    pub fn runtime_before_exec(
        &mut self,
        file: &std::fs::File,
        name: &str,
    ) -> Option<crate::bpf::abi::PythonProcess> {
        self.runtimes.before_exec(file, name)
    }

    /// Write them for `pid`, held between its fork and its exec: its first
    /// instructions read their runtime's chain. Kept until the sideband
    /// shows the exec and the entry from its mappings replaces them. False
    /// if the kernel's maps refused it, or none are fed.
    pub fn prime_before_exec(&mut self, pid: u32, python: crate::bpf::abi::PythonProcess) -> bool {
        self.kernel
            .as_mut()
            .is_some_and(|k| k.prime_python(pid, python))
    }

    /// `child` was forked from `parent`: it starts with the same mappings.
    ///
    /// A fork whose record is read after its child's exec (another CPU's
    /// ring, an earlier read: see [`Unwinders::exec`]) leaves the child as
    /// its exec made it; one read after mappings the child made itself
    /// (a `dlopen`) keeps those over its parent's.
    pub fn fork(&mut self, parent: u32, child: u32, time_ns: u64) {
        let own: Vec<Mapping> = match self.processes.get(&child) {
            Some(p) if time_ns != 0 && p.exited_ns.is_none() => {
                if p.exec_ns >= time_ns {
                    return;
                }
                p.mappings
                    .iter()
                    .filter(|m| m.mapped_ns >= time_ns)
                    .copied()
                    .collect()
            }
            _ => Vec::new(),
        };
        let mut mappings: Vec<Mapping> = self
            .processes
            .get(&parent)
            .map(|p| p.mappings.clone())
            .unwrap_or_default();
        mappings.retain(|m| !own.iter().any(|o| m.end > o.start && m.start < o.end));
        mappings.extend(own);
        self.processes.insert(child, ProcessUnwinder::new(mappings));
        if let Some(k) = self.kernel.as_mut() {
            k.dirty.insert(child);
            k.exec_seen.remove(&child);
        }
    }

    /// `pid` exited at `now_ns`: its kernel entry goes now; what is kept
    /// here still unwinds its queued samples until [`Unwinders::forget`].
    pub fn exit(&mut self, pid: u32, now_ns: u64) {
        if let Some(p) = self.processes.get_mut(&pid) {
            p.exited_ns = Some(now_ns);
        }
        if let Some(k) = self.kernel.as_mut() {
            k.remove_process(pid);
            k.dirty.remove(&pid);
            k.exec_seen.remove(&pid);
        }
    }

    /// `pid`, which exited, goes once its last samples are in (the caller
    /// keeps the clock); unless the pid was reused since (a new process
    /// under it has not exited).
    pub fn forget(&mut self, pid: u32) {
        if self
            .processes
            .get(&pid)
            .is_some_and(|p| p.exited_ns.is_some())
        {
            self.processes.remove(&pid);
        }
    }

    /// What reads the processes' runtimes.
    pub fn runtimes(&self) -> &R {
        &self.runtimes
    }

    /// The runtimes `pid` runs, as found when its entry was last written.
    pub fn runtime(&self, pid: u32) -> Option<&R::Process> {
        Some(&self.processes.get(&pid)?.runtime)
    }

    /// The runtimes `pid` runs, to change: its entry is written again at
    /// the next sync ([`Unwinders::sync_kernel`]) with what they say then.
    pub fn runtime_mut(&mut self, pid: u32) -> Option<&mut R::Process> {
        let p = self.processes.get_mut(&pid)?;
        if let Some(k) = self.kernel.as_mut() {
            k.dirty.insert(pid);
        }
        Some(&mut p.runtime)
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
    pub fn unwind(
        &mut self,
        binaries: &Binaries,
        pid: u32,
        regs: Regs,
        stack: &[u8],
        out: &mut Vec<u64>,
        max: usize,
    ) -> StackEnd {
        let started = std::time::Instant::now();
        let end = self.unwind_inner(binaries, pid, regs, stack, out, max);
        self.stats.unwind_ns += started.elapsed().as_nanos() as u64;
        self.stats.unwinds += 1;
        self.stats.unwinds_here += 1;
        self.stats.copied_bytes += stack.len() as u64;
        match end {
            StackEnd::Root => self.stats.reached_root += 1,
            StackEnd::CopyExhausted => {
                self.stats.copy_exhausted += 1;
                if pid == std::process::id() {
                    self.stats.copy_exhausted_in_profiler += 1;
                } else if self.copy_size.is_some_and(|size| stack.len() == size) {
                    self.stats.copy_exhausted_at_size += 1;
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
        let mut warnings: Vec<String> = self
            .failures
            .drain(..)
            .map(|f| {
                format!(
                    "cannot read unwind information of {f}; its frames are walked by frame pointer"
                )
            })
            .collect();
        self.runtimes.take_warnings(&mut warnings);
        if let Some(k) = self.kernel.as_mut() {
            warnings.extend(
                k.failures
                    .drain(..)
                    .map(|f| format!("no in-kernel unwind table for {f}")),
            );
            warnings.extend(k.take_refusal_warnings());
        }
        warnings
    }

    /// What the in-kernel unwinder refused, per uid, all time (empty when it does not run).
    pub fn kernel_refusals(&self) -> Vec<(u32, kernel::UidRefusals)> {
        self.kernel
            .as_ref()
            .map(|k| k.refusals())
            .unwrap_or_default()
    }

    /// The in-kernel unwinder's table totals, if it runs.
    pub fn kernel_table_stats(&self) -> Option<kernel::KernelTableStats> {
        self.kernel.as_ref().map(|k| k.stats)
    }

    fn unwind_inner(
        &mut self,
        binaries: &Binaries,
        pid: u32,
        regs: Regs,
        stack: &[u8],
        out: &mut Vec<u64>,
        max: usize,
    ) -> StackEnd {
        let Some(p) = self.processes.get_mut(&pid) else {
            // Unknown process (its mappings not seen): keep the leaf.
            out.push(regs.ip);
            return StackEnd::NoUnwindInfo;
        };
        p.poll_jitdump(binaries);
        // The rows the kernel walks first, where every frame has them.
        let first = out.len();
        if let Some(k) = self.kernel.as_mut() {
            let (p, layouts) = (&self.processes[&pid], &self.layouts);
            // A leaf in no mapping of the process's image but in one of the
            // image it exec'd from: a stack from before the exec, walked in
            // that image (framehop knows only the new one).
            let before_exec = mapping_at(&p.mappings, regs.ip).is_none()
                && mapping_at(&p.before_exec, regs.ip).is_some();
            let image = if before_exec {
                &p.before_exec
            } else {
                &p.mappings
            };
            let mapped_at = |addr: u64| {
                let m = mapping_at(image, addr)?;
                let layout = layouts.get(&m.binary)?.as_ref()?;
                Some((base_avma(&layout.segments, m.start, m.pgoff)?, layout, m))
            };
            let mapping_of = |addr| mapped_at(addr).map(|(bias, _, m)| (bias, m.binary));
            let is_entry = |addr: u64| {
                mapped_at(addr).is_some_and(|(bias, layout, _)| {
                    is_in_entry_function(addr, bias.wrapping_add(layout.entry))
                })
            };
            match k.walk_rows(regs, stack, mapping_of, is_entry, out, max) {
                Some(end) => {
                    k.stats.handed_over_walked_by_rows += 1;
                    return end;
                }
                None if before_exec => {
                    // Not walked: its leaf alone is kept, and not counted
                    // as a walk over the rows.
                    out.truncate(first);
                    out.push(regs.ip);
                    return StackEnd::NoUnwindInfo;
                }
                None => out.truncate(first),
            }
        }
        let p = self.processes.get_mut(&pid).expect("present");
        if p.unwinder.is_none() {
            let mappings = p.mappings.clone();
            let mut unwinder = UnwinderX86_64::new();
            let mut entries = Vec::new();
            for m in mappings
                .iter()
                .filter(|m| !is_jitdump(&binaries.get(m.binary).path))
            {
                let info = binary_info(
                    &mut self.binaries,
                    &mut self.failures,
                    (&mut self.held_user_cfi, MAX_HELD_USER_CFI_BYTES),
                    binaries,
                    m.binary,
                );
                if let Some(info) = info {
                    if let Some(base) = base_avma(&info.segments, m.start, m.pgoff) {
                        entries.push(base.wrapping_add(info.entry));
                    }
                    if let Some(module) =
                        info.module(&binaries.get(m.binary).path, m.start, m.end, m.pgoff)
                    {
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
        let mut frames = unwinder.iter_frames(
            ip,
            UnwindRegsX86_64::new(ip, sp, bp),
            cache,
            &mut read_stack,
        );
        let stack_end = sp + stack.len() as u64;
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
                Err(framehop::Error::CouldNotReadStack(addr))
                    if addr >= stack_end.saturating_sub(8) =>
                {
                    StackEnd::CopyExhausted
                }
                Err(_) => StackEnd::NoUnwindInfo,
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
mod exec_tests {
    use super::*;

    fn binaries_of(mappings: &[Mapping]) -> Vec<BinaryIndex> {
        mappings.iter().map(|m| m.binary).collect()
    }

    #[test]
    fn an_exec_takes_the_mappings_made_before_it() {
        let mut u = Unwinders::<()>::new();
        u.add_mapping(10, 0, (0x1000, 0x1000, 0), 1);
        u.add_mapping(10, 50, (0x3000, 0x1000, 0), 2);
        u.exec(10, 100);
        u.add_mapping(10, 150, (0x5000, 0x1000, 0), 3);
        let p = &u.processes[&10];
        assert_eq!(binaries_of(&p.mappings), [3]);
        assert_eq!(binaries_of(&p.before_exec), [1, 2]);
    }

    #[test]
    fn a_late_exec_keeps_the_mappings_made_after_it() {
        // The new image's mappings were read, from another CPU's ring,
        // before the exec's record.
        let mut u = Unwinders::<()>::new();
        u.add_mapping(10, 0, (0x1000, 0x1000, 0), 1);
        u.add_mapping(10, 150, (0x5000, 0x1000, 0), 3);
        u.add_mapping(10, 160, (0x7000, 0x1000, 0), 4);
        u.exec(10, 100);
        let p = &u.processes[&10];
        assert_eq!(binaries_of(&p.mappings), [3, 4]);
        assert_eq!(binaries_of(&p.before_exec), [1]);
    }

    #[test]
    fn a_late_fork_leaves_its_child_as_its_exec_made_it() {
        let mut u = Unwinders::<()>::new();
        u.add_mapping(1, 0, (0x1000, 0x1000, 0), 1);
        // The child's exec (t=120) and mapping (t=150) were read first.
        u.exec(10, 120);
        u.add_mapping(10, 150, (0x5000, 0x1000, 0), 3);
        u.fork(1, 10, 100);
        assert_eq!(binaries_of(&u.processes[&10].mappings), [3]);
        // A fork in order (a reused pid, its old process's mappings older).
        u.fork(1, 10, 200);
        assert_eq!(binaries_of(&u.processes[&10].mappings), [1]);
    }

    #[test]
    fn a_late_fork_of_a_child_that_mapped_but_never_execd_merges() {
        let mut u = Unwinders::<()>::new();
        u.add_mapping(1, 0, (0x1000, 0x1000, 0), 1);
        u.add_mapping(1, 0, (0x3000, 0x1000, 0), 2);
        // The child's dlopen (t=150, over the parent's second mapping's
        // range) was read before its fork (t=100).
        u.add_mapping(10, 150, (0x3000, 0x2000, 0), 5);
        u.fork(1, 10, 100);
        assert_eq!(binaries_of(&u.processes[&10].mappings), [1, 5]);
    }

    #[test]
    fn a_late_fork_of_a_child_that_execd_but_mapped_nothing_yet_leaves_it() {
        let mut u = Unwinders::<()>::new();
        u.add_mapping(1, 0, (0x1000, 0x1000, 0), 1);
        u.exec(10, 120);
        u.fork(1, 10, 100);
        u.add_mapping(10, 150, (0x5000, 0x1000, 0), 3);
        assert_eq!(binaries_of(&u.processes[&10].mappings), [3]);
    }
}
