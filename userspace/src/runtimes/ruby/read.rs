//! Ruby methods and blocks by name: an iseq read from its process's memory.
//!
//! In: a pid, the address of an iseq the kernel found in a control frame,
//! with the fingerprint it read of it (its label, path, code and first
//! line: [`crate::runtimes::chain::fingerprint`]), and the version's
//! layout. Out: a [`CodeInfo`] (its label as Ruby's backtraces give it:
//! `spin`, `block in outer`, `<main>`, `<class:Box>`, `rescue in run`, but
//! `eval in load` for code `eval` compiled in `load`, which Ruby labels as
//! the method that called `eval`; its path; its first line) with its line table (each instruction's position
//! and line), read once per iseq with `process_vm_readv`, and
//! [`line_at`] to read a line from it. The memory is the process's own:
//! every length is bounded, and what is not an iseq, or no longer the one
//! the kernel saw, is refused.
//!
//! Lines: 3.1 keeps an iseq's instruction positions as a succinct bit
//! vector once built (`insns_info.succ_index_table`: the positions array
//! freed), whose rank of a position is the index of its line entry plus
//! one (Ruby's `succ_index_lookup`); the positions it holds are read here
//! from it once per iseq, and a line found by a binary search of them.

use crate::model::recording::FrameKind;
use crate::runtimes::chain::fingerprint;
pub use crate::runtimes::frames::CodeInfo;
use crate::runtimes::python::read::{layout_word as word, CodeError};
use crate::runtimes::ruby::binary::RubyLayout;
use crate::sys::memory::read_process;

/// Longest label and path read (longer are refused).
const MAX_NAME_CHARS: u64 = 1024;
const MAX_FILE_CHARS: u64 = 4096;
/// Most line entries and instruction words of an iseq read (a larger one
/// keeps its name, without lines).
/// (RDoc's and IRB's largest, read documenting them: under 2,000 entries.)
const MAX_LINE_ENTRIES: u64 = 1 << 14;
const MAX_ISEQ_WORDS: u64 = 1 << 18;

/// Ruby's object types (`flags & T_MASK`) and the iseq's imemo type.
const T_MASK: u64 = 0x1f;
const T_STRING: u64 = 0x05;
const T_ARRAY: u64 = 0x07;
const T_IMEMO: u64 = 0x1a;
const IMEMO_ISEQ: u64 = 7;
/// `ISEQ_TYPE_EVAL`: code `eval` compiled.
const ISEQ_TYPE_EVAL: u32 = 6;
/// `FL_USHIFT`: where an object's own flags begin.
const FL_USHIFT: u64 = 12;
/// A String's flag: its bytes on the heap (else embedded, their count in
/// the flags); an Array's: its elements embedded.
const FL_USER1: u64 = 1 << 13;
/// The succinct table's first positions, 7 bits of rank each, 9 a word.
const IMMEDIATE_POSITIONS: u64 = 54;
/// Each later block: {u32 rank (padded), u64 small ranks, u64 bits[8]}.
const BLOCK_POSITIONS: u64 = 512;
const BLOCK_BYTES: u64 = 80;

fn read_bytes(pid: u32, addr: u64, len: u64) -> Result<Vec<u8>, CodeError> {
    let mut bytes = vec![0u8; len as usize];
    read_process(pid, addr, &mut bytes).map_err(|_| CodeError::Unreadable)?;
    Ok(bytes)
}

/// The String at `addr`, of at most `max` bytes.
fn read_string(pid: u32, addr: u64, max: u64) -> Result<String, CodeError> {
    let head = read_bytes(pid, addr, 32)?;
    let flags = word(&head, 0)?;
    if flags & T_MASK != T_STRING {
        return Err(CodeError::Malformed("string"));
    }
    let bytes = if flags & FL_USER1 != 0 {
        let (len, ptr) = (word(&head, 16)?, word(&head, 24)?);
        if len > max {
            return Err(CodeError::Malformed("string"));
        }
        read_bytes(pid, ptr, len)?
    } else {
        // 3.1: the length in the flags' bits 14-18, the bytes after the header.
        let len = (flags >> (FL_USHIFT + 2)) & 0x1f;
        read_bytes(pid, addr.wrapping_add(16), len)?
    };
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The file a `pathobj` names: a String (the path, also the real one), or
/// an Array `[path, realpath]`, of which the real path (absolute, as
/// rbspy gives it: `/tmp/x.rb` for a script run as `ruby x.rb`,
/// `.../kernel_require.rb` for `<internal:.../kernel_require.rb>`) where it
/// is a String, else the path.
fn read_path(pid: u32, addr: u64) -> Result<String, CodeError> {
    let head = read_bytes(pid, addr, 40)?;
    let flags = word(&head, 0)?;
    if flags & T_MASK != T_ARRAY {
        return read_string(pid, addr, MAX_FILE_CHARS);
    }
    let (len, elements) = if flags & FL_USER1 != 0 {
        // Embedded: the count in bits 15-16, the elements after the header.
        let len = (flags >> (FL_USHIFT + 3)) & 3;
        (len, [word(&head, 16)?, word(&head, 24)?])
    } else {
        let len = word(&head, 16)?;
        let at = word(&head, 32)?;
        let mut two = [0u8; 16];
        read_process(pid, at, &mut two[..8 * len.clamp(1, 2) as usize])
            .map_err(|_| CodeError::Unreadable)?;
        (len, [word(&two, 0)?, word(&two, 8)?])
    };
    if len == 0 {
        return Err(CodeError::Malformed("path"));
    }
    if len >= 2 {
        if let Ok(real) = read_string(pid, elements[1], MAX_FILE_CHARS) {
            return Ok(real);
        }
    }
    read_string(pid, elements[0], MAX_FILE_CHARS)
}

/// The positions a succinct table holds (`imm`: its immediate words, 7
/// bits of rank per position below [`IMMEDIATE_POSITIONS`]; `blocks`: its
/// later blocks' bytes, each a bit per position), rising, none at or past
/// `words`. Its ranks are counts of these bits; the bits are read, not the
/// ranks, so the work is one step per word of the bit vector and per
/// position, whatever the table claims.
fn table_positions(imm: &[u64; 6], blocks: &[u8], words: u64) -> Vec<u32> {
    let mut out = Vec::new();
    let mut last = 0;
    for x in 0..IMMEDIATE_POSITIONS.min(words) {
        let rank = (imm[(x / 9) as usize] >> ((x % 9) * 7)) & 0x7f;
        if rank > last {
            out.push(x as u32);
            last = rank;
        }
    }
    for (b, block) in blocks.chunks_exact(BLOCK_BYTES as usize).enumerate() {
        for k in 0..8 {
            let at = 16 + k * 8;
            let mut bits = u64::from_le_bytes(block[at..at + 8].try_into().expect("8 bytes"));
            while bits != 0 {
                let x = IMMEDIATE_POSITIONS
                    + b as u64 * BLOCK_POSITIONS
                    + k as u64 * 64
                    + u64::from(bits.trailing_zeros());
                if x < words {
                    out.push(x as u32);
                }
                bits &= bits - 1;
            }
        }
    }
    out
}

/// The positions of an iseq's `entries` line entries, `words` instruction
/// words long, from its body: the positions array, or the succinct table.
fn read_positions(
    pid: u32,
    body: &[u8],
    entries: u64,
    words: u64,
    l: &RubyLayout,
) -> Result<Vec<u32>, CodeError> {
    let positions = word(body, l.body_insns_positions)?;
    if positions != 0 {
        let b = read_bytes(pid, positions, entries * 4)?;
        return Ok(b
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect());
    }
    if entries == 1 {
        return Ok(vec![0]);
    }
    let table = word(body, l.body_insns_succ)?;
    // Ruby allocates the immediate words a short iseq needs, not all six.
    let head = read_bytes(pid, table, (words.div_ceil(9) * 8).min(48))?;
    let mut imm = [0u64; 6];
    for (i, w) in imm.iter_mut().enumerate().take(head.len() / 8) {
        *w = word(&head, i as u64 * 8)?;
    }
    let later = words.saturating_sub(IMMEDIATE_POSITIONS);
    let blocks = read_bytes(
        pid,
        table.wrapping_add(48),
        later.div_ceil(BLOCK_POSITIONS) * BLOCK_BYTES,
    )?;
    let positions = table_positions(&imm, &blocks, words);
    if positions.len() as u64 != entries {
        return Err(CodeError::Malformed("line table"));
    }
    Ok(positions)
}

/// The iseq's line table: (position, line) pairs as little-endian u32s,
/// positions rising. Empty where it cannot be read.
fn read_lines(pid: u32, body: &[u8], l: &RubyLayout) -> Result<Vec<u8>, CodeError> {
    let entries = word(body, l.body_insns_size)? & 0xffff_ffff;
    let at = usize::try_from(l.body_iseq_size).map_err(|_| CodeError::Malformed("layout"))?;
    let words = body
        .get(at..at + 4)
        .map(|b| u64::from(u32::from_le_bytes(b.try_into().expect("4 bytes"))))
        .ok_or(CodeError::Malformed("layout"))?;
    if entries == 0 || entries > MAX_LINE_ENTRIES || words > MAX_ISEQ_WORDS {
        return Err(CodeError::Malformed("line table"));
    }
    let info = read_bytes(
        pid,
        word(body, l.body_insns_info)?,
        entries * l.insn_info_size,
    )?;
    let positions = read_positions(pid, body, entries, words, l)?;
    let mut out = Vec::with_capacity(positions.len() * 8);
    let mut previous = None;
    for (i, &pos) in positions.iter().enumerate() {
        if previous.is_some_and(|p| pos <= p) {
            return Err(CodeError::Malformed("line table"));
        }
        previous = Some(pos);
        let at = i * l.insn_info_size as usize;
        let line = i32::from_le_bytes(info[at..at + 4].try_into().expect("4 bytes"));
        out.extend_from_slice(&pos.to_le_bytes());
        out.extend_from_slice(&(line.max(0) as u32).to_le_bytes());
    }
    Ok(out)
}

/// The line of the instruction at `index` (pc - iseq_encoded, in words)
/// by the iseq's table: as Ruby reads it, the entry of the last position at
/// or before index - 1 (the pc points past the instruction's start). 0
/// where the table has none.
pub fn line_at(info: &CodeInfo, index: u64) -> u32 {
    let pos = index.saturating_sub(1);
    let field = |i: usize, at: usize| {
        let c = &info.line_table[i * 8 + at..i * 8 + at + 4];
        u32::from_le_bytes(c.try_into().expect("4 bytes"))
    };
    let n = info.line_table.len() / 8;
    // Positions rise (checked as read): the first entry past pos, less one.
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if u64::from(field(mid, 0)) <= pos {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if lo == 0 {
        0
    } else {
        field(lo - 1, 4)
    }
}

/// Read the iseq at `addr` of `pid`, if it is still the one of fingerprint
/// `expected`.
pub fn read_iseq(
    pid: u32,
    addr: u64,
    expected: u32,
    l: &RubyLayout,
) -> Result<CodeInfo, CodeError> {
    let head = read_bytes(pid, addr, u64::from(l.iseq_body) + 8)?;
    let flags = word(&head, 0)?;
    if flags & T_MASK != T_IMEMO || (flags >> FL_USHIFT) & 0xf != IMEMO_ISEQ {
        return Err(CodeError::NotCode);
    }
    let body_at = word(&head, u64::from(l.iseq_body))?;
    let body = read_bytes(pid, body_at, l.body_read)?;
    let (label, path, code, first) = (
        word(&body, l.body_label)?,
        word(&body, l.body_pathobj)?,
        word(&body, l.body_iseq_encoded)?,
        word(&body, l.body_first_lineno)?,
    );
    if fingerprint(label, path, code, first as u32) != expected {
        return Err(CodeError::Replaced);
    }
    let label = read_string(pid, label, MAX_NAME_CHARS)?;
    let kind = u32::try_from(word(&body, l.body_type)? & 0xffff_ffff).unwrap_or(0);
    let qualname = if kind == ISEQ_TYPE_EVAL {
        format!("eval in {label}")
    } else {
        label
    };
    let filename = read_path(pid, path)?;
    // A Fixnum: the value shifted left once, its low bit set.
    let first_line = if first & 1 == 1 {
        u32::try_from((first as i64) >> 1).unwrap_or(0)
    } else {
        0
    };
    let line_table = read_lines(pid, &body, l).unwrap_or_default();
    Ok(CodeInfo {
        kind: FrameKind::Ruby,
        qualname: qualname.into(),
        filename: filename.into(),
        first_line,
        line_table: line_table.into_boxed_slice(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check the positions read from a succinct table and the line read
    /// from a line table: positions 0, 2, 5 (immediate: a rank each) and
    /// 60 (past the immediate part: a bit), lines 3, 4, 5, 9.
    #[test]
    fn lines_are_read_from_the_succinct_positions() {
        let positions = [0u64, 2, 5, 60];
        let mut imm = [0u64; 6];
        for x in 0..IMMEDIATE_POSITIONS {
            let r = positions.iter().filter(|&&p| p <= x).count() as u64;
            imm[(x / 9) as usize] |= r << ((x % 9) * 7);
        }
        let mut block = vec![0u8; BLOCK_BYTES as usize];
        block[0..4].copy_from_slice(&3u32.to_le_bytes()); // ranks before the block
        block[16..24].copy_from_slice(&(1u64 << (60 - IMMEDIATE_POSITIONS)).to_le_bytes());
        assert_eq!(table_positions(&imm, &block, 70), vec![0, 2, 5, 60]);
        // A position the code does not reach is none.
        assert_eq!(table_positions(&imm, &block, 60), vec![0, 2, 5]);
        let mut table = Vec::new();
        for (p, line) in positions.iter().zip([3u32, 4, 5, 9]) {
            table.extend_from_slice(&(*p as u32).to_le_bytes());
            table.extend_from_slice(&line.to_le_bytes());
        }
        let info = CodeInfo {
            kind: FrameKind::Ruby,
            qualname: "m".into(),
            filename: "f.rb".into(),
            first_line: 2,
            line_table: table.into_boxed_slice(),
        };
        // The pc points past its instruction's start: index 3 is at 2.
        let lines: Vec<u32> = [0, 1, 2, 3, 6, 61, 200]
            .iter()
            .map(|&i| line_at(&info, i))
            .collect();
        assert_eq!(lines, vec![3, 3, 3, 4, 5, 9, 9]);
    }

    /// An embedded 3.1 String holding `text` (at most 23 bytes), as words.
    fn string(text: &str) -> Vec<u64> {
        let mut w = vec![
            T_STRING | (text.len() as u64) << (FL_USHIFT + 2),
            0,
            0,
            0,
            0,
        ];
        let bytes: &mut [u8] = bytemuck_words(&mut w[2..]);
        bytes[..text.len()].copy_from_slice(text.as_bytes());
        w
    }

    fn bytemuck_words(w: &mut [u64]) -> &mut [u8] {
        // SAFETY: u64s are plain bytes; the slice covers exactly them.
        unsafe { std::slice::from_raw_parts_mut(w.as_mut_ptr() as *mut u8, w.len() * 8) }
    }

    /// Check an iseq read from memory laid out as 3.1's (this process's
    /// own, read as another's would be), and what a lying one gets: an
    /// object that is no iseq refused, a fingerprint that differs refused
    /// as replaced, a line table claiming 2^30 entries dropped (the name
    /// kept, no lines), a label claiming 2^40 bytes refused.
    #[test]
    fn iseqs_are_read_and_lies_refused() {
        let l = crate::runtimes::ruby::binary::layout("3.1").unwrap();
        let pid = std::process::id();
        let label = string("m");
        let path = string("a.rb");
        let code = [0u64; 10];
        // Entries {line, node_id, events}: lines 5 and 6 at positions 0, 4.
        let mut entries = [0u64; 3];
        {
            let b = bytemuck_words(&mut entries);
            b[0..4].copy_from_slice(&5i32.to_le_bytes());
            b[12..16].copy_from_slice(&6i32.to_le_bytes());
        }
        let positions = [4u64 << 32];
        let mut body = [0u64; 19];
        body[0] = 1 | 10 << 32; // a method, 10 words of code
        body[1] = code.as_ptr() as u64;
        body[8] = path.as_ptr() as u64;
        body[10] = label.as_ptr() as u64;
        body[11] = 2 * 5 + 1;
        body[15] = entries.as_ptr() as u64;
        body[16] = positions.as_ptr() as u64;
        body[17] = 2;
        let mut iseq = [T_IMEMO | IMEMO_ISEQ << FL_USHIFT, 0, body.as_ptr() as u64];
        let fp = |body: &[u64]| fingerprint(body[10], body[8], body[1], body[11] as u32);
        let at = iseq.as_ptr() as u64;
        let info = read_iseq(pid, at, fp(&body), l).unwrap();
        assert_eq!(
            (&*info.qualname, &*info.filename, info.first_line),
            ("m", "a.rb", 5)
        );
        let lines: Vec<u32> = [0, 1, 4, 5, 9].iter().map(|&i| line_at(&info, i)).collect();
        assert_eq!(lines, vec![5, 5, 5, 6, 6]);
        assert!(matches!(
            read_iseq(pid, at, fp(&body) ^ 1, l),
            Err(CodeError::Replaced)
        ));
        body[17] = 1 << 30;
        let info = read_iseq(pid, at, fp(&body), l).unwrap();
        assert!(info.line_table.is_empty() && line_at(&info, 5) == 0);
        let long = [T_STRING | FL_USER1, 0, 1 << 40, label.as_ptr() as u64, 0];
        body[10] = long.as_ptr() as u64;
        assert!(matches!(
            read_iseq(pid, at, fp(&body), l),
            Err(CodeError::Malformed(_))
        ));
        iseq[0] = T_STRING;
        // Read through the kernel (process_vm_readv), which the compiler
        // does not see: keep the store.
        std::hint::black_box(&iseq);
        assert!(matches!(
            read_iseq(pid, at, fp(&body), l),
            Err(CodeError::NotCode)
        ));
    }
}
