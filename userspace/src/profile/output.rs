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

use std::ffi::CString;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::error::RecordError;

/// zlib's level for `.json.gz` profiles.
const PROFILE_GZIP_LEVEL: u32 = 3;

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

/// Bytes a [`GzPipe`] hands its thread at a time.
const GZ_CHUNK: usize = 256 << 10;

/// Chunks in flight to the compressing thread: the writer waits past this
/// (memory stays a few chunks, however far compression falls behind).
const GZ_CHUNKS_IN_FLIGHT: usize = 4;

/// gzip on a thread of its own: the profile's JSON is made on the caller's
/// thread and compressed on this one, side by side. Why: at the end of 60 s
/// of `record -a` beside a fork loop, writing what was still running took
/// 0.8-1.05 s, serializing and compressing one after the other on one
/// thread; compression was a third to a half of it.
struct GzPipe {
    buf: Vec<u8>,
    to_thread: Option<std::sync::mpsc::SyncSender<Vec<u8>>>,
    /// Chunks the thread is done with, to be filled again.
    emptied: std::sync::mpsc::Receiver<Vec<u8>>,
    thread: Option<std::thread::JoinHandle<std::io::Result<File>>>,
}

impl GzPipe {
    fn new(file: File) -> std::io::Result<GzPipe> {
        let (to_thread, chunks) = std::sync::mpsc::sync_channel::<Vec<u8>>(GZ_CHUNKS_IN_FLIGHT);
        let (give_back, emptied) = std::sync::mpsc::channel::<Vec<u8>>();
        let thread = std::thread::Builder::new()
            .name("sysprof-gzip".into())
            .spawn(move || {
                let mut enc = flate2::write::GzEncoder::new(
                    file,
                    flate2::Compression::new(PROFILE_GZIP_LEVEL),
                );
                for mut chunk in chunks {
                    enc.write_all(&chunk)?;
                    chunk.clear();
                    let _ = give_back.send(chunk);
                }
                enc.finish()
            })?;
        Ok(GzPipe {
            buf: Vec::with_capacity(GZ_CHUNK),
            to_thread: Some(to_thread),
            emptied,
            thread: Some(thread),
        })
    }

    /// Hand the buffered bytes to the thread.
    #[inline(never)]
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let next = self
            .emptied
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(GZ_CHUNK));
        let chunk = std::mem::replace(&mut self.buf, next);
        match self.to_thread.as_ref().map(|t| t.send(chunk)) {
            Some(Ok(())) => Ok(()),
            // The thread stopped: its error.
            _ => Err(self
                .end()
                .err()
                .unwrap_or_else(|| std::io::Error::other("the compressing thread stopped"))),
        }
    }

    /// Stop the thread; the file, or why it could not be written.
    fn end(&mut self) -> std::io::Result<File> {
        drop(self.to_thread.take());
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(std::io::Error::other("the compressing thread panicked")),
            None => Err(std::io::Error::other("the compressing thread stopped")),
        }
    }

    /// Compress what is left and end the stream: the file.
    fn finish(mut self) -> std::io::Result<File> {
        self.send()?;
        self.end()
    }
}

// The JSON writer hands over a token at a time (a comma, a number): these
// are inlined into it, and a chunk's sending is the one call out. Without,
// `Stream::write` and its copy were a quarter of writing a profile (perf,
// the final write of `record -a -d 10` beside pgbench).
impl Write for GzPipe {
    #[inline]
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.write_all(bytes)?;
        Ok(bytes.len())
    }

    #[inline]
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= GZ_CHUNK {
            self.send()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

/// What [`OutputFile::stream`] hands out: the profile's bytes on their way.
pub struct Stream {
    sink: StreamSink,
}

/// Where a [`Stream`]'s bytes go.
enum StreamSink {
    /// The output file, gzip-compressed on a thread of its own.
    Gz(GzPipe),
    /// The output file, as they are.
    File(BufWriter<File>),
    /// An unnamed temporary file, copied through at the end.
    Spool(BufWriter<File>),
    /// Memory, copied through at the end (no temporary file could be made).
    Memory(Vec<u8>),
}

impl Write for Stream {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut self.sink {
            StreamSink::Gz(w) => w.write(buf),
            StreamSink::File(w) | StreamSink::Spool(w) => w.write(buf),
            StreamSink::Memory(v) => v.write(buf),
        }
    }

    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match &mut self.sink {
            StreamSink::Gz(w) => w.write_all(buf),
            StreamSink::File(w) | StreamSink::Spool(w) => w.write_all(buf),
            StreamSink::Memory(v) => {
                v.extend_from_slice(buf);
                Ok(())
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.sink {
            StreamSink::Gz(w) => w.flush(),
            StreamSink::File(w) | StreamSink::Spool(w) => w.flush(),
            StreamSink::Memory(_) => Ok(()),
        }
    }
}

/// An unnamed file in the temporary directory (`O_TMPFILE`: gone with its
/// descriptor, never under a name anyone could open or plant).
fn unnamed_temp() -> Option<File> {
    let dir = cstring(&std::env::temp_dir()).ok()?;
    // SAFETY: a valid NUL-terminated path; the fd is checked and owned below.
    let fd = unsafe {
        libc::open(
            dir.as_ptr(),
            libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
            0o600,
        )
    };
    // SAFETY: a new fd we own.
    (fd >= 0).then(|| unsafe { File::from_raw_fd(fd) })
}

/// The descriptor a path names when it is one we inherited: `-`,
/// `/dev/stdout`, `/dev/stderr`, `/dev/fd/N`, `/proc/self/fd/N`.
fn inherited_fd(path: &Path) -> Option<i32> {
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
fn open_through(path: &Path, follow: bool, wait: bool) -> std::io::Result<Option<File>> {
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

fn cstring(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("the path contains a NUL byte"))
}

impl OutputFile {
    /// Prepare to write `path`: create the unnamed file in its directory.
    pub fn create(path: &Path) -> Result<OutputFile, RecordError> {
        let err = |source| RecordError::OutputNotWritable {
            path: path.to_path_buf(),
            source,
        };
        let through = |file: Option<File>, follow: bool| OutputFile {
            final_path: path.to_path_buf(),
            dir: PathBuf::new(),
            through: Some(if file.is_some() {
                Through::Open
            } else {
                Through::Fifo { follow }
            }),
            file,
            named_temp: None,
        };
        if let Some(fd) = inherited_fd(path) {
            // SAFETY: dup of a descriptor number; the result is checked and owned below.
            let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
            if new < 0 {
                return Err(err(std::io::Error::last_os_error()));
            }
            // SAFETY: a new fd we own.
            let file = unsafe { File::from_raw_fd(new) };
            refuse_kind(&file.metadata().map_err(err)?, true).map_err(err)?;
            return Ok(through(Some(file), true));
        }
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => return Err(err(std::io::Error::other("it is a directory"))),
            Ok(m) if m.file_type().is_symlink() => {
                // Followed only when root or the caller made it: one planted
                // by another user is replaced below, never written through.
                if trusted_owner(m.uid()) {
                    if let Ok(t) = std::fs::metadata(path).map(|t| t.file_type()) {
                        if !t.is_file() && !t.is_dir() {
                            return Ok(through(
                                open_through(path, true, false).map_err(err)?,
                                true,
                            ));
                        }
                    }
                }
            }
            // Likewise a device or FIFO: another user's FIFO planted where
            // root writes (in /tmp) would hold the profile, or hang the
            // end of the recording, at its owner's will; it is replaced.
            Ok(m) if !m.is_file() && trusted_owner(m.uid()) => {
                return Ok(through(
                    open_through(path, false, false).map_err(err)?,
                    false,
                ))
            }
            _ => {}
        }
        if path.file_name().is_none() {
            return Err(err(std::io::Error::other("it has no file name")));
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let cdir = cstring(&dir).map_err(err)?;
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
            let file = unsafe { File::from_raw_fd(fd) };
            return Ok(OutputFile {
                final_path: path.to_path_buf(),
                dir,
                file: Some(file),
                named_temp: None,
                through: None,
            });
        }
        let e = std::io::Error::last_os_error();
        // Not supported by this file system (or kernel): a named temporary.
        if !matches!(
            e.raw_os_error(),
            Some(libc::EOPNOTSUPP) | Some(libc::EISDIR) | Some(libc::EINVAL)
        ) {
            return Err(err(e));
        }
        let name = path.file_name().expect("checked").to_string_lossy();
        let temp = dir.join(format!(
            ".{name}.{}.tmp",
            crate::sys::random::random_suffix()
        ));
        let ctemp = cstring(&temp).map_err(err)?;
        // SAFETY: as above. O_EXCL|O_NOFOLLOW: a new file, never one that exists.
        let fd = unsafe {
            libc::open(
                ctemp.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_WRONLY | libc::O_CLOEXEC,
                0o644,
            )
        };
        if fd < 0 {
            return Err(err(std::io::Error::last_os_error()));
        }
        // SAFETY: a new fd we own.
        let file = unsafe { File::from_raw_fd(fd) };
        Ok(OutputFile {
            final_path: path.to_path_buf(),
            dir,
            file: Some(file),
            named_temp: Some(temp),
            through: None,
        })
    }

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

    /// A writer for a profile made over time ([`super::ProfileWriter`]):
    /// into the output file itself, compressed as it comes when the name
    /// ends in .gz, when that is a file sysprof puts in place (nothing has
    /// a name until [`OutputFile::commit_stream`]); else (stdout, a FIFO, a
    /// device: written only at the end) into an unnamed temporary file, or
    /// memory where there is none, copied through at the end.
    pub fn stream(&self) -> Result<Stream, RecordError> {
        let err = |source| RecordError::OutputNotWritable {
            path: self.final_path.clone(),
            source,
        };
        let gz = self.final_path.extension().is_some_and(|e| e == "gz");
        let sink = match (&self.through, &self.file) {
            (None, Some(file)) => {
                let file = file.try_clone().map_err(err)?;
                if gz {
                    StreamSink::Gz(GzPipe::new(file).map_err(err)?)
                } else {
                    StreamSink::File(BufWriter::with_capacity(1 << 16, file))
                }
            }
            _ => match unnamed_temp() {
                Some(file) => StreamSink::Spool(BufWriter::with_capacity(1 << 16, file)),
                None => StreamSink::Memory(Vec::new()),
            },
        };
        Ok(Stream { sink })
    }

    /// Finish what [`OutputFile::stream`] began and put it in place, as
    /// [`OutputFile::commit`]; returns the size written.
    pub fn commit_stream(self, stream: Stream) -> Result<u64, RecordError> {
        let final_path = self.final_path.clone();
        let err = |source| RecordError::OutputNotWritable {
            path: final_path.clone(),
            source,
        };
        let gz = self.final_path.extension().is_some_and(|e| e == "gz");
        // Written through at the end: the spooled bytes (compressed now if asked).
        let copy_through = |w: &mut dyn Write,
                            from: &mut dyn std::io::Read|
         -> std::io::Result<()> {
            if gz {
                let mut enc =
                    flate2::write::GzEncoder::new(w, flate2::Compression::new(PROFILE_GZIP_LEVEL));
                std::io::copy(from, &mut enc)?;
                enc.finish()?;
            } else {
                std::io::copy(from, w)?;
            }
            Ok(())
        };
        match stream.sink {
            StreamSink::Gz(pipe) => {
                pipe.finish().map_err(err)?;
                self.commit_with(|_| Ok(()))
            }
            StreamSink::File(w) => {
                w.into_inner().map_err(|e| err(e.into_error()))?;
                self.commit_with(|_| Ok(()))
            }
            StreamSink::Spool(w) => {
                let mut file = w.into_inner().map_err(|e| err(e.into_error()))?;
                std::io::Seek::rewind(&mut file).map_err(err)?;
                self.commit_with(|w| {
                    copy_through(w, &mut std::io::BufReader::with_capacity(1 << 16, file))
                })
            }
            StreamSink::Memory(bytes) => {
                self.commit_with(|w| copy_through(w, &mut bytes.as_slice()))
            }
        }
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
                let name = self
                    .final_path
                    .file_name()
                    .expect("checked")
                    .to_string_lossy()
                    .into_owned();
                let temp = self.dir.join(format!(
                    ".{name}.{}.tmp",
                    crate::sys::random::random_suffix()
                ));
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
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sysprof-output-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Check that a planted symlink at the output path is replaced, not
    /// written through, and that nothing else is left in the directory.
    #[test]
    fn replaces_a_planted_symlink_without_following_it() {
        let d = dir("symlink");
        let target = d.join("victim");
        std::fs::write(&target, "precious").unwrap();
        let out = d.join("p.json");
        std::os::unix::fs::symlink(&target, &out).unwrap();
        let o = OutputFile::create(&out).unwrap();
        o.commit(&serde_json::json!({"ok": true})).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
        assert!(!std::fs::symlink_metadata(&out)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read_to_string(&out).unwrap(), r#"{"ok":true}"#);
        let names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        let _ = std::fs::remove_dir_all(&d);
    }

    fn mkfifo(p: &Path) {
        let c = cstring(p).unwrap();
        // SAFETY: a valid path.
        assert_eq!(
            unsafe { libc::mkfifo(c.as_ptr(), 0o600) },
            0,
            "mkfifo {}",
            p.display()
        );
    }

    /// Check that a FIFO at the output path is written through to its
    /// reader (who opens it only after the output was prepared) and stays a
    /// FIFO, with nothing else left in the directory.
    #[test]
    fn a_fifo_is_written_through_not_replaced() {
        let d = dir("fifo");
        let out = d.join("p.json");
        mkfifo(&out);
        let o = OutputFile::create(&out).unwrap();
        assert!(!o.is_file());
        let reader = {
            let out = out.clone();
            std::thread::spawn(move || std::fs::read_to_string(out).unwrap())
        };
        let n = o.commit(&serde_json::json!({"ok": true})).unwrap();
        assert_eq!(reader.join().unwrap(), r#"{"ok":true}"#);
        assert_eq!(n, 11);
        assert!(std::fs::symlink_metadata(&out)
            .unwrap()
            .file_type()
            .is_fifo());
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Check that a symlink to a FIFO that another user planted is not
    /// followed: it is replaced by the profile, as any planted symlink is.
    #[test]
    fn another_users_symlink_to_a_fifo_is_replaced() {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED another_users_symlink_to_a_fifo_is_replaced: needs root to give the symlink to nobody");
            return;
        }
        let d = dir("fifo-link");
        let fifo = d.join("fifo");
        mkfifo(&fifo);
        let out = d.join("p.json");
        std::os::unix::fs::symlink(&fifo, &out).unwrap();
        std::os::unix::fs::lchown(&out, Some(65534), Some(65534)).unwrap();
        let o = OutputFile::create(&out).unwrap();
        assert!(o.is_file(), "not written through");
        o.commit(&serde_json::json!({"ok": true})).unwrap();
        assert!(std::fs::symlink_metadata(&out)
            .unwrap()
            .file_type()
            .is_file());
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Check that another user's FIFO at the output path (planted in a
    /// shared directory) is replaced by the profile, never written through:
    /// no reader could then hold or hang the end of the recording.
    #[test]
    fn another_users_fifo_is_replaced() {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!(
                "SKIPPED another_users_fifo_is_replaced: needs root to give the FIFO to nobody"
            );
            return;
        }
        let d = dir("their-fifo");
        let out = d.join("p.json");
        mkfifo(&out);
        std::os::unix::fs::chown(&out, Some(65534), Some(65534)).unwrap();
        let o = OutputFile::create(&out).unwrap();
        assert!(o.is_file(), "not written through");
        o.commit(&serde_json::json!({"ok": true})).unwrap();
        assert!(std::fs::symlink_metadata(&out)
            .unwrap()
            .file_type()
            .is_file());
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Check that a profile never written leaves nothing behind.
    #[test]
    fn an_abandoned_profile_leaves_nothing() {
        let d = dir("abandoned");
        let o = OutputFile::create(&d.join("p.json.gz")).unwrap();
        drop(o);
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Check that a failed write leaves nothing and says which path.
    #[test]
    fn a_failed_write_leaves_nothing() {
        let d = dir("failed");
        let o = OutputFile::create(&d.join("p.json")).unwrap();
        let e = o
            .commit_with(|_| Err(std::io::Error::other("disk full")))
            .unwrap_err();
        assert!(
            e.to_string().contains("p.json") && e.to_string().contains("disk full"),
            "{e}"
        );
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
        let _ = std::fs::remove_dir_all(&d);
    }
}
