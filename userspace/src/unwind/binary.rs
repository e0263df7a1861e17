//! One binary's unwind data, read once and shared by every process that
//! maps it.
//!
//! In: a binary opened when it was mapped ([`Binaries`]). Out: its unwind
//! sections as framehop wants them ([`BinaryUnwindInfo`], within the byte
//! budgets), where its code lies in the file ([`Layout`], for the kernel's
//! process entries), and where its address 0 lands in a mapping of it
//! ([`base_avma`]). The sections are copied into memory, not mapped: any user
//! can truncate a binary while we profile it (see the module doc of
//! [`super`]).

use std::ops::{Deref, Range};
use std::sync::Arc;

use framehop::{ExplicitModuleSectionInfo, Module};
use rustc_hash::FxHashMap;

use crate::binaries::elf::{ElfLimits, ElfReader};
use crate::binaries::{Binaries, BinaryIndex};

/// Why a binary's unwind data could not be read (one line, after its path).
#[derive(Debug, thiserror::Error)]
pub enum UnwindInfoError {
    /// The binary was not opened when it was mapped: why, as said then.
    #[error("{0}")]
    NotOpen(String),
    /// Its ELF headers could not be read.
    #[error("{0}")]
    Elf(String),
}

impl UnwindInfoError {
    fn elf(e: impl std::fmt::Display) -> Self {
        UnwindInfoError::Elf(e.to_string())
    }
}

/// The binary's open file, or why there is none.
fn open_file(binaries: &Binaries, index: BinaryIndex) -> Result<&std::fs::File, UnwindInfoError> {
    let bin = binaries.get(index);
    bin.file.as_ref().ok_or_else(|| {
        UnwindInfoError::NotOpen(
            bin.open_error
                .clone()
                .unwrap_or_else(|| "not a file".into()),
        )
    })
}

/// A section's bytes, shared between the processes that map the binary
/// (in the `Vec` they were read into: no copy).
#[derive(Clone)]
pub struct SectionBytes(pub(super) Arc<Vec<u8>>);

impl Deref for SectionBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// What one binary contributes to unwinding.
pub(super) struct BinaryUnwindInfo {
    /// (svma range, bytes) of the sections framehop wants.
    pub(super) eh_frame: Option<(Range<u64>, SectionBytes)>,
    pub(super) eh_frame_hdr: Option<(Range<u64>, SectionBytes)>,
    pub(super) debug_frame: Option<SectionBytes>,
    got: Option<Range<u64>>,
    /// Executable PT_LOAD segments (all of them if none is marked so):
    /// (p_vaddr, p_offset, p_filesz).
    pub(super) segments: Vec<(u64, u64, u64)>,
    /// The ELF entry point (`_start`), as an address of the file.
    pub(super) entry: u64,
    /// Bytes of CFI held that count against [`MAX_HELD_USER_CFI_BYTES`].
    pub(super) held_user_bytes: usize,
}

/// Most bytes of CFI held, in all, from files root does not own: each file's
/// CFI is within its own budget ([`ElfLimits::max_cfi_bytes`]), and this
/// bounds what a user's many files can make us keep for hand-overs. Files
/// root owns (the system's programs and libraries) are not counted: no user
/// can make one. Past it a file's frames are walked by frame pointer.
pub(super) const MAX_HELD_USER_CFI_BYTES: usize = 256 << 20;

impl BinaryUnwindInfo {
    /// Read what unwinding needs, with the tolerant reader: a damaged
    /// symbol table or DWARF costs nothing here, and CFI is read only as far
    /// as its entries go, within the CFI budget (see [`ElfReader::cfi`]).
    /// `.eh_frame_hdr` is read as far as the FDEs it indexes, and
    /// `.debug_frame` only when `.eh_frame` has none (framehop, like the
    /// table compiler, then never looks at it).
    pub(super) fn read(
        binaries: &Binaries,
        index: BinaryIndex,
    ) -> Result<BinaryUnwindInfo, UnwindInfoError> {
        let elf = ElfReader::new(open_file(binaries, index)?, ElfLimits::default());
        let segments = code_segments(&elf)?;
        let eh_frame = elf.cfi(".eh_frame").ok().flatten().filter(|c| c.fdes > 0);
        let eh_frame_hdr = eh_frame.as_ref().and_then(|c| elf.eh_frame_hdr(c.fdes));
        // Compressed .debug_frame is left out (cfi refuses it).
        let debug_frame = match &eh_frame {
            Some(_) => None,
            None => elf
                .cfi(".debug_frame")
                .ok()
                .flatten()
                .filter(|c| c.fdes > 0)
                .map(|c| SectionBytes(Arc::new(c.bytes))),
        };
        // Without unwind tables the module still serves: framehop walks
        // its frames by frame pointer. A section's range is what was read
        // of it (framehop resolves addresses relative to its start).
        Ok(BinaryUnwindInfo {
            eh_frame: eh_frame.map(|c| {
                (
                    c.info.addr..c.info.addr + c.bytes.len() as u64,
                    SectionBytes(Arc::new(c.bytes)),
                )
            }),
            eh_frame_hdr: eh_frame_hdr.map(|(info, bytes)| {
                (
                    info.addr..info.addr + info.size,
                    SectionBytes(Arc::new(bytes)),
                )
            }),
            debug_frame,
            got: elf.section(".got").map(|s| s.addr..s.addr + s.size),
            segments,
            entry: elf.entry().map_err(UnwindInfoError::elf)?,
            held_user_bytes: 0,
        })
    }

    /// Bytes of CFI it holds.
    pub(super) fn cfi_bytes(&self) -> usize {
        self.eh_frame.as_ref().map_or(0, |e| e.1.len())
            + self.eh_frame_hdr.as_ref().map_or(0, |h| h.1.len())
            + self.debug_frame.as_ref().map_or(0, |d| d.len())
    }

    /// A framehop module for this binary mapped at `start..end` from file offset `pgoff`.
    pub(super) fn module(
        &self,
        name: &str,
        start: u64,
        end: u64,
        pgoff: u64,
    ) -> Option<Module<SectionBytes>> {
        let base_avma = base_avma(&self.segments, start, pgoff)?;
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: None,
            text: None,
            eh_frame_svma: self.eh_frame.as_ref().map(|t| t.0.clone()),
            eh_frame: self.eh_frame.as_ref().map(|t| t.1.clone()),
            eh_frame_hdr_svma: self.eh_frame_hdr.as_ref().map(|t| t.0.clone()),
            eh_frame_hdr: self.eh_frame_hdr.as_ref().map(|t| t.1.clone()),
            debug_frame: self.debug_frame.clone(),
            got_svma: self.got.clone(),
            stubs_svma: None,
            stub_helper_svma: None,
            unwind_info: None,
            text_segment_svma: None,
            text_segment: None,
        };
        Some(Module::new(name.to_string(), start..end, base_avma, info))
    }
}

/// The load segments a mapping of `elf` may begin: (p_vaddr, p_offset,
/// p_filesz). Only executable mappings reach the unwinder (the sideband and
/// the /proc snapshot keep no others), so only executable segments can be
/// the one a mapping begins (with lld, the read-only segment before the
/// code shares its first file page); all of them if none is marked so.
fn code_segments(elf: &ElfReader) -> Result<Vec<(u64, u64, u64)>, UnwindInfoError> {
    let all = elf.segments().map_err(UnwindInfoError::elf)?;
    let mut segments: Vec<(u64, u64, u64)> = all
        .iter()
        .filter(|s| s.executable)
        .map(|s| (s.vaddr, s.offset, s.filesz))
        .collect();
    if segments.is_empty() {
        segments = all.iter().map(|s| (s.vaddr, s.offset, s.filesz)).collect();
    }
    Ok(segments)
}

/// Where the ELF's address 0 lands for an executable mapping of it at
/// `start` from file offset `pgoff`: through the executable load segment the
/// mapping begins, the last one whose page-aligned file offset is at or
/// below `pgoff`. A segment rarely starts on a page boundary, and where its
/// address and file offset differ by more than the segment before it (lld's
/// layout: Rust binaries, LLVM-built programs) the segment whose file range
/// holds pgoff is the previous one; its bias is off by a page and every
/// unwind through the module goes astray.
pub(super) fn base_avma(segments: &[(u64, u64, u64)], start: u64, pgoff: u64) -> Option<u64> {
    const PAGE: u64 = 4096;
    let &(vaddr, offset, _) = segments
        .iter()
        .filter(|(_, off, _)| off & !(PAGE - 1) <= pgoff)
        .max_by_key(|(_, off, _)| *off)
        .or_else(|| segments.first())?;
    Some(
        start
            .wrapping_sub(pgoff)
            .wrapping_add(offset)
            .wrapping_sub(vaddr),
    )
}

/// What the kernel's process entries need of a binary.
pub(super) struct Layout {
    /// Executable PT_LOAD segments: (p_vaddr, p_offset, p_filesz).
    pub(super) segments: Vec<(u64, u64, u64)>,
    /// The ELF entry point.
    pub(super) entry: u64,
}

impl Layout {
    /// Read from the binary's headers (no section is read).
    pub(super) fn read(binaries: &Binaries, index: BinaryIndex) -> Result<Layout, UnwindInfoError> {
        let elf = ElfReader::new(open_file(binaries, index)?, ElfLimits::default());
        Ok(Layout {
            segments: code_segments(&elf)?,
            entry: elf.entry().map_err(UnwindInfoError::elf)?,
        })
    }
}

/// The unwind data of `binary`, read on first use and cached (None: it
/// has none, or reading it failed, which is noted once in `failures`). CFI
/// of files root does not own is kept while `held_user` (the bytes held
/// from such files) stays within `limit` ([`MAX_HELD_USER_CFI_BYTES`]),
/// else dropped.
pub(super) fn binary_info(
    cache: &mut FxHashMap<BinaryIndex, Option<Arc<BinaryUnwindInfo>>>,
    failures: &mut Vec<String>,
    (held_user, limit): (&mut usize, usize),
    binaries: &Binaries,
    binary: BinaryIndex,
) -> Option<Arc<BinaryUnwindInfo>> {
    use std::os::unix::fs::MetadataExt;
    cache
        .entry(binary)
        .or_insert_with(|| match BinaryUnwindInfo::read(binaries, binary) {
            Ok(mut i) => {
                let bin = binaries.get(binary);
                let users = bin.file.as_ref().is_none_or(|f| f.metadata().map_or(true, |m| m.uid() != 0));
                let bytes = i.cfi_bytes();
                if users && bytes > 0 {
                    if *held_user + bytes <= limit {
                        *held_user += bytes;
                        i.held_user_bytes = bytes;
                    } else {
                        (i.eh_frame, i.eh_frame_hdr, i.debug_frame) = (None, None, None);
                        failures.push(format!(
                            "{}: its {} KiB of CFI not kept (files root does not own may hold {} MiB in all)",
                            bin.path,
                            bytes >> 10,
                            limit >> 20
                        ));
                    }
                }
                Some(Arc::new(i))
            }
            Err(e) => {
                // Anonymous memory (JIT code) has no file: it is walked by
                // frame pointer, which is not a failure.
                let path = &binaries.get(binary).path;
                if path.starts_with('/') && !path.starts_with("//") {
                    failures.push(format!("{path}: {e}"));
                }
                None
            }
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::base_avma;

    /// Check the module base for lld's layout, where the code segment's
    /// address and file offset differ by a page more than the segment before
    /// it: the executable mapping must give the base the first, read-only
    /// mapping shows (program headers and /proc/PID/maps of real binaries).
    #[test]
    fn base_follows_the_segment_a_mapping_begins() {
        // The executable segment of our release binary (R 0x0/0x0, R E
        // 0x20f840/0x20e840, RW ...), mapped r-xp at 0x558d90789000 from
        // pgoff 0x20e000, with the first (r--p) mapping at 0x558d9057a000.
        let code = [(0x20f840, 0x20e840, 0x4f04a0)];
        assert_eq!(
            base_avma(&code, 0x558d_9078_9000, 0x20e000),
            Some(0x558d_9057_a000)
        );
        // A small lld binary: the code's segment begins inside the first
        // file page (R E at offset 0x8f0, address 0x18f0), so its mapping has
        // pgoff 0 like the read-only one before it.
        assert_eq!(
            base_avma(&[(0x18f0, 0x8f0, 0x3a0)], 0x5555_0000_1000, 0),
            Some(0x5555_0000_0000)
        );
        // GNU ld's layout (address = offset in every segment) is unchanged.
        let gnu = [
            (0x0, 0x0, 0x628),
            (0x1000, 0x1000, 0x1d5),
            (0x2000, 0x2000, 0x10c),
        ];
        assert_eq!(
            base_avma(&gnu, 0x5600_0000_1000, 0x1000),
            Some(0x5600_0000_0000)
        );
    }
}

#[cfg(test)]
mod held_tests {
    use super::*;
    use crate::sideband::MmapEvent;
    use crate::unwind::Unwinders;

    /// Check that the CFI of files root does not own is held within one
    /// budget in all: past it a file's CFI is dropped (and said), a file
    /// released gives its share back, and root's files never count.
    #[test]
    fn files_root_does_not_own_share_one_cfi_budget() {
        let libc = "/lib/x86_64-linux-gnu/libc.so.6";
        let dir = std::env::temp_dir().join(format!("sysprof-held-cfi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let copies: Vec<String> = ["a.so", "b.so"]
            .iter()
            .map(|n| dir.join(n).to_string_lossy().into_owned())
            .collect();
        for c in &copies {
            if std::fs::copy(libc, c).is_err() {
                eprintln!("SKIPPED: no {libc} to copy");
                return;
            }
            // As root, the copies must be another user's to count.
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } == 0 {
                std::os::unix::fs::chown(c, Some(65534), Some(65534)).unwrap();
            }
        }
        let ev = |path: &str| MmapEvent {
            time: 0,
            pid: std::process::id(),
            start: 0x1000,
            len: 0x1000,
            pgoff: 0,
            path: path.to_string(),
            build_id: None,
            inode: None,
        };
        let mut binaries = Binaries::new();
        let (a, b, system) = (
            binaries.intern(&ev(&copies[0])),
            binaries.intern(&ev(&copies[1])),
            binaries.intern(&ev(libc)),
        );
        let mut u = Unwinders::new();
        // A budget that holds one copy's CFI, not two.
        let one = BinaryUnwindInfo::read(&binaries, a).unwrap().cfi_bytes();
        assert!(one > 100_000, "libc has {one} bytes of CFI");
        let limit = one + one / 2;
        let info = |u: &mut Unwinders, binary| {
            binary_info(
                &mut u.binaries,
                &mut u.failures,
                (&mut u.held_user_cfi, limit),
                &binaries,
                binary,
            )
            .unwrap()
        };
        assert!(info(&mut u, a).eh_frame.is_some());
        assert_eq!(u.held_user_cfi, one);
        assert!(
            info(&mut u, b).eh_frame.is_none(),
            "past the budget, no CFI is kept"
        );
        assert!(
            u.failures
                .iter()
                .any(|f| f.contains("b.so") && f.contains("not kept")),
            "{:?}",
            u.failures
        );
        assert!(
            info(&mut u, system).eh_frame.is_some(),
            "root's files do not count"
        );
        assert_eq!(u.held_user_cfi, one);
        u.forget_binaries(&[a, b]);
        assert_eq!(u.held_user_cfi, 0, "a released file gives its share back");
        assert!(
            info(&mut u, b).eh_frame.is_some(),
            "and the next file has it"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
