//! V8's strings read from the process: sequential (one- or two-byte),
//! cons, thin and sliced, as a name or file.
//!
//! In: a V8 process's pid, its [`V8Layout`] and a tagged pointer to a
//! string. Out: its characters appended to a `String`, at most
//! [`MAX_CHARS`] read through at most [`MAX_STRING_PARTS`] parts; None
//! where a part cannot be read or is external.

use super::layout::V8Layout;
use super::read_u64;
use crate::runtimes::v8::binary::k;
use crate::sys::memory::read_process;

/// Characters of a name or file kept.
pub const MAX_CHARS: usize = 1024;

/// Parts (cons, thin and sliced links, and their pieces) of one string
/// read at most: a tree of empty cons strings cannot make a name cost
/// more reads than this.
pub(super) const MAX_STRING_PARTS: u32 = 64;

impl V8Layout {
    /// Characters `[start, start + max)` of the string at tagged pointer
    /// `w` (instance type `t`), appended to `out`; None where a part cannot
    /// be read or is of a kind not read (external strings).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn string(
        &self,
        pid: u32,
        w: u64,
        t: u16,
        start: usize,
        max: usize,
        parts: &mut u32,
        out: &mut String,
    ) -> Option<()> {
        if *parts == 0 || max == 0 {
            return Some(());
        }
        *parts -= 1;
        let obj = w - 1;
        let mut lb = [0u8; 4];
        read_process(pid, obj + self.at(k::STRING_LENGTH), &mut lb).ok()?;
        let len = i32::from_le_bytes(lb);
        let len = usize::try_from(len).ok()?;
        if start >= len {
            return Some(());
        }
        let take = (len - start).min(max);
        let t = t as u64;
        let rep = t & self.at(k::REPRESENTATION_MASK);
        let one_byte = t & self.at(k::ENCODING_MASK) == self.at(k::ONE_BYTE);
        if rep == self.at(k::SEQ) {
            if one_byte {
                let mut b = vec![0u8; take];
                read_process(pid, obj + self.at(k::ONE_BYTE_CHARS) + start as u64, &mut b).ok()?;
                // Latin-1: each byte is its code point.
                out.extend(b.iter().map(|&c| c as char));
            } else {
                let mut b = vec![0u8; take * 2];
                read_process(
                    pid,
                    obj + self.at(k::TWO_BYTE_CHARS) + 2 * start as u64,
                    &mut b,
                )
                .ok()?;
                let units = b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]));
                out.extend(char::decode_utf16(units).map(|c| c.unwrap_or('\u{fffd}')));
            }
            return Some(());
        }
        let follow = |field: usize| -> Option<(u64, u16)> {
            let p = read_u64(pid, obj + self.at(field))?;
            let pt = self.type_of(pid, p)?;
            ((pt as i64) < self.v[k::FIRST_NONSTRING]).then_some((p, pt))
        };
        if rep == self.at(k::CONS) {
            let (first, ft) = follow(k::CONS_FIRST)?;
            let before = out.chars().count();
            self.string(pid, first, ft, start, take, parts, out)?;
            let got = out.chars().count() - before;
            let first_len = self.length(pid, first)?;
            if got < take {
                let (second, st) = follow(k::CONS_SECOND)?;
                let from = start.saturating_sub(first_len);
                self.string(pid, second, st, from, take - got, parts, out)?;
            }
            return Some(());
        }
        if rep == self.at(k::THIN) {
            let (actual, at) = follow(k::THIN_ACTUAL)?;
            return self.string(pid, actual, at, start, take, parts, out);
        }
        if rep == self.at(k::SLICED) {
            let (parent, pt) = follow(k::SLICED_PARENT)?;
            let offset = self.smi(read_u64(pid, obj + self.at(k::SLICED_OFFSET))?)?;
            let offset = usize::try_from(offset).ok()?;
            return self.string(pid, parent, pt, offset + start, take, parts, out);
        }
        None
    }

    fn length(&self, pid: u32, w: u64) -> Option<usize> {
        let mut lb = [0u8; 4];
        read_process(pid, w - 1 + self.at(k::STRING_LENGTH), &mut lb).ok()?;
        usize::try_from(i32::from_le_bytes(lb)).ok()
    }
}
