//! Opening the output: what is at the path decides how it is written.
//!
//! In: the output path. Out: an [`OutputFile`]: an inherited descriptor
//! (`-`, `/dev/stdout`), a FIFO or device root or the caller owns, written
//! through; else a new unnamed file in the path's directory (`O_TMPFILE`),
//! or where that is not supported a temporary of an unpredictable name.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::error::RecordError;

use super::{OutputFile, Through};

impl OutputFile {
    /// Prepare to write `path`: create the unnamed file in its directory.
    pub fn create(path: &Path) -> Result<OutputFile, RecordError> {
        let err = |source| RecordError::OutputNotWritable {
            path: path.to_path_buf(),
            source,
        };
        if let Some(fd) = inherited_fd(path) {
            return OutputFile::inherited(path, fd).map_err(err);
        }
        if let Some(through) = OutputFile::existing(path).map_err(err)? {
            return Ok(through);
        }
        if path.file_name().is_none() {
            return Err(err(std::io::Error::other("it has no file name")));
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let (file, named_temp) = match unnamed_in(&dir).map_err(err)? {
            Some(file) => (file, None),
            None => {
                let (file, temp) = named_temp_in(&dir, path).map_err(err)?;
                (file, Some(temp))
            }
        };
        Ok(OutputFile {
            final_path: path.to_path_buf(),
            dir,
            file: Some(file),
            named_temp,
            through: None,
        })
    }

    /// An output written through `file`; none: a FIFO no one reads yet,
    /// opened at commit (`follow`: through a symlink).
    fn through(path: &Path, file: Option<File>, follow: bool) -> OutputFile {
        OutputFile {
            final_path: path.to_path_buf(),
            dir: PathBuf::new(),
            through: Some(if file.is_some() {
                Through::Open
            } else {
                Through::Fifo { follow }
            }),
            file,
            named_temp: None,
        }
    }

    /// The output on descriptor `fd`, which we inherited (`-`, `/dev/stdout`).
    fn inherited(path: &Path, fd: i32) -> std::io::Result<OutputFile> {
        // SAFETY: dup of a descriptor number; the result is checked and owned below.
        let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
        if new < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a new fd we own.
        let file = unsafe { File::from_raw_fd(new) };
        refuse_kind(&file.metadata()?, true)?;
        Ok(OutputFile::through(path, Some(file), true))
    }

    /// What is at `path` already, when it is written through (a device or
    /// FIFO root or the caller put there, or their symlink to one); `None`
    /// when it is replaced, or nothing is there.
    fn existing(path: &Path) -> std::io::Result<Option<OutputFile>> {
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => Err(std::io::Error::other("it is a directory")),
            Ok(m) if m.file_type().is_symlink() => {
                // Followed only when root or the caller made it: one planted
                // by another user is replaced below, never written through.
                if trusted_owner(m.uid()) {
                    if let Ok(t) = std::fs::metadata(path).map(|t| t.file_type()) {
                        if !t.is_file() && !t.is_dir() {
                            let file = open_through(path, true, false)?;
                            return Ok(Some(OutputFile::through(path, file, true)));
                        }
                    }
                }
                Ok(None)
            }
            // Likewise a device or FIFO: another user's FIFO planted where
            // root writes (in /tmp) would hold the profile, or hang the
            // end of the recording, at its owner's will; it is replaced.
            Ok(m) if !m.is_file() && trusted_owner(m.uid()) => {
                let file = open_through(path, false, false)?;
                Ok(Some(OutputFile::through(path, file, false)))
            }
            _ => Ok(None),
        }
    }
}

/// A new unnamed file in `dir` (`O_TMPFILE`); `None` where the file system
/// (or kernel) does not support one.
fn unnamed_in(dir: &Path) -> std::io::Result<Option<File>> {
    let cdir = cstring(dir)?;
    // SAFETY: a valid NUL-terminated path; the fd is checked and owned below.
    let fd = unsafe {
        libc::open(
            cdir.as_ptr(),
            libc::O_TMPFILE | libc::O_WRONLY | libc::O_CLOEXEC,
            0o644,
        )
    };
    if fd >= 0 {
        // SAFETY: a new fd we own.
        return Ok(Some(unsafe { File::from_raw_fd(fd) }));
    }
    let e = std::io::Error::last_os_error();
    // Not supported by this file system (or kernel): a named temporary.
    if !matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::EISDIR) | Some(libc::EINVAL)
    ) {
        return Err(e);
    }
    Ok(None)
}

/// A new file of an unpredictable name in `dir`, beside `path`: the file
/// and its name.
fn named_temp_in(dir: &Path, path: &Path) -> std::io::Result<(File, PathBuf)> {
    let temp = temp_path(dir, path);
    let ctemp = cstring(&temp)?;
    // SAFETY: as above. O_EXCL|O_NOFOLLOW: a new file, never one that exists.
    let fd = unsafe {
        libc::open(
            ctemp.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_WRONLY | libc::O_CLOEXEC,
            0o644,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new fd we own.
    Ok((unsafe { File::from_raw_fd(fd) }, temp))
}

/// A hidden name of random suffix in `dir` for the profile bound for
/// `final_path` (which has a file name).
pub(super) fn temp_path(dir: &Path, final_path: &Path) -> PathBuf {
    let name = final_path.file_name().expect("checked").to_string_lossy();
    dir.join(format!(
        ".{name}.{}.tmp",
        crate::sys::random::random_suffix()
    ))
}

/// The descriptor a path names when it is one we inherited: `-`,
/// `/dev/stdout`, `/dev/stderr`, `/dev/fd/N`, `/proc/self/fd/N`.
pub(super) fn inherited_fd(path: &Path) -> Option<i32> {
    match path.as_os_str().as_bytes() {
        b"-" | b"/dev/stdout" => return Some(1),
        b"/dev/stderr" => return Some(2),
        _ => {}
    }
    let n: i32 = path.file_name()?.to_str()?.parse().ok()?;
    let parent = std::fs::canonicalize(path.parent()?).ok()?;
    (parent == Path::new(&format!("/proc/{}/fd", std::process::id()))).then_some(n)
}

/// Open an existing non-regular file for writing as it is (no `O_CREAT`, no
/// `O_TRUNC`); `None` for a FIFO no one reads yet when `wait` is false.
pub(super) fn open_through(path: &Path, follow: bool, wait: bool) -> std::io::Result<Option<File>> {
    let c = cstring(path)?;
    let mut flags = libc::O_WRONLY | libc::O_NOCTTY | libc::O_CLOEXEC;
    if !follow {
        // Checked not to be a symlink: if it became one since, refuse.
        flags |= libc::O_NOFOLLOW;
    }
    if !wait {
        // A FIFO's open waits for a reader; we do not wait before recording.
        flags |= libc::O_NONBLOCK;
    }
    // SAFETY: a valid NUL-terminated path; the fd is checked and owned below.
    let fd = unsafe { libc::open(c.as_ptr(), flags) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENXIO) if !wait && std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo()) => Ok(None),
            Some(libc::ENXIO) => Err(std::io::Error::other("it is a socket or a device with nothing behind it; name a file, a FIFO or a character device")),
            _ => Err(e),
        };
    }
    // SAFETY: a new fd we own.
    let file = unsafe { File::from_raw_fd(fd) };
    if !wait {
        // Writes block as usual from here on.
        // SAFETY: fcntl on an fd we own.
        unsafe {
            libc::fcntl(
                fd,
                libc::F_SETFL,
                libc::fcntl(fd, libc::F_GETFL) & !libc::O_NONBLOCK,
            )
        };
    }
    refuse_kind(&file.metadata()?, false)?;
    Ok(Some(file))
}

/// Refuse what sysprof never writes a profile onto; `regular_ok` where a
/// regular file is expected (an inherited descriptor the shell opened).
fn refuse_kind(m: &std::fs::Metadata, regular_ok: bool) -> std::io::Result<()> {
    let t = m.file_type();
    if t.is_block_device() {
        return Err(std::io::Error::other(
            "it is a block device; sysprof never writes a profile onto a disk, name a file",
        ));
    }
    if t.is_dir() {
        return Err(std::io::Error::other("it is a directory"));
    }
    if t.is_file() && !regular_ok {
        return Err(std::io::Error::other(
            "it was replaced by a regular file while sysprof opened it; try again",
        ));
    }
    Ok(())
}

/// Whether a file owned by `uid` at the output path was put there by root
/// or by the caller (the user who ran sudo included): only then is a link
/// followed, or a FIFO or device written through.
fn trusted_owner(uid: u32) -> bool {
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let sudo_user = std::env::var("SUDO_UID")
        .ok()
        .and_then(|u| u.parse::<u32>().ok());
    uid == 0 || uid == me || sudo_user == Some(uid)
}

/// `p` as the C string a system call takes.
pub(super) fn cstring(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("the path contains a NUL byte"))
}
