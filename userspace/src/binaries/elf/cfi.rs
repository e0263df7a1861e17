//! CFI read within bounds: `.eh_frame` and `.debug_frame` entry by entry,
//! `.eh_frame_hdr` as far as the FDEs it indexes, and the functions the
//! FDEs describe.
//!
//! In: an [`ElfReader`] (its file, the file's real length, the CFI budget).
//! Out: a [`Cfi`] of whole entries and their FDE count, the header's table,
//! or the (start, end) of each function `.eh_frame` describes. Each
//! entry's length says where the next begins, so what is read stops at the
//! terminator, the section's end, the budget, a hole or an entry longer
//! than any real one, whatever the section header claims.

use std::os::unix::fs::FileExt;

use super::{ElfError, ElfReader, SectionInfo};

/// CFI entries longer than this end what is read of a section: the longest
/// in the system's libraries and Rust's compiler is 33 KiB (an FDE of
/// librustc_driver), and a longer one is a claim, not code.
const MAX_CFI_ENTRY_BYTES: u64 = 1 << 20;

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

impl ElfReader<'_> {
    /// The CFI of `.eh_frame` or `.debug_frame`: read as far as its entries
    /// go (each entry's length says where the next begins; a zero length
    /// ends `.eh_frame`), never past the section, the CFI budget, an entry
    /// longer than any real one, or a hole. A section of zeros costs one
    /// small read, whatever its header claims.
    pub fn cfi(&self, name: &str) -> Result<Option<Cfi>, ElfError> {
        let Some(info) = self.stored_section(name)? else {
            return Ok(None);
        };
        if info
            .offset
            .checked_add(info.size)
            .is_none_or(|end| end > self.file_len)
        {
            return Err(ElfError::PastEnd {
                name: name.to_string(),
                size: info.size,
                offset: info.offset,
            });
        }
        let is_eh_frame = name == ".eh_frame";
        // What can be read: the section up to the budget and the first hole.
        let readable = info
            .size
            .min(self.limits.max_cfi_bytes)
            .min(self.hole_at(info.offset).saturating_sub(info.offset));
        // Reserved at once, not grown by doubling (each step copied what was
        // read and held both: 12 MB for librustc_driver's 6.3). A reservation
        // this large is mapped, not touched, so a section that claims more
        // than it holds costs only the pages read.
        let mut bytes: Vec<u8> = Vec::with_capacity(readable as usize);
        let (mut at, mut fdes) = (0u64, 0usize);
        // Make bytes[..want] present (false: the section cannot give them).
        let fill = |bytes: &mut Vec<u8>, want: u64| -> Result<bool, ElfError> {
            if want > readable {
                return Ok(false);
            }
            if want as usize > bytes.len() {
                // Read ahead in growing steps (a syscall per entry would be
                // slow), never past what can be read.
                let to = want
                    .max((bytes.len() as u64 * 2).max(64 << 10))
                    .min(readable) as usize;
                let from = bytes.len();
                bytes.resize(to, 0);
                self.file
                    .read_exact_at(&mut bytes[from..], info.offset + from as u64)
                    .map_err(|source| ElfError::Read {
                        name: name.to_string(),
                        source,
                    })?;
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
                (
                    12,
                    u64::from_le_bytes(bytes[i + 4..i + 12].try_into().expect("8 bytes")),
                )
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
            let cie = if is_eh_frame {
                id == 0
            } else {
                id == u32::MAX as u64 || id == u64::MAX
            };
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
        if info.compressed
            || info.size < 12
            || self
                .check_range(".eh_frame_hdr", info.offset, 12, 12)
                .is_err()
        {
            return None;
        }
        let head = self.read_exact(".eh_frame_hdr", info.offset, 12).ok()?;
        // version 1; eh_frame_ptr: pcrel sdata4; fde_count: udata4; table: datarel sdata4.
        if head[..4] != [1, 0x1b, 0x03, 0x3b] {
            return None;
        }
        let count = u32::from_le_bytes(head[8..12].try_into().ok()?) as u64;
        let size = 12 + count * 8;
        if count as usize > fdes
            || size > info.size
            || self
                .check_range(
                    ".eh_frame_hdr",
                    info.offset,
                    size,
                    self.limits.max_cfi_bytes,
                )
                .is_err()
        {
            return None;
        }
        let bytes = self.read_exact(".eh_frame_hdr", info.offset, size).ok()?;
        Some((SectionInfo { size, ..info }, bytes))
    }

    /// Start and end addresses of the functions `.eh_frame` describes (one
    /// FDE per function), sorted.
    pub fn fde_ranges(&self) -> Result<Vec<(u64, u64)>, ElfError> {
        use gimli::UnwindSection;
        let Cfi { info, bytes, .. } = self.cfi(".eh_frame")?.ok_or(ElfError::NoEhFrame)?;
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
                            out.push((
                                fde.initial_address(),
                                fde.initial_address().saturating_add(fde.len()),
                            ));
                        }
                    }
                }
                Ok(Some(gimli::CieOrFde::Cie(_))) => {}
                Ok(None) => break,
                Err(e) => {
                    if out.is_empty() {
                        return Err(ElfError::EhFrame(e));
                    }
                    break;
                }
            }
        }
        out.sort_unstable();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binaries::elf::{DwarfCheck, DwarfRefused, ElfLimits};
    use std::fs::File;
    use std::os::unix::fs::MetadataExt;

    /// A file with ELF headers whose `.eh_frame`, `.eh_frame_hdr` and
    /// `.debug_frame` each claim `claim` bytes, with `eh` written at the
    /// start of `.eh_frame` and the rest left a hole (sparse) or written
    /// as zeros.
    fn claiming_file(
        name: &str,
        claim: u64,
        eh: &[u8],
        sparse: bool,
    ) -> (std::path::PathBuf, File) {
        let path =
            std::env::temp_dir().join(format!("sysprof-elf-test-{}-{name}", std::process::id()));
        let shstr = b"\0.eh_frame\0.eh_frame_hdr\0.debug_frame\0.shstrtab\0";
        let name_at = |n: &str| {
            shstr
                .windows(n.len() + 1)
                .position(|w| &w[..n.len()] == n.as_bytes() && w[n.len()] == 0)
                .unwrap() as u32
        };
        let mut f = vec![0u8; 0x3000];
        f[..8].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
        let put16 =
            |f: &mut [u8], at: usize, v: u16| f[at..at + 2].copy_from_slice(&v.to_le_bytes());
        let put32 =
            |f: &mut [u8], at: usize, v: u32| f[at..at + 4].copy_from_slice(&v.to_le_bytes());
        let put64 =
            |f: &mut [u8], at: usize, v: u64| f[at..at + 8].copy_from_slice(&v.to_le_bytes());
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
        let sections = [
            (".eh_frame", 1u32, 0x10_0000u64, 0x3000u64, claim),
            (".eh_frame_hdr", 1, 0x10_0000 + claim, 0x3000 + claim, claim),
            (".debug_frame", 1, 0, 0x3000 + 2 * claim, claim),
            (".shstrtab", 3, 0, 0x2000, shstr.len() as u64),
        ];
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
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(total)
            .unwrap();
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
        match elf.dwarf_check() {
            DwarfCheck::Refused(e @ DwarfRefused::OverHole { .. }) => {
                assert_eq!(
                    e.to_string(),
                    ".debug_frame lies over a hole of a sparse file (bytes it only claims)"
                )
            }
            other => panic!("DWARF over a hole was not refused: {other:?}"),
        }
        let err = elf.section_data(".eh_frame").unwrap_err();
        assert!(matches!(err, ElfError::OverHole { .. }), "{err}");
        assert!(
            err.to_string()
                .ends_with("that the file does not hold (a hole in a sparse file)"),
            "{err}"
        );
        std::fs::remove_file(path).unwrap();
    }

    /// Check that written zeros (a file system without holes, or a file
    /// written out) claim nothing either: the first entry's zero length
    /// ends the CFI, one read of 64 KiB; and that DWARF the file holds is
    /// usable within the limits and refused past them.
    #[test]
    fn zeros_end_the_cfi_at_once() {
        let (path, file) = claiming_file("zeros", 1 << 20, &[], false);
        let elf = ElfReader::new(&file, ElfLimits::default());
        let cfi = elf.cfi(".eh_frame").unwrap().unwrap();
        assert_eq!((cfi.bytes.len(), cfi.fdes), (0, 0));
        // Its 1-MiB .debug_frame is in the file: usable, unless the total allowed is less.
        assert!(matches!(elf.dwarf_check(), DwarfCheck::Usable));
        let strict = ElfReader::new(
            &file,
            ElfLimits {
                max_dwarf_total_bytes: 1,
                ..ElfLimits::default()
            },
        );
        match strict.dwarf_check() {
            DwarfCheck::Refused(e @ DwarfRefused::TotalTooLarge { .. }) => assert_eq!(
                e.to_string(),
                "its DWARF is 1 MiB, more than the 0 MiB allowed"
            ),
            other => panic!("DWARF past the total allowed was not refused: {other:?}"),
        }
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
        let small = ElfReader::new(
            &file,
            ElfLimits {
                max_cfi_bytes: 8,
                ..ElfLimits::default()
            },
        );
        assert_eq!(
            small.cfi(".eh_frame").unwrap().unwrap().bytes.len(),
            0,
            "a CIE past the budget is not read"
        );
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
        assert!(
            whole.len() - cfi.bytes.len() <= 4,
            "all but the terminator: {} of {}",
            cfi.bytes.len(),
            whole.len()
        );
        assert_eq!(cfi.bytes[..], whole[..cfi.bytes.len()]);
        let (_, hdr) = elf.section_data(".eh_frame_hdr").unwrap().unwrap();
        let (info, bounded) = elf.eh_frame_hdr(cfi.fdes).unwrap();
        assert_eq!((bounded, info.size), (hdr.clone(), hdr.len() as u64));
        assert!(
            elf.eh_frame_hdr(cfi.fdes - 1).is_none(),
            "a header indexing more FDEs than there are is not read"
        );
    }
}
