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
//! that does not fit is refused (its frames are handed over to userspace,
//! which unwinds them from a stack copy) and counted; tables of binaries no
//! process maps any more are freed.
//!
//! Both maps are shared by every user's processes, and any user can fill
//! them (files whose CFI compiles to millions of rows, thousands of sleeping
//! processes): each is shared out per user. A table is charged to its
//! file's owner (root's files in root's directories are the system's, which
//! has no limit); another owner may hold at most half the rows, and when a
//! table does not fit, the largest tables of the owner holding the most are
//! evicted for it, if that owner holds more than the one asking would. A
//! process entry is charged to the process's real uid; a uid other than
//! root may hold at most a quarter of the entries, and when the map is full
//! the least recently sampled entry of the uid holding the most is evicted,
//! on the same condition. A process refused an entry (or evicted) is marked
//! in `unwind_refused`, so the kernel hands its samples over to userspace
//! instead of taking it for one that just started. Refusals are counted per
//! uid, for the profile's warnings, `record -v`, the agent's health line
//! and its metrics.
//!
//! A binary's CFI is read by whoever compiles its table, just before (the
//! worker reads from its own handle on the file), so however many binaries
//! wait for a worker, at most one CFI copy per worker is in memory, each
//! within the CFI budget ([`ElfReader::cfi`]).

use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use super::tables::{compile, CfiSection, Row};
use crate::bpf::abi::{
    UnwindMapping, UnwindProcess, UNWIND_ENDS, UNWIND_MAX_MAPPINGS, UNWIND_PROCESS_CUT, UNWIND_REFUSED_WORDS, UNWIND_TABLE_PENDING,
    UNWIND_TABLE_USERSPACE,
};
use crate::binaries::{Binary, BinaryIndex};
use crate::binaries::elf::{ElfLimits, ElfReader};

/// Entries of the process map unless told otherwise (8 KiB each, allocated
/// only for the processes that exist).
pub const DEFAULT_PROCESS_ENTRIES: u32 = 16384;

/// The owner of the system's tables and the uid of root's processes: no share limit.
pub const SYSTEM_UID: u32 = 0;

pub use crate::bpf::unwind_maps::{KernelUnwindMaps, RowsMapping};

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
    /// Tables that did not fit the budget (their frames are handed over).
    pub over_budget: u64,
    /// Of those, refused because their owner held its share of the rows.
    pub tables_over_share: u64,
    /// Tables evicted to make room for another owner's (handed over since).
    pub tables_evicted: u64,
    /// Process entries written.
    pub process_writes: u64,
    /// Processes with more executable mappings than an entry holds.
    pub mappings_cut: u64,
    /// Process entries the kernel refused (its map full).
    pub process_write_failures: u64,
    /// Processes refused an entry (their uid held its share, or the map was
    /// full), evictions included: their samples are handed over.
    pub process_refusals: u64,
    /// Of those, entries evicted for another uid's process.
    pub process_evictions: u64,
    /// Samples walked in the kernel, by how the walk ended (`UNWIND_END_*`).
    pub ends: [u64; UNWIND_ENDS],
    /// Of those that could not read the stack, given the stack their thread
    /// had at a switch-out in the same system call.
    pub recovered_from_switch: u64,
}

impl KernelTableStats {
    /// One line for `record -v`: the tables and how the walks ended.
    pub fn line(&self) -> String {
        const NAMES: [&str; UNWIND_ENDS] =
            ["root", "no_process", "pending", "bad_address", "unsupported", "read_failed", "no_info", "max_frames", "userspace", "refused"];
        let ends: Vec<String> = NAMES.iter().zip(self.ends).map(|(n, c)| format!("{n}={c}")).collect();
        format!(
            "kernel unwinding: tables={} rows={} rows_peak={} of {} ({:.1} MiB peak) compile_ms={:.1} over_budget={} tables_over_share={} tables_evicted={} process_writes={} process_write_failures={} process_refusals={} process_evictions={} mappings_cut={} walks: {} recovered_from_switch={}",
            self.tables,
            self.rows_in_use,
            self.rows_peak,
            self.rows_capacity,
            self.rows_peak as f64 * 8.0 / (1 << 20) as f64,
            self.compile_ns as f64 / 1e6,
            self.over_budget,
            self.tables_over_share,
            self.tables_evicted,
            self.process_writes,
            self.process_write_failures,
            self.process_refusals,
            self.process_evictions,
            self.mappings_cut,
            ends.join(" "),
            self.recovered_from_switch
        )
    }
}

/// What the kernel unwinder refused one uid: process entries and tables.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UidRefusals {
    /// Processes refused an entry (or evicted).
    pub entries: u64,
    /// Tables refused or evicted.
    pub tables: u64,
}

/// The refusals per uid as one line's part: `uid 65534: 14452 processes, 2 tables`.
pub fn refusals_text(refusals: &[(u32, UidRefusals)]) -> String {
    refusals.iter().map(|(uid, r)| format!("uid {uid}: {} processes, {} tables", r.entries, r.tables)).collect::<Vec<_>>().join("; ")
}

/// A process with an entry: whose it is, and when it was last sampled.
#[derive(Debug, Clone, Copy)]
struct Entry {
    uid: u32,
    /// [`KernelTables::sample_clock`] at its last sample (or its admission).
    last_sampled: u64,
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
    /// Who each table is charged to ([`table_owner`]).
    owners: FxHashMap<BinaryIndex, u32>,
    /// Rows held per owner.
    owner_rows: FxHashMap<u32, u64>,
    /// Binaries whose table was evicted since the last `receive`: their
    /// processes' entries must be rewritten.
    evicted: Vec<BinaryIndex>,
    /// Processes with an entry in the kernel's map.
    entries: FxHashMap<u32, Entry>,
    /// Entries held per uid.
    uid_entries: FxHashMap<u32, u32>,
    /// Processes refused an entry (marked in `unwind_refused`), with their uid.
    refused: FxHashMap<u32, u32>,
    /// Counts samples, for the least recently sampled entry.
    sample_clock: u64,
    /// What was refused, per uid (all time).
    pub refusals: BTreeMap<u32, UidRefusals>,
    /// `refusals` as last said in a warning.
    refusals_warned: BTreeMap<u32, UidRefusals>,
}

/// Who a binary's table is charged to: its file's owner, or, for a file of
/// root's, its directory's (the system's where that is root's too: any user
/// can map root's files, but only root can put them in root's directories).
pub fn table_owner(bin: &Binary) -> u32 {
    use std::os::unix::fs::MetadataExt;
    let Some(meta) = bin.file.as_ref().and_then(|f| f.metadata().ok()) else { return u32::MAX };
    if meta.uid() != SYSTEM_UID {
        return meta.uid();
    }
    match std::path::Path::new(&bin.path).parent().and_then(|d| std::fs::metadata(d).ok()) {
        Some(d) if d.uid() != SYSTEM_UID => d.uid(),
        _ => SYSTEM_UID,
    }
}

/// The real uid of `pid` (its user, whatever it exec'd or made itself
/// non-dumpable), or `u32::MAX` if it is gone.
fn process_uid(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(u32::MAX)
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
    let table = if let Some(eh) = elf.cfi(".eh_frame").map_err(|e| e.to_string())?.filter(|c| c.fdes > 0) {
        compile(&CfiSection { bytes: &eh.bytes, addr: eh.info.addr, is_eh_frame: true }, max_rows)?
    } else if let Some(df) = elf.cfi(".debug_frame").map_err(|e| e.to_string())?.filter(|c| c.fdes > 0) {
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
        let capacity = maps.rows.capacity() as u32;
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
            owners: FxHashMap::default(),
            owner_rows: FxHashMap::default(),
            evicted: Vec::new(),
            entries: FxHashMap::default(),
            uid_entries: FxHashMap::default(),
            refused: FxHashMap::default(),
            sample_clock: 0,
            refusals: BTreeMap::new(),
            refusals_warned: BTreeMap::new(),
        }
    }

    /// Ask for `binary`'s table (from `file`, when it has one) if nobody
    /// has yet, charged to `owner`. A small one (most programs and
    /// libraries: libc's 150 KiB of .eh_frame compiles in 2 ms) is compiled
    /// here and now, so a process that just started walks in the kernel
    /// from its next sample; a large one goes to the worker. The size is the
    /// section header's claim, used only to choose where: what is read is
    /// bounded either way.
    pub(super) fn want(&mut self, binary: BinaryIndex, path: &str, owner: u32, file: Option<&std::fs::File>) {
        if self.tables.contains_key(&binary) {
            return;
        }
        self.owners.insert(binary, owner);
        let claim = file.and_then(|f| {
            let elf = ElfReader::new(f, ElfLimits::default());
            // The larger of the two: a tiny .eh_frame without FDEs has its
            // .debug_frame compiled, which must not happen on the event loop.
            let size = |name| elf.section(name).map(|s| s.size);
            size(".eh_frame").max(size(".debug_frame"))
        });
        let (Some(file), Some(claim)) = (file, claim) else {
            self.tables.insert(binary, TableState::None);
            return;
        };
        // An owner already holding its share gets no more: not even the
        // compiling (a file of millions of rows takes a worker a second).
        if owner != SYSTEM_UID && self.rows_of(owner) >= self.stats.rows_capacity / 2 {
            self.stats.over_budget += 1;
            self.stats.tables_over_share += 1;
            self.refusals.entry(owner).or_default().tables += 1;
            if self.failures.len() < 100 {
                self.failures.push(format!("{path}: uid {owner} holds its half of --unwind-table-mb; its frames are unwound from stack copies"));
            }
            self.tables.insert(binary, TableState::Userspace);
            return;
        }
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
        let mut ready = std::mem::take(&mut self.evicted);
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
        ready.append(&mut self.evicted);
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
            let owner = self.owners.get(&c.binary).copied().unwrap_or(SYSTEM_UID);
            let len = c.result.as_ref().map(|r| r.len() as u64).unwrap_or(0);
            // A user other than the system may hold half the rows: the
            // rest stays for the system's and other users' binaries.
            let over_share = owner != SYSTEM_UID && self.rows_of(owner) + len > self.stats.rows_capacity / 2;
            let state = match c.result {
                Ok(rows) if !rows.is_empty() && over_share => {
                    self.stats.over_budget += 1;
                    self.stats.tables_over_share += 1;
                    self.refusals.entry(owner).or_default().tables += 1;
                    if self.failures.len() < 100 {
                        self.failures.push(format!(
                            "{}: its {} rows would take uid {owner} past its half of --unwind-table-mb; its frames are unwound from stack copies",
                            c.path,
                            rows.len()
                        ));
                    }
                    TableState::Userspace
                }
                Ok(rows) if !rows.is_empty() => match self.allocate(rows.len() as u32).or_else(|| self.evict_for(owner, rows.len() as u32)) {
                    Some(start) if self.maps.rows.write(start as usize, &rows).is_err() => {
                        self.release(start, rows.len() as u32);
                        if self.failures.len() < 100 {
                            self.failures.push(format!("{}: cannot write its table into the kernel's array", c.path));
                        }
                        TableState::Userspace
                    }
                    Some(start) => {
                        self.stats.tables += 1;
                        *self.owner_rows.entry(owner).or_default() += rows.len() as u64;
                        self.stats.rows_in_use += rows.len() as u64;
                        self.stats.rows_peak = self.stats.rows_peak.max(self.stats.rows_in_use);
                        TableState::Ready { start, len: rows.len() as u32 }
                    }
                    None => {
                        self.stats.over_budget += 1;
                        self.refusals.entry(owner).or_default().tables += 1;
                        if self.failures.len() < 100 {
                            self.failures.push(format!(
                                "{}: its {} rows (uid {owner}'s) do not fit what is left of --unwind-table-mb (raise it); its frames are unwound from stack copies",
                                c.path,
                                rows.len()
                            ));
                        }
                        TableState::Userspace
                    }
                },
                Ok(_) => TableState::None,
                Err(e) => {
                    // Too large for a table: its CFI is fine, userspace walks it.
                    let too_large = e.contains("rows (a table may take");
                    if self.failures.len() < 100 {
                        let how = if too_large { "unwound from stack copies" } else { "walked by frame pointer" };
                        self.failures.push(format!("{}: {e}; its frames are {how}", c.path));
                    }
                    if too_large {
                        self.refusals.entry(owner).or_default().tables += 1;
                        TableState::Userspace
                    } else {
                        TableState::None
                    }
                }
            };
            self.tables.insert(c.binary, state);
        }
        true
    }

    /// Rows `owner`'s tables hold.
    fn rows_of(&self, owner: u32) -> u64 {
        self.owner_rows.get(&owner).copied().unwrap_or(0)
    }

    /// Make room for `len` rows of `owner` by evicting the largest tables
    /// of the owner other than the system holding the most rows, as long
    /// as it holds more than `owner` would with them (the system's tables
    /// take room from any user). The evicted tables' frames are handed over
    /// from then on. Returns where the rows go, or None (nothing evicted
    /// past what could not make room).
    fn evict_for(&mut self, owner: u32, len: u32) -> Option<u32> {
        loop {
            let after = self.rows_of(owner) + len as u64;
            let victim = self
                .owner_rows
                .iter()
                .filter(|&(&o, &rows)| o != SYSTEM_UID && o != owner && rows > 0 && (owner == SYSTEM_UID || rows > after))
                .max_by_key(|&(&o, &rows)| (rows, o))
                .map(|(&o, _)| o)?;
            let (binary, start, table_len) = self
                .tables
                .iter()
                .filter_map(|(b, t)| match t {
                    TableState::Ready { start, len } if self.owners.get(b) == Some(&victim) => Some((*b, *start, *len)),
                    _ => None,
                })
                .max_by_key(|&(b, _, len)| (len, b))?;
            self.tables.insert(binary, TableState::Userspace);
            self.release(start, table_len);
            self.stats.rows_in_use -= table_len as u64;
            *self.owner_rows.entry(victim).or_default() -= table_len as u64;
            self.stats.tables_evicted += 1;
            self.refusals.entry(victim).or_default().tables += 1;
            self.evicted.push(binary);
            if let Some(start) = self.allocate(len) {
                return Some(start);
            }
        }
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
        let owner = self.owners.remove(&binary).unwrap_or(SYSTEM_UID);
        if let Some(TableState::Ready { start, len }) = self.tables.remove(&binary) {
            self.stats.rows_in_use -= len as u64;
            if let Some(rows) = self.owner_rows.get_mut(&owner) {
                *rows = rows.saturating_sub(len as u64);
            }
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
            self.remove_process(pid);
            return;
        }
        let mut flags = 0;
        if mappings.len() > UNWIND_MAX_MAPPINGS {
            // The largest stay (the program, libc, the big libraries, where
            // most code runs); the walk hands over to userspace at an
            // address in the rest, which the entry says it lacks.
            self.stats.mappings_cut += 1;
            mappings.sort_unstable_by_key(|m| (std::cmp::Reverse(m.1 - m.0), m.0));
            mappings.truncate(UNWIND_MAX_MAPPINGS);
            flags = UNWIND_PROCESS_CUT;
        }
        mappings.sort_unstable_by_key(|m| m.0);
        if !self.entries.contains_key(&pid) && !self.admit(pid) {
            return;
        }
        // Processes that just started map libraries for a while after their
        // entry is first written: their hand-overs wake us for 100 ms.
        let wake_until_ms = (crate::sys::clock::monotonic_ns() / 1_000_000 + NEW_PROCESS_WAKE_MS) as u32;
        let mut entry =
            UnwindProcess { count: mappings.len() as u32, wake_until_ms, flags, _pad: 0, m: [UnwindMapping::default(); UNWIND_MAX_MAPPINGS] };
        for (slot, &(start, end, bias, binary, userspace, bias_known)) in entry.m.iter_mut().zip(mappings.iter()) {
            let (table_start, table_len) = match (userspace, bias_known) {
                (true, _) => (UNWIND_TABLE_USERSPACE, 0),
                (false, false) => (0, 0),
                (false, true) => self.table_of(binary),
            };
            *slot = UnwindMapping { start, end, bias, table_start, table_len };
        }
        self.stats.process_writes += 1;
        // The map full all the same (the count is ours, the map the
        // kernel's): the process hands over, as one refused.
        if self.maps.processes.insert(pid, entry, 0).is_err() {
            self.stats.process_write_failures += 1;
            let uid = self.uncharge(pid).unwrap_or(u32::MAX);
            self.refuse(pid, uid);
            return;
        }
        if self.refused.remove(&pid).is_some() {
            self.mark_refused(pid, false);
        }
    }

    /// Give `pid` a place in the process map, charged to its uid, unless its
    /// uid holds its share (a quarter, for a uid other than root's) or the
    /// map is full and no uid holding more than it would can give one up
    /// (its least recently sampled process's). A refused process is marked
    /// so that the kernel hands its samples over.
    fn admit(&mut self, pid: u32) -> bool {
        let uid = process_uid(pid);
        let held = self.uid_entries.get(&uid).copied().unwrap_or(0);
        let capacity = self.maps.process_capacity;
        if uid != SYSTEM_UID && held >= (capacity / 4).max(1) {
            self.refuse(pid, uid);
            return false;
        }
        if self.entries.len() >= capacity as usize {
            let victim_uid = self
                .uid_entries
                .iter()
                .filter(|&(&u, &n)| u != SYSTEM_UID && u != uid && n > 0 && (uid == SYSTEM_UID || n > held + 1))
                .max_by_key(|&(&u, &n)| (n, u))
                .map(|(&u, _)| u);
            let victim = victim_uid.and_then(|v| self.entries.iter().filter(|(_, e)| e.uid == v).min_by_key(|&(&p, e)| (e.last_sampled, p)).map(|(&p, _)| p));
            let Some(victim) = victim else {
                self.refuse(pid, uid);
                return false;
            };
            let _ = self.maps.processes.remove(&victim);
            let victim_uid = self.uncharge(victim).unwrap_or(u32::MAX);
            self.stats.process_evictions += 1;
            self.refuse(victim, victim_uid);
        }
        self.entries.insert(pid, Entry { uid, last_sampled: self.sample_clock });
        *self.uid_entries.entry(uid).or_default() += 1;
        true
    }

    /// Forget `pid`'s place (its entry gone); returns its uid.
    fn uncharge(&mut self, pid: u32) -> Option<u32> {
        let e = self.entries.remove(&pid)?;
        if let Some(n) = self.uid_entries.get_mut(&e.uid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.uid_entries.remove(&e.uid);
            }
        }
        Some(e.uid)
    }

    /// `pid` of `uid` has no entry for want of room: counted (once until
    /// it gets one) and marked for the kernel.
    fn refuse(&mut self, pid: u32, uid: u32) {
        if self.refused.insert(pid, uid).is_none() {
            self.stats.process_refusals += 1;
            self.refusals.entry(uid).or_default().entries += 1;
            self.mark_refused(pid, true);
        }
    }

    /// Set or clear `pid`'s bit in `unwind_refused`.
    fn mark_refused(&mut self, pid: u32, refused: bool) {
        let word = pid / 64;
        if word as usize >= UNWIND_REFUSED_WORDS {
            return;
        }
        let old = self.maps.refused.get(&word, 0).unwrap_or(0);
        let bit = 1u64 << (pid % 64);
        let new = if refused { old | bit } else { old & !bit };
        if new != old {
            let _ = self.maps.refused.set(word, new, 0);
        }
    }

    /// Delete `pid`'s entry (it exited, or has no mappings left).
    pub(super) fn remove_process(&mut self, pid: u32) {
        let _ = self.maps.processes.remove(&pid);
        self.uncharge(pid);
        if self.refused.remove(&pid).is_some() {
            self.mark_refused(pid, false);
        }
    }

    /// `pid` was sampled: its entry is the last its uid gives up.
    pub fn sampled(&mut self, pid: u32) {
        if let Some(e) = self.entries.get_mut(&pid) {
            self.sample_clock += 1;
            e.last_sampled = self.sample_clock;
        }
    }

    /// The refusals per uid, all time.
    pub fn refusals(&self) -> Vec<(u32, UidRefusals)> {
        self.refusals.iter().map(|(&u, &r)| (u, r)).collect()
    }

    /// One warning per uid refused more since the last call.
    pub fn take_refusal_warnings(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        let capacity = self.maps.process_capacity;
        for (&uid, &r) in &self.refusals {
            let before = self.refusals_warned.get(&uid).copied().unwrap_or_default();
            if r == before {
                continue;
            }
            let mut parts = Vec::new();
            if r.entries > before.entries {
                parts.push(format!(
                    "{} of its processes got no entry in the kernel unwinder's process map (a user other than root may hold {} of its {})",
                    r.entries - before.entries,
                    (capacity / 4).max(1),
                    capacity
                ));
            }
            if r.tables > before.tables {
                parts.push(format!("{} of its tables got no room in --unwind-table-mb or were evicted for another user's", r.tables - before.tables));
            }
            out.push(format!("uid {uid}: {}; those stacks were unwound from stack copies", parts.join(", and ")));
            self.refusals_warned.insert(uid, r);
        }
        out
    }
}
