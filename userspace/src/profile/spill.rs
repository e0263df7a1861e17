//! Markers kept on disk until their thread is written.
//!
//! In: the markers `record` takes out of its merge between windows
//! ([`crate::model::merge::Merger::take_markers`]), with whose they are.
//! Out: each owner's markers back, in the order they were put, when its
//! thread (or CPU track) is written ([`MarkerSpill::restore_into`]).
//!
//! Why: `record` writes a process out as soon as it ends, but a server's
//! processes run the whole recording, and their markers (every wait over
//! the threshold, every block request, every slice of the CPU tracks) were
//! most of what its memory grew by: ~104 bytes each and a name, thousands a
//! second beside pgbench. Here they are ~20-40 bytes each (postcard), in an
//! unnamed file (`O_TMPFILE`) beside the output, whose pages the kernel
//! keeps or writes back as it likes: not sysprof's resident memory. Nobody
//! can open that file by name, so nothing another user does can reach it.
//! Where no such file can be made (a file system without `O_TMPFILE`, a
//! full disk), the same bytes stay in memory: still smaller than the
//! markers they hold, and nothing is lost.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use rustc_hash::FxHashMap;

use crate::model::merge::MarkerOwner;
use crate::model::recording::MarkerRecord;

/// Where one put's bytes are.
#[derive(Clone, Copy)]
struct Chunk {
    in_file: bool,
    offset: u64,
    len: u32,
}

/// Markers by owner, encoded; see the module doc.
pub struct MarkerSpill {
    file: Option<File>,
    file_len: u64,
    /// A write to the file failed: the rest goes to memory.
    file_full: bool,
    memory: Vec<u8>,
    chunks: FxHashMap<MarkerOwner, Vec<Chunk>>,
    markers: u64,
    /// Why the file was not made or given up (said once, in the summary's
    /// warnings), if so.
    pub fallback: Option<String>,
}

impl MarkerSpill {
    /// A spill in an unnamed file in `dir` (else in the system's temporary
    /// directory, else in memory).
    pub fn new(dir: &Path) -> MarkerSpill {
        let open = |d: &Path| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .mode(0o600)
                .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
                .open(d)
        };
        let (file, fallback) = match open(dir).or_else(|_| open(&std::env::temp_dir())) {
            Ok(f) => (Some(f), None),
            Err(e) => (
                None,
                Some(format!(
                    "markers of running threads were kept in memory: no unnamed file could be made beside the output or in the temporary directory ({e})"
                )),
            ),
        };
        MarkerSpill {
            file,
            file_len: 0,
            file_full: false,
            memory: Vec::new(),
            chunks: FxHashMap::default(),
            markers: 0,
            fallback,
        }
    }

    /// A spill that keeps its bytes in memory (tests, and where no file may be made).
    pub fn in_memory() -> MarkerSpill {
        MarkerSpill {
            file: None,
            file_len: 0,
            file_full: false,
            memory: Vec::new(),
            chunks: FxHashMap::default(),
            markers: 0,
            fallback: None,
        }
    }

    /// Keep `markers` after those `owner` has here already. A file that
    /// cannot take them (a full disk) is given up for memory: never lost.
    pub fn put(&mut self, owner: MarkerOwner, markers: &[MarkerRecord]) {
        if markers.is_empty() {
            return;
        }
        let bytes = match postcard::to_stdvec(markers) {
            Ok(b) if b.len() <= u32::MAX as usize => b,
            // Plain data always encodes; a chunk past 4 GiB cannot be.
            _ => unreachable!("markers encode, in less than 4 GiB a window"),
        };
        let in_file = match (&self.file, self.file_full) {
            (Some(f), false) => match f.write_all_at(&bytes, self.file_len) {
                Ok(()) => true,
                Err(e) => {
                    // The file keeps what it holds; no more is written to it.
                    self.file_full = true;
                    self.fallback = Some(format!(
                        "markers of running threads were kept in memory from {} MB on: their file beside the output could not take more ({e})",
                        self.file_len / 1_000_000
                    ));
                    false
                }
            },
            _ => false,
        };
        let chunk = if in_file {
            self.file_len += bytes.len() as u64;
            Chunk {
                in_file,
                offset: self.file_len - bytes.len() as u64,
                len: bytes.len() as u32,
            }
        } else {
            self.memory.extend_from_slice(&bytes);
            Chunk {
                in_file,
                offset: (self.memory.len() - bytes.len()) as u64,
                len: bytes.len() as u32,
            }
        };
        self.markers += markers.len() as u64;
        self.chunks.entry(owner).or_default().push(chunk);
    }

    /// Put `markers` before those in `into`, taking them out of here: they
    /// were put first. An error is this process's own file failing to read
    /// back; the markers it held are then not restored.
    pub fn restore_into(
        &mut self,
        owner: MarkerOwner,
        into: &mut Vec<MarkerRecord>,
    ) -> io::Result<()> {
        let Some(chunks) = self.chunks.remove(&owner) else {
            return Ok(());
        };
        let mut all = self.read(&chunks)?;
        all.append(into);
        *into = all;
        Ok(())
    }

    /// `owner`'s markers, left here (for a writer that only reads).
    pub fn load(&self, owner: MarkerOwner) -> io::Result<Vec<MarkerRecord>> {
        match self.chunks.get(&owner) {
            Some(chunks) => self.read(chunks),
            None => Ok(Vec::new()),
        }
    }

    /// Whether `owner` has markers here.
    pub fn holds(&self, owner: MarkerOwner) -> bool {
        self.chunks.contains_key(&owner)
    }

    /// Markers put so far, and the bytes they took.
    pub fn totals(&self) -> (u64, u64) {
        (self.markers, self.file_len + self.memory.len() as u64)
    }

    fn read(&self, chunks: &[Chunk]) -> io::Result<Vec<MarkerRecord>> {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        for c in chunks {
            let bytes: &[u8] = if c.in_file {
                let file = self
                    .file
                    .as_ref()
                    .ok_or_else(|| io::Error::other("no spill file"))?;
                buf.resize(c.len as usize, 0);
                file.read_exact_at(&mut buf, c.offset)?;
                &buf
            } else {
                &self.memory[c.offset as usize..c.offset as usize + c.len as usize]
            };
            let markers: Vec<MarkerRecord> =
                postcard::from_bytes(bytes).map_err(io::Error::other)?;
            out.extend(markers);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::recording::{IoOp, OffCpuReason, ShortWaker, Waker};

    fn markers(from: u64, n: u64) -> Vec<MarkerRecord> {
        (from..from + n)
            .map(|i| match i % 3 {
                0 => MarkerRecord::OffCpu {
                    start_ns: i,
                    end_ns: i + 10,
                    reason: OffCpuReason::Blocked,
                    run_delay_ns: Some(i),
                    landing_ns: 3,
                    waker: Some(Waker {
                        pid: 7,
                        tid: 8,
                        name: format!("w{i}"),
                        interrupt: None,
                    }),
                    cpus: (0, 1),
                    waker_stack: Some(5),
                },
                1 => MarkerRecord::Io {
                    start_ns: i,
                    issue_ns: i + 1,
                    done_ns: i + 2,
                    device: "vda".into(),
                    op: IoOp::Other(9),
                    flags: 5,
                    bytes: 4096,
                    sector: u64::MAX - i,
                    error: -5,
                    stack: None,
                },
                _ => MarkerRecord::ShortWaits {
                    start_ns: i,
                    end_ns: i + 4,
                    count: 3,
                    off_cpu_ns: 2,
                    waited_ns: 1,
                    landing_ns: 0,
                    waker: ShortWaker::Task { pid: 1, tid: 2 },
                },
            })
            .collect()
    }

    fn thread(tid: u32) -> MarkerOwner {
        MarkerOwner::Thread {
            pid: 1,
            process_start_ns: None,
            tid,
            thread_start_ns: Some(5),
        }
    }

    fn round_trip(mut spill: MarkerSpill) {
        spill.put(thread(1), &markers(0, 50));
        spill.put(MarkerOwner::Cpu(0), &markers(1000, 7));
        spill.put(thread(1), &markers(50, 30));
        spill.put(thread(2), &[]);
        assert!(!spill.holds(thread(2)), "nothing put, nothing held");
        assert_eq!(spill.load(MarkerOwner::Cpu(0)).unwrap(), markers(1000, 7));
        // What came later (still in memory) follows what was put.
        let mut later = markers(80, 5);
        spill.restore_into(thread(1), &mut later).unwrap();
        assert_eq!(later, markers(0, 85));
        assert!(!spill.holds(thread(1)), "restored once, then gone");
        let mut none = markers(0, 2);
        spill.restore_into(thread(3), &mut none).unwrap();
        assert_eq!(none, markers(0, 2));
        assert_eq!(spill.totals().0, 87);
    }

    #[test]
    fn markers_come_back_in_order_from_a_file() {
        let dir = std::env::temp_dir();
        let spill = MarkerSpill::new(&dir);
        assert!(spill.file.is_some() || spill.fallback.is_some());
        round_trip(spill);
    }

    #[test]
    fn markers_come_back_in_order_from_memory() {
        round_trip(MarkerSpill::in_memory());
    }

    #[test]
    fn a_directory_that_cannot_hold_the_file_falls_back() {
        // Not a directory: O_TMPFILE fails, the temporary directory serves.
        let spill = MarkerSpill::new(Path::new("/proc/self/status"));
        round_trip(spill);
    }
}
