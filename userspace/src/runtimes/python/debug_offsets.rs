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
//! sections), so reading it takes its own layout per version: 3.13's is
//! here (CPython 3.13's `Include/internal/pycore_runtime.h`: a cookie, the
//! version, `free_threaded`, then sections of 64-bit offsets, each
//! section's first the size of the structure it describes), checked
//! against pyenv's 3.13.0 by a unit test. A version past the table's is
//! refused by its version before this is read: its struct is not known
//! here, and neither are the fields of the table it does not export (the
//! thread-state key's place in `_PyRuntime`, a compact string's data, a
//! heap type's cached keys).

use crate::binaries::elf::{vaddr_to_offset, ElfReader};
use crate::runtimes::python::binary::{NotRead, PyLayout};

/// The struct's first eight bytes.
pub const COOKIE: &[u8; 8] = b"xdebugpy";

/// Words of 3.13's struct (its last: the GC section's `collecting`).
pub const WORDS_313: usize = 73;

/// 3.13's word index of each offset the table also holds, by the table's
/// field it must equal.
const FIELDS_313: [(&str, usize); 19] = [
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
];
/// `unicode_object.asciiobject_size`: where a compact ASCII string's
/// characters start.
const ASCII_SIZE_313: usize = 70;

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

/// Check 3.13's struct, as words (`words[0]` the cookie's bytes), against
/// `version` (`PY_VERSION_HEX`) and the table's layout `l`.
pub fn check_313(words: &[u64], version: u32, l: &PyLayout) -> Result<(), NotRead> {
    if words.len() < WORDS_313 || words[0].to_le_bytes() != *COOKIE {
        return Err(NotRead::Damaged(
            "CPython 3.13 without its debug offsets (_Py_DebugOffsets): its frames are not read"
                .into(),
        ));
    }
    if words[1] >> 16 != u64::from(version >> 16) {
        return Err(NotRead::Damaged(format!(
            "CPython {}.{}'s debug offsets say version {:#x}: its frames are not read",
            version >> 24,
            (version >> 16) & 0xff,
            words[1]
        )));
    }
    if words[2] != 0 {
        return Err(NotRead::Version(format!(
            "CPython {}.{} built free-threaded (its objects' layout is not the default build's): this build reads the frames of default builds",
            version >> 24,
            (version >> 16) & 0xff
        )));
    }
    let mut differ = Vec::new();
    for (field, at) in FIELDS_313 {
        let table = table_value(l, field).unwrap_or(u64::MAX);
        if words[at] != table {
            differ.push(format!("{field} {} (table {table})", words[at]));
        }
    }
    if words[ASCII_SIZE_313] != l.str_ascii_data {
        differ.push(format!(
            "str_ascii_data {} (table {})",
            words[ASCII_SIZE_313], l.str_ascii_data
        ));
    }
    if differ.is_empty() {
        Ok(())
    } else {
        Err(NotRead::Damaged(format!(
            "CPython 3.13's own debug offsets differ from this build's table ({}): its frames are not read",
            differ.join(", ")
        )))
    }
}

/// Read 3.13's struct from `elf` at `_PyRuntime` (`runtime`) and check it.
pub fn read_and_check_313(
    elf: &ElfReader<'_>,
    runtime: u64,
    version: u32,
    l: &PyLayout,
) -> Result<(), NotRead> {
    let bytes = elf
        .segments()
        .ok()
        .and_then(|s| vaddr_to_offset(&s, runtime))
        .and_then(|offset| {
            elf.read_checked("_Py_DebugOffsets", offset, WORDS_313 as u64 * 8)
                .ok()
        })
        .ok_or_else(|| {
            NotRead::Damaged(
                "CPython 3.13 whose _PyRuntime (its debug offsets) cannot be read from its file"
                    .into(),
            )
        })?;
    let words: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    check_313(&words, version, l)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimes::python::binary::layout;

    /// The words 3.13's table says its struct holds (the rest 0).
    fn table_words(l: &PyLayout) -> Vec<u64> {
        let mut w = vec![0u64; WORDS_313];
        w[0] = u64::from_le_bytes(*COOKIE);
        w[1] = 0x030d_00f0;
        for (field, at) in FIELDS_313 {
            w[at] = table_value(l, field).unwrap();
        }
        w[ASCII_SIZE_313] = l.str_ascii_data;
        w
    }

    /// Check that the struct is read and checked: the table's own words
    /// pass; a free-threaded build is refused as a version not read; an
    /// offset that differs is refused, named; a missing cookie refused.
    #[test]
    fn debug_offsets_are_checked_against_the_table() {
        let l = layout(13).unwrap();
        let good = table_words(l);
        assert!(check_313(&good, 0x030d_00f0, l).is_ok());
        let mut free = good.clone();
        free[2] = 1;
        assert!(matches!(
            check_313(&free, 0x030d_00f0, l),
            Err(NotRead::Version(m)) if m.contains("free-threaded")
        ));
        let mut moved = good.clone();
        moved[37] += 8;
        let e = check_313(&moved, 0x030d_00f0, l).unwrap_err().to_string();
        assert!(e.contains("code_qualname 136 (table 128)"), "{e}");
        let mut other = good.clone();
        other[1] = 0x030c_0000;
        assert!(check_313(&other, 0x030d_00f0, l).is_err());
        let mut none = good;
        none[0] = 0;
        assert!(check_313(&none, 0x030d_00f0, l).is_err());
        assert!(check_313(&[], 0x030d_00f0, l).is_err());
    }

    /// Check pyenv's 3.13.0, where installed: the offsets its file exports
    /// are the table's.
    #[test]
    fn pyenvs_3_13_exports_the_tables_offsets() {
        let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
        let path = format!("{home}/.pyenv/versions/3.13.0/lib/libpython3.13.so.1.0");
        let Ok(f) = std::fs::File::open(&path) else {
            eprintln!("no {path}: NOT CHECKED");
            return;
        };
        let elf = ElfReader::new(&f, Default::default());
        let runtime = elf
            .symbols_where(|n| n == b"_PyRuntime")
            .first()
            .map(|s| s.1)
            .expect("_PyRuntime");
        read_and_check_313(&elf, runtime, 0x030d_00f0, layout(13).unwrap()).unwrap();
    }
}
