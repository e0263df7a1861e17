//! Names of a window's JIT frames: from each process's perf map and the
//! jitdump it mapped, read within its user's share of the window's budget;
//! code in anonymous memory that neither names is one function per process.
//!
//! In: the window's [`FrameKey::Jit`] frames and what the process table
//! noted of each process's JIT code ([`JitSources`]). Out: those frames
//! named, a library for each process whose JIT frames have one, and
//! warnings saying what could not be read.

use std::os::unix::fs::FileExt;

use rustc_hash::FxHashMap;

use super::process::ProcessTable;
use super::replay::FrameKey;
use super::symbolicate::warn_once;
use crate::binaries::perfmap::{self, PerfMap};
use crate::binaries::{Binaries, Binary, BinaryIndex};
use crate::model::recording::{FrameRecord, LibRecord};
use crate::symbolize::{self, AddrInfo};

/// Most perf-map bytes read per window, split evenly between the users
/// whose processes have JIT frames in it (a line at a time, only the
/// sampled symbols kept): four 70-MB maps of one user took `record` to
/// 293-400 MB and stretched a 5-s recording to 11-20 s. Read and parsed
/// at ~300 MB/s here (128 MiB: 0.42 s of CPU).
const PERF_MAPS_PER_WINDOW: u64 = 128 << 20;

/// Where JIT frames get their names: perf maps (found by pid) and jitdump
/// files (mapped by the process), as the process table noted them.
pub(super) struct JitSources<'a>(pub &'a ProcessTable);

impl JitSources<'_> {
    /// `pid`'s (uid, in-namespace pid), if read when it mapped JIT code.
    fn identity(&self, pid: u32) -> Option<(u32, u32)> {
        self.0.live_of(pid).and_then(|l| l.jit_identity).flatten()
    }

    /// The jitdump file `pid` mapped.
    fn dump(&self, pid: u32) -> Option<BinaryIndex> {
        self.0.live_of(pid).and_then(|l| l.jitdump)
    }

    /// The anonymous executable region of `pid` holding `address`, as
    /// (start, end), if it is in one.
    fn anonymous_region(&self, pid: u32, address: u64) -> Option<(u64, u64)> {
        let m = self.0.processes.get(&pid)?.lookup(address)?;
        m.anon.then_some((m.start, m.end))
    }

    /// The runtime that made `pid`'s JIT code: the process's name (`java`, `node`).
    fn runtime(&self, pid: u32) -> String {
        self.0
            .processes
            .get(&pid)
            .map(|p| p.display_name(pid))
            .unwrap_or_else(|| format!("pid {pid}"))
    }
}

/// Name JIT frames from each process's perf map; each process with one gets
/// a library named after its map file.
pub(super) fn symbolicate_jit(
    keys: &[FrameKey],
    frames: &mut [FrameRecord],
    libs: &mut Vec<LibRecord>,
    jit: &JitSources<'_>,
    binaries: &Binaries,
    warnings: &mut Vec<String>,
) {
    let mut by_pid: FxHashMap<u32, Vec<usize>> = FxHashMap::default();
    for (i, k) in keys.iter().enumerate() {
        if let FrameKey::Jit { pid, .. } = k {
            by_pid.entry(*pid).or_default().push(i);
        }
    }
    // Each user's share of the perf-map bytes read this window: the users
    // whose processes have JIT frames split PERF_MAPS_PER_WINDOW evenly.
    let identities: FxHashMap<u32, Option<(u32, u32)>> = by_pid
        .keys()
        .map(|&pid| {
            let id = jit.identity(pid).or_else(|| perfmap::process_identity(pid));
            (pid, id)
        })
        .collect();
    let users: std::collections::BTreeSet<Option<u32>> =
        identities.values().map(|id| id.map(|(u, _)| u)).collect();
    let mut naming = JitNaming {
        keys,
        jit,
        binaries,
        warnings,
        share: PERF_MAPS_PER_WINDOW / users.len().max(1) as u64,
        read_by_user: FxHashMap::default(),
        cut_by_user: FxHashMap::default(),
        unknown_user: (0, None),
    };
    let mut by_pid: Vec<(u32, Vec<usize>)> = by_pid.into_iter().collect();
    by_pid.sort_unstable_by_key(|(pid, _)| *pid);
    for (pid, idxs) in by_pid {
        let identity = identities.get(&pid).copied().flatten();
        naming.name_process(pid, identity, idxs, frames, libs);
    }
    naming.warn_unread();
}

/// One window's JIT naming: what it reads from, and the budget its
/// processes share (each user's share of the bytes read, what each user
/// has read of it and left unread).
struct JitNaming<'a> {
    keys: &'a [FrameKey],
    jit: &'a JitSources<'a>,
    binaries: &'a Binaries,
    warnings: &'a mut Vec<String>,
    /// Bytes of perf maps and jitdumps each user may have read this window.
    share: u64,
    read_by_user: FxHashMap<Option<u32>, u64>,
    /// Per user: bytes left unread, in how many files.
    cut_by_user: FxHashMap<Option<u32>, (u64, u32)>,
    /// Perf maps not read because their process's user is unknown: how
    /// many, and the first's path.
    unknown_user: (usize, Option<String>),
}

impl JitNaming<'_> {
    /// Name the JIT frames of `pid` (the frames at `idxs`), from its perf
    /// map and jitdump, else by the anonymous region they are in; adds the
    /// library they get, if any.
    fn name_process(
        &mut self,
        pid: u32,
        identity: Option<(u32, u32)>,
        idxs: Vec<usize>,
        frames: &mut [FrameRecord],
        libs: &mut Vec<LibRecord>,
    ) {
        let keys = self.keys;
        let (uid, ns_pid) = match identity {
            Some((u, n)) => (Some(u), n),
            None => (None, pid),
        };
        let mut wanted: Vec<u64> = idxs.iter().map(|&i| keys[i].address()).collect();
        wanted.sort_unstable();
        wanted.dedup();
        let mut map = self.perf_map(pid, uid, ns_pid, &wanted);
        let mut lib_path = format!("/tmp/perf-{ns_pid}.map");
        // The jitdump the process mapped: read through the descriptor opened
        // when it was mapped, so it is the file the JIT wrote.
        let binaries = self.binaries;
        if let Some(bin) = self.jit.dump(pid).map(|b| binaries.get(b)) {
            match self.jitdump(bin, uid, &wanted) {
                Some(d) => {
                    let m = map.get_or_insert_with(Default::default);
                    m.symbols.extend(d.symbols);
                    m.symbols.sort_by_key(|s| s.start);
                    lib_path = bin.path.clone();
                }
                None => warn_once(
                    self.warnings,
                    format!(
                        "{}: not a readable jitdump file; its JIT frames stay unnamed",
                        bin.path
                    ),
                ),
            }
        }
        // Code in anonymous memory that no map names is one function per
        // process ("[JIT] java"), not one per address: a JVM without a perf
        // map showed 746 nodes of bare addresses, each a few samples.
        let regions: Vec<Option<(u64, u64)>> = idxs
            .iter()
            .map(|&i| self.jit.anonymous_region(pid, keys[i].address()))
            .collect();
        if map.is_none() && regions.iter().all(Option::is_none) {
            return;
        }
        let runtime = self.jit.runtime(pid);
        let lib = libs.len() as u32;
        libs.push(jit_lib(pid, map.is_some(), lib_path, &runtime));
        for (i, region) in idxs.into_iter().zip(regions) {
            let f = &mut frames[i];
            let address = keys[i].address();
            if let Some(sym) = map.as_ref().and_then(|m| m.lookup(address)) {
                f.lib = lib;
                f.symbols = AddrInfo {
                    symbol_start: sym.start,
                    symbol_offset: address - sym.start,
                    symbol_size: Some(sym.size),
                    funcs: vec![symbolize::FuncAtAddr {
                        name: sym.name.clone(),
                        file: None,
                        line: None,
                        start_line: None,
                    }],
                };
            } else if let Some((start, end)) = region {
                f.lib = lib;
                f.symbols = AddrInfo {
                    symbol_start: start,
                    symbol_offset: address - start,
                    symbol_size: Some(end - start),
                    funcs: vec![symbolize::FuncAtAddr {
                        name: format!("[JIT] {runtime}"),
                        file: None,
                        line: None,
                        start_line: None,
                    }],
                };
            } else if map.is_some() {
                // In no mapping seen: kept as an address of the map's library.
                f.lib = lib;
            }
        }
    }

    /// The symbols of `pid`'s perf map holding `wanted` addresses, read
    /// within what is left of its user's share.
    fn perf_map(
        &mut self,
        pid: u32,
        uid: Option<u32>,
        ns_pid: u32,
        wanted: &[u64],
    ) -> Option<PerfMap> {
        // The map lives in the process's own /tmp: through its root while it
        // runs (containers), in ours once it has exited.
        let root = format!("/proc/{pid}/root");
        let root = if std::path::Path::new(&root).exists() {
            root
        } else {
            String::new()
        };
        let used = self.read_by_user.entry(uid).or_default();
        let allowance = self.share.saturating_sub(*used);
        let loaded = perfmap::load_wanted(uid, ns_pid, &root, wanted, allowance);
        match loaded {
            Ok(m) => {
                *used += m.read;
                if m.left > 0 {
                    self.note_cut(uid, m.left);
                }
                Some(m.map)
            }
            // A process gone before its user was read: a file by its pid in
            // /tmp is as likely an earlier process's, left behind (node
            // --perf-basic-prof leaves one per run). One line for all of
            // them, not one per pid: a `record -a` beside a shell loop
            // printed 48.
            Err(perfmap::PerfMapError::UnknownUser { path }) => {
                self.unknown_user.0 += 1;
                self.unknown_user.1.get_or_insert(path);
                None
            }
            Err(e) => {
                if e.kind() != std::io::ErrorKind::NotFound {
                    warn_once(self.warnings, format!("perf map of pid {pid}: {e}"));
                }
                None
            }
        }
    }

    /// The symbols of the jitdump `bin` holding `wanted` addresses; None if
    /// it cannot be read or parsed.
    fn jitdump(&mut self, bin: &Binary, uid: Option<u32>, wanted: &[u64]) -> Option<PerfMap> {
        // Within the same share of the user's as its perf maps.
        let used = self.read_by_user.entry(uid).or_default();
        // Positional reads: the descriptor's offset is shared with
        // whoever read it before (the unwinder looked for ELF sections).
        let f = bin.file.as_ref()?;
        let size = f.metadata().ok()?.len();
        let len = size
            .min(perfmap::MAX_PERF_MAP_BYTES)
            .min(self.share.saturating_sub(*used)) as usize;
        let mut bytes = vec![0u8; len];
        let mut done = 0;
        while done < len {
            match f.read_at(&mut bytes[done..], done as u64) {
                Ok(0) | Err(_) => break,
                Ok(n) => done += n,
            }
        }
        bytes.truncate(done);
        *used += done as u64;
        if size > done as u64 {
            self.note_cut(uid, size - done as u64);
        }
        let mut d = crate::binaries::jitdump::parse(&bytes)?;
        // Only the sampled symbols are kept, as of a perf map.
        d.symbols
            .retain(|s| perfmap::holds_any(wanted, s.start, s.size));
        Some(d)
    }

    /// `left` bytes of one file of `uid`'s not read.
    fn note_cut(&mut self, uid: Option<u32>, left: u64) {
        let cut = self.cut_by_user.entry(uid).or_default();
        cut.0 += left;
        cut.1 += 1;
    }

    /// Warn of the perf maps of unknown users and of what each user's share
    /// left unread.
    fn warn_unread(self) {
        if let (n, Some(first)) = self.unknown_user {
            warn_once(self.warnings, format!(
                "{n} perf map(s) of processes gone before their user was known ignored (e.g. {first}): a file by their pid may be an earlier process's; their JIT frames stay unnamed"
            ));
        }
        let mut cut: Vec<_> = self.cut_by_user.into_iter().collect();
        cut.sort_unstable();
        for (uid, (left, maps)) in cut {
            let who = uid.map_or_else(|| "an unknown user".to_string(), |u| format!("uid {u}"));
            warn_once(self.warnings, format!(
                "perf maps and jitdumps of {who}: {:.1} MiB of {maps} file(s) not read, past the user's share of {} MiB a window; JIT frames named there stay unnamed",
                left as f64 / (1 << 20) as f64,
                self.share >> 20
            ));
        }
    }
}

/// The library of `pid`'s JIT frames: its map file when one names them,
/// else its anonymous code.
fn jit_lib(pid: u32, mapped: bool, lib_path: String, runtime: &str) -> LibRecord {
    if mapped {
        let lib_name = lib_path.rsplit('/').next().unwrap_or(&lib_path).to_string();
        LibRecord {
            path: lib_path,
            name: format!("JIT ({lib_name})"),
            build_id: None,
        }
    } else {
        LibRecord {
            path: format!("[anonymous code of pid {pid}]"),
            name: format!("JIT ({runtime})"),
            build_id: None,
        }
    }
}
