//! Writing the profile file safely, as root, in directories others write to.
//!
//! In: the output path, chosen before recording starts; later the bytes.
//! Out: the file at that path, complete or not at all, a new root-owned
//! file that nothing anyone planted was written through.
//!
//! The file is created at once (so an unwritable path fails before anything
//! is recorded) as an unnamed file in the output's directory (`O_TMPFILE`):
//! nothing exists under any name until the profile is complete, so a full
//! disk, a write error or a SIGKILL leaves nothing behind. At the end it is
//! given a random name (`linkat`, which never follows or replaces anything)
//! and renamed over the output path; `rename` replaces a planted symlink or
//! file itself, never what it points to, and in a sticky directory fails
//! on another user's file rather than write to it. Where `O_TMPFILE` is not
//! supported, the temporary gets an unpredictable name and
//! `O_CREAT|O_EXCL|O_NOFOLLOW` (it never opens what exists), and is removed
//! on every failure path.
//!
//! A character device or FIFO that root or the caller owns (`/dev/null`, a
//! named pipe a reader waits on) is never replaced: it is opened for writing
//! as it is, without `O_CREAT` or `O_TRUNC`, and written through; a FIFO
//! with no reader yet is opened (waiting for one) when the profile is
//! complete. A symlink is only followed there when root or the caller owns
//! it (`/dev/stdout`). A link, FIFO or device planted by anyone else is
//! replaced as before (theirs would take the profile, or hang its end). Block devices and sockets are refused with one line. `-` (and
//! `/dev/stdout`, `/dev/stderr`, `/dev/fd/N`) write to the inherited
//! descriptor itself; `-` gives uncompressed JSON.
//!
//! Here: the [`OutputFile`] and how it is committed; how it is opened is
//! `open`, a profile streamed into it `stream`.

mod open;
mod stream;

use std::ffi::CString;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::RecordError;

use open::{cstring, inherited_fd, open_through, temp_path};
pub use stream::Stream;

/// zlib's level for `.json.gz` profiles.
const PROFILE_GZIP_LEVEL: u32 = 1;

/// A profile being written: the unnamed (or hidden) file and where it goes.
pub struct OutputFile {
    final_path: PathBuf,
    dir: PathBuf,
    file: Option<File>,
    /// Set when the fallback gave the temporary a name: removed unless committed.
    named_temp: Option<PathBuf>,
    /// Not a regular file: written through `file`, never renamed over.
    through: Option<Through>,
}

/// How an output that is not a regular file is written.
enum Through {
    /// An open descriptor (a device, a FIFO with a reader, stdout).
    Open,
    /// A FIFO no one reads yet: opened at commit, waiting for a reader.
    Fifo { follow: bool },
}

/// The writer `commit_with` hands out: the file, counting what is written
/// (a device or a pipe has no size to ask for afterwards).
pub struct Sink<'a> {
    file: &'a File,
    written: u64,
}

impl Write for Sink<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

impl OutputFile {
    /// Whether the profile goes to our standard output.
    pub fn is_stdout(&self) -> bool {
        self.through.is_some() && inherited_fd(&self.final_path) == Some(1)
    }

    /// Whether the output is a file sysprof puts in place (one `view` can open).
    pub fn is_file(&self) -> bool {
        self.through.is_none()
    }

    /// Where the profile goes.
    pub fn path(&self) -> &Path {
        &self.final_path
    }

    /// Write `profile` as JSON (gzip-compressed when the name ends in .gz;
    /// never for `-`) and put it in place; returns the bytes written.
    pub fn commit(self, profile: &impl serde::Serialize) -> Result<u64, RecordError> {
        let gz = self.final_path.extension().is_some_and(|e| e == "gz");
        self.commit_with(|w| {
            if gz {
                // serde_json writes a few bytes at a time: buffered before the
                // encoder, not passed to it call by call (its per-call work was
                // a tenth of the write).
                let enc =
                    flate2::write::GzEncoder::new(w, flate2::Compression::new(PROFILE_GZIP_LEVEL));
                let mut buffered = BufWriter::with_capacity(1 << 16, enc);
                serde_json::to_writer(&mut buffered, profile).map_err(std::io::Error::from)?;
                buffered
                    .into_inner()
                    .map_err(|e| e.into_error())?
                    .finish()?;
            } else {
                serde_json::to_writer(&mut *w, profile).map_err(std::io::Error::from)?;
            }
            Ok(())
        })
    }

    /// Write with `write` and put the file in place; returns its size.
    pub fn commit_with(
        mut self,
        write: impl FnOnce(&mut BufWriter<Sink<'_>>) -> std::io::Result<()>,
    ) -> Result<u64, RecordError> {
        let final_path = self.final_path.clone();
        let err = |source| RecordError::OutputNotWritable {
            path: final_path.clone(),
            source,
        };
        if let Some(Through::Fifo { follow }) = self.through {
            // The profile is ready: now wait for the FIFO's reader.
            self.file = open_through(&self.final_path, follow, true).map_err(err)?;
        }
        let file = self.file.take().expect("commit once");
        if self.through.is_some() {
            let mut w = BufWriter::new(Sink {
                file: &file,
                written: 0,
            });
            write(&mut w).map_err(err)?;
            w.flush().map_err(err)?;
            return Ok(w.get_ref().written);
        }
        let result = (|| {
            let mut w = BufWriter::new(Sink {
                file: &file,
                written: 0,
            });
            write(&mut w)?;
            w.flush()?;
            drop(w);
            file.sync_all()?;
            let len = file.metadata()?.len();
            self.place(&file)?;
            Ok(len)
        })();
        match result {
            Ok(len) => Ok(len),
            Err(e) => {
                // Nothing of a failed write stays under any name.
                if let Some(t) = self.named_temp.take() {
                    let _ = std::fs::remove_file(t);
                }
                Err(err(e))
            }
        }
    }

    /// Name the finished file and rename it over the output path.
    fn place(&mut self, file: &File) -> std::io::Result<()> {
        let temp = match self.named_temp.take() {
            Some(t) => t,
            None => {
                let temp = temp_path(&self.dir, &self.final_path);
                let ctemp = cstring(&temp)?;
                let proc_fd =
                    CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())).expect("no NUL");
                // SAFETY: valid paths; linkat creates a new name or fails (EEXIST).
                let r = unsafe {
                    libc::linkat(
                        libc::AT_FDCWD,
                        proc_fd.as_ptr(),
                        libc::AT_FDCWD,
                        ctemp.as_ptr(),
                        libc::AT_SYMLINK_FOLLOW,
                    )
                };
                if r != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                temp
            }
        };
        if std::fs::symlink_metadata(&self.final_path).is_ok_and(|m| m.is_dir()) {
            let _ = std::fs::remove_file(&temp);
            return Err(std::io::Error::other("the output path became a directory"));
        }
        if let Err(e) = std::fs::rename(&temp, &self.final_path) {
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
        Ok(())
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        // Not committed: leave nothing behind under any name.
        if let Some(t) = self.named_temp.take() {
            let _ = std::fs::remove_file(t);
        }
    }
}

#[cfg(test)]
mod tests;
