//! This process's read-only mappings of one file, their pages let go.
//!
//! In: a file's device and inode. Out: its mappings' pages dropped from
//! this process's resident set (`madvise(MADV_DONTNEED)`), and how many
//! bytes of mappings that covered.
//!
//! Why: blazesym maps each file it names from whole, and parsing a debug
//! file touches nearly all of it (libc's DWARF, 8.4 MB, was resident for
//! the whole recording). Its pages are the page cache's, clean: let go,
//! they stay cached, and the next lookup faults in only what it reads.
//!
//! Only a mapping that cannot hold anything of this process's own is let
//! go: read-only, of the whole file from its start (as blazesym maps one;
//! the dynamic loader's first mapping of a library spans its segments,
//! not the file), of a file that is not mapped executable here (a library
//! this process runs has relocated read-only pages, RELRO, that the file
//! does not hold).

/// Drop the resident pages of this process's read-only mappings of the
/// whole file `(dev, ino)`, `len` bytes long, unless that file is mapped
/// executable too. Returns the bytes of mappings dropped.
///
/// # Safety
///
/// No other thread may map or unmap that file meanwhile: a mapping found
/// in `/proc/self/maps`, unmapped and its range mapped again as anonymous
/// memory before the `madvise`, would lose that memory's contents.
pub unsafe fn release(dev: u64, ino: u64, len: u64) -> u64 {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return 0;
    };
    // SAFETY: sysconf only reads a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    let whole = len.div_ceil(page) * page;
    let want = (libc::major(dev) as u64, libc::minor(dev) as u64);
    let mut ranges = Vec::new();
    for line in maps.lines() {
        let Some(m) = Mapping::parse(line) else {
            continue;
        };
        if m.inode != ino || m.dev != want {
            continue;
        }
        if m.perms.get(2) == Some(&b'x') {
            return 0;
        }
        let read_only = m.perms.first() == Some(&b'r') && m.perms.get(1) == Some(&b'-');
        if read_only && m.offset == 0 && m.end - m.start == whole {
            ranges.push((m.start, m.end));
        }
    }
    let mut released = 0;
    for (start, end) in ranges {
        let len = (end - start) as usize;
        // SAFETY: a read-only mapping of a whole file, from its start,
        // that no code of ours runs from, and still that mapping (the
        // caller's contract): its pages hold only the file's bytes, which
        // the next read faults in again from the page cache.
        if unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_DONTNEED) } == 0 {
            released += len as u64;
        }
    }
    released
}

/// One line of `/proc/self/maps`.
struct Mapping<'a> {
    start: u64,
    end: u64,
    perms: &'a [u8],
    offset: u64,
    dev: (u64, u64),
    inode: u64,
}

impl<'a> Mapping<'a> {
    fn parse(line: &'a str) -> Option<Mapping<'a>> {
        let mut f = line.split_ascii_whitespace();
        let (start, end) = f.next()?.split_once('-')?;
        let perms = f.next()?.as_bytes();
        let offset = u64::from_str_radix(f.next()?, 16).ok()?;
        let (major, minor) = f.next()?.split_once(':')?;
        let inode = f.next()?.parse().ok()?;
        let start = u64::from_str_radix(start, 16).ok()?;
        let end = u64::from_str_radix(end, 16).ok()?;
        (end > start).then_some(Mapping {
            start,
            end,
            perms,
            offset,
            dev: (
                u64::from_str_radix(major, 16).ok()?,
                u64::from_str_radix(minor, 16).ok()?,
            ),
            inode,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// This process's resident KiB of the mapping at `addr` (smaps' Rss:
    /// mincore would say what the page cache holds, not what is mapped).
    fn rss_kb_at(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some(m) = Mapping::parse(line) {
                inside = m.start as usize <= addr && addr < m.end as usize;
            } else if inside {
                if let Some(kb) = line.strip_prefix("Rss:") {
                    return kb.trim().trim_end_matches("kB").trim().parse().unwrap();
                }
            }
        }
        panic!("no mapping at {addr:#x}");
    }

    /// A file mapped read-only and read whole is resident; let go, it is
    /// not, and reads back the same bytes.
    #[test]
    fn a_read_only_mapping_lets_its_pages_go_and_reads_the_same() {
        let dir = std::env::temp_dir().join(format!("sysprof-pages-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("data");
        let bytes: Vec<u8> = (0..(2u32 << 20))
            .map(|i| (i * 7 + i / 4096) as u8)
            .collect();
        std::fs::write(&path, &bytes).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let meta = file.metadata().unwrap();
        let len = bytes.len();
        // SAFETY: a private read-only mapping of a file we just wrote.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        assert_ne!(addr, libc::MAP_FAILED);
        // SAFETY: the mapping is `len` bytes, alive until the munmap below.
        let view = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
        assert_eq!(view, &bytes[..]);
        assert!(rss_kb_at(addr as usize) >= 2048, "read whole: resident");
        // SAFETY (both): only this test maps its own file.
        // Not the whole file (as the loader's span of a library is not): kept.
        assert_eq!(unsafe { release(meta.dev(), meta.ino(), 4 << 20) }, 0);
        assert_eq!(
            unsafe { release(meta.dev(), meta.ino(), meta.len()) },
            len as u64
        );
        assert!(rss_kb_at(addr as usize) < 64, "let go");
        assert_eq!(view, &bytes[..], "the same bytes, read again");
        // SAFETY: unmapped once, nothing refers to it after.
        unsafe { libc::munmap(addr, len) };
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A file this process runs code from is never let go (its RELRO pages
    /// were written by the loader): this test binary itself.
    #[test]
    fn a_file_mapped_executable_here_is_kept() {
        let exe = std::fs::metadata("/proc/self/exe").unwrap();
        // SAFETY: nothing maps or unmaps the test binary while it runs.
        assert_eq!(unsafe { release(exe.dev(), exe.ino(), exe.len()) }, 0);
    }

    #[test]
    fn maps_lines_parse() {
        let m = Mapping::parse(
            "7f12a0000000-7f12a0800000 r--p 00001000 fe:01 3932197    /var/cache/x.debug",
        )
        .unwrap();
        assert_eq!(
            (m.start, m.end, m.offset, m.dev, m.inode),
            (0x7f12a0000000, 0x7f12a0800000, 0x1000, (0xfe, 1), 3932197)
        );
        assert!(Mapping::parse("7f12a0000000-7f12a0000000 r--p 0 fe:01 1").is_none());
        assert!(Mapping::parse("garbage").is_none());
    }
}
