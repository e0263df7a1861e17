//! Python frames by name: a code object read from its process's memory,
//! and the line an instruction in it is on.
//!
//! In: a pid, the address of a code object the kernel found in a frame,
//! the interpreter's layout and where its `PyCode_Type` is. Out: a
//! [`CodeInfo`] (qualified name, file, first line, line table), read once
//! per code object with `process_vm_readv` (the process is never stopped);
//! [`CodeInfo::line`] for an instruction. The memory is the process's own,
//! written by whoever runs it: every pointer and length is checked, a
//! string is read only if it is a compact one within a length limit, and
//! what is not a code object (a freed one, reused) is refused, never named.
//!
//! A code object is named only if it is the one the kernel saw: the kernel
//! reads a fingerprint of it beside its address ([`fingerprint`]: its name,
//! file and line table objects and first line), and what is read here later
//! must have the same. A code object freed after its sample, whose address
//! another took (a module's code after its import, a function compiled
//! again), is refused as [`CodeError::Replaced`], never given the other's
//! name: `python3 -m json.tool` showed a wrong name or file in 98 % of its
//! samples before.

pub use crate::runtimes::frames::CodeInfo;
use crate::runtimes::python::binary::{LineFormat, PyLayout};
use crate::sys::memory::read_process;

/// `PyObject.ob_refcnt`, first in every object of the builds read here
/// (not the free-threaded ones).
const OB_REFCNT: u64 = 0;
/// More references than any live object has; less than any heap pointer.
const MAX_REFERENCES: u64 = 1 << 40;

pub use crate::runtimes::chain::{fingerprint, KernelPyFrame};

/// Longest name and file name read (longer ones are refused).
const MAX_NAME_CHARS: u64 = 1024;
const MAX_FILE_CHARS: u64 = 4096;
/// Largest line table read.
const MAX_LINE_TABLE: u64 = 64 << 10;

/// A CPython code object's lines, from its location table.
impl CodeInfo {
    /// The line of the instruction `index` code units (2 bytes each) into
    /// the bytecode; the first line for one before it or past the table.
    pub fn line(&self, index: i64) -> u32 {
        location_line(&self.line_table, self.first_line, index)
    }
}

/// Why a code object was not read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodeError {
    /// Its memory could not be read (the process exited, the page is gone).
    #[error("its memory could not be read")]
    Unreadable,
    /// What is there is no code object (freed, its memory reused).
    #[error("no code object there")]
    NotCode,
    /// A name, file or line table that is no valid one.
    #[error("a malformed {0}")]
    Malformed(&'static str),
    /// A code object freed since the kernel saw it, its memory not yet
    /// reused: what it points to may be.
    #[error("the code object sampled there was freed")]
    Freed,
    /// A code object, but not the one the kernel saw there: that one was
    /// freed and its address reused.
    #[error("the code object sampled there was freed and its address reused")]
    Replaced,
    /// The process is gone (no such process): nothing more can be read of it.
    #[error("the process is gone")]
    Gone,
}

impl CodeError {
    /// Why a read of a process's memory failed: the process gone (no such
    /// process), or the address unreadable.
    pub fn of_read(e: std::io::Error) -> CodeError {
        match e.raw_os_error() {
            Some(libc::ESRCH) => CodeError::Gone,
            _ => CodeError::Unreadable,
        }
    }
}

fn read_u64(buf: &[u8], at: u64) -> Option<u64> {
    let at = usize::try_from(at).ok()?;
    Some(u64::from_le_bytes(
        buf.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// The word at `at` of `buf` (bytes read from a process by a runtime's
/// layout), or a malformed layout: PHP's, Perl's and Ruby's readers share it.
pub fn layout_word(buf: &[u8], at: u64) -> Result<u64, CodeError> {
    read_u64(buf, at).ok_or(CodeError::Malformed("layout"))
}

fn read_word(pid: u32, addr: u64) -> Result<u64, CodeError> {
    let mut b = [0u8; 8];
    read_process(pid, addr, &mut b).map_err(|_| CodeError::Unreadable)?;
    Ok(u64::from_le_bytes(b))
}

/// Read the `str` object at `addr`: a compact string (what the compiler
/// makes of names and file names) of at most `max` characters.
fn read_str(pid: u32, addr: u64, l: &PyLayout, max: u64) -> Result<String, CodeError> {
    let length = read_word(pid, addr.wrapping_add(l.str_length))?;
    let state = read_word(pid, addr.wrapping_add(l.str_state))? as u32;
    let (kind, compact, ascii) = (
        (state >> 2) & 7,
        (state >> 5) & 1 == 1,
        (state >> 6) & 1 == 1,
    );
    if !compact || length > max || !matches!(kind, 1 | 2 | 4) {
        return Err(CodeError::Malformed("string"));
    }
    let data = addr.wrapping_add(if ascii {
        l.str_ascii_data
    } else {
        l.str_compact_data
    });
    let mut bytes = vec![0u8; (length * kind as u64) as usize];
    read_process(pid, data, &mut bytes).map_err(|_| CodeError::Unreadable)?;
    decode_compact(kind, ascii, &bytes).ok_or(CodeError::Malformed("string"))
}

/// The characters of a compact `str` of `kind` (1, 2 or 4 bytes each;
/// ASCII-only when `ascii`), or None where they are no valid ones.
pub(super) fn decode_compact(kind: u32, ascii: bool, bytes: &[u8]) -> Option<String> {
    match kind {
        1 if ascii => std::str::from_utf8(bytes)
            .ok()
            .filter(|s| s.is_ascii())
            .map(str::to_string),
        1 => Some(bytes.iter().map(|&b| b as char).collect()),
        2 => bytes
            .chunks_exact(2)
            .map(|c| char::from_u32(u16::from_le_bytes([c[0], c[1]]) as u32))
            .collect(),
        _ => bytes
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
    }
}

/// Read the code object at `addr` of `pid`, whose `PyCode_Type` lies at
/// `code_type`, if it is still the one of fingerprint `expected`.
pub fn read_code(
    pid: u32,
    addr: u64,
    expected: u32,
    l: &PyLayout,
    code_type: u64,
) -> Result<CodeInfo, CodeError> {
    let mut header = vec![0u8; l.code_header_bytes() as usize];
    read_process(pid, addr, &mut header).map_err(CodeError::of_read)?;
    let field = |at: u64| read_u64(&header, at).ok_or(CodeError::NotCode);
    if field(l.ob_type)? != code_type {
        return Err(CodeError::NotCode);
    }
    // A freed object keeps its type word until its memory is taken again,
    // but its allocator writes over the reference count (pymalloc: the next
    // free block, a pointer or 0). Such a code object's name and file may
    // already be freed and reused: `importlib/readers.py`'s `<module>` was
    // once named "lib" that way. A live object counts 1 to 2^32 references
    // (3.12+'s immortal ones 2^32 - 1); a pointer is above 2^44.
    let references = field(OB_REFCNT)?;
    if references == 0 || references > MAX_REFERENCES {
        return Err(CodeError::Freed);
    }
    let found = fingerprint(
        field(l.code_qualname)?,
        field(l.code_filename)?,
        field(l.code_linetable)?,
        field(l.code_firstlineno)? as u32,
    );
    if found != expected {
        return Err(CodeError::Replaced);
    }
    let first_line = (field(l.code_firstlineno)? as u32) as i32;
    let qualname = read_str(pid, field(l.code_qualname)?, l, MAX_NAME_CHARS)?;
    let filename = read_str(pid, field(l.code_filename)?, l, MAX_FILE_CHARS)?;
    let table = field(l.code_linetable)?;
    let size = read_word(pid, table.wrapping_add(l.bytes_size))?;
    if size > MAX_LINE_TABLE {
        return Err(CodeError::Malformed("line table"));
    }
    let mut line_table = vec![0u8; size as usize];
    read_process(pid, table.wrapping_add(l.bytes_data), &mut line_table)
        .map_err(|_| CodeError::Unreadable)?;
    let line_table = match l.lines {
        LineFormat::Locations => line_table,
        LineFormat::Linetable310 => locations_of(&linetable_310_ranges(&line_table)),
        LineFormat::Lnotab => {
            let code = field(l.code_code.ok_or(CodeError::Malformed("layout"))?)?;
            let code_bytes = read_word(pid, code.wrapping_add(l.bytes_size))?;
            locations_of(&lnotab_ranges(&line_table, code_bytes.min(MAX_CODE_BYTES)))
        }
    };
    Ok(CodeInfo {
        kind: crate::model::recording::FrameKind::Python,
        qualname: qualname.into(),
        filename: filename.into(),
        first_line: first_line.max(0) as u32,
        line_table: line_table.into(),
    })
}

/// Bytecode bytes of a 3.8/3.9 code object its line table is said for, at
/// most (as its table, [`MAX_LINE_TABLE`]): past them an instruction gets
/// the first line. A `co_code` size is not in the fingerprint: a lie (or a
/// freed object's) then costs the cache at most 4K entries of 2 bytes.
const MAX_CODE_BYTES: u64 = 64 << 10;

/// A run of bytecode on one line: (bytes, the line or None for none).
type LineRange = (u64, Option<i64>);

/// 3.8 and 3.9's `co_lnotab` (`Objects/lnotab_notes.txt`): pairs of (bytes
/// on, lines on, signed) increments from offset 0 at the first line (as
/// `PyCode_Addr2Line` walks them); the last line runs to `code_bytes`.
fn lnotab_ranges(table: &[u8], code_bytes: u64) -> Vec<LineRange> {
    let mut ranges = Vec::new();
    let (mut addr, mut line) = (0u64, 0i64);
    for pair in table.chunks_exact(2) {
        if pair[0] > 0 {
            ranges.push((pair[0] as u64, Some(line)));
            addr += pair[0] as u64;
        }
        line += pair[1] as i8 as i64;
    }
    if code_bytes > addr {
        ranges.push((code_bytes - addr, Some(line)));
    }
    ranges
}

/// 3.10's `co_linetable`: pairs of (bytes, signed line increment) ranges,
/// an increment of -128 saying the range has no line (as 3.10's
/// `PyLineTable_NextAddressRange` reads them).
fn linetable_310_ranges(table: &[u8]) -> Vec<LineRange> {
    let mut line = 0i64;
    table
        .chunks_exact(2)
        .map(|pair| {
            let delta = pair[1] as i8;
            if delta != -128 {
                line += delta as i64;
            }
            (pair[0] as u64, (delta != -128).then_some(line))
        })
        .filter(|&(bytes, _)| bytes > 0)
        .collect()
}

/// Ranges of lines relative to the first line, as a 3.11+ location table
/// ([`location_line`] reads one format): entries of up to 8 code units,
/// "no column" ones (kind 13) carrying the line's change, "no location"
/// (kind 15) where a range has no line. Translated once per code object.
fn locations_of(ranges: &[LineRange]) -> Vec<u8> {
    let mut table = Vec::new();
    let mut line = 0i64;
    // Units from absolute offsets: a range may hold an odd count of bytes
    // (3.8's lnotab splits a line's 300 bytes as 255 and 45).
    let mut start = 0u64;
    for &(bytes, at) in ranges {
        let end = start.saturating_add(bytes);
        let mut units = end / 2 - start / 2;
        start = end;
        while units > 0 {
            let n = units.min(8);
            units -= n;
            let Some(at) = at else {
                table.push(0x80 | 15 << 3 | (n as u8 - 1));
                continue;
            };
            table.push(0x80 | 13 << 3 | (n as u8 - 1));
            let delta = at - line;
            line = at;
            let mut v = if delta < 0 {
                (delta.unsigned_abs()) << 1 | 1
            } else {
                (delta as u64) << 1
            };
            loop {
                let more = v >= 64;
                table.push((v & 63) as u8 | if more { 64 } else { 0 });
                v >>= 6;
                if !more {
                    break;
                }
            }
        }
    }
    table
}

/// The line of the instruction `index` code units into the bytecode, from
/// a 3.11+ location table (CPython's `Objects/locations.md`): entries of
/// `(b & 7) + 1` code units, a first byte with bit 7 set and the entry's
/// kind in bits 3-6; kinds 0-9 keep the line, 10-12 add `kind - 10`, 13
/// and 14 add a signed varint (14 then holds three more varints), 15 has
/// no location. Varints are 6-bit groups, bit 6 meaning more follow.
pub fn location_line(table: &[u8], first_line: u32, index: i64) -> u32 {
    if index < 0 {
        return first_line;
    }
    let mut line = first_line as i64;
    let mut at = 0usize;
    let mut start = 0i64;
    let varint = |at: &mut usize| -> Option<u64> {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let b = *table.get(*at)?;
            *at += 1;
            v |= ((b & 63) as u64) << shift.min(63);
            shift += 6;
            if b & 64 == 0 {
                return Some(v);
            }
        }
    };
    let signed = |v: u64| {
        if v & 1 == 1 {
            -((v >> 1) as i64)
        } else {
            (v >> 1) as i64
        }
    };
    while let Some(&first) = table.get(at) {
        if first & 0x80 == 0 {
            break; // not an entry's start: a damaged table
        }
        at += 1;
        let kind = (first >> 3) & 15;
        let units = (first & 7) as i64 + 1;
        let delta = match kind {
            0..=9 => {
                at += 1;
                0
            }
            10..=12 => {
                at += 2;
                kind as i64 - 10
            }
            13 => varint(&mut at).map(signed).unwrap_or(0),
            14 => {
                let d = varint(&mut at).map(signed).unwrap_or(0);
                for _ in 0..3 {
                    varint(&mut at);
                }
                d
            }
            _ => 0,
        };
        line += delta;
        if index < start + units {
            return line.clamp(0, u32::MAX as i64) as u32;
        }
        start += units;
    }
    first_line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a code object of a process that is gone (a child reaped)
    /// says so, and one at an unmapped address of a live one does not.
    #[test]
    fn a_gone_process_is_told_from_an_unreadable_address() {
        let layout = crate::runtimes::python::binary::layout(12).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let live = read_code(pid, 8, 0, layout, 0);
        assert_eq!(
            live.err(),
            Some(CodeError::Unreadable),
            "address 8 is mapped nowhere"
        );
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(read_code(pid, 8, 0, layout, 0).err(), Some(CodeError::Gone));
    }

    /// Check the line tables against CPython's own reading of them: for a
    /// function whose body spans lines, each instruction's line, as every
    /// installed interpreter computes it (`co_lines()`, 3.10+;
    /// `dis.findlinestarts`, 3.8 and 3.9), equals ours, from 3.11+'s
    /// location table and from 3.8-3.10's tables translated into one.
    #[test]
    fn location_lines_match_co_lines() {
        let script = r#"
import sys, dis
def f(a):
    x = a + 1
    if x > 2:
        y = [i * 2 for i in range(x)]
    else:
        y = None
    for k in range(3):
        x += k


    return (x,
            y)
c = f.__code__
table = c.co_linetable if sys.version_info >= (3, 10) else c.co_lnotab
print(sys.version_info[1], c.co_firstlineno, len(c.co_code), table.hex())
if hasattr(c, "co_lines"):
    for start, end, line in c.co_lines():
        for i in range(start // 2, end // 2):
            print(i, -1 if line is None else line)
else:
    starts = list(dis.findlinestarts(c))
    for i in range(len(c.co_code) // 2):
        print(i, [l for o, l in starts if o <= 2 * i][-1])
"#;
        let mut checked_minors = Vec::new();
        let mut pythons: Vec<std::path::PathBuf> = vec!["/usr/bin/python3".into()];
        if let Ok(dir) = std::fs::read_dir("/root/.pyenv/versions") {
            pythons.extend(
                dir.filter_map(|e| e.ok())
                    .map(|e| e.path().join("bin/python3")),
            );
        }
        for py in pythons {
            let Ok(out) = std::process::Command::new(&py)
                .arg("-c")
                .arg(script)
                .output()
            else {
                continue;
            };
            let text = String::from_utf8_lossy(&out.stdout);
            let mut lines = text.lines();
            let Some(head) = lines.next() else { continue };
            let head: Vec<&str> = head.split(' ').collect();
            let [minor, first, code_bytes, hex] = head[..] else {
                continue;
            };
            let (minor, first, code_bytes): (u8, u32, u64) = (
                minor.parse().unwrap(),
                first.parse().unwrap(),
                code_bytes.parse().unwrap(),
            );
            let raw: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            let table = match minor {
                8 | 9 => locations_of(&lnotab_ranges(&raw, code_bytes)),
                10 => locations_of(&linetable_310_ranges(&raw)),
                11.. => raw,
                _ => continue,
            };
            let mut checked = 0;
            for l in lines {
                let (i, line) = l.split_once(' ').unwrap();
                let (i, line): (i64, i64) = (i.parse().unwrap(), line.parse().unwrap());
                if line >= 0 {
                    assert_eq!(
                        location_line(&table, first, i) as i64,
                        line,
                        "{} (3.{minor}): instruction {i}",
                        py.display()
                    );
                    checked += 1;
                }
            }
            assert!(checked > 10, "{}: {checked} instructions", py.display());
            assert_eq!(
                location_line(&table, first, -1),
                first,
                "before the first instruction"
            );
            checked_minors.push(minor);
        }
        eprintln!("checked 3.{checked_minors:?}");
        assert!(
            checked_minors.iter().any(|&m| m >= 11),
            "no CPython 3.11+ to check the location table against"
        );
    }

    /// A line table's lines and lengths carried into the location format:
    /// a line's run longer than an entry holds, a jump back of hundreds of
    /// lines, and a run without a line (kept at the line before).
    #[test]
    fn translated_line_tables_keep_long_runs_and_big_jumps() {
        let table = locations_of(&[(40, Some(0)), (6, Some(300)), (4, None), (2, Some(-2))]);
        let line = |i| location_line(&table, 100, i);
        assert_eq!((line(0), line(19)), (100, 100));
        assert_eq!((line(20), line(22)), (400, 400));
        assert_eq!((line(23), line(24)), (400, 400));
        assert_eq!(line(25), 98);
        assert_eq!(line(26), 100, "past the table: the first line");
        // lnotab: (bytes, lines) increments; 3.10: ranges, -128 for none.
        assert_eq!(
            lnotab_ranges(&[0, 2, 6, 1, 4, 0xff], 20),
            vec![(6, Some(2)), (4, Some(3)), (10, Some(2))]
        );
        assert_eq!(
            linetable_310_ranges(&[6, 1, 4, 0x80, 0, 2, 4, 1]),
            vec![(6, Some(1)), (4, None), (4, Some(4))]
        );
        // 3.8's lnotab splits one line's 300 bytes as (255, 0), (45, 1):
        // 150 units on the first line, the next on the line after.
        let split = locations_of(&lnotab_ranges(&[255, 0, 45, 1], 304));
        assert_eq!(location_line(&split, 10, 149), 10);
        assert_eq!(location_line(&split, 10, 150), 11);
    }

    /// Check, against every installed CPython 3.8+ reading its own code
    /// objects, that the fingerprint's fields are the ones the layout says
    /// (the ids of `co_qualname`, `co_filename`, `co_linetable` and
    /// `co_firstlineno`, as the kernel reads them at those offsets): each
    /// code object is read and named with its fingerprint, and refused as
    /// replaced with any other.
    #[test]
    fn code_objects_are_read_only_with_their_own_fingerprint() {
        use std::io::BufRead;
        let script = "import sys\ndef f(x):\n    return x + 1\nclass C:\n    def m(self):\n        pass\nc = [f.__code__, C.m.__code__, compile('z = 1', 'gone.py', 'exec')]\nw = [f'{id(x)},{id(getattr(x, \"co_qualname\", x.co_name))},{id(x.co_filename)},{id(x.co_linetable if sys.version_info >= (3, 10) else x.co_lnotab)},{x.co_firstlineno}' for x in c]\nt = id(type(c[0]))\ndel c[2]\nprint(sys.version_info.minor, t, *w, flush=True)\nsys.stdin.read()\n";
        let mut pythons: Vec<std::path::PathBuf> = vec!["/usr/bin/python3".into()];
        if let Ok(dir) = std::fs::read_dir("/root/.pyenv/versions") {
            pythons.extend(
                dir.filter_map(|e| e.ok())
                    .map(|e| e.path().join("bin/python3")),
            );
        }
        let mut checked = 0;
        for py in pythons {
            let Ok(mut child) = std::process::Command::new(&py)
                .args(["-c", script])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
            else {
                continue;
            };
            let mut line = String::new();
            let _ = std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
            let mut words = line.split_whitespace();
            let minor: u8 = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
            let Some(layout) = crate::runtimes::python::binary::layout(minor) else {
                let _ = child.kill();
                let _ = child.wait();
                continue;
            };
            let code_type: u64 = words.next().unwrap().parse().unwrap();
            let mut names = Vec::new();
            let mut words: Vec<&str> = words.collect();
            let freed = words.pop().unwrap();
            for w in words {
                let v: Vec<u64> = w.split(',').map(|x| x.parse().unwrap()).collect();
                let fp = fingerprint(v[1], v[2], v[3], v[4] as u32);
                let code = read_code(child.id(), v[0], fp, layout, code_type)
                    .unwrap_or_else(|e| panic!("{}: {e}", py.display()));
                assert_eq!(code.first_line, v[4] as u32);
                names.push(code.qualname.to_string());
                assert_eq!(
                    read_code(child.id(), v[0], fp ^ 1, layout, code_type),
                    Err(CodeError::Replaced),
                    "{}",
                    py.display()
                );
            }
            // Before 3.11 a code object has no qualified name.
            let method = if minor >= 11 { "C.m" } else { "m" };
            assert_eq!(names, ["f", method], "{}", py.display());
            // The last: a code object already freed when it is read.
            let v: Vec<u64> = freed.split(',').map(|x| x.parse().unwrap()).collect();
            let fp = fingerprint(v[1], v[2], v[3], v[4] as u32);
            let read = read_code(child.id(), v[0], fp, layout, code_type);
            assert_eq!(read, Err(CodeError::Freed), "{}", py.display());
            let _ = child.kill();
            let _ = child.wait();
            checked += 1;
        }
        assert!(checked >= 1, "no CPython 3.8+ to read code objects from");
    }

    /// Check that the halves of a fingerprint and the flags come apart
    /// from the words the kernel wrote, and addresses keep their 48 bits.
    #[test]
    fn kernel_frame_words_split() {
        let f = KernelPyFrame::from_words(0xabcd_7f12_3456_7891, 0x1234_7f12_3456_7a00);
        assert_eq!(
            f,
            KernelPyFrame {
                code: 0x7f12_3456_7890,
                fingerprint: 0xabcd_1234,
                instr: 0x7f12_3456_7a00,
                segment_end: true,
                marks: 0
            }
        );
    }

    /// Check that a damaged table gives the first line, never a panic.
    #[test]
    fn damaged_tables_give_the_first_line() {
        for table in [
            &[][..],
            &[0x00, 0x12][..],
            &[
                0xf0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            ][..],
            &[0xe8][..],
        ] {
            let _ = location_line(table, 7, 3);
        }
        assert_eq!(location_line(&[], 7, 3), 7);
    }
}
