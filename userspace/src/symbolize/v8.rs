//! V8's JavaScript functions named from the process's memory: the
//! function's name and its script's, as V8's own profiler names them.
//!
//! In: a V8 process's pid and its binary's `v8dbg_` constants
//! ([`crate::binaries::v8`]); then, per JavaScript frame the kernel walked,
//! the SharedFunctionInfo it read and the word it read at the object's
//! name-or-scope-info field. Out: each function's name and file
//! ([`V8Layout::function`]).
//!
//! V8 moves and frees its objects: a function is named only if the object
//! is still a SharedFunctionInfo (its map says so) holding the word the
//! kernel read at the sample. A function's own name lives in its
//! ScopeInfo when it has one; V8 publishes no layout for that, so, as the
//! OpenTelemetry profiler does, the first string after the context locals
//! is taken, looked for only where V8 puts it. Every read goes through `process_vm_readv`, bounded: strings
//! to [`MAX_CHARS`] characters through at most [`MAX_STRING_PARTS`] cons,
//! thin or sliced links; nothing from the process sizes an allocation
//! beyond those bounds.

use crate::binaries::v8::{k, V8Symbols, SCOPE_INFO_SLOTS};
use crate::bpf::abi::{V8_HEAP_OBJECT_TAG, V8_HEAP_OBJECT_TAG_MASK};
use crate::sys::memory::read_process;

/// Characters of a name or file kept.
pub const MAX_CHARS: usize = 1024;
/// A ScopeInfo's context locals' names are inline below this many (V8's
/// kScopeInfoMaxInlinedLocalNamesSize), one hash table from it on.
const MAX_INLINE_LOCAL_NAMES: usize = 75;
/// Context locals a ScopeInfo is believed to have (a lying count is no
/// reason to read far).
const MAX_CONTEXT_LOCALS: usize = 1 << 16;
/// Slots after the locals where the function's name may be.
const NAME_SLOTS: usize = 4;
/// Parts (cons, thin and sliced links, and their pieces) of one string
/// read at most: a tree of empty cons strings cannot make a name cost
/// more reads than this.
const MAX_STRING_PARTS: u32 = 64;

/// A V8's constants (its binary's, checked), as objects are read with them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V8Layout {
    v: Vec<i64>,
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
    /// The layout a binary's constants describe.
    pub fn new(symbols: &V8Symbols) -> V8Layout {
        V8Layout {
            v: symbols.values.clone(),
        }
    }

    fn at(&self, i: usize) -> u64 {
        self.v[i] as u64
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
                self.string(
                    pid,
                    name_word,
                    t,
                    0,
                    MAX_CHARS,
                    &mut MAX_STRING_PARTS.clone(),
                    &mut name,
                )?;
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
                    .string(
                        pid,
                        script_name,
                        t,
                        0,
                        MAX_CHARS,
                        &mut MAX_STRING_PARTS.clone(),
                        &mut file,
                    )
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
        // The slots follow the map.
        let slots_at = scope - 1 + self.at(k::OBJECT_MAP) + 8;
        let mut head = [0u8; 8 * SCOPE_INFO_SLOTS];
        if read_process(pid, slots_at, &mut head).is_err() {
            return;
        }
        let count_slot = self.v[k::SCOPE_CONTEXT_LOCALS] as usize;
        let count = u64::from_le_bytes(
            head[count_slot * 8..count_slot * 8 + 8]
                .try_into()
                .expect("8"),
        );
        let Some(locals) = self.smi(count).and_then(|l| usize::try_from(l).ok()) else {
            return;
        };
        // Each context local has its name and its info; beyond V8's inline
        // limit the names are one hash table instead.
        let local_slots = if locals < MAX_INLINE_LOCAL_NAMES {
            2 * locals
        } else {
            1 + locals
        };
        if locals > MAX_CONTEXT_LOCALS {
            return;
        }
        let from = self.v[k::SCOPE_FIRST_VARS] as usize + local_slots;
        let mut after = [0u8; 8 * NAME_SLOTS];
        if read_process(pid, slots_at + 8 * from as u64, &mut after).is_err() {
            return;
        }
        // After the locals: a saved class variable's index (a Smi), the
        // function variable (its name, a Smi slot), the inferred name (a
        // string or undefined); then positions and the outer ScopeInfo. So
        // the name is among the next four, and the first other heap object
        // ends the search: past it lie other fields, or another object.
        for i in 0..NAME_SLOTS {
            let w = u64::from_le_bytes(after[i * 8..i * 8 + 8].try_into().expect("8"));
            if !is_heap_object(w) {
                continue;
            }
            let Some(t) = self
                .type_of(pid, w)
                .filter(|&t| (t as i64) < self.v[k::FIRST_NONSTRING])
            else {
                return;
            };
            if self
                .string(pid, w, t, 0, MAX_CHARS, &mut MAX_STRING_PARTS.clone(), out)
                .is_some()
                && !out.is_empty()
            {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smis_decode_and_heap_pointers_are_told_apart() {
        let mut values = vec![0; crate::binaries::v8::WANTED.len()];
        values[k::SMI_TAG_SIZE] = 1;
        values[k::SMI_SHIFT_SIZE] = 31;
        let l = V8Layout::new(&V8Symbols { values });
        assert_eq!(l.smi(7 << 32), Some(7));
        assert_eq!(l.smi(0x7f00_0000_1001), None);
        assert!(is_heap_object(0x7f00_0000_1001));
        assert!(!is_heap_object(0x7f00_0000_1000));
        assert!(!is_heap_object(0xffff_8000_0000_0001));
    }
}
