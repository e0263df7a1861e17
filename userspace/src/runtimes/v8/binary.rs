//! Where V8's own description of its objects lies in a binary that embeds
//! it (`node`, `libnode.so`).
//!
//! In: an [`ElfReader`] over a mapped file whose name says it may be V8
//! (read as an attacker wrote it: symbol tables within the section limit).
//! Out: the values of the `v8dbg_` constants V8 builds in for post-mortem
//! debuggers (`gen-postmortem-metadata.py`): frame slots, object field
//! offsets, instance types and string tags, each an `int` in the binary's
//! data (or zero in its .bss), read from the file once per binary, checked
//! to be values a V8 can have. So the kernel reads a node's frames from its
//! first sample (read from the process after its first sample, they came
//! 100-300 ms late). [`crate::runtimes::v8::read`] reads objects with them.

use crate::binaries::elf::ElfReader;

/// The constants sysprof reads, by value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct V8Symbols {
    /// Every wanted constant's value, in [`WANTED`]'s order.
    pub values: Vec<i64>,
    /// The constants optimized code is read with, in [`CODE_WANTED`]'s
    /// order: -1 where the binary has none of a constant's names.
    pub code: Vec<i64>,
}

/// The constants optimized code is read with (which functions the
/// compiler inlined where), each by the names V8 versions gave it; a
/// binary without some reads its frames' own functions only. Indices in
/// [`c`].
pub const CODE_WANTED: &[&[&str]] = &[
    &[
        "v8dbg_class_JSFunction__code__Code",
        "v8dbg_class_JSFunction__code__Tagged_Code_",
    ],
    &["v8dbg_class_JSFunction__raw_feedback_cell__FeedbackCell"],
    &["v8dbg_class_JSFunction__prototype_or_initial_map__HeapObject"],
    &["v8dbg_class_FeedbackCell__value__HeapObject"],
    &["v8dbg_type_Code__CODE_TYPE"],
    &["v8dbg_class_Code__deoptimization_data__FixedArray"],
    &["v8dbg_class_Code__source_position_table__ByteArray"],
    &[
        "v8dbg_class_Code__instruction_start__uintptr_t",
        "v8dbg_class_Code__instruction_start__Address",
    ],
    &["v8dbg_class_Code__instruction_size__int"],
    &["v8dbg_class_InstructionStream__instruction_start__uintptr_t"],
    &["v8dbg_type_InstructionStream__INSTRUCTION_STREAM_TYPE"],
    &["v8dbg_CodeKindFieldMask"],
    &["v8dbg_CodeKindFieldShift"],
    &["v8dbg_CodeKindBaseline"],
    &["v8dbg_DeoptimizationDataInlinedFunctionCountIndex"],
    &["v8dbg_DeoptimizationDataLiteralArrayIndex"],
    &["v8dbg_DeoptimizationDataSharedFunctionInfoIndex"],
    &["v8dbg_DeoptimizationDataInliningPositionsIndex"],
    &["v8dbg_class_FixedArrayBase__length__SMI"],
    &["v8dbg_class_FixedArray__data__uintptr_t"],
    &["v8dbg_type_ByteArray__BYTE_ARRAY_TYPE"],
    &["v8dbg_type_FixedArray__FIXED_ARRAY_TYPE"],
    &["v8dbg_type_WeakFixedArray__WEAK_FIXED_ARRAY_TYPE"],
    &["v8dbg_type_FeedbackVector__FEEDBACK_VECTOR_TYPE"],
];

/// Indices into [`CODE_WANTED`] (and [`V8Symbols::code`]).
#[allow(missing_docs)]
pub mod c {
    pub const FUNCTION_CODE: usize = 0;
    pub const FUNCTION_FEEDBACK_CELL: usize = 1;
    pub const FUNCTION_PROTOTYPE: usize = 2;
    pub const FEEDBACK_CELL_VALUE: usize = 3;
    pub const TYPE_CODE: usize = 4;
    pub const CODE_DEOPT_DATA: usize = 5;
    pub const CODE_POSITIONS: usize = 6;
    pub const CODE_START: usize = 7;
    pub const CODE_SIZE: usize = 8;
    pub const STREAM_START: usize = 9;
    pub const TYPE_STREAM: usize = 10;
    pub const KIND_MASK: usize = 11;
    pub const KIND_SHIFT: usize = 12;
    pub const KIND_BASELINE: usize = 13;
    pub const DEOPT_INLINED_COUNT: usize = 14;
    pub const DEOPT_LITERALS: usize = 15;
    pub const DEOPT_SHARED: usize = 16;
    pub const DEOPT_INLINING: usize = 17;
    pub const ARRAY_LENGTH: usize = 18;
    pub const ARRAY_DATA: usize = 19;
    pub const TYPE_BYTE_ARRAY: usize = 20;
    pub const TYPE_FIXED_ARRAY: usize = 21;
    pub const TYPE_WEAK_FIXED_ARRAY: usize = 22;
    pub const TYPE_FEEDBACK_VECTOR: usize = 23;
}

/// The constants read, in the order [`crate::runtimes::v8::read`] takes them.
pub const WANTED: &[&str] = &[
    "v8dbg_off_fp_context_or_frame_type",
    "v8dbg_off_fp_function",
    "v8dbg_class_JSFunction__shared__SharedFunctionInfo",
    "v8dbg_class_SharedFunctionInfo__name_or_scope_info__Object",
    "v8dbg_class_SharedFunctionInfo__script_or_debug_info__HeapObject",
    "v8dbg_class_HeapObject__map__Map",
    "v8dbg_class_Map__instance_type__uint16_t",
    "v8dbg_class_Script__name__Object",
    "v8dbg_class_String__length__int32_t",
    "v8dbg_class_SeqOneByteString__chars__char",
    "v8dbg_class_SeqTwoByteString__chars__char",
    "v8dbg_class_ConsString__first__String",
    "v8dbg_class_ConsString__second__String",
    "v8dbg_class_ThinString__actual__String",
    "v8dbg_class_SlicedString__parent__String",
    "v8dbg_class_SlicedString__offset__SMI",
    "v8dbg_type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE",
    "v8dbg_type_ScopeInfo__SCOPE_INFO_TYPE",
    "v8dbg_type_Script__SCRIPT_TYPE",
    "v8dbg_FirstNonstringType",
    "v8dbg_StringRepresentationMask",
    "v8dbg_StringEncodingMask",
    "v8dbg_SeqStringTag",
    "v8dbg_ConsStringTag",
    "v8dbg_SlicedStringTag",
    "v8dbg_ThinStringTag",
    "v8dbg_OneByteStringTag",
    "v8dbg_scopeinfo_idx_first_vars",
    "v8dbg_scopeinfo_idx_ncontextlocals",
    "v8dbg_SmiValueShift",
    "v8dbg_SmiShiftSize",
];

/// Whether a file of this name may embed V8 (only those are read).
pub fn may_be_v8(name: &str) -> bool {
    name == "node" || name == "nodejs" || name.starts_with("libnode.so")
}

/// Indices into [`WANTED`] (and [`V8Symbols::values`]): each the
/// position of the constant its name says, in that list's order.
#[allow(missing_docs)]
pub mod k {
    pub const FP_MARKER: usize = 0;
    pub const FP_FUNCTION: usize = 1;
    pub const FUNCTION_SHARED: usize = 2;
    pub const SHARED_NAME: usize = 3;
    pub const SHARED_SCRIPT: usize = 4;
    pub const OBJECT_MAP: usize = 5;
    pub const MAP_TYPE: usize = 6;
    pub const SCRIPT_NAME: usize = 7;
    pub const STRING_LENGTH: usize = 8;
    pub const ONE_BYTE_CHARS: usize = 9;
    pub const TWO_BYTE_CHARS: usize = 10;
    pub const CONS_FIRST: usize = 11;
    pub const CONS_SECOND: usize = 12;
    pub const THIN_ACTUAL: usize = 13;
    pub const SLICED_PARENT: usize = 14;
    pub const SLICED_OFFSET: usize = 15;
    pub const TYPE_SHARED: usize = 16;
    pub const TYPE_SCOPE_INFO: usize = 17;
    pub const TYPE_SCRIPT: usize = 18;
    pub const FIRST_NONSTRING: usize = 19;
    pub const REPRESENTATION_MASK: usize = 20;
    pub const ENCODING_MASK: usize = 21;
    pub const SEQ: usize = 22;
    pub const CONS: usize = 23;
    pub const SLICED: usize = 24;
    pub const THIN: usize = 25;
    pub const ONE_BYTE: usize = 26;
    pub const SCOPE_FIRST_VARS: usize = 27;
    pub const SCOPE_CONTEXT_LOCALS: usize = 28;
    pub const SMI_TAG_SIZE: usize = 29;
    pub const SMI_SHIFT_SIZE: usize = 30;
}

/// Slots of a ScopeInfo the symbolizer looks through.
pub const SCOPE_INFO_SLOTS: usize = 16;

/// Why a binary's constants are not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotRead {
    /// A constant's symbol points at no data of the file.
    Unreadable(&'static str),
    /// A constant holds a value no V8 has (a binary that lies, or a V8
    /// with compressed pointers, which is not read).
    Implausible(&'static str),
}

impl std::fmt::Display for NotRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotRead::Unreadable(n) => write!(f, "its V8 constant {n} could not be read"),
            NotRead::Implausible(n) => write!(
                f,
                "its V8 constant {n} is implausible (a V8 with compressed pointers is not read)"
            ),
        }
    }
}

/// The constants' values, if every one is there (None: no V8 here).
pub fn read(elf: &ElfReader<'_>) -> Option<Result<V8Symbols, NotRead>> {
    let found = elf.symbols_where(|n| n.starts_with(b"v8dbg_"));
    let at = WANTED
        .iter()
        .map(|w| found.iter().find(|(n, _, _)| n == w).map(|&(_, a, _)| a))
        .collect::<Option<Vec<u64>>>()?;
    let segments = elf.segments().ok()?;
    let mut values = Vec::with_capacity(at.len());
    for (&vaddr, &name) in at.iter().zip(WANTED) {
        let value = match crate::binaries::elf::vaddr_to_offset(&segments, vaddr) {
            Some(offset) => match elf.read_checked(name, offset, 4) {
                Ok(b) => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64,
                Err(_) => return Some(Err(NotRead::Unreadable(name))),
            },
            // Past its segment's bytes in the file: .bss, zero.
            None => 0,
        };
        values.push(value);
    }
    let mut code = Vec::with_capacity(CODE_WANTED.len());
    for names in CODE_WANTED {
        let found = names.iter().find_map(|w| {
            found
                .iter()
                .find(|(n, _, _)| n == w)
                .map(|&(_, a, _)| (a, *w))
        });
        let value = match found {
            None => -1,
            Some((vaddr, name)) => match crate::binaries::elf::vaddr_to_offset(&segments, vaddr) {
                Some(offset) => match elf.read_checked(name, offset, 4) {
                    // A value no V8 has is as good as none.
                    Ok(b) => Some(i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64)
                        .filter(|v| (0..0x1_0000).contains(v))
                        .unwrap_or(-1),
                    Err(_) => -1,
                },
                None => 0,
            },
        };
        code.push(value);
    }
    let symbols = V8Symbols { values, code };
    Some(symbols.check().map(|()| symbols))
}

impl V8Symbols {
    /// Each value within what any V8 has: frame slots just below the frame
    /// pointer, fields within 64 KiB, 64-bit Smis.
    pub fn check(&self) -> Result<(), NotRead> {
        if self.values.len() != WANTED.len() {
            return Err(NotRead::Unreadable("(all)"));
        }
        for (i, name) in WANTED.iter().enumerate() {
            let x = self.values[i];
            let ok = match i {
                k::FP_MARKER | k::FP_FUNCTION => (-64..0).contains(&x) && x % 8 == 0,
                k::SMI_TAG_SIZE => x == 1,
                // 31: 64-bit Smis and pointers; 0 would be pointer
                // compression (32-bit fields), which is not read.
                k::SMI_SHIFT_SIZE => x == 31,
                k::SCOPE_FIRST_VARS | k::SCOPE_CONTEXT_LOCALS => {
                    (0..SCOPE_INFO_SLOTS as i64).contains(&x)
                }
                _ => (0..0x1_0000).contains(&x),
            };
            if !ok {
                return Err(NotRead::Implausible(name));
            }
        }
        Ok(())
    }

    /// What the kernel's walker reads of each frame.
    pub fn kernel(&self) -> crate::bpf::abi::V8Frames {
        crate::bpf::abi::V8Frames {
            marker_at: self.values[k::FP_MARKER] as i32,
            function_at: self.values[k::FP_FUNCTION] as i32,
            shared_at: self.values[k::FUNCTION_SHARED] as u32,
            name_at: self.values[k::SHARED_NAME] as u32,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Node 20.20's constants (V8 11.3), as its file holds them.
    pub(crate) fn node20() -> V8Symbols {
        // Node 20.20's values, as its file holds them (.bss ones zero).
        V8Symbols {
            values: vec![
                -8, -16, 24, 16, 32, 0, 12, 16, 12, 16, 16, 16, 24, 16, 16, 24, 262, 261, 167, 128,
                7, 8, 0, 1, 3, 5, 8, 3, 2, 1, 31,
            ],
            code: vec![
                -1, 40, 56, 8, 245, 16, 24, -1, -1, 16, 252, 15, 0, 11, 1, 2, 6, 7, 8, 16, 190,
                175, 240, 249,
            ],
        }
    }

    #[test]
    fn plausible_constants_are_taken_and_lying_ones_refused() {
        let s = node20();
        assert!(s.check().is_ok());
        assert_eq!(
            s.kernel(),
            crate::bpf::abi::V8Frames {
                marker_at: -8,
                function_at: -16,
                shared_at: 24,
                name_at: 16
            }
        );
        let mut lying = node20();
        lying.values[k::FP_FUNCTION] = 4096;
        assert_eq!(
            lying.check(),
            Err(NotRead::Implausible("v8dbg_off_fp_function"))
        );
        let mut lying = node20();
        lying.values[k::SCOPE_FIRST_VARS] = 1 << 20;
        assert!(lying.check().is_err());
        let mut compressed = node20();
        compressed.values[k::SMI_SHIFT_SIZE] = 0;
        assert!(compressed.check().is_err());
        assert!(V8Symbols {
            values: vec![1, 2],
            code: vec![]
        }
        .check()
        .is_err());
    }

    #[test]
    fn node_on_this_machine_is_read_from_its_file() {
        // The node installed here, if any (its values are checked above;
        // here: that they are read from the file as they are).
        let Ok(file) = std::fs::File::open("/usr/bin/node") else {
            eprintln!("NOTE: no /usr/bin/node: its constants are not read from a real file here");
            return;
        };
        let elf = ElfReader::new(&file, Default::default());
        match read(&elf) {
            Some(Ok(s)) => {
                assert_eq!(s.kernel().function_at, -16);
                // Node 20's (V8 11.3's) code constants, the ones it has.
                if s.values == node20().values {
                    assert_eq!(s.code, node20().code);
                }
            }
            Some(Err(e)) => panic!("node's V8 constants: {e}"),
            None => eprintln!("NOTE: /usr/bin/node exports no v8dbg_ constants"),
        }
    }

    #[test]
    fn only_v8_embedders_are_read() {
        assert!(may_be_v8("node"));
        assert!(may_be_v8("libnode.so.108"));
        assert!(!may_be_v8("nodemon"));
        assert!(!may_be_v8("python3"));
    }
}
