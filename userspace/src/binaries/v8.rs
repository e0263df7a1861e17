//! Where V8's own description of its objects lies in a binary that embeds
//! it (`node`, `libnode.so`).
//!
//! In: an [`ElfReader`] over a mapped file whose name says it may be V8
//! (read as an attacker wrote it: symbol tables within the section limit).
//! Out: the file addresses of the `v8dbg_` constants V8 builds in for
//! post-mortem debuggers (`gen-postmortem-metadata.py`): frame slots,
//! object field offsets, instance types and string tags. Each is an `int`
//! in the binary's data; they are read from the process
//! ([`crate::symbolize::v8`]), as every other runtime's state is.

use super::elf::ElfReader;

/// The constants sysprof reads, by name; each a file address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct V8Symbols {
    /// Every wanted constant's address, in [`WANTED`]'s order.
    pub at: Vec<u64>,
}

/// The constants read, in the order [`crate::symbolize::v8`] takes them.
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

/// The constants' file addresses, if every one is there.
pub fn read(elf: &ElfReader<'_>) -> Option<V8Symbols> {
    let found = elf.symbols_where(|n| n.starts_with(b"v8dbg_"));
    let at = WANTED
        .iter()
        .map(|w| found.iter().find(|(n, _, _)| n == w).map(|&(_, a, _)| a))
        .collect::<Option<Vec<u64>>>()?;
    Some(V8Symbols { at })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_v8_embedders_are_read() {
        assert!(may_be_v8("node"));
        assert!(may_be_v8("libnode.so.108"));
        assert!(!may_be_v8("nodemon"));
        assert!(!may_be_v8("python3"));
    }
}
