//! Every loaded BPF program's JIT-compiled functions, asked of the kernel
//! through the bpf syscall rather than read from `/proc/kallsyms`.
//!
//! In: the kernel's list of loaded programs (`BPF_PROG_GET_NEXT_ID`, through
//! aya's `loaded_programs`) and each one's `BPF_OBJ_GET_INFO_BY_FD`. Out:
//! [`JitedFunction`]s: where each function of each program starts, how
//! long it is, and a name in kallsyms' form (`bpf_prog_TAG_NAME`).
//!
//! Why: the kernel's symbols are read once per boot and kept
//! (`symbolize::kernel_cache`), but BPF programs come and go. Ours are
//! loaded just before the table is needed. A frame in a program must be
//! known as one, or a stack read inside a tracepoint is not cut where the
//! thread was. Formatting all of `/proc/kallsyms` costs the kernel about
//! 40 ms of CPU; these calls cost well under a millisecond for tens of
//! programs. aya's `ProgramInfo` gives neither the functions' addresses nor
//! their lengths, so the second info call is made here.

use std::os::fd::{AsFd, AsRawFd};

use aya_obj::generated::bpf_prog_info;

/// One JIT-compiled function of a loaded BPF program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JitedFunction {
    /// Where its code starts, in the kernel's address space.
    pub start: u64,
    /// Its code's length in bytes.
    pub len: u32,
    /// `bpf_prog_TAG_NAME` (`bpf_prog_TAG` for a program without a name):
    /// the program's tag for its first function, a subprogram's own for
    /// each other one, and the program's name. Where
    /// the program has BTF, kallsyms names a function by its BTF name
    /// instead: the program's name is at most 15 bytes, and is the same
    /// for each of its subprograms.
    pub name: String,
}

/// Why the programs' functions could not all be listed.
#[derive(Debug, thiserror::Error)]
pub enum JitedError {
    /// A bpf syscall failed (not root, or no such command).
    #[error("listing the loaded BPF programs: {0}")]
    List(String),
    /// A program shows no JIT-compiled function: it is interpreted
    /// (`bpf_jit_enable` 0) or offloaded to a device, or its addresses are
    /// hidden from us.
    #[error("BPF program {0} shows no JIT-compiled address")]
    Hidden(String),
}

/// Most functions of one program asked for (the verifier allows 256
/// subprograms).
const MAX_FUNCTIONS: u32 = 256;
/// Most programs listed: past it, the listing fails (and the caller reads
/// kallsyms instead).
const MAX_PROGRAMS: usize = 16_384;

/// The `info` member of `union bpf_attr` (the kernel takes a shorter
/// attribute and zero-fills the rest).
#[repr(C)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// `BPF_OBJ_GET_INFO_BY_FD` into `info` (zeroed by the caller but for
/// the arrays it asks for).
fn prog_info(fd: impl AsFd, info: &mut bpf_prog_info) -> std::io::Result<()> {
    let mut attr = InfoAttr {
        bpf_fd: fd.as_fd().as_raw_fd() as u32,
        info_len: std::mem::size_of::<bpf_prog_info>() as u32,
        info: info as *mut bpf_prog_info as u64,
    };
    // SAFETY: `attr` points at `info`, which lives across the call and is
    // `info_len` bytes (the kernel writes at most that, and the length it
    // wrote back into `attr`); for each array `info` names, the kernel
    // writes no more entries than the count given, and the caller sized
    // each array to its count.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            aya_obj::generated::bpf_cmd::BPF_OBJ_GET_INFO_BY_FD as libc::c_long,
            &mut attr as *mut InfoAttr,
            std::mem::size_of::<InfoAttr>(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Every function of every loaded program. A program unloaded while
/// listed is left out; one whose addresses are hidden fails the whole
/// listing, since a caller that trusts it would miss that program's frames.
pub fn loaded_jited_functions() -> Result<Vec<JitedFunction>, JitedError> {
    let mut functions = Vec::new();
    for (n, program) in aya::programs::loaded_programs().enumerate() {
        if n >= MAX_PROGRAMS {
            return Err(JitedError::List(format!(
                "more than {MAX_PROGRAMS} programs"
            )));
        }
        let program = match program {
            Ok(p) => p,
            // Gone between the id and its descriptor: nothing of it runs.
            Err(aya::programs::ProgramError::SyscallError(e))
                if e.io_error.raw_os_error() == Some(libc::ENOENT) =>
            {
                continue
            }
            Err(e) => return Err(JitedError::List(e.to_string())),
        };
        let fd = match program.fd() {
            Ok(fd) => fd,
            Err(aya::programs::ProgramError::SyscallError(e))
                if e.io_error.raw_os_error() == Some(libc::ENOENT) =>
            {
                continue
            }
            Err(e) => return Err(JitedError::List(e.to_string())),
        };
        functions.extend(functions_of(&fd)?);
    }
    Ok(functions)
}

/// The JIT-compiled functions of the program behind `fd`.
fn functions_of(fd: impl AsFd + Copy) -> Result<Vec<JitedFunction>, JitedError> {
    let list = |e: std::io::Error| JitedError::List(e.to_string());
    // SAFETY: a plain C struct of integers and arrays of them: all zeroes
    // is its empty value.
    let mut counts: bpf_prog_info = unsafe { std::mem::zeroed() };
    prog_info(fd, &mut counts).map_err(list)?;
    let name = program_name(&counts.name);
    let functions = counts.nr_jited_ksyms.min(MAX_FUNCTIONS);
    if functions == 0 || counts.nr_jited_func_lens < functions {
        return Err(JitedError::Hidden(name));
    }
    let tags_asked = counts.nr_prog_tags.min(MAX_FUNCTIONS);
    let mut starts = vec![0u64; functions as usize];
    let mut lens = vec![0u32; functions as usize];
    let mut tags = vec![[0u8; 8]; tags_asked as usize];
    // SAFETY: as above.
    let mut info: bpf_prog_info = unsafe { std::mem::zeroed() };
    info.nr_jited_ksyms = functions;
    info.jited_ksyms = starts.as_mut_ptr() as u64;
    info.nr_jited_func_lens = functions;
    info.jited_func_lens = lens.as_mut_ptr() as u64;
    info.nr_prog_tags = tags_asked;
    info.prog_tags = tags.as_mut_ptr() as u64;
    prog_info(fd, &mut info).map_err(list)?;
    // Fewer now than counted: the kernel fills what it has, and says so.
    let filled = info.nr_jited_ksyms.min(functions) as usize;
    let tags_filled = info.nr_prog_tags.min(tags_asked) as usize;
    let mut out = Vec::with_capacity(filled);
    for i in 0..filled {
        if starts[i] == 0 || lens[i] == 0 {
            return Err(JitedError::Hidden(name));
        }
        out.push(JitedFunction {
            start: starts[i],
            len: lens[i],
            name: function_name(i, info.tag, &tags[..tags_filled], &name),
        });
    }
    Ok(out)
}

/// The name of function `i` of a program of tag `program_tag` whose
/// functions' own tags are `tags`, and of name `name`, as kallsyms writes
/// it: the first function is named as the program (kallsyms lists the
/// program there; before Linux 6.5, also its first function's own tag
/// beside it), each other one by its own tag; without a name, the tag alone.
fn function_name(i: usize, program_tag: [u8; 8], tags: &[[u8; 8]], name: &str) -> String {
    let tag = match tags.get(i) {
        Some(own) if i > 0 => own,
        _ => &program_tag,
    };
    let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
    if name.is_empty() {
        format!("bpf_prog_{hex}")
    } else {
        format!("bpf_prog_{hex}_{name}")
    }
}

/// A program's name from its NUL-padded bytes; bytes a name cannot hold
/// (the kernel allows only alphanumerics, `_` and `.`) become `_`.
fn program_name(raw: &[libc::c_char]) -> String {
    raw.iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'.' {
                b as char
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a name is cut at its NUL and keeps only what kallsyms could show.
    #[test]
    fn a_program_name_is_read_up_to_its_nul() {
        let mut raw = [0 as libc::c_char; 16];
        for (i, b) in b"on_sched_sw\x1bx".iter().enumerate() {
            raw[i] = *b as libc::c_char;
        }
        assert_eq!(program_name(&raw), "on_sched_sw_x");
        assert_eq!(program_name(&[0; 16]), "");
    }

    /// Check each function's name: the first by the program's tag, the
    /// others by their own, a nameless program's by the tag alone.
    #[test]
    fn functions_are_named_as_kallsyms_names_them() {
        let program = [0xab; 8];
        let own = [[0x01; 8], [0x02; 8], [0x03; 8]];
        assert_eq!(
            function_name(0, program, &own, "walk"),
            "bpf_prog_abababababababab_walk"
        );
        assert_eq!(
            function_name(2, program, &own, "walk"),
            "bpf_prog_0303030303030303_walk"
        );
        assert_eq!(
            function_name(1, program, &own, ""),
            "bpf_prog_0202020202020202"
        );
        // Fewer tags than functions: the program's.
        assert_eq!(
            function_name(3, program, &own, "x"),
            "bpf_prog_abababababababab_x"
        );
    }

    /// Check, as root, the listing against the kernel's own kallsyms: with
    /// one of our programs loaded, every `[bpf]` program symbol kallsyms
    /// shows is a listed function's start, one of the names there is the
    /// listed one up to its tag, no symbol lies inside a listed function,
    /// and every listed function is in kallsyms (programs loaded or
    /// unloaded in between by others aside: the listing is taken twice
    /// around the read).
    #[test]
    fn the_listing_matches_kallsyms() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED the_listing_matches_kallsyms: needs root (loads a BPF program)");
            return;
        }
        let mut ebpf = aya::EbpfLoader::new()
            .load(crate::bpf::include_bytes_aligned!(
                "../../../ebpf/sample.bpf.o"
            ))
            .expect("the sampler's object loads");
        let program: &mut aya::programs::PerfEvent = ebpf
            .program_mut("sample_first")
            .expect("the object has sample_first")
            .try_into()
            .expect("a perf event program");
        program.load().expect("sample_first verifies");
        // Others load and unload programs meanwhile (feature probes,
        // services): a mismatch counts only if every attempt has one.
        let mut mismatches = Vec::new();
        for _ in 0..5 {
            match compare_with_kallsyms() {
                Ok(()) => return,
                Err(Skip) => return,
                Err(Mismatch(m)) => mismatches.push(m),
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("the listing and kallsyms differ in every attempt: {mismatches:#?}");
    }

    enum Outcome {
        Skip,
        Mismatch(String),
    }
    use Outcome::*;

    /// One comparison of the listing (taken twice, around the read) with kallsyms.
    fn compare_with_kallsyms() -> Result<(), Outcome> {
        let before = loaded_jited_functions().expect("root lists the programs");
        let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap();
        let after = loaded_jited_functions().expect("root lists the programs");
        let stable: Vec<&JitedFunction> = before.iter().filter(|f| after.contains(f)).collect();
        if !stable.iter().any(|f| f.name.ends_with("_sample_first")) {
            return Err(Mismatch(format!("our program is not listed: {before:?}")));
        }
        let symbols: Vec<(u64, &str, bool)> = kallsyms
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let addr = u64::from_str_radix(f.next()?, 16).ok()?;
                let _kind = f.next()?;
                let name = f.next()?;
                Some((
                    addr,
                    name,
                    l.ends_with("[bpf]") && name.starts_with("bpf_prog_"),
                ))
            })
            .collect();
        if !symbols.iter().any(|&(_, _, program)| program) {
            eprintln!("SKIPPED the_listing_matches_kallsyms: kallsyms lists no BPF program (bpf_jit_kallsyms 0, or hardened)");
            return Err(Skip);
        }
        for f in &stable {
            let here: Vec<&str> = symbols
                .iter()
                .filter(|s| s.0 == f.start && s.2)
                .map(|s| s.1)
                .collect();
            // bpf_prog_ and the 16 hex digits of the tag.
            if !here.iter().any(|n| n.get(..25) == f.name.get(..25)) {
                return Err(Mismatch(format!("{f:?} against kallsyms' {here:?}")));
            }
            let end = f.start + f.len as u64;
            if let Some(inside) = symbols.iter().find(|s| s.0 > f.start && s.0 < end) {
                return Err(Mismatch(format!("{inside:?} lies inside {f:?}")));
            }
        }
        for &(addr, name, program) in &symbols {
            if program
                && !before.iter().any(|f| f.start == addr)
                && !after.iter().any(|f| f.start == addr)
            {
                return Err(Mismatch(format!(
                    "kallsyms' {name} at {addr:x} is not listed: {after:?}"
                )));
            }
        }
        Ok(())
    }
}
