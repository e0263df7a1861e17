//! Reading the store: listing its segments by their headers, choosing the
//! ones that hold a time range (each window once), and reading them back.
//!
//! In: the store's directory handle. Out: [`SegmentInfo`]s oldest first and
//! [`Query`]s of recordings, with one warning line per file skipped (naming
//! it and why: damage, or a format version this sysprof does not read).

use std::io::Read;

use super::dir::DirHandle;
use super::segment::{self, SegmentHeader};
use super::{file_name, Query, SegmentInfo, Store};
use crate::model::recording::Recording;

impl Store {
    /// Every segment, oldest first, and a warning per file that is not one.
    pub fn list(&self) -> (Vec<SegmentInfo>, Vec<String>) {
        let mut out = Vec::new();
        let mut warnings = Vec::new();
        let names = match self.dir.names() {
            Ok(names) => names,
            Err(e) => return (out, vec![format!("cannot list the store: {}: {e}", self.dir.path().display())]),
        };
        for name in names {
            // Ours are ASCII; another name is no segment of ours.
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') || !name.ends_with(".seg") {
                continue;
            }
            let path = self.dir.display_path(name);
            match read_header(&self.dir, name) {
                Ok((header, bytes)) => out.push(SegmentInfo { path, bytes, header }),
                // Removed by compaction or retention since the listing: not damage.
                Err(HeaderError::Gone) => {}
                Err(HeaderError::Bad(why)) => warnings.push(format!("skipping {}: {why}", path.display())),
            }
        }
        out.sort_by(|a, b| a.header.start_ms.total_cmp(&b.header.start_ms).then(b.header.level.cmp(&a.header.level)));
        (out, warnings)
    }

    /// Segments whose windows overlap [since_ms, until_ms], each window
    /// once: compacted segments are preferred over the windows they hold.
    pub fn select(segments: &[SegmentInfo], since_ms: f64, until_ms: f64) -> Vec<SegmentInfo> {
        let mut by_level: Vec<&SegmentInfo> = segments.iter().filter(|s| s.header.end_ms >= since_ms && s.header.start_ms <= until_ms).collect();
        by_level.sort_by(|a, b| b.header.level.cmp(&a.header.level).then(a.header.start_ms.total_cmp(&b.header.start_ms)));
        let mut chosen: Vec<SegmentInfo> = Vec::new();
        let mut held: Vec<(f64, f64)> = Vec::new();
        for s in by_level {
            let dup = s.header.windows.iter().any(|w| held.iter().any(|&(a, b)| w.start_ms >= a - 0.5 && w.end_ms <= b + 0.5));
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
        let bytes = read_file(&self.dir, file_name(&seg.path)).map_err(|e| match e {
            HeaderError::Gone => ReadError::Gone,
            HeaderError::Bad(w) => ReadError::Bad(w),
        })?;
        segment::decode(&bytes).map(|(_, r)| r).map_err(|e| ReadError::Bad(e.to_string()))
    }

    /// The windows overlapping [since_ms, until_ms]. A damaged segment is a
    /// warning; one removed by compaction while we read makes us list again
    /// (its windows are in the compacted file by then).
    pub fn query(&self, since_ms: f64, until_ms: f64) -> Query {
        for _attempt in 0..5 {
            let (all, mut warnings) = self.list();
            let mut q = Query::default();
            let mut raced = false;
            for seg in Self::select(&all, since_ms, until_ms) {
                match self.read(&seg) {
                    Ok(r) => q.recordings.push(r),
                    Err(ReadError::Gone) => {
                        raced = true;
                        break;
                    }
                    Err(ReadError::Bad(why)) => warnings.push(format!("skipping {}: {why}", seg.path.display())),
                }
            }
            if !raced {
                q.warnings = warnings;
                return q;
            }
        }
        Query { recordings: Vec::new(), warnings: vec!["the store kept changing while it was read; try again".into()] }
    }

}

/// Why a segment could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// It was removed (by compaction or retention) since it was listed.
    Gone,
    /// It is damaged; why.
    Bad(String),
}

enum HeaderError {
    Gone,
    Bad(String),
}

/// Largest segment read whole.
const MAX_SEGMENT: u64 = 1 << 30;

fn open_segment(dir: &DirHandle, name: &str) -> Result<(std::fs::File, u64), HeaderError> {
    let f = dir.open_read(name).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            HeaderError::Gone
        } else {
            HeaderError::Bad(e.to_string())
        }
    })?;
    let meta = f.metadata().map_err(|e| HeaderError::Bad(e.to_string()))?;
    if !meta.is_file() {
        return Err(HeaderError::Bad("not a regular file".into()));
    }
    Ok((f, meta.len()))
}

fn read_header(dir: &DirHandle, name: &str) -> Result<(SegmentHeader, u64), HeaderError> {
    let (mut f, len) = open_segment(dir, name)?;
    let mut prefix = [0u8; 20];
    f.read_exact(&mut prefix).map_err(|_| HeaderError::Bad("shorter than a segment's header (truncated)".into()))?;
    let need = segment::header_read_len(&prefix).ok_or_else(|| HeaderError::Bad("header length out of range".into()))?;
    if need as u64 > len {
        return Err(HeaderError::Bad("header longer than the file (truncated)".into()));
    }
    let mut bytes = vec![0u8; need];
    bytes[..20].copy_from_slice(&prefix);
    f.read_exact(&mut bytes[20..]).map_err(|e| HeaderError::Bad(e.to_string()))?;
    segment::decode_header(&bytes, len).map(|(h, _)| (h, len)).map_err(|e| HeaderError::Bad(e.to_string()))
}

fn read_file(dir: &DirHandle, name: &str) -> Result<Vec<u8>, HeaderError> {
    let (f, len) = open_segment(dir, name)?;
    if len > MAX_SEGMENT {
        return Err(HeaderError::Bad(format!("{len} bytes, more than a segment can be")));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    f.take(len).read_to_end(&mut bytes).map_err(|e| HeaderError::Bad(e.to_string()))?;
    Ok(bytes)
}

