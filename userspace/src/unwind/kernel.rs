//! Feeding the in-kernel unwinder: tables into `unwind_rows`, mappings
//! into `unwind_processes`.
//!
//! In: the processes' executable mappings as [`super::Unwinders`] keeps
//! them (from the `/proc` snapshot and the perf sideband), and each binary's
//! unwind sections. Out: the two BPF maps `ebpf/unwind.bpf.h` walks. A
//! binary's table is compiled once (on a worker thread, off the event loop:
//! rustc's driver library takes ~80 ms) and placed in the shared rows
//! array, which userspace writes through a mapping of it (no syscall per
//! row); each process's entry lists its mappings with their bias and table,
//! rewritten whenever they change. Until a binary's table is in, its
//! mappings say "pending" and the kernel hands those samples over to the
//! stack copy. The rows array has a fixed size, the table budget: a table
//! that does not fit is refused (its binary unwinds by frame pointer in the
//! kernel) and counted; tables of binaries no process maps any more are
//! freed. A binary's CFI is read by whoever compiles its table, just
//! before (the worker reads from its own handle on the file), so however
//! many binaries wait for a worker, at most one CFI copy per worker is in
//! memory, each within the CFI budget ([`ElfReader::cfi`]).

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;

use aya::maps::{HashMap as BpfHashMap, MapData};
use rustc_hash::{FxHashMap, FxHashSet};

use super::tables::{compile, CfiSection, Row};
use crate::bpf::abi::{UnwindMapping, UnwindProcess, UNWIND_MAX_MAPPINGS, UNWIND_TABLE_PENDING, UNWIND_TABLE_USERSPACE};
use crate::symbolize::binaries::BinaryIndex;
use crate::symbolize::elf::{ElfLimits, ElfReader};

/// The BPF maps of the in-kernel unwinder, taken from the loaded sampler.
pub struct KernelUnwindMaps {
    /// `unwind_rows`, mapped into our memory.
    pub rows: RowsMapping,
    /// `unwind_processes`.
    pub processes: BpfHashMap<MapData, u32, UnwindProcess>,
}

/// `unwind_rows` (a `BPF_F_MMAPABLE` array), written through a mapping of
/// just the pages a table goes to, unmapped again at once: the array is
/// kernel memory, and pages left mapped here would count in our resident
/// set (rustc's tables alone are 20 MiB).
pub struct RowsMapping {
    map: MapData,
    len: usize,
}

impl RowsMapping {
    /// The array `map`, of `capacity` rows.
    pub fn new(map: MapData, capacity: usize) -> std::io::Result<RowsMapping> {
        Ok(RowsMapping { map, len: capacity })
    }

    /// Write `rows` from row `start` on.
    fn write(&mut self, start: usize, rows: &[Row]) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        const PAGE: usize = 4096;
        let size = std::mem::size_of::<Row>();
        if start + rows.len() > self.len {
            return Err(std::io::Error::other("rows past the array's end"));
        }
        let (first, end) = (start * size, (start + rows.len()) * size);
        let map_start = first / PAGE * PAGE;
        let map_len = end.next_multiple_of(PAGE) - map_start;
        let fd = self.map.fd().as_fd();
        // SAFETY: a shared mapping of pages of the array that lie within it
        // (the kernel checks the range against the map's size).
        let ptr = unsafe {
            libc::mmap(std::ptr::null_mut(), map_len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), map_start as libc::off_t)
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: [first, end) lies in the mapping, which nothing else uses;
        // Row is plain old data.
        unsafe {
            std::ptr::copy_nonoverlapping(rows.as_ptr() as *const u8, (ptr as *mut u8).add(first - map_start), end - first);
            libc::munmap(ptr, map_len);
        }
        Ok(())
    }
}

/// Totals, for `record -v`, the summary and the benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KernelTableStats {
    /// Tables compiled and loaded.
    pub tables: u64,
    /// Rows in use now, and the most at once.
    pub rows_in_use: u64,
    /// The most rows in use at once.
    pub rows_peak: u64,
    /// The rows array's size (the budget).
    pub rows_capacity: u64,
    /// Time compiling tables on the worker, ns.
    pub compile_ns: u64,
    /// Tables that did not fit the budget (their binaries walk by frame pointer).
    pub over_budget: u64,
    /// Process entries written.
    pub process_writes: u64,
    /// Processes with more executable mappings than an entry holds.
    pub mappings_cut: u64,
    /// Process entries the kernel refused (its map full).
    pub process_write_failures: u64,
    /// Samples walked in the kernel, by how the walk ended (`UNWIND_END_*`).
    pub ends: [u64; 9],
    /// Of those that could not read the stack, given the stack their thread
    /// had at a switch-out in the same system call.
    pub recovered_from_switch: u64,
}

impl KernelTableStats {
    /// One line for `record -v`: the tables and how the walks ended.
    pub fn line(&self) -> String {
        const NAMES: [&str; 9] = ["root", "no_process", "pending", "bad_address", "unsupported", "read_failed", "no_info", "max_frames", "userspace"];
        let ends: Vec<String> = NAMES.iter().zip(self.ends).map(|(n, c)| format!("{n}={c}")).collect();
        format!(
            "kernel unwinding: tables={} rows={} rows_peak={} of {} ({:.1} MiB peak) compile_ms={:.1} over_budget={} process_writes={} process_write_failures={} mappings_cut={} walks: {} recovered_from_switch={}",
            self.tables,
            self.rows_in_use,
            self.rows_peak,
            self.rows_capacity,
            self.rows_peak as f64 * 8.0 / (1 << 20) as f64,
            self.compile_ns as f64 / 1e6,
            self.over_budget,
            self.process_writes,
            self.process_write_failures,
            self.mappings_cut,
            ends.join(" "),
            self.recovered_from_switch
        )
    }
}

/// A table to compile: the binary, the request's serial, a handle on its
/// file (of its own: reads are positional), its path.
type TableRequest = (BinaryIndex, u64, std::fs::File, String);

enum TableState {
    /// Being compiled (request serial).
    Pending(u64),
    /// In the rows array.
    Ready { start: u32, len: u32 },
    /// No table (no CFI, damaged CFI): frame pointers.
    None,
    /// CFI that did not fit the budget (or could not be written): the
    /// kernel hands its frames over to userspace, which has the CFI; frame
    /// pointers in code built without them would give plausible wrong frames.
    Userspace,
}

struct Compiled {
    binary: BinaryIndex,
    /// The binary's path, for messages.
    path: String,
    serial: u64,
    result: Result<Vec<Row>, String>,
    ns: u64,
}

/// The in-kernel unwinder's userspace half.
pub struct KernelTables {
    maps: KernelUnwindMaps,
    /// Free row ranges: start -> len.
    free: BTreeMap<u32, u32>,
    tables: FxHashMap<BinaryIndex, TableState>,
    serial: u64,
    to_worker: Option<Sender<TableRequest>>,
    from_worker: Receiver<Compiled>,
    /// Processes whose entry must be rewritten (or deleted).
    pub(super) dirty: FxHashSet<u32>,
    /// Totals.
    pub stats: KernelTableStats,
    /// Binaries whose table could not be made, with why.
    pub failures: Vec<String>,
}

/// How long after its entry is written a process's hand-overs wake the reader.
const NEW_PROCESS_WAKE_MS: u64 = 100;

/// Most rows one table may take: a quarter of the array.
fn table_max_rows(capacity: usize) -> usize {
    (capacity / 4).max(1)
}

/// Threads compiling large tables.
const TABLE_WORKERS: usize = 2;

/// CFI at most this large is compiled on the event loop (~8 ms a MiB: a
/// program's own small binary, at once; libc's 150 KiB go to a worker, so
/// that starting with a hundred processes' libraries does not delay the start).
const COMPILE_HERE_BYTES: usize = 32 << 10;

/// Read a binary's CFI (`.eh_frame`, or `.debug_frame` when it has no
/// FDEs there) and compile its table of at most `max_rows` rows.
fn compile_table(file: &std::fs::File, max_rows: usize) -> Result<Vec<Row>, String> {
    let elf = ElfReader::new(file, ElfLimits::default());
    let table = if let Some(eh) = elf.cfi(".eh_frame")?.filter(|c| c.fdes > 0) {
        compile(&CfiSection { bytes: &eh.bytes, addr: eh.info.addr, is_eh_frame: true }, max_rows)?
    } else if let Some(df) = elf.cfi(".debug_frame")?.filter(|c| c.fdes > 0) {
        compile(&CfiSection { bytes: &df.bytes, addr: 0, is_eh_frame: false }, max_rows)?
    } else {
        // No FDEs (a file of zeros claims none either): frame pointers.
        return Ok(Vec::new());
    };
    Ok(table.rows)
}

impl KernelTables {
    /// Take over the maps; start the compiling worker.
    pub fn new(maps: KernelUnwindMaps) -> KernelTables {
        let capacity = maps.rows.len as u32;
        let (to_worker, requests) = std::sync::mpsc::channel::<TableRequest>();
        let (results, from_worker) = std::sync::mpsc::channel();
        // One binary may take a quarter of the budget: a file whose CFI claims
        // millions of rows (any user can write one) cannot crowd out the rest,
        // nor make the compiler hold more than a few tens of MB.
        let max_rows = table_max_rows(capacity as usize);
        // Two workers: a program's large libraries (rustc's driver and
        // LLVM, ~90 ms each) arrive together and are compiled side by side.
        let requests = Arc::new(std::sync::Mutex::new(requests));
        let mut spawned = Err(std::io::Error::other("no worker"));
        for i in 0..TABLE_WORKERS {
            let (requests, results) = (requests.clone(), results.clone());
            let worker = std::thread::Builder::new().name(format!("sysprof-tables{i}")).spawn(move || loop {
                let next = requests.lock().map_err(|_| ()).and_then(|r| r.recv().map_err(|_| ()));
                let Ok((binary, serial, file, path)) = next else { break };
                let started = std::time::Instant::now();
                // A file that makes the compiler panic must not leave its
                // table pending for ever (every sample would hand over).
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| compile_table(&file, max_rows)))
                    .unwrap_or_else(|_| Err("the table compiler failed on it".into()));
                let ns = started.elapsed().as_nanos() as u64;
                if results.send(Compiled { binary, path, serial, result, ns }).is_err() {
                    break;
                }
            });
            spawned = spawned.or(worker.map(|_| ()));
        }
        let mut free = BTreeMap::new();
        free.insert(0, capacity);
        KernelTables {
            maps,
            free,
            tables: FxHashMap::default(),
            serial: 0,
            to_worker: spawned.is_ok().then_some(to_worker),
            from_worker,
            dirty: FxHashSet::default(),
            stats: KernelTableStats { rows_capacity: capacity as u64, ..Default::default() },
            failures: Vec::new(),
        }
    }

    /// Ask for `binary`'s table (from `file`, when it has one) if nobody
    /// has yet. A small one (most programs and libraries: libc's 150 KiB of
    /// .eh_frame compiles in 2 ms) is compiled here and now, so a process
    /// that just started walks in the kernel from its next sample; a large
    /// one goes to the worker. The size is the section header's claim, used
    /// only to choose where: what is read is bounded either way.
    pub(super) fn want(&mut self, binary: BinaryIndex, path: &str, file: Option<&std::fs::File>) {
        if self.tables.contains_key(&binary) {
            return;
        }
        let claim = file.and_then(|f| {
            let elf = ElfReader::new(f, ElfLimits::default());
            elf.section(".eh_frame").or_else(|| elf.section(".debug_frame")).map(|s| s.size)
        });
        let (Some(file), Some(claim)) = (file, claim) else {
            self.tables.insert(binary, TableState::None);
            return;
        };
        if claim <= COMPILE_HERE_BYTES as u64 {
            let started = std::time::Instant::now();
            let result = compile_table(file, table_max_rows(self.stats.rows_capacity as usize));
            self.serial += 1;
            self.tables.insert(binary, TableState::Pending(self.serial));
            self.place(Compiled { binary, path: path.to_string(), serial: self.serial, result, ns: started.elapsed().as_nanos() as u64 });
            return;
        }
        let state = match (&self.to_worker, file.try_clone()) {
            (Some(tx), Ok(handle)) => {
                self.serial += 1;
                match tx.send((binary, self.serial, handle, path.to_string())) {
                    Ok(()) => TableState::Pending(self.serial),
                    Err(_) => TableState::None,
                }
            }
            _ => TableState::None,
        };
        self.tables.insert(binary, state);
    }

    /// Take the tables the worker finished; returns the binaries now ready
    /// (their processes' entries must be rewritten).
    pub(super) fn receive(&mut self) -> Vec<BinaryIndex> {
        let mut ready = Vec::new();
        while let Ok(c) = self.from_worker.try_recv() {
            let binary = c.binary;
            if self.place(c) {
                ready.push(binary);
            }
        }
        ready
    }

    /// Wait (at most until `deadline`) for every table asked for to be
    /// compiled and placed; returns the binaries now ready.
    pub(super) fn wait_pending(&mut self, deadline: std::time::Instant) -> Vec<BinaryIndex> {
        let mut ready = self.receive();
        while self.tables.values().any(|t| matches!(t, TableState::Pending(_))) {
            let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) else { break };
            match self.from_worker.recv_timeout(left) {
                Ok(c) => {
                    let binary = c.binary;
                    if self.place(c) {
                        ready.push(binary);
                    }
                }
                Err(_) => break,
            }
        }
        ready
    }

    /// Put a compiled table in the rows array (or note why not); false if
    /// it was forgotten (or replaced) since it was asked for.
    fn place(&mut self, c: Compiled) -> bool {
        {
            if !matches!(self.tables.get(&c.binary), Some(TableState::Pending(s)) if *s == c.serial) {
                return false;
            }
            self.stats.compile_ns += c.ns;
            let state = match c.result {
                Ok(rows) if !rows.is_empty() => match self.allocate(rows.len() as u32) {
                    Some(start) if self.maps.rows.write(start as usize, &rows).is_err() => {
                        self.release(start, rows.len() as u32);
                        if self.failures.len() < 100 {
                            self.failures.push(format!("{}: cannot write its table into the kernel's array", c.path));
                        }
                        TableState::Userspace
                    }
                    Some(start) => {
                        self.stats.tables += 1;
                        self.stats.rows_in_use += rows.len() as u64;
                        self.stats.rows_peak = self.stats.rows_peak.max(self.stats.rows_in_use);
                        TableState::Ready { start, len: rows.len() as u32 }
                    }
                    None => {
                        self.stats.over_budget += 1;
                        if self.failures.len() < 100 {
                            self.failures.push(format!("{}: its {} rows do not fit what is left of --unwind-table-mb (raise it)", c.path, rows.len()));
                        }
                        TableState::Userspace
                    }
                },
                Ok(_) => TableState::None,
                Err(e) => {
                    if self.failures.len() < 100 {
                        self.failures.push(format!("{}: {e}", c.path));
                    }
                    // Too large for a table: its CFI is fine, userspace walks it.
                    if e.contains("rows (a table may take") { TableState::Userspace } else { TableState::None }
                }
            };
            self.tables.insert(c.binary, state);
        }
        true
    }

    /// First fit.
    fn allocate(&mut self, len: u32) -> Option<u32> {
        let (&start, &free_len) = self.free.iter().find(|(_, &l)| l >= len)?;
        self.free.remove(&start);
        if free_len > len {
            self.free.insert(start + len, free_len - len);
        }
        Some(start)
    }

    fn release(&mut self, start: u32, len: u32) {
        let (mut start, mut len) = (start, len);
        // Merge with the free ranges on either side.
        if let Some((&prev, &plen)) = self.free.range(..start).next_back() {
            if prev + plen == start {
                self.free.remove(&prev);
                start = prev;
                len += plen;
            }
        }
        if let Some(&next_len) = self.free.get(&(start + len)) {
            self.free.remove(&(start + len));
            len += next_len;
        }
        self.free.insert(start, len);
    }

    /// `binary` is gone from every process: free its rows.
    pub(super) fn forget(&mut self, binary: BinaryIndex) {
        if let Some(TableState::Ready { start, len }) = self.tables.remove(&binary) {
            self.stats.rows_in_use -= len as u64;
            self.release(start, len);
        }
    }

    /// The kernel's view of one mapping's table.
    pub(super) fn table_of(&self, binary: BinaryIndex) -> (u32, u32) {
        match self.tables.get(&binary) {
            Some(TableState::Ready { start, len }) => (*start, *len),
            Some(TableState::Pending(_)) => (UNWIND_TABLE_PENDING, 0),
            Some(TableState::Userspace) => (UNWIND_TABLE_USERSPACE, 0),
            _ => (0, 0),
        }
    }

    /// Write `pid`'s entry: `mappings` as (start, end, bias, binary, walked
    /// in userspace only, bias known), or delete it when there are none.
    pub(super) fn write_process(&mut self, pid: u32, mappings: &mut Vec<(u64, u64, u64, BinaryIndex, bool, bool)>) {
        if mappings.is_empty() {
            let _ = self.maps.processes.remove(&pid);
            return;
        }
        mappings.sort_unstable_by_key(|m| m.0);
        if mappings.len() > UNWIND_MAX_MAPPINGS {
            self.stats.mappings_cut += 1;
            mappings.truncate(UNWIND_MAX_MAPPINGS);
        }
        // Processes that just started map libraries for a while after their
        // entry is first written: their hand-overs wake us for 100 ms.
        let wake_until_ms = (crate::capture::monotonic_ns() / 1_000_000 + NEW_PROCESS_WAKE_MS) as u32;
        let mut entry = UnwindProcess { count: mappings.len() as u32, wake_until_ms, m: [UnwindMapping::default(); UNWIND_MAX_MAPPINGS] };
        for (slot, &(start, end, bias, binary, userspace, bias_known)) in entry.m.iter_mut().zip(mappings.iter()) {
            let (table_start, table_len) = match (userspace, bias_known) {
                (true, _) => (UNWIND_TABLE_USERSPACE, 0),
                (false, false) => (0, 0),
                (false, true) => self.table_of(binary),
            };
            *slot = UnwindMapping { start, end, bias, table_start, table_len };
        }
        self.stats.process_writes += 1;
        // A full map (16384 processes) leaves this one to the stack copy
        // in its first seconds, to its leaf after: counted.
        if self.maps.processes.insert(pid, entry, 0).is_err() {
            self.stats.process_write_failures += 1;
        }
    }

    /// Delete `pid`'s entry.
    pub(super) fn remove_process(&mut self, pid: u32) {
        let _ = self.maps.processes.remove(&pid);
    }
}
