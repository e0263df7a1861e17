//! A debug file's compressed DWARF inflated once, kept in root's cache, and
//! mapped by every recording after.
//!
//! In: a separate debug file found for a binary ([`DebugFile`]) whose DWARF
//! sections are compressed (`SHF_COMPRESSED`, as Debian's `-dbg` and
//! `-dbgsym` packages ship them). Out: the same ELF file with those
//! sections stored plain, opened from `/var/cache/sysprof/dwarf` (written
//! there when missing), or None, and the caller keeps the compressed file.
//!
//! Why: blazesym inflates every DWARF section of a file it reads into its
//! heap, whole, and holds them while the file stays open. libc6-dbg's libc
//! debug file (4.2 MB on disk) was 13.5 MB of `record -a`'s heap beside
//! pgbench (heaptrack of the recording killed at 16 s: `blazesym::elf::
//! parser::decompress_zlib`), and inflating it was about 7 % of a 10-s
//! recording's CPU (`perf record --call-graph dwarf -p` of it), paid again
//! by each recording. blazesym maps a plain file instead: its pages are the
//! page cache's, read as touched and shared with the next recording.
//!
//! Trust: only a root-owned debug file is inflated (those under the system
//! debug directories, and debuginfod's downloads into root's cache); a
//! user's own debug file is left as it is. The cache entry's name is the
//! source's identity (device, inode, size, modification and change times:
//! a file rewritten in place gets a new name), and the directory is root's
//! alone ([`crate::sys::dir::root_private`]) and used by handle, so nobody
//! else can plant or swap an entry. The inflated size is bounded before
//! anything is inflated (the sections' own headers say it, and inflating
//! past what they say fails), alignments that would pad the copy are
//! refused and its writer stops past the bound; a copy is synced before it
//! is put in place and not used unless whole; the directory holds at most
//! [`CACHE_BUDGET_BYTES`]: the least recently used entries go first.

use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use object::build::Id;
use object::read::elf::{ElfFile64, FileHeader, SectionHeader};
use object::{elf, Endianness, Object, ObjectSection};

use super::debugfile::DebugFile;
use crate::sys::dir::DirHandle;

/// Where inflated debug files are kept, unless `SYSPROF_DWARF_CACHE` names
/// another directory (`off`: nothing inflated, nothing kept).
const CACHE_DIR: &str = "/var/cache/sysprof/dwarf";

/// Most bytes the cache directory holds: past it, the oldest entries are
/// removed (libc's inflated debug file is 17 MB).
const CACHE_BUDGET_BYTES: u64 = 512 << 20;

/// Largest inflated file kept: a larger one is left compressed (blazesym
/// then inflates it into the heap, as before).
const MAX_INFLATED_BYTES: u64 = 256 << 20;

/// DWARF sections no name, file, line or inlined call is read from
/// (variables' locations, macros): left out of the copy. libc's location
/// lists were 1.4 MB of its 10.4 MB copy, and 9.96 MB of the copy was
/// resident in `record` beside pgbench: the pages around the ones read
/// are mapped too (the kernel's fault-around).
const NOT_FOR_NAMES: [&str; 4] = [
    ".debug_loclists",
    ".debug_loc",
    ".debug_macro",
    ".debug_macinfo",
];

/// The copies' format, first in their names: a copy made otherwise is
/// another name (and ages out of the cache).
const FORMAT: &str = "1";

/// Suffix of the cache's entries (anything else in the directory is left alone).
const ENTRY_SUFFIX: &str = ".debug";

/// The plain copy of `d`, whose `.debug_info` the caller found compressed,
/// from the cache or made now; None when `d` is not root's, would pass
/// `max_dwarf_bytes` (the caller's limit on DWARF inflated) or
/// [`MAX_INFLATED_BYTES`], has no compressed DWARF after all, or the cache
/// is off or cannot be written (not worth a warning: the compressed file
/// still names everything).
pub fn plain_copy(d: &DebugFile, max_dwarf_bytes: u64) -> Option<DebugFile> {
    let dir = cache_dir()?;
    plain_copy_in(d, &dir, max_dwarf_bytes.min(MAX_INFLATED_BYTES))
}

fn cache_dir() -> Option<DirHandle> {
    match std::env::var_os("SYSPROF_DWARF_CACHE") {
        Some(v) if v == "off" => None,
        Some(v) => crate::sys::dir::root_private(Path::new(&v)),
        None => crate::sys::dir::root_private(Path::new(CACHE_DIR)),
    }
}

/// [`plain_copy`] with the cache's directory given, the copy at most `max` bytes.
fn plain_copy_in(d: &DebugFile, dir: &DirHandle, max: u64) -> Option<DebugFile> {
    let meta = d.file.metadata().ok()?;
    if !meta.is_file() || meta.uid() != 0 || meta.len() > max {
        return None;
    }
    let name = format!(
        "{FORMAT}-{:x}-{:x}-{:x}-{:x}.{:x}-{:x}.{:x}{ENTRY_SUFFIX}",
        meta.dev(),
        meta.ino(),
        meta.len(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec()
    );
    if let Some(file) = open_entry(dir, &name) {
        // Used now: the last to go when the cache is over its budget.
        let _ = file.set_modified(std::time::SystemTime::now());
        return Some(DebugFile {
            path: d.path.clone(),
            file,
        });
    }
    // The temporary file first: a cache that cannot be written costs no inflating.
    let tmp = format!("{TMP_PREFIX}{}", crate::sys::random::random_suffix());
    let out = dir.create_new(&tmp).ok()?;
    let mut data = vec![0u8; meta.len() as usize];
    let written = d.file.read_exact_at(&mut data, 0).is_ok() && {
        let mut sink = BoundedFile {
            out: std::io::BufWriter::with_capacity(256 << 10, out),
            limit: max,
            failed: false,
        };
        inflate_into(&data, max, &mut sink).is_some()
            && !sink.failed
            && sink
                .out
                .into_inner()
                .ok()
                .is_some_and(|f| f.sync_data().is_ok())
    };
    drop(data);
    // Opened before it is in place: another recording's eviction may
    // remove the name, not the file.
    let file = match written {
        true => open_entry(dir, &tmp).filter(|_| dir.rename(&tmp, &name).is_ok()),
        false => None,
    };
    if file.is_none() {
        let _ = dir.remove(&tmp);
    }
    keep_within_budget(dir, &name, CACHE_BUDGET_BYTES);
    Some(DebugFile {
        path: d.path.clone(),
        file: file?,
    })
}

/// Names of copies being written (removed when a recording was killed
/// before it put its copy in place: see [`keep_within_budget`]).
const TMP_PREFIX: &str = ".tmp-";

/// The cache's entry `name`, if it is a regular file of root's within
/// bounds and whole: its section headers end the file (object writes them
/// last), so a copy cut short by a crash is not used.
fn open_entry(dir: &DirHandle, name: &str) -> Option<std::fs::File> {
    let file = dir.open_read(name).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.uid() != 0 || meta.len() > MAX_INFLATED_BYTES {
        return None;
    }
    let mut header = [0u8; 64];
    file.read_exact_at(&mut header, 0).ok()?;
    let header: &elf::FileHeader64<Endianness> = object::pod::from_bytes(&header).ok()?.0;
    let endian = header.endian().ok()?;
    let end = header
        .e_shoff(endian)
        .checked_add(u64::from(header.e_shnum(endian)) * u64::from(header.e_shentsize(endian)))?;
    (end == meta.len()).then_some(file)
}

/// What object's writer writes the copy into: the temporary file, refusing
/// (before a byte is written) a file larger than `limit`.
struct BoundedFile {
    out: std::io::BufWriter<std::fs::File>,
    limit: u64,
    failed: bool,
}

impl object::write::WritableBuffer for BoundedFile {
    fn reserve(&mut self, size: u64) -> Result<(), ()> {
        if size > self.limit {
            self.failed = true;
            return Err(());
        }
        Ok(())
    }

    fn write_bytes(&mut self, val: &[u8]) {
        if !self.failed && self.out.write_all(val).is_err() {
            self.failed = true;
        }
    }
}

/// Largest section or segment alignment a copy keeps: a larger one (or one
/// that is not a power of two) is a file not worth copying, whose padding
/// could be gigabytes (object places each section at its alignment).
const MAX_ALIGN: u64 = 2 << 20;

/// The ELF file `data` with its compressed `.debug_*` sections stored
/// plain and those of [`NOT_FOR_NAMES`] left out (object's ELF builder:
/// every other section, header and segment as it was), written into
/// `out`; None when none is compressed, the file does not parse, an
/// alignment is out of bounds, or the DWARF inflated would pass `max`.
fn inflate_into(data: &[u8], max: u64, out: &mut BoundedFile) -> Option<()> {
    let file = ElfFile64::<Endianness>::parse(data).ok()?;
    let endian = file.endian();
    let headers = file.elf_header().section_headers(endian, data).ok()?;
    let mut total = 0u64;
    let mut plain: Vec<(usize, Vec<u8>)> = Vec::new();
    let mut left_out: Vec<usize> = Vec::new();
    for section in file.sections() {
        let header = headers.get(section.index().0)?;
        let compressed = header.sh_flags(endian).0 & elf::SHF_COMPRESSED.0 != 0;
        let name = section.name().unwrap_or("");
        if NOT_FOR_NAMES.contains(&name) {
            left_out.push(section.index().0);
            continue;
        }
        if !compressed || !name.starts_with(".debug_") {
            continue;
        }
        let cd = section.compressed_data().ok()?;
        // Bounded before anything is inflated: inflating allocates what
        // the section's header says, and fails past it.
        total = total.saturating_add(cd.uncompressed_size);
        if total > max {
            return None;
        }
        plain.push((section.index().0, cd.decompress().ok()?.into_owned()));
    }
    if plain.is_empty() {
        return None;
    }
    let mut builder = object::build::elf::Builder::read64(data).ok()?;
    let aligned = |a: u64| a <= MAX_ALIGN && (a == 0 || a.is_power_of_two());
    if !builder.segments.iter().all(|s| aligned(s.p_align)) {
        return None;
    }
    for s in builder.sections.iter_mut() {
        // The builder's sections keep the file's order, the null one left out.
        let index = s.id().index() + 1;
        s.delete |= left_out.contains(&index);
        if let Some((_, bytes)) = plain.iter().find(|(i, _)| *i == index) {
            s.data = object::build::elf::SectionData::Data(bytes.as_slice().into());
            s.sh_flags = elf::SectionFlags(s.sh_flags.0 & !elf::SHF_COMPRESSED.0);
            s.sh_size = bytes.len() as u64;
            // DWARF is read unaligned.
            s.sh_addralign = 1;
        }
        if !aligned(s.sh_addralign) {
            return None;
        }
        s.sh_addralign = s.sh_addralign.max(1);
    }
    builder.write(out).ok()
}

/// Remove the oldest entries (by modification time: a copy used is
/// touched) until the directory's entries fit `budget` bytes; `keep` (just
/// written) stays. Copies a killed recording left half-written (older than
/// ten minutes) go too.
fn keep_within_budget(dir: &DirHandle, keep: &str, budget: u64) {
    let Ok(names) = dir.names() else { return };
    let now = std::time::SystemTime::now();
    let mut entries: Vec<(std::time::SystemTime, u64, String)> = Vec::new();
    for name in names.into_iter().filter_map(|n| n.into_string().ok()) {
        let Some(m) = dir.open_read(&name).ok().and_then(|f| f.metadata().ok()) else {
            continue;
        };
        let Ok(modified) = m.modified() else { continue };
        if name.starts_with(TMP_PREFIX) {
            let stale = now
                .duration_since(modified)
                .is_ok_and(|age| age > std::time::Duration::from_secs(600));
            if stale {
                let _ = dir.remove(&name);
            }
        } else if name.ends_with(ENTRY_SUFFIX) {
            entries.push((modified, m.len(), name));
        }
    }
    let mut total: u64 = entries.iter().map(|e| e.1).sum();
    entries.sort();
    for (_, len, name) in entries {
        if total <= budget {
            break;
        }
        if name != keep {
            let _ = dir.remove(&name);
            total -= len;
        }
    }
}

#[cfg(test)]
mod tests;
