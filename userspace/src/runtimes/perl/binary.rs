//! What a Perl binary is: its version, where its first interpreter's
//! pointer and its run loops are, and the layout of the structures the
//! kernel walks and userspace reads.
//!
//! In: an [`ElfReader`] over a mapped file whose name may be Perl's
//! (`perl`, `perl5.36.0`, `libperl.so.5.36`), read as an attacker wrote it.
//! Out: a [`PerlBinary`] for a Perl this build reads, an error that names
//! the version for another Perl, nothing for other files.
//!
//! The version is the API version string the binary holds for its XS
//! modules' handshake (`v5.36.0` in `.rodata`). A binary that lies can only
//! misname its own process's frames: the kernel reads nothing but that
//! process's memory, and userspace names a sub only if what it reads has
//! the fingerprint the kernel read. Offsets are Perl 5.36's structures on
//! x86_64 built with MULTIPLICITY (`PerlInterpreter`, `PERL_SI`,
//! `PERL_CONTEXT`, `COP`, `XPVCV`, `XPVGV`, `XPVHV`'s aux, `HEK`), measured
//! on Debian's 5.36.0 in a running script's memory
//! (`tests/oracles/perl_layout.py`), checked against it by
//! `tests/tests/perl.rs`.

use crate::binaries::elf::{vaddr_to_offset, ElfReader};

/// Structure offsets of one Perl minor version (bytes).
#[derive(Debug, PartialEq, Eq)]
pub struct PerlLayout {
    /// "5.36".
    pub version: &'static str,
    /// `PerlInterpreter.Icurcop`: the running statement.
    pub interp_curcop: u16,
    /// `PerlInterpreter.Icurstackinfo`.
    pub interp_curstackinfo: u16,
    /// `PerlInterpreter.Iphase` (an enum: 4 running the program).
    pub interp_phase: u16,
    /// `PerlInterpreter.Iorigfilename`: the main program's file.
    pub interp_origfilename: u16,
    /// `PERL_SI.si_cxstack`.
    pub si_cxstack: u16,
    /// `PERL_SI.si_prev`.
    pub si_prev: u16,
    /// `PERL_SI.si_cxsubix`: the innermost sub, format or eval context.
    pub si_cxsubix: u16,
    /// `PERL_SI.si_cxix`: the innermost context.
    pub si_cxix: u16,
    /// `PERL_CONTEXT.blk_oldcop`.
    pub cx_oldcop: u16,
    /// `PERL_CONTEXT.blk_sub.cv`.
    pub cx_cv: u16,
    /// `PERL_CONTEXT.blk_sub.retop`: NULL for a sub entered from C.
    pub cx_retop: u16,
    /// `PERL_CONTEXT.blk_sub.old_cxsubix`: the sub, format or eval context
    /// below it (the same place in a format's and an eval's).
    pub cx_old_cxsubix: u16,
    /// `COP.cop_line`.
    pub cop_line: u16,
    /// `COP.cop_file` (a `char *` in a MULTIPLICITY build).
    pub cop_file: u16,
    /// `XPVCV.xcv_stash`: the package; the fingerprint's words start here
    /// (stash, start, root, then gv or name, not in it, and file).
    pub cv_stash: u64,
    /// `XPVCV.xcv_start_u`.
    pub cv_start: u64,
    /// `XPVCV.xcv_gv_u`: its GV, or with `CVf_NAMED` its name's HEK.
    pub cv_gv: u64,
    /// `XPVCV.xcv_file`.
    pub cv_file: u64,
    /// `XPVCV.xcv_flags`.
    pub cv_flags: u64,
    /// `CVf_NAMED`.
    pub cvf_named: u32,
    /// `XPVGV.xiv_u.xivu_namehek`: the GV's name.
    pub gv_name: u64,
    /// `XPVGV.xnv_u.xgv_stash`: its package.
    pub gv_stash: u64,
    /// `SV.sv_flags`.
    pub sv_flags: u64,
    /// `SVf_OOK`: a hash with its aux part (a package's has its name there).
    pub svf_ook: u32,
    /// The hash body's aux part (`xpvhv_with_aux.xhv_aux`).
    pub hv_aux: u64,
    /// `xpvhv_aux.xhv_name_count` (0: the name is a HEK, else an array of them).
    pub aux_name_count: u64,
    /// `HEK.hek_len`; the key follows at `hek_key`.
    pub hek_len: u64,
    /// `HEK.hek_key`.
    pub hek_key: u64,
}

const LAYOUTS: [PerlLayout; 1] = [PerlLayout {
    version: "5.36",
    interp_curcop: 208,
    interp_curstackinfo: 224,
    interp_phase: 2512,
    interp_origfilename: 1472,
    si_cxstack: 8,
    si_prev: 16,
    si_cxsubix: 40,
    si_cxix: 32,
    cx_oldcop: 16,
    cx_cv: 72,
    cx_retop: 48,
    cx_old_cxsubix: 56,
    cop_line: 36,
    cop_file: 48,
    cv_stash: 32,
    cv_start: 40,
    cv_gv: 56,
    cv_file: 64,
    cv_flags: 92,
    cvf_named: 0x8000,
    gv_name: 32,
    gv_stash: 40,
    sv_flags: 12,
    svf_ook: 0x0200_0000,
    hv_aux: 32,
    aux_name_count: 28,
    hek_len: 4,
    hek_key: 8,
}];

/// The versions read, as said to users.
pub const SUPPORTED: &str = "5.36";

/// The layout of Perl `version` ("5.36"), if this build knows it.
pub fn layout(version: &str) -> Option<&'static PerlLayout> {
    LAYOUTS.iter().find(|l| l.version == version)
}

/// A Perl binary: addresses in the file's address space.
#[derive(Debug)]
pub struct PerlBinary {
    /// `PL_curinterp`: the first interpreter's pointer.
    pub curinterp: u64,
    /// The run loops (`Perl_runops_standard`, `Perl_runops_debug`): [start, end).
    pub run_loops: Vec<(u64, u64)>,
    /// The interpreter structure's size (`PL_interp_size`): a statement
    /// inside it is `PL_compiling`, the parser's, whose line is not one of
    /// a running statement.
    pub interp_size: u16,
    /// The version's layout.
    pub layout: &'static PerlLayout,
}

/// Whether a mapped file may be a Perl binary, by its name: only those are
/// read.
pub fn may_be_perl(file_name: &str) -> bool {
    file_name == "perl" || file_name.starts_with("perl5") || file_name.starts_with("libperl.so")
}

/// The minor version ("5.36") of the first API version string (`v5.36.0`,
/// NUL on each side) in `rodata`.
pub fn version_in(rodata: &[u8]) -> Option<String> {
    let mut at = 0;
    while let Some(i) = memchr_str(&rodata[at..], b"\0v5.") {
        let start = at + i + 2;
        let rest = &rodata[start..];
        let end = rest.iter().position(|&b| b == 0)?;
        let text = &rest[..end.min(16)];
        let parts: Vec<&[u8]> = text.split(|&b| b == b'.').collect();
        if end <= 16
            && parts.len() == 3
            && parts
                .iter()
                .all(|p| !p.is_empty() && p.iter().all(u8::is_ascii_digit))
        {
            return Some(format!(
                "{}.{}",
                String::from_utf8_lossy(parts[0]),
                String::from_utf8_lossy(parts[1])
            ));
        }
        at = start;
    }
    None
}

fn memchr_str(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Why a Perl binary's frames are not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotRead {
    /// A version this build has no layout for.
    #[error("Perl {0}: this build reads the subs of Perl {SUPPORTED}")]
    Version(String),
    /// A build without MULTIPLICITY (no `PL_curinterp`), or one without the
    /// symbols or version the walk needs.
    #[error("{0}")]
    Damaged(&'static str),
}

/// Read what makes `elf` (a file named `file_name`) a Perl binary: Ok(None)
/// for a file that is none.
pub fn read(elf: &ElfReader<'_>, file_name: &str) -> Result<Option<PerlBinary>, NotRead> {
    if !may_be_perl(file_name) {
        return Ok(None);
    }
    let symbols = elf.symbols_where(|n| {
        matches!(
            n,
            b"PL_curinterp"
                | b"PL_thr_key"
                | b"PL_interp_size"
                | b"Perl_runops_standard"
                | b"Perl_runops_debug"
        )
    });
    let find = |name: &str| {
        symbols
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|&(_, addr, size)| (addr, size))
    };
    let Some((start, size)) = find("Perl_runops_standard") else {
        return Ok(None); // named so, but no Perl interpreter in it
    };
    // PL_curinterp is in every build; PL_thr_key only in an ithreads one,
    // whose interpreter is a structure (not globals) and whose statements
    // hold their file's name (not a GV).
    let (Some((curinterp, _)), true) = (find("PL_curinterp"), find("PL_thr_key").is_some()) else {
        return Err(NotRead::Damaged(
            "a Perl built without ithreads (no PL_thr_key): its subs are not read",
        ));
    };
    let rodata = elf
        .section_data(".rodata")
        .ok()
        .flatten()
        .ok_or(NotRead::Damaged("no .rodata to read its version from"))?;
    let version =
        version_in(&rodata.1).ok_or(NotRead::Damaged("no API version string (v5.x.y)"))?;
    let layout = layout(&version).ok_or(NotRead::Version(version))?;
    if size == 0 {
        return Err(NotRead::Damaged("Perl_runops_standard has no size"));
    }
    let interp_size = find("PL_interp_size")
        .and_then(|(addr, _)| {
            let offset = vaddr_to_offset(&elf.segments().ok()?, addr)?;
            let b = elf.read_checked("PL_interp_size", offset, 2).ok()?;
            Some(u16::from_le_bytes([b[0], b[1]]))
        })
        .filter(|&n| n > 0)
        .ok_or(NotRead::Damaged("no PL_interp_size to read"))?;
    let mut run_loops = vec![(start, start.saturating_add(size))];
    if let Some((s, n)) = find("Perl_runops_debug").filter(|&(_, n)| n > 0) {
        run_loops.push((s, s.saturating_add(n)));
    }
    Ok(Some(PerlBinary {
        curinterp,
        run_loops,
        interp_size,
        layout,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that Perl's binaries are told by name and nothing else is.
    #[test]
    fn perl_binaries_are_told_by_their_name() {
        for perl in ["perl", "perl5.36.0", "libperl.so.5.36", "libperl.so.5.36.0"] {
            assert!(may_be_perl(perl), "{perl}");
        }
        for other in [
            "perldoc",
            "perlbug",
            "python3",
            "php8.2",
            "superperl",
            "libperlio.so",
        ] {
            assert!(!may_be_perl(other), "{other}");
        }
    }

    /// Check that the version is the API string's, and that look-alikes and
    /// damaged strings are not taken for it.
    #[test]
    fn the_version_is_the_api_strings() {
        assert_eq!(version_in(b"x\0v5.36.0\0y").as_deref(), Some("5.36"));
        assert_eq!(
            version_in(b"\0v5.x\0\0v5.36\0\0v5.38.2\0").as_deref(),
            Some("5.38")
        );
        assert_eq!(version_in(b"v5.36.0\0"), None, "no NUL before");
        assert_eq!(version_in(b"\0v5.36.0"), None, "no NUL after");
        assert_eq!(version_in(b"\0v5.36.0.1\0"), None);
        assert_eq!(version_in(b"\0v5.999999999999999.0\0"), None, "too long");
        assert_eq!(version_in(b""), None);
    }

    /// Check that each layout's offsets fit the kernel walk's reads: the
    /// context's fields within the PERL_CX_SIZE bytes read of it.
    #[test]
    fn layouts_fit_the_kernel_walk() {
        for l in &LAYOUTS {
            for word in [l.cx_oldcop, l.cx_cv, l.cx_retop, l.cx_old_cxsubix] {
                assert!(
                    u64::from(word) + 8 <= crate::bpf::abi::PERL_CX_SIZE,
                    "{}: {word}",
                    l.version
                );
            }
            let read = [l.cv_stash, l.cv_start, l.cv_start + 8, l.cv_gv, l.cv_file];
            assert!(
                read.windows(2).all(|w| w[1] == w[0] + 8),
                "the kernel reads stash..file as one: {read:?}"
            );
        }
    }

    /// Check that Debian's Perl, where installed, is read.
    #[test]
    fn debians_perl_is_read() {
        let Ok(f) = std::fs::File::open("/usr/bin/perl") else {
            eprintln!("no /usr/bin/perl: NOT CHECKED");
            return;
        };
        match read(&ElfReader::new(&f, Default::default()), "perl") {
            Ok(Some(p)) => {
                assert!(
                    p.run_loops[0].1 - p.run_loops[0].0 > 32,
                    "{:x?}",
                    p.run_loops
                );
                assert!(p.curinterp > 0);
                // Larger than every offset read in it.
                assert!(
                    p.interp_size > p.layout.interp_phase + 4,
                    "{}",
                    p.interp_size
                );
            }
            // Another Debian release's Perl: said by its version.
            Err(NotRead::Version(v)) => eprintln!("Perl {v}: NOT CHECKED"),
            other => panic!("{other:?}"),
        }
    }
}
