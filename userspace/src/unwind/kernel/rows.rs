//! The tables in the shared rows array: compiled once per binary (small
//! ones here, large ones on a worker), placed first-fit within each owner's
//! share, evicted for the system's or a smaller holder's, freed when no
//! process maps the binary any more (and the kernel memory of a chunk no
//! table has rows in given back).
//!
//! In: binaries asked for by the process entries, with their files and
//! owners. Out: each binary's [`TableState`] (rows, pending, none, or walked
//! in userspace) for the entries, rows written into `unwind_rows`, and the
//! failures and refusals said.

use super::{KernelTables, SYSTEM_UID};
use crate::binaries::elf::{ElfLimits, ElfReader};
use crate::binaries::BinaryIndex;
use crate::bpf::abi::{UNWIND_TABLE_PENDING, UNWIND_TABLE_USERSPACE};
use crate::unwind::tables::{compile, CfiError, CfiSection, Row};

/// Why a binary got no table (one line, after its path).
#[derive(Debug, thiserror::Error)]
pub(super) enum TableError {
    /// Its CFI section could not be read.
    #[error("{0}")]
    Elf(String),
    /// Its CFI did not compile.
    #[error(transparent)]
    Cfi(#[from] CfiError),
    /// The compiler panicked on it.
    #[error("the table compiler failed on it")]
    Panicked,
}

/// A table to compile: the binary, the request's serial, a handle on its
/// file (of its own: reads are positional), its path, whether it is the
/// system's (its table may be kept on disk).
pub(super) type TableRequest = (BinaryIndex, u64, std::fs::File, String, bool);

pub(super) enum TableState {
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

pub(super) struct Compiled {
    pub(super) binary: BinaryIndex,
    /// The binary's path, for messages.
    pub(super) path: String,
    pub(super) serial: u64,
    pub(super) result: Result<Vec<Row>, TableError>,
    pub(super) ns: u64,
    /// Read from the disk cache, not compiled.
    pub(super) cached: bool,
}

/// The table index of `pid`'s JIT code (`put_jit_table`): tables are kept
/// by binary index, and binaries are numbered from 0, far below this bit.
pub(in crate::unwind) fn jit_table_index(pid: u32) -> BinaryIndex {
    0x8000_0000 | pid
}

/// The table index a JVM's code heap's mapping names: no rows, the
/// kernel walks its frames by their blobs' frame sizes
/// (`UNWIND_TABLE_HOTSPOT`). Below the JIT tables' bit, above any binary.
pub(in crate::unwind) const HOTSPOT_TABLE_INDEX: BinaryIndex = 0x7fff_ffff;

/// Most rows one table may take: a quarter of the array.
pub(super) fn table_max_rows(capacity: usize) -> usize {
    (capacity / 4).max(1)
}

/// CFI at most this large is compiled on the event loop (~8 ms a MiB: a
/// program's own small binary, at once; libc's 150 KiB go to a worker, so
/// that starting with a hundred processes' libraries does not delay the start).
const COMPILE_HERE_BYTES: usize = 32 << 10;

/// Read a binary's CFI (`.eh_frame`, or `.debug_frame` when it has no
/// FDEs there) and compile its table of at most `max_rows` rows.
/// [`compile_table`], or the rows kept for the same file by an earlier run
/// (`cache` only for the system's binaries), kept for a later one.
/// True when the rows came from the cache.
pub(super) fn compile_cached(
    cache: Option<&super::cache::TableCache>,
    file: &std::fs::File,
    max_rows: usize,
) -> (Result<Vec<Row>, TableError>, bool) {
    if let Some(rows) = cache.and_then(|c| c.get(file, max_rows)) {
        return (Ok(rows), true);
    }
    let result = compile_table(file, max_rows);
    if let (Some(c), Ok(rows)) = (cache, &result) {
        c.put(file, max_rows, rows);
        // The CFI just read (megabytes for a large binary, pages its
        // process never touched) stays charged to our cgroup otherwise;
        // what the binary's processes map is not dropped.
        crate::sys::cgroup_memory::drop_cached_pages(file);
    }
    (result, false)
}

pub(super) fn compile_table(file: &std::fs::File, max_rows: usize) -> Result<Vec<Row>, TableError> {
    let elf = ElfReader::new(file, ElfLimits::default());
    let cfi = |name| elf.cfi(name).map_err(|e| TableError::Elf(e.to_string()));
    let table = if let Some(eh) = cfi(".eh_frame")?.filter(|c| c.fdes > 0) {
        compile(
            &CfiSection {
                bytes: &eh.bytes,
                addr: eh.info.addr,
                is_eh_frame: true,
            },
            max_rows,
        )?
    } else if let Some(df) = cfi(".debug_frame")?.filter(|c| c.fdes > 0) {
        compile(
            &CfiSection {
                bytes: &df.bytes,
                addr: 0,
                is_eh_frame: false,
            },
            max_rows,
        )?
    } else {
        // No FDEs (a file of zeros claims none either): frame pointers.
        return Ok(Vec::new());
    };
    Ok(table.rows)
}

impl KernelTables {
    /// Ask for `binary`'s table (from `file`, when it has one) if nobody
    /// has yet, charged to `owner`. A small one (most programs and
    /// libraries: libc's 150 KiB of .eh_frame compiles in 2 ms) is compiled
    /// here and now, so a process that just started walks in the kernel
    /// from its next sample; a large one goes to the worker. The size is the
    /// section header's claim, used only to choose where: what is read is
    /// bounded either way.
    pub(in crate::unwind) fn want(
        &mut self,
        binary: BinaryIndex,
        path: &str,
        owner: u32,
        file: Option<&std::fs::File>,
    ) {
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
            // Not from the disk cache: a small table compiles in a few
            // milliseconds, and writing files here delayed the event loop
            // (304 small libraries left 295 of 2,008 samples walking stale
            // entries, `budgets::more_mappings_than_an_entry_holds_stay_whole`).
            let (result, cached) = (
                compile_table(file, table_max_rows(self.stats.rows_capacity as usize)),
                false,
            );
            self.serial += 1;
            self.tables.insert(binary, TableState::Pending(self.serial));
            self.place(Compiled {
                binary,
                path: path.to_string(),
                serial: self.serial,
                result,
                ns: started.elapsed().as_nanos() as u64,
                cached,
            });
            return;
        }
        let state = match (&self.to_worker, file.try_clone()) {
            (Some(tx), Ok(handle)) => {
                self.serial += 1;
                match tx.send((
                    binary,
                    self.serial,
                    handle,
                    path.to_string(),
                    owner == SYSTEM_UID,
                )) {
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
    pub(in crate::unwind) fn receive(&mut self) -> Vec<BinaryIndex> {
        let mut ready = std::mem::take(&mut self.evicted);
        while let Ok(c) = self.from_worker.try_recv() {
            let binary = c.binary;
            if self.place(c) {
                ready.push(binary);
            }
        }
        ready
    }

    /// Whether `binary`'s table was asked for and is not in yet.
    pub(in crate::unwind) fn is_pending(&self, binary: BinaryIndex) -> bool {
        matches!(self.tables.get(&binary), Some(TableState::Pending(_)))
    }

    /// Whether any table asked for is not in yet.
    pub(in crate::unwind) fn any_pending(&self) -> bool {
        self.tables
            .values()
            .any(|t| matches!(t, TableState::Pending(_)))
    }

    /// The tables finished since, or else the next one (waiting at most
    /// until `deadline`); returns the binaries now ready, or None when no
    /// worker is left to finish one.
    pub(in crate::unwind) fn wait_next(
        &mut self,
        deadline: std::time::Instant,
    ) -> Option<Vec<BinaryIndex>> {
        let mut ready = self.receive();
        if !ready.is_empty() {
            return Some(ready);
        }
        let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) else {
            return Some(ready);
        };
        match self.from_worker.recv_timeout(left) {
            Ok(c) => {
                let binary = c.binary;
                if self.place(c) {
                    ready.push(binary);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return None,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        ready.append(&mut self.receive());
        Some(ready)
    }

    /// Put a compiled table in the rows array (or note why not); false if
    /// it was forgotten (or replaced) since it was asked for.
    fn place(&mut self, c: Compiled) -> bool {
        {
            if !matches!(self.tables.get(&c.binary), Some(TableState::Pending(s)) if *s == c.serial)
            {
                return false;
            }
            self.stats.compile_ns += c.ns;
            self.stats.tables_cached += c.cached as u64;
            let owner = self.owners.get(&c.binary).copied().unwrap_or(SYSTEM_UID);
            let len = c.result.as_ref().map(|r| r.len() as u64).unwrap_or(0);
            // A user other than the system may hold half the rows: the
            // rest stays for the system's and other users' binaries.
            let over_share =
                owner != SYSTEM_UID && self.rows_of(owner) + len > self.stats.rows_capacity / 2;
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
                Ok(rows) if !rows.is_empty() => match self
                    .allocate(rows.len() as u32)
                    .or_else(|| self.evict_for(owner, rows.len() as u32))
                {
                    Some(start) if self.maps.rows.write(start as usize, &rows).is_err() => {
                        self.release(start, rows.len() as u32);
                        if self.failures.len() < 100 {
                            self.failures.push(format!(
                                "{}: cannot write its table into the kernel's array",
                                c.path
                            ));
                        }
                        TableState::Userspace
                    }
                    Some(start) => {
                        self.stats.tables += 1;
                        *self.owner_rows.entry(owner).or_default() += rows.len() as u64;
                        self.stats.rows_in_use += rows.len() as u64;
                        self.stats.rows_peak = self.stats.rows_peak.max(self.stats.rows_in_use);
                        self.stats.rows_kernel_bytes = self.maps.rows.allocated_bytes();
                        self.stats.rows_kernel_bytes_peak = self
                            .stats
                            .rows_kernel_bytes_peak
                            .max(self.stats.rows_kernel_bytes);
                        TableState::Ready {
                            start,
                            len: rows.len() as u32,
                        }
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
                    let too_large = matches!(e, TableError::Cfi(CfiError::TooManyRows { .. }));
                    if self.failures.len() < 100 {
                        let how = if too_large {
                            "unwound from stack copies"
                        } else {
                            "walked by frame pointer"
                        };
                        self.failures
                            .push(format!("{}: {e}; its frames are {how}", c.path));
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
                .filter(|&(&o, &rows)| {
                    o != SYSTEM_UID
                        && o != owner
                        && rows > 0
                        && (owner == SYSTEM_UID || rows > after)
                })
                .max_by_key(|&(&o, &rows)| (rows, o))
                .map(|(&o, _)| o)?;
            let (binary, start, table_len) = self
                .tables
                .iter()
                .filter_map(|(b, t)| match t {
                    TableState::Ready { start, len } if self.owners.get(b) == Some(&victim) => {
                        Some((*b, *start, *len))
                    }
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
        // The chunks wholly in the free range go back to the kernel.
        self.maps
            .rows
            .release(start as usize, (start + len) as usize);
        self.stats.rows_kernel_bytes = self.maps.rows.allocated_bytes();
    }

    /// Put `rows` (JIT code's, made by the runtime that knows its frames:
    /// `crate::runtimes::hotspot::frame_sizes`) in as
    /// `pid`'s JIT table, charged to `owner` like a file's, in place of the
    /// one it had; empty rows just free it.
    pub(in crate::unwind) fn put_jit_table(
        &mut self,
        pid: u32,
        owner: u32,
        rows: Vec<crate::unwind::tables::Row>,
    ) {
        let binary = jit_table_index(pid);
        self.forget(binary);
        self.owners.insert(binary, owner);
        self.serial += 1;
        self.tables.insert(binary, TableState::Pending(self.serial));
        self.place(Compiled {
            binary,
            path: format!("compiled Java code of pid {pid}"),
            serial: self.serial,
            result: Ok(rows),
            ns: 0,
            cached: false,
        });
    }

    /// `binary` is gone from every process: free its rows.
    pub(in crate::unwind) fn forget(&mut self, binary: BinaryIndex) {
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
    pub(in crate::unwind) fn table_of(&self, binary: BinaryIndex) -> (u32, u32) {
        if binary == HOTSPOT_TABLE_INDEX {
            return (crate::bpf::abi::UNWIND_TABLE_HOTSPOT, 0);
        }
        match self.tables.get(&binary) {
            Some(TableState::Ready { start, len }) => (*start, *len),
            Some(TableState::Pending(_)) => (UNWIND_TABLE_PENDING, 0),
            Some(TableState::Userspace) => (UNWIND_TABLE_USERSPACE, 0),
            _ => (0, 0),
        }
    }
}
