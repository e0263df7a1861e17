//! Where HotSpot's own description of its structures lies in `libjvm.so`.
//!
//! In: an [`ElfReader`] over a mapped file named `libjvm.so` (read as an
//! attacker wrote it: symbol tables within the section limit). Out: the
//! file addresses of the `gHotSpotVM*` variables the JVM exports for its
//! serviceability agent (`vmStructs.cpp`): the tables of its structures'
//! fields, types and constants, and the strides and field offsets of those
//! tables' entries. The JVM fills the offset variables while it starts, so
//! they are read from the process ([`crate::runtimes::hotspot::read`]), not the
//! file.

use crate::binaries::elf::ElfReader;

/// The exported variables, by name; each a file address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HotSpotSymbols {
    /// `gHotSpotVMStructs`: a pointer to the table of fields.
    pub structs: u64,
    /// `gHotSpotVMStructEntryTypeNameOffset`: where an entry holds its type's name.
    pub struct_type_name: u64,
    /// `gHotSpotVMStructEntryFieldNameOffset`: its field's name.
    pub struct_field_name: u64,
    /// `gHotSpotVMStructEntryIsStaticOffset`: whether the field is static.
    pub struct_is_static: u64,
    /// `gHotSpotVMStructEntryOffsetOffset`: a field's offset in its type.
    pub struct_offset: u64,
    /// `gHotSpotVMStructEntryAddressOffset`: a static field's address.
    pub struct_address: u64,
    /// `gHotSpotVMStructEntryArrayStride`: bytes per entry.
    pub struct_stride: u64,
    /// `gHotSpotVMTypes`: a pointer to the table of types.
    pub types: u64,
    /// `gHotSpotVMTypeEntryTypeNameOffset`: where an entry holds its name.
    pub type_name: u64,
    /// `gHotSpotVMTypeEntrySizeOffset`: its size.
    pub type_size: u64,
    /// `gHotSpotVMTypeEntryArrayStride`: bytes per entry.
    pub type_stride: u64,
    /// `gHotSpotVMIntConstants`: a pointer to the table of integer constants.
    pub int_constants: u64,
    /// `gHotSpotVMIntConstantEntryNameOffset`: where an entry holds its name.
    pub int_name: u64,
    /// `gHotSpotVMIntConstantEntryValueOffset`: its value.
    pub int_value: u64,
    /// `gHotSpotVMIntConstantEntryArrayStride`: bytes per entry.
    pub int_stride: u64,
}

/// Whether a file of this name may be HotSpot (only those are read).
pub fn may_be_libjvm(name: &str) -> bool {
    name == "libjvm.so"
}

/// The variables' file addresses, if every one is exported.
pub fn read(elf: &ElfReader<'_>) -> Option<HotSpotSymbols> {
    let found = elf.symbols_where(|n| n.starts_with(b"gHotSpotVM"));
    let at = |name: &str| found.iter().find(|(n, _, _)| n == name).map(|&(_, a, _)| a);
    Some(HotSpotSymbols {
        structs: at("gHotSpotVMStructs")?,
        struct_type_name: at("gHotSpotVMStructEntryTypeNameOffset")?,
        struct_field_name: at("gHotSpotVMStructEntryFieldNameOffset")?,
        struct_is_static: at("gHotSpotVMStructEntryIsStaticOffset")?,
        struct_offset: at("gHotSpotVMStructEntryOffsetOffset")?,
        struct_address: at("gHotSpotVMStructEntryAddressOffset")?,
        struct_stride: at("gHotSpotVMStructEntryArrayStride")?,
        types: at("gHotSpotVMTypes")?,
        type_name: at("gHotSpotVMTypeEntryTypeNameOffset")?,
        type_size: at("gHotSpotVMTypeEntrySizeOffset")?,
        type_stride: at("gHotSpotVMTypeEntryArrayStride")?,
        int_constants: at("gHotSpotVMIntConstants")?,
        int_name: at("gHotSpotVMIntConstantEntryNameOffset")?,
        int_value: at("gHotSpotVMIntConstantEntryValueOffset")?,
        int_stride: at("gHotSpotVMIntConstantEntryArrayStride")?,
    })
}
