//! A JavaScript function named from V8's memory: its SharedFunctionInfo's
//! name (a string, or its ScopeInfo's) and its Script's name.
//!
//! In: a V8 process's pid, its [`V8Layout`], a SharedFunctionInfo's tagged
//! pointer and the name-or-scope-info word the kernel read from it. Out: a
//! [`JsFunction`], if the object is still a SharedFunctionInfo holding
//! that word.

use super::layout::V8Layout;
use super::strings::{MAX_CHARS, MAX_STRING_PARTS};
use super::{is_heap_object, read_u64};
use crate::runtimes::v8::binary::{k, SCOPE_INFO_SLOTS};
use crate::sys::memory::read_process;

/// A ScopeInfo's context locals' names are inline below this many (V8's
/// kScopeInfoMaxInlinedLocalNamesSize), one hash table from it on.
const MAX_INLINE_LOCAL_NAMES: usize = 75;
/// Context locals a ScopeInfo is believed to have (a lying count is no
/// reason to read far).
const MAX_CONTEXT_LOCALS: usize = 1 << 16;
/// Slots after the locals where the function's name may be.
const NAME_SLOTS: usize = 4;

/// A JavaScript function, as named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsFunction {
    /// Its name (V8's profiler says `(anonymous)` where it has none).
    pub name: String,
    /// Its script's name: a path, a `file://` URL or `node:internal/…`.
    pub file: String,
}

impl V8Layout {
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
}
