//! The frames every runtime shares: one table of named interpreted and JIT
//! frames per window, the raw keys that point into it, and the cache of
//! objects read from processes' memory that names them.
//!
//! In: a runtime's named functions (a Python code object, a Java method, a
//! JavaScript function: [`CodeInfo`]) with their lines, from the runtime's
//! own reader (`runtimes/*/frames.rs`). Out: raw stack keys
//! ([`RUNTIME_KEY_BASE`] | index) that the collector puts in a stack where
//! a native frame was, and that the window's replay turns into profile
//! frames, each with its kind ([`RuntimeFrames::at`], [`RuntimeFrames::kind_at`]). The key space is declared here once:
//! kernel addresses above, user addresses and the cuts' keys (1..=8, then
//! [`PY_NOT_READ_KEY`] and [`UNNAMED_FRAME_KEY`]) below.
//!
//! The cache ([`CodeCache`]) keeps objects per process, address and
//! identity (the fingerprint the kernel read with the address, where it
//! reads one) within [`CODE_CACHE_BYTES`]; a process's objects go at its
//! exec and 2 s after its exit.

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::model::recording::FrameKind;
use crate::model::stack_end::StackEnd;

/// What names one interpreted or compiled function's frames: a CPython
/// code object as read, and what the other runtimes read put in its shape
/// (their line tables empty: their frames carry the line already).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeInfo {
    /// Which runtime's code it is (the frames it names are of this kind).
    pub kind: crate::model::recording::FrameKind,
    /// `co_qualname`: `Class.method`, `outer.<locals>.inner`.
    pub qualname: Box<str>,
    /// `co_filename`.
    pub filename: Box<str>,
    /// `co_firstlineno`.
    pub first_line: u32,
    /// `co_linetable`: the location table (3.11+ format).
    pub line_table: Box<[u8]>,
}

impl CodeInfo {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.qualname.len()
            + self.filename.len()
            + self.line_table.len()
    }
}

/// Raw keys of runtimes' frames (Python, Java, JavaScript): above every
/// user address, below the kernel's.
pub const RUNTIME_KEY_BASE: u64 = 0x4000_0000_0000_0000;
const RUNTIME_KEY_MASK: u64 = 0xc000_0000_0000_0000;

/// The raw key of the root frame of a stack whose CPython's version this
/// build does not read: after the cuts' keys (1..=8), where no code lives.
pub const PY_NOT_READ_KEY: u64 = 9;

/// The raw key of a runtime's frame whose object could not be named (it
/// was freed and its address reused before it was read, or its memory is
/// unreadable): kept in its place, so the caller chain stays true.
pub const UNNAMED_FRAME_KEY: u64 = 10;

/// Whether a raw key is a runtime's frame.
pub fn is_runtime_key(key: u64) -> bool {
    key & RUNTIME_KEY_MASK == RUNTIME_KEY_BASE
}

/// Kernel addresses on x86_64 and arm64 have the top bit set.
pub const KERNEL_ADDR_MIN: u64 = 0x8000_0000_0000_0000;

/// What one word of a raw stack is: the key space, decoded in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawFrame {
    /// Where and why the stack was cut ([`StackEnd::raw_key`]: 1..=8).
    End(StackEnd),
    /// The root of a stack whose CPython this build does not read.
    PythonNotRead,
    /// A runtime's frame whose object could not be named.
    Unnamed,
    /// A runtime's frame: an index into the [`RuntimeFrames`] of its table.
    Runtime(u32),
    /// Kernel code at this address.
    Kernel(u64),
    /// User code at this address (in a mapped binary, or JIT code).
    User(u64),
}

impl RawFrame {
    /// What `word` of a raw stack stands for.
    pub fn decode(word: u64) -> RawFrame {
        if let Some(end) = StackEnd::from_raw_key(word) {
            return RawFrame::End(end);
        }
        match word {
            PY_NOT_READ_KEY => RawFrame::PythonNotRead,
            UNNAMED_FRAME_KEY => RawFrame::Unnamed,
            w if is_runtime_key(w) => RawFrame::Runtime((w & !RUNTIME_KEY_MASK) as u32),
            w if w >= KERNEL_ADDR_MIN => RawFrame::Kernel(w),
            w => RawFrame::User(w),
        }
    }
}

/// Bytes of code objects' names and line tables kept, all processes.
const CODE_CACHE_BYTES: usize = 16 << 20;

/// One machine frame of an interpreter or a JIT, as named: its function
/// (code object, line) and, where a JIT compiler inlined others into the
/// code at that address, theirs after it, outermost first (so the frame
/// becomes one profile frame per function, the inlined ones marked by
/// their inline depth, as native inlined functions are).
pub type RuntimeFrame = Arc<[(Arc<CodeInfo>, u32)]>;

/// A [`RuntimeFrame`] with the kind said for the frame itself, if one was
/// (see [`RuntimeFrames::key_as`]), as a stack record keeps it.
pub type KindedFrame = (RuntimeFrame, Option<FrameKind>);

/// The runtimes' frames a window's stacks refer to (Python, JavaScript
/// and Java share the table): [`RuntimeFrame`]s.
#[derive(Debug, Default)]
pub struct RuntimeFrames {
    names: Vec<RuntimeFrame>,
    /// Each frame's kind where the runtime said it for the frame rather
    /// than its function (a compiled Java method: the same method
    /// interpreted is another frame).
    kinds: Vec<Option<FrameKind>>,
    /// By (code object, line) of each function, outermost first, and the
    /// frame's own kind if said (as `(usize::MAX, kind)`).
    index: FxHashMap<Box<[(usize, u32)]>, u32>,
    /// A lookup's index key (reused: no allocation per frame).
    probe: Vec<(usize, u32)>,
}

impl RuntimeFrames {
    /// The raw key of `code` at `line`.
    pub fn key(&mut self, code: &Arc<CodeInfo>, line: u32) -> u64 {
        self.key_of(std::slice::from_ref(&(code.clone(), line)))
    }

    /// The raw key of one machine frame's functions, outermost first (one,
    /// or a compiled function and those inlined into it at that address).
    pub fn key_of(&mut self, functions: &[(Arc<CodeInfo>, u32)]) -> u64 {
        self.key_as(functions, None)
    }

    /// The raw key of one machine frame's functions as [`Self::key_of`],
    /// the frame of `kind` whatever its functions' kind (None: theirs).
    pub fn key_as(&mut self, functions: &[(Arc<CodeInfo>, u32)], kind: Option<FrameKind>) -> u64 {
        self.probe.clear();
        self.probe
            .extend(functions.iter().map(|(c, l)| (Arc::as_ptr(c) as usize, *l)));
        if let Some(k) = kind {
            self.probe.push((usize::MAX, k as u32));
        }
        let i = match self.index.get(self.probe.as_slice()) {
            Some(&i) => i,
            None => {
                let i = self.names.len() as u32;
                self.names.push(functions.into());
                self.kinds.push(kind);
                self.index.insert(self.probe.as_slice().into(), i);
                i
            }
        };
        RUNTIME_KEY_BASE | i as u64
    }

    /// The kind of the frame at `index`: the one said for it, else its
    /// outermost function's.
    pub fn kind_at(&self, index: u32) -> Option<FrameKind> {
        let said = self.kinds.get(index as usize).copied().flatten();
        said.or_else(|| Some(self.at(index)?.first()?.0.kind))
    }

    /// The frame of a raw key.
    pub fn get(&self, key: u64) -> Option<&RuntimeFrame> {
        self.names.get((key & !RUNTIME_KEY_MASK) as usize)
    }

    /// The frame at `index` ([`RawFrame::Runtime`]).
    pub fn at(&self, index: u32) -> Option<&RuntimeFrame> {
        self.names.get(index as usize)
    }

    /// Forget every frame (a table reused for one record's stack).
    pub fn clear(&mut self) {
        self.names.clear();
        self.kinds.clear();
        self.index.clear();
    }

    /// The frames with the kinds said for them, in key order.
    pub fn entries(&self) -> Box<[KindedFrame]> {
        self.names
            .iter()
            .cloned()
            .zip(self.kinds.iter().copied())
            .collect()
    }

    /// The key `key` of `from` has here (a stack carried to the next window).
    pub fn carry(&mut self, from: &RuntimeFrames, key: u64) -> u64 {
        let index = (key & !RUNTIME_KEY_MASK) as u32;
        match from.at(index) {
            Some(f) => self.key_as(f, from.kinds.get(index as usize).copied().flatten()),
            None => StackEnd::NotAvailable.raw_key().expect("a cut"),
        }
    }
}

/// What a cache of objects read from processes holds, by its size.
pub trait Held {
    /// Bytes held.
    fn bytes(&self) -> usize;
}

impl Held for CodeInfo {
    fn bytes(&self) -> usize {
        CodeInfo::bytes(self)
    }
}

/// Objects read from processes' memory (Python code objects, Java
/// methods), per process, address and identity (the fingerprint the
/// kernel read with the address, where it reads one), within
/// [`CODE_CACHE_BYTES`]; what could not be read is remembered as such.
#[derive(Debug)]
pub struct CodeCache<T = CodeInfo> {
    by_pid: FxHashMap<u32, FxHashMap<(u64, u32), Option<Arc<T>>>>,
    bytes: usize,
    /// Frames whose object could not be read or was none (counted).
    pub unresolved: u64,
    /// Objects (once each, not per frame) freed after their sample (their
    /// address reused by another one, or not yet): a name refused, not lent.
    pub replaced: u64,
    /// Processes a read found gone (the kernel: no such process): nothing
    /// more is read of them until they are forgotten (a fork or an exec
    /// under the pid forgets it first). A short Python process ends before
    /// its samples are merged, and each of its ~36 code objects was a
    /// failing read.
    ended: FxHashSet<u32>,
}

/// Processes found gone kept at most: past it the set starts again (a
/// process's reads then fail once more each, as before).
const MAX_ENDED: usize = 4096;

impl<T> Default for CodeCache<T> {
    fn default() -> Self {
        CodeCache {
            by_pid: FxHashMap::default(),
            bytes: 0,
            unresolved: 0,
            replaced: 0,
            ended: FxHashSet::default(),
        }
    }
}

impl<T: Held> CodeCache<T> {
    /// `pid`'s object at `addr` of `identity`, read with `read` on first
    /// use. Past the budget every process's objects are dropped and read
    /// again as used.
    pub fn get_or_read(
        &mut self,
        pid: u32,
        addr: u64,
        identity: u32,
        read: impl FnOnce() -> Option<T>,
    ) -> Option<Arc<T>> {
        if let Some(known) = self.by_pid.get(&pid).and_then(|m| m.get(&(addr, identity))) {
            return known.clone();
        }
        if self.ended.contains(&pid) {
            return None;
        }
        self.insert(pid, addr, identity, read())
    }

    /// The object kept for `(pid, addr, identity)`, else the one `make`
    /// makes, kept: for what is made without reading the process (a Go
    /// goroutine's id), so a process found gone still gets it.
    pub fn get_or_make(
        &mut self,
        pid: u32,
        addr: u64,
        identity: u32,
        make: impl FnOnce() -> T,
    ) -> Option<Arc<T>> {
        if let Some(known) = self.by_pid.get(&pid).and_then(|m| m.get(&(addr, identity))) {
            return known.clone();
        }
        self.insert(pid, addr, identity, Some(make()))
    }

    /// Keep `read` under `(pid, addr, identity)`, within the budget.
    fn insert(&mut self, pid: u32, addr: u64, identity: u32, read: Option<T>) -> Option<Arc<T>> {
        let read = read.map(Arc::new);
        let size = read.as_ref().map_or(16, |c| c.bytes() + 16);
        if self.bytes + size > CODE_CACHE_BYTES {
            self.by_pid.clear();
            self.bytes = 0;
        }
        self.bytes += size;
        self.by_pid
            .entry(pid)
            .or_default()
            .insert((addr, identity), read.clone());
        read
    }

    /// `pid`'s object at `addr` of `identity` if known: `Some(None)` where
    /// it was found unreadable or none; never reads.
    pub fn get(&self, pid: u32, addr: u64, identity: u32) -> Option<Option<Arc<T>>> {
        self.by_pid.get(&pid)?.get(&(addr, identity)).cloned()
    }

    /// `pid`'s object at `addr` of `identity` is `object` now (read anew).
    pub fn put(&mut self, pid: u32, addr: u64, identity: u32, object: Option<T>) -> Option<Arc<T>> {
        self.forget_one(pid, addr, identity);
        self.get_or_read(pid, addr, identity, || object)
    }

    /// One entry forgotten: its object was found to be another's since.
    pub fn forget_one(&mut self, pid: u32, addr: u64, identity: u32) {
        if let Some(old) = self
            .by_pid
            .get_mut(&pid)
            .and_then(|m| m.remove(&(addr, identity)))
        {
            self.bytes = self
                .bytes
                .saturating_sub(old.as_ref().map_or(16, |c| c.bytes() + 16));
        }
    }

    /// `pid`'s objects go: it exec'd (they are gone with its old image),
    /// or it exited and its last samples are in (the collector's
    /// `Followers` keeps the one clock of exits).
    pub fn forget(&mut self, pid: u32) {
        self.ended.remove(&pid);
        if let Some(m) = self.by_pid.remove(&pid) {
            self.bytes = self.bytes.saturating_sub(
                m.values()
                    .map(|c| c.as_ref().map_or(16, |c| c.bytes() + 16))
                    .sum(),
            );
        }
    }

    /// A read found `pid` gone: see the field `ended`.
    pub fn process_ended(&mut self, pid: u32) {
        if self.ended.len() >= MAX_ENDED {
            self.ended.clear();
        }
        self.ended.insert(pid);
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Forget every object read (read again as used); the counts stay.
    pub fn clear(&mut self) {
        self.by_pid = FxHashMap::default();
        self.bytes = 0;
    }

    /// The counts since the last call: (frames unnamed, objects replaced).
    pub fn take_counts(&mut self) -> (u64, u64) {
        (
            std::mem::take(&mut self.unresolved),
            std::mem::take(&mut self.replaced),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that once a process is found gone nothing more is read of it
    /// (the reader would panic), that what was read before stays, and that
    /// forgetting the pid (a fork or exec under it) reads again.
    #[test]
    fn nothing_is_read_of_a_process_found_gone() {
        struct Bytes(usize);
        impl Held for Bytes {
            fn bytes(&self) -> usize {
                self.0
            }
        }
        let mut cache: CodeCache<Bytes> = CodeCache::default();
        assert!(cache.get_or_read(7, 0x100, 1, || Some(Bytes(10))).is_some());
        cache.process_ended(7);
        let not_read = cache.get_or_read(7, 0x200, 1, || panic!("read after the end"));
        assert!(not_read.is_none());
        assert!(cache
            .get_or_read(7, 0x100, 1, || panic!("cached"))
            .is_some());
        assert!(
            cache.get_or_read(8, 0x200, 1, || Some(Bytes(1))).is_some(),
            "another pid"
        );
        cache.forget(7);
        assert!(
            cache.get_or_read(7, 0x200, 1, || Some(Bytes(3))).is_some(),
            "read again"
        );
    }

    /// Every region of the key space decodes as what put it there: a cut's
    /// key as the cut, the two runtime markers, a runtime key as its index
    /// in the table that made it, kernel and user addresses as themselves.
    #[test]
    fn each_raw_word_decodes_as_what_made_it() {
        let end = StackEnd::NoUnwindInfo;
        assert_eq!(RawFrame::decode(end.raw_key().unwrap()), RawFrame::End(end));
        assert_eq!(RawFrame::decode(PY_NOT_READ_KEY), RawFrame::PythonNotRead);
        assert_eq!(RawFrame::decode(UNNAMED_FRAME_KEY), RawFrame::Unnamed);
        let mut table = RuntimeFrames::default();
        let code = Arc::new(CodeInfo {
            kind: crate::model::recording::FrameKind::Python,
            qualname: "f".into(),
            filename: "f.py".into(),
            first_line: 1,
            line_table: Box::new([]),
        });
        table.key(&code, 1);
        let key = table.key(&code, 7);
        let RawFrame::Runtime(i) = RawFrame::decode(key) else {
            panic!("{key:#x} is no runtime key");
        };
        assert_eq!(table.at(i).map(|f| f[0].1), Some(7));
        assert_eq!(table.at(i), table.get(key));
        assert_eq!(
            RawFrame::decode(0xffff_ffff_8100_0000),
            RawFrame::Kernel(0xffff_ffff_8100_0000)
        );
        assert_eq!(
            RawFrame::decode(0x5555_0000_1234),
            RawFrame::User(0x5555_0000_1234)
        );
        // The highest user address is no runtime key, the lowest runtime key no user address.
        assert_eq!(
            RawFrame::decode(0x3fff_ffff_ffff_ffff),
            RawFrame::User(0x3fff_ffff_ffff_ffff)
        );
        assert_eq!(RawFrame::decode(RUNTIME_KEY_BASE), RawFrame::Runtime(0));
    }

    fn code(name: &str) -> Arc<CodeInfo> {
        Arc::new(CodeInfo {
            kind: crate::model::recording::FrameKind::JavaScript,
            qualname: name.into(),
            filename: "a.js".into(),
            first_line: 0,
            line_table: Box::new([]),
        })
    }

    #[test]
    fn a_compiled_frame_and_its_inlined_functions_are_one_key() {
        let (outer, inner) = (code("outer"), code("inner"));
        let mut frames = RuntimeFrames::default();
        let alone = frames.key(&outer, 0);
        let group = [(outer.clone(), 0), (inner.clone(), 0)];
        let inlined = frames.key_of(&group);
        // Another machine frame than the function's own, once for each use.
        assert_ne!(alone, inlined);
        assert_eq!(frames.key_of(&group), inlined);
        assert_eq!(frames.key(&outer, 0), alone);
        // The other way round is another frame: `outer` inlined into `inner`.
        assert_ne!(frames.key_of(&[(inner, 0), (outer, 0)]), inlined);
        let f = frames.get(inlined).expect("kept");
        assert_eq!(
            f.iter().map(|(c, _)| &*c.qualname).collect::<Vec<_>>(),
            ["outer", "inner"]
        );
        // Carried to the next window's table, it is the same group.
        let mut next = RuntimeFrames::default();
        let carried = next.carry(&frames, inlined);
        assert_eq!(next.get(carried).map(|f| f.len()), Some(2));
    }

    #[test]
    fn a_frame_said_compiled_is_another_frame_of_the_same_method() {
        use crate::model::recording::FrameKind;
        let method = Arc::new(CodeInfo {
            kind: FrameKind::JavaInterpreted,
            ..(*code("long Hot.hotOne(int)")).clone()
        });
        let mut frames = RuntimeFrames::default();
        let interpreted = frames.key(&method, 12);
        let compiled = frames.key_as(&[(method.clone(), 12)], Some(FrameKind::JavaCompiled));
        assert_ne!(interpreted, compiled);
        assert_eq!(frames.key_as(&[(method.clone(), 12)], None), interpreted);
        let index = |k: u64| (k & !RUNTIME_KEY_MASK) as u32;
        assert_eq!(
            frames.kind_at(index(interpreted)),
            Some(FrameKind::JavaInterpreted)
        );
        assert_eq!(
            frames.kind_at(index(compiled)),
            Some(FrameKind::JavaCompiled)
        );
        // Carried to the next window, and kept by a stack record, it stays compiled.
        let mut next = RuntimeFrames::default();
        let carried = next.carry(&frames, compiled);
        assert_eq!(next.kind_at(index(carried)), Some(FrameKind::JavaCompiled));
        let kept = frames.entries();
        assert_eq!(
            kept[index(compiled) as usize].1,
            Some(FrameKind::JavaCompiled)
        );
        assert_eq!(kept[index(interpreted) as usize].1, None);
    }
}
