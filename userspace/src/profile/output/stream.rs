//! A profile written as it is made: into the output file itself,
//! gzip-compressed on a thread of its own ([`GzPipe`]), or spooled (to an
//! unnamed temporary file, else memory) when the output is written through
//! only at the end.
//!
//! In: the profile's bytes as the JSON writer makes them. Out: the output
//! file put in place, as [`OutputFile::commit`] does.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::FromRawFd;

use crate::error::RecordError;

use super::open::cstring;
use super::{OutputFile, PROFILE_GZIP_LEVEL};

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

impl OutputFile {
    /// A writer for a profile made over time ([`crate::profile::ProfileWriter`]):
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
}
