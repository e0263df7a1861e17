//! A function's optimized code as read ([`JsCode`]), and which functions
//! run at a place in it: its source position table decoded, its inlinings
//! followed innermost first.
//!
//! In: the bytes of a source position table; a pc (a return address or
//! not). Out: (instruction offset, source position) pairs, and the
//! functions running at the pc with their script offsets, at most
//! [`MAX_SCOPES`]. A malformed table is refused or ends the walk, never
//! loops.

/// Functions one frame is made of at most (V8 inlines a few levels deep; a
/// table that claims more has its innermost ones left out).
pub const MAX_SCOPES: usize = 64;

/// A function's optimized code, as read: where its instructions are, and
/// for each of them which functions run there (the inlined ones and their
/// call sites).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsCode {
    /// The code's Code object (tagged).
    pub code: u64,
    /// Its instructions, `[start, start + size)`.
    pub start: u64,
    /// See `start`.
    pub size: u64,
    /// The function it was compiled for (its SharedFunctionInfo, tagged).
    pub shared: u64,
    /// Source positions by instruction offset, ascending: (offset,
    /// V8's SourcePosition: bit 0 external, 1-30 script offset + 1,
    /// 31-46 inlining id + 1).
    pub(super) positions: Box<[(u32, u64)]>,
    /// Each inlining: the call site (a SourcePosition in its caller) and
    /// the inlined function's index in `inlined` (-1: the outer function).
    pub(super) inlining: Box<[(u64, i32)]>,
    /// The inlined functions: SharedFunctionInfo (tagged) and the
    /// name-or-scope-info word it held when the code was read.
    pub inlined: Box<[(u64, u64)]>,
}

/// A SourcePosition's inlining id (0: the outer function's own code).
pub(super) fn inlining_id(pos: u64) -> usize {
    ((pos >> 31) & 0xffff) as usize
}

/// One zigzag variable-length integer of a V8 position table.
fn vlq(bytes: &[u8], at: &mut usize) -> Option<i64> {
    let mut v: u64 = 0;
    let mut shift = 0;
    loop {
        let b = *bytes.get(*at)?;
        *at += 1;
        if shift >= 64 {
            return None;
        }
        v |= u64::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            break;
        }
    }
    Some(((v >> 1) as i64) ^ -((v & 1) as i64))
}

/// A source position table (V8's `SourcePositionTableBuilder`): pairs of
/// deltas, the instruction offset's sign saying whether the entry is a
/// statement, from offset -1 and position 0. None where it is cut short
/// or its offsets pass 4 GiB.
pub fn decode_positions(bytes: &[u8]) -> Option<Vec<(u32, u64)>> {
    let (mut at, mut offset, mut pos) = (0usize, -1i64, 0i64);
    let mut out = Vec::new();
    while at < bytes.len() {
        let d = vlq(bytes, &mut at)?;
        offset += if d >= 0 { d } else { -(d + 1) };
        pos = pos.wrapping_add(vlq(bytes, &mut at)?);
        // Deltas are magnitudes: offsets only ascend.
        out.push((u32::try_from(offset).ok()?, pos as u64));
    }
    Some(out)
}

impl JsCode {
    /// The functions that run at `pc` (a return address where
    /// `return_address`), innermost first, into `out`: (index into
    /// `inlined`, or -1 for the code's own function; script offset + 1, 0
    /// unknown). Nothing where `pc` is not in the code.
    pub fn scopes(&self, pc: u64, return_address: bool, out: &mut Vec<(i32, u32)>) {
        out.clear();
        if !self.holds(pc) {
            return;
        }
        let offset = (pc - self.start).saturating_sub(u64::from(return_address)) as u32;
        let i = self.positions.partition_point(|&(o, _)| o <= offset);
        let mut pos = match i {
            0 => 0,
            _ => self.positions[i - 1].1,
        };
        let script = |p: u64| {
            if p & 1 == 1 {
                0
            } else {
                ((p >> 1) & 0x3fff_ffff) as u32
            }
        };
        // Each step goes to an outer inlining: ids only decrease, so a
        // malformed table cannot loop.
        let mut last = usize::MAX;
        while let id @ 1.. = inlining_id(pos) {
            let Some(&(call, function)) = self.inlining.get(id - 1) else {
                break;
            };
            if id >= last || function >= self.inlined.len() as i32 {
                break;
            }
            last = id;
            out.push((function, script(pos)));
            pos = call;
        }
        // The outermost ones kept: the frame still joins its callers.
        if out.len() >= MAX_SCOPES {
            out.drain(..out.len() + 1 - MAX_SCOPES);
        }
        out.push((-1, script(pos)));
    }

    /// Whether `pc` lies in the code (its end included: a return address
    /// after a last call).
    pub fn holds(&self, pc: u64) -> bool {
        pc >= self.start && pc <= self.start + self.size
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.positions.len() * 16
            + self.inlining.len() * 16
            + self.inlined.len() * 16
    }
}
