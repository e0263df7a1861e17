//! One segment file of the local store: a finished window (or a run of them,
//! compacted) as bytes, and back.
//!
//! In: a [`Recording`] and the spans of the windows it holds. Out: the
//! file's bytes; and from bytes, the header alone (for listing) or the
//! whole recording, each checked.
//!
//! Layout (all integers little-endian):
//!
//! ```text
//! 0   8 bytes  magic "SYSPSEG\0"
//! 8   u16      format version ([`VERSION`], 14: 3's payload followed by 4's
//!              additions, 5's landings, 6's frame kinds and 14's folded
//!              tracks, 7's kinds
//!              telling interpreted and compiled Java apart, 8's PHP, 9's Perl, 10's Ruby, 11's Go labels,
//!              12's numbers coded against what predicts them; 2 had no
//!              short-wait markers and is read as it is; 1 had no unknown
//!              run delays)
//! 10  u16      reserved, 0
//! 12  u32      header length H
//! 16  u32      CRC-32 of the header
//! 20  H bytes  header: postcard SegmentHeader (time range, windows, totals,
//!              payload length and CRC-32, uncompressed length)
//! 20+H         payload: zstd of postcard StoredRecording (the store's own
//!              types, [`super::format`]), its times in µs (the
//!              profile's resolution) as differences from the previous one
//!              (zigzag), durations and CPU times as amounts, markers' times
//!              from their start: small numbers, which postcard's varints
//!              and zstd keep short; from 12 on a thread's samples after
//!              its first hold their time less the sampling interval and
//!              their CPU time less the time since the sample before, a
//!              frame its symbol's start less the frame's own (each 0 or
//!              near it where the prediction holds)
//! ```
//!
//! Everything read is checked before it is trusted: magic, version, both
//! CRCs, lengths against the file's size, the uncompressed length against
//! a cap (a damaged length cannot make us allocate gigabytes), and the
//! decoded stack tree's parents. A file that fails any check is skipped by
//! readers with a warning naming it.

use serde::{Deserialize, Serialize};

use super::format::{
    infer_kinds, StoredAdditions, StoredFolded, StoredKinds, StoredLandings, StoredMarker,
    StoredRecording,
};
use crate::model::recording::Recording;

/// First bytes of every segment.
pub const MAGIC: &[u8; 8] = b"SYSPSEG\0";
/// The format version written: 4 is 3 followed, in the payload, by
/// [`StoredAdditions`] (Python functions' first lines); 5 is 4 followed by
/// [`StoredLandings`] (wakeups' landings, apart from run delay); 6 is 5
/// followed by [`StoredKinds`] (each frame's kind); 7 is 6 with two kinds
/// more (a Java method interpreted or compiled, where 6 said only Java): a
/// sysprof that reads 6 would refuse their bytes, so it is told the version;
/// 8 is 7 with one kind more (a PHP function), for the same reason; 9 is 8
/// with a Perl sub, 10 is 9 with a Ruby method, 11 is 10 with a Go
/// goroutine's labels frame; 12 is 11 with some numbers coded against what
/// predicts them ([`predict`]): the same types, other values; 13 is 12 with
/// a Go goroutine's id frame; 14 is 13 followed by [`StoredFolded`] (the
/// folded tracks a compacted segment holds).
pub const VERSION: u16 = 14;
/// The first version whose numbers are coded by [`predict`].
const PREDICTED_FROM: u16 = 12;
/// The oldest version read: 2's types are 3's less the `ShortWaits`
/// marker, a variant added at the end, so 2's bytes decode as they are.
pub const OLDEST_READ: u16 = 2;
/// Fixed part before the header.
const PREFIX: usize = 20;
/// Largest header accepted (a header lists windows: a day of 10-s windows is ~200 KiB).
const MAX_HEADER: usize = 16 << 20;
/// Largest payload accepted once decompressed.
const MAX_RAW_PAYLOAD: u64 = 2 << 30;

/// One window a segment holds: its wall-clock range, which identifies it
/// (a compacted segment holds many; readers use them to never count a
/// window twice while compaction replaces files).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WindowSpan {
    /// Start, ms since the Unix epoch.
    pub start_ms: f64,
    /// End, ms since the Unix epoch.
    pub end_ms: f64,
}

/// Why a segment could not be encoded, or its bytes are not one (each a
/// line that follows "skipping FILE: " in the warnings).
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    /// postcard could not encode the payload.
    #[error("cannot encode the window: {0}")]
    Encode(postcard::Error),
    /// zstd could not compress the payload.
    #[error("cannot compress the window: {0}")]
    Compress(std::io::Error),
    /// postcard could not encode the header.
    #[error("cannot encode the header: {0}")]
    EncodeHeader(postcard::Error),
    /// The first bytes are not [`MAGIC`].
    #[error("not a sysprof segment (bad magic)")]
    BadMagic,
    /// A format version this sysprof does not read.
    #[error("segment format version {0}, this sysprof reads {OLDEST_READ} to {VERSION}")]
    Version(u16),
    /// The reserved bytes are not 0.
    #[error("reserved header bytes are set (damaged)")]
    Reserved,
    /// The header's length does not fit.
    #[error("header length {0} does not fit the file")]
    HeaderLength(usize),
    /// The header's CRC does not match.
    #[error("header checksum mismatch (damaged)")]
    HeaderChecksum,
    /// The header does not decode.
    #[error("header does not decode: {0}")]
    Header(postcard::Error),
    /// The file's size is not what the header says.
    #[error("{found} bytes, the header says {expected} (truncated or damaged)")]
    Size {
        /// The file's size.
        found: u64,
        /// What the header says it is.
        expected: u64,
    },
    /// The payload's CRC does not match.
    #[error("payload checksum mismatch (damaged)")]
    PayloadChecksum,
    /// The payload claims more than [`MAX_RAW_PAYLOAD`] uncompressed.
    #[error("claims {0} bytes uncompressed, more than the {MAX_RAW_PAYLOAD} accepted")]
    TooLarge(u64),
    /// zstd could not decompress the payload.
    #[error("payload does not decompress: {0}")]
    Decompress(std::io::Error),
    /// The payload does not decode.
    #[error("payload does not decode: {0}")]
    Payload(postcard::Error),
    /// The payload decodes but does not hold together (a stack or frame out
    /// of range, columns of different lengths): what is wrong.
    #[error("{0}")]
    Inconsistent(&'static str),
}

/// What a segment holds, readable without its payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SegmentHeader {
    /// 0: one window as the agent wrote it; 1: windows compacted together.
    pub level: u8,
    /// Start of the first window, ms since the Unix epoch.
    pub start_ms: f64,
    /// End of the last window, ms since the Unix epoch.
    pub end_ms: f64,
    /// The windows it holds.
    pub windows: Vec<WindowSpan>,
    /// On-CPU samples.
    pub samples: u64,
    /// Processes.
    pub processes: u32,
    /// Records lost in the kernel or on the way during these windows.
    pub lost: u64,
    /// Bytes of the compressed payload.
    pub payload_len: u64,
    /// CRC-32 of the compressed payload.
    pub payload_crc: u32,
    /// Bytes of the payload once decompressed.
    pub raw_len: u64,
}

/// Encode `rec` (holding `windows`) as a segment at `level`, zstd level `zlevel`.
pub fn encode(
    rec: Recording,
    windows: Vec<WindowSpan>,
    level: u8,
    zlevel: i32,
) -> Result<(SegmentHeader, Vec<u8>), SegmentError> {
    let samples = rec.sample_count();
    // A folded track counts the processes it stands for.
    let processes = rec.processes.iter().fold(0u32, |n, p| {
        n.saturating_add(p.folded.max(1).min(u64::from(u32::MAX)) as u32)
    });
    let lost = rec.stats.lost_total();
    let mut rec = rec;
    let additions = StoredAdditions::of(&rec);
    let landings = StoredLandings::of(&mut rec);
    let kinds = StoredKinds::of(&rec);
    let folded = StoredFolded::of(&rec);
    let mut stored = StoredRecording::from(rec);
    times_to_deltas(&mut stored);
    predict(&mut stored);
    let mut raw = postcard::to_stdvec(&stored).map_err(SegmentError::Encode)?;
    raw.extend(postcard::to_stdvec(&additions).map_err(SegmentError::Encode)?);
    raw.extend(postcard::to_stdvec(&landings).map_err(SegmentError::Encode)?);
    raw.extend(postcard::to_stdvec(&kinds).map_err(SegmentError::Encode)?);
    raw.extend(postcard::to_stdvec(&folded).map_err(SegmentError::Encode)?);
    let payload = zstd::bulk::compress(&raw, zlevel).map_err(SegmentError::Compress)?;
    let header = SegmentHeader {
        level,
        start_ms: windows
            .iter()
            .map(|w| w.start_ms)
            .fold(f64::INFINITY, f64::min),
        end_ms: windows
            .iter()
            .map(|w| w.end_ms)
            .fold(f64::NEG_INFINITY, f64::max),
        windows,
        samples,
        processes,
        lost,
        payload_len: payload.len() as u64,
        payload_crc: crc32fast::hash(&payload),
        raw_len: raw.len() as u64,
    };
    let hbytes = postcard::to_stdvec(&header).map_err(SegmentError::EncodeHeader)?;
    let mut out = Vec::with_capacity(PREFIX + hbytes.len() + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(hbytes.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&hbytes).to_le_bytes());
    out.extend_from_slice(&hbytes);
    out.extend_from_slice(&payload);
    Ok((header, out))
}

/// The header of a segment from its first bytes (at least the prefix and
/// the header), checked; `file_len` is the whole file's size. Returns the
/// header and where the payload starts.
pub fn decode_header(bytes: &[u8], file_len: u64) -> Result<(SegmentHeader, usize), SegmentError> {
    if bytes.len() < PREFIX || &bytes[..8] != MAGIC {
        return Err(SegmentError::BadMagic);
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if !(OLDEST_READ..=VERSION).contains(&version) {
        return Err(SegmentError::Version(version));
    }
    if bytes[10] != 0 || bytes[11] != 0 {
        return Err(SegmentError::Reserved);
    }
    let hlen = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes")) as usize;
    let hcrc = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes"));
    if hlen > MAX_HEADER || PREFIX + hlen > bytes.len() {
        return Err(SegmentError::HeaderLength(hlen));
    }
    let hbytes = &bytes[PREFIX..PREFIX + hlen];
    if crc32fast::hash(hbytes) != hcrc {
        return Err(SegmentError::HeaderChecksum);
    }
    let header: SegmentHeader = postcard::from_bytes(hbytes).map_err(SegmentError::Header)?;
    if (PREFIX + hlen) as u64 + header.payload_len != file_len {
        return Err(SegmentError::Size {
            found: file_len,
            expected: (PREFIX + hlen) as u64 + header.payload_len,
        });
    }
    Ok((header, PREFIX + hlen))
}

/// Bytes of a segment that must be read to get its header.
pub fn header_read_len(prefix: &[u8]) -> Option<usize> {
    if prefix.len() < PREFIX {
        return None;
    }
    let hlen = u32::from_le_bytes(prefix[12..16].try_into().ok()?) as usize;
    (hlen <= MAX_HEADER).then_some(PREFIX + hlen)
}

/// The whole recording of a segment file's bytes, checked.
pub fn decode(bytes: &[u8]) -> Result<(SegmentHeader, Recording), SegmentError> {
    let (header, at) = decode_header(bytes, bytes.len() as u64)?;
    let payload = &bytes[at..];
    if crc32fast::hash(payload) != header.payload_crc {
        return Err(SegmentError::PayloadChecksum);
    }
    if header.raw_len > MAX_RAW_PAYLOAD {
        return Err(SegmentError::TooLarge(header.raw_len));
    }
    let raw = zstd::bulk::decompress(payload, header.raw_len as usize)
        .map_err(SegmentError::Decompress)?;
    let (mut stored, rest): (StoredRecording, &[u8]) =
        postcard::take_from_bytes(&raw).map_err(SegmentError::Payload)?;
    let (additions, rest): (StoredAdditions, &[u8]) = match rest {
        [] => (StoredAdditions::default(), rest),
        rest => postcard::take_from_bytes(rest).map_err(SegmentError::Payload)?,
    };
    // Before format 5 a marker's run delay held its landing: left so.
    let (landings, rest): (Option<StoredLandings>, &[u8]) = match rest {
        [] => (None, rest),
        rest => {
            let (l, rest) = postcard::take_from_bytes(rest).map_err(SegmentError::Payload)?;
            (Some(l), rest)
        }
    };
    // Before format 6 frames had no kind: told from what they hold.
    let (kinds, rest): (Option<StoredKinds>, &[u8]) = match rest {
        [] => (None, rest),
        rest => {
            let (k, rest) = postcard::take_from_bytes(rest).map_err(SegmentError::Payload)?;
            (Some(k), rest)
        }
    };
    // Before format 14 no track was folded (what follows an older payload
    // is not read as folded tracks); from 14 on the block ends the payload.
    let folded = if header_version(bytes) >= 14 {
        let (f, rest): (StoredFolded, &[u8]) =
            postcard::take_from_bytes(rest).map_err(SegmentError::Payload)?;
        if !rest.is_empty() {
            return Err(SegmentError::Inconsistent("bytes after the folded tracks"));
        }
        f
    } else {
        StoredFolded::default()
    };
    deltas_to_times(&mut stored, header_version(bytes) >= PREDICTED_FROM)?;
    let mut rec = stored.into_model().ok_or(SegmentError::Inconsistent(
        "a stack's parent does not precede it",
    ))?;
    if !additions.apply(&mut rec) {
        return Err(SegmentError::Inconsistent(
            "a start line of a frame it does not have",
        ));
    }
    if landings.is_some_and(|l| !l.apply(&mut rec)) {
        return Err(SegmentError::Inconsistent(
            "more or fewer landings than markers with one",
        ));
    }
    match kinds {
        Some(k) => {
            if !k.apply(&mut rec) {
                return Err(SegmentError::Inconsistent(
                    "more or fewer frame kinds than frames, or a kind unknown",
                ));
            }
        }
        None if header_version(bytes) >= 6 => {
            return Err(SegmentError::Inconsistent(
                "no frame kinds in a segment of format 6 or later",
            ))
        }
        None => infer_kinds(&mut rec),
    }
    if !folded.apply(&mut rec) {
        return Err(SegmentError::Inconsistent(
            "a folded track of a process it does not have",
        ));
    }
    Ok((header, rec))
}

/// What a segment's bytes hold, by kind: each part of its payload
/// compressed alone (zstd level 3), the parts then scaled to add up to the
/// payload's compressed bytes (zstd shares its dictionary across parts, so
/// a part alone is a little larger than its share). For `show --list
/// --sizes` and the bench's bytes per stored sample per kind.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PartSizes {
    /// On-CPU samples (time, stack, CPU time, CPU).
    pub samples: f64,
    /// Off-CPU entries (the call tree's weights while off the CPU).
    pub off_cpu: f64,
    /// Off-CPU waits and runs of short waits (markers).
    pub waits: f64,
    /// Block I/O requests (markers).
    pub io: f64,
    /// CPU slices (markers, per-CPU tracks).
    pub cpu_slices: f64,
    /// Frames, their names and libraries (with what follows the recording
    /// in the payload: frames' kinds and start lines, markers' landings,
    /// the folded tracks' counts).
    pub frames: f64,
    /// The stack tree.
    pub stacks: f64,
    /// Processes' and threads' names, command lines and cgroups.
    pub names: f64,
    /// Counters, stats, warnings, the header.
    pub other: f64,
}

impl PartSizes {
    /// All of them.
    pub fn total(&self) -> f64 {
        self.samples
            + self.off_cpu
            + self.waits
            + self.io
            + self.cpu_slices
            + self.frames
            + self.stacks
            + self.names
            + self.other
    }

    /// `self` plus `o`.
    pub fn add(&mut self, o: &PartSizes) {
        self.samples += o.samples;
        self.off_cpu += o.off_cpu;
        self.waits += o.waits;
        self.io += o.io;
        self.cpu_slices += o.cpu_slices;
        self.frames += o.frames;
        self.stacks += o.stacks;
        self.names += o.names;
        self.other += o.other;
    }

    /// Each part times `k`.
    pub fn scaled(&self, k: f64) -> PartSizes {
        PartSizes {
            samples: self.samples * k,
            off_cpu: self.off_cpu * k,
            waits: self.waits * k,
            io: self.io * k,
            cpu_slices: self.cpu_slices * k,
            frames: self.frames * k,
            stacks: self.stacks * k,
            names: self.names * k,
            other: self.other * k,
        }
    }

    /// Each part as (name, bytes).
    pub fn parts(&self) -> [(&'static str, f64); 9] {
        [
            ("samples", self.samples),
            ("off-CPU", self.off_cpu),
            ("waits", self.waits),
            ("I/O", self.io),
            ("CPU slices", self.cpu_slices),
            ("frames", self.frames),
            ("stacks", self.stacks),
            ("names", self.names),
            ("other", self.other),
        ]
    }
}

/// A segment file's bytes by kind ([`PartSizes`]), checked as [`decode`]
/// checks them.
pub fn part_sizes(bytes: &[u8]) -> Result<PartSizes, SegmentError> {
    let (header, at) = decode_header(bytes, bytes.len() as u64)?;
    let payload = &bytes[at..];
    if crc32fast::hash(payload) != header.payload_crc {
        return Err(SegmentError::PayloadChecksum);
    }
    if header.raw_len > MAX_RAW_PAYLOAD {
        return Err(SegmentError::TooLarge(header.raw_len));
    }
    let raw = zstd::bulk::decompress(payload, header.raw_len as usize)
        .map_err(SegmentError::Decompress)?;
    let (stored, rest): (StoredRecording, &[u8]) =
        postcard::take_from_bytes(&raw).map_err(SegmentError::Payload)?;
    let alone = |v: &dyn erased::Part| -> f64 {
        let raw = v.bytes();
        zstd::bulk::compress(&raw, 3).map_or(raw.len(), |c| c.len()) as f64
    };
    let threads = || stored.processes.iter().flat_map(|p| p.threads.iter());
    let markers = |keep: fn(&StoredMarker) -> bool| -> Vec<&StoredMarker> {
        threads()
            .flat_map(|t| t.markers.iter())
            .filter(|m| keep(m))
            .collect()
    };
    let samples: Vec<_> = threads().map(|t| &t.samples).collect();
    let off_cpu: Vec<_> = threads().map(|t| &t.off_cpu).collect();
    let waits = markers(|m| {
        matches!(
            m,
            StoredMarker::OffCpu { .. } | StoredMarker::ShortWaits { .. }
        )
    });
    let io = markers(|m| matches!(m, StoredMarker::Io { .. }));
    let slices = (
        markers(|m| matches!(m, StoredMarker::OnCpu { .. })),
        &stored.cpu_tracks,
    );
    let names: Vec<_> = stored
        .processes
        .iter()
        .map(|p| {
            (
                (&p.name, &p.exe, &p.cmdline, &p.cgroup),
                p.threads.iter().map(|t| &t.name).collect::<Vec<_>>(),
            )
        })
        .collect();
    let other = (
        &stored.counters,
        &stored.stats,
        &stored.warnings,
        &stored.notes,
    );
    let sizes = PartSizes {
        samples: alone(&samples),
        off_cpu: alone(&off_cpu),
        waits: alone(&waits),
        io: alone(&io),
        cpu_slices: alone(&slices),
        frames: alone(&(&stored.frames, &stored.libs)) + alone(&rest),
        stacks: alone(&stored.stacks),
        names: alone(&names),
        other: alone(&other),
    };
    let scale = header.payload_len as f64 / sizes.total().max(1.0);
    let mut sizes = sizes.scaled(scale);
    sizes.other += at as f64;
    Ok(sizes)
}

/// A part of a payload as the bytes postcard makes of it (object safe).
mod erased {
    pub trait Part {
        fn bytes(&self) -> Vec<u8>;
    }
    impl<T: serde::Serialize> Part for T {
        fn bytes(&self) -> Vec<u8> {
            postcard::to_stdvec(self).unwrap_or_default()
        }
    }
}

/// The format version of a segment whose header was checked.
fn header_version(bytes: &[u8]) -> u16 {
    u16::from_le_bytes([bytes[8], bytes[9]])
}

/// Nanoseconds to whole microseconds, rounded (the profile's own resolution).
fn us(ns: u64) -> i64 {
    (ns.saturating_add(500) / 1000) as i64
}

/// A signed difference as an unsigned number that stays short when small
/// either way (zigzag: 0, -1, 1, -2, ... -> 0, 1, 2, 3, ...).
fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

/// Times (ns) as zigzag differences in µs from the previous one (the first
/// from `base_us`).
fn to_deltas(v: &mut [u64], base_us: i64) {
    let mut prev = base_us;
    for x in v.iter_mut() {
        let t = us(*x);
        *x = zigzag(t - prev);
        prev = t;
    }
}

fn from_deltas(v: &mut [u64], base_us: i64) {
    let mut prev = base_us;
    for x in v.iter_mut() {
        prev = prev.wrapping_add(unzigzag(*x));
        *x = (prev.max(0) as u64).saturating_mul(1000);
    }
}

/// Amounts (ns) that add up, as µs such that every running sum stays
/// within half a µs (rounding each alone would let the error add up).
fn to_amounts(v: &mut [u64]) {
    let (mut sum, mut prev) = (0u64, 0i64);
    for x in v.iter_mut() {
        sum = sum.saturating_add(*x);
        let t = us(sum);
        *x = (t - prev) as u64;
        prev = t;
    }
}

fn from_amounts(v: &mut [u64]) {
    for x in v.iter_mut() {
        *x = x.saturating_mul(1000);
    }
}

/// A marker's times: its start as a zigzag µs difference from `prev`
/// (updated), its other times in µs from its start.
fn marker_to_stored(m: &mut StoredMarker, prev: &mut i64) {
    let rel = |t: u64, start: u64| (us(t) - us(start)).max(0) as u64;
    match m {
        StoredMarker::OffCpu {
            start_ns,
            end_ns,
            run_delay_ns,
            ..
        } => {
            let s = *start_ns;
            *end_ns = rel(*end_ns, s);
            *run_delay_ns = run_delay_ns.map(|d| us(d) as u64);
            *start_ns = zigzag(us(s) - *prev);
            *prev = us(s);
        }
        StoredMarker::Io {
            start_ns,
            issue_ns,
            done_ns,
            ..
        } => {
            let s = *start_ns;
            *issue_ns = rel(*issue_ns, s);
            *done_ns = rel(*done_ns, s);
            *start_ns = zigzag(us(s) - *prev);
            *prev = us(s);
        }
        StoredMarker::OnCpu {
            start_ns, end_ns, ..
        } => {
            let s = *start_ns;
            *end_ns = rel(*end_ns, s);
            *start_ns = zigzag(us(s) - *prev);
            *prev = us(s);
        }
        StoredMarker::ShortWaits {
            start_ns,
            end_ns,
            off_cpu_ns,
            waited_ns,
            ..
        } => {
            let s = *start_ns;
            *end_ns = rel(*end_ns, s);
            *off_cpu_ns = us(*off_cpu_ns) as u64;
            *waited_ns = us(*waited_ns) as u64;
            *start_ns = zigzag(us(s) - *prev);
            *prev = us(s);
        }
    }
}

fn marker_from_stored(m: &mut StoredMarker, prev: &mut i64) {
    let ns = |t: i64| (t.max(0) as u64).saturating_mul(1000);
    let start = |z: &mut u64, prev: &mut i64| -> u64 {
        *prev = prev.wrapping_add(unzigzag(*z));
        *z = ns(*prev);
        *z
    };
    match m {
        StoredMarker::OffCpu {
            start_ns,
            end_ns,
            run_delay_ns,
            ..
        } => {
            let s = start(start_ns, prev);
            *end_ns = s.saturating_add(end_ns.saturating_mul(1000));
            *run_delay_ns = run_delay_ns.map(|d| d.saturating_mul(1000));
        }
        StoredMarker::Io {
            start_ns,
            issue_ns,
            done_ns,
            ..
        } => {
            let s = start(start_ns, prev);
            *issue_ns = s.saturating_add(issue_ns.saturating_mul(1000));
            *done_ns = s.saturating_add(done_ns.saturating_mul(1000));
        }
        StoredMarker::OnCpu {
            start_ns, end_ns, ..
        } => {
            let s = start(start_ns, prev);
            *end_ns = s.saturating_add(end_ns.saturating_mul(1000));
        }
        StoredMarker::ShortWaits {
            start_ns,
            end_ns,
            off_cpu_ns,
            waited_ns,
            ..
        } => {
            let s = start(start_ns, prev);
            *end_ns = s.saturating_add(end_ns.saturating_mul(1000));
            *off_cpu_ns = off_cpu_ns.saturating_mul(1000);
            *waited_ns = waited_ns.saturating_mul(1000);
        }
    }
}

/// Times as stored: in µs (the profile's resolution), as short numbers
/// that compress: each column's times as differences from the previous
/// one, durations and CPU times as amounts, a marker's times from its start.
fn times_to_deltas(rec: &mut StoredRecording) {
    let base = us(rec.start_ns);
    for t in rec.processes.iter_mut().flat_map(|p| p.threads.iter_mut()) {
        to_deltas(&mut t.samples.time_ns, base);
        to_amounts(&mut t.samples.cpu_delta_ns);
        // Durations from the rounded start to the rounded end.
        for (start, d) in t
            .off_cpu
            .time_ns
            .iter()
            .zip(t.off_cpu.duration_ns.iter_mut())
        {
            *d = (us(start.saturating_add(*d)) - us(*start)).max(0) as u64;
        }
        to_deltas(&mut t.off_cpu.time_ns, base);
        let mut prev = base;
        for m in &mut t.markers {
            marker_to_stored(m, &mut prev);
        }
    }
    for (_, markers) in &mut rec.cpu_tracks {
        let mut prev = base;
        for m in markers {
            marker_to_stored(m, &mut prev);
        }
    }
    for c in &mut rec.counters {
        to_deltas(&mut c.time_ns, base);
    }
}

/// The sampling interval in whole µs, as [`predict`] takes it (a damaged
/// interval is some number: the columns then decode to other numbers, never
/// to an error or a panic).
fn interval_us(interval_ms: f64) -> i64 {
    (interval_ms * 1000.0).round() as i64
}

/// VERSION 12's coding, after [`times_to_deltas`]: each number less what
/// predicts it, so that where the prediction holds it is 0 or near it and
/// takes a byte that zstd then squeezes. A thread's samples come one
/// interval apart while it runs (its time: less the interval) and use the
/// time between them when it ran throughout (its CPU time: the time since
/// the sample before less it); a frame's symbol starts its offset before
/// the frame (its start: the sum's difference from the frame's address).
/// Their first sample is as it was. In a compacted 3-minute segment of the
/// agent beside a CPU-bound program and a build, zstd's bytes of the
/// samples' times 7,959 -> 5,848, CPU times 9,334 -> 7,425, frames'
/// numbers 27,967 -> 22,199.
fn predict(rec: &mut StoredRecording) {
    let interval = interval_us(rec.interval_ms);
    for t in rec.processes.iter_mut().flat_map(|p| p.threads.iter_mut()) {
        let s = &mut t.samples;
        for (time, cpu) in s.time_ns.iter_mut().zip(s.cpu_delta_ns.iter_mut()).skip(1) {
            let since = unzigzag(*time);
            *time = zigzag(since.wrapping_sub(interval));
            *cpu = zigzag(since.wrapping_sub(*cpu as i64));
        }
    }
    for f in &mut rec.frames {
        let a = &mut f.symbols;
        a.symbol_start = a.symbol_start.wrapping_add(a.symbol_offset) ^ f.address;
    }
}

/// The reverse of [`predict`] (columns of other lengths are refused after
/// it, by [`deltas_to_times`]; a damaged number decodes to another number).
fn unpredict(rec: &mut StoredRecording) {
    let interval = interval_us(rec.interval_ms);
    for t in rec.processes.iter_mut().flat_map(|p| p.threads.iter_mut()) {
        let s = &mut t.samples;
        for (time, cpu) in s.time_ns.iter_mut().zip(s.cpu_delta_ns.iter_mut()).skip(1) {
            let since = unzigzag(*time).wrapping_add(interval);
            *time = zigzag(since);
            *cpu = since.wrapping_sub(unzigzag(*cpu)).max(0) as u64;
        }
    }
    for f in &mut rec.frames {
        let a = &mut f.symbols;
        a.symbol_start = (a.symbol_start ^ f.address).wrapping_sub(a.symbol_offset);
    }
}

/// The reverse of [`times_to_deltas`] (and, with `predicted`, of
/// [`predict`] first); checks the columns agree in length
/// and stacks and frames are in range (a damaged payload must not make the
/// profile writer index out of bounds).
fn deltas_to_times(rec: &mut StoredRecording, predicted: bool) -> Result<(), SegmentError> {
    if predicted {
        unpredict(rec);
    }
    let base = us(rec.start_ns);
    let nodes = rec.stacks.key.len() as u32;
    let frames = rec.frames.len() as u64;
    if rec.stacks.back.len() != rec.stacks.key.len() {
        return Err(SegmentError::Inconsistent(
            "a stack's parent does not precede it",
        ));
    }
    if rec.stacks.key.iter().any(|&k| k >= frames) {
        return Err(SegmentError::Inconsistent(
            "a stack names a frame that does not exist",
        ));
    }
    let libs = rec.libs.len() as u32;
    if rec
        .frames
        .iter()
        .any(|f| f.lib != crate::model::recording::NO_LIB && f.lib >= libs)
    {
        return Err(SegmentError::Inconsistent(
            "a frame names a library that does not exist",
        ));
    }
    for t in rec.processes.iter_mut().flat_map(|p| p.threads.iter_mut()) {
        let s = &mut t.samples;
        let o = &mut t.off_cpu;
        if s.time_ns.len() != s.stack.len()
            || s.time_ns.len() != s.cpu_delta_ns.len()
            || s.time_ns.len() != s.cpu.len()
            || o.time_ns.len() != o.stack.len()
            || o.time_ns.len() != o.duration_ns.len()
        {
            return Err(SegmentError::Inconsistent(
                "columns of a thread differ in length",
            ));
        }
        if s.stack.iter().chain(&o.stack).any(|&n| n >= nodes) {
            return Err(SegmentError::Inconsistent(
                "a sample names a stack that does not exist",
            ));
        }
        for m in &t.markers {
            if let StoredMarker::OffCpu {
                waker_stack: Some(n),
                ..
            }
            | StoredMarker::Io { stack: Some(n), .. } = m
            {
                if *n >= nodes {
                    return Err(SegmentError::Inconsistent(
                        "a marker names a stack that does not exist",
                    ));
                }
            }
        }
        from_deltas(&mut s.time_ns, base);
        from_amounts(&mut s.cpu_delta_ns);
        from_deltas(&mut o.time_ns, base);
        from_amounts(&mut o.duration_ns);
        let mut prev = base;
        for m in &mut t.markers {
            marker_from_stored(m, &mut prev);
        }
    }
    for (_, markers) in &mut rec.cpu_tracks {
        let mut prev = base;
        for m in markers {
            marker_from_stored(m, &mut prev);
        }
    }
    for c in &mut rec.counters {
        if c.time_ns.len() != c.count.len() {
            return Err(SegmentError::Inconsistent(
                "columns of a counter differ in length",
            ));
        }
        from_deltas(&mut c.time_ns, base);
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests;
