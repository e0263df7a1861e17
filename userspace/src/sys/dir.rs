//! A directory held open, and every file operation in it relative to it.
//!
//! In: the path of a directory (the store, an export directory). Out: a
//! [`DirHandle`] whose every file operation (create, open, rename, remove,
//! list, fsync) is relative to the directory opened (`openat`, `renameat`,
//! `unlinkat` with no symlink followed), never to its path: a user who
//! swaps the directory for a symlink after it is opened does not move a
//! single write or delete. The path is kept only to name it in messages.
//!
//! And for root's caches (`/var/cache/sysprof/...`): whether a directory
//! and every one above it are root's alone ([`is_root_private`]), and such
//! a directory made and opened ([`root_private`]).

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, Mode, OFlags};

/// A directory held open; cloning shares the descriptor.
#[derive(Debug, Clone)]
pub struct DirHandle {
    path: PathBuf,
    fd: Arc<OwnedFd>,
}

impl DirHandle {
    /// Open the directory `path` itself (a symlink in its place is refused).
    pub fn open(path: &Path) -> std::io::Result<DirHandle> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(DirHandle {
            path: path.to_path_buf(),
            fd: Arc::new(fd),
        })
    }

    /// The path it was opened at, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `name`'s path, for messages.
    pub fn display_path(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// The directory's own status (owner, mode), of what is open.
    pub fn metadata(&self) -> std::io::Result<rustix::fs::Stat> {
        Ok(rustix::fs::fstat(&*self.fd)?)
    }

    /// Create `name` (mode 0600) for writing; fails if anything, a symlink
    /// included, is there.
    pub fn create_new(&self, name: &str) -> std::io::Result<std::fs::File> {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        Ok(rustix::fs::openat(&*self.fd, name, flags, Mode::from_raw_mode(0o600))?.into())
    }

    /// Open `name` for reading; a symlink is refused, and a FIFO does not
    /// block the open (the caller checks it is a regular file).
    pub fn open_read(&self, name: &str) -> std::io::Result<std::fs::File> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        Ok(rustix::fs::openat(&*self.fd, name, flags, Mode::empty())?.into())
    }

    /// Rename `from` to `to`, both in this directory (replacing `to`).
    pub fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        Ok(rustix::fs::renameat(&*self.fd, from, &*self.fd, to)?)
    }

    /// Remove the file `name` (a symlink there is removed, not followed).
    pub fn remove(&self, name: &str) -> std::io::Result<()> {
        Ok(rustix::fs::unlinkat(&*self.fd, name, AtFlags::empty())?)
    }

    /// Make renames and removals in the directory durable.
    pub fn sync(&self) -> std::io::Result<()> {
        Ok(rustix::fs::fsync(&*self.fd)?)
    }

    /// The names in the directory, `.` and `..` left out.
    pub fn names(&self) -> std::io::Result<Vec<OsString>> {
        let mut out = Vec::new();
        for entry in rustix::fs::Dir::read_from(&*self.fd)? {
            let name = entry?.file_name().to_bytes().to_vec();
            if name != b"." && name != b".." {
                out.push(OsString::from_vec(name));
            }
        }
        Ok(out)
    }
}

/// Whether `dir` and every directory above it are root's and writable by
/// root alone (an ancestor may be sticky, as /tmp: then nobody else can
/// move what is root's in it): else someone could swap a file or the
/// directory itself under a root process that writes there. A symlink on
/// the way is refused (its own owner is checked, not its target's).
pub fn is_root_private(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let mut at = dir;
    loop {
        let Ok(m) = std::fs::symlink_metadata(at) else {
            return false;
        };
        let shut = m.mode() & 0o022 == 0 || (at != dir && m.mode() & 0o1000 != 0);
        if !m.is_dir() || m.uid() != 0 || !shut {
            return false;
        }
        match at.parent() {
            Some(p) if !p.as_os_str().is_empty() => at = p,
            _ => return true,
        }
    }
}

/// A cache directory of root's (`/var/cache/sysprof/...`): created mode 0700
/// if missing, then opened if [`is_root_private`] holds; None when this
/// process is not root or the directory is not private to root.
pub fn root_private(dir: &Path) -> Option<DirHandle> {
    use std::os::unix::fs::DirBuilderExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir);
    if !is_root_private(dir) {
        return None;
    }
    DirHandle::open(dir).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sysprof-sysdir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Check that after the directory is opened, replacing it by a symlink
    /// to another directory moves no create, rename or removal there: the
    /// files land in (and go from) the directory that was opened.
    #[test]
    fn a_swapped_directory_does_not_redirect_the_handle() {
        let d = dir("swap");
        let (store, moved, target) = (d.join("store"), d.join("moved"), d.join("target"));
        std::fs::create_dir(&store).unwrap();
        std::fs::create_dir(&target).unwrap();
        let handle = DirHandle::open(&store).unwrap();
        std::fs::rename(&store, &moved).unwrap();
        std::os::unix::fs::symlink(&target, &store).unwrap();
        std::fs::write(target.join("victim.seg"), b"theirs").unwrap();
        std::io::Write::write_all(&mut handle.create_new(".tmp").unwrap(), b"ours").unwrap();
        handle.rename(".tmp", "a.seg").unwrap();
        assert_eq!(
            handle.remove("victim.seg").unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
        assert_eq!(std::fs::read(moved.join("a.seg")).unwrap(), b"ours");
        assert_eq!(handle.names().unwrap(), vec![OsString::from("a.seg")]);
        assert_eq!(
            std::fs::read(target.join("victim.seg")).unwrap(),
            b"theirs",
            "the target's file is untouched"
        );
        assert_eq!(
            std::fs::read_dir(&target).unwrap().count(),
            1,
            "nothing was created in the target"
        );
        // And a symlink in the store's place is not opened at all.
        assert!(DirHandle::open(&store).is_err());
        let _ = std::fs::remove_dir_all(&d);
    }
}
