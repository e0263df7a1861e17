//! Compiled unwind tables kept on disk between runs, for the system's
//! binaries whose tables are compiled on a worker (CFI over 32 KiB: the ones
//! that cost; small ones are compiled on the event loop, where no file is
//! written): a `record` or an agent start compiles each running binary's
//! CFI again otherwise (0.22-0.31 s of CPU on this VM's ~60 tables, most of
//! what attaching costs), as perf keeps its build-id cache.
//!
//! In: a binary's open file (its identity from `fstat`: device, inode,
//! size, change and modification times), the row limit, and the rows its
//! CFI compiled to. Out: the same rows on a later run, if the file and
//! this executable are unchanged. Only root's files are kept (a table
//! charged to another user is not: no user's files take the cache's room
//! from root's, nor choose what is read back); the directory must be
//! root's and writable by nobody else, or nothing is read or written.
//! Bounded: at most [`CACHE_FILES`] files and [`CACHE_BYTES`] in all, the
//! oldest removed first; a file whose header does not match its key, or
//! whose size does not, is a miss (and removed).

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

use crate::unwind::tables::Row;

/// Where the tables go unless `SYSPROF_TABLE_CACHE` says otherwise
/// (`off`: no cache).
const DEFAULT_DIR: &str = "/var/cache/sysprof/unwind-tables";
/// Most files the cache keeps.
const CACHE_FILES: usize = 1024;
/// Most bytes the cache keeps.
const CACHE_BYTES: u64 = 256 << 20;
/// First bytes of a cache file (and its format's version).
const MAGIC: &[u8; 8] = b"SPUTBL01";
/// Words of the key, after the magic.
const KEY_WORDS: usize = 11;

/// The cache directory, checked once.
pub(super) struct TableCache {
    dir: PathBuf,
    /// Files and bytes in the directory, as counted when it was opened and
    /// kept since (by every thread that puts): the directory is listed
    /// again only to make room, not on every put.
    held: std::sync::Mutex<(usize, u64)>,
    /// This executable's identity: a rebuilt sysprof (another compiler)
    /// reads none of an earlier one's tables.
    own: [u64; 4],
}

impl TableCache {
    /// The cache, if its directory is (or can be made) root's and
    /// writable by root alone; None otherwise, or when turned off.
    pub(super) fn open() -> Option<TableCache> {
        match std::env::var_os("SYSPROF_TABLE_CACHE") {
            Some(v) if v == "off" => None,
            Some(v) => TableCache::open_at(PathBuf::from(v)),
            None => TableCache::open_at(PathBuf::from(DEFAULT_DIR)),
        }
    }

    /// The cache in `dir` (see [`TableCache::open`]).
    fn open_at(dir: PathBuf) -> Option<TableCache> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return None;
        }
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir);
        // Every directory on the way must be root's and not writable by
        // others: else someone could swap a file or the directory.
        if !crate::sys::dir::is_root_private(&dir) {
            return None;
        }
        let exe = std::fs::metadata("/proc/self/exe").ok()?;
        let own = [
            exe.dev(),
            exe.ino(),
            exe.size(),
            (exe.mtime() as u64)
                .wrapping_mul(1_000_000_000)
                .wrapping_add(exe.mtime_nsec() as u64),
        ];
        let held =
            std::sync::Mutex::new(list(&dir).iter().fold((0, 0), |(n, b), f| (n + 1, b + f.1)));
        Some(TableCache { dir, held, own })
    }

    /// The key of `file`'s table at `max_rows`: the file's identity as the
    /// kernel keeps it (its change time moves on any write or `utimes`),
    /// the limit, and this executable's identity.
    fn key(&self, file: &std::fs::File, max_rows: usize) -> Option<[u64; KEY_WORDS]> {
        let m = file.metadata().ok()?;
        let ns = |s: i64, n: i64| {
            (s as u64)
                .wrapping_mul(1_000_000_000)
                .wrapping_add(n as u64)
        };
        Some([
            m.dev(),
            m.ino(),
            m.size(),
            ns(m.ctime(), m.ctime_nsec()),
            ns(m.mtime(), m.mtime_nsec()),
            m.uid() as u64,
            max_rows as u64,
            self.own[0],
            self.own[1],
            self.own[2],
            self.own[3],
        ])
    }

    fn path_of(&self, key: &[u64; KEY_WORDS]) -> PathBuf {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut h);
        self.dir.join(format!("{:016x}.rows", h.finish()))
    }

    /// The rows kept for `file` (root's) at `max_rows`, if any.
    pub(super) fn get(&self, file: &std::fs::File, max_rows: usize) -> Option<Vec<Row>> {
        let key = self.key(file, max_rows)?;
        if key[5] != 0 {
            return None;
        }
        let path = self.path_of(&key);
        let read = || -> Option<Vec<Row>> {
            let mut f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(&path)
                .ok()?;
            let header_len = MAGIC.len() + 8 * KEY_WORDS + 8;
            let size = f.metadata().ok().filter(|m| m.is_file())?.len();
            let mut header = vec![0u8; header_len];
            f.read_exact(&mut header).ok()?;
            if &header[..8] != MAGIC {
                return None;
            }
            let word =
                |i: usize| u64::from_le_bytes(header[8 + 8 * i..16 + 8 * i].try_into().unwrap());
            if (0..KEY_WORDS).any(|i| word(i) != key[i]) {
                return None;
            }
            let rows = word(KEY_WORDS) as usize;
            if rows > max_rows || size != (header_len + 8 * rows) as u64 {
                return None;
            }
            let mut bytes = vec![0u8; 8 * rows];
            f.read_exact(&mut bytes).ok()?;
            crate::sys::cgroup_memory::drop_cached_pages(&f);
            Some(
                bytes
                    .chunks_exact(8)
                    .map(|b| Row {
                        pc: u32::from_le_bytes(b[..4].try_into().unwrap()),
                        kind: b[4],
                        rbp_slot: b[5],
                        cfa_off8: u16::from_le_bytes(b[6..8].try_into().unwrap()),
                    })
                    .collect(),
            )
        };
        let rows = read();
        if rows.is_none() && path.exists() {
            let _ = std::fs::remove_file(&path);
        }
        rows
    }

    /// Keep `rows`, compiled from `file` (root's) at `max_rows`; within the
    /// cache's bounds, the oldest files go first.
    pub(super) fn put(&self, file: &std::fs::File, max_rows: usize, rows: &[Row]) {
        let Some(key) = self.key(file, max_rows) else {
            return;
        };
        if key[5] != 0 || rows.is_empty() {
            return;
        }
        let bytes = (MAGIC.len() + 8 * KEY_WORDS + 8 + 8 * rows.len()) as u64;
        if bytes > CACHE_BYTES / 4 {
            return;
        }
        self.make_room(bytes);
        let path = self.path_of(&key);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut out = Vec::with_capacity(bytes as usize);
            out.extend_from_slice(MAGIC);
            for w in key.iter().chain(std::iter::once(&(rows.len() as u64))) {
                out.extend_from_slice(&w.to_le_bytes());
            }
            for r in rows {
                out.extend_from_slice(&r.pc.to_le_bytes());
                out.push(r.kind);
                out.push(r.rbp_slot);
                out.extend_from_slice(&r.cfa_off8.to_le_bytes());
            }
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)?;
            f.write_all(&out)?;
            // Read back on a later run, not this one: its pages (tens of
            // MB for a host's large binaries, dirty then cached) need not
            // stay charged to the agent's cgroup meanwhile.
            f.sync_data()?;
            crate::sys::cgroup_memory::drop_cached_pages(&f);
            std::fs::rename(&tmp, &path)
        };
        if write().is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }

    /// Make room for a file of `adding` bytes: within the bounds, only
    /// counted; past them, the oldest files are removed.
    fn make_room(&self, adding: u64) {
        let Ok(mut held) = self.held.lock() else {
            return;
        };
        if held.0 < CACHE_FILES && held.1 + adding <= CACHE_BYTES {
            *held = (held.0 + 1, held.1 + adding);
            return;
        }
        let mut files = list(&self.dir);
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        files.sort();
        let mut left = files.len();
        for (_, len, path) in files {
            if left < CACHE_FILES && total + adding <= CACHE_BYTES {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                total -= len;
                left -= 1;
            }
        }
        *held = (left + 1, total + adding);
    }
}

/// The files in `dir`: (modified, bytes, path).
fn list(dir: &std::path::Path) -> Vec<(std::time::SystemTime, u64, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            if !m.is_file() {
                return None;
            }
            Some((m.modified().ok()?, m.len(), e.path()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: u32) -> Vec<Row> {
        (0..n)
            .map(|i| Row {
                pc: i * 16,
                kind: (i % 5) as u8,
                rbp_slot: (i % 3) as u8,
                cfa_off8: (i % 70_000) as u16,
            })
            .collect()
    }

    /// Check that a table comes back as it was put, for the same file
    /// unchanged and the same limit only; that a changed file, another
    /// limit, a damaged or truncated cache file are misses; and that a
    /// directory others may write is refused. Needs root (the cache is
    /// root's alone): said and skipped otherwise.
    #[test]
    fn tables_come_back_only_for_the_same_file() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED tables_come_back_only_for_the_same_file: needs root");
            return;
        }
        let base = std::env::temp_dir().join(format!("sysprof-table-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir(&base).unwrap();
        let cache = TableCache::open_at(base.join("tables")).expect("a root-only directory");
        let lib = base.join("libx.so");
        std::fs::write(&lib, b"a binary").unwrap();
        let file = std::fs::File::open(&lib).unwrap();
        let table = rows(5000);
        assert!(cache.get(&file, 10_000).is_none(), "empty at first");
        cache.put(&file, 10_000, &table);
        assert_eq!(cache.get(&file, 10_000).as_deref(), Some(&table[..]));
        assert!(cache.get(&file, 20_000).is_none(), "another row limit");
        // The file changed (same path, same size): its change time moved.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&lib, b"b binary").unwrap();
        let file = std::fs::File::open(&lib).unwrap();
        assert!(cache.get(&file, 10_000).is_none(), "a changed file");
        // Damaged: a truncated file and a flipped key are misses, removed.
        cache.put(&file, 10_000, &table);
        let kept: Vec<_> = std::fs::read_dir(base.join("tables"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        assert_eq!(kept.len(), 2, "two tables kept: {kept:?}");
        for p in &kept {
            let mut bytes = std::fs::read(p).unwrap();
            bytes.truncate(bytes.len() - 8);
            std::fs::write(p, &bytes).unwrap();
        }
        assert!(cache.get(&file, 10_000).is_none(), "a truncated table");
        cache.put(&file, 10_000, &table);
        for p in std::fs::read_dir(base.join("tables"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
        {
            let mut bytes = std::fs::read(&p).unwrap();
            bytes[10] ^= 1;
            std::fs::write(&p, &bytes).unwrap();
        }
        assert!(
            cache.get(&file, 10_000).is_none(),
            "a key that does not match"
        );
        // A directory others may write to is no cache.
        let open = base.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        assert!(
            TableCache::open_at(open.clone()).is_none(),
            "a world-writable directory"
        );
        assert!(
            TableCache::open_at(open.join("tables")).is_none(),
            "under a world-writable directory"
        );
        let _ = std::fs::remove_dir_all(&base);
    }
}
