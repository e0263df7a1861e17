//! Symbolication of a window's frames: one blazesym call per binary, the
//! kernel's from the kallsyms snapshot, JIT code from perf maps and jitdumps
//! ([`super::jit_names`]).
//!
//! In: the window's distinct [`FrameKey`]s, the binaries they point into,
//! the kernel symbol table. Out: the libraries and, per frame, what is
//! known of its code (functions with inlined calls, file and line), or a
//! warning saying why a library could not be read; its frames keep their
//! library and address.

use rustc_hash::FxHashMap;

use super::jit_names::{symbolicate_jit, JitSources};
use super::replay::FrameKey;
use crate::binaries::debugfile;
use crate::binaries::elf::{ElfLimits, ElfReader};
use crate::binaries::{Binaries, BinaryIndex};
use crate::model::recording::FrameKind;
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

    /// Give the frames of `used` binaries (by `by_binary`) the names found
    /// in earlier windows; the rest, by binary, are to be looked up.
    fn fill_known(
        &mut self,
        used: &[BinaryIndex],
        by_binary: &FxHashMap<u32, Vec<u32>>,
        keys: &[FrameKey],
        frames: &mut [FrameRecord],
    ) -> FxHashMap<BinaryIndex, Vec<u32>> {
        let mut missing: FxHashMap<BinaryIndex, Vec<u32>> = FxHashMap::default();
        for &b in used {
            for &i in &by_binary[&b] {
                match self.map.get(&(b, keys[i as usize].address())) {
                    Some(info) => frames[i as usize].symbols = info.clone(),
                    None => missing.entry(b).or_default().push(i),
                }
            }
        }
        self.last_lookups = missing.values().map(Vec::len).sum();
        self.idle_windows = if self.last_lookups == 0 {
            self.idle_windows + 1
        } else {
            0
        };
        missing
    }

    /// What naming `b` needs, read now if not held.
    fn prepared(
        &mut self,
        binaries: &Binaries,
        b: BinaryIndex,
        limits: ElfLimits,
        fetched: Option<&str>,
    ) -> &mut names::PreparedBinary {
        if !self.prepared.contains_key(&b) {
            let p = names::prepare(binaries.get(b), limits, fetched);
            if self.prepared_bytes + p.bytes() > NAME_CACHE_BYTES {
                self.prepared.clear();
                self.prepared_bytes = 0;
            }
            self.prepared_bytes += p.bytes();
            self.prepared.insert(b, p);
        }
        self.prepared.get_mut(&b).expect("inserted above")
    }
}

/// Add `w` to `warnings` unless it is there already.
pub(super) fn warn_once(warnings: &mut Vec<String>, w: String) {
    if !warnings.contains(&w) {
        warnings.push(w);
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
        .map(|k| first_frame(k, &lib_of, kernel_lib, kernel, python))
        .collect();
    // Addresses named in an earlier window take that name; the rest are looked up.
    let missing = cache.fill_known(&used, &by_binary, keys, &mut frames);
    // Debug files from debuginfod for sampled binaries that have none here.
    let mut fetched: FxHashMap<u32, String> = FxHashMap::default();
    if debuginfod {
        fetched.extend(fetch_debug_files(binaries, &used, &missing, warnings));
    }
    for &b in &used {
        let Some(idxs) = missing.get(&b) else {
            continue;
        };
        let addrs: Vec<u64> = idxs.iter().map(|&i| keys[i as usize].address()).collect();
        let prepared = cache.prepared(binaries, b, limits, fetched.get(&b).map(String::as_str));
        let names =
            names::symbolize_prepared(symbolicator, binaries.get(b), prepared, &addrs, limits);
        for (&i, info) in idxs.iter().zip(names.infos) {
            cache.insert(b, keys[i as usize].address(), &info);
            frames[i as usize].symbols = info;
        }
        for w in names.warnings {
            warn_once(warnings, w);
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

/// The record of a frame as far as it is known before any lookup: its
/// library (`lib_of` a binary's, `kernel_lib`) and address, and the names
/// at hand (the kernel's, a pseudo frame's, a runtime's frame's).
fn first_frame(
    key: &FrameKey,
    lib_of: &FxHashMap<BinaryIndex, u32>,
    kernel_lib: u32,
    kernel: &KernelSymbols,
    python: &crate::runtimes::frames::RuntimeFrames,
) -> FrameRecord {
    match *key {
        FrameKey::Kernel(address) => FrameRecord {
            lib: kernel_lib,
            address: address.wrapping_sub(kernel.text),
            kind: FrameKind::Kernel,
            symbols: kernel_addr_info(kernel, address),
        },
        FrameKey::Pseudo(p) => FrameRecord::named(p.kind(), p.name().to_string()),
        FrameKey::Binary { binary, offset } => FrameRecord {
            lib: lib_of.get(&binary).copied().unwrap_or(NO_LIB),
            address: offset,
            kind: FrameKind::Native,
            symbols: AddrInfo::default(),
        },
        FrameKey::Jit { address, .. } => FrameRecord {
            lib: NO_LIB,
            address,
            kind: FrameKind::Jit,
            symbols: AddrInfo::default(),
        },
        // Named from its code object when it was sampled; no library
        // (the interpreter's is the native eval frame it replaced).
        FrameKey::Runtime(i) => FrameRecord {
            lib: NO_LIB,
            address: 0,
            // The runtime that read its outermost function says; but a V8
            // builtin (no script: `split`, `forEach`) is machine code in
            // node's embedded blob, which V8's own sampler leaves out, as
            // the profiles sysprof is compared against do: native code.
            kind: match (python.kind_at(i), python.at(i).and_then(|f| f.first())) {
                (Some(FrameKind::JavaScript), Some((code, _))) if code.filename.is_empty() => {
                    FrameKind::Native
                }
                (Some(kind), _) => kind,
                (None, _) => FrameKind::Native,
            },
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
        },
        FrameKey::Empty => FrameRecord {
            lib: NO_LIB,
            address: 0,
            kind: FrameKind::Native,
            symbols: AddrInfo::default(),
        },
    }
}

/// Debug files fetched from debuginfod for the binaries of `used` with
/// names `missing` and no debug file here, by binary (their build ids
/// read now if not yet); what went wrong goes to `warnings`.
fn fetch_debug_files(
    binaries: &mut Binaries,
    used: &[BinaryIndex],
    missing: &FxHashMap<BinaryIndex, Vec<u32>>,
    warnings: &mut Vec<String>,
) -> Vec<(u32, String)> {
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
    for e in errors {
        warn_once(warnings, e);
    }
    found
}
