//! V8's JavaScript functions named from the process's memory: the
//! function's name and its script's, as V8's own profiler names them.
//!
//! In: a V8 process's pid and its binary's `v8dbg_` constants
//! ([`crate::runtimes::v8::binary`]); then, per JavaScript frame the kernel walked,
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

use crate::bpf::abi::{V8_HEAP_OBJECT_TAG, V8_HEAP_OBJECT_TAG_MASK};
use crate::runtimes::v8::binary::{c, k, V8Symbols, SCOPE_INFO_SLOTS};
use crate::sys::memory::{read_process, read_process_words};

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
    /// How its optimized code is read (None: not known for this V8).
    pub code: Option<CodeLayout>,
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
            code: CodeLayout::new(symbols),
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

/// Where V8's optimized code keeps what says which functions its
/// compiler inlined where: offsets within a JSFunction, a Code object and
/// its deoptimization data, from the binary's constants. None where they
/// are not all known: frames are then named by their own function only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeLayout {
    function_code: u64,
    function_feedback_cell: u64,
    feedback_cell_value: u64,
    type_code: u16,
    type_byte_array: u16,
    type_fixed_array: u16,
    type_weak_fixed_array: u16,
    type_feedback_vector: u16,
    deopt_data: u64,
    positions: u64,
    start: u64,
    size: u64,
    /// Where the start is a copy of the InstructionStream's (V8 11.3's
    /// Code, whose fields after the source positions the binary does not
    /// name): the stream's field and its own instruction start, checked
    /// on each code read so that a layout guessed wrong reads nothing.
    stream: Option<(u64, u16, u64)>,
    deopt_inlined_count: u64,
    deopt_literals: u64,
    deopt_shared: u64,
    deopt_inlining: u64,
    array_length: u64,
    array_data: u64,
}

/// An optimized function's inlined functions and positions (bytes of
/// source position table, inlined functions) read at most.
const MAX_POSITION_BYTES: usize = 1 << 18;
const MAX_INLINED: usize = 4096;
/// Feedback slots looked through for a function's on-stack-replaced code
/// (their objects' maps read in one call per 1,024), and objects among
/// them with a Code's map read as code at most.
const MAX_FEEDBACK_SLOTS: usize = 4096;
const MAX_FEEDBACK_CODES: usize = 8;
/// Functions one frame is made of at most (V8 inlines a few levels deep; a
/// table that claims more has its innermost ones left out).
pub const MAX_SCOPES: usize = 64;

impl CodeLayout {
    /// The layout `s` describes, if it describes one.
    pub fn new(s: &V8Symbols) -> Option<CodeLayout> {
        let v = |i: usize| s.code.get(i).copied().filter(|&x| x >= 0).map(|x| x as u64);
        let function_code = v(c::FUNCTION_CODE).or_else(|| {
            // Not named before V8 11.7: the slot between the feedback cell
            // and the prototype, where V8 11.3 keeps it.
            let (cell, proto) = (v(c::FUNCTION_FEEDBACK_CELL)?, v(c::FUNCTION_PROTOTYPE)?);
            (proto == cell + 16).then_some(cell + 8)
        })?;
        let (deopt_data, positions) = (v(c::CODE_DEOPT_DATA)?, v(c::CODE_POSITIONS)?);
        let (start, size, stream) = match (v(c::CODE_START), v(c::CODE_SIZE)) {
            (Some(start), Some(size)) => (start, size, None),
            // V8 11.3 (node 20) names neither: after the source positions
            // come the InstructionStream, its start, the flags and (from
            // the flags) the size, at 8, 16, 24 and 32 bytes.
            (None, None) if positions == deopt_data + 8 => {
                let stream = (
                    positions + 8,
                    v(c::TYPE_STREAM)? as u16,
                    v(c::STREAM_START)?,
                );
                (positions + 16, positions + 32, Some(stream))
            }
            _ => return None,
        };
        Some(CodeLayout {
            function_code,
            function_feedback_cell: v(c::FUNCTION_FEEDBACK_CELL)?,
            feedback_cell_value: v(c::FEEDBACK_CELL_VALUE)?,
            type_code: v(c::TYPE_CODE)? as u16,
            type_byte_array: v(c::TYPE_BYTE_ARRAY)? as u16,
            type_fixed_array: v(c::TYPE_FIXED_ARRAY)? as u16,
            type_weak_fixed_array: v(c::TYPE_WEAK_FIXED_ARRAY)? as u16,
            type_feedback_vector: v(c::TYPE_FEEDBACK_VECTOR)? as u16,
            deopt_data,
            positions,
            start,
            size,
            stream,
            deopt_inlined_count: v(c::DEOPT_INLINED_COUNT)?,
            deopt_literals: v(c::DEOPT_LITERALS)?,
            deopt_shared: v(c::DEOPT_SHARED)?,
            deopt_inlining: v(c::DEOPT_INLINING)?,
            array_length: v(c::ARRAY_LENGTH)?,
            array_data: v(c::ARRAY_DATA)?,
        })
    }
}

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
    positions: Box<[(u32, u64)]>,
    /// Each inlining: the call site (a SourcePosition in its caller) and
    /// the inlined function's index in `inlined` (-1: the outer function).
    inlining: Box<[(u64, i32)]>,
    /// The inlined functions: SharedFunctionInfo (tagged) and the
    /// name-or-scope-info word it held when the code was read.
    pub inlined: Box<[(u64, u64)]>,
}

/// Where a frame's address lies, against its function's optimized code.
#[derive(Debug)]
pub enum CodeAt<C = JsCode> {
    /// In this code of the function's.
    Holds(C),
    /// In none of its code, though it runs optimized code: the frame is its
    /// caller's, the address in code it called that keeps no frame of its
    /// own (a builtin's fast path, before any frame is set up).
    Elsewhere,
    /// It runs interpreted or baseline code (no optimized code of its holds
    /// the address), or its code could not be read.
    NotCompiled,
}

/// A frame's JSFunction is no longer its function's (freed, moved).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionGone;

/// A SourcePosition's inlining id (0: the outer function's own code).
fn inlining_id(pos: u64) -> usize {
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

impl V8Layout {
    fn u64_at(b: &[u8], at: u64) -> Option<u64> {
        let at = usize::try_from(at).ok()?;
        Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
    }

    /// The bytes of the array-like object at tagged `w`, of one of
    /// `types` (its length a Smi, counted in `unit`-byte items): its first
    /// `take` items (None where it has fewer), or all where `take` is
    /// None and it has at most `max`.
    #[allow(clippy::too_many_arguments)]
    fn array(
        &self,
        pid: u32,
        cl: &CodeLayout,
        w: u64,
        types: &[u16],
        unit: usize,
        take: Option<usize>,
        max: usize,
    ) -> Option<Vec<u8>> {
        if !types.contains(&self.type_of(pid, w)?) {
            return None;
        }
        let len = self.smi(read_u64(pid, w - 1 + cl.array_length)?)?;
        let len = usize::try_from(len).ok()?;
        let len = match take {
            Some(t) => (t <= len).then_some(t)?,
            None => (len <= max).then_some(len)?,
        };
        let mut b = vec![0u8; len * unit];
        read_process(pid, w - 1 + cl.array_data, &mut b).ok()?;
        Some(b)
    }

    /// The optimized code at tagged pointer `code`, if it is a Code object
    /// with deoptimization data (optimized by TurboFan or Maglev: baseline
    /// and builtin code have none).
    pub fn read_code(&self, pid: u32, cl: &CodeLayout, code: u64) -> Option<JsCode> {
        if self.type_of(pid, code)? != cl.type_code {
            return None;
        }
        let mut head = [0u8; 128];
        let need = cl.deopt_data.max(cl.positions).max(cl.start).max(cl.size) + 8;
        let head = head.get_mut(..usize::try_from(need).ok()?)?;
        read_process(pid, code - 1, head).ok()?;
        let start = Self::u64_at(head, cl.start)?;
        let size = Self::u64_at(head, cl.size)? & 0xffff_ffff;
        if let Some((stream_at, stream_type, stream_start)) = cl.stream {
            let stream = Self::u64_at(head, stream_at)?;
            if self.type_of(pid, stream)? != stream_type || stream - 1 + stream_start != start {
                return None;
            }
        }
        if size == 0 || size > 1 << 26 {
            return None;
        }
        let deopt = Self::u64_at(head, cl.deopt_data)?;
        let items = cl
            .deopt_inlined_count
            .max(cl.deopt_literals)
            .max(cl.deopt_shared)
            .max(cl.deopt_inlining) as usize
            + 1;
        let d = self.array(pid, cl, deopt, &[cl.type_fixed_array], 8, Some(items), 0)?;
        let item = |i: u64| Self::u64_at(&d, i * 8);
        let shared = item(cl.deopt_shared)?;
        if self.type_of(pid, shared)? != self.at(k::TYPE_SHARED) as u16 {
            return None;
        }
        let count = self.smi(item(cl.deopt_inlined_count)?)?;
        let count = usize::try_from(count).ok().filter(|&n| n <= MAX_INLINED)?;
        let mut inlined = Vec::with_capacity(count);
        let mut inlining = Vec::new();
        if count > 0 {
            let literals = self.array(
                pid,
                cl,
                item(cl.deopt_literals)?,
                &[cl.type_fixed_array, cl.type_weak_fixed_array],
                8,
                Some(count),
                0,
            )?;
            for i in 0..count {
                // A weak reference's tag (3) made a strong one's (1).
                let f = Self::u64_at(&literals, i as u64 * 8)? & !2;
                let name = if is_heap_object(f) {
                    read_u64(pid, f - 1 + self.at(k::SHARED_NAME)).unwrap_or(0)
                } else {
                    0
                };
                inlined.push((f, name));
            }
            let p = self.array(
                pid,
                cl,
                item(cl.deopt_inlining)?,
                &[cl.type_byte_array],
                1,
                None,
                MAX_INLINED * 16,
            )?;
            for e in p.chunks_exact(16) {
                let call = u64::from_le_bytes(e[..8].try_into().expect("8"));
                let function = i32::from_le_bytes(e[8..12].try_into().expect("4"));
                inlining.push((call, function));
            }
        }
        let table = Self::u64_at(head, cl.positions)?;
        let positions = match self.array(
            pid,
            cl,
            table,
            &[cl.type_byte_array],
            1,
            None,
            MAX_POSITION_BYTES,
        ) {
            Some(b) => decode_positions(&b)?,
            // No table: the frame is its own function's, no inlining known.
            None => Vec::new(),
        };
        Some(JsCode {
            code,
            start,
            size,
            shared,
            positions: positions.into(),
            inlining: inlining.into(),
            inlined: inlined.into(),
        })
    }

    /// The code object of JSFunction `function` (tagged) that holds `pc`:
    /// its current code, or code compiled for a loop in it (on-stack
    /// replacement, kept weakly in its feedback vector). Err where
    /// `function` is not `shared`'s any more (a closure dies young, and its
    /// memory is soon another's).
    pub fn code_at(
        &self,
        pid: u32,
        cl: &CodeLayout,
        function: u64,
        shared: u64,
        pc: u64,
    ) -> Result<CodeAt, FunctionGone> {
        if !is_heap_object(function)
            || read_u64(pid, function - 1 + self.at(k::FUNCTION_SHARED)) != Some(shared)
        {
            return Err(FunctionGone);
        }
        Ok(self.code_of_function(pid, cl, function, shared, pc))
    }

    fn code_of_function(
        &self,
        pid: u32,
        cl: &CodeLayout,
        function: u64,
        shared: u64,
        pc: u64,
    ) -> CodeAt {
        let Some(current) = read_u64(pid, function - 1 + cl.function_code) else {
            return CodeAt::NotCompiled;
        };
        let current_code = self.read_code(pid, cl, current);
        let compiled = current_code.as_ref().is_some_and(|c| c.shared == shared);
        if let Some(c) = current_code.filter(|c| c.shared == shared && c.holds(pc)) {
            return CodeAt::Holds(c);
        }
        match self.osr_code(pid, cl, function, shared, pc, current) {
            Some(c) => CodeAt::Holds(c),
            None if compiled => CodeAt::Elsewhere,
            None => CodeAt::NotCompiled,
        }
    }

    /// Code compiled for a loop of `function` (on-stack replacement) that
    /// holds `pc`, `current` being its current code.
    fn osr_code(
        &self,
        pid: u32,
        cl: &CodeLayout,
        function: u64,
        shared: u64,
        pc: u64,
        current: u64,
    ) -> Option<JsCode> {
        let holds = |c: &JsCode| c.shared == shared && c.holds(pc);
        let cell = read_u64(pid, function - 1 + cl.function_feedback_cell)?;
        let vector = read_u64(pid, cell.checked_sub(1)? + cl.feedback_cell_value)?;
        if self.type_of(pid, vector)? != cl.type_feedback_vector {
            return None;
        }
        // The vector's slots follow its header; their count is its first
        // field (an int after the map). On-stack-replaced code sits in a
        // loop's slot as a weak reference (tag 3).
        let mut len = [0u8; 4];
        read_process(pid, vector - 1 + 8, &mut len).ok()?;
        let slots = usize::try_from(i32::from_le_bytes(len))
            .ok()?
            .min(MAX_FEEDBACK_SLOTS);
        let mut b = vec![0u8; (slots + 8) * 8];
        read_process(pid, vector - 1 + 16, &mut b).ok()?;
        // Code objects share one map, the current code's (a builtin's
        // where the function is not optimized): only objects with it are
        // read as code.
        let code_map = read_u64(pid, current.checked_sub(1)? + self.at(k::OBJECT_MAP))?;
        // A cleared weak reference is 3: no object.
        let weak: Vec<u64> = b
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().expect("8")))
            .filter(|&w| w & 3 == 3 && w > 0xffff && w < 1 << 47 && w != (current | 2))
            .map(|w| w & !2)
            .collect();
        let maps_at: Vec<u64> = weak
            .iter()
            .map(|w| w - 1 + self.at(k::OBJECT_MAP))
            .collect();
        let mut maps = Vec::new();
        read_process_words(pid, &maps_at, &mut maps);
        weak.iter()
            .zip(&maps)
            .filter(|(_, &m)| m == Some(code_map))
            .take(MAX_FEEDBACK_CODES)
            .find_map(|(&w, _)| self.read_code(pid, cl, w).filter(holds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A V8 position table's bytes for `entries` (offset, position), as
    /// V8's builder writes them (zigzag deltas from offset -1, position 0).
    fn encode(entries: &[(i64, i64)]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut put = |v: i64| {
            let mut z = ((v << 1) ^ (v >> 63)) as u64;
            loop {
                let b = (z & 0x7f) as u8;
                z >>= 7;
                if z == 0 {
                    out.push(b);
                    break;
                }
                out.push(b | 0x80);
            }
        };
        let (mut offset, mut pos) = (-1i64, 0i64);
        for &(o, p) in entries {
            // Not a statement: the offset's delta written as -delta - 1.
            put(-(o - offset) - 1);
            put(p - pos);
            (offset, pos) = (o, p);
        }
        out
    }

    /// A SourcePosition at script offset `at` (+1, as V8 stores it) in
    /// inlining `id` (0: none).
    fn position(at: u64, id: u64) -> u64 {
        ((at + 1) << 1) | (id << 31)
    }

    #[test]
    fn a_position_table_node_wrote_decodes() {
        // The start of TurboFan code's table for `outer` (with `inner`
        // inlined), read from node 20's memory: offsets ascend from 0.
        let bytes = [
            0x03, 0xc8, 0x01, 0x4f, 0x6c, 0x2d, 0x78, 0x39, 0xab, 0x01, 0x15, 0x34, 0x57, 0xbc,
            0xfe, 0xff, 0xff, 0x0f, 0x19, 0x08,
        ];
        let t = decode_positions(&bytes).expect("well formed");
        assert_eq!(t[0], (0, 100));
        assert!(t.windows(2).all(|w| w[0].0 <= w[1].0));
        // One entry's position moves into the inlined function (id 1).
        assert!(t.iter().any(|&(_, p)| inlining_id(p) == 1));
        // Cut short: refused, not guessed.
        assert_eq!(decode_positions(&[0x03, 0xc8]), None);
        // An offset past 4 GiB of code: refused.
        assert_eq!(decode_positions(&encode(&[(1 << 33, 4)])), None);
        let e = [(0, 2), (7, 40), (30, 1 << 40)];
        assert_eq!(
            decode_positions(&encode(&e)),
            Some(e.iter().map(|&(o, p)| (o as u32, p as u64)).collect())
        );
    }

    #[test]
    fn inlined_functions_are_told_innermost_first_at_their_call_sites() {
        // outer inlines f (function 0) at offset 50 of its script, which
        // inlines g (function 1) at offset 70: inlinings 1 and 2.
        let code = JsCode {
            code: 0x1001,
            start: 0x10_0000,
            size: 0x100,
            shared: 0x2001,
            positions: vec![
                (0, position(10, 0)),
                (0x20, position(110, 1)),
                (0x40, position(210, 2)),
                (0x60, position(20, 0)),
            ]
            .into(),
            inlining: vec![(position(50, 0), 0), (position(130, 1), 1)].into(),
            inlined: vec![(0x3001, 0), (0x4001, 0)].into(),
        };
        let mut out = Vec::new();
        code.scopes(0x10_0045, false, &mut out);
        assert_eq!(out, vec![(1, 211), (0, 131), (-1, 51)]);
        code.scopes(0x10_0025, false, &mut out);
        assert_eq!(out, vec![(0, 111), (-1, 51)]);
        // A return address belongs to the call before it: 0x40 is g's
        // first instruction, so a return there was f's call.
        code.scopes(0x10_0040, true, &mut out);
        assert_eq!(out, vec![(0, 111), (-1, 51)]);
        code.scopes(0x10_0070, false, &mut out);
        assert_eq!(out, vec![(-1, 21)]);
        // Outside the code: nothing.
        code.scopes(0x20_0000, false, &mut out);
        assert!(out.is_empty());
        // A table whose inlining points at itself or past the functions
        // ends there: no loop, no index out of range.
        let looping = JsCode {
            inlining: vec![(position(1, 1), 0)].into(),
            positions: vec![(0, position(5, 1))].into(),
            ..code.clone()
        };
        looping.scopes(0x10_0000, false, &mut out);
        assert_eq!(out, vec![(0, 6), (-1, 2)]);
        let past = JsCode {
            inlining: vec![(position(1, 0), 7)].into(),
            positions: vec![(0, position(5, 1))].into(),
            ..code
        };
        past.scopes(0x10_0000, false, &mut out);
        assert_eq!(out, vec![(-1, 6)]);
        // A chain of 200 inlinings (each the next one's caller) gives at
        // most MAX_SCOPES functions, the outer function last.
        let deep = JsCode {
            inlining: (0..200u64)
                .map(|i| (position(i, i), 0))
                .collect::<Vec<_>>()
                .into(),
            positions: vec![(0, position(999, 200))].into(),
            ..past
        };
        deep.scopes(0x10_0000, false, &mut out);
        assert_eq!(out.len(), MAX_SCOPES);
        assert_eq!(out.last(), Some(&(-1, 1)));
        assert_eq!(out[out.len() - 2], (0, 2));
    }

    #[test]
    fn node_20s_code_layout_is_derived_and_others_are_not_guessed() {
        let node20 = crate::runtimes::v8::binary::tests::node20();
        let l = CodeLayout::new(&node20).expect("node 20's layout");
        // Read from node 20's memory (%DebugPrint of an optimized function
        // and its Code): the code at 48, instructions start and size at 40
        // and 56, the InstructionStream at 32.
        assert_eq!((l.function_code, l.start, l.size), (48, 40, 56));
        assert_eq!(l.stream, Some((32, 252, 16)));
        // A V8 whose JSFunction has no gap where 11.3 keeps the code, or
        // whose Code fields are elsewhere, is not guessed at.
        let mut other = node20.clone();
        other.code[c::FUNCTION_PROTOTYPE] = 64;
        assert_eq!(CodeLayout::new(&other), None);
        let mut other = node20.clone();
        other.code[c::CODE_POSITIONS] = 40;
        assert_eq!(CodeLayout::new(&other), None);
        // Named constants are taken as they are.
        let mut named = node20;
        named.code[c::FUNCTION_CODE] = 16;
        named.code[c::CODE_START] = 48;
        named.code[c::CODE_SIZE] = 64;
        let l = CodeLayout::new(&named).expect("named");
        assert_eq!(
            (l.function_code, l.start, l.size, l.stream),
            (16, 48, 64, None)
        );
    }

    #[test]
    fn smis_decode_and_heap_pointers_are_told_apart() {
        let mut values = vec![0; crate::runtimes::v8::binary::WANTED.len()];
        values[k::SMI_TAG_SIZE] = 1;
        values[k::SMI_SHIFT_SIZE] = 31;
        let l = V8Layout::new(&V8Symbols {
            values,
            code: vec![],
        });
        assert_eq!(l.smi(7 << 32), Some(7));
        assert_eq!(l.smi(0x7f00_0000_1001), None);
        assert!(is_heap_object(0x7f00_0000_1001));
        assert!(!is_heap_object(0x7f00_0000_1000));
        assert!(!is_heap_object(0xffff_8000_0000_0001));
    }
}
