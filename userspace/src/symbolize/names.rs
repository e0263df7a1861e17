//! Naming the addresses of one binary, degrading per source.
//!
//! In: a [`Binary`] and the distinct file offsets sampled in it. Out: an
//! [`AddrInfo`] per offset and the warnings worth showing, once per file.
//! The sources, best first: its separate debug file (found by build id, a
//! safe debug link, or debuginfod), its own DWARF, its symbol tables, then
//! what its `.eh_frame` says: which function (FDE) each address is in, so a
//! stripped binary gets one node per real function (`libfoo.so+0x29c300`)
//! rather than one per address. Damage in one source costs only that
//! source: corrupt DWARF falls back to the symbol table, a corrupt symbol
//! table to the FDEs. Names the symbolizer gets wrong are fixed from the
//! binary's own tables: PLT stubs are `name@plt` (not the `_init` before
//! them), aliased functions take their public name (`malloc`, not
//! `__GI___libc_malloc`).

use super::{AddrInfo, FuncAtAddr, Symbolicator, SymbolizeError};
use crate::binaries::debugfile::{self, LinkRefused};
use crate::binaries::elf::{
    offset_to_vaddr, vaddr_to_offset, DwarfCheck, ElfLimits, ElfReader, NameTables, Segment,
};
use crate::binaries::Binary;

/// Where a binary's names come from, and what went wrong on the way.
pub struct BinaryNames {
    /// One per requested offset.
    pub infos: Vec<AddrInfo>,
    /// Warnings for the user, each naming the file.
    pub warnings: Vec<String>,
    /// Its build id, when it has one.
    pub build_id: Option<Vec<u8>>,
}

/// What naming a binary's addresses needs that does not depend on the
/// addresses: read once per binary and kept while it stays open (the
/// agent names a few new addresses of the same binaries window after
/// window; re-reading symbol tables and section headers each time was most
/// of its CPU time).
#[derive(Debug)]
pub struct PreparedBinary {
    /// Why nothing can be named (the file is unreadable or not ELF).
    unusable: Option<String>,
    segments: Vec<Segment>,
    tables: NameTables,
    build_id: Option<Vec<u8>>,
    /// The separate debug file and whether its DWARF may be read.
    debug: Option<(debugfile::DebugFile, bool)>,
    /// Whether the binary's own DWARF may be read.
    own_debug_syms: bool,
    /// FDE ranges, read the first time an address has no symbol.
    fdes: Option<Vec<(u64, u64)>>,
    /// Warnings found while preparing, reported with the first names.
    warnings: Vec<String>,
}

impl PreparedBinary {
    /// Bytes it holds (roughly), for the cache's budget.
    pub fn bytes(&self) -> usize {
        256 + self
            .tables
            .aliases
            .values()
            .map(|n| 32 + n.len())
            .sum::<usize>()
            + self
                .tables
                .plt
                .iter()
                .map(|p| 32 + p.2.len())
                .sum::<usize>()
            + self.fdes.as_ref().map_or(0, |f| f.len() * 16)
    }
}

/// Read what naming `bin`'s addresses needs. `fetched` is a debug file
/// debuginfod gave for its build id.
pub fn prepare(bin: &Binary, limits: ElfLimits, fetched: Option<&str>) -> PreparedBinary {
    let mut p = PreparedBinary {
        unusable: None,
        segments: Vec::new(),
        tables: NameTables::default(),
        build_id: bin.build_id.clone(),
        debug: None,
        own_debug_syms: false,
        fdes: None,
        warnings: Vec::new(),
    };
    let Some(file) = bin.file.as_ref() else {
        p.unusable = Some(format!(
            "cannot symbolize {}: {}; its frames keep library and address",
            bin.path,
            bin.open_error
                .clone()
                .unwrap_or_else(|| "not a file".into())
        ));
        return p;
    };
    let reader = ElfReader::new(file, limits);
    p.segments = match reader.segments() {
        Ok(s) => s,
        Err(e) => {
            p.unusable = Some(format!(
                "cannot symbolize {}: {e}; its frames keep library and address",
                bin.path
            ));
            return p;
        }
    };
    if p.build_id.is_none() {
        p.build_id = reader.build_id();
    }
    p.tables = reader.name_tables();
    let own_link = reader.debuglink();
    // Without DWARF (the agent's default) no section is even looked at.
    let own_dwarf = if limits.dwarf {
        reader.dwarf_check()
    } else {
        DwarfCheck::Absent
    };
    if let Some(d) = p.find_debug_file(bin, own_link.as_ref(), fetched) {
        p.use_debug_file(bin, d, limits);
    }
    // The binary's own DWARF unless it is refused or the binary carries a
    // debug link (the symbolizer would follow it by path).
    if let DwarfCheck::Refused(why) = &own_dwarf {
        p.warn(format!(
            "{}: DWARF not read: {why}; names come from its symbol table",
            bin.path
        ));
    }
    p.own_debug_syms = matches!(own_dwarf, DwarfCheck::Usable) && own_link.is_none();
    p
}

impl PreparedBinary {
    /// Note warning `w`, once.
    fn warn(&mut self, w: String) {
        if !self.warnings.contains(&w) {
            self.warnings.push(w);
        }
    }

    /// A separate debug file: by build id, a safe debug link (`own_link`,
    /// the binary's: name and CRC), or debuginfod (`fetched`).
    fn find_debug_file(
        &mut self,
        bin: &Binary,
        own_link: Option<&(Vec<u8>, u32)>,
        fetched: Option<&str>,
    ) -> Option<debugfile::DebugFile> {
        let mut debug = self.build_id.as_deref().and_then(debugfile::by_build_id);
        if debug.is_none() {
            if let Some((name, crc)) = own_link {
                match debugfile::by_debuglink(bin, name, *crc) {
                    Ok(found) => debug = found,
                    Err(LinkRefused::NotAFileName(n)) => self.warn(format!(
                        "{}: its debug link {n:?} is not a file name; ignored",
                        bin.path
                    )),
                    Err(LinkRefused::Untrusted(why)) => {
                        self.warn(format!("{}: debug link not followed: {why}", bin.path))
                    }
                }
            }
        }
        if debug.is_none() {
            if let Some(f) = fetched {
                debug =
                    crate::binaries::open_regular(f, true)
                        .ok()
                        .map(|file| debugfile::DebugFile {
                            path: f.to_string(),
                            file,
                        });
            }
        }
        debug
    }

    /// Name from debug file `d`: its DWARF too, if it may be read.
    fn use_debug_file(&mut self, bin: &Binary, d: debugfile::DebugFile, limits: ElfLimits) {
        let reader = ElfReader::new(&d.file, limits);
        // Compressed DWARF is read from a plain copy in root's cache:
        // blazesym would inflate it all into the heap, every recording.
        let compressed =
            limits.dwarf && reader.section(".debug_info").is_some_and(|s| s.compressed);
        let copy = match compressed {
            true => crate::binaries::inflated::plain_copy(&d, limits.max_dwarf_total_bytes),
            false => None,
        };
        // The section headers read above are checked again only for a copy.
        let (d, debug_syms) = match copy {
            Some(copy) => {
                drop(reader);
                let copy_reader = ElfReader::new(&copy.file, limits);
                let syms = self.debug_syms(bin, &copy, &copy_reader, limits);
                drop(copy_reader);
                (copy, syms)
            }
            None => {
                let syms = self.debug_syms(bin, &d, &reader, limits);
                drop(reader);
                (d, syms)
            }
        };
        self.debug = Some((d, debug_syms));
    }

    /// Whether the symbolizer may read debug file `d`'s DWARF (a refusal
    /// said as a warning).
    fn debug_syms(
        &mut self,
        bin: &Binary,
        d: &debugfile::DebugFile,
        dreader: &ElfReader,
        limits: ElfLimits,
    ) -> bool {
        // Without DWARF a debug file still gives its full symbol table.
        let check = if limits.dwarf {
            dreader.dwarf_check()
        } else {
            DwarfCheck::Absent
        };
        if let DwarfCheck::Refused(why) = &check {
            self.warn(format!(
                "{} (debug file {}): DWARF not read: {why}",
                bin.path, d.path
            ));
        }
        // A debug file with a debug link of its own would send the
        // symbolizer after it: read only its symbol table then.
        matches!(check, DwarfCheck::Usable) && dreader.debuglink().is_none()
    }
}

/// Name `offsets` (file offsets) of `bin`. `fetched` is a debug file
/// debuginfod gave for its build id.
pub fn symbolize_binary(
    sym: &mut Symbolicator,
    bin: &Binary,
    offsets: &[u64],
    limits: ElfLimits,
    fetched: Option<&str>,
) -> BinaryNames {
    let mut prepared = prepare(bin, limits, fetched);
    symbolize_prepared(sym, bin, &mut prepared, offsets, limits)
}

/// Name `offsets` (file offsets) of `bin`, prepared by [`prepare`]. The
/// preparation's warnings are given once (the first call).
pub fn symbolize_prepared(
    sym: &mut Symbolicator,
    bin: &Binary,
    p: &mut PreparedBinary,
    offsets: &[u64],
    limits: ElfLimits,
) -> BinaryNames {
    let mut out = BinaryNames {
        infos: vec![AddrInfo::default(); offsets.len()],
        warnings: std::mem::take(&mut p.warnings),
        build_id: p.build_id.clone(),
    };
    if let Some(why) = &p.unusable {
        out.warnings.push(why.clone());
        return out;
    }
    let (Some(file), Some(path)) = (bin.file.as_ref(), bin.open_path()) else {
        return out;
    };
    let mut warn = |w: String| {
        if !out.warnings.contains(&w) {
            out.warnings.push(w);
        }
    };
    let mut pending: Vec<usize> = (0..offsets.len()).collect();
    // 1. The separate debug file.
    if let Some((d, debug_syms)) = &p.debug {
        let virt: Vec<u64> = pending
            .iter()
            .map(|&i| offset_to_vaddr(&p.segments, offsets[i]).unwrap_or(0))
            .collect();
        let dpath = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&d.file));
        match attempt(sym, &dpath, &virt, true, *debug_syms) {
            Ok(infos) => fill(&mut out.infos, &mut pending, infos, offsets, true),
            Err(e) => warn(format!(
                "{} (debug file {}): {e}; using the binary's own symbols",
                bin.path, d.path
            )),
        }
    }
    // 2. The binary itself.
    if !pending.is_empty() {
        let addrs: Vec<u64> = pending.iter().map(|&i| offsets[i]).collect();
        match attempt(sym, &path, &addrs, false, p.own_debug_syms) {
            Ok(infos) => fill(&mut out.infos, &mut pending, infos, offsets, false),
            Err(e) => warn(format!(
                "cannot symbolize {}: {e}; its frames keep library and address",
                bin.path
            )),
        }
    }
    // 3. Fix names from the binary's own tables; group what is still
    // unnamed by the function its FDE describes.
    if !pending.is_empty() && p.fdes.is_none() {
        p.fdes = Some(
            ElfReader::new(file, limits)
                .fde_ranges()
                .unwrap_or_default(),
        );
    }
    let fdes = p.fdes.as_deref().unwrap_or(&[]);
    for (i, info) in out.infos.iter_mut().enumerate() {
        let Some(vaddr) = offset_to_vaddr(&p.segments, offsets[i]) else {
            continue;
        };
        fix_names(
            info,
            vaddr,
            offsets[i],
            &p.tables,
            &p.segments,
            fdes,
            &bin.name,
        );
    }
    out
}

/// Symbolize, and when reading DWARF fails, once more from the symbol tables.
fn attempt(
    sym: &mut Symbolicator,
    path: &str,
    addrs: &[u64],
    virt: bool,
    debug_syms: bool,
) -> Result<Vec<AddrInfo>, SymbolizeError> {
    let call = |sym: &mut Symbolicator, debug_syms| {
        if virt {
            sym.symbolize_elf_virt(path, addrs, debug_syms)
        } else {
            sym.symbolize_elf(path, addrs, debug_syms)
        }
    };
    match call(sym, debug_syms) {
        Ok(v) => Ok(v),
        Err(e) if debug_syms => call(sym, false).map_err(|e2| SymbolizeError::WithoutDwarf {
            with: Box::new(e),
            without: Box::new(e2),
        }),
        Err(e) => Err(e),
    }
}

/// Put resolved answers in place; keep the unresolved pending. Symbol
/// starts of a debug file's answers are addresses: make them file offsets.
fn fill(
    infos: &mut [AddrInfo],
    pending: &mut Vec<usize>,
    answers: Vec<AddrInfo>,
    offsets: &[u64],
    virt: bool,
) {
    let mut still = Vec::new();
    for (&i, mut a) in pending.iter().zip(answers) {
        if a.funcs.is_empty() {
            still.push(i);
            continue;
        }
        if virt {
            // Keep the offset within the symbol; the start follows the frame's space.
            a.symbol_start = offsets[i].saturating_sub(a.symbol_offset);
        }
        infos[i] = a;
    }
    *pending = still;
}

/// Names from the binary's tables: PLT stubs, public aliases, FDE groups.
fn fix_names(
    info: &mut AddrInfo,
    vaddr: u64,
    offset: u64,
    tables: &NameTables,
    segments: &[Segment],
    fdes: &[(u64, u64)],
    lib: &str,
) {
    if let Some((start, name)) = tables.plt_at(vaddr) {
        *info = AddrInfo {
            symbol_start: offset - (vaddr - start),
            symbol_offset: vaddr - start,
            symbol_size: Some(16),
            funcs: vec![FuncAtAddr {
                name: name.to_string(),
                file: None,
                line: None,
                start_line: None,
            }],
        };
        return;
    }
    if let Some(outer) = info.funcs.first_mut() {
        let start = vaddr - info.symbol_offset;
        if let Some(public) = tables.aliases.get(&start) {
            if outer.name != **public {
                outer.name = public.to_string();
            }
        }
        return;
    }
    let i = fdes.partition_point(|f| f.0 <= vaddr);
    if let Some(&(start, end)) = i.checked_sub(1).map(|i| &fdes[i]) {
        if vaddr < end {
            let start_offset = vaddr_to_offset(segments, start).unwrap_or(offset - (vaddr - start));
            *info = AddrInfo {
                symbol_start: start_offset,
                symbol_offset: vaddr - start,
                symbol_size: Some(end - start),
                funcs: vec![FuncAtAddr {
                    name: format!("{lib}+0x{start_offset:x}"),
                    file: None,
                    line: None,
                    start_line: None,
                }],
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a file the symbolizer cannot read (it does not exist)
    /// fails with DWARF and again without, and says both.
    #[test]
    fn failure_without_dwarf_says_both() {
        let path = "/nonexistent/sysprof-test-binary";
        assert!(!std::path::Path::new(path).exists());
        let mut sym = Symbolicator::new();
        let e = attempt(&mut sym, path, &[0x1000], false, true).unwrap_err();
        let SymbolizeError::WithoutDwarf { with, without } = &e else {
            panic!("{e}")
        };
        assert_eq!(e.to_string(), format!("{with}; without DWARF: {without}"));
        assert!(
            matches!(**without, SymbolizeError::Blazesym(_)),
            "{without}"
        );
        let e = attempt(&mut sym, path, &[0x1000], false, false).unwrap_err();
        assert!(matches!(e, SymbolizeError::Blazesym(_)), "{e}");
    }
}
