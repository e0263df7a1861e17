//! A tolerant, bounded reader of the ELF files processes map.
//!
//! In: an open file any user may have written (a binary, a library, a debug
//! file). Out: what the profiler needs from it, each piece read on its own
//! so damage in one never costs another: load segments and the entry point,
//! the build id and `.gnu_debuglink`, whether its DWARF may be handed to the
//! symbolizer (sizes checked against limits before anything is allocated),
//! the unwind sections' bytes, names the symbolizer does not give (PLT
//! stubs as `name@plt`, the public name of aliased functions) and the
//! function starts its FDEs give when it has no symbols.
//!
//! Written on object's low-level ELF types rather than `object::File`:
//! `object::File::parse` reads the symbol tables eagerly, so one damaged
//! `.symtab` header would hide a good `.eh_frame`. Every size read from the
//! file is checked against the file's length and a limit before use, and a
//! section that lies over a hole of a sparse file is refused: its size is
//! only claimed (a 12-KiB file can say it holds 765 MiB of `.eh_frame`).
//! CFI (`.eh_frame`, `.debug_frame`) is read entry by entry, as far as its
//! entries go, within its own budget; `.eh_frame_hdr` only as far as the
//! FDEs it indexes. Reads are positional (`pread`): the descriptor is shared
//! with other readers of the same file.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use object::elf;
use object::read::elf::{CompressionHeader, FileHeader, ProgramHeader, SectionHeader, SectionTable, Sym};
use object::read::ReadCache;
use object::Endianness;
use rustc_hash::FxHashMap;

type Elf64 = elf::FileHeader64<Endianness>;

/// What one file may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElfLimits {
    /// Largest section copied into memory (symbol tables, relocations).
    pub max_section_bytes: u64,
    /// Largest CFI section (`.eh_frame`, `.debug_frame`) read: more than
    /// eight times libLLVM's 7.5 MiB of `.eh_frame`.
    pub max_cfi_bytes: u64,
    /// Largest DWARF section handed to the symbolizer, decompressed.
    pub max_dwarf_section_bytes: u64,
    /// Largest total of DWARF sections handed to the symbolizer.
    pub max_dwarf_total_bytes: u64,
    /// Longest symbol name kept (longer ones are cut).
    pub max_name_len: usize,
}

impl Default for ElfLimits {
    fn default() -> Self {
        ElfLimits {
            max_section_bytes: 256 << 20,
            max_cfi_bytes: 64 << 20,
            max_dwarf_section_bytes: 512 << 20,
            max_dwarf_total_bytes: 1 << 30,
            max_name_len: 1024,
        }
    }
}

/// A loadable segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Its address in the file's address space (p_vaddr).
    pub vaddr: u64,
    /// Its file offset (p_offset).
    pub offset: u64,
    /// Bytes in the file (p_filesz).
    pub filesz: u64,
    /// PF_X.
    pub executable: bool,
}

/// Whether the symbolizer may read a file's DWARF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DwarfCheck {
    /// It has none.
    Absent,
    /// Present and within limits.
    Usable,
    /// Present but refused, and why (sizes beyond the limits, damage).
    Refused(String),
}

/// A section's place in the file.
#[derive(Debug, Clone, Copy)]
pub struct SectionInfo {
    /// sh_addr.
    pub addr: u64,
    /// sh_offset.
    pub offset: u64,
    /// sh_size.
    pub size: u64,
    /// SHF_COMPRESSED.
    pub compressed: bool,
}

/// CFI entries longer than this end what is read of a section: the longest
/// in the system's libraries and Rust's compiler is 33 KiB (an FDE of
/// librustc_driver), and a longer one is a claim, not code.
const MAX_CFI_ENTRY_BYTES: u64 = 1 << 20;

/// A file read at an offset of its own (`pread`), so readers sharing the
/// descriptor (the table workers, the symbolizer's preparation) cannot move
/// each other's reads.
struct At<'f> {
    file: &'f File,
    pos: u64,
    len: u64,
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for At<'_> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = pos.ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        Ok(self.pos)
    }
}

/// An ELF file opened for reading; see the module doc.
pub struct ElfReader<'f> {
    file: &'f File,
    data: ReadCache<At<'f>>,
    file_len: u64,
    limits: ElfLimits,
}

/// The parsed headers, borrowed from the reader's cache.
struct Headers<'d, 'f> {
    header: &'d Elf64,
    endian: Endianness,
    sections: SectionTable<'d, Elf64, &'d ReadCache<At<'f>>>,
}

/// CFI read from a section: its entries (up to the terminator, the budget,
/// damage or an entry too long to be real), and how many are FDEs.
pub struct Cfi {
    /// Where the section is.
    pub info: SectionInfo,
    /// The bytes of its whole entries.
    pub bytes: Vec<u8>,
    /// FDEs among them.
    pub fdes: usize,
}

impl<'f> ElfReader<'f> {
    /// Read from `file` with `limits`.
    pub fn new(file: &'f File, limits: ElfLimits) -> ElfReader<'f> {
        // fstat: the file's real length, against which every claim is checked.
        let file_len = file.metadata().map(|m| m.len()).unwrap_or(0);
        ElfReader { file, data: ReadCache::new(At { file, pos: 0, len: file_len }), file_len, limits }
    }

    fn headers(&self) -> Result<Headers<'_, 'f>, String> {
        let data = &self.data;
        let header = Elf64::parse(data).map_err(|e| format!("not a 64-bit ELF file: {e}"))?;
        let endian = header.endian().map_err(|e| e.to_string())?;
        let sections = header.sections(endian, data).map_err(|e| format!("bad section headers: {e}"))?;
        Ok(Headers { header, endian, sections })
    }

    /// The entry point (e_entry).
    pub fn entry(&self) -> Result<u64, String> {
        let h = self.headers()?;
        Ok(h.header.e_entry.get(h.endian))
    }

    /// The loadable segments.
    pub fn segments(&self) -> Result<Vec<Segment>, String> {
        let data = &self.data;
        let header = Elf64::parse(data).map_err(|e| format!("not a 64-bit ELF file: {e}"))?;
        let endian = header.endian().map_err(|e| e.to_string())?;
        let phdrs = header.program_headers(endian, data).map_err(|e| format!("bad program headers: {e}"))?;
        Ok(phdrs
            .iter()
            .filter(|p| p.p_type(endian) == elf::PT_LOAD)
            .map(|p| Segment {
                vaddr: p.p_vaddr(endian),
                offset: p.p_offset(endian),
                filesz: p.p_filesz(endian),
                executable: p.p_flags(endian).0 & elf::PF_X.0 != 0,
            })
            .collect())
    }

    /// Where the section named `name` is, if the file has it.
    pub fn section(&self, name: &str) -> Option<SectionInfo> {
        let h = self.headers().ok()?;
        let (_, s) = h.sections.section_by_name(h.endian, name.as_bytes())?;
        Some(SectionInfo {
            addr: s.sh_addr(h.endian),
            offset: s.sh_offset(h.endian),
            size: s.sh_size(h.endian),
            compressed: s.sh_flags(h.endian).0 & elf::SHF_COMPRESSED.0 != 0,
        })
    }

    /// The bytes of an uncompressed section, within the file and the limit.
    pub fn section_data(&self, name: &str) -> Result<Option<(SectionInfo, Vec<u8>)>, String> {
        let Some(info) = self.stored_section(name)? else { return Ok(None) };
        self.check_range(name, info.offset, info.size, self.limits.max_section_bytes)?;
        // Straight into its buffer, once (through the cache it would be held twice).
        Ok(Some((info, self.read_exact(name, info.offset, info.size)?)))
    }

    /// Where section `name` lies when it has bytes of its own in the file
    /// (not NOBITS) that can be read as they are (not compressed).
    fn stored_section(&self, name: &str) -> Result<Option<SectionInfo>, String> {
        let Some(info) = self.section(name) else { return Ok(None) };
        let h = self.headers()?;
        let (_, s) = h.sections.section_by_name(h.endian, name.as_bytes()).ok_or("section vanished")?;
        if s.sh_type(h.endian) == elf::SHT_NOBITS {
            return Ok(None);
        }
        if info.compressed {
            return Err(format!("{name} is compressed"));
        }
        Ok(Some(info))
    }

    fn read_exact(&self, name: &str, offset: u64, size: u64) -> Result<Vec<u8>, String> {
        let mut bytes = vec![0u8; size as usize];
        self.file.read_exact_at(&mut bytes, offset).map_err(|e| format!("cannot read {name}: {e}"))?;
        Ok(bytes)
    }

    /// Whether `size` bytes at `offset` are all in the file, within `limit`
    /// and not over a hole (bytes the file only claims: a sparse file's
    /// holes read as zeros but cost it nothing on disk, and no linker
    /// leaves a hole inside a section we read).
    fn check_range(&self, name: &str, offset: u64, size: u64, limit: u64) -> Result<(), String> {
        if offset.checked_add(size).is_none_or(|end| end > self.file_len) {
            return Err(format!("{name} claims {size} bytes at offset {offset}, past the end of the file"));
        }
        if size > limit {
            return Err(format!("{name} is {} MiB, more than the {} MiB allowed", size >> 20, limit >> 20));
        }
        if size > 0 && self.hole_at(offset) < offset + size {
            return Err(format!("{name} claims {size} bytes at offset {offset} that the file does not hold (a hole in a sparse file)"));
        }
        Ok(())
    }

    /// Where the first hole at or after `offset` begins: the file's end
    /// when it has none there (or its file system cannot say).
    fn hole_at(&self, offset: u64) -> u64 {
        let Ok(at) = libc::off_t::try_from(offset) else { return self.file_len };
        // SAFETY: lseek on a descriptor we hold; it moves only the file's
        // offset, which no read here uses (they are positional).
        let hole = unsafe { libc::lseek(self.file.as_raw_fd(), at, libc::SEEK_HOLE) };
        u64::try_from(hole).unwrap_or(self.file_len)
    }

    /// The CFI of `.eh_frame` or `.debug_frame`: read as far as its entries
    /// go (each entry's length says where the next begins; a zero length
    /// ends `.eh_frame`), never past the section, the CFI budget, an entry
    /// longer than any real one, or a hole. A section of zeros costs one
    /// small read, whatever its header claims.
    pub fn cfi(&self, name: &str) -> Result<Option<Cfi>, String> {
        let Some(info) = self.stored_section(name)? else { return Ok(None) };
        if info.offset.checked_add(info.size).is_none_or(|end| end > self.file_len) {
            return Err(format!("{name} claims {} bytes at offset {}, past the end of the file", info.size, info.offset));
        }
        let is_eh_frame = name == ".eh_frame";
        // What can be read: the section up to the budget and the first hole.
        let readable = info.size.min(self.limits.max_cfi_bytes).min(self.hole_at(info.offset).saturating_sub(info.offset));
        let mut bytes: Vec<u8> = Vec::new();
        let (mut at, mut fdes) = (0u64, 0usize);
        // Make bytes[..want] present (false: the section cannot give them).
        let fill = |bytes: &mut Vec<u8>, want: u64| -> Result<bool, String> {
            if want > readable {
                return Ok(false);
            }
            if want as usize > bytes.len() {
                // Read ahead in growing steps (a syscall per entry would be
                // slow), never past what can be read.
                let to = want.max((bytes.len() as u64 * 2).max(64 << 10)).min(readable) as usize;
                let from = bytes.len();
                bytes.resize(to, 0);
                self.file.read_exact_at(&mut bytes[from..], info.offset + from as u64).map_err(|e| format!("cannot read {name}: {e}"))?;
            }
            Ok(true)
        };
        while fill(&mut bytes, at + 4)? {
            let i = at as usize;
            let len32 = u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
            if len32 == 0 {
                break;
            }
            let (header, len) = if len32 == u32::MAX {
                if !fill(&mut bytes, at + 12)? {
                    break;
                }
                (12, u64::from_le_bytes(bytes[i + 4..i + 12].try_into().expect("8 bytes")))
            } else {
                (4, len32 as u64)
            };
            if !(4..=MAX_CFI_ENTRY_BYTES).contains(&len) || !fill(&mut bytes, at + header + len)? {
                break;
            }
            // The CIE id (or an FDE's CIE pointer) follows the length: a CIE
            // is 0 in .eh_frame, all ones in .debug_frame.
            let j = i + header as usize;
            let id = if header == 12 {
                if len < 8 {
                    break;
                }
                u64::from_le_bytes(bytes[j..j + 8].try_into().expect("8 bytes"))
            } else {
                u32::from_le_bytes(bytes[j..j + 4].try_into().expect("4 bytes")) as u64
            };
            let cie = if is_eh_frame { id == 0 } else { id == u32::MAX as u64 || id == u64::MAX };
            fdes += usize::from(!cie);
            at += header + len;
        }
        bytes.truncate(at as usize);
        bytes.shrink_to_fit();
        Ok(Some(Cfi { info, bytes, fdes }))
    }

    /// `.eh_frame_hdr`, read only as far as its table of `fdes` FDEs goes
    /// (the FDEs `.eh_frame` was found to have): None when it has no table
    /// in the form every linker writes, or indexes more FDEs than there are
    /// (its user then indexes `.eh_frame` itself).
    pub fn eh_frame_hdr(&self, fdes: usize) -> Option<(SectionInfo, Vec<u8>)> {
        let info = self.section(".eh_frame_hdr")?;
        if info.compressed || info.size < 12 || self.check_range(".eh_frame_hdr", info.offset, 12, 12).is_err() {
            return None;
        }
        let head = self.read_exact(".eh_frame_hdr", info.offset, 12).ok()?;
        // version 1; eh_frame_ptr: pcrel sdata4; fde_count: udata4; table: datarel sdata4.
        if head[..4] != [1, 0x1b, 0x03, 0x3b] {
            return None;
        }
        let count = u32::from_le_bytes(head[8..12].try_into().ok()?) as u64;
        let size = 12 + count * 8;
        if count as usize > fdes || size > info.size || self.check_range(".eh_frame_hdr", info.offset, size, self.limits.max_cfi_bytes).is_err() {
            return None;
        }
        let bytes = self.read_exact(".eh_frame_hdr", info.offset, size).ok()?;
        Some((SectionInfo { size, ..info }, bytes))
    }

    /// The GNU build id, from the `.note.gnu.build-id` section.
    pub fn build_id(&self) -> Option<Vec<u8>> {
        let (_, note) = self.section_data(".note.gnu.build-id").ok()??;
        gnu_build_id_from_notes(&note)
    }

    /// `.gnu_debuglink`: the debug file's name and its CRC32.
    pub fn debuglink(&self) -> Option<(Vec<u8>, u32)> {
        let (_, data) = self.section_data(".gnu_debuglink").ok()??;
        let len = data.iter().position(|&b| b == 0)?;
        let crc_at = (len + 1).next_multiple_of(4);
        let crc = u32::from_le_bytes(data.get(crc_at..crc_at + 4)?.try_into().ok()?);
        (len > 0).then(|| (data[..len].to_vec(), crc))
    }

    /// Whether its DWARF may be read by the symbolizer: every `.debug_*`
    /// section lies inside the file and, decompressed, within the limits.
    pub fn dwarf_check(&self) -> DwarfCheck {
        let h = match self.headers() {
            Ok(h) => h,
            Err(e) => return DwarfCheck::Refused(e),
        };
        let mut any = false;
        let mut total = 0u64;
        for s in h.sections.iter() {
            let Ok(name) = h.sections.section_name(h.endian, s) else { continue };
            if name.starts_with(b".zdebug_") {
                return DwarfCheck::Refused("old-style .zdebug compression".into());
            }
            if !name.starts_with(b".debug_") || s.sh_type(h.endian) == elf::SHT_NOBITS {
                continue;
            }
            any = true;
            let name = String::from_utf8_lossy(name);
            let (offset, size) = (s.sh_offset(h.endian), s.sh_size(h.endian));
            if offset.checked_add(size).is_none_or(|end| end > self.file_len) {
                return DwarfCheck::Refused(format!("{name} lies past the end of the file"));
            }
            if size > 0 && self.hole_at(offset) < offset + size {
                return DwarfCheck::Refused(format!("{name} lies over a hole of a sparse file (bytes it only claims)"));
            }
            let full = match s.compression(h.endian, &self.data) {
                Ok(Some((ch, _, _))) => ch.ch_size(h.endian),
                Ok(None) => size,
                Err(e) => return DwarfCheck::Refused(format!("{name}: {e}")),
            };
            if full > self.limits.max_dwarf_section_bytes {
                return DwarfCheck::Refused(format!("{name} is {} MiB decompressed, more than the {} MiB allowed", full >> 20, self.limits.max_dwarf_section_bytes >> 20));
            }
            total = total.saturating_add(full);
        }
        if total > self.limits.max_dwarf_total_bytes {
            return DwarfCheck::Refused(format!("its DWARF is {} MiB, more than the {} MiB allowed", total >> 20, self.limits.max_dwarf_total_bytes >> 20));
        }
        if any { DwarfCheck::Usable } else { DwarfCheck::Absent }
    }

    /// Function symbols of one symbol table section (`.symtab` or
    /// `.dynsym`): (address, name, rank); a damaged table gives none.
    fn functions(&self, h: &Headers<'_, 'f>, sh_type: elf::SectionType) -> Vec<(u64, String, u8)> {
        let mut out = Vec::new();
        let Some((index, section)) = h.sections.enumerate().find(|(_, s)| s.sh_type(h.endian) == sh_type) else { return out };
        if self.check_range("symbol table", section.sh_offset(h.endian), section.sh_size(h.endian), self.limits.max_section_bytes).is_err() {
            return out;
        }
        let Ok(table) = object::read::elf::SymbolTable::parse(h.endian, &self.data, &h.sections, index, section) else { return out };
        let strings = table.strings();
        for sym in table.iter() {
            let kind = sym.st_type();
            if !(kind == elf::STT_FUNC || kind == elf::STT_GNU_IFUNC) || sym.st_shndx(h.endian) == elf::SHN_UNDEF {
                continue;
            }
            let addr = sym.st_value(h.endian);
            let Ok(name) = sym.name(h.endian, strings) else { continue };
            if addr == 0 || name.is_empty() {
                continue;
            }
            let name = String::from_utf8_lossy(&name[..name.len().min(self.limits.max_name_len)]).into_owned();
            out.push((addr, name, alias_rank(sym.st_bind(), sym.st_visibility())));
        }
        out
    }

    /// Names the symbolizer does not give: see [`NameTables`].
    pub fn name_tables(&self) -> NameTables {
        let mut t = NameTables::default();
        let Ok(h) = self.headers() else { return t };
        // Aliases: several function symbols at one address.
        let mut by_addr: FxHashMap<u64, Vec<(String, u8)>> = FxHashMap::default();
        for (addr, name, rank) in self.functions(&h, elf::SHT_SYMTAB).into_iter().chain(self.functions(&h, elf::SHT_DYNSYM)) {
            by_addr.entry(addr).or_default().push((name, rank));
        }
        for (addr, mut names) in by_addr {
            names.sort();
            names.dedup();
            if names.len() > 1 {
                let best = names.into_iter().min_by(public_name_order).expect("non-empty");
                t.aliases.insert(addr, best.0.into_boxed_str());
            }
        }
        t.plt = self.plt_entries(&h);
        t
    }

    /// PLT stubs and the functions they jump to, found by decoding each
    /// stub's `jmp *slot(%rip)` and matching the slot with the dynamic
    /// relocations, as perf's PLT synthesis does (x86_64).
    fn plt_entries(&self, h: &Headers<'_, 'f>) -> Vec<(u64, u64, Box<str>)> {
        if h.header.e_machine.get(h.endian) != elf::EM_X86_64 {
            return Vec::new();
        }
        // GOT slot address -> symbol name, from .rela.plt and .rela.dyn.
        let dynsym: Vec<String> = {
            let Some((index, section)) = h.sections.enumerate().find(|(_, s)| s.sh_type(h.endian) == elf::SHT_DYNSYM) else { return Vec::new() };
            match object::read::elf::SymbolTable::parse(h.endian, &self.data, &h.sections, index, section) {
                Ok(table) => table
                    .iter()
                    .map(|s| {
                        s.name(h.endian, table.strings())
                            .map(|n| String::from_utf8_lossy(&n[..n.len().min(self.limits.max_name_len)]).into_owned())
                            .unwrap_or_default()
                    })
                    .collect(),
                Err(_) => return Vec::new(),
            }
        };
        let mut slots: FxHashMap<u64, usize> = FxHashMap::default();
        for rela in [".rela.plt", ".rela.dyn"] {
            let Ok(Some((_, bytes))) = self.section_data(rela) else { continue };
            for r in bytes.chunks_exact(24) {
                let offset = u64::from_le_bytes(r[0..8].try_into().expect("8 bytes"));
                let info = u64::from_le_bytes(r[8..16].try_into().expect("8 bytes"));
                let (sym, kind) = ((info >> 32) as usize, info as u32);
                if (kind == elf::R_X86_64_JUMP_SLOT.0 || kind == elf::R_X86_64_GLOB_DAT.0) && sym != 0 && sym < dynsym.len() {
                    slots.insert(offset, sym);
                }
            }
        }
        let mut out = Vec::new();
        for plt in [".plt", ".plt.sec", ".plt.got"] {
            let Ok(Some((info, code))) = self.section_data(plt) else { continue };
            for (i, stub) in code.chunks(16).enumerate() {
                let at = info.addr + i as u64 * 16;
                let Some(slot) = stub_slot(stub, at) else { continue };
                if let Some(&sym) = slots.get(&slot) {
                    if !dynsym[sym].is_empty() {
                        out.push((at, at + 16, format!("{}@plt", dynsym[sym]).into_boxed_str()));
                    }
                }
            }
        }
        out.sort_by_key(|e| e.0);
        out
    }

    /// Start and end addresses of the functions `.eh_frame` describes (one
    /// FDE per function), sorted.
    pub fn fde_ranges(&self) -> Result<Vec<(u64, u64)>, String> {
        use gimli::UnwindSection;
        let Cfi { info, bytes, .. } = self.cfi(".eh_frame")?.ok_or("no .eh_frame")?;
        let eh = gimli::EhFrame::new(&bytes, gimli::LittleEndian);
        let mut bases = gimli::BaseAddresses::default().set_eh_frame(info.addr);
        if let Some(text) = self.section(".text") {
            bases = bases.set_text(text.addr);
        }
        let mut out = Vec::new();
        let mut entries = eh.entries(&bases);
        // Each entry advances by its length: bounded by the section's size.
        loop {
            match entries.next() {
                Ok(Some(gimli::CieOrFde::Fde(partial))) => {
                    if let Ok(fde) = partial.parse(|s, b, o| s.cie_from_offset(b, o)) {
                        if fde.len() > 0 {
                            out.push((fde.initial_address(), fde.initial_address().saturating_add(fde.len())));
                        }
                    }
                }
                Ok(Some(gimli::CieOrFde::Cie(_))) => {}
                Ok(None) => break,
                Err(e) => {
                    if out.is_empty() {
                        return Err(format!(".eh_frame: {e}"));
                    }
                    break;
                }
            }
        }
        out.sort_unstable();
        Ok(out)
    }
}

/// The GOT slot a 16-byte x86_64 PLT stub at `at` jumps through: an
/// optional `endbr64`, an optional `bnd` prefix, then `jmp *disp32(%rip)`.
fn stub_slot(stub: &[u8], at: u64) -> Option<u64> {
    let mut i = 0;
    if stub.get(0..4) == Some(&[0xf3, 0x0f, 0x1e, 0xfa]) {
        i = 4;
    }
    if stub.get(i) == Some(&0xf2) {
        i += 1;
    }
    if stub.get(i..i + 2) != Some(&[0xff, 0x25]) {
        return None;
    }
    let disp = i32::from_le_bytes(stub.get(i + 2..i + 6)?.try_into().ok()?);
    Some((at + i as u64 + 6).wrapping_add(disp as i64 as u64))
}

/// Lower is better: global before weak before local, default visibility first.
fn alias_rank(bind: elf::SymbolBind, visibility: elf::SymbolVisibility) -> u8 {
    let b = match bind {
        elf::STB_GLOBAL => 0,
        elf::STB_WEAK => 1,
        _ => 2,
    };
    b * 2 + u8::from(visibility != elf::STV_DEFAULT)
}

/// The order in which aliases are preferred, as perf chooses: by binding
/// and visibility, then fewer leading underscores (`malloc` over
/// `__libc_malloc` over `__GI___libc_malloc`), then the shorter name.
fn public_name_order(a: &(String, u8), b: &(String, u8)) -> std::cmp::Ordering {
    let underscores = |s: &str| s.bytes().take_while(|&c| c == b'_').count() + if s.contains("__GI_") { 4 } else { 0 };
    (a.1, underscores(&a.0), a.0.len(), &a.0).cmp(&(b.1, underscores(&b.0), b.0.len(), &b.0))
}

/// Names from a binary's own tables.
#[derive(Debug, Default, Clone)]
pub struct NameTables {
    /// Address -> the public name, where several function symbols share it.
    pub aliases: FxHashMap<u64, Box<str>>,
    /// PLT stubs: (start, end, "name@plt"), sorted.
    pub plt: Vec<(u64, u64, Box<str>)>,
}

impl NameTables {
    /// The PLT stub containing `addr`.
    pub fn plt_at(&self, addr: u64) -> Option<(u64, &str)> {
        let i = self.plt.partition_point(|e| e.0 <= addr).checked_sub(1)?;
        let (start, end, name) = &self.plt[i];
        (addr < *end).then_some((*start, &**name))
    }
}

/// File offset -> address in the file's address space, through the load
/// segment that holds it.
pub fn offset_to_vaddr(segments: &[Segment], offset: u64) -> Option<u64> {
    segments.iter().find(|s| offset >= s.offset && offset - s.offset < s.filesz).map(|s| offset - s.offset + s.vaddr)
}

/// Address in the file's address space -> file offset.
pub fn vaddr_to_offset(segments: &[Segment], vaddr: u64) -> Option<u64> {
    segments.iter().find(|s| vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz).map(|s| vaddr - s.vaddr + s.offset)
}

/// Find the GNU build id (type 3, owner "GNU") in a raw ELF note section.
/// Written here because the notes file is a bare note section, not an ELF
/// file that blazesym's reader accepts.
pub fn gnu_build_id_from_notes(notes: &[u8]) -> Option<Vec<u8>> {
    let mut at = 0usize;
    let word = |i: usize| -> Option<usize> {
        Some(u32::from_ne_bytes(notes.get(i..i + 4)?.try_into().ok()?) as usize)
    };
    let align4 = |x: usize| x.checked_add(3).map(|v| v & !3);
    while at + 12 <= notes.len() {
        let (namesz, descsz, kind) = (word(at)?, word(at + 4)?, word(at + 8)?);
        let name_at = at + 12;
        let desc_at = name_at.checked_add(align4(namesz)?)?;
        let end = desc_at.checked_add(align4(descsz)?)?;
        if end > notes.len() {
            return None;
        }
        if kind == 3 && notes.get(name_at..name_at + namesz)? == b"GNU\0" {
            return Some(notes[desc_at..desc_at + descsz].to_vec());
        }
        at = end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// Check the stub decoding of the three x86_64 PLT layouts: classic
    /// `.plt` entries, `.plt.sec` with endbr64 and bnd, and PLT0 (no slot).
    #[test]
    fn decodes_plt_stubs() {
        // jmp *0x2fe2(%rip) at 0x1030: next instruction 0x1036.
        let classic = [0xff, 0x25, 0xe2, 0x2f, 0x00, 0x00, 0x68, 0x00, 0x00, 0x00, 0x00, 0xe9, 0xe0, 0xff, 0xff, 0xff];
        assert_eq!(stub_slot(&classic, 0x1030), Some(0x1036 + 0x2fe2));
        // endbr64; bnd jmp *0x2fd5(%rip) at 0x1060: next instruction 0x106b.
        let sec = [0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0xd5, 0x2f, 0x00, 0x00, 0x0f, 0x1f, 0x44, 0x00, 0x00];
        assert_eq!(stub_slot(&sec, 0x1060), Some(0x106b + 0x2fd5));
        // PLT0: push GOT+8; jmp *GOT+16 — begins with ff 35: not a stub.
        let plt0 = [0xff, 0x35, 0x9a, 0x2f, 0x00, 0x00, 0xff, 0x25, 0x9c, 0x2f, 0x00, 0x00, 0x0f, 0x1f, 0x40, 0x00];
        assert_eq!(stub_slot(&plt0, 0x1020), None);
        assert_eq!(stub_slot(&[0xff], 0), None, "a cut stub is no stub");
    }

    /// Check that the public name wins among aliases, as perf picks it.
    #[test]
    fn prefers_public_names() {
        let pick = |names: &[(&str, u8)]| {
            let v: Vec<(String, u8)> = names.iter().map(|(n, r)| (n.to_string(), *r)).collect();
            v.into_iter().min_by(public_name_order).unwrap().0
        };
        let global = alias_rank(elf::STB_GLOBAL, elf::STV_DEFAULT);
        let local = alias_rank(elf::STB_LOCAL, elf::STV_DEFAULT);
        let hidden = alias_rank(elf::STB_GLOBAL, elf::STV_HIDDEN);
        assert_eq!(pick(&[("__GI___libc_malloc", local), ("__libc_malloc", global), ("malloc", global)]), "malloc");
        assert_eq!(pick(&[("___pthread_mutex_lock", local), ("pthread_mutex_lock", global)]), "pthread_mutex_lock");
        assert_eq!(pick(&[("internal_hot", hidden), ("hot", local), ("hot_public", global)]), "hot_public");
    }

    /// A file with ELF headers whose `.eh_frame`, `.eh_frame_hdr` and
    /// `.debug_frame` each claim `claim` bytes, with `eh` written at the
    /// start of `.eh_frame` and the rest left a hole (sparse) or written
    /// as zeros.
    fn claiming_file(name: &str, claim: u64, eh: &[u8], sparse: bool) -> (std::path::PathBuf, File) {
        let path = std::env::temp_dir().join(format!("sysprof-elf-test-{}-{name}", std::process::id()));
        let shstr = b"\0.eh_frame\0.eh_frame_hdr\0.debug_frame\0.shstrtab\0";
        let name_at = |n: &str| shstr.windows(n.len() + 1).position(|w| &w[..n.len()] == n.as_bytes() && w[n.len()] == 0).unwrap() as u32;
        let mut f = vec![0u8; 0x3000];
        f[..8].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
        let put16 = |f: &mut [u8], at: usize, v: u16| f[at..at + 2].copy_from_slice(&v.to_le_bytes());
        let put32 = |f: &mut [u8], at: usize, v: u32| f[at..at + 4].copy_from_slice(&v.to_le_bytes());
        let put64 = |f: &mut [u8], at: usize, v: u64| f[at..at + 8].copy_from_slice(&v.to_le_bytes());
        put16(&mut f, 16, 3);
        put16(&mut f, 18, 62);
        put32(&mut f, 20, 1);
        put64(&mut f, 24, 0x1000);
        put64(&mut f, 32, 64);
        put64(&mut f, 40, 0x1000);
        for (at, v) in [(52, 64), (54, 56), (56, 1), (58, 64), (60, 5), (62, 4)] {
            put16(&mut f, at, v);
        }
        // One executable PT_LOAD of the first three pages.
        put32(&mut f, 64, 1);
        put32(&mut f, 68, 5);
        put64(&mut f, 64 + 32, 0x3000);
        put64(&mut f, 64 + 40, 0x3000);
        let sections = [(".eh_frame", 1u32, 0x10_0000u64, 0x3000u64, claim), (".eh_frame_hdr", 1, 0x10_0000 + claim, 0x3000 + claim, claim), (".debug_frame", 1, 0, 0x3000 + 2 * claim, claim), (".shstrtab", 3, 0, 0x2000, shstr.len() as u64)];
        for (i, (n, kind, addr, offset, size)) in sections.into_iter().enumerate() {
            let h = 0x1000 + 64 * (i + 1);
            put32(&mut f, h, name_at(n));
            put32(&mut f, h + 4, kind);
            put64(&mut f, h + 16, addr);
            put64(&mut f, h + 24, offset);
            put64(&mut f, h + 32, size);
        }
        f[0x2000..0x2000 + shstr.len()].copy_from_slice(shstr);
        f.extend_from_slice(eh);
        let total = 0x3000 + 3 * claim;
        if !sparse {
            f.resize(total as usize, 0);
        }
        std::fs::write(&path, &f).unwrap();
        let file = File::open(&path).unwrap();
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(total).unwrap();
        (path, file)
    }

    fn libc() -> Option<File> {
        File::open("/lib/x86_64-linux-gnu/libc.so.6").ok()
    }

    /// Check that sections a sparse file only claims (765 MiB over holes)
    /// are refused or read as nothing: no CFI, no header, no DWARF, and
    /// the section reader refuses them, without reading the holes.
    #[test]
    fn claims_over_holes_cost_nothing() {
        let claim = 255 << 20;
        let (path, file) = claiming_file("sparse", claim, &[], true);
        if file.metadata().unwrap().blocks() * 512 > 1 << 20 {
            eprintln!("SKIPPED: this file system does not keep holes");
            return;
        }
        let elf = ElfReader::new(&file, ElfLimits::default());
        let cfi = elf.cfi(".eh_frame").unwrap().unwrap();
        assert_eq!((cfi.bytes.len(), cfi.fdes), (0, 0), "a hole holds no CFI");
        assert!(cfi.bytes.capacity() == 0);
        assert!(elf.eh_frame_hdr(0).is_none());
        assert_eq!(elf.cfi(".debug_frame").unwrap().unwrap().bytes.len(), 0);
        let err = elf.section_data(".eh_frame").unwrap_err();
        assert!(err.contains("hole"), "{err}");
        std::fs::remove_file(path).unwrap();
    }

    /// Check that written zeros (a file system without holes, or a file
    /// written out) claim nothing either: the first entry's zero length
    /// ends the CFI, one read of 64 KiB.
    #[test]
    fn zeros_end_the_cfi_at_once() {
        let (path, file) = claiming_file("zeros", 1 << 20, &[], false);
        let elf = ElfReader::new(&file, ElfLimits::default());
        let cfi = elf.cfi(".eh_frame").unwrap().unwrap();
        assert_eq!((cfi.bytes.len(), cfi.fdes), (0, 0));
        std::fs::remove_file(path).unwrap();
    }

    /// Check the CFI budget and the entry cap: an entry claiming 2 MiB (more
    /// than any real one) ends what is read before it, and a real CIE
    /// before it is kept; a 64-MiB budget cuts a longer run of entries.
    #[test]
    fn long_entries_and_budget_end_the_read() {
        // A minimal CIE (length 12: id 0, version 1, "", code 1, data -8, ra 16, padding).
        let cie = [12u8, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0x78, 16, 0, 0, 0];
        let mut eh = cie.to_vec();
        eh.extend((2u32 << 20).to_le_bytes());
        let (path, file) = claiming_file("long", 3 << 20, &eh, false);
        let elf = ElfReader::new(&file, ElfLimits::default());
        let cfi = elf.cfi(".eh_frame").unwrap().unwrap();
        assert_eq!(cfi.bytes, cie, "the CIE, then nothing of the long entry");
        let small = ElfReader::new(&file, ElfLimits { max_cfi_bytes: 8, ..ElfLimits::default() });
        assert_eq!(small.cfi(".eh_frame").unwrap().unwrap().bytes.len(), 0, "a CIE past the budget is not read");
        std::fs::remove_file(path).unwrap();
    }

    /// Check that libc's CFI read entry by entry is its whole `.eh_frame`
    /// (up to the terminator) and its `.eh_frame_hdr` its whole table, as
    /// the section headers give them.
    #[test]
    fn real_cfi_is_read_whole() {
        let Some(file) = libc() else {
            eprintln!("SKIPPED: no /lib/x86_64-linux-gnu/libc.so.6 to read");
            return;
        };
        let elf = ElfReader::new(&file, ElfLimits::default());
        let (_, whole) = elf.section_data(".eh_frame").unwrap().unwrap();
        let cfi = elf.cfi(".eh_frame").unwrap().unwrap();
        assert!(cfi.fdes > 1000, "{} FDEs", cfi.fdes);
        assert!(whole.len() - cfi.bytes.len() <= 4, "all but the terminator: {} of {}", cfi.bytes.len(), whole.len());
        assert_eq!(cfi.bytes[..], whole[..cfi.bytes.len()]);
        let (_, hdr) = elf.section_data(".eh_frame_hdr").unwrap().unwrap();
        let (info, bounded) = elf.eh_frame_hdr(cfi.fdes).unwrap();
        assert_eq!((bounded, info.size), (hdr.clone(), hdr.len() as u64));
        assert!(elf.eh_frame_hdr(cfi.fdes - 1).is_none(), "a header indexing more FDEs than there are is not read");
    }

    /// Check the conversions between file offsets and addresses, and that
    /// an offset in no segment has no address.
    #[test]
    fn converts_offsets_and_addresses() {
        let segs = [
            Segment { vaddr: 0, offset: 0, filesz: 0x628, executable: false },
            Segment { vaddr: 0x1000, offset: 0x1000, filesz: 0x1d5, executable: true },
            Segment { vaddr: 0x3df0, offset: 0x2df0, filesz: 0x220, executable: false },
        ];
        assert_eq!(offset_to_vaddr(&segs, 0x1010), Some(0x1010));
        assert_eq!(offset_to_vaddr(&segs, 0x2e00), Some(0x3e00));
        assert_eq!(offset_to_vaddr(&segs, 0x1800), None);
        assert_eq!(vaddr_to_offset(&segs, 0x3e00), Some(0x2e00));
    }


    /// Check that the build id note is found after another note, and that a
    /// truncated note section gives None instead of a panic.
    #[test]
    fn finds_gnu_build_id_in_notes() {
        let mut n = Vec::new();
        let note = |n: &mut Vec<u8>, name: &[u8], kind: u32, desc: &[u8]| {
            n.extend((name.len() as u32).to_ne_bytes());
            n.extend((desc.len() as u32).to_ne_bytes());
            n.extend(kind.to_ne_bytes());
            n.extend(name);
            n.resize(n.len().next_multiple_of(4), 0);
            n.extend(desc);
            n.resize(n.len().next_multiple_of(4), 0);
        };
        note(&mut n, b"Xen\0", 5, &[1, 2, 3]);
        note(&mut n, b"GNU\0", 3, &[0xab; 20]);
        assert_eq!(gnu_build_id_from_notes(&n), Some(vec![0xab; 20]));
        for cut in 0..n.len() {
            let _ = gnu_build_id_from_notes(&n[..cut]);
        }
        assert_eq!(gnu_build_id_from_notes(&n[..n.len() - 4]), None);
    }
}
