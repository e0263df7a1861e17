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
//! alone ([`crate::sys::dir::root_private`]), opened once and used by
//! handle, so nobody else can plant or swap an entry. The inflated size
//! is bounded before anything is inflated (the sections' own headers say
//! it, and inflating past what they say fails), and the directory holds at
//! most [`CACHE_BUDGET_BYTES`]: the oldest entries go first.

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

/// The plain copy of `d`, from the cache or made now; None when `d` is not
/// root's, has no compressed DWARF, would be too large, or the cache is
/// off or cannot be written (the reason is not worth a warning: the
/// compressed file still names everything).
pub fn plain_copy(d: &DebugFile) -> Option<DebugFile> {
    let dir = cache_dir()?;
    plain_copy_in(d, &dir)
}

fn cache_dir() -> Option<DirHandle> {
    match std::env::var_os("SYSPROF_DWARF_CACHE") {
        Some(v) if v == "off" => None,
        Some(v) => crate::sys::dir::root_private(Path::new(&v)),
        None => crate::sys::dir::root_private(Path::new(CACHE_DIR)),
    }
}

/// [`plain_copy`] with the cache's directory given.
fn plain_copy_in(d: &DebugFile, dir: &DirHandle) -> Option<DebugFile> {
    let meta = d.file.metadata().ok()?;
    if !meta.is_file() || meta.uid() != 0 || meta.len() > MAX_INFLATED_BYTES {
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
        return Some(DebugFile {
            path: d.path.clone(),
            file,
        });
    }
    let mut data = vec![0u8; meta.len() as usize];
    d.file.read_exact_at(&mut data, 0).ok()?;
    let plain = inflate(&data)?;
    drop(data);
    let tmp = format!(".tmp-{}", crate::sys::random::random_suffix());
    let written = dir
        .create_new(&tmp)
        .and_then(|mut f| f.write_all(&plain))
        .and_then(|()| dir.rename(&tmp, &name));
    if written.is_err() {
        let _ = dir.remove(&tmp);
        return None;
    }
    drop(plain);
    keep_within_budget(dir, &name, CACHE_BUDGET_BYTES);
    Some(DebugFile {
        path: d.path.clone(),
        file: open_entry(dir, &name)?,
    })
}

/// The cache's entry `name`, if it is a regular file of root's within bounds.
fn open_entry(dir: &DirHandle, name: &str) -> Option<std::fs::File> {
    let file = dir.open_read(name).ok()?;
    let meta = file.metadata().ok()?;
    (meta.is_file() && meta.uid() == 0 && meta.len() <= 2 * MAX_INFLATED_BYTES).then_some(file)
}

/// The ELF file `data` with its compressed `.debug_*` sections stored
/// plain and those of [`NOT_FOR_NAMES`] left out (object's ELF builder:
/// every other section, header and segment as it was); None when none is
/// compressed, the file does not parse, or the result would pass
/// [`MAX_INFLATED_BYTES`].
fn inflate(data: &[u8]) -> Option<Vec<u8>> {
    let file = ElfFile64::<Endianness>::parse(data).ok()?;
    let endian = file.endian();
    let headers = file.elf_header().section_headers(endian, data).ok()?;
    let mut total = data.len() as u64;
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
        total = total.saturating_add(cd.uncompressed_size);
        if total > MAX_INFLATED_BYTES {
            return None;
        }
        plain.push((section.index().0, cd.decompress().ok()?.into_owned()));
    }
    if plain.is_empty() {
        return None;
    }
    let mut builder = object::build::elf::Builder::read64(data).ok()?;
    for s in builder.sections.iter_mut() {
        // The builder's sections keep the file's order, the null one left out.
        let index = s.id().index() + 1;
        s.delete |= left_out.contains(&index);
        if let Some((_, bytes)) = plain.iter().find(|(i, _)| *i == index) {
            s.data = object::build::elf::SectionData::Data(bytes.as_slice().into());
            s.sh_flags = elf::SectionFlags(s.sh_flags.0 & !elf::SHF_COMPRESSED.0);
            s.sh_size = bytes.len() as u64;
            s.sh_addralign = s.sh_addralign.max(1);
        }
    }
    let mut out = Vec::with_capacity(total as usize);
    builder.write(&mut out).ok()?;
    Some(out)
}

/// Remove the oldest entries (by modification time) until the directory's
/// entries fit `budget` bytes; `keep` (just written) stays.
fn keep_within_budget(dir: &DirHandle, keep: &str, budget: u64) {
    let Ok(names) = dir.names() else { return };
    let mut entries: Vec<(i64, u64, String)> = names
        .into_iter()
        .filter_map(|n| n.into_string().ok())
        .filter(|n| n.ends_with(ENTRY_SUFFIX))
        .filter_map(|n| {
            let m = dir.open_read(&n).ok()?.metadata().ok()?;
            Some((m.mtime(), m.len(), n))
        })
        .collect();
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
