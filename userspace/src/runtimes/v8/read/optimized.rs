//! A function's optimized code read from V8's memory: its Code object, the
//! deoptimization data that names what it inlined and where, and code
//! compiled for its loops (on-stack replacement) kept in its feedback
//! vector.
//!
//! In: a V8 process's pid, its [`V8Layout`] and [`CodeLayout`], a frame's
//! JSFunction, SharedFunctionInfo and pc. Out: where the pc lies against
//! the function's optimized code ([`CodeAt`], a [`JsCode`] where it holds
//! it), or [`FunctionGone`]. Arrays are read to at most
//! [`MAX_POSITION_BYTES`] and [`MAX_INLINED`] items, feedback vectors to
//! [`MAX_FEEDBACK_SLOTS`].

use super::code::{decode_positions, JsCode};
use super::layout::{CodeLayout, V8Layout};
use super::{is_heap_object, read_u64};
use crate::runtimes::v8::binary::k;
use crate::sys::memory::{read_process, read_process_words};

/// An optimized function's inlined functions and positions (bytes of
/// source position table, inlined functions) read at most.
const MAX_POSITION_BYTES: usize = 1 << 18;
const MAX_INLINED: usize = 4096;
/// Feedback slots looked through for a function's on-stack-replaced code
/// (their objects' maps read in one call per 1,024), and objects among
/// them with a Code's map read as code at most.
const MAX_FEEDBACK_SLOTS: usize = 4096;
const MAX_FEEDBACK_CODES: usize = 8;

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
