//! HotSpot's compiled Java frames for the in-kernel walker: the frame size
//! of each compiled method, read from its own prologue, as unwind rows.
//!
//! In: a JVM's pid and the code ranges of its compiled methods (its perf
//! map, which the JVM writes when sysprof asks: `runtimes/hotspot/perf_maps.rs`). Out:
//! [`JitFrames`]: rows over the JVM's code cache, relative to its lowest
//! method, which the kernel's process entry gives every anonymous
//! executable mapping of the JVM (`unwind/mod.rs`).
//!
//! Why this works: a method compiled by C1 or C2 on x86_64 runs with a
//! fixed frame. Its verified entry is the stack bang (`mov %eax, -N(%rsp)`)
//! and then C1's `push %rbp; sub $size, %rsp` or C2's `sub $size, %rsp;
//! mov %rbp, size-8(%rsp)`, and rsp stays put until the epilogue
//! (arguments go in registers and the outgoing area is part of the frame);
//! without `-XX:+PreserveFramePointer` rbp is an ordinary register, which
//! is why a frame-pointer walk stops at the first Java frame. So the CFA is
//! rsp plus the frame, the return address at CFA - 8, the caller's rbp at
//! CFA - 16 (the interpreter below keeps its frames by rbp, and the walk
//! goes on through it by frame pointer).
//! The prologue is read from the process (`process_vm_readv`, the JVM is
//! never stopped), at most [`PROLOGUE_BYTES`] of each method, and only the
//! exact instruction bytes are taken: a blob that does not start so (stubs,
//! adapters, the interpreter) gets no rows and is walked by frame pointer,
//! as before. The gHotSpotVMStructs way (the OpenTelemetry profiler's)
//! gives the same sizes from the JVM's own tables, and needs per-version
//! offsets and a code-heap walk in BPF; the prologue is the same fact,
//! read where the code states it.
//!
//! Not covered: a sample in a method's epilogue (after `add $size, %rsp`)
//! or prologue gets a wrong return address at the leaf; the walk then
//! stops at the first address in no executable mapping. Code the JIT
//! frees and reuses between two perf maps keeps the old method's rows
//! until the next one (2 s, then further apart).

use crate::binaries::perfmap::PerfMap;
use crate::bpf::abi::{Row, ROW_CFA_RSP, ROW_NONE};
pub use crate::unwind::JitFrames;

/// Bytes of a method read for its prologue: the unverified entry's inline
/// cache check (~20 bytes), alignment, the stack bang (7) and the frame's
/// push and sub (5 or 8).
pub const PROLOGUE_BYTES: usize = 64;

/// Most methods given rows per JVM (4 rows each, 8 bytes a row: 1.6 MB).
pub const MAX_METHODS: usize = 50_000;

/// A compiled method's frame, as its prologue sets it up (offsets from
/// the method's start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prologue {
    /// Where rsp last moves: from here on CFA = rsp + `cfa`.
    pub body_at: u32,
    /// The CFA's distance from rsp in the method's body.
    pub cfa: u32,
    /// Where the caller's rbp is saved (at CFA - 16) from, and the CFA's
    /// distance from rsp there: C1's `push %rbp` comes before its `sub`
    /// (16), C2's store after it (`cfa`).
    pub saved_at: u32,
    /// The CFA's distance from rsp at `saved_at`.
    pub saved_cfa: u32,
}

/// `sub $size, %rsp` at `code[i..]`: (size, length).
fn sub_rsp(code: &[u8], i: usize) -> Option<(u32, usize)> {
    match code.get(i..i + 3)? {
        [0x48, 0x83, 0xec] => Some((*code.get(i + 3)? as u32, 4)),
        [0x48, 0x81, 0xec] => Some((
            u32::from_le_bytes(code.get(i + 3..i + 7)?.try_into().ok()?),
            7,
        )),
        _ => None,
    }
}

/// `mov %rbp, disp(%rsp)` at `code[i..]`: (disp, length).
fn store_rbp(code: &[u8], i: usize) -> Option<(u32, usize)> {
    match code.get(i..i + 4)? {
        [0x48, 0x89, 0x6c, 0x24] => Some((*code.get(i + 4)? as u32, 5)),
        [0x48, 0x89, 0xac, 0x24] => Some((
            u32::from_le_bytes(code.get(i + 4..i + 8)?.try_into().ok()?),
            8,
        )),
        _ => None,
    }
}

/// Find a compiled method's frame set-up in its first bytes: C1's `push
/// %rbp; [mov %rsp, %rbp;] sub $size, %rsp`, or C2's `sub $size, %rsp;
/// mov %rbp, size-8(%rsp)`, each where a frame may begin (after the stack
/// bang `89 84 24 disp32`, after a bang the JVM overwrote with a `jmp`
/// when it made the method not entrant, or at a 16-byte boundary: the
/// verified entry is aligned), so that bytes inside other instructions are
/// not taken for one. None where the code does not start so.
pub fn prologue(code: &[u8]) -> Option<Prologue> {
    for at in 0..code.len() {
        let after_bang = at >= 7 && code[at - 7..at - 4] == [0x89, 0x84, 0x24];
        let after_patched_bang = at == 7 && code[0] == 0xe9;
        if !after_bang && !after_patched_bang && at % 16 != 0 {
            continue;
        }
        let found = if code[at] == 0x55 {
            // C1: push first, then the frame below it.
            let mut i = at + 1;
            // -XX:+PreserveFramePointer: mov %rsp, %rbp (48 89 e5 or 48 8b ec).
            if code
                .get(i..i + 3)
                .is_some_and(|b| b == [0x48, 0x89, 0xe5] || b == [0x48, 0x8b, 0xec])
            {
                i += 3;
            }
            sub_rsp(code, i).map(|(size, len)| Prologue {
                body_at: (i + len) as u32,
                cfa: size + 16,
                saved_at: at as u32 + 1,
                saved_cfa: 16,
            })
        } else {
            // C2: the whole frame at once, rbp stored at its top.
            sub_rsp(code, at).and_then(|(size, len)| {
                let (disp, slen) = store_rbp(code, at + len)?;
                (disp + 8 == size).then_some(Prologue {
                    body_at: (at + len) as u32,
                    cfa: size + 8,
                    saved_at: (at + len + slen) as u32,
                    saved_cfa: size + 8,
                })
            })
        };
        // Frames are 8-byte multiples; a larger one than a megabyte is no frame.
        if let Some(p) = found.filter(|p| p.cfa % 8 == 0 && p.cfa <= 1 << 20) {
            return Some(p);
        }
    }
    None
}

/// A CFA = rsp + `cfa` row at `pc`, with the caller's rbp at CFA - 16 when `saved_rbp`.
fn rsp_row(pc: u32, cfa: u32, saved_rbp: bool) -> Row {
    let off8 = cfa / 8;
    Row {
        pc,
        kind: ROW_CFA_RSP | ((off8 >> 16) << 3) as u8,
        rbp_slot: if saved_rbp { 2 } else { 0 },
        cfa_off8: off8 as u16,
    }
}

/// The rows for the methods of `map` whose prologue `read` gives (`read`
/// fills a buffer from the process's memory at an address, false if it
/// cannot). Methods more than 4 GiB above the lowest are left out (row
/// addresses are 32 bits; HotSpot reserves its code cache in one piece).
pub fn frames(map: &PerfMap, mut read: impl FnMut(u64, &mut [u8]) -> bool) -> JitFrames {
    let mut out = JitFrames::default();
    let mut buf = [0u8; PROLOGUE_BYTES];
    let mut last_end = 0u64;
    for s in &map.symbols {
        if out.methods >= MAX_METHODS {
            break;
        }
        // Sorted by start; an entry overlapping the one before is skipped.
        if s.start < last_end || s.size < 8 {
            continue;
        }
        let len = (s.size as usize).min(PROLOGUE_BYTES);
        if !read(s.start, &mut buf[..len]) {
            continue;
        }
        let Some(p) = prologue(&buf[..len]) else {
            out.without_prologue += 1;
            continue;
        };
        if out.rows.is_empty() {
            out.base = s.start;
        }
        let (Some(start), Some(end)) = (
            rel(out.base, s.start),
            rel(out.base, s.start.saturating_add(s.size)),
        ) else {
            continue;
        };
        if p.body_at.max(p.saved_at) as u64 >= s.size {
            continue;
        }
        // A method ending where this one starts: its "no rule" row goes.
        if out
            .rows
            .last()
            .is_some_and(|r| r.pc == start && r.kind == ROW_NONE)
        {
            out.rows.pop();
        }
        out.rows.push(rsp_row(start, 8, false));
        if p.saved_at < p.body_at {
            // C1: rbp pushed, then the frame.
            out.rows
                .push(rsp_row(start + p.saved_at, p.saved_cfa, true));
            out.rows.push(rsp_row(start + p.body_at, p.cfa, true));
        } else {
            // C2: the frame, then rbp stored in it.
            out.rows.push(rsp_row(start + p.body_at, p.cfa, false));
            out.rows.push(rsp_row(start + p.saved_at, p.cfa, true));
        }
        out.rows.push(Row {
            pc: end,
            kind: ROW_NONE,
            rbp_slot: 0,
            cfa_off8: 0,
        });
        out.methods += 1;
        last_end = s.start + s.size;
    }
    out
}

/// `addr - base` if it fits the rows' 32 bits.
fn rel(base: u64, addr: u64) -> Option<u32> {
    u32::try_from(addr.checked_sub(base)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binaries::perfmap::JitSymbol;

    /// The prologues read from a JVM here (OpenJDK 17, `Hot.hotThree`):
    /// C1's (stack bang, push, sub 0x40), the same made not entrant (the
    /// bang's first bytes a jmp), C2's (sub 0x18, rbp stored at 0x10), C2's
    /// OSR entry (a call first), a large frame with a frame pointer; then
    /// code that is no prologue.
    #[test]
    fn prologues_of_hotspot_methods_are_read() {
        let c1 = [
            0x89, 0x84, 0x24, 0x00, 0xc0, 0xfe, 0xff, 0x55, 0x48, 0x83, 0xec, 0x40, 0x48, 0xbf,
        ];
        assert_eq!(
            prologue(&c1),
            Some(Prologue {
                body_at: 12,
                cfa: 0x50,
                saved_at: 8,
                saved_cfa: 16
            })
        );
        let c1_not_entrant = [
            0xe9, 0xbb, 0x99, 0x56, 0x07, 0xfe, 0xff, 0x55, 0x48, 0x83, 0xec, 0x30, 0x48, 0xb8,
        ];
        assert_eq!(
            prologue(&c1_not_entrant),
            Some(Prologue {
                body_at: 12,
                cfa: 0x40,
                saved_at: 8,
                saved_cfa: 16
            })
        );
        let c2 = [
            0x48, 0x81, 0xec, 0x18, 0, 0, 0, 0x48, 0x89, 0x6c, 0x24, 0x10, 0x33, 0xc0,
        ];
        assert_eq!(
            prologue(&c2),
            Some(Prologue {
                body_at: 7,
                cfa: 0x20,
                saved_at: 12,
                saved_cfa: 0x20
            })
        );
        let mut c2_osr = vec![
            0xe8, 0x1b, 0x2a, 0x55, 0x15, 0x66, 0x66, 0x66, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0,
        ];
        c2_osr.extend_from_slice(&c2);
        assert_eq!(
            prologue(&c2_osr),
            Some(Prologue {
                body_at: 23,
                cfa: 0x20,
                saved_at: 28,
                saved_cfa: 0x20
            })
        );
        let big = [
            0x89, 0x84, 0x24, 0x00, 0xc0, 0xfe, 0xff, 0x55, 0x48, 0x89, 0xe5, 0x48, 0x81, 0xec,
            0x00, 0x02, 0x00, 0x00, 0x90,
        ];
        assert_eq!(
            prologue(&big),
            Some(Prologue {
                body_at: 18,
                cfa: 0x210,
                saved_at: 8,
                saved_cfa: 16
            })
        );
        // 0x55 inside an instruction, not after a bang nor aligned: no frame.
        let stray = [0x90, 0x41, 0x55, 0x48, 0x83, 0xec, 0x30, 0xc3];
        assert_eq!(prologue(&stray), None);
        // A size that is no frame's; C2's store at the wrong place.
        let odd = [
            0x89, 0x84, 0x24, 0x00, 0xc0, 0xfe, 0xff, 0x55, 0x48, 0x83, 0xec, 0x31,
        ];
        assert_eq!(prologue(&odd), None);
        let c2_wrong = [0x48, 0x83, 0xec, 0x18, 0x48, 0x89, 0x6c, 0x24, 0x08];
        assert_eq!(prologue(&c2_wrong), None);
        assert_eq!(prologue(&[]), None);
        assert_eq!(prologue(&[0x55]), None);
    }

    /// Check that any bytes (a method's memory is the JVM's to write) give
    /// a prologue within them or none, never a panic: random code, and
    /// random code salted with the pieces the decoder looks for.
    #[test]
    fn random_code_never_panics() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let pieces: [&[u8]; 5] = [
            &[0x55],
            &[0x48, 0x83, 0xec],
            &[0x48, 0x81, 0xec],
            &[0x48, 0x89, 0x6c, 0x24],
            &[0x89, 0x84, 0x24],
        ];
        for _ in 0..20_000 {
            let mut code = Vec::new();
            let len = (x >> 58) as usize;
            while code.len() < len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if x % 3 == 0 {
                    code.extend_from_slice(pieces[(x >> 8) as usize % pieces.len()]);
                } else {
                    code.push(x as u8);
                }
            }
            if let Some(p) = prologue(&code) {
                assert!(
                    p.body_at as usize <= code.len()
                        && p.saved_at as usize <= code.len()
                        && p.cfa % 8 == 0,
                    "{p:?} from {code:x?}"
                );
            }
        }
    }

    /// Check the rows: per method, CFA = rsp + 8 at its start, + 16 after
    /// the push (rbp saved), + size + 16 in its body, and no rule from its
    /// end; methods without a prologue, overlapping, or unreadable get none.
    #[test]
    fn rows_follow_each_prologue() {
        let c1 = [
            0x89u8, 0x84, 0x24, 0x00, 0xc0, 0xfe, 0xff, 0x55, 0x48, 0x83, 0xec, 0x40, 0x90, 0x90,
        ];
        let mut map = PerfMap::default();
        let sym = |start: u64, size: u64| JitSymbol {
            start,
            size,
            name: String::new(),
        };
        map.symbols = vec![
            sym(0x1000, 0x100),
            sym(0x1100, 0x80),
            sym(0x1140, 0x100),
            sym(0x2000, 0x40),
            sym(0x3000, 0x40),
        ];
        let f = frames(&map, |addr, buf| match addr {
            0x1000 | 0x1100 | 0x1140 => {
                let n = buf.len().min(c1.len());
                buf[..n].copy_from_slice(&c1[..n]);
                true
            }
            0x2000 => {
                buf.fill(0x90);
                true
            }
            _ => false,
        });
        assert_eq!(f.base, 0x1000);
        assert_eq!((f.methods, f.without_prologue), (2, 1));
        let rules: Vec<(u32, u8, u16, u8)> = f
            .rows
            .iter()
            .map(|r| (r.pc, r.kind, r.cfa_off8, r.rbp_slot))
            .collect();
        assert_eq!(
            rules,
            vec![
                (0, 1, 1, 0),
                (8, 1, 2, 2),
                (12, 1, 10, 2),
                (0x100, 1, 1, 0),
                (0x108, 1, 2, 2),
                (0x10c, 1, 10, 2),
                (0x180, 0, 0, 0)
            ]
        );
    }
}
