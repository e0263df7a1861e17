//! The constants V8's objects are read with: the binary's `v8dbg_`
//! constants, checked, as a [`V8Layout`], and where optimized code keeps
//! what it inlined, as a [`CodeLayout`] (derived for V8 11.3, which names
//! less).
//!
//! In: a V8 binary's constants ([`V8Symbols`]); then tagged pointers and
//! words read from the process. Out: the layouts, an object's instance
//! type (read through its map) and a Smi's value.

use super::{is_heap_object, read_u64};
use crate::runtimes::v8::binary::{c, k, V8Symbols};
use crate::sys::memory::read_process;

/// A V8's constants (its binary's, checked), as objects are read with them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V8Layout {
    pub(super) v: Vec<i64>,
    /// How its optimized code is read (None: not known for this V8).
    pub code: Option<CodeLayout>,
}

impl V8Layout {
    /// The layout a binary's constants describe.
    pub fn new(symbols: &V8Symbols) -> V8Layout {
        V8Layout {
            v: symbols.values.clone(),
            code: CodeLayout::new(symbols),
        }
    }

    pub(super) fn at(&self, i: usize) -> u64 {
        self.v[i] as u64
    }

    /// The instance type of the object at tagged pointer `w`.
    pub(super) fn type_of(&self, pid: u32, w: u64) -> Option<u16> {
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

    pub(super) fn smi(&self, w: u64) -> Option<i64> {
        (w & 1 == 0).then(|| (w as i64) >> (self.v[k::SMI_TAG_SIZE] + self.v[k::SMI_SHIFT_SIZE]))
    }
}

/// Where V8's optimized code keeps what says which functions its
/// compiler inlined where: offsets within a JSFunction, a Code object and
/// its deoptimization data, from the binary's constants. None where they
/// are not all known: frames are then named by their own function only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeLayout {
    pub(super) function_code: u64,
    pub(super) function_feedback_cell: u64,
    pub(super) feedback_cell_value: u64,
    pub(super) type_code: u16,
    pub(super) type_byte_array: u16,
    pub(super) type_fixed_array: u16,
    pub(super) type_weak_fixed_array: u16,
    pub(super) type_feedback_vector: u16,
    pub(super) deopt_data: u64,
    pub(super) positions: u64,
    pub(super) start: u64,
    pub(super) size: u64,
    /// Where the start is a copy of the InstructionStream's (V8 11.3's
    /// Code, whose fields after the source positions the binary does not
    /// name): the stream's field and its own instruction start, checked
    /// on each code read so that a layout guessed wrong reads nothing.
    pub(super) stream: Option<(u64, u16, u64)>,
    pub(super) deopt_inlined_count: u64,
    pub(super) deopt_literals: u64,
    pub(super) deopt_shared: u64,
    pub(super) deopt_inlining: u64,
    pub(super) array_length: u64,
    pub(super) array_data: u64,
}

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
