//! JIT symbols and unwind tables from jitdump files (`jit-PID.dump`, perf's format).
//!
//! In: the bytes of a jitdump file a process mapped (the JIT maps it so
//! profilers can find it). Out: the code regions it loaded, as
//! [`JitSymbol`]s in a [`PerfMap`] for lookup; and, read as the file grows
//! ([`JitdumpTail`]), the code loads with the `.eh_frame` their
//! JIT_CODE_UNWINDING_INFO records carry, so stacks unwind through JIT code
//! that keeps no frame pointer (Python's `-X perf_jit` trampolines, V8).
//! Written here because the format is a flat list of records and only three
//! kinds matter; every length is checked, so a truncated or hostile file
//! yields what can be read and a count of what could not, never a panic.

use super::perfmap::{JitSymbol, PerfMap};

const MAGIC: u32 = 0x4A69_5444; // "JiTD"
const JIT_CODE_LOAD: u32 = 0;
const JIT_CODE_MOVE: u32 = 1;
const JIT_CODE_UNWINDING_INFO: u32 = 4;
/// Largest record read (a code load carries its code).
const MAX_RECORD: usize = 16 << 20;

/// A code load with its unwind table, as [`JitdumpTail`] reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JitCode {
    /// Where the code is.
    pub start: u64,
    /// Its size.
    pub size: u64,
    /// The `.eh_frame` bytes of its unwinding-info record, laid out (as perf
    /// lays them when it injects JIT code) at `start + round_up(size, 8)`.
    pub eh_frame: Vec<u8>,
    /// The `.eh_frame_hdr` that follows the `.eh_frame`.
    pub eh_frame_hdr: Vec<u8>,
}

/// Reads a jitdump file as the JIT writes it: each call returns the code
/// loads with unwind tables that were completed since the previous one.
#[derive(Debug, Default)]
pub struct JitdumpTail {
    /// Where the next record starts (0: the header is still unread).
    offset: u64,
    swap: bool,
    /// The unwinding info waiting for the code load it belongs to.
    pending: Option<(Vec<u8>, Vec<u8>)>,
    /// Unusable (not a jitdump, or damaged): nothing more is read.
    dead: bool,
}

impl JitdumpTail {
    /// Read what was appended to `file` since the last call, at most
    /// `budget` bytes. Positional reads: the descriptor's offset is shared.
    pub fn poll(&mut self, file: &std::fs::File, budget: usize) -> Vec<JitCode> {
        use std::os::unix::fs::FileExt;
        let mut out = Vec::new();
        if self.dead {
            return out;
        }
        let read = |at: u64, len: usize| -> Option<Vec<u8>> {
            let mut buf = vec![0u8; len];
            let mut done = 0;
            while done < len {
                match file.read_at(&mut buf[done..], at + done as u64) {
                    Ok(0) | Err(_) => return None,
                    Ok(n) => done += n,
                }
            }
            Some(buf)
        };
        if self.offset == 0 {
            let Some(h) = read(0, 12) else { return out };
            let magic = u32_at(&h, 0, false).unwrap_or(0);
            self.swap = match magic {
                MAGIC => false,
                m if m.swap_bytes() == MAGIC => true,
                _ => {
                    self.dead = true;
                    return out;
                }
            };
            self.offset = u32_at(&h, 8, self.swap).unwrap_or(40).max(40) as u64;
        }
        let mut used = 0usize;
        while used < budget {
            let Some(prefix) = read(self.offset, 16) else {
                break;
            };
            let (id, size) = (
                u32_at(&prefix, 0, self.swap).unwrap_or(0),
                u32_at(&prefix, 4, self.swap).unwrap_or(0) as usize,
            );
            if !(16..=MAX_RECORD).contains(&size) {
                self.dead = true;
                break;
            }
            // A record being written is not complete yet: read it next time.
            let Some(record) = read(self.offset, size) else {
                break;
            };
            let body = &record[16..];
            match id {
                JIT_CODE_UNWINDING_INFO => {
                    let (total, hdr) = (
                        u64_at(body, 0, self.swap).unwrap_or(0) as usize,
                        u64_at(body, 8, self.swap).unwrap_or(0) as usize,
                    );
                    self.pending = body
                        .get(24..24usize.saturating_add(total))
                        .filter(|_| hdr <= total)
                        .map(|d| {
                            let (eh, h) = d.split_at(total - hdr);
                            (eh.to_vec(), h.to_vec())
                        });
                }
                JIT_CODE_LOAD => {
                    if let (Some(start), Some(size), Some((eh_frame, eh_frame_hdr))) = (
                        u64_at(body, 16, self.swap),
                        u64_at(body, 24, self.swap),
                        self.pending.take(),
                    ) {
                        if size > 0 && !eh_frame.is_empty() {
                            out.push(JitCode {
                                start,
                                size,
                                eh_frame,
                                eh_frame_hdr,
                            });
                        }
                    }
                }
                _ => {}
            }
            self.offset += size as u64;
            used += size;
        }
        out
    }
}

fn u32_at(b: &[u8], at: usize, swap: bool) -> Option<u32> {
    let v = u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?);
    Some(if swap { v.swap_bytes() } else { v })
}

fn u64_at(b: &[u8], at: usize, swap: bool) -> Option<u64> {
    let v = u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?);
    Some(if swap { v.swap_bytes() } else { v })
}

/// Parse a jitdump file's code loads (and moves) into a lookup table.
/// Returns None if the header is not a jitdump header.
pub fn parse(bytes: &[u8]) -> Option<PerfMap> {
    let magic = u32_at(bytes, 0, false)?;
    let swap = match magic {
        MAGIC => false,
        m if m.swap_bytes() == MAGIC => true,
        _ => return None,
    };
    let header_size = u32_at(bytes, 8, swap)? as usize;
    let mut map = PerfMap::default();
    let mut at = header_size.max(40);
    while at + 16 <= bytes.len() {
        let (Some(id), Some(size)) = (u32_at(bytes, at, swap), u32_at(bytes, at + 4, swap)) else {
            break;
        };
        let size = size as usize;
        if size < 16 || at.checked_add(size).is_none_or(|end| end > bytes.len()) {
            map.malformed += 1;
            break;
        }
        let body = &bytes[at + 16..at + size];
        match id {
            // pid, tid, vma, code_addr, code_size, code_index, name\0, code
            JIT_CODE_LOAD => match (
                u64_at(body, 16, swap),
                u64_at(body, 24, swap),
                body.get(40..),
            ) {
                (Some(code_addr), Some(code_size), Some(rest)) if code_size > 0 => {
                    let name_len = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
                    map.symbols.push(JitSymbol {
                        start: code_addr,
                        size: code_size,
                        name: super::perfmap::cap_name(&String::from_utf8_lossy(&rest[..name_len])),
                    });
                }
                _ => map.malformed += 1,
            },
            // pid, tid, vma, old_code_addr, new_code_addr, code_size, code_index
            JIT_CODE_MOVE => match (
                u64_at(body, 16, swap),
                u64_at(body, 24, swap),
                u64_at(body, 32, swap),
            ) {
                (Some(old), Some(new), Some(code_size)) => {
                    if let Some(s) = map.symbols.iter().rev().find(|s| s.start == old).cloned() {
                        map.symbols.push(JitSymbol {
                            start: new,
                            size: code_size,
                            ..s
                        });
                    }
                }
                _ => map.malformed += 1,
            },
            _ => {}
        }
        at += size;
    }
    // Later loads at the same address replace earlier ones.
    map.symbols.reverse();
    map.symbols.sort_by_key(|s| s.start);
    map.symbols.dedup_by_key(|s| s.start);
    Some(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code_load(out: &mut Vec<u8>, addr: u64, size: u64, name: &str) {
        let mut body = Vec::new();
        body.extend(1u32.to_le_bytes()); // pid
        body.extend(2u32.to_le_bytes()); // tid
        body.extend(addr.to_le_bytes()); // vma
        body.extend(addr.to_le_bytes()); // code_addr
        body.extend(size.to_le_bytes());
        body.extend(7u64.to_le_bytes()); // code_index
        body.extend(name.as_bytes());
        body.push(0);
        body.extend(vec![0x90u8; size as usize]);
        out.extend(JIT_CODE_LOAD.to_le_bytes());
        out.extend(((16 + body.len()) as u32).to_le_bytes());
        out.extend(0u64.to_le_bytes());
        out.extend(body);
    }

    fn dump() -> Vec<u8> {
        let mut d = Vec::new();
        d.extend(MAGIC.to_le_bytes());
        d.extend(1u32.to_le_bytes());
        d.extend(40u32.to_le_bytes());
        d.extend([0u8; 28]);
        code_load(&mut d, 0x1000, 0x20, "JS:*hot a.js:1");
        code_load(&mut d, 0x3000, 0x10, "Builtin:Foo");
        d
    }

    /// Check that code loads are found and looked up by address.
    #[test]
    fn parses_code_loads() {
        let m = parse(&dump()).unwrap();
        assert_eq!(m.malformed, 0);
        assert_eq!(m.lookup(0x1010).unwrap().name, "JS:*hot a.js:1");
        assert_eq!(m.lookup(0x3005).unwrap().name, "Builtin:Foo");
        assert!(m.lookup(0x2000).is_none());
        assert!(parse(b"ELF\\x7f not a dump").is_none());
    }

    /// Check that every truncation and random corruption of a dump parses
    /// without panicking, keeping the records before the damage.
    #[test]
    fn damaged_dumps_never_panic() {
        let d = dump();
        for cut in 0..d.len() {
            let _ = parse(&d[..cut]);
        }
        let mut x = 0x2545F4914F6CDD1Du64;
        for _ in 0..5000 {
            let mut c = d.clone();
            for _ in 0..4 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x as usize) % c.len();
                c[i] = (x >> 32) as u8;
            }
            if let Some(m) = parse(&c) {
                let _ = m.lookup(0x1000);
            }
        }
    }
}
