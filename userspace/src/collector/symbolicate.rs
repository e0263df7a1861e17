//! Symbolication of a window's frames: one blazesym call per binary, the
//! kernel's from the kallsyms snapshot, JIT code from perf maps and jitdumps.
//!
//! In: the window's distinct [`FrameKey`]s, the binaries they point into,
//! the kernel symbol table. Out: the libraries and, per frame, what is
//! known of its code (functions with inlined calls, file and line), or a
//! warning saying why a library could not be read; its frames keep their
//! library and address.

use rustc_hash::FxHashMap;

use super::process::ProcessTable;
use super::replay::FrameKey;
use crate::binaries::debugfile;
use crate::binaries::elf::{ElfLimits, ElfReader};
use crate::binaries::{Binaries, BinaryIndex};
use crate::model::recording::{FrameRecord, LibRecord, NO_LIB};
use crate::symbolize::kernel::KernelSymbols;
use crate::symbolize::{self, names, AddrInfo, Symbolicator};

/// A kernel address from the snapshot: the function it is in.
fn kernel_addr_info(kernel: &KernelSymbols, addr: u64) -> AddrInfo {
    match kernel.lookup(addr) {
        Some(sym) => AddrInfo {
            symbol_start: sym.start,
            symbol_offset: addr - sym.start,
            symbol_size: sym.size,
            funcs: vec![symbolize::FuncAtAddr {
                name: sym.name.to_string(),
                file: None,
                line: None,
                start_line: None,
            }],
        },
        None => AddrInfo::default(),
    }
}

/// Names found in earlier windows, by (binary, file offset). The agent's
/// windows meet the same hot addresses again and again; each is looked up
/// once while its binary stays open. Bounded: past its budget it starts
/// over (a cold window costs one lookup per address, as `record` does).
#[derive(Debug, Default)]
pub(super) struct NameCache {
    map: FxHashMap<(BinaryIndex, u64), AddrInfo>,
    bytes: usize,
    /// What naming each binary needs, read once ([`names::prepare`]).
    prepared: FxHashMap<BinaryIndex, names::PreparedBinary>,
    prepared_bytes: usize,
    /// Addresses the last window had to look up (not in the cache).
    pub last_lookups: usize,
    /// Windows in a row that found every name in the cache.
    pub idle_windows: u32,
}

/// Most perf-map bytes read per window, split evenly between the users
/// whose processes have JIT frames in it (a line at a time, only the
/// sampled symbols kept): four 70-MB maps of one user took `record` to
/// 293-400 MB and stretched a 5-s recording to 11-20 s. Read and parsed
/// at ~300 MB/s here (128 MiB: 0.42 s of CPU).
const PERF_MAPS_PER_WINDOW: u64 = 128 << 20;

/// Most bytes of names kept between windows.
const NAME_CACHE_BYTES: usize = 16 << 20;

impl NameCache {
    fn insert(&mut self, binary: BinaryIndex, address: u64, info: &AddrInfo) {
        let size = 96
            + info
                .funcs
                .iter()
                .map(|f| 48 + f.name.len() + f.file.as_ref().map_or(0, |x| x.len()))
                .sum::<usize>();
        if self.bytes + size > NAME_CACHE_BYTES {
            self.map = FxHashMap::default();
            self.bytes = 0;
        }
        self.bytes += size;
        self.map.insert((binary, address), info.clone());
    }

    /// Forget released binaries' names (their indices will be reused).
    pub fn forget(&mut self, released: &[BinaryIndex]) {
        if !released.is_empty() {
            let gone: rustc_hash::FxHashSet<BinaryIndex> = released.iter().copied().collect();
            self.map.retain(|(b, _), _| !gone.contains(b));
            self.prepared.retain(|b, _| !gone.contains(b));
            self.prepared_bytes = self.prepared.values().map(|p| p.bytes()).sum();
        }
    }

    /// Bytes of names held (an estimate).
    pub fn bytes(&self) -> usize {
        self.bytes + self.prepared_bytes
    }

    /// Forget every name and prepared binary (looked up again as needed).
    pub fn clear(&mut self) {
        *self = NameCache::default();
    }
}

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

/// Symbolicate every distinct frame, one blazesym call per binary.
// The collector's parts it needs, each borrowed on its own (a struct of
// them would only move the list).
#[allow(clippy::too_many_arguments)]
pub(super) fn symbolicate(
    binaries: &mut Binaries,
    symbolicator: &mut Symbolicator,
    cache: &mut NameCache,
    kernel: &KernelSymbols,
    keys: &[FrameKey],
    jit: &JitSources<'_>,
    python: &crate::runtimes::frames::RuntimeFrames,
    debuginfod: bool,
    limits: ElfLimits,
    warnings: &mut Vec<String>,
) -> (Vec<LibRecord>, Vec<FrameRecord>) {
    let warn = |w: String, warnings: &mut Vec<String>| {
        if !warnings.contains(&w) {
            warnings.push(w);
        }
    };
    let mut by_binary: FxHashMap<u32, Vec<u32>> = FxHashMap::default();
    for (i, k) in keys.iter().enumerate() {
        if let FrameKey::Binary { binary, .. } = k {
            by_binary.entry(*binary).or_default().push(i as u32);
        }
    }
    // The libraries of this window: the binaries its frames point into,
    // then the kernel, then JIT code (added by symbolicate_jit).
    let mut used: Vec<BinaryIndex> = by_binary
        .keys()
        .copied()
        .filter(|&b| (b as usize) < binaries.len())
        .collect();
    used.sort_unstable();
    let lib_of: FxHashMap<BinaryIndex, u32> = used
        .iter()
        .enumerate()
        .map(|(i, &b)| (b, i as u32))
        .collect();
    let kernel_lib = used.len() as u32;
    let mut frames: Vec<FrameRecord> = keys
        .iter()
        .map(|k| match *k {
            FrameKey::Kernel(address) => FrameRecord {
                lib: kernel_lib,
                address: address.wrapping_sub(kernel.text),
                kernel: true,
                symbols: kernel_addr_info(kernel, address),
                pseudo: false,
            },
            FrameKey::Pseudo(p) => FrameRecord {
                lib: NO_LIB,
                address: 0,
                kernel: false,
                symbols: AddrInfo {
                    funcs: vec![symbolize::FuncAtAddr {
                        name: p.name().to_string(),
                        file: None,
                        line: None,
                        start_line: None,
                    }],
                    ..AddrInfo::default()
                },
                pseudo: true,
            },
            FrameKey::Binary { binary, offset } => FrameRecord {
                lib: lib_of.get(&binary).copied().unwrap_or(NO_LIB),
                address: offset,
                kernel: false,
                symbols: AddrInfo::default(),
                pseudo: false,
            },
            FrameKey::Jit { address, .. } => FrameRecord {
                lib: NO_LIB,
                address,
                kernel: false,
                symbols: AddrInfo::default(),
                pseudo: false,
            },
            // Named from its code object when it was sampled; no library
            // (the interpreter's is the native eval frame it replaced).
            FrameKey::Runtime(i) => FrameRecord {
                lib: NO_LIB,
                address: 0,
                kernel: false,
                symbols: match python.at(i) {
                    // One function, or a compiled one and those inlined
                    // into it there: one func each, outermost first, as a
                    // native frame's inlined functions.
                    Some(f) => AddrInfo {
                        funcs: f
                            .iter()
                            .map(|(code, line)| symbolize::FuncAtAddr {
                                name: code.qualname.to_string(),
                                // None: a V8 builtin written in JavaScript
                                // (`forEach`), which has no script (V8's
                                // sampler gives it no URL either), so is no
                                // Python function. A Java method without a
                                // source file keeps its empty one: its name
                                // (ending in its parameter list) says Java.
                                file: (!code.filename.is_empty() || code.qualname.ends_with(')'))
                                    .then(|| code.filename.to_string()),
                                // 0: not known (a compiled Java frame's line).
                                line: (*line != 0).then_some(*line),
                                start_line: (code.first_line != 0).then_some(code.first_line),
                            })
                            .collect(),
                        ..AddrInfo::default()
                    },
                    None => AddrInfo::default(),
                },
                pseudo: false,
            },
            FrameKey::Empty => FrameRecord {
                lib: NO_LIB,
                address: 0,
                kernel: false,
                symbols: AddrInfo::default(),
                pseudo: false,
            },
        })
        .collect();
    // Addresses named in an earlier window take that name; the rest are looked up.
    let mut missing: FxHashMap<BinaryIndex, Vec<u32>> = FxHashMap::default();
    for &b in &used {
        for &i in &by_binary[&b] {
            match cache.map.get(&(b, keys[i as usize].address())) {
                Some(info) => frames[i as usize].symbols = info.clone(),
                None => missing.entry(b).or_default().push(i),
            }
        }
    }
    cache.last_lookups = missing.values().map(Vec::len).sum();
    cache.idle_windows = if cache.last_lookups == 0 {
        cache.idle_windows + 1
    } else {
        0
    };
    // Debug files from debuginfod for sampled binaries that have none here.
    let mut fetched: FxHashMap<u32, String> = FxHashMap::default();
    if debuginfod {
        let wanted: Vec<(u32, Vec<u8>)> = used
            .iter()
            .filter(|b| missing.contains_key(b))
            .filter_map(|&b| {
                let bin = binaries.get_mut(b);
                if bin.build_id.is_none() {
                    bin.build_id = bin
                        .file
                        .as_ref()
                        .and_then(|f| ElfReader::new(f, ElfLimits::default()).build_id());
                }
                let id = bin.build_id.clone()?;
                debugfile::by_build_id(&id).is_none().then_some((b, id))
            })
            .collect();
        let (found, errors) = symbolize::fetch_debuginfod(wanted);
        fetched.extend(found);
        for e in errors {
            warn(e, warnings);
        }
    }
    for &b in &used {
        let Some(idxs) = missing.get(&b) else {
            continue;
        };
        let addrs: Vec<u64> = idxs.iter().map(|&i| keys[i as usize].address()).collect();
        if !cache.prepared.contains_key(&b) {
            let p = names::prepare(binaries.get(b), limits, fetched.get(&b).map(String::as_str));
            if cache.prepared_bytes + p.bytes() > NAME_CACHE_BYTES {
                cache.prepared.clear();
                cache.prepared_bytes = 0;
            }
            cache.prepared_bytes += p.bytes();
            cache.prepared.insert(b, p);
        }
        let prepared = cache.prepared.get_mut(&b).expect("inserted above");
        let names =
            names::symbolize_prepared(symbolicator, binaries.get(b), prepared, &addrs, limits);
        for (&i, info) in idxs.iter().zip(names.infos) {
            cache.insert(b, keys[i as usize].address(), &info);
            frames[i as usize].symbols = info;
        }
        for w in names.warnings {
            warn(w, warnings);
        }
        binaries.get_mut(b).build_id = names.build_id;
    }
    let mut libs = Vec::with_capacity(used.len() + 1);
    for &b in &used {
        let bin = binaries.get(b);
        libs.push(LibRecord {
            path: bin.path.clone(),
            name: bin.name.clone(),
            build_id: bin.build_id.clone(),
        });
    }
    libs.push(LibRecord {
        path: "[kernel.kallsyms]".into(),
        name: "[kernel.kallsyms]".into(),
        build_id: symbolize::kernel_build_id(),
    });
    symbolicate_jit(keys, &mut frames, &mut libs, jit, binaries, warnings);
    (libs, frames)
}

/// Name JIT frames from each process's perf map; each process with one gets
/// a library named after its map file.
fn symbolicate_jit(
    keys: &[FrameKey],
    frames: &mut [FrameRecord],
    libs: &mut Vec<LibRecord>,
    jit: &JitSources<'_>,
    binaries: &Binaries,
    warnings: &mut Vec<String>,
) {
    let mut warn = |w: String| {
        if !warnings.contains(&w) {
            warnings.push(w);
        }
    };
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
            let id = jit
                .identity(pid)
                .or_else(|| crate::binaries::perfmap::process_identity(pid));
            (pid, id)
        })
        .collect();
    let users: std::collections::BTreeSet<Option<u32>> =
        identities.values().map(|id| id.map(|(u, _)| u)).collect();
    let share = PERF_MAPS_PER_WINDOW / users.len().max(1) as u64;
    let mut read_by_user: FxHashMap<Option<u32>, u64> = FxHashMap::default();
    let mut cut_by_user: FxHashMap<Option<u32>, (u64, u32)> = FxHashMap::default();
    // Perf maps not read because their process's user is unknown: how
    // many, and the first's path.
    let mut unknown_user: (usize, Option<String>) = (0, None);
    let mut by_pid: Vec<(u32, Vec<usize>)> = by_pid.into_iter().collect();
    by_pid.sort_unstable_by_key(|(pid, _)| *pid);
    for (pid, idxs) in by_pid {
        let (uid, ns_pid) = match identities.get(&pid).copied().flatten() {
            Some((u, n)) => (Some(u), n),
            None => (None, pid),
        };
        // The map lives in the process's own /tmp: through its root while it
        // runs (containers), in ours once it has exited.
        let root = format!("/proc/{pid}/root");
        let root = if std::path::Path::new(&root).exists() {
            root
        } else {
            String::new()
        };
        let mut wanted: Vec<u64> = idxs.iter().map(|&i| keys[i].address()).collect();
        wanted.sort_unstable();
        wanted.dedup();
        let used = read_by_user.entry(uid).or_default();
        let allowance = share.saturating_sub(*used);
        let loaded = crate::binaries::perfmap::load_wanted(uid, ns_pid, &root, &wanted, allowance);
        let mut map = match loaded {
            Ok(m) => {
                *used += m.read;
                if m.left > 0 {
                    let cut = cut_by_user.entry(uid).or_default();
                    cut.0 += m.left;
                    cut.1 += 1;
                }
                Some(m.map)
            }
            // A process gone before its user was read: a file by its pid in
            // /tmp is as likely an earlier process's, left behind (node
            // --perf-basic-prof leaves one per run). One line for all of
            // them, not one per pid: a `record -a` beside a shell loop
            // printed 48.
            Err(crate::binaries::perfmap::PerfMapError::UnknownUser { path }) => {
                unknown_user.0 += 1;
                unknown_user.1.get_or_insert(path);
                None
            }
            Err(e) => {
                if e.kind() != std::io::ErrorKind::NotFound {
                    warn(format!("perf map of pid {pid}: {e}"));
                }
                None
            }
        };
        let mut lib_path = format!("/tmp/perf-{ns_pid}.map");
        // The jitdump the process mapped: read through the descriptor opened
        // when it was mapped, so it is the file the JIT wrote.
        if let Some(bin) = jit.dump(pid).map(|b| binaries.get(b)) {
            // Within the same share of the user's as its perf maps.
            let used = read_by_user.entry(uid).or_default();
            // Positional reads: the descriptor's offset is shared with
            // whoever read it before (the unwinder looked for ELF sections).
            let dump = bin.file.as_ref().and_then(|f| {
                use std::os::unix::fs::FileExt;
                let size = f.metadata().ok()?.len();
                let len = size
                    .min(crate::binaries::perfmap::MAX_PERF_MAP_BYTES)
                    .min(share.saturating_sub(*used)) as usize;
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
                    let cut = cut_by_user.entry(uid).or_default();
                    cut.0 += size - done as u64;
                    cut.1 += 1;
                }
                let mut d = crate::binaries::jitdump::parse(&bytes)?;
                // Only the sampled symbols are kept, as of a perf map.
                d.symbols
                    .retain(|s| crate::binaries::perfmap::holds_any(&wanted, s.start, s.size));
                Some(d)
            });
            match dump {
                Some(d) => {
                    let m = map.get_or_insert_with(Default::default);
                    m.symbols.extend(d.symbols);
                    m.symbols.sort_by_key(|s| s.start);
                    lib_path = bin.path.clone();
                }
                None => warn(format!(
                    "{}: not a readable jitdump file; its JIT frames stay unnamed",
                    bin.path
                )),
            }
        }
        // Code in anonymous memory that no map names is one function per
        // process ("[JIT] java"), not one per address: a JVM without a perf
        // map showed 746 nodes of bare addresses, each a few samples.
        let regions: Vec<Option<(u64, u64)>> = idxs
            .iter()
            .map(|&i| jit.anonymous_region(pid, keys[i].address()))
            .collect();
        if map.is_none() && regions.iter().all(Option::is_none) {
            continue;
        }
        let runtime = jit.runtime(pid);
        let lib = libs.len() as u32;
        if map.is_some() {
            let lib_name = lib_path.rsplit('/').next().unwrap_or(&lib_path).to_string();
            libs.push(LibRecord {
                path: lib_path.clone(),
                name: format!("JIT ({lib_name})"),
                build_id: None,
            });
        } else {
            libs.push(LibRecord {
                path: format!("[anonymous code of pid {pid}]"),
                name: format!("JIT ({runtime})"),
                build_id: None,
            });
        }
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
    if let (n, Some(first)) = unknown_user {
        warn(format!(
            "{n} perf map(s) of processes gone before their user was known ignored (e.g. {first}): a file by their pid may be an earlier process's; their JIT frames stay unnamed"
        ));
    }
    let mut cut: Vec<_> = cut_by_user.into_iter().collect();
    cut.sort_unstable();
    for (uid, (left, maps)) in cut {
        let who = uid.map_or_else(|| "an unknown user".to_string(), |u| format!("uid {u}"));
        warn(format!(
            "perf maps and jitdumps of {who}: {:.1} MiB of {maps} file(s) not read, past the user's share of {} MiB a window; JIT frames named there stay unnamed",
            left as f64 / (1 << 20) as f64,
            share >> 20
        ));
    }
}
