//! Each process's entry in the in-kernel unwinder: its mappings with their
//! biases and tables, its runtimes' fields, rewritten when they change.
//!
//! In: the processes' mappings (kept by [`super::Unwinders`]), the tables
//! compiled since the last sync, the runtimes found by the
//! [`RuntimeDetection`] given. Out: the kernel's process entries written
//! (or removed), the tables of newly seen binaries asked for.

use std::sync::Arc;

use rustc_hash::FxHashSet;

use super::*;

impl<R: RuntimeDetection> Unwinders<R> {
    /// Start feeding the in-kernel unwinder: every process known gets its entry.
    /// `workers` threads compile the large tables.
    pub fn enable_kernel(&mut self, maps: kernel::KernelUnwindMaps, workers: usize) {
        let mut k = kernel::KernelTables::new(maps, workers);
        k.dirty.extend(
            self.processes
                .iter()
                .filter(|(_, p)| p.exited_ns.is_none())
                .map(|(&pid, _)| pid),
        );
        self.kernel = Some(k);
    }

    /// Bring the in-kernel unwinder's maps up to date: take the tables
    /// compiled since, ask for those of new binaries, rewrite the entries
    /// of processes whose mappings or tables changed. Called after each
    /// drain of the sideband, so a process's entry follows its mmaps within
    /// one drain.
    pub fn sync_kernel(&mut self, binaries: &Binaries) {
        let Some(mut k) = self.kernel.take() else {
            return;
        };
        let ready = k.receive();
        self.write_entries(k, binaries, ready);
    }

    /// [`Unwinders::sync_kernel`], and wait until `deadline` for the tables
    /// it asked for: at the start, so the processes already running walk in
    /// the kernel from the first sample instead of handing over. Each
    /// process's entry is written as soon as the last of its tables is in,
    /// not once every process's are: until then its stacks are copies, sent
    /// at each new place (beside an I/O storm, thousands in the tenths of a
    /// second between the tracer's attach and the last table; ARCHITECTURE
    /// decision 91).
    pub fn sync_kernel_waiting(&mut self, binaries: &Binaries, deadline: std::time::Instant) {
        self.sync_kernel(binaries);
        let Some(mut k) = self.kernel.take() else {
            return;
        };
        // Only a process mapping a table still being made waits: the others'
        // entries were written just above.
        let maps_pending = |k: &kernel::KernelTables, p: &ProcessUnwinder<R::Process>| {
            p.mappings.iter().any(|m| k.is_pending(m.binary))
        };
        let mut waiting: Vec<u32> = self
            .processes
            .iter()
            .filter(|(_, p)| p.exited_ns.is_none() && maps_pending(&k, p))
            .map(|(&pid, _)| pid)
            .collect();
        let mut ready = FxHashSet::default();
        while !waiting.is_empty() && k.any_pending() && std::time::Instant::now() < deadline {
            // No worker left (none would finish a table): as at the deadline.
            let Some(now_ready) = k.wait_next(deadline) else {
                break;
            };
            if now_ready.is_empty() {
                continue;
            }
            // Every process that no longer waits and maps a table that came
            // is written now: at its last table, or at one evicted for
            // another's (`receive` gives those too), which would leave its
            // entry pointing at rows another table holds.
            let (still, done): (Vec<u32>, Vec<u32>) = waiting
                .iter()
                .partition(|pid| self.processes.get(pid).is_some_and(|p| maps_pending(&k, p)));
            waiting = still;
            k.dirty.extend(done);
            let now_ready: FxHashSet<BinaryIndex> = now_ready.into_iter().collect();
            self.mark_mapping(&mut k, &now_ready, |pid| !waiting.contains(&pid));
            self.write_dirty(&mut k, binaries);
            ready.extend(now_ready);
        }
        // A process still waiting is written with the tables that came, and
        // every process mapping one that comes now, as after any drain.
        self.mark_mapping(&mut k, &ready, |pid| waiting.contains(&pid));
        let late = k.receive();
        k.started();
        self.write_entries(k, binaries, late);
    }

    /// Write the entries of the processes marked dirty and of those that map
    /// a binary in `ready` (its table now in), then put `k` back.
    fn write_entries(
        &mut self,
        mut k: kernel::KernelTables,
        binaries: &Binaries,
        ready: Vec<BinaryIndex>,
    ) {
        if !ready.is_empty() {
            let ready: FxHashSet<BinaryIndex> = ready.into_iter().collect();
            self.mark_mapping(&mut k, &ready, |_| true);
        }
        self.write_dirty(&mut k, binaries);
        self.kernel = Some(k);
    }

    /// Mark for rewriting each live process `which` takes that maps a
    /// binary in `ready`, or whose JIT table is in it.
    fn mark_mapping(
        &self,
        k: &mut kernel::KernelTables,
        ready: &FxHashSet<BinaryIndex>,
        which: impl Fn(u32) -> bool,
    ) {
        for (&pid, p) in &self.processes {
            let jit = p.jit_base.is_some() && ready.contains(&kernel::jit_table_index(pid));
            if p.exited_ns.is_none()
                && (jit || p.mappings.iter().any(|m| ready.contains(&m.binary)))
                && which(pid)
            {
                k.dirty.insert(pid);
            }
        }
    }

    /// Write the entries marked dirty.
    fn write_dirty(&mut self, k: &mut kernel::KernelTables, binaries: &Binaries) {
        let dirty: Vec<u32> = k.dirty.drain().collect();
        for pid in dirty {
            self.write_kernel_entry(k, binaries, pid);
        }
    }

    /// Write `pid`'s kernel entry anew from its mappings and its runtimes
    /// (or remove it, the process gone).
    fn write_kernel_entry(&mut self, k: &mut kernel::KernelTables, binaries: &Binaries, pid: u32) {
        // Primed: held before its exec (its mappings are still its
        // parent's, ours), or exec'd with none of its new ones seen yet;
        // the entry written for its program stays until they are.
        let has_mappings = self
            .processes
            .get(&pid)
            .is_some_and(|p| !p.mappings.is_empty());
        if k.keeps_primed(pid, has_mappings) {
            return;
        }
        let Some(p) = self.processes.get(&pid).filter(|p| p.exited_ns.is_none()) else {
            k.remove_process(pid);
            return;
        };
        let mappings = p.mappings.clone();
        let (jit_base, jit_tables) = (p.jit_base, p.jitdump.is_some());
        let mut entries = Vec::new();
        let mut mapped = Vec::new();
        let mut entry = Vec::new();
        for m in &mappings {
            if let Some(e) = self.kernel_mapping(
                k,
                binaries,
                pid,
                m,
                (jit_base, jit_tables),
                &mut entries,
                &mut mapped,
            ) {
                entry.push(e);
            }
        }
        let runtime = match self.processes.get_mut(&pid) {
            Some(p) => self.runtimes.detect(binaries, &mapped, &mut p.runtime),
            None => RuntimeEntry::default(),
        };
        // A JVM's code heaps, once read: walked by their blobs' own
        // frame sizes, in place of the anonymous mappings they cover
        // (and their rows from the perf map's methods).
        if let Some(code) = runtime.code_heaps {
            // The mapping's bias is the heap's index (the kernel's
            // walker takes it from there).
            let heaps: Vec<(u64, u64, u64)> = (0..code.heap.len())
                .map(|i| (code.heap[i].low, code.heap[i].end, i as u64))
                .filter(|&(lo, hi, _)| lo != 0 && hi > lo)
                .collect();
            entry.retain(|m| !heaps.iter().any(|&(lo, hi, _)| m.0 < hi && m.1 > lo));
            for (lo, hi, i) in heaps {
                entry.push((lo, hi, i, kernel::HOTSPOT_TABLE_INDEX, false, true));
            }
        }
        entries.sort_unstable();
        entries.dedup();
        k.write_process(
            pid,
            &mut entry,
            runtime.interpreter,
            runtime.code_heaps,
            runtime.js,
        );
        k.write_python(pid, runtime.python);
        if let Some(p) = self.processes.get_mut(&pid) {
            p.entries = entries;
        }
    }

    /// One mapping of `pid` as its kernel entry holds it (start, end, bias,
    /// table, whether its tables are userspace's, whether it has rows), its
    /// binary's table asked for if new; its entry point put in `entries`
    /// and its (binary, base) in `mapped` where its bias is known. None
    /// for a jitdump's own mapping. `jit` is the process's JIT base and
    /// whether it writes a jitdump.
    #[allow(clippy::too_many_arguments)]
    fn kernel_mapping(
        &mut self,
        k: &mut kernel::KernelTables,
        binaries: &Binaries,
        pid: u32,
        m: &Mapping,
        (jit_base, jit_tables): (Option<u64>, bool),
        entries: &mut Vec<u64>,
        mapped: &mut Vec<(BinaryIndex, u64)>,
    ) -> Option<(u64, u64, u64, BinaryIndex, bool, bool)> {
        if is_jitdump(&binaries.get(m.binary).path) {
            return None;
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
        if let Some(base) = bias {
            mapped.push((m.binary, base));
        }
        // Anonymous code of a JVM whose compiled methods have rows:
        // those, relative to its lowest method (the code cache's
        // mapping begins below it, with stubs: addresses below the
        // base, or 4 GiB above, find no row, as in code without CFI).
        if let Some(base) =
            jit_base.filter(|&b| bias.is_none() && m.end > b && m.start < b.saturating_add(1 << 32))
        {
            return Some((
                m.start,
                m.end,
                base,
                kernel::jit_table_index(pid),
                false,
                true,
            ));
        }
        // No bias (no segment the mapping begins): no table either,
        // or its rows would be looked up at the wrong addresses.
        Some((
            m.start,
            m.end,
            bias.unwrap_or(0),
            m.binary,
            jit_tables && layout.is_none(),
            bias.is_some(),
        ))
    }
}
