//! The store's directory: checked before it is opened, then used through
//! its handle ([`DirHandle`], in `sys::dir`: every file operation relative
//! to the directory opened at start, never to its path).
//!
//! In: the path of a directory the agent writes (or `show` reads). Out:
//! [`check_ancestors`], which refuses
//! a path inside a directory another user could change (they could swap
//! the store, or a directory on the way to it, before it is opened); and
//! [`private_dir`], which makes a directory of ours nobody else can write
//! (the store, the pprof directory) or refuses the one that is there.
//!
//! The path is kept only to name the directory in messages.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

pub use crate::sys::dir::DirHandle;

/// Why a directory of ours was refused or could not be made; `what` names
/// it ("the store"), and the caller adds the option that chooses another.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    /// The path could not be made absolute.
    #[error("cannot tell where {what} {} is: {source}", path.display())]
    Locate {
        /// What the directory is.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A directory on the way belongs to another user.
    #[error("{what} {} is inside {}, which belongs to uid {uid}, who could swap it for a link to anywhere ({ANCESTOR_RULE})", path.display(), ancestor.display())]
    AncestorOwner {
        /// What the directory is.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// The directory on the way.
        ancestor: PathBuf,
        /// Its owner.
        uid: u32,
    },
    /// A directory on the way can be written by others (no sticky bit).
    #[error("{what} {} is inside {}, which others can write (mode {mode:o}) and so swap it for a link to anywhere ({ANCESTOR_RULE})", path.display(), ancestor.display())]
    AncestorWritable {
        /// What the directory is.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// The directory on the way.
        ancestor: PathBuf,
        /// Its mode.
        mode: u32,
    },
    /// It could not be created.
    #[error("cannot create {what} {}: {source}", path.display())]
    Create {
        /// What the directory is.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It could not be opened or its status read.
    #[error("cannot open {what} {}: {source}", path.display())]
    Open {
        /// What the directory is.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A symlink is in its place.
    #[error("{what} {} is a symlink, not the real directory", path.display())]
    Symlink {
        /// What the directory is.
        what: &'static str,
        /// Its path.
        path: PathBuf,
    },
    /// Something else than a directory is in its place.
    #[error("{what} {} is not a directory", path.display())]
    NotADirectory {
        /// What the directory is.
        what: &'static str,
        /// Its path.
        path: PathBuf,
    },
    /// It belongs to another user.
    #[error("{what} {} belongs to uid {uid}, not to us (uid {euid})", path.display())]
    NotOurs {
        /// What the directory is.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// Its owner.
        uid: u32,
        /// Our effective uid.
        euid: u32,
    },
    /// Others can write it.
    #[error("{what} {} can be written by others (mode {mode:o}); `chmod go-w` it", path.display())]
    WritableByOthers {
        /// What the directory is.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// Its mode.
        mode: u32,
    },
}

/// What [`check_ancestors`] asks of the directories above (the caller adds
/// which option chooses another place).
const ANCESTOR_RULE: &str = "every directory above it must be root's and not writable by others";

/// Refuse `path` (`what`, "the store", names it) when a directory on the
/// way to it, as given or with its symlinks resolved, could be changed by
/// another user than root and us: one that another user owns, or that
/// others may write without the sticky bit (which keeps them from renaming
/// or removing what is not theirs, as in /tmp). Such a user could replace
/// the directory, or one on its way, by a link to a place of their choosing
/// before it is opened. Checks only what exists; creates nothing.
pub fn check_ancestors(path: &Path, what: &'static str) -> Result<(), DirError> {
    let absolute = std::path::absolute(path).map_err(|source| DirError::Locate {
        what,
        path: path.to_path_buf(),
        source,
    })?;
    check_ancestors_of(&absolute, path, what)?;
    // The same with symlinks resolved, from the deepest part that exists.
    let existing = absolute
        .ancestors()
        .find(|a| a.exists())
        .unwrap_or(Path::new("/"));
    if let Ok(real) = std::fs::canonicalize(existing) {
        // The existing part itself is an ancestor too, unless it is the path.
        let probe = if existing == absolute {
            real
        } else {
            real.join("x")
        };
        check_ancestors_of(&probe, path, what)?;
    }
    Ok(())
}

/// [`check_ancestors`] over the lexical ancestors of the absolute `absolute`.
fn check_ancestors_of(absolute: &Path, given: &Path, what: &'static str) -> Result<(), DirError> {
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    for ancestor in absolute.ancestors().skip(1) {
        let Ok(meta) = std::fs::symlink_metadata(ancestor) else {
            continue;
        };
        if meta.uid() != 0 && meta.uid() != euid {
            return Err(DirError::AncestorOwner {
                what,
                path: given.to_path_buf(),
                ancestor: ancestor.to_path_buf(),
                uid: meta.uid(),
            });
        }
        if meta.is_dir() && meta.mode() & 0o022 != 0 && meta.mode() & libc::S_ISVTX == 0 {
            return Err(DirError::AncestorWritable {
                what,
                path: given.to_path_buf(),
                ancestor: ancestor.to_path_buf(),
                mode: meta.mode() & 0o7777,
            });
        }
    }
    Ok(())
}

/// Create `dir` (mode 0700) if it is missing and check that it is a
/// directory of ours nobody else can write: a planted or shared directory
/// would let its owner read, remove or replace what root writes there.
/// `what` names it in errors ("the store"); the caller adds the option
/// that chooses another.
pub fn private_dir(dir: &Path, what: &'static str) -> Result<(), DirError> {
    check_ancestors(dir, what)?;
    let path = || dir.to_path_buf();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| DirError::Create {
            what,
            path: path(),
            source,
        })?;
    let meta = std::fs::symlink_metadata(dir).map_err(|source| DirError::Open {
        what,
        path: path(),
        source,
    })?;
    if meta.file_type().is_symlink() {
        return Err(DirError::Symlink { what, path: path() });
    }
    if !meta.is_dir() {
        return Err(DirError::NotADirectory { what, path: path() });
    }
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    if meta.uid() != euid {
        return Err(DirError::NotOurs {
            what,
            path: path(),
            uid: meta.uid(),
            euid,
        });
    }
    if meta.mode() & 0o022 != 0 {
        return Err(DirError::WritableByOthers {
            what,
            path: path(),
            mode: meta.mode() & 0o7777,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sysprof-dir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Check that a path inside a group- or world-writable directory
    /// without the sticky bit is refused, and with the sticky bit (as /tmp)
    /// it is not; also through a symlink to such a directory.
    #[test]
    fn writable_parents_are_refused_unless_sticky() {
        let d = dir("ancestors");
        let shared = d.join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = check_ancestors(&shared.join("a/store"), "the store")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("others can write") && e.contains("shared") && !e.contains('\n'),
            "{e}"
        );
        // Through a link that hides it.
        std::os::unix::fs::symlink(&shared, d.join("link")).unwrap();
        let e = check_ancestors(&d.join("link/store"), "the store")
            .unwrap_err()
            .to_string();
        assert!(e.contains("others can write"), "{e}");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        check_ancestors(&shared.join("a/store"), "the store").unwrap();
        check_ancestors(&d.join("store"), "the store").unwrap();
        let _ = std::fs::remove_dir_all(&d);
    }
}
