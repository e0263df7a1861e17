//! JavaScript frames into stacks: the functions the kernel found in V8's
//! frames, named, where those frames are.
//!
//! In: a V8 process's [`V8Runtime`] (from the unwinders), its samples, and
//! their user stacks as the kernel walked them, where a JavaScript frame's
//! address is followed by `V8_FRAME_TAG | SharedFunctionInfo` and the
//! word the kernel read at that object's name-or-scope-info field. Out:
//! the same stacks with each JavaScript
//! frame as a raw key ([`crate::runtimes::frames::RUNTIME_KEY_BASE`] | index) into the
//! window's interpreted-frame table (name, file), the table Python and
//! Java frames use: one key a machine frame, its function and those
//! TurboFan inlined into it there (each a profile frame, the inlined ones
//! by inline depth). A leaf in a builtin's part that keeps no frame of its
//! own (found from the frame pointer, still its caller's) stays a frame,
//! called by that function. A frame whose function cannot be read (freed
//! or moved since, or unreadable) keeps its address (`[JIT] node`, or the
//! builtin it ran in), counted as unresolved.
//!
//! The constants are the binary's, read once by the runtimes registry
//! ([`crate::runtimes::Runtimes`]) with its symbols; functions are read as samples arrive, once per process, object and name word,
//! into the budgeted cache Python's code objects and Java's methods use,
//! forgotten 2 s after the process's exit.

use std::sync::Arc;

use crate::bpf::abi::V8_FRAME_TAG;
use crate::runtimes::frames::{CodeCache, Held, RuntimeFrames};
use crate::runtimes::python::read::CodeInfo;
use crate::runtimes::v8::process::V8Runtime;
use crate::runtimes::v8::read::{CodeAt, JsCode, V8Layout};

/// A function as its frames are named.
#[derive(Debug)]
pub struct JsFunctionInfo {
    info: Arc<CodeInfo>,
}

impl Held for JsFunctionInfo {
    fn bytes(&self) -> usize {
        self.info.bytes()
    }
}

/// A function's optimized code objects seen holding its frames (its
/// current code and on-stack-replaced loops), newest last.
#[derive(Debug)]
pub struct FunctionCodes {
    codes: Vec<Arc<JsCode>>,
}

/// Code objects remembered per function: its current code, code for its
/// loops, and one it was replaced by.
const CODES_PER_FUNCTION: usize = 4;

impl Held for FunctionCodes {
    fn bytes(&self) -> usize {
        self.codes.iter().map(|c| c.bytes()).sum()
    }
}

/// No optimized code of the function holds that frame's address, though
/// it runs optimized code (remembered as `Some(NoCode)`: the address is in
/// a callee that keeps no frame), or it runs interpreted or baseline code
/// (`None`): remembered so as not to look again.
#[derive(Debug)]
pub struct NoCode;

impl Held for NoCode {
    fn bytes(&self) -> usize {
        0
    }
}

/// Whether a word of a kernel-walked user stack is a JavaScript frame's function.
fn is_v8_word(w: u64) -> bool {
    w >> 61 == V8_FRAME_TAG >> 61
}

/// The V8 processes' functions.
#[derive(Debug, Default)]
pub struct JsFrames {
    /// Per binary (by its constants, which the runtimes registry reads once
    /// per binary): the layout objects are read with.
    layouts: Vec<(Arc<crate::runtimes::v8::binary::V8Symbols>, Arc<V8Layout>)>,
    /// Functions read, per process, object and name word.
    pub functions: CodeCache<JsFunctionInfo>,
    /// Optimized code, per process, SharedFunctionInfo and name word.
    pub codes: CodeCache<FunctionCodes>,
    /// Frame addresses in no optimized code, per process, address and
    /// SharedFunctionInfo.
    pub no_code: CodeCache<NoCode>,
    /// The functions of one frame's scopes (reused: no allocation per frame).
    scopes: Vec<(i32, u32)>,
    /// Their functions, outermost first (reused).
    group: Vec<(Arc<CodeInfo>, u32)>,
}

impl crate::runtimes::RuntimeReader for JsFrames {
    fn forget(&mut self, pid: u32) {
        JsFrames::forget(self, pid);
    }
    fn held_bytes(&self) -> usize {
        self.bytes()
    }
    fn shed(&mut self) {
        self.clear();
    }
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
        // A binary only this table still holds (the registry and every
        // process forgot it): its layout goes, so a node released and
        // mapped again does not add one each time.
        self.layouts.retain(|(s, _)| Arc::strong_count(s) > 1);
        self.layouts.push((v8.symbols.clone(), l.clone()));
        l
    }

    /// What was read of `pid` goes (it exec'd, or exited and its last
    /// samples are in).
    pub fn forget(&mut self, pid: u32) {
        self.functions.forget(pid);
        self.codes.forget(pid);
        self.no_code.forget(pid);
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.functions.bytes() + self.codes.bytes() + self.no_code.bytes()
    }

    /// Forget everything read (read again as used).
    pub fn clear(&mut self) {
        self.functions.clear();
        self.codes.clear();
        self.no_code.clear();
    }

    /// The function whose SharedFunctionInfo is `shared`, as named (read
    /// on first use, if it still holds `name_word`).
    fn function(
        &mut self,
        layout: &V8Layout,
        pid: u32,
        shared: u64,
        name_word: u64,
    ) -> Option<Arc<JsFunctionInfo>> {
        // The name word is part of the key: an object freed and its
        // address reused holds another, and is another entry.
        let identity = (name_word ^ (name_word >> 32)) as u32;
        self.functions.get_or_read(pid, shared, identity, || {
            let f = layout.function(pid, shared, name_word)?;
            Some(JsFunctionInfo {
                info: Arc::new(CodeInfo {
                    kind: crate::model::recording::FrameKind::JavaScript,
                    qualname: f.name.into(),
                    filename: f.file.into(),
                    first_line: 0,
                    line_table: Box::new([]),
                }),
            })
        })
    }

    /// The optimized code of `function` (whose SharedFunctionInfo the
    /// kernel read as `shared`, holding `name_word`) that holds `pc`:
    /// remembered per SharedFunctionInfo (the closures of one function
    /// share its code, and most die young), read through the frame's
    /// JSFunction where none remembered holds it.
    fn code(
        &mut self,
        layout: &V8Layout,
        pid: u32,
        function: u64,
        shared: u64,
        name_word: u64,
        pc: u64,
    ) -> CodeAt<Arc<JsCode>> {
        let Some(code_layout) = layout.code.as_ref() else {
            return CodeAt::NotCompiled;
        };
        let identity = (name_word ^ (name_word >> 32)) as u32;
        let known = self.codes.get(pid, shared, identity).flatten();
        if let Some(c) = known
            .as_ref()
            .and_then(|k| k.codes.iter().find(|c| c.holds(pc)))
        {
            return CodeAt::Holds(c.clone());
        }
        let at = (shared ^ (shared >> 32)) as u32;
        if let Some(no) = self.no_code.get(pid, pc, at) {
            return match no {
                Some(_) => CodeAt::Elsewhere,
                None => CodeAt::NotCompiled,
            };
        }
        let read = match layout.code_at(pid, code_layout, function, shared, pc) {
            Ok(CodeAt::Holds(read)) => read,
            Ok(CodeAt::Elsewhere) => {
                self.no_code.put(pid, pc, at, Some(NoCode));
                return CodeAt::Elsewhere;
            }
            Ok(CodeAt::NotCompiled) => {
                self.no_code.put(pid, pc, at, None);
                return CodeAt::NotCompiled;
            }
            // Another closure of the function may tell, later.
            Err(_) => return CodeAt::NotCompiled,
        };
        let read = Arc::new(read);
        let mut codes: Vec<Arc<JsCode>> = known.map(|k| k.codes.clone()).unwrap_or_default();
        // A code at the same place is the one it replaces.
        codes.retain(|c| c.start + c.size <= read.start || c.start >= read.start + read.size);
        if codes.len() >= CODES_PER_FUNCTION {
            codes.remove(0);
        }
        codes.push(read.clone());
        self.codes
            .put(pid, shared, identity, Some(FunctionCodes { codes }));
        CodeAt::Holds(read)
    }

    /// The frame last in `out` (its address, `pc`) as the functions `code`
    /// runs there, one key: its own function and those inlined into it
    /// there; false, `out` untouched, where nothing was inlined there or an
    /// inlined function cannot be read.
    fn push_inlined(
        &mut self,
        layout: &V8Layout,
        pid: u32,
        code: &JsCode,
        own: &Arc<JsFunctionInfo>,
        frames: &mut RuntimeFrames,
        out: &mut [u64],
    ) -> bool {
        let pc = *out.last().expect("not empty");
        // The leaf is any instruction; a caller's is a return address.
        let return_address = out.len() > 1;
        let mut scopes = std::mem::take(&mut self.scopes);
        let mut group = std::mem::take(&mut self.group);
        code.scopes(pc, return_address, &mut scopes);
        group.clear();
        let mut whole = scopes.len() > 1;
        // Outermost first: the code's own function, then each inlined one.
        for &(i, _) in scopes.iter().rev() {
            if !whole {
                break;
            }
            let f = match usize::try_from(i) {
                Ok(i) => {
                    let (shared, name) = code.inlined[i];
                    self.function(layout, pid, shared, name)
                }
                Err(_) => Some(own.clone()),
            };
            match f {
                Some(f) => group.push((f.info.clone(), 0)),
                None => whole = false,
            }
        }
        if whole {
            *out.last_mut().expect("not empty") = frames.key_of(&group);
        }
        group.clear();
        self.scopes = scopes;
        self.group = group;
        whole
    }

    /// Whether `stack` holds JavaScript frames' functions.
    pub fn has_v8_words(stack: &[u64]) -> bool {
        stack.iter().any(|&w| is_v8_word(w))
    }

    /// `stack` (kernel-walked, leaf first) with each JavaScript frame named
    /// from its function, into `out`; the function words never stay in it.
    pub fn merge(
        &mut self,
        stack: &[u64],
        pid: u32,
        v8: Option<&V8Runtime>,
        frames: &mut RuntimeFrames,
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
            let function = stack.get(i + 2).copied().unwrap_or(0);
            i += 3;
            let (Some(layout), false) = (layout.as_deref(), out.is_empty()) else {
                continue;
            };
            let Some(f) = self.function(layout, pid, shared, name_word) else {
                self.functions.unresolved += 1;
                continue;
            };
            let pc = *out.last().expect("not empty");
            match self.code(layout, pid, function, shared, name_word, pc) {
                CodeAt::Holds(code) => {
                    if self.push_inlined(layout, pid, &code, &f, frames, out) {
                        continue;
                    }
                }
                // The leaf ran in code the function called that sets up no
                // frame (a builtin's fast path, `StringAdd`, `ToNumber`): it
                // stays a frame of its own, called by the function.
                CodeAt::Elsewhere if out.len() == 1 => {
                    out.push(frames.key(&f.info, 0));
                    continue;
                }
                CodeAt::Elsewhere | CodeAt::NotCompiled => {}
            }
            // The JIT code's address (or the interpreter's, or a builtin's
            // it runs on) becomes the function's frame.
            *out.last_mut().expect("not empty") = frames.key(&f.info, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_words_never_stay_in_a_stack() {
        let mut js = JsFrames::default();
        let mut frames = RuntimeFrames::default();
        let mut out = Vec::new();
        // No V8 runtime: the frames keep their addresses, the words go.
        let stack = [
            0x1000,
            V8_FRAME_TAG | 0x7f00_0000_1001,
            0x7f00_0000_2001,
            0x7f00_0000_3001,
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
