//! Symbolication of a window's frames: one blazesym call per binary, the
//! kernel's from the kallsyms snapshot, JIT code from perf maps and jitdumps.
//!
//! In: the window's distinct [`FrameKey`]s, the binaries they point into,
//! the kernel symbol table. Out: the libraries and, per frame, what is
//! known of its code (functions with inlined calls, file and line), or a
//! warning saying why a library could not be read; its frames keep their
//! library and address.

use rustc_hash::FxHashMap;

use super::recording::{FrameRecord, LibRecord, NO_LIB};
use super::replay::{FrameKey, PseudoFrame, JIT_BINARY, KERNEL_BINARY, PSEUDO_BINARY};
use crate::symbolize::binaries::{BinaryIndex, Binaries};
use crate::symbolize::kernel::KernelSymbols;
use crate::symbolize::{self, AddrInfo, Symbolicator};

/// A kernel address from the snapshot: the function it is in.
fn kernel_addr_info(kernel: &KernelSymbols, addr: u64) -> AddrInfo {
    match kernel.lookup(addr) {
        Some(sym) => AddrInfo {
            symbol_start: sym.start,
            symbol_offset: addr - sym.start,
            symbol_size: sym.size,
            funcs: vec![symbolize::FuncAtAddr { name: sym.name.to_string(), file: None, line: None }],
        },
        None => AddrInfo::default(),
    }
}

/// Symbolicate every distinct frame, one blazesym call per binary.
/// Where JIT frames get their names: perf maps (found by pid) and jitdump
/// files (mapped by the process).
pub(super) struct JitSources<'a> {
    pub processes: &'a FxHashMap<u32, Option<(u32, u32)>>,
    pub dumps: &'a FxHashMap<u32, BinaryIndex>,
}

pub(super) fn symbolicate(
    binaries: &mut Binaries,
    kernel: &KernelSymbols,
    keys: &[FrameKey],
    jit: &JitSources<'_>,
    debuginfod: bool,
    warnings: &mut Vec<String>,
) -> (Vec<LibRecord>, Vec<FrameRecord>) {
    let symbolicator = Symbolicator::new();
    let mut by_binary: FxHashMap<u32, Vec<u32>> = FxHashMap::default();
    for (i, k) in keys.iter().enumerate() {
        by_binary.entry(k.binary).or_default().push(i as u32);
    }
    let kernel_text = kernel.text;
    let kernel_build_id = symbolize::kernel_build_id();
    let kernel_lib = binaries.len() as u32;
    let mut frames: Vec<FrameRecord> = keys
        .iter()
        .map(|k| match k.binary {
            KERNEL_BINARY => FrameRecord {
                lib: kernel_lib,
                address: k.address.wrapping_sub(kernel_text),
                kernel: true,
                symbols: AddrInfo::default(),
                pseudo: false,
            },
            PSEUDO_BINARY => FrameRecord {
                lib: NO_LIB,
                address: 0,
                kernel: false,
                symbols: AddrInfo {
                    funcs: vec![symbolize::FuncAtAddr {
                        name: PseudoFrame::from_address(k.address).name().to_string(),
                        file: None,
                        line: None,
                    }],
                    ..AddrInfo::default()
                },
                pseudo: true,
            },
            JIT_BINARY => FrameRecord { lib: NO_LIB, address: k.address, kernel: false, symbols: AddrInfo::default(), pseudo: false },
            b => FrameRecord { lib: b, address: k.address, kernel: false, symbols: AddrInfo::default(), pseudo: false },
        })
        .collect();
    // Build ids first: they name separate debug files.
    for i in 0..binaries.len() as u32 {
        let bin = binaries.get_mut(i);
        if bin.build_id.is_none() {
            if let Some(path) = bin.open_path() {
                if let Ok(Some(id)) = blazesym::helper::read_elf_build_id(&path) {
                    bin.build_id = Some(id.to_vec());
                }
            }
        }
    }
    // Debug files from debuginfod for sampled binaries that have none here.
    let mut fetched: FxHashMap<u32, String> = FxHashMap::default();
    if debuginfod {
        let wanted: Vec<(u32, Vec<u8>)> = by_binary
            .keys()
            .filter(|&&b| (b as usize) < binaries.len())
            .filter_map(|&b| {
                let id = binaries.get(b).build_id.clone()?;
                symbolize::build_id_debug_file(&id).is_none().then_some((b, id))
            })
            .collect();
        let (found, errors) = symbolize::fetch_debuginfod(wanted);
        fetched.extend(found);
        for e in errors {
            if !warnings.contains(&e) {
                warnings.push(e);
            }
        }
    }
    for (binary, idxs) in by_binary {
        let addrs: Vec<u64> = idxs.iter().map(|&i| keys[i as usize].address).collect();
        let result = match binary {
            NO_LIB | PSEUDO_BINARY | JIT_BINARY => continue,
            KERNEL_BINARY => Ok(addrs.iter().map(|&a| kernel_addr_info(kernel, a)).collect()),
            b => {
                let bin = binaries.get(b);
                let debug_file =
                    bin.build_id.as_deref().and_then(symbolize::build_id_debug_file).or_else(|| fetched.get(&b).cloned());
                match (bin.open_path(), debug_file) {
                    (Some(path), Some(debug)) => symbolize::file_offsets_to_virt(&path, &addrs)
                        .and_then(|virt| symbolicator.symbolize_elf_virt(&debug, &virt))
                        .map_err(|e| format!("{} (debug file {debug}): {e}", bin.path)),
                    (Some(path), None) => {
                        symbolicator.symbolize_elf(&path, &addrs).map_err(|e| format!("{}: {e}", bin.path))
                    }
                    (None, _) => Err(format!(
                        "{}: {}",
                        bin.path,
                        bin.open_error.clone().unwrap_or_else(|| "not a file".into())
                    )),
                }
            }
        };
        match result {
            Ok(infos) => {
                for (&i, info) in idxs.iter().zip(infos) {
                    frames[i as usize].symbols = info;
                }
            }
            Err(e) => {
                let w = format!("cannot symbolize {e}; its frames keep library and address");
                if !warnings.contains(&w) {
                    warnings.push(w);
                }
            }
        }
    }
    let mut libs = Vec::with_capacity(binaries.len() + 1);
    for i in 0..binaries.len() as u32 {
        let bin = binaries.get(i);
        libs.push(LibRecord { path: bin.path.clone(), name: bin.name.clone(), build_id: bin.build_id.clone() });
    }
    libs.push(LibRecord { path: "[kernel.kallsyms]".into(), name: "[kernel.kallsyms]".into(), build_id: kernel_build_id });
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
        if k.binary == JIT_BINARY {
            by_pid.entry(k.pid).or_default().push(i);
        }
    }
    for (pid, idxs) in by_pid {
        let identity = jit.processes.get(&pid).copied().flatten().or_else(|| symbolize::perfmap::process_identity(pid));
        let (uid, ns_pid) = match identity {
            Some((u, n)) => (Some(u), n),
            None => (None, pid),
        };
        // The map lives in the process's own /tmp: through its root while it
        // runs (containers), in ours once it has exited.
        let root = format!("/proc/{pid}/root");
        let root = if std::path::Path::new(&root).exists() { root } else { String::new() };
        let mut map = match symbolize::perfmap::load(uid, ns_pid, &root) {
            Ok(m) => Some(m),
            Err(e) => {
                if !e.contains("No such file") {
                    warn(format!("perf map of pid {pid}: {e}"));
                }
                None
            }
        };
        let mut lib_path = format!("/tmp/perf-{ns_pid}.map");
        // The jitdump the process mapped: read through the descriptor opened
        // when it was mapped, so it is the file the JIT wrote.
        if let Some(bin) = jit.dumps.get(&pid).map(|&b| binaries.get(b)) {
            // Positional reads: the descriptor's offset is shared with
            // whoever read it before (the unwinder looked for ELF sections).
            let dump = bin.file.as_ref().and_then(|f| {
                use std::os::unix::fs::FileExt;
                let len = f.metadata().ok()?.len().min(512 << 20) as usize;
                let mut bytes = vec![0u8; len];
                let mut done = 0;
                while done < len {
                    match f.read_at(&mut bytes[done..], done as u64) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => done += n,
                    }
                }
                bytes.truncate(done);
                symbolize::jitdump::parse(&bytes)
            });
            match dump {
                Some(d) => {
                    let m = map.get_or_insert_with(Default::default);
                    m.symbols.extend(d.symbols);
                    m.symbols.sort_by_key(|s| s.start);
                    lib_path = bin.path.clone();
                }
                None => warn(format!("{}: not a readable jitdump file; its JIT frames stay unnamed", bin.path)),
            }
        }
        let Some(map) = map else { continue };
        let lib = libs.len() as u32;
        let lib_name = lib_path.rsplit('/').next().unwrap_or(&lib_path).to_string();
        libs.push(LibRecord { path: lib_path.clone(), name: format!("JIT ({lib_name})"), build_id: None });
        for i in idxs {
            let f = &mut frames[i];
            f.lib = lib;
            if let Some(sym) = map.lookup(keys[i].address) {
                f.symbols = AddrInfo {
                    symbol_start: sym.start,
                    symbol_offset: keys[i].address - sym.start,
                    symbol_size: Some(sym.size),
                    funcs: vec![symbolize::FuncAtAddr { name: sym.name.clone(), file: None, line: None }],
                };
            }
        }
    }
}

