//! CPython's own statement of its layout for out-of-process tools,
//! `_Py_DebugOffsets`: the first bytes of `_PyRuntime` from 3.13 on, read
//! from the interpreter's file (a static initializer: the file holds the
//! bytes every process of it starts with) and checked against the table
//! this build walks by.
//!
//! In: an [`ElfReader`] over a CPython 3.13+ file, `_PyRuntime`'s address,
//! the version the file says, the table's layout for it. Out: Ok where the
//! offsets CPython exports are the table's; an error that says what
//! differs otherwise (a free-threaded build, whose objects carry more
//! header; a patched or differently configured one): its frames are then
//! not read, rather than misread.
//!
//! The struct grows from version to version (3.14 adds fields inside its
//! sections), so reading it takes its own layout per version: 3.13's and
//! 3.14's are here (a cookie, the version, `free_threaded`, then sections
//! of 64-bit offsets, each section's first the size of the structure it
//! describes), checked against pyenv's 3.13.0 and Debian sid's 3.14.10 by
//! a unit test. A version past the table's is refused by its version
//! before this is read: its struct is not known here, and neither are the
//! fields of the table it does not export (the thread-state key's place in
//! `_PyRuntime`, a compact string's data, a heap type's cached keys, the
//! owner value of the eval loop's entry frame, `f_executable`'s tag bits).

use crate::binaries::elf::{vaddr_to_offset, ElfReader};
use crate::runtimes::python::binary::{NotRead, PyLayout};

/// The struct's first eight bytes.
pub const COOKIE: &[u8; 8] = b"xdebugpy";

/// The layout of one version's struct: where, in 64-bit words, it keeps
/// each offset the table also holds.
struct DebugStruct {
    minor: u8,
    /// Words of the struct read (up to the last used).
    words: usize,
    /// The word index of each offset, by the table's field it must equal.
    fields: [(&'static str, usize); 19],
    /// `unicode_object.asciiobject_size`: where a compact ASCII string's
    /// characters start.
    ascii_size: usize,
}

/// 3.13's (`Include/internal/pycore_runtime.h`; its last word the GC
/// section's `collecting`).
const DEBUG_313: DebugStruct = DebugStruct {
    minor: 13,
    words: 73,
    fields: [
        ("runtime_interp_head", 5),
        ("interp_modules", 11),
        ("tstate_frame", 23),
        ("tstate_native_tid", 25),
        ("frame_previous", 29),
        ("frame_code", 30),
        ("frame_instr", 31),
        ("frame_owner", 33),
        ("code_filename", 35),
        ("code_name", 36),
        ("code_qualname", 37),
        ("code_linetable", 38),
        ("code_firstlineno", 39),
        ("code_bytecode", 43),
        ("ob_type", 45),
        ("bytes_size", 65),
        ("bytes_data", 66),
        ("str_state", 68),
        ("str_length", 69),
    ],
    ascii_size: 70,
};

/// 3.14's (`Include/internal/pycore_debug_offsets.h`: the interpreter
/// section gains the GIL's and code generations' fields, the thread
/// section `status`, the frame section `stackpointer` and `tlbc_index`,
/// the code section `co_tlbc`, and sections follow for generators, list
/// nodes and the remote debugger; 95 words in all). Word indexes taken
/// with `offsetof` on libpython3.14-dev 3.14.10's header.
const DEBUG_314: DebugStruct = DebugStruct {
    minor: 14,
    words: 81,
    fields: [
        ("runtime_interp_head", 5),
        ("interp_modules", 12),
        ("tstate_frame", 26),
        ("tstate_native_tid", 28),
        ("frame_previous", 32),
        ("frame_code", 33),
        ("frame_instr", 34),
        ("frame_owner", 36),
        ("code_filename", 40),
        ("code_name", 41),
        ("code_qualname", 42),
        ("code_linetable", 43),
        ("code_firstlineno", 44),
        ("code_bytecode", 48),
        ("ob_type", 51),
        ("bytes_size", 75),
        ("bytes_data", 76),
        ("str_state", 78),
        ("str_length", 79),
    ],
    ascii_size: 80,
};

/// The struct's layout in CPython 3.`minor`, if known here.
fn debug_struct(minor: u8) -> Option<&'static DebugStruct> {
    [&DEBUG_313, &DEBUG_314]
        .into_iter()
        .find(|d| d.minor == minor)
}

/// The table's value of `field`.
fn table_value(l: &PyLayout, field: &str) -> Option<u64> {
    Some(match field {
        "runtime_interp_head" => l.runtime_interp_head,
        "interp_modules" => l.interp_modules,
        "tstate_frame" => u64::from(l.tstate_frame),
        "tstate_native_tid" => u64::from(l.tstate_native_tid?),
        "frame_previous" => u64::from(l.frame_previous),
        "frame_code" => u64::from(l.frame_code),
        "frame_instr" => u64::from(l.frame_instr),
        "frame_owner" => u64::from(l.frame_owner?),
        "code_filename" => l.code_filename,
        "code_name" => l.code_name,
        "code_qualname" => l.code_qualname,
        "code_linetable" => l.code_linetable,
        "code_firstlineno" => l.code_firstlineno,
        "code_bytecode" => l.code_bytecode,
        "ob_type" => l.ob_type,
        "bytes_size" => l.bytes_size,
        "bytes_data" => l.bytes_data,
        "str_state" => l.str_state,
        "str_length" => l.str_length,
        _ => return None,
    })
}

/// "CPython 3.14" for `version` (`PY_VERSION_HEX`).
fn named(version: u32) -> String {
    format!("CPython {}.{}", version >> 24, (version >> 16) & 0xff)
}

/// Check the struct, as words (`words[0]` the cookie's bytes), against
/// `version` (`PY_VERSION_HEX`) and the table's layout `l`.
pub fn check(words: &[u64], version: u32, l: &PyLayout) -> Result<(), NotRead> {
    let who = named(version);
    let Some(d) = debug_struct(l.minor) else {
        return Err(NotRead::Version(format!(
            "{who}: this build does not know its debug offsets' layout"
        )));
    };
    if words.len() < d.words || words[0].to_le_bytes() != *COOKIE {
        return Err(NotRead::Damaged(format!(
            "{who} without its debug offsets (_Py_DebugOffsets): its frames are not read"
        )));
    }
    if words[1] >> 16 != u64::from(version >> 16) {
        return Err(NotRead::Damaged(format!(
            "{who}'s debug offsets say version {:#x}: its frames are not read",
            words[1]
        )));
    }
    if words[2] != 0 {
        return Err(NotRead::Version(format!(
            "{who} built free-threaded (its objects' layout is not the default build's): this build reads the frames of default builds"
        )));
    }
    let mut differ = Vec::new();
    for (field, at) in d.fields {
        let table = table_value(l, field).unwrap_or(u64::MAX);
        if words[at] != table {
            differ.push(format!("{field} {} (table {table})", words[at]));
        }
    }
    if words[d.ascii_size] != l.str_ascii_data {
        differ.push(format!(
            "str_ascii_data {} (table {})",
            words[d.ascii_size], l.str_ascii_data
        ));
    }
    if differ.is_empty() {
        Ok(())
    } else {
        Err(NotRead::Damaged(format!(
            "{who}'s own debug offsets differ from this build's table ({}): its frames are not read",
            differ.join(", ")
        )))
    }
}

/// Read the struct from `elf` at `_PyRuntime` (`runtime`) and check it.
pub fn read_and_check(
    elf: &ElfReader<'_>,
    runtime: u64,
    version: u32,
    l: &PyLayout,
) -> Result<(), NotRead> {
    let words = debug_struct(l.minor).map_or(0, |d| d.words);
    let bytes = elf
        .segments()
        .ok()
        .and_then(|s| vaddr_to_offset(&s, runtime))
        .and_then(|offset| {
            elf.read_checked("_Py_DebugOffsets", offset, words as u64 * 8)
                .ok()
        })
        .ok_or_else(|| {
            NotRead::Damaged(format!(
                "{} whose _PyRuntime (its debug offsets) cannot be read from its file",
                named(version)
            ))
        })?;
    let words: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    check(&words, version, l)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimes::python::binary::layout;

    /// The words a version's table says its struct holds (the rest 0).
    fn table_words(l: &PyLayout, version: u32) -> Vec<u64> {
        let d = debug_struct(l.minor).unwrap();
        let mut w = vec![0u64; d.words];
        w[0] = u64::from_le_bytes(*COOKIE);
        w[1] = u64::from(version);
        for (field, at) in d.fields {
            w[at] = table_value(l, field).unwrap();
        }
        w[d.ascii_size] = l.str_ascii_data;
        w
    }

    /// Check that the struct is read and checked, for 3.13's layout and
    /// 3.14's: the table's own words pass; a free-threaded build is
    /// refused as a version not read; an offset that differs is refused,
    /// named; another version's, a missing cookie, too few words refused.
    #[test]
    fn debug_offsets_are_checked_against_the_table() {
        for (minor, version, qualname_at) in [(13, 0x030d_00f0, 37), (14, 0x030e_0af0, 42)] {
            let l = layout(minor).unwrap();
            let good = table_words(l, version);
            assert!(check(&good, version, l).is_ok(), "3.{minor}");
            let mut free = good.clone();
            free[2] = 1;
            assert!(matches!(
                check(&free, version, l),
                Err(NotRead::Version(m)) if m.contains("free-threaded")
            ));
            let mut moved = good.clone();
            moved[qualname_at] += 8;
            let e = check(&moved, version, l).unwrap_err().to_string();
            assert!(e.contains("code_qualname 136 (table 128)"), "{e}");
            let mut other = good.clone();
            other[1] = 0x030c_0000;
            assert!(check(&other, version, l).is_err());
            let mut none = good.clone();
            none[0] = 0;
            assert!(check(&none, version, l).is_err());
            assert!(check(&good[..good.len() - 1], version, l).is_err());
            assert!(check(&[], version, l).is_err());
        }
        // 3.13's words read as 3.14's struct: its offsets are elsewhere.
        let l14 = layout(14).unwrap();
        let mut as_313 = table_words(layout(13).unwrap(), 0x030e_00f0);
        as_313.resize(DEBUG_314.words, 0);
        assert!(check(&as_313, 0x030e_00f0, l14).is_err());
        // A version whose struct is not known here.
        assert!(check(
            &table_words(l14, 0x030e_00f0),
            0x030e_00f0,
            layout(12).unwrap()
        )
        .is_err());
    }

    /// `_PyRuntime`'s address in the CPython file at `path`, if it exists.
    fn runtime_of(path: &str) -> Option<(std::fs::File, u64)> {
        let f = std::fs::File::open(path).ok()?;
        let runtime = {
            let elf = ElfReader::new(&f, Default::default());
            elf.symbols_where(|n| n == b"_PyRuntime")
                .first()
                .map(|s| s.1)
                .expect("_PyRuntime")
        };
        Some((f, runtime))
    }

    /// Check pyenv's 3.13.0 and the tests' CPython 3.14 (Debian sid's,
    /// `tests/src/tools.rs` installs it under target/), where installed:
    /// the offsets each file exports are the table's.
    #[test]
    fn installed_interpreters_export_the_tables_offsets() {
        let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        for (path, version) in [
            (
                format!("{home}/.pyenv/versions/3.13.0/lib/libpython3.13.so.1.0"),
                0x030d_00f0,
            ),
            (
                format!("{root}/target/cpython-3.14/usr/bin/python3.14"),
                0x030e_0af0,
            ),
        ] {
            let Some((f, runtime)) = runtime_of(&path) else {
                eprintln!("no {path}: NOT CHECKED");
                continue;
            };
            let elf = ElfReader::new(&f, Default::default());
            let minor = (version >> 16 & 0xff) as u8;
            read_and_check(&elf, runtime, version, layout(minor).unwrap()).unwrap();
        }
    }
}
