//! V8's JavaScript functions named from the process's memory: the
//! function's name and its script's, as V8's own profiler names them.
//!
//! In: a V8 process's pid, where its binary lies ([`crate::unwind::V8Runtime`])
//! and the `v8dbg_` constants' addresses ([`crate::binaries::v8`]); then,
//! per JavaScript frame the kernel walked, the SharedFunctionInfo it read
//! and the word it read at the object's name-or-scope-info field. Out: the
//! frame slots and field offsets for the kernel's entry ([`V8Layout::kernel`])
//! and each function's name and file ([`V8Layout::function`]).
//!
//! V8 moves and frees its objects: a function is named only if the object
//! is still a SharedFunctionInfo (its map says so) holding the word the
//! kernel read at the sample. A function's own name lives in its
//! ScopeInfo when it has one; V8 publishes no layout for that, so, as the
//! OpenTelemetry profiler does, the first string after the context locals
//! is taken, looked for only where V8 puts it. Every read goes through `process_vm_readv`, bounded: strings
//! to [`MAX_CHARS`] characters through at most [`MAX_STRING_HOPS`] cons,
//! thin or sliced links; nothing from the process sizes an allocation
//! beyond those bounds.

use crate::binaries::v8::{V8Symbols, WANTED};
use crate::bpf::abi::{V8Frames, V8_HEAP_OBJECT_TAG, V8_HEAP_OBJECT_TAG_MASK};
use crate::sys::memory::read_process;

/// Characters of a name or file kept.
pub const MAX_CHARS: usize = 1024;
/// Cons, thin and sliced strings followed per name.
const MAX_STRING_HOPS: u32 = 16;
/// Slots of a ScopeInfo looked through for its function's name.
const SCOPE_INFO_SLOTS: usize = 16;

/// Why a V8 process's layout could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutError {
    /// Its memory could not be read (it exited).
    Unreadable,
    /// A constant holds a value no V8 has (a binary that lies).
    Implausible(&'static str),
}

impl std::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LayoutError::Unreadable => write!(f, "its V8 constants could not be read"),
            LayoutError::Implausible(n) => write!(f, "its V8 constant {n} is implausible"),
        }
    }
}

/// The constants, read from one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V8Layout {
    v: Vec<i64>,
}

/// Indices into [`WANTED`].
mod k {
    pub const FP_MARKER: usize = 0;
    pub const FP_FUNCTION: usize = 1;
    pub const FUNCTION_SHARED: usize = 2;
    pub const SHARED_NAME: usize = 3;
    pub const SHARED_SCRIPT: usize = 4;
    pub const OBJECT_MAP: usize = 5;
    pub const MAP_TYPE: usize = 6;
    pub const SCRIPT_NAME: usize = 7;
    pub const STRING_LENGTH: usize = 8;
    pub const ONE_BYTE_CHARS: usize = 9;
    pub const TWO_BYTE_CHARS: usize = 10;
    pub const CONS_FIRST: usize = 11;
    pub const CONS_SECOND: usize = 12;
    pub const THIN_ACTUAL: usize = 13;
    pub const SLICED_PARENT: usize = 14;
    pub const SLICED_OFFSET: usize = 15;
    pub const TYPE_SHARED: usize = 16;
    pub const TYPE_SCOPE_INFO: usize = 17;
    pub const TYPE_SCRIPT: usize = 18;
    pub const FIRST_NONSTRING: usize = 19;
    pub const REPRESENTATION_MASK: usize = 20;
    pub const ENCODING_MASK: usize = 21;
    pub const SEQ: usize = 22;
    pub const CONS: usize = 23;
    pub const SLICED: usize = 24;
    pub const THIN: usize = 25;
    pub const ONE_BYTE: usize = 26;
    pub const SCOPE_FIRST_VARS: usize = 27;
    pub const SCOPE_CONTEXT_LOCALS: usize = 28;
    pub const SMI_TAG_SIZE: usize = 29;
    pub const SMI_SHIFT_SIZE: usize = 30;
}

/// A JavaScript function, as named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsFunction {
    /// Its name (V8's profiler says `(anonymous)` where it has none).
    pub name: String,
    /// Its script's name: a path, a `file://` URL or `node:internal/…`.
    pub file: String,
}

fn is_heap_object(w: u64) -> bool {
    w & V8_HEAP_OBJECT_TAG_MASK == V8_HEAP_OBJECT_TAG && w < (1 << 47)
}

fn read_u64(pid: u32, addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    read_process(pid, addr, &mut b).ok()?;
    Some(u64::from_le_bytes(b))
}

impl V8Layout {
    /// The constants of V8 process `pid`, whose binary's address 0 is at `base`.
    pub fn read(pid: u32, base: u64, symbols: &V8Symbols) -> Result<V8Layout, LayoutError> {
        let mut v = Vec::with_capacity(WANTED.len());
        for &at in &symbols.at {
            let mut b = [0u8; 4];
            read_process(pid, base.wrapping_add(at), &mut b)
                .map_err(|_| LayoutError::Unreadable)?;
            v.push(i32::from_le_bytes(b) as i64);
        }
        let l = V8Layout { v };
        l.check()?;
        Ok(l)
    }

    /// Each value within what any V8 has: frame slots just below the frame
    /// pointer, fields within a few hundred bytes, a 64-bit Smi shift.
    fn check(&self) -> Result<(), LayoutError> {
        for (i, name) in WANTED.iter().enumerate() {
            let x = self.v[i];
            let ok = match i {
                k::FP_MARKER | k::FP_FUNCTION => (-64..0).contains(&x) && x % 8 == 0,
                k::SMI_TAG_SIZE => x == 1,
                // 31: 64-bit Smis and pointers; 0 would be pointer
                // compression (32-bit fields), which is not read.
                k::SMI_SHIFT_SIZE => x == 31,
                k::SCOPE_FIRST_VARS | k::SCOPE_CONTEXT_LOCALS => {
                    (0..SCOPE_INFO_SLOTS as i64).contains(&x)
                }
                _ => (0..0x1_0000).contains(&x),
            };
            if !ok {
                return Err(LayoutError::Implausible(name));
            }
        }
        Ok(())
    }

    fn at(&self, i: usize) -> u64 {
        self.v[i] as u64
    }

    /// What the kernel's walker reads of each frame.
    pub fn kernel(&self) -> V8Frames {
        V8Frames {
            marker_at: self.v[k::FP_MARKER] as i32,
            function_at: self.v[k::FP_FUNCTION] as i32,
            shared_at: self.v[k::FUNCTION_SHARED] as u32,
            name_at: self.v[k::SHARED_NAME] as u32,
        }
    }

    /// The instance type of the object at tagged pointer `w`.
    fn type_of(&self, pid: u32, w: u64) -> Option<u16> {
        if !is_heap_object(w) {
            return None;
        }
        let map = read_u64(pid, w - 1 + self.at(k::OBJECT_MAP))?;
        if !is_heap_object(map) {
            return None;
        }
        let mut b = [0u8; 2];
        read_process(pid, map - 1 + self.at(k::MAP_TYPE), &mut b).ok()?;
        Some(u16::from_le_bytes(b))
    }

    fn smi(&self, w: u64) -> Option<i64> {
        (w & 1 == 0).then(|| (w as i64) >> (self.v[k::SMI_TAG_SIZE] + self.v[k::SMI_SHIFT_SIZE]))
    }

    /// The function whose SharedFunctionInfo is at tagged pointer `shared`,
    /// if it still is one and still holds `name_word` (as the kernel read it).
    pub fn function(&self, pid: u32, shared: u64, name_word: u64) -> Option<JsFunction> {
        if self.type_of(pid, shared)? != self.at(k::TYPE_SHARED) as u16 {
            return None;
        }
        if read_u64(pid, shared - 1 + self.at(k::SHARED_NAME))? != name_word {
            return None;
        }
        let mut name = String::new();
        match self.type_of(pid, name_word) {
            Some(t) if (t as i64) < self.v[k::FIRST_NONSTRING] => {
                self.string(pid, name_word, t, 0, MAX_CHARS, 0, &mut name)?;
            }
            Some(t) if t == self.at(k::TYPE_SCOPE_INFO) as u16 => {
                self.scope_info_name(pid, name_word, &mut name);
            }
            _ => {}
        }
        if name.is_empty() {
            name.push_str("(anonymous)");
        }
        let mut file = String::new();
        let script = read_u64(pid, shared - 1 + self.at(k::SHARED_SCRIPT))?;
        if self.type_of(pid, script) == Some(self.at(k::TYPE_SCRIPT) as u16) {
            let script_name = read_u64(pid, script - 1 + self.at(k::SCRIPT_NAME))?;
            if let Some(t) = self
                .type_of(pid, script_name)
                .filter(|&t| (t as i64) < self.v[k::FIRST_NONSTRING])
            {
                // A script without a readable name keeps none.
                if self
                    .string(pid, script_name, t, 0, MAX_CHARS, 0, &mut file)
                    .is_none()
                {
                    file.clear();
                }
            }
        }
        Some(JsFunction { name, file })
    }

    /// The name a ScopeInfo holds: the first string after its context
    /// locals' names and infos (its function variable's name, else its
    /// inferred name).
    fn scope_info_name(&self, pid: u32, scope: u64, out: &mut String) {
        let mut slots = [0u8; 8 * SCOPE_INFO_SLOTS];
        // The slots follow the map.
        if read_process(pid, scope - 1 + self.at(k::OBJECT_MAP) + 8, &mut slots).is_err() {
            return;
        }
        let slot = |i: usize| u64::from_le_bytes(slots[i * 8..i * 8 + 8].try_into().expect("8"));
        let locals = self
            .smi(slot(self.v[k::SCOPE_CONTEXT_LOCALS] as usize))
            .unwrap_or(0);
        let first = self.v[k::SCOPE_FIRST_VARS] as usize;
        let Some(from) = usize::try_from(locals)
            .ok()
            .and_then(|l| first.checked_add(l.checked_mul(2)?))
        else {
            return;
        };
        // After the locals: a saved class variable's index (a Smi), the
        // function variable (its name, a Smi slot), the inferred name (a
        // string or undefined); then positions and the outer ScopeInfo. So
        // the name is among the next four, and the first other heap object
        // ends the search: past it lie other fields, or another object.
        for i in from..(from + 4).min(SCOPE_INFO_SLOTS) {
            let w = slot(i);
            if !is_heap_object(w) {
                continue;
            }
            let Some(t) = self
                .type_of(pid, w)
                .filter(|&t| (t as i64) < self.v[k::FIRST_NONSTRING])
            else {
                return;
            };
            if self.string(pid, w, t, 0, MAX_CHARS, 0, out).is_some() && !out.is_empty() {
                return;
            }
            out.clear();
        }
    }

    /// Characters `[start, start + max)` of the string at tagged pointer
    /// `w` (instance type `t`), appended to `out`; None where a part cannot
    /// be read or is of a kind not read (external strings).
    #[allow(clippy::too_many_arguments)]
    fn string(
        &self,
        pid: u32,
        w: u64,
        t: u16,
        start: usize,
        max: usize,
        hops: u32,
        out: &mut String,
    ) -> Option<()> {
        if hops > MAX_STRING_HOPS || max == 0 {
            return Some(());
        }
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
            self.string(pid, first, ft, start, take, hops + 1, out)?;
            let got = out.chars().count() - before;
            let first_len = self.length(pid, first)?;
            if got < take {
                let (second, st) = follow(k::CONS_SECOND)?;
                let from = start.saturating_sub(first_len);
                self.string(pid, second, st, from, take - got, hops + 1, out)?;
            }
            return Some(());
        }
        if rep == self.at(k::THIN) {
            let (actual, at) = follow(k::THIN_ACTUAL)?;
            return self.string(pid, actual, at, start, take, hops + 1, out);
        }
        if rep == self.at(k::SLICED) {
            let (parent, pt) = follow(k::SLICED_PARENT)?;
            let offset = self.smi(read_u64(pid, obj + self.at(k::SLICED_OFFSET))?)?;
            let offset = usize::try_from(offset).ok()?;
            return self.string(pid, parent, pt, offset + start, take, hops + 1, out);
        }
        None
    }

    fn length(&self, pid: u32, w: u64) -> Option<usize> {
        let mut lb = [0u8; 4];
        read_process(pid, w - 1 + self.at(k::STRING_LENGTH), &mut lb).ok()?;
        usize::try_from(i32::from_le_bytes(lb)).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(v: Vec<i64>) -> V8Layout {
        V8Layout { v }
    }

    fn node20() -> Vec<i64> {
        // Node 20.20's values, as read from a running node's memory.
        vec![
            -8, -16, 24, 16, 32, 0, 12, 16, 12, 16, 16, 16, 24, 16, 16, 24, 262, 261, 167, 128, 7,
            8, 0, 1, 3, 5, 8, 3, 2, 1, 31,
        ]
    }

    #[test]
    fn plausible_constants_are_taken_and_lying_ones_refused() {
        let l = layout(node20());
        assert!(l.check().is_ok());
        assert_eq!(
            l.kernel(),
            V8Frames {
                marker_at: -8,
                function_at: -16,
                shared_at: 24,
                name_at: 16
            }
        );
        let mut lying = node20();
        lying[k::FP_FUNCTION] = 4096;
        assert_eq!(
            layout(lying).check(),
            Err(LayoutError::Implausible("v8dbg_off_fp_function"))
        );
        let mut lying = node20();
        lying[k::SCOPE_FIRST_VARS] = 1 << 20;
        assert!(layout(lying).check().is_err());
    }

    #[test]
    fn smis_decode_and_heap_pointers_are_told_apart() {
        let l = layout(node20());
        assert_eq!(l.smi(7 << 32), Some(7));
        assert_eq!(l.smi(0x7f00_0000_1001), None);
        assert!(is_heap_object(0x7f00_0000_1001));
        assert!(!is_heap_object(0x7f00_0000_1000));
        assert!(!is_heap_object(0xffff_8000_0000_0001));
    }
}
