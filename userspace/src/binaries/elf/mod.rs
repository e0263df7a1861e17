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
//!
//! This file holds the reader, its limits and errors, the headers, bounded
//! section reads and the DWARF check; the CFI is read in `cfi.rs`, names in
//! `symbols.rs`, the build id and debug link in `notes.rs`.

mod cfi;
mod notes;
mod symbols;

pub use cfi::Cfi;
pub use notes::gnu_build_id_from_notes;
pub use symbols::NameTables;

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use object::elf;
use object::read::elf::{
    CompressionHeader, FileHeader, ProgramHeader, SectionHeader, SectionTable,
};
use object::read::ReadCache;
use object::Endianness;

type Elf64 = elf::FileHeader64<Endianness>;

/// Why a file, or one of its sections, could not be read. Each message
/// names the section and the claim that was refused.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    /// The ELF header is not one of a 64-bit file.
    #[error("not a 64-bit ELF file: {0}")]
    NotElf(#[source] object::read::Error),
    /// Its byte order is not one there is.
    #[error("{0}")]
    Endian(#[source] object::read::Error),
    /// The section header table is damaged.
    #[error("bad section headers: {0}")]
    SectionHeaders(#[source] object::read::Error),
    /// The program header table is damaged.
    #[error("bad program headers: {0}")]
    ProgramHeaders(#[source] object::read::Error),
    /// A section found by name a moment ago is not found again.
    #[error("section vanished")]
    SectionVanished,
    /// A compressed section whose header or bytes do not inflate.
    #[error("{name}: its compressed bytes do not inflate")]
    BadCompression {
        /// The section.
        name: String,
    },
    /// A section to read as it is is compressed.
    #[error("{name} is compressed")]
    Compressed {
        /// The section.
        name: String,
    },
    /// Its bytes could not be read.
    #[error("cannot read {name}: {source}")]
    Read {
        /// The section.
        name: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// It claims bytes past the file's end.
    #[error("{name} claims {size} bytes at offset {offset}, past the end of the file")]
    PastEnd {
        /// The section.
        name: String,
        /// Its claimed size.
        size: u64,
        /// Its claimed offset.
        offset: u64,
    },
    /// Larger than what one section may cost.
    #[error("{name} is {} MiB, more than the {} MiB allowed", .size >> 20, .limit >> 20)]
    TooLarge {
        /// The section.
        name: String,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// It lies over a hole of a sparse file: bytes only claimed.
    #[error("{name} claims {size} bytes at offset {offset} that the file does not hold (a hole in a sparse file)")]
    OverHole {
        /// The section.
        name: String,
        /// Its claimed size.
        size: u64,
        /// Its claimed offset.
        offset: u64,
    },
    /// It has no `.eh_frame` (to find functions in).
    #[error("no .eh_frame")]
    NoEhFrame,
    /// Its `.eh_frame` is damaged before the first FDE.
    #[error(".eh_frame: {0}")]
    EhFrame(#[source] gimli::Error),
}

impl ElfError {
    /// The OS error's kind when reading failed, [`std::io::ErrorKind::InvalidData`]
    /// for what the file says.
    pub fn kind(&self) -> std::io::ErrorKind {
        match self {
            ElfError::Read { source, .. } => source.kind(),
            _ => std::io::ErrorKind::InvalidData,
        }
    }
}

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
    /// Whether DWARF is read for names at all (inlined functions, source
    /// lines); without it names come from the symbol tables only.
    pub dwarf: bool,
}

impl Default for ElfLimits {
    fn default() -> Self {
        ElfLimits {
            max_section_bytes: 256 << 20,
            max_cfi_bytes: 64 << 20,
            max_dwarf_section_bytes: 512 << 20,
            max_dwarf_total_bytes: 1 << 30,
            max_name_len: 1024,
            dwarf: true,
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
#[derive(Debug)]
pub enum DwarfCheck {
    /// It has none.
    Absent,
    /// Present and within limits.
    Usable,
    /// Present but refused, and why (sizes beyond the limits, damage).
    Refused(DwarfRefused),
}

/// Why a file's DWARF is not handed to the symbolizer.
#[derive(Debug, thiserror::Error)]
pub enum DwarfRefused {
    /// Its headers could not be read.
    #[error(transparent)]
    Headers(ElfError),
    /// `.zdebug_*` sections, which the symbolizer would inflate unchecked.
    #[error("old-style .zdebug compression")]
    Zdebug,
    /// A section claims bytes past the file's end.
    #[error("{name} lies past the end of the file")]
    PastEnd {
        /// The section.
        name: String,
    },
    /// A section lies over a hole of a sparse file.
    #[error("{name} lies over a hole of a sparse file (bytes it only claims)")]
    OverHole {
        /// The section.
        name: String,
    },
    /// A compressed section's header is damaged.
    #[error("{name}: {source}")]
    Compression {
        /// The section.
        name: String,
        /// What object found.
        source: object::read::Error,
    },
    /// A section inflates past the per-section limit.
    #[error("{name} is {} MiB decompressed, more than the {} MiB allowed", .size >> 20, .limit >> 20)]
    SectionTooLarge {
        /// The section.
        name: String,
        /// Its decompressed size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// All of them together exceed the total limit.
    #[error("its DWARF is {} MiB, more than the {} MiB allowed", .size >> 20, .limit >> 20)]
    TotalTooLarge {
        /// Their decompressed total.
        size: u64,
        /// The limit.
        limit: u64,
    },
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
    /// The section names' table (`.shstrtab`), read whole the first time a
    /// section is looked up by name; None when it cannot be (then object's
    /// lookup reads each name through the cache). Through the cache each
    /// name was a `pread` of its own: ~30 a file, most of the agent's
    /// system calls as a compiler loop starts new processes.
    section_names: std::cell::OnceCell<Option<Vec<u8>>>,
}

/// A section names' table larger than this is not read whole (linkers
/// write a few hundred bytes; a file of 65,535 sections with long names
/// would need ~2 MiB).
const MAX_SECTION_NAMES_BYTES: u64 = 4 << 20;

/// A range of a file read as a stream (`pread`s, no seek shared with others).
struct FileRange<'f> {
    file: &'f File,
    at: u64,
    end: u64,
}

impl std::io::Read for FileRange<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let want = (buf.len() as u64).min(self.end.saturating_sub(self.at)) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// The parsed headers, borrowed from the reader's cache.
struct Headers<'d, 'f> {
    header: &'d Elf64,
    endian: Endianness,
    sections: SectionTable<'d, Elf64, &'d ReadCache<At<'f>>>,
}

impl<'f> ElfReader<'f> {
    /// Read from `file` with `limits`.
    pub fn new(file: &'f File, limits: ElfLimits) -> ElfReader<'f> {
        // fstat: the file's real length, against which every claim is checked.
        let file_len = file.metadata().map(|m| m.len()).unwrap_or(0);
        ElfReader {
            file,
            data: ReadCache::new(At {
                file,
                pos: 0,
                len: file_len,
            }),
            file_len,
            limits,
            section_names: std::cell::OnceCell::new(),
        }
    }

    /// The bytes of the section names' table, read once (see the field).
    fn section_names(&self, h: &Headers<'_, 'f>) -> Option<&[u8]> {
        self.section_names
            .get_or_init(|| {
                let index = h.header.shstrndx(h.endian, &self.data).ok()?;
                let table = h
                    .sections
                    .section(object::SectionIndex(index as usize))
                    .ok()?;
                let (offset, size) = (table.sh_offset(h.endian), table.sh_size(h.endian));
                self.check_range(".shstrtab", offset, size, MAX_SECTION_NAMES_BYTES)
                    .ok()?;
                self.read_exact(".shstrtab", offset, size).ok()
            })
            .as_deref()
    }

    /// The name of section `s`, from the names' table read whole when it
    /// could be, else through object (and the cache).
    fn section_name<'d>(
        &'d self,
        h: &Headers<'d, 'f>,
        s: &'d elf::SectionHeader64<Endianness>,
    ) -> Option<&'d [u8]> {
        match self.section_names(h) {
            Some(names) => {
                let from = names.get(s.sh_name(h.endian) as usize..)?;
                Some(&from[..from.iter().position(|&b| b == 0)?])
            }
            None => h.sections.section_name(h.endian, s).ok(),
        }
    }

    /// The header of the first section named `name`.
    fn section_header<'d>(
        &'d self,
        h: &Headers<'d, 'f>,
        name: &str,
    ) -> Option<&'d elf::SectionHeader64<Endianness>> {
        h.sections
            .iter()
            .find(|s| self.section_name(h, s) == Some(name.as_bytes()))
    }

    fn headers(&self) -> Result<Headers<'_, 'f>, ElfError> {
        let data = &self.data;
        let header = Elf64::parse(data).map_err(ElfError::NotElf)?;
        let endian = header.endian().map_err(ElfError::Endian)?;
        let sections = header
            .sections(endian, data)
            .map_err(ElfError::SectionHeaders)?;
        Ok(Headers {
            header,
            endian,
            sections,
        })
    }

    /// The entry point (e_entry).
    pub fn entry(&self) -> Result<u64, ElfError> {
        let h = self.headers()?;
        Ok(h.header.e_entry.get(h.endian))
    }

    /// The loadable segments.
    pub fn segments(&self) -> Result<Vec<Segment>, ElfError> {
        let data = &self.data;
        let header = Elf64::parse(data).map_err(ElfError::NotElf)?;
        let endian = header.endian().map_err(ElfError::Endian)?;
        let phdrs = header
            .program_headers(endian, data)
            .map_err(ElfError::ProgramHeaders)?;
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

    /// The thread-local storage segment (PT_TLS), if the file has one:
    /// (its size in memory, its alignment).
    pub fn tls_segment(&self) -> Result<Option<(u64, u64)>, ElfError> {
        let data = &self.data;
        let header = Elf64::parse(data).map_err(ElfError::NotElf)?;
        let endian = header.endian().map_err(ElfError::Endian)?;
        let phdrs = header
            .program_headers(endian, data)
            .map_err(ElfError::ProgramHeaders)?;
        Ok(phdrs
            .iter()
            .find(|p| p.p_type(endian) == elf::PT_TLS)
            .map(|p| (p.p_memsz(endian), p.p_align(endian))))
    }

    /// The bytes of section `name`, inflated where it is compressed
    /// (SHF_COMPRESSED, zlib or zstd), within the file, the section limit
    /// and `limit` for the inflated bytes (a header claiming more is
    /// refused before anything is inflated).
    pub fn section_data_inflated(
        &self,
        name: &str,
        limit: u64,
    ) -> Result<Option<Vec<u8>>, ElfError> {
        let Some(info) = self.section(name) else {
            return Ok(None);
        };
        if !info.compressed {
            if info.size > limit {
                return Err(ElfError::TooLarge {
                    name: name.to_string(),
                    size: info.size,
                    limit,
                });
            }
            return Ok(self.section_data(name)?.map(|(_, bytes)| bytes));
        }
        self.check_range(name, info.offset, info.size, self.limits.max_section_bytes)?;
        let raw = self.read_exact(name, info.offset, info.size)?;
        let bad = || ElfError::BadCompression {
            name: name.to_string(),
        };
        // Elf64_Chdr: ch_type, ch_reserved, ch_size, ch_addralign.
        let word = |at: usize| {
            raw.get(at..at + 8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
        };
        let (kind, size) = (word(0).ok_or_else(bad)? as u32, word(8).ok_or_else(bad)?);
        let format = match object::elf::CompressionType(kind) {
            elf::ELFCOMPRESS_ZLIB => object::CompressionFormat::Zlib,
            elf::ELFCOMPRESS_ZSTD => object::CompressionFormat::Zstandard,
            _ => return Err(bad()),
        };
        if size > limit {
            return Err(ElfError::TooLarge {
                name: name.to_string(),
                size,
                limit,
            });
        }
        let compressed = object::CompressedData {
            format,
            data: &raw[24..],
            uncompressed_size: size,
        };
        compressed
            .decompress()
            .map(|c| Some(c.into_owned()))
            .map_err(|_| bad())
    }

    /// The bytes of section `name` as a stream, inflated as they are read
    /// where the section is compressed (zlib or zstd): for a reader that may
    /// stop early (a large section not held whole). None when the file has
    /// no such section or it holds no bytes (NOBITS); the section must lie
    /// within the file.
    pub fn section_stream(
        &self,
        name: &str,
    ) -> Result<Option<Box<dyn std::io::Read + 'f>>, ElfError> {
        let Some(info) = self.section(name) else {
            return Ok(None);
        };
        let h = self.headers()?;
        let s = self
            .section_header(&h, name)
            .ok_or(ElfError::SectionVanished)?;
        if s.sh_type(h.endian) == elf::SHT_NOBITS {
            return Ok(None);
        }
        self.check_range(name, info.offset, info.size, u64::MAX)?;
        let range = |from: u64| FileRange {
            file: self.file,
            at: from,
            end: info.offset + info.size,
        };
        if !info.compressed {
            return Ok(Some(Box::new(range(info.offset))));
        }
        let bad = || ElfError::BadCompression {
            name: name.to_string(),
        };
        let head = self.read_exact(name, info.offset, 24.min(info.size))?;
        let kind = head
            .get(..4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()));
        let body = range(info.offset + 24.min(info.size));
        match kind.map(object::elf::CompressionType) {
            Some(elf::ELFCOMPRESS_ZLIB) => Ok(Some(Box::new(flate2::read::ZlibDecoder::new(body)))),
            Some(elf::ELFCOMPRESS_ZSTD) => zstd::stream::read::Decoder::new(body)
                .map(|d| Some(Box::new(d) as Box<dyn std::io::Read>))
                .map_err(|_| bad()),
            _ => Err(bad()),
        }
    }

    /// Where the section named `name` is, if the file has it.
    pub fn section(&self, name: &str) -> Option<SectionInfo> {
        let h = self.headers().ok()?;
        let s = self.section_header(&h, name)?;
        Some(SectionInfo {
            addr: s.sh_addr(h.endian),
            offset: s.sh_offset(h.endian),
            size: s.sh_size(h.endian),
            compressed: s.sh_flags(h.endian).0 & elf::SHF_COMPRESSED.0 != 0,
        })
    }

    /// The bytes of an uncompressed section, within the file and the limit.
    pub fn section_data(&self, name: &str) -> Result<Option<(SectionInfo, Vec<u8>)>, ElfError> {
        let Some(info) = self.stored_section(name)? else {
            return Ok(None);
        };
        self.check_range(name, info.offset, info.size, self.limits.max_section_bytes)?;
        // Straight into its buffer, once (through the cache it would be held twice).
        Ok(Some((info, self.read_exact(name, info.offset, info.size)?)))
    }

    /// Where section `name` lies when it has bytes of its own in the file
    /// (not NOBITS) that can be read as they are (not compressed).
    fn stored_section(&self, name: &str) -> Result<Option<SectionInfo>, ElfError> {
        let Some(info) = self.section(name) else {
            return Ok(None);
        };
        let h = self.headers()?;
        let s = self
            .section_header(&h, name)
            .ok_or(ElfError::SectionVanished)?;
        if s.sh_type(h.endian) == elf::SHT_NOBITS {
            return Ok(None);
        }
        if info.compressed {
            return Err(ElfError::Compressed {
                name: name.to_string(),
            });
        }
        Ok(Some(info))
    }

    /// `size` bytes of the file at `offset` (within the section limit, in
    /// the file, over no hole), for a value a symbol points at.
    pub fn read_checked(&self, what: &str, offset: u64, size: u64) -> Result<Vec<u8>, ElfError> {
        self.check_range(what, offset, size, self.limits.max_section_bytes)?;
        self.read_exact(what, offset, size)
    }

    fn read_exact(&self, name: &str, offset: u64, size: u64) -> Result<Vec<u8>, ElfError> {
        let mut bytes = vec![0u8; size as usize];
        self.file
            .read_exact_at(&mut bytes, offset)
            .map_err(|source| ElfError::Read {
                name: name.to_string(),
                source,
            })?;
        Ok(bytes)
    }

    /// Whether `size` bytes at `offset` are all in the file, within `limit`
    /// and not over a hole (bytes the file only claims: a sparse file's
    /// holes read as zeros but cost it nothing on disk, and no linker
    /// leaves a hole inside a section we read).
    fn check_range(&self, name: &str, offset: u64, size: u64, limit: u64) -> Result<(), ElfError> {
        if offset
            .checked_add(size)
            .is_none_or(|end| end > self.file_len)
        {
            return Err(ElfError::PastEnd {
                name: name.to_string(),
                size,
                offset,
            });
        }
        if size > limit {
            return Err(ElfError::TooLarge {
                name: name.to_string(),
                size,
                limit,
            });
        }
        if size > 0 && self.hole_at(offset) < offset + size {
            return Err(ElfError::OverHole {
                name: name.to_string(),
                size,
                offset,
            });
        }
        Ok(())
    }

    /// Where the first hole at or after `offset` begins: the file's end
    /// when it has none there (or its file system cannot say).
    fn hole_at(&self, offset: u64) -> u64 {
        let Ok(at) = libc::off_t::try_from(offset) else {
            return self.file_len;
        };
        // SAFETY: lseek on a descriptor we hold; it moves only the file's
        // offset, which no read here uses (they are positional).
        let hole = unsafe { libc::lseek(self.file.as_raw_fd(), at, libc::SEEK_HOLE) };
        u64::try_from(hole).unwrap_or(self.file_len)
    }

    /// Whether its DWARF may be read by the symbolizer: every `.debug_*`
    /// section lies inside the file and, decompressed, within the limits.
    pub fn dwarf_check(&self) -> DwarfCheck {
        let h = match self.headers() {
            Ok(h) => h,
            Err(e) => return DwarfCheck::Refused(DwarfRefused::Headers(e)),
        };
        let mut any = false;
        let mut total = 0u64;
        for s in h.sections.iter() {
            let Some(name) = self.section_name(&h, s) else {
                continue;
            };
            if name.starts_with(b".zdebug_") {
                return DwarfCheck::Refused(DwarfRefused::Zdebug);
            }
            if !name.starts_with(b".debug_") || s.sh_type(h.endian) == elf::SHT_NOBITS {
                continue;
            }
            any = true;
            let name = String::from_utf8_lossy(name);
            let (offset, size) = (s.sh_offset(h.endian), s.sh_size(h.endian));
            if offset
                .checked_add(size)
                .is_none_or(|end| end > self.file_len)
            {
                return DwarfCheck::Refused(DwarfRefused::PastEnd {
                    name: name.into_owned(),
                });
            }
            if size > 0 && self.hole_at(offset) < offset + size {
                return DwarfCheck::Refused(DwarfRefused::OverHole {
                    name: name.into_owned(),
                });
            }
            let full = match s.compression(h.endian, &self.data) {
                Ok(Some((ch, _, _))) => ch.ch_size(h.endian),
                Ok(None) => size,
                Err(source) => {
                    return DwarfCheck::Refused(DwarfRefused::Compression {
                        name: name.into_owned(),
                        source,
                    })
                }
            };
            if full > self.limits.max_dwarf_section_bytes {
                return DwarfCheck::Refused(DwarfRefused::SectionTooLarge {
                    name: name.into_owned(),
                    size: full,
                    limit: self.limits.max_dwarf_section_bytes,
                });
            }
            total = total.saturating_add(full);
        }
        if total > self.limits.max_dwarf_total_bytes {
            return DwarfCheck::Refused(DwarfRefused::TotalTooLarge {
                size: total,
                limit: self.limits.max_dwarf_total_bytes,
            });
        }
        if any {
            DwarfCheck::Usable
        } else {
            DwarfCheck::Absent
        }
    }
}

/// File offset -> address in the file's address space, through the load
/// segment that holds it.
pub fn offset_to_vaddr(segments: &[Segment], offset: u64) -> Option<u64> {
    segments
        .iter()
        .find(|s| offset >= s.offset && offset - s.offset < s.filesz)
        .map(|s| offset - s.offset + s.vaddr)
}

/// Address in the file's address space -> file offset.
pub fn vaddr_to_offset(segments: &[Segment], vaddr: u64) -> Option<u64> {
    segments
        .iter()
        .find(|s| vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz)
        .map(|s| vaddr - s.vaddr + s.offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check the conversions between file offsets and addresses, and that
    /// an offset in no segment has no address.
    #[test]
    fn converts_offsets_and_addresses() {
        let segs = [
            Segment {
                vaddr: 0,
                offset: 0,
                filesz: 0x628,
                executable: false,
            },
            Segment {
                vaddr: 0x1000,
                offset: 0x1000,
                filesz: 0x1d5,
                executable: true,
            },
            Segment {
                vaddr: 0x3df0,
                offset: 0x2df0,
                filesz: 0x220,
                executable: false,
            },
        ];
        assert_eq!(offset_to_vaddr(&segs, 0x1010), Some(0x1010));
        assert_eq!(offset_to_vaddr(&segs, 0x2e00), Some(0x3e00));
        assert_eq!(offset_to_vaddr(&segs, 0x1800), None);
        assert_eq!(vaddr_to_offset(&segs, 0x3e00), Some(0x2e00));
    }

    /// Check, on this machine's libc and this test's own binary, that every
    /// section is found by name where object's own lookup finds it, from
    /// the names' table read once; and that a file whose names' table lies
    /// past its end falls back to object's lookup (which finds nothing).
    #[test]
    fn sections_are_found_by_name_from_the_table_read_once() {
        let exe = std::env::current_exe().unwrap();
        for path in [
            std::path::Path::new("/lib/x86_64-linux-gnu/libc.so.6"),
            &exe,
        ] {
            let Ok(file) = File::open(path) else {
                eprintln!("SKIPPED {}: not on this machine", path.display());
                continue;
            };
            let reader = ElfReader::new(&file, ElfLimits::default());
            let h = reader.headers().unwrap();
            let mut names = 0;
            for s in h.sections.iter() {
                let name = h.sections.section_name(h.endian, s).unwrap();
                if name.is_empty() {
                    continue;
                }
                let name = std::str::from_utf8(name).unwrap();
                let (_, theirs) = h
                    .sections
                    .section_by_name(h.endian, name.as_bytes())
                    .unwrap();
                let ours = reader.section(name).unwrap();
                assert_eq!(ours.offset, theirs.sh_offset(h.endian), "{name}");
                assert_eq!(ours.size, theirs.sh_size(h.endian), "{name}");
                names += 1;
            }
            assert!(names > 10, "{}: {names} sections", path.display());
            assert!(
                matches!(reader.section_names.get(), Some(Some(_))),
                "the table was read whole"
            );
            assert!(reader.section(".no-such-section").is_none());
        }
        // libc's first 64 bytes (its ELF header) with e_shoff and e_shstrndx
        // pointing past the end: no table, no section, no panic.
        let Ok(libc) = std::fs::read("/lib/x86_64-linux-gnu/libc.so.6") else {
            return;
        };
        let mut bytes = libc[..64].to_vec();
        bytes[0x28..0x30].copy_from_slice(&(1u64 << 40).to_le_bytes());
        let damaged = std::env::temp_dir().join(format!("sysprof-shstrtab-{}", std::process::id()));
        std::fs::write(&damaged, &bytes).unwrap();
        let file = File::open(&damaged).unwrap();
        let reader = ElfReader::new(&file, ElfLimits::default());
        assert!(reader.section(".text").is_none());
        std::fs::remove_file(&damaged).unwrap();
    }
}
