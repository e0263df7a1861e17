//! ELF files edited by tests that damage binaries (section headers,
//! compressed sections), and assembly for libraries of many unwind rows.

use std::path::{Path, PathBuf};

/// A section of a 64-bit little-endian ELF file, as its header says.
#[derive(Debug, Clone, Copy)]
pub struct ElfSection {
    /// Where its header is in the file.
    pub header_at: usize,
    /// sh_type.
    pub kind: u32,
    /// sh_flags.
    pub flags: u64,
    /// sh_offset.
    pub offset: u64,
    /// sh_size.
    pub size: u64,
}

/// The sections of an ELF file, by name: for tests that damage binaries.
pub fn elf_sections(elf: &[u8]) -> Vec<(String, ElfSection)> {
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap()) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap());
    let (shoff, shentsize, shnum, shstrndx) = (
        u64_at(0x28) as usize,
        u16_at(0x3a),
        u16_at(0x3c),
        u16_at(0x3e),
    );
    let header = |i: usize| shoff + i * shentsize;
    let strtab = u64_at(header(shstrndx) + 0x18) as usize;
    (0..shnum)
        .map(|i| {
            let h = header(i);
            let name_at = strtab + u32_at(h) as usize;
            let end = elf[name_at..].iter().position(|&b| b == 0).unwrap();
            let name = String::from_utf8_lossy(&elf[name_at..name_at + end]).into_owned();
            (
                name,
                ElfSection {
                    header_at: h,
                    kind: u32_at(h + 4),
                    flags: u64_at(h + 8),
                    offset: u64_at(h + 0x18),
                    size: u64_at(h + 0x20),
                },
            )
        })
        .collect()
}

/// Find section `name` of `elf`.
pub fn elf_section(elf: &[u8], name: &str) -> ElfSection {
    elf_sections(elf)
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no section {name}"))
        .1
}

/// Rewrite a section header's flags, offset and size.
pub fn set_elf_section(elf: &mut [u8], s: &ElfSection, flags: u64, offset: u64, size: u64) {
    elf[s.header_at + 8..s.header_at + 16].copy_from_slice(&flags.to_le_bytes());
    elf[s.header_at + 0x18..s.header_at + 0x20].copy_from_slice(&offset.to_le_bytes());
    elf[s.header_at + 0x20..s.header_at + 0x28].copy_from_slice(&size.to_le_bytes());
}

/// SHF_COMPRESSED.
pub const SHF_COMPRESSED: u64 = 0x800;

/// An ELF compression header (Elf64_Chdr) for zlib data of `size` bytes decompressed.
pub fn zlib_chdr(size: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(24);
    h.extend(1u32.to_le_bytes()); // ELFCOMPRESS_ZLIB
    h.extend(0u32.to_le_bytes());
    h.extend(size.to_le_bytes());
    h.extend(1u64.to_le_bytes());
    h
}

/// Assembly for a library of `rows` unwind rows: functions of 1,000 rows
/// each (ordinary FDEs of ~2 KiB), whose CFA alternates between two
/// offsets at every instruction. The first function is named `name`.
pub fn many_rows_source(dir: &Path, name: &str, rows: usize) -> PathBuf {
    const ROWS_PER_FUNCTION: usize = 1000;
    let src = dir.join(format!("{name}.s"));
    let mut asm = String::from("\t.section .note.GNU-stack,\"\",@progbits\n\t.text\n");
    for f in 0..rows.div_ceil(ROWS_PER_FUNCTION) {
        let fname = if f == 0 {
            name.to_string()
        } else {
            format!("{name}_{f}")
        };
        asm += &format!(
            "\t.globl {fname}\n\t.type {fname},@function\n{fname}:\n\t.cfi_startproc\n\t.rept {}\n\tnop\n\t.cfi_adjust_cfa_offset 8\n\tnop\n\t.cfi_adjust_cfa_offset -8\n\t.endr\n\tret\n\t.cfi_endproc\n\t.size {fname}, .-{fname}\n",
            ROWS_PER_FUNCTION / 2
        );
    }
    std::fs::write(&src, asm).unwrap();
    src
}
