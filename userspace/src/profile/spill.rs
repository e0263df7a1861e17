//! Threads' records kept on disk until their thread is written.
//!
//! In: the columns and markers `record` takes out of its merge between
//! windows ([`crate::model::merge::Merger::take_parts`]), with whose they
//! are. Out: each owner's records back, in the order they were put, when
//! its thread (or CPU track) is written ([`Spill::restore_into`],
//! [`Spill::load_before`]), and how many CPU samples it has here meanwhile.
//!
//! Why: `record` writes a process out as soon as it ends, but a server's
//! processes run the whole recording, and their records (every wait over
//! the threshold and its off-CPU sample, every block request, every slice of
//! the CPU tracks) were most of what its memory grew by: a marker is ~104
//! bytes and a name, thousands a second beside pgbench. Here a marker is
//! ~36 bytes (postcard), in an
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

use crate::model::merge::{ThreadPart, TrackKey};
use crate::model::recording::{MarkerRecord, ThreadRecord};

/// Where one put's bytes are.
#[derive(Clone, Copy)]
struct Chunk {
    in_file: bool,
    offset: u64,
    len: u32,
}

/// How many records of each kind an owner's chunks hold.
#[derive(Clone, Copy, Default)]
struct PartCounts {
    samples: usize,
    off_cpu: usize,
    markers: usize,
}

impl PartCounts {
    /// What `t` holds.
    fn of(t: &ThreadRecord) -> PartCounts {
        PartCounts {
            samples: t.samples.time_ns.len(),
            off_cpu: t.off_cpu.time_ns.len(),
            markers: t.markers.len(),
        }
    }
}

/// Threads' records by owner, encoded; see the module doc.
pub struct Spill {
    file: Option<File>,
    file_len: u64,
    /// A write to the file failed: the rest goes to memory.
    file_full: bool,
    memory: Vec<u8>,
    chunks: FxHashMap<TrackKey, Vec<Chunk>>,
    /// The records each owner has here, by kind: its CPU samples decide
    /// which tracks open visible, and the counts size its columns when
    /// they are read back (grown a chunk at a time, a busy server's thread
    /// held up to twice its markers, copied at each doubling).
    counts: FxHashMap<TrackKey, PartCounts>,
    markers: u64,
    records: u64,
    /// Why the file was not made or given up (said once, in the summary's
    /// warnings), if so.
    pub fallback: Option<String>,
}

impl Spill {
    /// A spill in an unnamed file in `dir` (else in the system's temporary
    /// directory, else in memory).
    pub fn new(dir: &Path) -> Spill {
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
                    "samples and markers of running threads were kept in memory: no unnamed file could be made beside the output or in the temporary directory ({e})"
                )),
            ),
        };
        Spill {
            file,
            fallback,
            ..Spill::in_memory()
        }
    }

    /// A spill that keeps its bytes in memory (tests, and where no file may be made).
    pub fn in_memory() -> Spill {
        Spill {
            file: None,
            file_len: 0,
            file_full: false,
            memory: Vec::new(),
            chunks: FxHashMap::default(),
            counts: FxHashMap::default(),
            markers: 0,
            records: 0,
            fallback: None,
        }
    }

    /// Keep `part` after what `owner` has here already. A file that
    /// cannot take it (a full disk) is given up for memory: never lost.
    pub fn put(&mut self, owner: TrackKey, part: &ThreadPart) {
        let samples = part.samples.time_ns.len();
        let records = samples + part.off_cpu.time_ns.len() + part.markers.len();
        if records == 0 {
            return;
        }
        let bytes = match postcard::to_stdvec(part) {
            Ok(b) if b.len() <= u32::MAX as usize => b,
            // Plain data always encodes; a chunk past 4 GiB cannot be.
            _ => unreachable!("a window's records encode, in less than 4 GiB"),
        };
        let in_file = match (&self.file, self.file_full) {
            (Some(f), false) => match f.write_all_at(&bytes, self.file_len) {
                Ok(()) => true,
                Err(e) => {
                    // The file keeps what it holds; no more is written to it.
                    self.file_full = true;
                    self.fallback = Some(format!(
                        "samples and markers of running threads were kept in memory from {} MB on: their file beside the output could not take more ({e})",
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
        self.markers += part.markers.len() as u64;
        self.records += records as u64;
        let counts = self.counts.entry(owner).or_default();
        counts.samples += samples;
        counts.off_cpu += part.off_cpu.time_ns.len();
        counts.markers += part.markers.len();
        self.chunks.entry(owner).or_default().push(chunk);
    }

    /// Put `owner`'s records before `t`'s own (they were put first; the
    /// columns then sorted by time), taking them out of here. An error is
    /// this process's own file failing to read back; the records it held
    /// are then not restored.
    pub fn restore_into(&mut self, owner: TrackKey, t: &mut ThreadRecord) -> io::Result<()> {
        let Some(chunks) = self.chunks.remove(&owner) else {
            return Ok(());
        };
        let counts = self.counts.remove(&owner).unwrap_or_default();
        self.read(&chunks, counts, PartCounts::of(t))?.prepend_to(t);
        Ok(())
    }

    /// `owner`'s records, left here, in columns of their size.
    pub fn load(&self, owner: TrackKey) -> io::Result<ThreadPart> {
        self.load_with_room(owner, PartCounts::default())
    }

    /// `owner`'s records, left here (for a writer that only reads), in
    /// columns with room for `t`'s own after them
    /// (`ThreadPart::prepend_to(t)` puts them there).
    pub fn load_before(&self, owner: TrackKey, t: &ThreadRecord) -> io::Result<ThreadPart> {
        self.load_with_room(owner, PartCounts::of(t))
    }

    fn load_with_room(&self, owner: TrackKey, later: PartCounts) -> io::Result<ThreadPart> {
        match self.chunks.get(&owner) {
            Some(chunks) => {
                let counts = self.counts.get(&owner).copied().unwrap_or_default();
                self.read(chunks, counts, later)
            }
            None => Ok(ThreadPart::default()),
        }
    }

    /// A CPU track's markers: those kept here, then `later`.
    pub fn cpu_markers(
        &self,
        owner: TrackKey,
        later: &[MarkerRecord],
    ) -> io::Result<Vec<MarkerRecord>> {
        let room = PartCounts {
            markers: later.len(),
            ..PartCounts::default()
        };
        let mut markers = self.load_with_room(owner, room)?.markers;
        markers.extend(later.iter().cloned());
        Ok(markers)
    }

    /// Whether `owner` has records here.
    pub fn holds(&self, owner: TrackKey) -> bool {
        self.chunks.contains_key(&owner)
    }

    /// The CPU samples `owner` has here.
    pub fn samples_of(&self, owner: TrackKey) -> usize {
        self.counts.get(&owner).map_or(0, |c| c.samples)
    }

    /// Records put so far, of them markers, and the bytes they took.
    pub fn totals(&self) -> (u64, u64, u64) {
        (
            self.records,
            self.markers,
            self.file_len + self.memory.len() as u64,
        )
    }

    /// The records of `chunks` (`counts` of them), in columns with room
    /// for `later` more after them.
    fn read(
        &self,
        chunks: &[Chunk],
        counts: PartCounts,
        later: PartCounts,
    ) -> io::Result<ThreadPart> {
        let mut out = ThreadPart::with_capacity(
            counts.samples + later.samples,
            counts.off_cpu + later.off_cpu,
            counts.markers + later.markers,
        );
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
            let part: ThreadPart = postcard::from_bytes(bytes).map_err(io::Error::other)?;
            out.append(part);
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
                        name: crate::model::short_name::short_name(&format!("w{i}")),
                        interrupt: None,
                    }),
                    cpus: (0, 1),
                    waker_stack: Some(5),
                },
                1 => MarkerRecord::Io {
                    start_ns: i,
                    issue_ns: i + 1,
                    done_ns: i + 2,
                    device: crate::model::short_name::short_name("vda"),
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

    fn thread(tid: u32) -> TrackKey {
        TrackKey::Thread {
            pid: 1,
            process_start_ns: None,
            tid,
            thread_start_ns: Some(5),
        }
    }

    /// A part of `n` records of each kind from time `from`.
    fn part(from: u64, n: u64) -> ThreadPart {
        let mut p = ThreadPart {
            markers: markers(from, n),
            ..Default::default()
        };
        for i in from..from + n {
            p.samples.time_ns.push(i);
            p.samples.stack.push(i as u32);
            p.samples.cpu_delta_ns.push(i * 2);
            p.samples.cpu.push(1);
            p.off_cpu.time_ns.push(i);
            p.off_cpu.stack.push(i as u32 + 1);
            p.off_cpu.duration_ns.push(7);
        }
        p
    }

    fn round_trip(mut spill: Spill) {
        spill.put(thread(1), &part(0, 50));
        spill.put(
            TrackKey::Cpu(0),
            &ThreadPart {
                markers: markers(1000, 7),
                ..Default::default()
            },
        );
        spill.put(thread(1), &part(50, 30));
        spill.put(thread(2), &ThreadPart::default());
        assert!(!spill.holds(thread(2)), "nothing put, nothing held");
        assert_eq!(spill.samples_of(thread(1)), 80);
        assert_eq!(
            spill
                .cpu_markers(TrackKey::Cpu(0), &markers(2000, 1))
                .unwrap(),
            [markers(1000, 7), markers(2000, 1)].concat()
        );
        assert_eq!(spill.load(thread(1)).unwrap(), part(0, 80));
        // What came later (still in the thread) follows what was put.
        let mut t = ThreadRecord::default();
        ThreadPart::take(&mut t);
        part(80, 5).prepend_to(&mut t);
        let mut copy = t.clone();
        spill
            .load_before(thread(1), &copy)
            .unwrap()
            .prepend_to(&mut copy);
        spill.restore_into(thread(1), &mut t).unwrap();
        assert_eq!(copy, t, "loaded for the writer as restored");
        // Read back into columns of their whole size: none grown by
        // doubling past what they hold.
        for t in [&copy, &t] {
            assert_eq!(t.samples.time_ns.capacity(), 85);
            assert_eq!(t.samples.cpu.capacity(), 85);
            assert_eq!(t.off_cpu.duration_ns.capacity(), 85);
            assert_eq!(t.markers.capacity(), 85);
        }
        assert_eq!(ThreadPart::take(&mut t), part(0, 85));
        assert!(!spill.holds(thread(1)), "restored once, then gone");
        assert_eq!(spill.samples_of(thread(1)), 0);
        let mut none = ThreadRecord::default();
        part(0, 2).prepend_to(&mut none);
        spill.restore_into(thread(3), &mut none).unwrap();
        assert_eq!(ThreadPart::take(&mut none), part(0, 2));
        assert_eq!(spill.totals().0, 80 * 3 + 7);
        assert_eq!(spill.totals().1, 87);
    }

    #[test]
    fn records_come_back_in_order_from_a_file() {
        let dir = std::env::temp_dir();
        let spill = Spill::new(&dir);
        assert!(spill.file.is_some() || spill.fallback.is_some());
        round_trip(spill);
    }

    #[test]
    fn records_come_back_in_order_from_memory() {
        round_trip(Spill::in_memory());
    }

    #[test]
    fn a_directory_that_cannot_hold_the_file_falls_back() {
        // Not a directory: O_TMPFILE fails, the temporary directory serves.
        let spill = Spill::new(Path::new("/proc/self/status"));
        round_trip(spill);
    }
}
