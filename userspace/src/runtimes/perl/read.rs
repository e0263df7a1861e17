//! Perl subs and files by name, read from their process's memory.
//!
//! In: a pid, the address of a CV the kernel found in a sub's context (or
//! of a file name an eval's or the main program's statement holds), with
//! the fingerprint it read of it, and the version's layout. Out: a
//! [`CodeInfo`] (`Package::sub`, `main::__ANON__`, `(eval)`, `<main>`, with
//! its file), read once per address and fingerprint with
//! `process_vm_readv`. The memory is the process's own: every length is
//! bounded, and what is no longer what the kernel saw (another fingerprint)
//! is refused.

use crate::bpf::abi::PY_FP_MUL;
use crate::model::recording::FrameKind;
pub use crate::runtimes::frames::CodeInfo;
use crate::runtimes::perl::binary::PerlLayout;
use crate::runtimes::python::read::{layout_word as word_at, CodeError};
use crate::sys::memory::read_process;

/// Longest sub or package name read (longer are refused).
const MAX_NAME_CHARS: i32 = 1024;
/// Longest file name read.
const MAX_FILE_CHARS: usize = 4096;

/// A CV's fingerprint from its body's stash, start, root and file words, as
/// the kernel mixes them (`perl_sub_pair`).
pub fn sub_fingerprint(words: [u64; 4]) -> u32 {
    let mut h = words[0];
    for w in &words[1..] {
        h = (h ^ w).wrapping_mul(PY_FP_MUL);
    }
    (h >> 32) as u32
}

/// A file name's fingerprint from its first 16 bytes, as the kernel mixes
/// them (`perl_file_pair`).
pub fn file_fingerprint(head: [u64; 2]) -> u32 {
    ((head[0] ^ head[1]).wrapping_mul(PY_FP_MUL) >> 32) as u32
}

fn read_word(pid: u32, addr: u64) -> Result<u64, CodeError> {
    let mut b = [0u8; 8];
    read_process(pid, addr, &mut b).map_err(|_| CodeError::Unreadable)?;
    Ok(u64::from_le_bytes(b))
}

/// The name a HEK at `addr` holds.
fn read_hek(pid: u32, addr: u64, l: &PerlLayout) -> Result<String, CodeError> {
    if addr == 0 {
        return Err(CodeError::Malformed("name"));
    }
    let mut len = [0u8; 4];
    read_process(pid, addr.wrapping_add(l.hek_len), &mut len).map_err(|_| CodeError::Unreadable)?;
    let len = i32::from_le_bytes(len);
    if !(0..=MAX_NAME_CHARS).contains(&len) {
        return Err(CodeError::Malformed("name"));
    }
    let mut bytes = vec![0u8; len as usize];
    read_process(pid, addr.wrapping_add(l.hek_key), &mut bytes)
        .map_err(|_| CodeError::Unreadable)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The name of the package (stash) at `hv`.
fn read_package(pid: u32, hv: u64, l: &PerlLayout) -> Result<String, CodeError> {
    if hv == 0 {
        return Err(CodeError::Malformed("package"));
    }
    let mut flags = [0u8; 4];
    read_process(pid, hv.wrapping_add(l.sv_flags), &mut flags)
        .map_err(|_| CodeError::Unreadable)?;
    if u32::from_le_bytes(flags) & l.svf_ook == 0 {
        return Err(CodeError::Malformed("package"));
    }
    let body = read_word(pid, hv)?;
    let aux = body.wrapping_add(l.hv_aux);
    let name = read_word(pid, aux)?;
    let mut count = [0u8; 4];
    read_process(pid, aux.wrapping_add(l.aux_name_count), &mut count)
        .map_err(|_| CodeError::Unreadable)?;
    // Several names (a package renamed, or aliased): the first is its own;
    // with a negative count it may be none (a deleted package), and the
    // next is the name it is known by.
    let count = i32::from_le_bytes(count);
    let hek = match count {
        0 => name,
        _ => match read_word(pid, name)? {
            0 if count < 0 => read_word(pid, name.wrapping_add(8))?,
            first => first,
        },
    };
    read_hek(pid, hek, l)
}

/// The NUL-terminated string at `addr`, of at most `max` bytes, read a page
/// at a time (a string may end just before an unmapped page).
fn read_c_string(pid: u32, addr: u64, max: usize) -> Result<String, CodeError> {
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < max {
        let to_page_end = (4096 - (at % 4096)) as usize;
        let mut chunk = vec![0u8; to_page_end.min(max - out.len())];
        read_process(pid, at, &mut chunk).map_err(|_| CodeError::Unreadable)?;
        if let Some(end) = chunk.iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..end]);
            return Ok(String::from_utf8_lossy(&out).into_owned());
        }
        out.extend_from_slice(&chunk);
        at = at.wrapping_add(chunk.len() as u64);
    }
    Err(CodeError::Malformed("file name"))
}

/// Read the sub whose CV is at `cv` in `pid`, if it is still the one of
/// fingerprint `expected`.
pub fn read_sub(pid: u32, cv: u64, expected: u32, l: &PerlLayout) -> Result<CodeInfo, CodeError> {
    let body = read_word(pid, cv)?;
    if body == 0 {
        return Err(CodeError::NotCode);
    }
    let mut head = [0u8; 104];
    let size = (l.cv_flags + 4) as usize;
    let head = &mut head[..size.min(104)];
    read_process(pid, body, head).map_err(|_| CodeError::Unreadable)?;
    let words = [
        word_at(head, l.cv_stash)?,
        word_at(head, l.cv_start)?,
        word_at(head, l.cv_start + 8)?,
        word_at(head, l.cv_file)?,
    ];
    if sub_fingerprint(words) != expected {
        return Err(CodeError::Replaced);
    }
    let at = l.cv_flags as usize;
    let flags = u32::from_le_bytes(
        head.get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .ok_or(CodeError::Malformed("layout"))?,
    );
    let gv = word_at(head, l.cv_gv)?;
    let (name, package) = if flags & l.cvf_named != 0 {
        (read_hek(pid, gv, l)?, read_package(pid, words[0], l))
    } else {
        if gv == 0 {
            return Err(CodeError::Malformed("sub without a name"));
        }
        let gv_body = read_word(pid, gv)?;
        let name = read_hek(pid, read_word(pid, gv_body.wrapping_add(l.gv_name))?, l)?;
        let stash = read_word(pid, gv_body.wrapping_add(l.gv_stash))?;
        (name, read_package(pid, stash, l))
    };
    // A sub whose package is gone (deleted) keeps its own name.
    let qualname = match package {
        Ok(p) => format!("{p}::{name}"),
        Err(_) => name,
    };
    let filename = match words[3] {
        0 => String::new(),
        file => read_c_string(pid, file, MAX_FILE_CHARS)?,
    };
    Ok(CodeInfo {
        kind: FrameKind::Perl,
        qualname: qualname.into(),
        filename: filename.into(),
        first_line: 0,
        line_table: Box::new([]),
    })
}

/// Read the file name at `addr` in `pid` (an eval's, a required file's, the
/// main program's), if it is still the one of fingerprint `expected`, as
/// the frame `name` (`(eval)`, `<main>`).
pub fn read_file_frame(
    pid: u32,
    addr: u64,
    expected: u32,
    name: &str,
) -> Result<CodeInfo, CodeError> {
    let mut head = [0u8; 16];
    read_process(pid, addr, &mut head).map_err(|_| CodeError::Unreadable)?;
    let words = [
        u64::from_le_bytes(head[..8].try_into().expect("8 bytes")),
        u64::from_le_bytes(head[8..].try_into().expect("8 bytes")),
    ];
    if file_fingerprint(words) != expected {
        return Err(CodeError::Replaced);
    }
    Ok(CodeInfo {
        kind: FrameKind::Perl,
        qualname: name.into(),
        filename: read_c_string(pid, addr, MAX_FILE_CHARS)?.into(),
        first_line: 0,
        line_table: Box::new([]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a file name is read to its NUL across a page's end, and
    /// that one longer than the bound is refused.
    #[test]
    fn file_names_are_read_to_their_nul_and_bounded() {
        // Ours: a string straddling a page boundary.
        let mut page = vec![b'a'; 16384];
        let start = (4096 - page.as_ptr() as usize % 4096) % 4096 + 4090;
        page[start + 20] = 0;
        let addr = page.as_ptr() as u64 + start as u64;
        let pid = std::process::id();
        assert_eq!(read_c_string(pid, addr, 4096).unwrap(), "a".repeat(20));
        assert!(matches!(
            read_c_string(pid, addr, 10),
            Err(CodeError::Malformed(_))
        ));
    }

    /// Check that the fingerprints mix every word they are made of.
    #[test]
    fn fingerprints_see_every_word() {
        let base = sub_fingerprint([1, 2, 3, 4]);
        for i in 0..4 {
            let mut w = [1, 2, 3, 4];
            w[i] ^= 1 << 20;
            assert_ne!(sub_fingerprint(w), base, "word {i}");
        }
        assert_ne!(file_fingerprint([1, 2]), file_fingerprint([1, 3]));
        assert_ne!(file_fingerprint([1, 2]), file_fingerprint([0, 2]));
    }
}
