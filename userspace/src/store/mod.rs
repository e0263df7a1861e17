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
//! its windows are compacted into level-1 files, as few as compaction's
//! memory budget allows, each sharing one table of libraries, frames and
//! stacks (that is what makes a sample cost a few bytes: in a 10-second file
//! the names dominate). A compacted file is in place before its inputs are
//! removed; a reader that sees both uses the compacted file (the higher
//! level, else the one holding more windows) and skips the windows it
//! already holds.
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
mod maintain;
mod read;
pub mod segment;

use std::io::Read;
use std::path::{Path, PathBuf};

use dir::DirHandle;

use crate::model::recording::Recording;
use crate::sys::atomic_file;
pub use dir::{private_dir, DirError};
pub use maintain::bucket_ms;
pub use read::ReadError;
use segment::{SegmentError, SegmentHeader, WindowSpan};

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

/// Windows read back for a range, with what could not be read (the
/// store's tests; `show` reads them one at a time).
#[cfg(test)]
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

/// Why the store could not be opened or a window not written (one line;
/// the caller adds the option that chooses another store).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The directory was refused or could not be made.
    #[error(transparent)]
    Dir(#[from] DirError),
    /// It changed hands between the check and the open.
    #[error("the store {} changed while it was opened (now uid {uid}, mode {mode:o})", path.display())]
    Changed {
        /// Its path.
        path: PathBuf,
        /// Its owner now.
        uid: u32,
        /// Its mode now.
        mode: u32,
    },
    /// A file cannot be created in it (read-only mount, full disk).
    #[error("cannot write to the store {}: {source}", path.display())]
    NotWritable {
        /// Its path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The window could not be encoded.
    #[error(transparent)]
    Encode(#[from] SegmentError),
    /// The segment could not be written, synced or renamed into place.
    #[error("cannot write a window to the store: {}: {source}", path.display())]
    Write {
        /// The segment's path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl Store {
    /// Open the store at `dir`. With `create`, make it (mode 0700) if it
    /// does not exist and check it can be written; either way refuse a
    /// directory that is a symlink, is not owned by us, or that others can
    /// write to.
    pub fn open(dir: &Path, create: bool) -> Result<Store, StoreError> {
        const WHAT: &str = "the store";
        let path = || dir.to_path_buf();
        if create {
            private_dir(dir, WHAT)?;
        } else {
            let meta = std::fs::symlink_metadata(dir).map_err(|source| DirError::Open {
                what: WHAT,
                path: path(),
                source,
            })?;
            if meta.file_type().is_symlink() {
                return Err(DirError::Symlink {
                    what: WHAT,
                    path: path(),
                }
                .into());
            }
            if !meta.is_dir() {
                return Err(DirError::NotADirectory {
                    what: WHAT,
                    path: path(),
                }
                .into());
            }
        }
        let handle = DirHandle::open(dir).map_err(|source| DirError::Open {
            what: WHAT,
            path: path(),
            source,
        })?;
        let store = Store { dir: handle };
        if create {
            // Checked again on what was opened: the path may have changed
            // hands between the check and the open.
            let meta = store.dir.metadata().map_err(|source| DirError::Open {
                what: WHAT,
                path: path(),
                source,
            })?;
            // SAFETY: geteuid cannot fail.
            let euid = unsafe { libc::geteuid() };
            if meta.st_uid != euid || meta.st_mode & 0o022 != 0 {
                return Err(StoreError::Changed {
                    path: path(),
                    uid: meta.st_uid,
                    mode: meta.st_mode & 0o7777,
                });
            }
            // Fail now, not at the first window: a read-only mount, a full disk.
            let probe = atomic_file::temp_name(SEGMENT_SUFFIX);
            match store.dir.create_new(&probe) {
                Ok(_) => {
                    let _ = store.dir.remove(&probe);
                }
                Err(source) => {
                    return Err(StoreError::NotWritable {
                        path: path(),
                        source,
                    })
                }
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
        atomic_file::write_in(&self.dir, name, ".cursor", bytes)
    }

    /// Write `rec` (holding `windows`) as a segment at `level`; in place
    /// completely or not at all when this returns.
    pub fn write(
        &self,
        rec: Recording,
        windows: Vec<WindowSpan>,
        level: u8,
    ) -> Result<SegmentInfo, StoreError> {
        // Compacted segments at zstd 6, not higher: on a soak's 1.9-MB
        // compaction inputs level 12 saved 0.5 % of the bytes and its match
        // tables took 31 MB against 9 MB (`zstd -6`/`-12`, max RSS), the
        // largest single allocation of the agent's peak (heaptrack).
        let zlevel = if level == 0 { 3 } else { 6 };
        let (header, bytes) = segment::encode(rec, windows, level, zlevel)?;
        let name = format!(
            "{:013}-{:013}.L{level}.seg",
            header.start_ms.max(0.0) as u64,
            header.end_ms.max(0.0).ceil() as u64
        );
        let path = self.dir.display_path(&name);
        if let Err(source) = atomic_file::write_in(&self.dir, &name, SEGMENT_SUFFIX, &bytes) {
            return Err(StoreError::Write { path, source });
        }
        Ok(SegmentInfo {
            path,
            bytes: bytes.len() as u64,
            header,
        })
    }
}

/// How segments' names end, their temporaries' too (`.tmp-<random>.seg`).
const SEGMENT_SUFFIX: &str = ".seg";

/// The name in the store of a segment's `path` (made by [`DirHandle::display_path`]).
fn file_name(path: &Path) -> &str {
    path.file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
