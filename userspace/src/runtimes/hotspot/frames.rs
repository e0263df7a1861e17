//! Java frames into stacks: the methods the kernel found in HotSpot's
//! interpreter frames and compiled methods' code blobs, named, where those
//! frames are.
//!
//! In: a JVM's [`JavaRuntime`] (from the unwinders), its samples, and their
//! user stacks as the kernel walked them, where each interpreted frame's
//! address is followed by `JAVA_FRAME_TAG | Method*` and its bytecode
//! pointer (a compiled frame's by `JAVA_FRAME_TAG | Method*` and
//! `JAVA_COMPILED_BLOB | blob`: the method its nmethod ran when sampled,
//! which a perf map written later cannot say once the JVM has reused the
//! address). Out: the interpreter's code range for the kernel's entry (read
//! from the JVM once it has generated it), and the same stacks with each
//! interpreted frame as a raw key ([`crate::runtimes::frames::RUNTIME_KEY_BASE`] | index)
//! into the window's interpreted-frame table (name, file, line), the table
//! Python frames use; a compiled frame is one key too, its method and the
//! methods the JIT inlined into it there (each a profile frame, the inlined
//! ones by inline depth). A method that cannot be read keeps the
//! interpreter's address (named `Interpreter` from the perf map, as before).
//!
//! The layout (field offsets from the JVM's own `gHotSpotVM*` tables) is read
//! once per libjvm; methods are read as samples arrive (a class may be
//! unloaded later), once per JVM and address, into the same kind of budgeted
//! cache as Python's code objects, forgotten 2 s after the JVM's exit.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::bpf::abi::{
    HotSpotCode, JAVA_COMPILED_BLOB, JAVA_COMPILE_ID_MASK, JAVA_COMPILE_ID_SHIFT, JAVA_FRAME_TAG,
};
use crate::runtimes::frames::{CodeCache, Held, RuntimeFrames};
use crate::runtimes::hotspot::process::JavaRuntime;
use crate::runtimes::hotspot::read::{CompiledCode, HotSpotLayout, JavaMethod, LayoutError};
use crate::runtimes::python::read::CodeInfo;

/// How often a JVM whose interpreter is not generated yet (or whose tables
/// are not filled in) is looked at again, while it is sampled.
const RETRY_NS: u64 = 20_000_000;

/// How often a libjvm whose JVM has not filled its tables in is read again
/// (every [`RETRY_NS`] while sampled: a JVM fills them in its first
/// milliseconds; one that never does is not read for ever).
const MAX_NOT_YET: u32 = 500;

/// A method as its frames are named.
#[derive(Debug)]
pub struct JavaMethodInfo {
    info: Arc<CodeInfo>,
    method: JavaMethod,
}

impl Held for JavaMethodInfo {
    fn bytes(&self) -> usize {
        self.method.bytes() + self.info.bytes()
    }
}

impl Held for CompiledCode {
    fn bytes(&self) -> usize {
        CompiledCode::bytes(self)
    }
}

/// Whether a word of a kernel-walked user stack is a Java frame's method.
fn is_java_word(w: u64) -> bool {
    w >> 61 == JAVA_FRAME_TAG >> 61
}

/// A libjvm's layout as read (or why not), and how often it was read.
type LayoutRead = (
    Arc<crate::runtimes::hotspot::binary::HotSpotSymbols>,
    Result<Arc<HotSpotLayout>, LayoutError>,
    u32,
);

/// The JVMs' layouts, interpreters and methods.
#[derive(Debug, Default)]
pub struct JavaFrames {
    /// Per libjvm (by its exported symbols, which the runtimes registry
    /// reads once per binary): its layout, or why it has none, and how often it was
    /// read (NotYet and Unreadable are read again, up to [`MAX_NOT_YET`]
    /// times).
    layouts: Vec<LayoutRead>,
    /// Per JVM whose interpreter is not known yet: when to look again.
    next_look: FxHashMap<u32, u64>,
    /// Methods read, per JVM and address.
    pub methods: CodeCache<JavaMethodInfo>,
    /// Compiled methods' debug information (their inlined scopes), per
    /// JVM, blob address and compile id: a blob freed and reused by another
    /// nmethod is another entry.
    pub compiled: CodeCache<CompiledCode>,
    /// Layouts that could not be read, to be said once each.
    pub failures: Vec<String>,
    /// JVMs whose compiled frames were named from their memory; those gone
    /// are forgotten at the window's end, once its warnings are said.
    compiled_named: rustc_hash::FxHashSet<u32>,
    departed: Vec<u32>,
    /// The scopes of the compiled frame being named (reused).
    scopes: Vec<(u64, i32)>,
    /// Their methods, outermost first (reused).
    group: Vec<(Arc<CodeInfo>, u32)>,
}

impl crate::runtimes::RuntimeReader for JavaFrames {
    fn ended(&mut self, pid: u32) {
        self.gone(pid);
    }
    fn forget(&mut self, pid: u32) {
        self.methods.forget(pid);
        self.compiled.forget(pid);
    }
    fn held_bytes(&self) -> usize {
        self.methods.bytes() + self.compiled.bytes()
    }
    fn shed(&mut self) {
        self.methods.clear();
        self.compiled.clear();
    }
}

impl JavaFrames {
    /// JVM `pid`'s layout, read from it on first use (and again while the
    /// JVM is still filling its tables in).
    fn layout(&mut self, pid: u32, java: &JavaRuntime) -> Option<Arc<HotSpotLayout>> {
        let known = self
            .layouts
            .iter()
            .position(|(s, _, _)| Arc::ptr_eq(s, &java.symbols));
        if let Some(i) = known {
            match &self.layouts[i].1 {
                Ok(l) => return Some(l.clone()),
                // A JVM still starting, or one whose memory could not be
                // read (it exited: a `java -version` read as it ended), is
                // no verdict on the next JVM of this libjvm: read again, a
                // bounded number of times. Kept as the libjvm's, an
                // `Unreadable` once left every later JVM unnamed.
                Err(LayoutError::NotYet | LayoutError::Unreadable)
                    if self.layouts[i].2 < MAX_NOT_YET => {}
                Err(_) => return None,
            }
        }
        let read = HotSpotLayout::read(pid, java.base, &java.symbols).map(Arc::new);
        let reads = known.map_or(1, |i| self.layouts[i].2 + 1);
        let said = match read.as_ref().err() {
            None | Some(LayoutError::NotYet) => false,
            Some(LayoutError::Unreadable) => reads == MAX_NOT_YET,
            Some(LayoutError::Missing(_)) => true,
        };
        if let Some(e) = read.as_ref().err().filter(|_| said) {
            self.failures.push(format!(
                "JVM {pid}: its interpreted Java frames stay unnamed: {e}"
            ));
        }
        let out = read.as_ref().ok().cloned();
        match known {
            Some(i) => {
                self.layouts[i].1 = read;
                self.layouts[i].2 += 1;
            }
            None => {
                // A libjvm only this table still holds (the registry and
                // every process forgot it): its layout goes, so a library
                // released and mapped again does not add one each time.
                self.layouts.retain(|(s, _, _)| Arc::strong_count(s) > 1);
                self.layouts.push((java.symbols.clone(), read, 1));
            }
        }
        out
    }

    /// JVM `pid` was sampled at `now_ns` and its interpreter is not known:
    /// its range, once the JVM has one (looked at every [`RETRY_NS`]).
    pub fn find_interpreter(
        &mut self,
        pid: u32,
        java: &JavaRuntime,
        now_ns: u64,
    ) -> Option<((u64, u64), Option<HotSpotCode>)> {
        if self.next_look.get(&pid).is_some_and(|&t| now_ns < t) {
            return None;
        }
        let found = self.layout(pid, java).and_then(|l| {
            let range = l.interpreter(pid, java.base)?;
            Some((range, l.code_cache(pid, java.base)))
        });
        match found {
            Some(_) => self.next_look.remove(&pid),
            None => self.next_look.insert(pid, now_ns + RETRY_NS),
        };
        found
    }

    /// JVM `pid`'s method at `method`, read on first use.
    fn method(
        &mut self,
        layout: &HotSpotLayout,
        pid: u32,
        method: u64,
    ) -> Option<Arc<JavaMethodInfo>> {
        self.methods.get_or_read(pid, method, 0, || {
            let m = layout.method(pid, method).ok()?;
            let info = Arc::new(CodeInfo {
                kind: crate::model::recording::FrameKind::JavaInterpreted,
                qualname: m.name.as_str().into(),
                filename: m.file.as_str().into(),
                first_line: 0,
                line_table: Box::new([]),
            });
            Some(JavaMethodInfo { info, method: m })
        })
    }

    /// The compiled frame last in `out` (its address) as the methods its
    /// nmethod at `blob` (compile id `id`, as the kernel read it) runs
    /// there: the deepest inlined one in its place, its callers after it
    /// up to the nmethod's own `method`, each at its line. False, `out`
    /// untouched, where the nmethod's debug information cannot be read or
    /// does not end in `method` (the blob is another nmethod's by now).
    #[allow(clippy::too_many_arguments)]
    fn inlined(
        &mut self,
        layout: &HotSpotLayout,
        pid: u32,
        method: u64,
        blob: u64,
        id: u32,
        return_address: bool,
        frames: &mut RuntimeFrames,
        out: &mut [u64],
    ) -> bool {
        let Some(code) = self
            .compiled
            .get_or_read(pid, blob, id, || layout.compiled(pid, blob))
        else {
            return false;
        };
        let pc = *out.last().expect("not empty");
        // One buffer for every frame's scopes: no allocation per frame.
        let mut scopes = std::mem::take(&mut self.scopes);
        code.scopes(pc, return_address, &mut scopes);
        let named = scopes.last().map(|s| s.0) == Some(method)
            && self.push_scopes(layout, pid, &scopes, frames, out);
        self.scopes = scopes;
        if named {
            self.compiled_named.insert(pid);
        }
        named
    }

    /// `out` with its last word (a compiled frame's address) replaced by
    /// one key: `scopes`' methods (innermost first), each at its line, the
    /// outermost the frame's own and the others inlined into it; false,
    /// `out` untouched, where one of them cannot be read.
    fn push_scopes(
        &mut self,
        layout: &HotSpotLayout,
        pid: u32,
        scopes: &[(u64, i32)],
        frames: &mut RuntimeFrames,
        out: &mut [u64],
    ) -> bool {
        let mut group = std::mem::take(&mut self.group);
        group.clear();
        let mut whole = true;
        for &(m, bci) in scopes.iter().rev() {
            let Some(info) = self.method(layout, pid, m) else {
                self.methods.unresolved += 1;
                whole = false;
                break;
            };
            let bcp = if bci >= 0 {
                info.method.code_start + bci as u64
            } else {
                0
            };
            group.push((info.info.clone(), info.method.line(bcp)));
        }
        if whole {
            *out.last_mut().expect("not empty") = frames.key_as(
                &group,
                Some(crate::model::recording::FrameKind::JavaCompiled),
            );
        }
        group.clear();
        self.group = group;
        whole
    }

    /// Whether JVM `pid`'s compiled frames were named from its memory
    /// (its nmethods' `Method*`s), so they need no perf map.
    pub fn names_compiled(&self, pid: u32) -> bool {
        self.compiled_named.contains(&pid)
    }

    /// A window's end: the JVMs gone during it are forgotten.
    pub fn window_done(&mut self) {
        for pid in self.departed.drain(..) {
            self.compiled_named.remove(&pid);
        }
    }

    /// `pid` exec'd or exited: nothing more to look for in it.
    pub fn gone(&mut self, pid: u32) {
        self.next_look.remove(&pid);
        if self.compiled_named.contains(&pid) {
            self.departed.push(pid);
        }
    }

    /// Whether `stack` holds interpreted frames' methods.
    pub fn has_java_words(stack: &[u64]) -> bool {
        stack.iter().any(|&w| is_java_word(w))
    }

    /// `stack` (kernel-walked, leaf first) with each interpreted frame named
    /// from its method, into `out`; the method words never stay in it.
    pub fn merge(
        &mut self,
        stack: &[u64],
        pid: u32,
        java: Option<&JavaRuntime>,
        frames: &mut RuntimeFrames,
        out: &mut Vec<u64>,
    ) {
        out.clear();
        let layout = java.and_then(|j| self.layout(pid, j));
        let mut i = 0;
        while i < stack.len() {
            let w = stack[i];
            if !is_java_word(w) {
                out.push(w);
                i += 1;
                continue;
            }
            let method = w & !JAVA_FRAME_TAG;
            let bcp = stack.get(i + 1).copied().unwrap_or(0);
            // A compiled frame's second word is its blob, not a bytecode pointer.
            let compiled = bcp & JAVA_COMPILED_BLOB != 0;
            i += 2;
            let Some(layout) = layout.as_deref() else {
                continue;
            };
            if compiled && !out.is_empty() {
                let blob = bcp & ((1 << JAVA_COMPILE_ID_SHIFT) - 1);
                let id = ((bcp >> JAVA_COMPILE_ID_SHIFT) & JAVA_COMPILE_ID_MASK) as u32;
                // The leaf is any instruction; a caller's is a return address.
                let return_address = out.len() > 1;
                if self.inlined(layout, pid, method, blob, id, return_address, frames, out) {
                    continue;
                }
            }
            let bcp = if compiled { 0 } else { bcp };
            let mut read = self.method(layout, pid, method);
            // A caller's bytecode pointer lies in its method's bytecodes.
            // One that does not is another method's: the class was
            // unloaded and its Method*'s memory taken by another, which is
            // read now, not named as the first. (Not at the leaf, whose
            // bytecode pointer may still be its caller's in the method's
            // first instructions.)
            if !compiled
                && bcp != 0
                && out.len() > 1
                && read.as_ref().is_some_and(|m| !m.method.holds(bcp))
            {
                self.methods.forget_one(pid, method, 0);
                self.methods.replaced += 1;
                read = self.method(layout, pid, method);
            }
            if compiled && read.is_some() {
                self.compiled_named.insert(pid);
            }
            match read {
                // The interpreter's address before it becomes the method's frame.
                Some(m) if !out.is_empty() => {
                    // A compiled frame whose scopes could not be read is
                    // still compiled code: the method alone, said so.
                    let kind = compiled.then_some(crate::model::recording::FrameKind::JavaCompiled);
                    let key = frames.key_as(&[(m.info.clone(), m.method.line(bcp))], kind);
                    *out.last_mut().expect("not empty") = key;
                }
                // A compiled frame's word that is no method (a stub's blob
                // holds something else there) keeps its address, named
                // from the perf map as before.
                _ if compiled => {}
                _ => self.methods.unresolved += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_method_is_forgotten_and_its_bytes_given_back() {
        let mut j = JavaFrames::default();
        let info = || {
            Some(JavaMethodInfo {
                info: Arc::new(CodeInfo {
                    kind: crate::model::recording::FrameKind::Java,
                    qualname: "long Hot.hotOne(int)".into(),
                    filename: "Hot.java".into(),
                    first_line: 0,
                    line_table: Box::new([]),
                }),
                method: crate::runtimes::hotspot::read::JavaMethod {
                    name: "long Hot.hotOne(int)".into(),
                    file: "Hot.java".into(),
                    code_start: 0x7000,
                    code_size: 40,
                    lines: vec![],
                },
            })
        };
        j.methods.get_or_read(1, 0x5550, 0, info);
        let held = j.methods.bytes();
        j.methods.get_or_read(1, 0x5560, 0, info);
        j.methods.forget_one(1, 0x5560, 0);
        assert_eq!(j.methods.bytes(), held);
        // Read again on next use, not kept as it was.
        let mut read_again = false;
        j.methods.get_or_read(1, 0x5560, 0, || {
            read_again = true;
            info()
        });
        assert!(read_again);
    }

    #[test]
    fn method_words_never_stay_in_a_stack() {
        // No layout (not a JVM the unwinders know): the interpreter's
        // addresses stay, the words after them go, a word cut at the end too.
        let mut j = JavaFrames::default();
        let mut frames = RuntimeFrames::default();
        let mut out = Vec::new();
        let stack = [
            0x1000,
            0x7000,
            JAVA_FRAME_TAG | 0x5550,
            0x6660,
            0x2000,
            // A compiled frame: its method and its blob go, its address stays.
            0x7f00_0000_1234,
            JAVA_FRAME_TAG | 0x5560,
            JAVA_COMPILED_BLOB | 0x7f00_0000_1000,
            0x7001,
            JAVA_FRAME_TAG | 0x5558,
        ];
        assert!(JavaFrames::has_java_words(&stack));
        j.merge(&stack, 1, None, &mut frames, &mut out);
        assert_eq!(out, vec![0x1000, 0x7000, 0x2000, 0x7f00_0000_1234, 0x7001]);
        assert!(!JavaFrames::has_java_words(&out));
        assert!(!JavaFrames::has_java_words(&[
            0x7fff_ffff_f000,
            0xffff_ffff_8100_0000,
            3,
            crate::runtimes::frames::RUNTIME_KEY_BASE | 5
        ]));
    }
}
