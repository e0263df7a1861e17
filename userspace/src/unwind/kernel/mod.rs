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
//! The system's binaries' large tables (compiled on a worker) are kept on
//! disk between runs ([`cache`]): a later run reads them instead.
//!
//! A binary's CFI is read by whoever compiles its table, just before (the
//! worker reads from its own handle on the file), so however many binaries
//! wait for a worker, at most one CFI copy per worker is in memory, each
//! within the CFI budget ([`ElfReader::cfi`]).

mod cache;
mod entries;
mod primed;
mod rows;
mod walk;

use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::binaries::{Binary, BinaryIndex};
use crate::bpf::abi::UNWIND_ENDS;
use entries::Entry;
pub(in crate::unwind) use rows::jit_table_index;
pub(in crate::unwind) use rows::HOTSPOT_TABLE_INDEX;
use rows::{compile_cached, table_max_rows, Compiled, TableError, TableRequest, TableState};

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
    /// Kernel memory the rows' chunks take now (each created when a table
    /// first goes there, freed when the tables at the end of the array are),
    /// and the most at once.
    #[serde(default)]
    pub rows_kernel_bytes: u64,
    /// The most of [`KernelTableStats::rows_kernel_bytes`] at once.
    #[serde(default)]
    pub rows_kernel_bytes_peak: u64,
    /// Time compiling tables on the worker, ns.
    pub compile_ns: u64,
    /// Tables read from the disk cache instead of compiled.
    #[serde(default)]
    pub tables_cached: u64,
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
    /// CPython process entries the kernel refused (`python_procs` full).
    #[serde(default)]
    pub python_write_failures: u64,
    /// Compiled Java methods in the last JVM table written (frame sizes from
    /// their prologues: `runtimes::hotspot::frame_sizes`).
    #[serde(default)]
    pub jit_methods: u64,
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
    /// Stacks handed over that userspace walked over the same rows
    /// ([`walk`]); the others were walked by framehop, or kept their leaf
    /// alone (from before an exec, where the rows of that image end early).
    #[serde(default)]
    pub handed_over_walked_by_rows: u64,
}

impl KernelTableStats {
    /// One line for `record -v`: the tables and how the walks ended.
    pub fn line(&self) -> String {
        const NAMES: [&str; UNWIND_ENDS] = [
            "root",
            "no_process",
            "pending",
            "bad_address",
            "unsupported",
            "read_failed",
            "no_info",
            "max_frames",
            "userspace",
            "refused",
        ];
        let ends: Vec<String> = NAMES
            .iter()
            .zip(self.ends)
            .map(|(n, c)| format!("{n}={c}"))
            .collect();
        format!(
            "kernel unwinding: tables={} rows={} rows_peak={} of {} ({:.1} MiB peak; kernel memory {:.1} MiB, {:.1} MiB peak) compile_ms={:.1} tables_cached={} over_budget={} tables_over_share={} tables_evicted={} process_writes={} process_write_failures={} process_refusals={} process_evictions={} mappings_cut={} python_write_failures={} jit_methods={} walks: {} recovered_from_switch={} handed_over_walked_by_rows={}",
            self.tables,
            self.rows_in_use,
            self.rows_peak,
            self.rows_capacity,
            self.rows_peak as f64 * 8.0 / (1 << 20) as f64,
            self.rows_kernel_bytes as f64 / (1 << 20) as f64,
            self.rows_kernel_bytes_peak as f64 / (1 << 20) as f64,
            self.compile_ns as f64 / 1e6,
            self.tables_cached,
            self.over_budget,
            self.tables_over_share,
            self.tables_evicted,
            self.process_writes,
            self.process_write_failures,
            self.process_refusals,
            self.process_evictions,
            self.mappings_cut,
            self.python_write_failures,
            self.jit_methods,
            ends.join(" "),
            self.recovered_from_switch,
            self.handed_over_walked_by_rows
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
    refusals
        .iter()
        .map(|(uid, r)| format!("uid {uid}: {} processes, {} tables", r.entries, r.tables))
        .collect::<Vec<_>>()
        .join("; ")
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
    /// Set while the session starts: the workers run raised ([`START_NICE`]).
    starting: Arc<std::sync::atomic::AtomicBool>,
    /// Processes whose entry must be rewritten (or deleted).
    pub(super) dirty: FxHashSet<u32>,
    /// Totals.
    pub(in crate::unwind) stats: KernelTableStats,
    /// Binaries whose table could not be made, with why.
    pub(in crate::unwind) failures: Vec<String>,
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
    /// Processes the sideband saw exec since they began, with when: their
    /// real uid is the one `exec_times` holds for their pid if written since
    /// (the kernel's exec tracepoint runs after the exec's sideband records,
    /// so until it has, the record there is an earlier exec's). Any other
    /// pid's record there may be an earlier process's.
    pub(super) exec_seen: FxHashMap<u32, u64>,
    /// Processes with an entry in `python_procs`: the others' removals
    /// would be failing system calls, one at each entry write and exit.
    python_entries: FxHashSet<u32>,
    /// Processes given their `python_procs` entry before their exec (a
    /// command `record` spawns, held at its exec: `prime_python`), until
    /// their new image's mappings are written: neither their fork (a
    /// rewrite from their parent's mappings, ours) nor their exec before
    /// those mappings arrive may take the entry away.
    pub(super) primed: primed::PrimedProcesses,
    /// Counts samples, for the least recently sampled entry.
    sample_clock: u64,
    /// What was refused, per uid (all time).
    refusals: BTreeMap<u32, UidRefusals>,
    /// `refusals` as last said in a warning.
    refusals_warned: BTreeMap<u32, UidRefusals>,
}

/// Who a binary's table is charged to: its file's owner, or, for a file of
/// root's, its directory's (the system's where that is root's too: any user
/// can map root's files, but only root can put them in root's directories).
pub fn table_owner(bin: &Binary) -> u32 {
    use std::os::unix::fs::MetadataExt;
    let Some(meta) = bin.file.as_ref().and_then(|f| f.metadata().ok()) else {
        return u32::MAX;
    };
    if meta.uid() != SYSTEM_UID {
        return meta.uid();
    }
    match std::path::Path::new(&bin.path)
        .parent()
        .and_then(|d| std::fs::metadata(d).ok())
    {
        Some(d) if d.uid() != SYSTEM_UID => d.uid(),
        _ => SYSTEM_UID,
    }
}

/// The workers' nice while a session starts (as `capture`'s loading thread).
const START_NICE: i32 = -10;

impl KernelTables {
    /// The session's start is over: the workers go back to their nice
    /// (each at its next table).
    pub(in crate::unwind) fn started(&self) {
        self.starting
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// Take over the maps; start `workers` compiling threads (at least one).
    pub fn new(maps: KernelUnwindMaps, workers: usize) -> KernelTables {
        let capacity = maps.rows.capacity() as u32;
        let (to_worker, requests) = std::sync::mpsc::channel::<TableRequest>();
        let (results, from_worker) = std::sync::mpsc::channel();
        // One binary may take a quarter of the budget: a file whose CFI claims
        // millions of rows (any user can write one) cannot crowd out the rest,
        // nor make the compiler hold more than a few tens of MB.
        let max_rows = table_max_rows(capacity as usize);
        // With two, a program's large libraries (rustc's driver and LLVM,
        // ~0.4 s each) arrive together and are compiled side by side.
        let requests = Arc::new(std::sync::Mutex::new(requests));
        // The system's tables the workers compile, kept between runs (none
        // when the directory is not root's alone, or SYSPROF_TABLE_CACHE=off).
        let cache = cache::TableCache::open().map(Arc::new);
        let starting = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let mut spawned = Err(std::io::Error::other("no worker"));
        for i in 0..workers.max(1) {
            let (requests, results, cache) = (requests.clone(), results.clone(), cache.clone());
            let starting = starting.clone();
            let worker = std::thread::Builder::new()
                .name(format!("sysprof-tables{i}"))
                .spawn(move || {
                    // The running processes' tables, while the session
                    // starts, at the priority the programs load at: a
                    // process's stacks are copies until its entry is
                    // written, and at nice 0 beside a busy machine the
                    // tables waited their turn. Each table after at the
                    // nice the worker had.
                    let mut raised = Some(crate::sys::process::RaisedPriority::new(START_NICE));
                    loop {
                        let next = requests
                            .lock()
                            .map_err(|_| ())
                            .and_then(|r| r.recv().map_err(|_| ()));
                        if !starting.load(std::sync::atomic::Ordering::Relaxed) {
                            drop(raised.take());
                        }
                        let Ok((binary, serial, file, path, cacheable)) = next else {
                            break;
                        };
                        let started = std::time::Instant::now();
                        // A file that makes the compiler panic must not leave its
                        // table pending for ever (every sample would hand over).
                        let (result, cached) =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                compile_cached(
                                    cache.as_deref().filter(|_| cacheable),
                                    &file,
                                    max_rows,
                                )
                            }))
                            .unwrap_or((Err(TableError::Panicked), false));
                        let ns = started.elapsed().as_nanos() as u64;
                        if results
                            .send(Compiled {
                                binary,
                                path,
                                serial,
                                result,
                                ns,
                                cached,
                            })
                            .is_err()
                        {
                            break;
                        }
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
            starting,
            from_worker,
            dirty: FxHashSet::default(),
            stats: KernelTableStats {
                rows_capacity: capacity as u64,
                ..Default::default()
            },
            failures: Vec::new(),
            owners: FxHashMap::default(),
            owner_rows: FxHashMap::default(),
            evicted: Vec::new(),
            entries: FxHashMap::default(),
            uid_entries: FxHashMap::default(),
            refused: FxHashMap::default(),
            exec_seen: FxHashMap::default(),
            python_entries: FxHashSet::default(),
            primed: primed::PrimedProcesses::default(),
            sample_clock: 0,
            refusals: BTreeMap::new(),
            refusals_warned: BTreeMap::new(),
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
            out.push(format!(
                "uid {uid}: {}; those stacks were unwound from stack copies",
                parts.join(", and ")
            ));
            self.refusals_warned.insert(uid, r);
        }
        out
    }
}
