//! Reading the store: listing its segments by their headers, choosing the
//! ones that hold a time range (each window once), and reading them back.
//!
//! In: the store's directory handle. Out: [`SegmentInfo`]s oldest first and
//! [`Query`]s of recordings, with one warning line per file skipped (naming
//! it and why: damage, or a format version this sysprof does not read).

use std::io::Read;

use super::dir::DirHandle;
use super::segment::{self, SegmentError, SegmentHeader};
#[cfg(test)]
use super::Query;
use super::{file_name, SegmentInfo, Store};
use crate::model::recording::Recording;

impl Store {
    /// Every segment, oldest first, and a warning per file that is not one.
    pub fn list(&self) -> (Vec<SegmentInfo>, Vec<String>) {
        let mut out = Vec::new();
        let mut warnings = Vec::new();
        let names = match self.dir.names() {
            Ok(names) => names,
            Err(e) => {
                return (
                    out,
                    vec![format!(
                        "cannot list the store: {}: {e}",
                        self.dir.path().display()
                    )],
                )
            }
        };
        for name in names {
            // Ours are ASCII; another name is no segment of ours.
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') || !name.ends_with(".seg") {
                continue;
            }
            let path = self.dir.display_path(name);
            match read_header(&self.dir, name) {
                Ok((header, bytes)) => out.push(SegmentInfo {
                    path,
                    bytes,
                    header,
                }),
                // Removed by compaction or retention since the listing: not damage.
                Err(ReadError::Gone) => {}
                Err(ReadError::Bad(why)) => {
                    warnings.push(format!("skipping {}: {why}", path.display()))
                }
            }
        }
        out.sort_by(|a, b| {
            a.header
                .start_ms
                .total_cmp(&b.header.start_ms)
                .then(b.header.level.cmp(&a.header.level))
        });
        (out, warnings)
    }

    /// Segments whose windows overlap [since_ms, until_ms], each window
    /// once: compacted segments are preferred over the windows they hold.
    pub fn select(segments: &[SegmentInfo], since_ms: f64, until_ms: f64) -> Vec<SegmentInfo> {
        let mut by_level: Vec<&SegmentInfo> = segments
            .iter()
            .filter(|s| s.header.end_ms >= since_ms && s.header.start_ms <= until_ms)
            .collect();
        // Highest level first, then by time; among segments of one level
        // and start (a compaction's output beside its inputs of the same
        // level, its removal of them cut short), the one holding the most
        // windows, so the output is read and its inputs count as superseded.
        by_level.sort_by(|a, b| {
            b.header
                .level
                .cmp(&a.header.level)
                .then(a.header.start_ms.total_cmp(&b.header.start_ms))
                .then(b.header.windows.len().cmp(&a.header.windows.len()))
        });
        let mut chosen: Vec<SegmentInfo> = Vec::new();
        let mut held: Vec<(f64, f64)> = Vec::new();
        for s in by_level {
            let dup = s.header.windows.iter().any(|w| {
                held.iter()
                    .any(|&(a, b)| w.start_ms >= a - 0.5 && w.end_ms <= b + 0.5)
            });
            if dup {
                continue;
            }
            held.extend(s.header.windows.iter().map(|w| (w.start_ms, w.end_ms)));
            chosen.push(s.clone());
        }
        chosen.sort_by(|a, b| a.header.start_ms.total_cmp(&b.header.start_ms));
        chosen
    }

    /// Read one segment's recording.
    pub fn read(&self, seg: &SegmentInfo) -> Result<Recording, ReadError> {
        let bytes = read_file(&self.dir, file_name(&seg.path))?;
        Ok(segment::decode(&bytes)?.1)
    }

    /// What one segment's bytes hold, by kind (`show --list --sizes`).
    pub fn part_sizes(&self, seg: &SegmentInfo) -> Result<segment::PartSizes, ReadError> {
        let bytes = read_file(&self.dir, file_name(&seg.path))?;
        Ok(segment::part_sizes(&bytes)?)
    }

    /// The windows overlapping [since_ms, until_ms]. A damaged segment is a
    /// warning; one removed by compaction while we read makes us list again
    /// (its windows are in the compacted file by then).
    #[cfg(test)]
    pub fn query(&self, since_ms: f64, until_ms: f64) -> Query {
        let (recordings, warnings) =
            self.query_each(since_ms, until_ms, Vec::new, |all, r| all.push(r));
        Query {
            recordings: recordings.unwrap_or_default(),
            warnings,
        }
    }

    /// The windows overlapping [since_ms, until_ms], one segment's recording
    /// at a time, oldest first, each handed to `add` and then dropped: what
    /// `show` reads an hour of a busy machine with, holding one segment at a
    /// time rather than all of them. `fresh` makes the state they are added
    /// to; a segment removed by compaction while we read (its windows are in
    /// the compacted file by then) makes us list again and start from a
    /// fresh state. The state is `None` if the store kept changing (then the
    /// last warning says so). Damaged segments are warnings.
    pub fn query_each<S>(
        &self,
        since_ms: f64,
        until_ms: f64,
        mut fresh: impl FnMut() -> S,
        mut add: impl FnMut(&mut S, Recording),
    ) -> (Option<S>, Vec<String>) {
        for _attempt in 0..5 {
            let (all, mut warnings) = self.list();
            let mut state = fresh();
            let mut raced = false;
            for seg in Self::select(&all, since_ms, until_ms) {
                match self.read(&seg) {
                    Ok(r) => add(&mut state, r),
                    Err(ReadError::Gone) => {
                        raced = true;
                        break;
                    }
                    Err(ReadError::Bad(why)) => {
                        warnings.push(format!("skipping {}: {why}", seg.path.display()))
                    }
                }
            }
            if !raced {
                return (Some(state), warnings);
            }
        }
        (
            None,
            vec!["the store kept changing while it was read; try again".into()],
        )
    }
}

/// Why a segment could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// It was removed (by compaction or retention) since it was listed.
    Gone,
    /// It is damaged or not a segment this sysprof reads; why.
    Bad(BadSegment),
}

/// What is wrong with a segment file (the line after "skipping FILE: ").
#[derive(Debug, thiserror::Error)]
pub enum BadSegment {
    /// It could not be opened or read.
    #[error("{0}")]
    Io(std::io::Error),
    /// Something else than a file is in its place.
    #[error("not a regular file")]
    NotRegular,
    /// It ends before its fixed prefix does.
    #[error("shorter than a segment's header (truncated)")]
    ShortPrefix,
    /// Its header length is over the limit.
    #[error("header length out of range")]
    HeaderLengthOutOfRange,
    /// Its header length is more than the file holds.
    #[error("header longer than the file (truncated)")]
    ShortHeader,
    /// Larger than a segment can be.
    #[error("{0} bytes, more than a segment can be")]
    TooLarge(u64),
    /// Its bytes are not a segment (damage, another version).
    #[error(transparent)]
    Format(#[from] SegmentError),
}

impl From<BadSegment> for ReadError {
    fn from(e: BadSegment) -> ReadError {
        ReadError::Bad(e)
    }
}

impl From<std::io::Error> for ReadError {
    fn from(e: std::io::Error) -> ReadError {
        ReadError::Bad(BadSegment::Io(e))
    }
}

impl From<SegmentError> for ReadError {
    fn from(e: SegmentError) -> ReadError {
        ReadError::Bad(BadSegment::Format(e))
    }
}

/// Largest segment read whole.
const MAX_SEGMENT: u64 = 1 << 30;

fn open_segment(dir: &DirHandle, name: &str) -> Result<(std::fs::File, u64), ReadError> {
    let f = dir.open_read(name).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            ReadError::Gone
        } else {
            e.into()
        }
    })?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(BadSegment::NotRegular.into());
    }
    Ok((f, meta.len()))
}

fn read_header(dir: &DirHandle, name: &str) -> Result<(SegmentHeader, u64), ReadError> {
    let (mut f, len) = open_segment(dir, name)?;
    let mut prefix = [0u8; 20];
    f.read_exact(&mut prefix)
        .map_err(|_| BadSegment::ShortPrefix)?;
    let need = segment::header_read_len(&prefix).ok_or(BadSegment::HeaderLengthOutOfRange)?;
    if need as u64 > len {
        return Err(BadSegment::ShortHeader.into());
    }
    let mut bytes = vec![0u8; need];
    bytes[..20].copy_from_slice(&prefix);
    f.read_exact(&mut bytes[20..])?;
    Ok((segment::decode_header(&bytes, len)?.0, len))
}

fn read_file(dir: &DirHandle, name: &str) -> Result<Vec<u8>, ReadError> {
    let (f, len) = open_segment(dir, name)?;
    if len > MAX_SEGMENT {
        return Err(BadSegment::TooLarge(len).into());
    }
    let mut bytes = Vec::with_capacity(len as usize);
    f.take(len).read_to_end(&mut bytes)?;
    Ok(bytes)
}
