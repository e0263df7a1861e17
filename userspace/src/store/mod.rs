//! The local store: the agent's flight recorder, a directory of segment files.
//!
//! In: finished windows from the agent. Out: windows of any time range for
//! `sysprof show`, with per-sample timestamps, threads and stacks, off-CPU
//! intervals, markers, counters, names and build ids (the whole
//! [`Recording`], so `show` gives the profile `record` would have).
//!
//! Why files and not SQLite: every window is written once and never
//! changed, read whole, and deleted whole, oldest first. A directory of
//! immutable files does exactly that with the kernel's own guarantees: a
//! segment is written to a hidden temporary, fsynced and renamed into place
//! (then the directory is fsynced), so a reader, or the agent after SIGKILL
//! or power loss, sees a window completely or not at all, without a lock,
//! a journal or a recovery step; readers and the writer never wait for one
//! another; retention is `unlink`. A database would add a second copy of
//! each blob (WAL), a C library in a root daemon, and a single file whose
//! damage costs every window. The format of one file is in [`segment`].
//!
//! Names are `<start ms>-<end ms>.L<level>.seg` (wall clock, ms since the
//! epoch, zero-padded: `ls` sorts them by time). The agent writes level 0,
//! one window per file; once a 10-minute bucket of wall-clock time is over,
//! its windows are compacted into one level-1 file that shares one table of
//! libraries, frames and stacks (that is what makes a sample cost a few
//! bytes: in a 10-second file the names dominate). The compacted file is in
//! place before its inputs are removed; a reader that sees both uses the
//! level-1 file and skips the windows it already holds.
//!
//! The directory holds every process's command lines and stacks: it is
//! created mode 0700, and one that is a symlink, not ours, or writable by
//! others is refused (a planted directory would let its owner read or
//! replace what root writes), as is one inside a directory another user
//! could change. It is opened once ([`dir::DirHandle`]) and every file is
//! reached through that handle, never through the path again: swapping the
//! directory for a symlink after start moves no write and no delete.

pub mod dir;
pub(crate) mod format;
pub mod segment;

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use dir::DirHandle;

use crate::model::merge;
use crate::model::recording::Recording;
use segment::{SegmentHeader, WindowSpan};

/// Most bytes of segments compacted into one, counted decompressed (the
/// header's `raw_len`): decoding and merging takes a few times that in
/// memory, and zstd's ratio varies tenfold between windows (a fork storm's
/// command lines and names compress far better than samples), so the budget
/// on the compressed size let a run of fork-storm windows take the agent's
/// RSS to 147 MB in the bench. A bucket is compacted in several runs rather
/// than decoded whole.
const COMPACT_INPUT_RAW_BYTES: u64 = 2 << 20;

/// Wall-clock span of a compacted (level 1) segment.
pub const BUCKET_MS: f64 = 600_000.0;

/// The compaction bucket in use: [`BUCKET_MS`], unless the environment sets
/// `SYSPROF_STORE_BUCKET_SECONDS` (the integration tests do, to see
/// compaction race with readers in seconds rather than ten minutes).
pub fn bucket_ms() -> f64 {
    static B: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *B.get_or_init(|| {
        std::env::var("SYSPROF_STORE_BUCKET_SECONDS")
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|&v| v >= 1.0)
            .map(|v| v * 1e3)
            .unwrap_or(BUCKET_MS)
    })
}

/// A store directory, checked and held open.
#[derive(Debug, Clone)]
pub struct Store {
    dir: DirHandle,
}

/// One segment file and what its header says.
#[derive(Debug, Clone)]
pub struct SegmentInfo {
    /// The file.
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// Its header.
    pub header: SegmentHeader,
}

/// Windows read back for a range, with what could not be read.
#[derive(Debug, Default)]
pub struct Query {
    /// The segments' recordings, each holding windows the others do not.
    pub recordings: Vec<Recording>,
    /// One line per segment skipped, naming the file and why.
    pub warnings: Vec<String>,
}

/// What retention removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Retained {
    /// Segments removed.
    pub removed: u64,
    /// Bytes freed.
    pub freed: u64,
    /// Bytes the store holds after.
    pub bytes: u64,
}

fn io_err(path: &Path, e: std::io::Error) -> String {
    format!("{}: {e}", path.display())
}

/// Create `dir` (mode 0700) if it is missing and check that it is a
/// directory of ours nobody else can write: a planted or shared directory
/// would let its owner read, remove or replace what root writes there.
/// `what` names it in errors ("the store"); the caller adds the option
/// that chooses another.
pub fn private_dir(dir: &Path, what: &str) -> Result<(), String> {
    dir::check_ancestors(dir, what)?;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| format!("cannot create {what} {}: {e}", dir.display()))?;
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("cannot open {what} {}: {e}", dir.display()))?;
    if meta.file_type().is_symlink() {
        return Err(format!("{what} {} is a symlink, not the real directory", dir.display()));
    }
    if !meta.is_dir() {
        return Err(format!("{what} {} is not a directory", dir.display()));
    }
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    if meta.uid() != euid {
        return Err(format!("{what} {} belongs to uid {}, not to us (uid {euid})", dir.display(), meta.uid()));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!("{what} {} can be written by others (mode {:o}); `chmod go-w` it", dir.display(), meta.mode() & 0o7777));
    }
    Ok(())
}

impl Store {
    /// Open the store at `dir`. With `create`, make it (mode 0700) if it
    /// does not exist and check it can be written; either way refuse a
    /// directory that is a symlink, is not owned by us, or that others can
    /// write to.
    pub fn open(dir: &Path, create: bool) -> Result<Store, String> {
        if create {
            private_dir(dir, "the store")?;
        } else {
            let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("cannot open the store {}: {e}", dir.display()))?;
            if meta.file_type().is_symlink() {
                return Err(format!("the store {} is a symlink, not the real directory", dir.display()));
            }
            if !meta.is_dir() {
                return Err(format!("the store {} is not a directory", dir.display()));
            }
        }
        let handle = DirHandle::open(dir).map_err(|e| format!("cannot open the store {}: {e}", dir.display()))?;
        let store = Store { dir: handle };
        if create {
            // Checked again on what was opened: the path may have changed
            // hands between the check and the open.
            let meta = store.dir.metadata().map_err(|e| format!("cannot open the store {}: {e}", dir.display()))?;
            // SAFETY: geteuid cannot fail.
            let euid = unsafe { libc::geteuid() };
            if meta.st_uid != euid || meta.st_mode & 0o022 != 0 {
                return Err(format!(
                    "the store {} changed while it was opened (now uid {}, mode {:o})",
                    dir.display(),
                    meta.st_uid,
                    meta.st_mode & 0o7777
                ));
            }
            // Fail now, not at the first window: a read-only mount, a full disk.
            let probe = temp_name();
            match store.dir.create_new(&probe) {
                Ok(_) => {
                    let _ = store.dir.remove(&probe);
                }
                Err(e) => return Err(format!("cannot write to the store {}: {e}", dir.display())),
            }
        }
        Ok(store)
    }

    /// The directory's path (for messages: files are reached through the handle).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The contents of the small file `name` of the store (a cursor), if it
    /// is there and a regular file; at most 4 KiB of it.
    pub fn read_small(&self, name: &str) -> Option<String> {
        let f = self.dir.open_read(name).ok()?;
        if !f.metadata().ok()?.is_file() {
            return None;
        }
        let mut text = String::new();
        f.take(4096).read_to_string(&mut text).ok()?;
        Some(text)
    }

    /// Replace the small file `name` of the store with `bytes`, through a
    /// temporary renamed over it (a reader sees the old or the new).
    pub fn replace_small(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        let temp = format!("{name}.{}", crate::sys::random::random_suffix());
        let r = self.dir.create_new(&temp).and_then(|mut f| f.write_all(bytes)).and_then(|()| self.dir.rename(&temp, name));
        if r.is_err() {
            let _ = self.dir.remove(&temp);
        }
        r
    }

    /// Remove temporaries a killed writer left behind.
    pub fn remove_stale_temporaries(&self) -> u64 {
        let mut n = 0;
        for name in self.dir.names().unwrap_or_default() {
            let Some(name) = name.to_str() else { continue };
            if name.starts_with(".tmp-") && name.ends_with(".seg") && self.dir.remove(name).is_ok() {
                n += 1;
            }
        }
        n
    }

    /// Write `rec` (holding `windows`) as a segment at `level`; in place
    /// completely or not at all when this returns.
    pub fn write(&self, rec: Recording, windows: Vec<WindowSpan>, level: u8) -> Result<SegmentInfo, String> {
        let zlevel = if level == 0 { 3 } else { 12 };
        let (header, bytes) = segment::encode(rec, windows, level, zlevel).map_err(|e| e.to_string())?;
        let name = format!("{:013}-{:013}.L{level}.seg", header.start_ms.max(0.0) as u64, header.end_ms.max(0.0).ceil() as u64);
        let path = self.dir.display_path(&name);
        let temp = temp_name();
        let result = (|| {
            let mut f = self.dir.create_new(&temp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            self.dir.rename(&temp, &name)?;
            self.dir.sync()
        })();
        if let Err(e) = result {
            let _ = self.dir.remove(&temp);
            return Err(format!("cannot write a window to the store: {}", io_err(&path, e)));
        }
        Ok(SegmentInfo { path, bytes: bytes.len() as u64, header })
    }

    /// Every segment, oldest first, and a warning per file that is not one.
    pub fn list(&self) -> (Vec<SegmentInfo>, Vec<String>) {
        let mut out = Vec::new();
        let mut warnings = Vec::new();
        let names = match self.dir.names() {
            Ok(names) => names,
            Err(e) => return (out, vec![format!("cannot list the store: {}", io_err(self.dir.path(), e))]),
        };
        for name in names {
            // Ours are ASCII; another name is no segment of ours.
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') || !name.ends_with(".seg") {
                continue;
            }
            let path = self.dir.display_path(name);
            match read_header(&self.dir, name) {
                Ok((header, bytes)) => out.push(SegmentInfo { path, bytes, header }),
                // Removed by compaction or retention since the listing: not damage.
                Err(HeaderError::Gone) => {}
                Err(HeaderError::Bad(why)) => warnings.push(format!("skipping {}: {why}", path.display())),
            }
        }
        out.sort_by(|a, b| a.header.start_ms.total_cmp(&b.header.start_ms).then(b.header.level.cmp(&a.header.level)));
        (out, warnings)
    }

    /// Segments whose windows overlap [since_ms, until_ms], each window
    /// once: compacted segments are preferred over the windows they hold.
    pub fn select(segments: &[SegmentInfo], since_ms: f64, until_ms: f64) -> Vec<SegmentInfo> {
        let mut by_level: Vec<&SegmentInfo> = segments.iter().filter(|s| s.header.end_ms >= since_ms && s.header.start_ms <= until_ms).collect();
        by_level.sort_by(|a, b| b.header.level.cmp(&a.header.level).then(a.header.start_ms.total_cmp(&b.header.start_ms)));
        let mut chosen: Vec<SegmentInfo> = Vec::new();
        let mut held: Vec<(f64, f64)> = Vec::new();
        for s in by_level {
            let dup = s.header.windows.iter().any(|w| held.iter().any(|&(a, b)| w.start_ms >= a - 0.5 && w.end_ms <= b + 0.5));
            if dup {
                continue;
            }
            held.extend(s.header.windows.iter().map(|w| (w.start_ms, w.end_ms)));
            chosen.push(s.clone());
        }
        chosen.sort_by(|a, b| a.header.start_ms.total_cmp(&b.header.start_ms));
        chosen
    }

    /// Read one segment's recording.
    pub fn read(&self, seg: &SegmentInfo) -> Result<Recording, ReadError> {
        let bytes = read_file(&self.dir, file_name(&seg.path)).map_err(|e| match e {
            HeaderError::Gone => ReadError::Gone,
            HeaderError::Bad(w) => ReadError::Bad(w),
        })?;
        segment::decode(&bytes).map(|(_, r)| r).map_err(|e| ReadError::Bad(e.to_string()))
    }

    /// The windows overlapping [since_ms, until_ms]. A damaged segment is a
    /// warning; one removed by compaction while we read makes us list again
    /// (its windows are in the compacted file by then).
    pub fn query(&self, since_ms: f64, until_ms: f64) -> Query {
        for _attempt in 0..5 {
            let (all, mut warnings) = self.list();
            let mut q = Query::default();
            let mut raced = false;
            for seg in Self::select(&all, since_ms, until_ms) {
                match self.read(&seg) {
                    Ok(r) => q.recordings.push(r),
                    Err(ReadError::Gone) => {
                        raced = true;
                        break;
                    }
                    Err(ReadError::Bad(why)) => warnings.push(format!("skipping {}: {why}", seg.path.display())),
                }
            }
            if !raced {
                q.warnings = warnings;
                return q;
            }
        }
        Query { recordings: Vec::new(), warnings: vec!["the store kept changing while it was read; try again".into()] }
    }

    /// Remove the oldest segments of `index` (the writer's view of the
    /// store, kept up to date by it) until the store holds at most
    /// `max_bytes` and nothing that ended before `oldest_ms`.
    pub fn enforce_retention(&self, index: &mut Vec<SegmentInfo>, max_bytes: u64, oldest_ms: f64) -> Retained {
        index.sort_by(|a, b| a.header.end_ms.total_cmp(&b.header.end_ms));
        let mut total: u64 = index.iter().map(|s| s.bytes).sum();
        let mut r = Retained::default();
        let mut keep_from = 0;
        for s in index.iter() {
            if total <= max_bytes && s.header.end_ms >= oldest_ms {
                break;
            }
            match self.dir.remove(file_name(&s.path)) {
                Ok(()) => {
                    r.removed += 1;
                    r.freed += s.bytes;
                }
                // Gone already (removed by hand): it no longer counts.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(_) => break,
            }
            total -= s.bytes;
            keep_from += 1;
        }
        index.drain(..keep_from);
        r.bytes = total;
        r
    }

    /// Compact every 10-minute bucket of `index` that ended before `now_ms`
    /// and holds more than one segment into one level-1 segment. Returns
    /// the segments written; a bucket whose inputs cannot all be read is
    /// left as it is (with a warning), never half compacted.
    pub fn compact(&self, index: &mut Vec<SegmentInfo>, now_ms: f64, warnings: &mut Vec<String>) -> u64 {
        let mut buckets: std::collections::BTreeMap<i64, Vec<SegmentInfo>> = Default::default();
        let bucket = bucket_ms();
        for s in index.iter() {
            let b = (s.header.start_ms / bucket).floor() as i64;
            if (b as f64 + 1.0) * bucket <= now_ms {
                buckets.entry(b).or_default().push(s.clone());
            }
        }
        let mut written = 0;
        for (_, group) in buckets {
            let group = Self::select(&group, f64::NEG_INFINITY, f64::INFINITY);
            // Runs of the bucket whose inputs fit the budget: a bucket of a
            // fork storm would otherwise be decoded whole into memory.
            let mut runs: Vec<Vec<SegmentInfo>> = Vec::new();
            let mut run_bytes = 0;
            for s in group {
                if runs.is_empty() || run_bytes + s.header.raw_len > COMPACT_INPUT_RAW_BYTES {
                    runs.push(Vec::new());
                    run_bytes = 0;
                }
                run_bytes += s.header.raw_len;
                runs.last_mut().expect("pushed").push(s);
            }
            for group in runs {
                written += self.compact_run(index, group, warnings);
            }
        }
        written
    }

    /// Compact one run of segments into one; see [`Store::compact`].
    fn compact_run(&self, index: &mut Vec<SegmentInfo>, group: Vec<SegmentInfo>, warnings: &mut Vec<String>) -> u64 {
        if group.len() < 2 {
            return 0;
        }
        let mut recs = Vec::with_capacity(group.len());
        let mut windows = Vec::new();
        for s in &group {
            match self.read(s) {
                Ok(r) => {
                    recs.push(r);
                    windows.extend(s.header.windows.iter().copied());
                }
                Err(e) => {
                    if let ReadError::Bad(why) = e {
                        warnings.push(format!("not compacting around {}: {why}", s.path.display()));
                    }
                    return 0;
                }
            }
        }
        match self.write(merge::merge(recs), windows, 1) {
            Ok(info) => {
                for s in &group {
                    let _ = self.dir.remove(file_name(&s.path));
                }
                index.retain(|x| !group.iter().any(|g| g.path == x.path));
                index.push(info);
                1
            }
            Err(e) => {
                warnings.push(e);
                0
            }
        }
    }

    /// Remove segments whose every window a compacted segment holds (the
    /// inputs a compaction killed before it removed them left behind).
    pub fn remove_superseded(&self, index: &mut Vec<SegmentInfo>) -> u64 {
        let kept = Self::select(index, f64::NEG_INFINITY, f64::INFINITY);
        let mut removed = 0;
        index.retain(|s| {
            let keep = kept.iter().any(|k| k.path == s.path);
            if !keep && self.dir.remove(file_name(&s.path)).is_ok() {
                removed += 1;
            }
            keep
        });
        removed
    }
}

/// Why a segment could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// It was removed (by compaction or retention) since it was listed.
    Gone,
    /// It is damaged; why.
    Bad(String),
}

enum HeaderError {
    Gone,
    Bad(String),
}

/// Largest segment read whole.
const MAX_SEGMENT: u64 = 1 << 30;

/// A hidden temporary's name for a segment being written.
fn temp_name() -> String {
    format!(".tmp-{}.seg", crate::sys::random::random_suffix())
}

/// The name in the store of a segment's `path` (made by [`DirHandle::display_path`]).
fn file_name(path: &Path) -> &str {
    path.file_name().and_then(|n| n.to_str()).unwrap_or_default()
}

fn open_segment(dir: &DirHandle, name: &str) -> Result<(std::fs::File, u64), HeaderError> {
    let f = dir.open_read(name).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            HeaderError::Gone
        } else {
            HeaderError::Bad(e.to_string())
        }
    })?;
    let meta = f.metadata().map_err(|e| HeaderError::Bad(e.to_string()))?;
    if !meta.is_file() {
        return Err(HeaderError::Bad("not a regular file".into()));
    }
    Ok((f, meta.len()))
}

fn read_header(dir: &DirHandle, name: &str) -> Result<(SegmentHeader, u64), HeaderError> {
    let (mut f, len) = open_segment(dir, name)?;
    let mut prefix = [0u8; 20];
    f.read_exact(&mut prefix).map_err(|_| HeaderError::Bad("shorter than a segment's header (truncated)".into()))?;
    let need = segment::header_read_len(&prefix).ok_or_else(|| HeaderError::Bad("header length out of range".into()))?;
    if need as u64 > len {
        return Err(HeaderError::Bad("header longer than the file (truncated)".into()));
    }
    let mut bytes = vec![0u8; need];
    bytes[..20].copy_from_slice(&prefix);
    f.read_exact(&mut bytes[20..]).map_err(|e| HeaderError::Bad(e.to_string()))?;
    segment::decode_header(&bytes, len).map(|(h, _)| (h, len)).map_err(|e| HeaderError::Bad(e.to_string()))
}

fn read_file(dir: &DirHandle, name: &str) -> Result<Vec<u8>, HeaderError> {
    let (f, len) = open_segment(dir, name)?;
    if len > MAX_SEGMENT {
        return Err(HeaderError::Bad(format!("{len} bytes, more than a segment can be")));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    f.take(len).read_to_end(&mut bytes).map_err(|e| HeaderError::Bad(e.to_string()))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sysprof-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn window(start_ms: f64, start_ns: u64) -> (Recording, Vec<WindowSpan>) {
        let mut r = segment::tests::sample_recording(start_ns);
        r.start_wall_ms = start_ms;
        (r, vec![WindowSpan { start_ms, end_ms: start_ms + 10_000.0 }])
    }

    /// Check that windows written come back by range, that compaction
    /// keeps every window once (and a reader seeing both the compacted file
    /// and its inputs counts each window once), and that retention drops
    /// the oldest first.
    #[test]
    fn write_query_compact_retain() {
        let d = dir("cycle");
        let store = Store::open(&d, true).unwrap();
        let t0 = 1_800_000_000_000.0; // a bucket boundary
        let mut inputs = Vec::new();
        for i in 0..6 {
            let (r, w) = window(t0 + i as f64 * 10_000.0, 1_000_000_000 + i * 10_000_000_000);
            inputs.push(store.write(r, w, 0).unwrap());
        }
        let q = store.query(t0, t0 + 60_000.0);
        assert_eq!(q.recordings.len(), 6);
        assert!(q.warnings.is_empty(), "{:?}", q.warnings);
        let q = store.query(t0 + 25_000.0, t0 + 35_000.0);
        assert_eq!(q.recordings.len(), 2, "windows 2 and 3 overlap the range");

        // A compacted copy beside its inputs (as a killed compaction leaves it).
        let recs: Vec<Recording> = inputs.iter().map(|s| store.read(s).unwrap()).collect();
        let windows: Vec<WindowSpan> = inputs.iter().flat_map(|s| s.header.windows.clone()).collect();
        let merged = merge::merge(recs);
        assert_eq!(merged.sample_count(), 18);
        store.write(merged, windows, 1).unwrap();
        let q = store.query(t0, t0 + 60_000.0);
        assert_eq!(q.recordings.len(), 1, "the compacted segment, not its inputs too");
        assert_eq!(q.recordings[0].sample_count(), 18);
        // The inputs a killed compaction left are removed.
        let mut index = store.list().0;
        assert_eq!(store.remove_superseded(&mut index), 6);
        assert_eq!(store.list().0.len(), 1);

        // Compaction of a finished bucket; an unfinished one is left alone.
        let t1 = t0 + BUCKET_MS;
        for i in 0..3 {
            let (r, w) = window(t1 + i as f64 * 10_000.0, 700_000_000_000 + i * 10_000_000_000);
            index.push(store.write(r, w, 0).unwrap());
        }
        let mut warnings = Vec::new();
        assert_eq!(store.compact(&mut index, t1 + 30_000.0, &mut warnings), 0, "its bucket is not over");
        assert_eq!(store.compact(&mut index, t1 + BUCKET_MS, &mut warnings), 1, "{warnings:?}");
        assert_eq!(index.len(), 2);
        assert_eq!(store.list().0.len(), 2);
        let q = store.query(t1, t1 + BUCKET_MS);
        assert_eq!(q.recordings.iter().map(|r| r.sample_count()).sum::<u64>(), 9);

        // Retention: everything older than the age limit goes, then by size.
        let r = store.enforce_retention(&mut index, u64::MAX, t1);
        assert_eq!(r.removed, 1);
        assert_eq!(store.list().0.len(), 1);
        let r = store.enforce_retention(&mut index, 0, 0.0);
        assert_eq!(r.removed, 1);
        assert_eq!(r.bytes, 0);
        assert!(index.is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Check that a damaged segment is skipped with a warning naming it,
    /// and the others are still read.
    #[test]
    fn damaged_segment_is_a_warning() {
        let d = dir("damaged");
        let store = Store::open(&d, true).unwrap();
        let t0 = 1_800_000_000_000.0;
        let a = store.write(window(t0, 1).0, window(t0, 1).1, 0).unwrap();
        store.write(window(t0 + 10_000.0, 2).0, window(t0 + 10_000.0, 2).1, 0).unwrap();
        let mut bytes = std::fs::read(&a.path).unwrap();
        let n = bytes.len();
        bytes[n - 3] ^= 0xff;
        std::fs::write(&a.path, &bytes).unwrap();
        std::fs::write(d.join("0000000000001-0000000000002.L0.seg"), b"garbage").unwrap();
        let q = store.query(0.0, f64::INFINITY);
        assert_eq!(q.recordings.len(), 1);
        assert_eq!(q.warnings.len(), 2, "{:?}", q.warnings);
        assert!(q.warnings.iter().any(|w| w.contains(&a.path.display().to_string()) && w.contains("checksum")), "{:?}", q.warnings);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Check that once the store is open, swapping its directory for a
    /// symlink to another directory moves neither a segment write nor a
    /// retention delete there: the segment lands in the directory opened,
    /// and a file of the same name in the link's target survives retention.
    #[test]
    fn a_store_swapped_for_a_symlink_keeps_writing_where_it_was_opened() {
        let d = dir("swapped");
        std::fs::create_dir_all(&d).unwrap();
        let (path, moved, target) = (d.join("store"), d.join("moved"), d.join("target"));
        let store = Store::open(&path, true).unwrap();
        std::fs::create_dir(&target).unwrap();
        std::fs::rename(&path, &moved).unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();

        let t0 = 1_800_000_000_000.0;
        let (r, w) = window(t0, 1);
        let seg = store.write(r, w, 0).unwrap();
        let name = seg.path.file_name().unwrap().to_owned();
        assert!(moved.join(&name).is_file(), "the segment is in the directory opened");
        assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0, "nothing was written through the link");
        assert_eq!(store.query(0.0, f64::INFINITY).recordings.len(), 1, "read back through the handle");

        std::fs::write(target.join(&name), b"not ours").unwrap();
        let mut index = store.list().0;
        assert_eq!(store.enforce_retention(&mut index, 0, 0.0).removed, 1);
        assert!(!moved.join(&name).exists(), "retention removed our segment");
        assert_eq!(std::fs::read(target.join(&name)).unwrap(), b"not ours", "retention deleted through the link");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Check that a small file (an exporter's cursor) is replaced whole and
    /// read back, leaves no temporary, and that a symlink in its place is
    /// not followed.
    #[test]
    fn small_files_are_replaced_and_links_not_followed() {
        let d = dir("small");
        let store = Store::open(&d, true).unwrap();
        store.replace_small(".export-x.cursor", b"1.000\n").unwrap();
        store.replace_small(".export-x.cursor", b"2.000\n").unwrap();
        assert_eq!(store.read_small(".export-x.cursor").as_deref(), Some("2.000\n"));
        let names: Vec<_> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, [".export-x.cursor"], "no temporary left");
        let secret = d.with_extension("secret");
        std::fs::write(&secret, b"3.000\n").unwrap();
        std::os::unix::fs::symlink(&secret, d.join(".export-y.cursor")).unwrap();
        assert_eq!(store.read_small(".export-y.cursor"), None);
        let _ = std::fs::remove_file(&secret);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Check that a store directory others could write to, or a symlink,
    /// is refused with a line that says what to do.
    #[test]
    fn unsafe_directories_are_refused() {
        let d = dir("unsafe");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let e = Store::open(&d, true).unwrap_err();
        assert!(e.contains("chmod go-w"), "{e}");
        let l = dir("unsafe-link");
        std::os::unix::fs::symlink(&d, &l).unwrap();
        let e = Store::open(&l, true).unwrap_err();
        assert!(e.contains("symlink"), "{e}");
        let _ = std::fs::remove_file(&l);
        let _ = std::fs::remove_dir_all(&d);
    }
}
