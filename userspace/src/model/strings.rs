//! The string table the writers share: each distinct string one index.
//!
//! In: strings as a writer meets them (function, file and library names).
//! Out: the index of each string and, at the end, the table in index
//! order, as the Firefox Profiler's `stringArray` and pprof's
//! `string_table` both hold it.

use rustc_hash::FxHashMap;

/// A deduplicating string table: each distinct string once, in the order
/// first seen.
#[derive(Default)]
pub struct Interner {
    array: Vec<String>,
    index: FxHashMap<String, u32>,
}

impl Interner {
    /// The index of `s`, added at the end when it is new.
    pub fn intern(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.array.len() as u32;
        self.array.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }

    /// The strings, each at its index.
    pub fn into_strings(self) -> Vec<String> {
        self.array
    }

    /// The strings so far, taken out (the table starts again empty).
    pub fn take_strings(&mut self) -> Vec<String> {
        self.index.clear();
        std::mem::take(&mut self.array)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a string seen again keeps its first index and that the
    /// table lists each string once, in the order first seen.
    #[test]
    fn interns_each_string_once_in_order() {
        let mut s = Interner::default();
        assert_eq!(
            [s.intern("b"), s.intern("a"), s.intern("b"), s.intern("")],
            [0, 1, 0, 2]
        );
        assert_eq!(s.into_strings(), ["b", "a", ""]);
    }
}
