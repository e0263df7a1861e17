//! Sideband: what happened to processes while we recorded.
//!
//! In: one `perf_event_open` dummy event per CPU (`mmap2` with inodes,
//! `comm` with exec, `task`, `sample_id_all`, CLOCK_MONOTONIC). Out:
//! [`SidebandEvent`]s: every executable mapping, exec, rename, fork and exit
//! on the machine, even of processes that live for a millisecond, with times
//! on the same clock as the BPF samples. Processes that already ran before
//! the recording come from [`proc_snapshot`].

pub mod counters;
pub mod perf_ring;
pub mod proc_snapshot;

use std::os::fd::{FromRawFd, OwnedFd};

use linux_perf_event_reader::{
    CpuMode, Endianness, EventRecord, Mmap2FileId, PerfEventAttr, RawData, RawEventRecord,
    RecordParseInfo, RecordType,
};
use perf_event_open_sys as sys;

use crate::error::RecordError;
use perf_ring::{PerfRing, RecordHeader};

/// One thing that happened to a process, in CLOCK_MONOTONIC nanoseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SidebandEvent {
    /// An executable file mapping appeared.
    Mmap(MmapEvent),
    /// A thread was renamed, or (with `exec`) its process exec'd a new program.
    Comm {
        /// Time, ns.
        time: u64,
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// New name.
        name: String,
        /// True for an exec.
        exec: bool,
    },
    /// A thread or process was created.
    Fork {
        /// Time, ns.
        time: u64,
        /// New process id (== ppid for a new thread).
        pid: u32,
        /// Parent process id.
        ppid: u32,
        /// New thread id.
        tid: u32,
    },
    /// A thread exited (a process exits with its last thread, tid == pid).
    Exit {
        /// Time, ns.
        time: u64,
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
    },
}

/// An executable mapping of a file (or `[vdso]`) into a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MmapEvent {
    /// Time, ns (0 for mappings read from `/proc` at start).
    pub time: u64,
    /// Process id.
    pub pid: u32,
    /// Start address.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// Path as the process sees it.
    pub path: String,
    /// GNU build id, when the kernel reported it.
    pub build_id: Option<Vec<u8>>,
    /// (major, minor, inode), when the kernel reported it instead of a build id.
    pub inode: Option<(u32, u32, u64)>,
}

impl SidebandEvent {
    /// When it happened.
    pub fn time(&self) -> u64 {
        match self {
            SidebandEvent::Mmap(m) => m.time,
            SidebandEvent::Comm { time, .. }
            | SidebandEvent::Fork { time, .. }
            | SidebandEvent::Exit { time, .. } => *time,
        }
    }
}

/// The per-CPU dummy events and their rings.
pub struct Sideband {
    rings: Vec<PerfRing>,
    /// Events of one drain, merged across CPUs (kept to reuse its memory).
    pending: Vec<SidebandEvent>,
    parse_info: RecordParseInfo,
    /// Records the kernel could not write because a ring was full.
    pub lost: u64,
    /// Records we could not parse.
    pub malformed: u64,
}

/// Data pages per CPU ring (512 KiB with 4 KiB pages).
const RING_PAGES: usize = 128;

impl Sideband {
    /// Open a dummy event on every CPU in `cpus`.
    pub fn open(cpus: &[u32]) -> Result<Sideband, RecordError> {
        let mut attr = dummy_attr();
        let mut rings = Vec::with_capacity(cpus.len());
        for &cpu in cpus {
            // SAFETY: attr is a valid, fully initialized perf_event_attr.
            let fd = unsafe {
                sys::perf_event_open(
                    &mut attr,
                    -1,
                    cpu as i32,
                    -1,
                    sys::bindings::PERF_FLAG_FD_CLOEXEC as _,
                )
            };
            if fd < 0 {
                let err = std::io::Error::last_os_error();
                if err.raw_os_error() == Some(libc::EACCES)
                    || err.raw_os_error() == Some(libc::EPERM)
                {
                    return Err(RecordError::NotPermitted {
                        what: "perf_event_open (sideband)".into(),
                        paranoid: crate::error::paranoid(),
                    });
                }
                return Err(RecordError::PerfEvent {
                    what: format!("the sideband event on CPU {cpu}"),
                    source: err,
                });
            }
            // SAFETY: perf_event_open returned a new fd we own.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            let ring = PerfRing::new(fd, RING_PAGES).map_err(|e| RecordError::PerfEvent {
                what: format!("the sideband ring on CPU {cpu}"),
                source: e,
            })?;
            rings.push(ring);
        }
        Ok(Sideband {
            rings,
            pending: Vec::new(),
            parse_info: parse_info_for(&attr),
            lost: 0,
            malformed: 0,
        })
    }

    /// Read every pending record of every CPU and hand the decoded events to
    /// `sink` in time order. Each CPU's ring is in order, but a process that
    /// migrates can exec on one CPU and map its libraries on another: applied
    /// ring by ring, the exec could come after the mappings it replaced.
    pub fn drain(&mut self, sink: &mut impl FnMut(SidebandEvent)) {
        let parse_info = self.parse_info;
        let (mut lost, mut malformed) = (0u64, 0u64);
        let pending = &mut self.pending;
        for ring in &mut self.rings {
            ring.drain(|hdr, body| match decode(hdr, body, parse_info) {
                Decoded::Event(e) => pending.push(e),
                Decoded::Lost(n) => lost += n,
                Decoded::Ignored => {}
                Decoded::Malformed => malformed += 1,
            });
        }
        pending.sort_by_key(SidebandEvent::time);
        for e in pending.drain(..) {
            sink(e);
        }
        self.lost += lost;
        self.malformed += malformed;
    }
}

fn dummy_attr() -> sys::bindings::perf_event_attr {
    let mut attr = sys::bindings::perf_event_attr {
        type_: sys::bindings::PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
        config: sys::bindings::PERF_COUNT_SW_DUMMY as u64,
        sample_type: (sys::bindings::PERF_SAMPLE_TID
            | sys::bindings::PERF_SAMPLE_TIME
            | sys::bindings::PERF_SAMPLE_CPU) as u64,
        clockid: libc::CLOCK_MONOTONIC,
        ..Default::default()
    };
    attr.set_mmap(1);
    attr.set_mmap2(1);
    attr.set_comm(1);
    attr.set_comm_exec(1);
    attr.set_task(1);
    attr.set_sample_id_all(1);
    attr.set_use_clockid(1);
    // Inodes, not build ids: a mapped file is identified by what it is.
    attr
}

/// Let linux-perf-event-reader know our attr, by handing it the attr's bytes.
fn parse_info_for(attr: &sys::bindings::perf_event_attr) -> RecordParseInfo {
    // SAFETY: perf_event_attr is plain old data.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            attr as *const _ as *const u8,
            std::mem::size_of::<sys::bindings::perf_event_attr>(),
        )
    };
    let (parsed, _) = PerfEventAttr::parse::<_, byteorder::NativeEndian>(bytes)
        .expect("our own perf_event_attr parses");
    let endian = if cfg!(target_endian = "little") {
        Endianness::LittleEndian
    } else {
        Endianness::BigEndian
    };
    RecordParseInfo::new(&parsed, endian)
}

enum Decoded {
    Event(SidebandEvent),
    Lost(u64),
    Ignored,
    Malformed,
}

fn decode(hdr: RecordHeader, body: RawData<'_>, parse_info: RecordParseInfo) -> Decoded {
    let record = RawEventRecord::new(RecordType(hdr.kind), hdr.misc, body, parse_info);
    let time = record
        .common_data()
        .ok()
        .and_then(|c| c.timestamp)
        .unwrap_or(0);
    let Ok(parsed) = record.parse() else {
        return Decoded::Malformed;
    };
    match parsed {
        EventRecord::Mmap2(m) => {
            if m.cpu_mode != CpuMode::User && m.pid != -1 {
                return Decoded::Ignored;
            }
            let path = String::from_utf8_lossy(&m.path.as_slice()).into_owned();
            let (build_id, inode) = match m.file_id {
                Mmap2FileId::BuildId(id) => (Some(id), None),
                Mmap2FileId::InodeAndVersion(i) => (None, Some((i.major, i.minor, i.inode))),
            };
            Decoded::Event(SidebandEvent::Mmap(MmapEvent {
                time,
                pid: m.pid as u32,
                start: m.address,
                len: m.length,
                pgoff: m.page_offset,
                path,
                build_id,
                inode,
            }))
        }
        EventRecord::Comm(c) => Decoded::Event(SidebandEvent::Comm {
            time,
            pid: c.pid as u32,
            tid: c.tid as u32,
            name: String::from_utf8_lossy(&c.name.as_slice()).into_owned(),
            exec: c.is_execve,
        }),
        EventRecord::Fork(f) => Decoded::Event(SidebandEvent::Fork {
            time: f.timestamp,
            pid: f.pid as u32,
            ppid: f.ppid as u32,
            tid: f.tid as u32,
        }),
        EventRecord::Exit(f) => Decoded::Event(SidebandEvent::Exit {
            time: f.timestamp,
            pid: f.pid as u32,
            tid: f.tid as u32,
        }),
        EventRecord::Lost(l) => Decoded::Lost(l.count),
        _ => Decoded::Ignored,
    }
}
