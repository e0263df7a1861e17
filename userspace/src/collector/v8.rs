//! JavaScript frames into stacks: the functions the kernel found in V8's
//! frames, named, where those frames are.
//!
//! In: a V8 process's [`V8Runtime`] (from the unwinders), its samples, and
//! their user stacks as the kernel walked them, where a JavaScript frame's
//! address is followed by `V8_FRAME_TAG | SharedFunctionInfo` and the
//! word the kernel read at that object's name-or-scope-info field. Out:
//! the same stacks with each JavaScript
//! frame as a raw key ([`super::python::PY_KEY_BASE`] | index) into the
//! window's interpreted-frame table (name, file), the table Python and
//! Java frames use. A frame whose function cannot be read (freed or moved
//! since, or unreadable) keeps its address (`[JIT] node`, or the builtin
//! it ran in), counted as unresolved.
//!
//! The constants are the binary's, read by the unwinders with its
//! symbols; functions are read as samples arrive, once per process, object and name word,
//! into the budgeted cache Python's code objects and Java's methods use,
//! forgotten 2 s after the process's exit.

use std::sync::Arc;

use super::python::{CodeCache, Held, PythonFrames};
use crate::bpf::abi::V8_FRAME_TAG;
use crate::symbolize::python::CodeInfo;
use crate::symbolize::v8::V8Layout;
use crate::unwind::V8Runtime;

/// A function as its frames are named.
#[derive(Debug)]
pub(super) struct JsFunctionInfo {
    info: Arc<CodeInfo>,
}

impl Held for JsFunctionInfo {
    fn bytes(&self) -> usize {
        self.info.bytes()
    }
}

/// Whether a word of a kernel-walked user stack is a JavaScript frame's function.
fn is_v8_word(w: u64) -> bool {
    w >> 61 == V8_FRAME_TAG >> 61
}

/// The V8 processes' functions.
#[derive(Debug, Default)]
pub(super) struct JsFrames {
    /// Per binary (by its constants, which the unwinders read once per
    /// binary): the layout objects are read with.
    layouts: Vec<(Arc<crate::binaries::v8::V8Symbols>, Arc<V8Layout>)>,
    /// Functions read, per process, object and name word.
    pub(super) functions: CodeCache<JsFunctionInfo>,
}

impl JsFrames {
    /// The layout of the V8 `v8` is.
    fn layout(&mut self, v8: &V8Runtime) -> Arc<V8Layout> {
        if let Some((_, l)) = self
            .layouts
            .iter()
            .find(|(s, _)| Arc::ptr_eq(s, &v8.symbols))
        {
            return l.clone();
        }
        let l = Arc::new(V8Layout::new(&v8.symbols));
        self.layouts.push((v8.symbols.clone(), l.clone()));
        l
    }

    /// Whether `stack` holds JavaScript frames' functions.
    pub(super) fn has_v8_words(stack: &[u64]) -> bool {
        stack.iter().any(|&w| is_v8_word(w))
    }

    /// `stack` (kernel-walked, leaf first) with each JavaScript frame named
    /// from its function, into `out`; the function words never stay in it.
    pub(super) fn merge(
        &mut self,
        stack: &[u64],
        pid: u32,
        v8: Option<&V8Runtime>,
        frames: &mut PythonFrames,
        out: &mut Vec<u64>,
    ) {
        out.clear();
        let layout = v8.map(|v| self.layout(v));
        let mut i = 0;
        while i < stack.len() {
            let w = stack[i];
            if !is_v8_word(w) {
                out.push(w);
                i += 1;
                continue;
            }
            let shared = w & !V8_FRAME_TAG;
            let name_word = stack.get(i + 1).copied().unwrap_or(0);
            i += 2;
            let (Some(layout), false) = (layout.as_deref(), out.is_empty()) else {
                continue;
            };
            // The name word is part of the key: an object freed and its
            // address reused holds another, and is another entry.
            let identity = (name_word ^ (name_word >> 32)) as u32;
            let read = self.functions.get_or_read(pid, shared, identity, || {
                let f = layout.function(pid, shared, name_word)?;
                Some(JsFunctionInfo {
                    info: Arc::new(CodeInfo {
                        qualname: f.name.into(),
                        filename: f.file.into(),
                        first_line: 0,
                        line_table: Box::new([]),
                    }),
                })
            });
            match read {
                // The builtin's or JIT code's address becomes the function's frame.
                Some(f) => *out.last_mut().expect("not empty") = frames.key(&f.info, 0),
                None => self.functions.unresolved += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_words_never_stay_in_a_stack() {
        let mut js = JsFrames::default();
        let mut frames = PythonFrames::default();
        let mut out = Vec::new();
        // No V8 runtime: the frames keep their addresses, the words go.
        let stack = [
            0x1000,
            V8_FRAME_TAG | 0x7f00_0000_1001,
            0x7f00_0000_2001,
            0x2000,
        ];
        assert!(JsFrames::has_v8_words(&stack));
        js.merge(&stack, 1, None, &mut frames, &mut out);
        assert_eq!(out, vec![0x1000, 0x2000]);
        assert!(!JsFrames::has_v8_words(&out));
        // Java's tag is not V8's.
        assert!(!is_v8_word(crate::bpf::abi::JAVA_FRAME_TAG | 0x5550));
    }
}
