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
//! At most [`MAX_PERF_MAP_BYTES`] are read; malformed or overlong lines are
//! skipped and counted, names are cut at [`MAX_NAME_LEN`], never fatal.

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
            let line = String::from_utf8_lossy(line);
            let mut parts = line.trim_end_matches('\r').splitn(3, ' ');
            let parsed = (|| {
                let start = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
                let size = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
                let name = parts.next()?.trim();
                (!name.is_empty() && size > 0).then(|| JitSymbol {
                    start,
                    size,
                    name: cap_name(name),
                })
            })();
            match parsed {
                Some(s) => map.symbols.push(s),
                None => map.malformed += 1,
            }
        }
        // Stable sort keeps file order among equal starts; keep the last one.
        map.symbols.sort_by_key(|s| s.start);
        map.symbols.reverse();
        map.symbols.dedup_by_key(|s| s.start);
        map.symbols.reverse();
        map
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
    let mut text = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(&file, MAX_PERF_MAP_BYTES),
        &mut text,
    )
    .map_err(io)?;
    Ok(PerfMap::parse(&text))
}

/// (uid, in-namespace pid) of a live process, from /proc/PID/status.
pub fn process_identity(pid: u32) -> Option<(u32, u32)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
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
