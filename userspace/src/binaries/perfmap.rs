//! JIT symbols from perf map files (`/tmp/perf-PID.map`).
//!
//! In: a process id (its uid and in-namespace pid when known). Out: the
//! symbols the process's JIT wrote (`START SIZE name` per line, hex), sorted
//! for lookup, or why the file was not used. Written here because the format
//! is three fields a line and the trust rules are ours: the file is read
//! only if it is a regular file (not a symlink, not a FIFO, one link) owned
//! by the process's user and readable by it, so another user can neither
//! plant names in a root profiler's output nor make it read a file that
//! user could not (a hard link to a root-only file fails the owner check).
//! At most [`MAX_PERF_MAP_BYTES`] are read, a line at a time through one
//! buffer; malformed or overlong lines are skipped and counted, names are
//! cut at [`MAX_NAME_LEN`], never fatal. [`load_wanted`] keeps only the
//! symbols of the addresses asked for and reads no more than the caller's
//! allowance (a user's share of what is read per window).

use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// Most bytes read of one perf map.
pub const MAX_PERF_MAP_BYTES: u64 = 64 << 20;
/// Longest line parsed; longer ones are skipped.
const MAX_LINE_LEN: usize = 8192;
/// Longest name kept.
pub const MAX_NAME_LEN: usize = 1024;

/// `name`, cut to [`MAX_NAME_LEN`] bytes on a character boundary.
pub fn cap_name(name: &str) -> String {
    if name.len() <= MAX_NAME_LEN {
        return name.to_string();
    }
    let mut end = MAX_NAME_LEN;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &name[..end])
}

/// One JIT symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JitSymbol {
    /// First address.
    pub start: u64,
    /// Size in bytes.
    pub size: u64,
    /// Name as the JIT wrote it.
    pub name: String,
}

/// A parsed perf map.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PerfMap {
    /// Symbols sorted by start.
    pub symbols: Vec<JitSymbol>,
    /// Lines that could not be parsed.
    pub malformed: usize,
}

impl PerfMap {
    /// Parse perf map text. Later entries for the same start win (JITs
    /// rewrite code), lines that are not `HEX HEX name` are counted and skipped.
    pub fn parse(text: &[u8]) -> PerfMap {
        let mut map = PerfMap::default();
        for line in text.split(|&b| b == b'\n') {
            if line.is_empty() {
                continue;
            }
            if line.len() > MAX_LINE_LEN {
                map.malformed += 1;
                continue;
            }
            map.add_line(line);
        }
        map.finish();
        map
    }

    /// One line (no newline), in file order; [`PerfMap::finish`] then sorts.
    fn add_line(&mut self, line: &[u8]) {
        match parse_line(line) {
            Some((start, size, name)) => self.symbols.push(JitSymbol {
                start,
                size,
                name: cap_name(&String::from_utf8_lossy(name)),
            }),
            None => self.malformed += 1,
        }
    }

    /// Sort by start; of equal starts the last in the file is kept.
    fn finish(&mut self) {
        // Stable sort keeps file order among equal starts; keep the last one.
        self.symbols.sort_by_key(|s| s.start);
        self.symbols.reverse();
        self.symbols.dedup_by_key(|s| s.start);
        self.symbols.reverse();
    }

    /// The symbol containing `addr`.
    pub fn lookup(&self, addr: u64) -> Option<&JitSymbol> {
        let i = self.symbols.partition_point(|s| s.start <= addr);
        let s = self.symbols.get(i.checked_sub(1)?)?;
        (addr - s.start < s.size).then_some(s)
    }
}

/// Why a process's perf map was not read.
#[derive(Debug, thiserror::Error)]
pub enum PerfMapError {
    /// It could not be looked at or read (missing, most often).
    #[error("{path}: {source}")]
    Io {
        /// The map's path.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A symlink: whoever made it chose what we would read.
    #[error("{path} is a symlink; ignored")]
    Symlink {
        /// The map's path.
        path: String,
    },
    /// It could not be opened as a regular file.
    #[error("{0}; ignored")]
    Open(#[source] super::OpenError),
    /// Whose file it must be is not known.
    #[error("{path}: the process's user is unknown; ignored")]
    UnknownUser {
        /// The map's path.
        path: String,
    },
    /// Another user's file.
    #[error("{path} is owned by uid {owner} but the process runs as {uid}; ignored")]
    NotOwned {
        /// The map's path.
        path: String,
        /// Its owner.
        owner: u32,
        /// The process's user.
        uid: u32,
    },
    /// More than one link: perhaps a link to a file its owner may not read.
    #[error("{path} has {links} links (a link to another file?); ignored")]
    Links {
        /// The map's path.
        path: String,
        /// Its link count.
        links: u64,
    },
    /// Its owner may not read it.
    #[error("{path} is not readable by its owner; ignored")]
    Unreadable {
        /// The map's path.
        path: String,
    },
}

impl PerfMapError {
    /// Its kind: [`std::io::ErrorKind::NotFound`] when the process wrote
    /// no map (the usual case, not worth a warning).
    pub fn kind(&self) -> std::io::ErrorKind {
        match self {
            PerfMapError::Io { source, .. } => source.kind(),
            PerfMapError::Open(e) => e.kind(),
            _ => std::io::ErrorKind::Other,
        }
    }
}

/// Read a process's perf map, checking that it may be trusted.
/// `uid` is the process's user if known; `ns_pid` its pid inside its pid
/// namespace (which names the file), `root` its root directory.
pub fn load(uid: Option<u32>, ns_pid: u32, root: &str) -> Result<PerfMap, PerfMapError> {
    let (file, path) = open_checked(uid, ns_pid, root)?;
    let mut map = PerfMap::default();
    stream(&file, MAX_PERF_MAP_BYTES, |line| map.add_line(line))
        .map_err(|source| PerfMapError::Io { path, source })?;
    map.finish();
    Ok(map)
}

/// What [`load_wanted`] read of a map.
#[derive(Debug, Default)]
pub struct WantedMap {
    /// The symbols holding one of the wanted addresses.
    pub map: PerfMap,
    /// Bytes read.
    pub read: u64,
    /// Bytes of the file not read (past the allowance).
    pub left: u64,
}

/// Read a process's perf map as [`load`] does, keeping only the symbols
/// that hold one of `wanted` (sorted), and reading at most `allowance`
/// bytes: a map of millions of lines costs one line's buffer, not a
/// symbol per line (four 70-MB maps took `record` to 400 MB).
pub fn load_wanted(
    uid: Option<u32>,
    ns_pid: u32,
    root: &str,
    wanted: &[u64],
    allowance: u64,
) -> Result<WantedMap, PerfMapError> {
    let (file, path) = open_checked(uid, ns_pid, root)?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut out = WantedMap::default();
    let map = &mut out.map;
    out.read = stream(
        &file,
        allowance.min(MAX_PERF_MAP_BYTES),
        |line| match parse_line(line) {
            Some((start, len, name)) => {
                if holds_any(wanted, start, len) {
                    map.symbols.push(JitSymbol {
                        start,
                        size: len,
                        name: cap_name(&String::from_utf8_lossy(name)),
                    });
                }
            }
            None => map.malformed += 1,
        },
    )
    .map_err(|source| PerfMapError::Io { path, source })?;
    out.left = size.saturating_sub(out.read);
    out.map.finish();
    Ok(out)
}

/// Whether `[start, start + size)` holds one of `wanted` (sorted).
pub fn holds_any(wanted: &[u64], start: u64, size: u64) -> bool {
    let i = wanted.partition_point(|&a| a < start);
    wanted.get(i).is_some_and(|&a| a - start < size)
}

/// Open a process's perf map if it may be trusted: (the file, its path).
fn open_checked(
    uid: Option<u32>,
    ns_pid: u32,
    root: &str,
) -> Result<(std::fs::File, String), PerfMapError> {
    let path = format!("{root}/tmp/perf-{ns_pid}.map");
    let io = |source| PerfMapError::Io {
        path: path.clone(),
        source,
    };
    let meta = std::fs::symlink_metadata(&path).map_err(io)?;
    if meta.file_type().is_symlink() {
        return Err(PerfMapError::Symlink { path });
    }
    // Non-blocking and no symlink: what is opened is what was checked, or an error.
    let file = super::open_regular(&path, false).map_err(PerfMapError::Open)?;
    let meta = file.metadata().map_err(io)?;
    let Some(uid) = uid else {
        return Err(PerfMapError::UnknownUser { path });
    };
    if meta.uid() != uid {
        return Err(PerfMapError::NotOwned {
            path,
            owner: meta.uid(),
            uid,
        });
    }
    if meta.nlink() != 1 {
        return Err(PerfMapError::Links {
            path,
            links: meta.nlink(),
        });
    }
    if meta.permissions().mode() & 0o400 == 0 {
        return Err(PerfMapError::Unreadable { path });
    }
    Ok((file, path))
}

/// Hand each line of `file`'s first `limit` bytes to `each` (a line longer
/// than [`MAX_LINE_LEN`] as an empty one, counted malformed), through one
/// buffer; the bytes read.
fn stream(file: &std::fs::File, limit: u64, mut each: impl FnMut(&[u8])) -> std::io::Result<u64> {
    use std::io::BufRead;
    let mut reader = std::io::BufReader::with_capacity(64 << 10, std::io::Read::take(file, limit));
    let mut line = Vec::with_capacity(256);
    let mut read = 0u64;
    loop {
        line.clear();
        // At most a line's limit (and its newline) is held: the rest of a
        // longer line is skipped in buffer-sized steps.
        let n = std::io::Read::take(&mut reader, MAX_LINE_LEN as u64 + 1)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(read);
        }
        read += n as u64;
        if line.last() != Some(&b'\n') && line.len() > MAX_LINE_LEN {
            loop {
                let buf = reader.fill_buf()?;
                if buf.is_empty() {
                    break;
                }
                let (used, done) = match buf.iter().position(|&b| b == b'\n') {
                    Some(i) => (i + 1, true),
                    None => (buf.len(), false),
                };
                reader.consume(used);
                read += used as u64;
                if done {
                    break;
                }
            }
            each(&[0xff]);
            continue;
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        if !text.is_empty() {
            each(text);
        }
    }
}

/// `START SIZE name` (hex, `0x` optional) of one line, without its newline.
fn parse_line(line: &[u8]) -> Option<(u64, u64, &[u8])> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut parts = line.splitn(3, |&b| b == b' ');
    let hex = |p: &[u8]| {
        let p = p.strip_prefix(b"0x").unwrap_or(p);
        u64::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok()
    };
    let start = hex(parts.next()?)?;
    let size = hex(parts.next()?)?;
    let name = parts.next()?.trim_ascii();
    (!name.is_empty() && size > 0).then_some((start, size, name))
}

/// (uid, in-namespace pid) of a live process, from /proc/PID/status.
pub fn process_identity(pid: u32) -> Option<(u32, u32)> {
    let status = crate::sys::kernel_text::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let ns_pid = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|v| v.split_whitespace().last()?.parse().ok())
        .unwrap_or(pid);
    Some((uid, ns_pid))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that entries parse, lookups honour sizes, later duplicates win,
    /// and malformed lines are counted.
    #[test]
    fn parses_and_looks_up() {
        let m = PerfMap::parse(b"1000 20 LazyCompile:*hot a.js:1\n2000 10 old\nzz 1 bad\n2000 10 new\n3000 0 empty\n\n");
        assert_eq!(m.malformed, 2);
        assert_eq!(m.lookup(0x1010).unwrap().name, "LazyCompile:*hot a.js:1");
        assert!(m.lookup(0x1020).is_none());
        assert_eq!(m.lookup(0x2005).unwrap().name, "new");
        assert!(m.lookup(0xfff).is_none());
    }

    /// Check that arbitrary bytes never make the parser or lookup panic.
    #[test]
    fn garbage_never_panics() {
        let mut x = 0x9e3779b97f4a7c15u64;
        for len in 0..2000 {
            let bytes: Vec<u8> = (0..len % 300)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Mostly hex digits, spaces and newlines, so some lines almost parse.
                    b"0123456789abcdefx \n\xff\x00"[(x % 21) as usize]
                })
                .collect();
            let m = PerfMap::parse(&bytes);
            let _ = m.lookup(x);
            let _ = m.lookup(u64::MAX);
        }
    }

    /// Check that a process without a perf map (the path does not exist,
    /// as stat(2) says) gives NotFound, which is not warned about, while a
    /// map another user owns is refused with a kind that is.
    #[test]
    fn missing_map_is_not_found() {
        let dir =
            std::env::temp_dir().join(format!("sysprof-perfmap-missing-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        let root = dir.to_str().unwrap();
        assert_eq!(
            std::fs::metadata(dir.join("tmp/perf-9.map"))
                .unwrap_err()
                .kind(),
            std::io::ErrorKind::NotFound
        );
        let e = load(Some(0), 9, root).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
        std::fs::write(dir.join("tmp/perf-9.map"), "1000 10 f\n").unwrap();
        // SAFETY: geteuid has no preconditions.
        let other = unsafe { libc::geteuid() } + 1;
        let e = load(Some(other), 9, root).unwrap_err();
        assert_ne!(e.kind(), std::io::ErrorKind::NotFound);
        assert!(
            e.to_string().ends_with(&format!(
                "perf-9.map is owned by uid {} but the process runs as {other}; ignored",
                other - 1
            )),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Check that a map read for some addresses keeps only their symbols
    /// (the last of equal starts), skips an overlong line whole, reads no
    /// more than its allowance and says how much it left.
    #[test]
    fn wanted_symbols_only_within_the_allowance() {
        let dir =
            std::env::temp_dir().join(format!("sysprof-perfmap-wanted-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        let long = "x".repeat(3 * MAX_LINE_LEN);
        let text = format!(
            "1000 20 a\n2000 10 {long}\n2000 10 old\n3000 10 c\n2000 10 new\n4000 10 past\n"
        );
        std::fs::write(dir.join("tmp/perf-5.map"), &text).unwrap();
        let root = dir.to_str().unwrap();
        // SAFETY: geteuid has no preconditions.
        let uid = Some(unsafe { libc::geteuid() });
        let all = load_wanted(uid, 5, root, &[0x1005, 0x2003, 0x4000], u64::MAX).unwrap();
        let names: Vec<_> = all.map.symbols.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["a", "new", "past"]);
        assert_eq!(
            (all.map.malformed, all.read, all.left),
            (1, text.len() as u64, 0)
        );
        let cut_at = text.find("4000").unwrap() as u64;
        let cut = load_wanted(uid, 5, root, &[0x1005, 0x4000], cut_at).unwrap();
        let names: Vec<_> = cut.map.symbols.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["a"]);
        assert_eq!(cut.left, text.len() as u64 - cut_at);
        assert_eq!(PerfMap::parse(text.as_bytes()).symbols.len(), 4);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Check that a symlinked perf map is refused.
    #[test]
    fn refuses_symlinks() {
        let dir = std::env::temp_dir().join(format!("sysprof-perfmap-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        std::fs::write(dir.join("real.map"), "1000 10 f\n").unwrap();
        let _ = std::fs::remove_file(dir.join("tmp/perf-7.map"));
        std::os::unix::fs::symlink(dir.join("real.map"), dir.join("tmp/perf-7.map")).unwrap();
        let err = load(Some(0), 7, dir.to_str().unwrap()).unwrap_err();
        assert!(matches!(err, PerfMapError::Symlink { .. }), "{err}");
        assert!(
            err.to_string()
                .ends_with("perf-7.map is a symlink; ignored"),
            "{err}"
        );
        std::fs::remove_file(dir.join("tmp/perf-7.map")).unwrap();
        std::fs::write(dir.join("tmp/perf-7.map"), "1000 10 f\n").unwrap();
        let m = load(Some(unsafe { libc::geteuid() }), 7, dir.to_str().unwrap()).unwrap();
        assert_eq!(m.symbols.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
