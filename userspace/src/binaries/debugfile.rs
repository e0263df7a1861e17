//! Finding a binary's separate debug file without trusting what the binary
//! or its owner says.
//!
//! In: a [`Binary`] (its path, the uid of the process that mapped it), its
//! build id and `.gnu_debuglink`. Out: an opened debug file, or why none
//! was used. A build id is looked up under the system debug directories
//! only, and what is found there must be a root-owned regular file. A debug
//! link is a file name, never a path: searched next to the binary, in its
//! `.debug` directory and under the system debug directories (gdb's
//! order); next to the binary it must be a regular file (not a symlink)
//! that the process's owner owns (or root, readable by that owner), and its
//! CRC32 must match the link's. Every open is non-blocking, so a FIFO
//! planted under a debug file's name cannot hang us.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use super::{open_regular, Binary, OpenError};

/// Directories searched for separate debug files, as gdb and blazesym do.
pub const DEBUG_DIRS: [&str; 2] = ["/usr/lib/debug", "/lib/debug"];

/// Largest debug file whose CRC is checked (and so used) through a debug link.
const MAX_LINKED_DEBUG_FILE: u64 = 1 << 30;

/// A debug file to symbolize with.
#[derive(Debug)]
pub struct DebugFile {
    /// Where it was found.
    pub path: String,
    /// The opened file.
    pub file: File,
}

/// The debug file under the system debug directories named by `build_id`.
pub fn by_build_id(build_id: &[u8]) -> Option<DebugFile> {
    if build_id.len() < 8 {
        return None;
    }
    let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
    for dir in DEBUG_DIRS {
        let path = format!("{dir}/.build-id/{}/{}.debug", &hex[..2], &hex[2..]);
        if std::fs::symlink_metadata(&path).is_err() {
            continue;
        }
        // Packages install these as symlinks into the same root-owned tree.
        if let Ok(file) = open_regular(&path, true) {
            if file.metadata().is_ok_and(|m| m.uid() == 0) {
                return Some(DebugFile { path, file });
            }
        }
    }
    None
}

/// Why a debug link was not followed.
#[derive(Debug)]
pub enum LinkRefused {
    /// Not a plain file name (a path, `..`, empty, too long).
    NotAFileName(String),
    /// Found, but not a file the process's owner could have used.
    Untrusted(Untrusted),
}

/// Why a file a debug link names next to the binary was not used.
#[derive(Debug, thiserror::Error)]
pub enum Untrusted {
    /// It could not be opened as a regular file.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// Its metadata or its bytes could not be read.
    #[error("{0}")]
    Read(#[source] std::io::Error),
    /// Neither the process's owner's nor root's readable by that owner.
    #[error("{path} is owned by uid {file_uid} with mode {mode:o}; the process runs as {}", runs_as(.uid))]
    NotOwned {
        /// The candidate's path.
        path: String,
        /// Its owner.
        file_uid: u32,
        /// Its permission bits.
        mode: u32,
        /// The process's user, when known.
        uid: Option<u32>,
    },
    /// Too large to have its CRC checked.
    #[error("debug file of {} MiB is larger than the {} MiB checked", .bytes >> 20, MAX_LINKED_DEBUG_FILE >> 20)]
    TooLarge {
        /// Its size.
        bytes: u64,
    },
    /// Its CRC is not the one the link gives.
    #[error("{path}: its CRC does not match the debug link's")]
    CrcMismatch {
        /// The candidate's path.
        path: String,
    },
}

fn runs_as(uid: &Option<u32>) -> String {
    uid.map(|u| u.to_string())
        .unwrap_or_else(|| "an unknown user".into())
}

/// The debug file a `.gnu_debuglink` names (`name`, `crc`), for `bin`.
/// `Ok(None)`: no such file anywhere.
pub fn by_debuglink(bin: &Binary, name: &[u8], crc: u32) -> Result<Option<DebugFile>, LinkRefused> {
    let name =
        std::str::from_utf8(name).map_err(|_| LinkRefused::NotAFileName("not UTF-8".into()))?;
    if name.is_empty()
        || name.len() > 255
        || name.contains('/')
        || name == "."
        || name == ".."
        || name.contains('\0')
    {
        return Err(LinkRefused::NotAFileName(name.chars().take(80).collect()));
    }
    let dir = match bin.path.rsplit_once('/') {
        Some((d, _)) if d.starts_with('/') || d.is_empty() => d.to_string(),
        _ => return Ok(None),
    };
    let mut refused = None;
    // Next to the binary, and in its .debug directory: places its owner controls.
    for candidate in [format!("{dir}/{name}"), format!("{dir}/.debug/{name}")] {
        if std::fs::symlink_metadata(&candidate).is_err() {
            continue;
        }
        match open_owned_by(&candidate, bin.owner_uid) {
            Ok(file) => match crc_matches(&file, crc) {
                Ok(true) => {
                    return Ok(Some(DebugFile {
                        path: candidate,
                        file,
                    }))
                }
                Ok(false) => refused = Some(Untrusted::CrcMismatch { path: candidate }),
                Err(e) => refused = Some(e),
            },
            Err(e) => refused = Some(e),
        }
    }
    // Under the system debug directories, mirroring the binary's directory.
    for root in DEBUG_DIRS {
        let candidate = format!("{root}{dir}/{name}");
        if std::fs::symlink_metadata(&candidate).is_err() {
            continue;
        }
        if let Ok(file) = open_regular(&candidate, true) {
            if file.metadata().is_ok_and(|m| m.uid() == 0)
                && crc_matches(&file, crc).unwrap_or(false)
            {
                return Ok(Some(DebugFile {
                    path: candidate,
                    file,
                }));
            }
        }
    }
    match refused {
        Some(why) => Err(LinkRefused::Untrusted(why)),
        None => Ok(None),
    }
}

/// Open `path` (no symlink) if it is a regular file that `uid` owns, or a
/// root-owned one `uid` could read.
fn open_owned_by(path: &str, uid: Option<u32>) -> Result<File, Untrusted> {
    let file = open_regular(path, false)?;
    let meta = file.metadata().map_err(Untrusted::Read)?;
    let mode = meta.permissions().mode();
    let ok = match uid {
        Some(u) if meta.uid() == u => mode & 0o400 != 0,
        Some(0) => meta.uid() == 0,
        Some(_) => meta.uid() == 0 && mode & 0o004 != 0,
        None => false,
    };
    if !ok {
        return Err(Untrusted::NotOwned {
            path: path.to_string(),
            file_uid: meta.uid(),
            mode: mode & 0o7777,
            uid,
        });
    }
    Ok(file)
}

fn crc_matches(file: &File, crc: u32) -> Result<bool, Untrusted> {
    let len = file.metadata().map_err(Untrusted::Read)?.len();
    if len > MAX_LINKED_DEBUG_FILE {
        return Err(Untrusted::TooLarge { bytes: len });
    }
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut reader = file;
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) => return Err(Untrusted::Read(e)),
        }
    }
    // Positional reads elsewhere are unaffected, but put the offset back.
    let _ = std::io::Seek::rewind(&mut reader);
    Ok(hasher.finalize() == crc)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a debug link next to the binary is followed only when
    /// the file's CRC32 is the link's (crc32("hello") is 0x3610a686, as
    /// zlib computes it), and that a wrong CRC is refused with the file
    /// named.
    #[test]
    fn debug_link_needs_its_crc() {
        let dir = std::env::temp_dir().join(format!("sysprof-debuglink-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("prog.debug"), b"hello").unwrap();
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let bin = Binary {
            path: format!("{}/prog", dir.display()),
            name: "prog".into(),
            file: None,
            build_id: None,
            open_error: None,
            owner_uid: Some(uid),
        };
        let found = by_debuglink(&bin, b"prog.debug", 0x3610a686)
            .unwrap()
            .unwrap();
        assert_eq!(found.path, format!("{}/prog.debug", dir.display()));
        match by_debuglink(&bin, b"prog.debug", 0x3610a687) {
            Err(LinkRefused::Untrusted(e)) => {
                assert!(matches!(e, Untrusted::CrcMismatch { .. }), "{e}");
                assert_eq!(
                    e.to_string(),
                    format!(
                        "{}/prog.debug: its CRC does not match the debug link's",
                        dir.display()
                    )
                );
            }
            other => panic!("a wrong CRC was not refused: {other:?}"),
        }
        assert!(matches!(
            by_debuglink(&bin, b"../prog.debug", 0),
            Err(LinkRefused::NotAFileName(_))
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
