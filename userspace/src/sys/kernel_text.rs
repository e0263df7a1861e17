//! Text the kernel makes as it is read (`/proc`, `/sys`, fdinfo), read
//! whole in a call or two into a buffer the caller keeps.
//!
//! In: a path, or a file kept open and read again from its start (such a
//! file is made afresh by every read at offset 0). Out: its bytes, borrowed
//! from the buffer until the next read.
//!
//! Why not `std::fs::read_to_string`: these files say their size is 0, so it
//! asks their size, then reads 32, 32, 64, 128 ... bytes at a time. Beside
//! pgbench, `record`'s counter polls made ~1,200 `read`s a second that way
//! (about ten a file, plus an `open`, a `statx` and a `close` each).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// A file of kernel text larger than this is refused: nothing read this
/// way comes near it (a busy machine's `/proc/stat` is a few KiB).
const MAX_TEXT_BYTES: usize = 16 << 20;

/// What the buffer starts with: most of these files fit in one read.
const FIRST_CAPACITY: usize = 4096;

/// A buffer reused for reading kernel text; see the module doc.
#[derive(Debug, Default)]
pub struct TextBuffer {
    /// Zero-filled to its length once; `read_from_start` reads into it.
    bytes: Vec<u8>,
}

impl TextBuffer {
    /// Read all of `file` from its start (with `pread`, so a file kept open
    /// is read afresh without a seek).
    pub fn read_from_start(&mut self, file: &File) -> io::Result<&[u8]> {
        if self.bytes.is_empty() {
            self.bytes.resize(FIRST_CAPACITY, 0);
        }
        let mut len = 0;
        loop {
            if len == self.bytes.len() {
                if len >= MAX_TEXT_BYTES {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("kernel text over {MAX_TEXT_BYTES} bytes"),
                    ));
                }
                self.bytes.resize(len * 2, 0);
            }
            match file.read_at(&mut self.bytes[len..], len as u64) {
                Ok(0) => break,
                Ok(n) => len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(&self.bytes[..len])
    }

    /// Open `path`, read all of it, close it.
    pub fn read_path(&mut self, path: impl AsRef<Path>) -> io::Result<&[u8]> {
        let file = File::open(path)?;
        self.read_from_start(&file)
    }
}

/// The text of `path` read whole with one buffer of its own: for a file
/// read now and then (a second or more apart).
pub fn read_to_string(path: impl AsRef<Path>) -> io::Result<String> {
    let mut buffer = TextBuffer::default();
    let bytes = buffer.read_path(path)?;
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check against `std::fs::read` that a kept file read again from its
    /// start gives the kernel's text anew (a file larger than the first
    /// buffer too), and that a regular file's bytes come back unchanged.
    #[test]
    fn kept_files_are_read_whole_and_afresh() {
        let mut buffer = TextBuffer::default();
        let stat = File::open("/proc/self/stat").unwrap();
        let first = String::from_utf8(buffer.read_from_start(&stat).unwrap().to_vec()).unwrap();
        assert!(
            first.starts_with(&format!("{} (", std::process::id())),
            "{first}"
        );
        // The process's own minor faults grow as it touches new memory: the
        // second read is made afresh, not the first's bytes again.
        let touched = vec![1u8; 64 << 20];
        assert_eq!(touched.iter().map(|&b| b as u64).sum::<u64>(), 64 << 20);
        let second = String::from_utf8(buffer.read_from_start(&stat).unwrap().to_vec()).unwrap();
        let minflt = |s: &str| -> u64 {
            let rest = &s[s.rfind(')').unwrap() + 2..];
            rest.split_whitespace().nth(7).unwrap().parse().unwrap()
        };
        assert!(minflt(&second) > minflt(&first), "{first}\n{second}");
        // Larger than FIRST_CAPACITY: the buffer grows and nothing is cut.
        let file = std::env::temp_dir().join(format!("sysprof-kernel-text-{}", std::process::id()));
        let big: Vec<u8> = (0..3 * FIRST_CAPACITY + 17)
            .map(|i| (i % 251) as u8)
            .collect();
        std::fs::write(&file, &big).unwrap();
        assert_eq!(buffer.read_path(&file).unwrap(), &big[..]);
        assert_eq!(
            read_to_string(&file).unwrap().len(),
            String::from_utf8_lossy(&big).len()
        );
        std::fs::remove_file(&file).unwrap();
        assert!(
            buffer.read_path(&file).is_err(),
            "a missing file is an error"
        );
        // A kernel file of megabytes (the kernel's BTF; it does not change):
        // the same bytes as std's read of it.
        match std::fs::read("/sys/kernel/btf/vmlinux") {
            Ok(std_bytes) => {
                assert_eq!(
                    buffer.read_path("/sys/kernel/btf/vmlinux").unwrap(),
                    &std_bytes[..]
                )
            }
            Err(e) => eprintln!("SKIPPED the megabytes' part: /sys/kernel/btf/vmlinux: {e}"),
        }
    }
}
