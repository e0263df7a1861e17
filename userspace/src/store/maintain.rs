//! Keeping the store in bounds: retention (oldest first, by size and age),
//! compaction of finished 10-minute buckets into level-1 segments (their
//! brief processes of a name run often folded into one track:
//! [`crate::model::fold::fold_within`]; their waits summed per minute, their
//! off-CPU time per 10 s and stack: [`crate::model::coarse`]), and the
//! removal of what a killed writer or compaction left behind.
//!
//! In: the writer's index of the store ([`SegmentInfo`]s it keeps up to
//! date). Out: files removed or written, the index changed to match, and
//! counts ([`Retained`], segments written) plus warning lines.

use super::{file_name, ReadError, Retained, SegmentInfo, Store};
use crate::model::merge;

/// Most bytes of segments compacted into one, counted decompressed (the
/// header's `raw_len`): decoding and merging takes a few times that in
/// memory, and zstd's ratio varies tenfold between windows (a fork storm's
/// command lines and names compress far better than samples), so the budget
/// on the compressed size let a run of fork-storm windows take the agent's
/// RSS to 147 MB in the bench. A bucket is compacted in several runs rather
/// than decoded whole.
pub(super) const COMPACT_INPUT_RAW_BYTES: u64 = 2 << 20;

/// Wall-clock span of a compacted (level 1) segment.
pub const BUCKET_MS: f64 = 600_000.0;

/// The compaction bucket in use: [`BUCKET_MS`], unless the environment sets
/// `SYSPROF_STORE_BUCKET_SECONDS` (the integration tests do, to see
/// compaction race with readers in seconds rather than ten minutes).
pub fn bucket_ms() -> f64 {
    static B: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *B.get_or_init(|| {
        std::env::var("SYSPROF_STORE_BUCKET_SECONDS")
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|&v| v >= 1.0)
            .map(|v| v * 1e3)
            .unwrap_or(BUCKET_MS)
    })
}

/// `segments` (in time order) cut into runs whose inputs fit
/// [`COMPACT_INPUT_RAW_BYTES`]: a bucket of a fork storm would otherwise be
/// decoded whole into memory.
fn runs_within_budget(segments: Vec<SegmentInfo>) -> Vec<Vec<SegmentInfo>> {
    let mut runs: Vec<Vec<SegmentInfo>> = Vec::new();
    let mut run_bytes = 0;
    for s in segments {
        if runs.is_empty() || run_bytes + s.header.raw_len > COMPACT_INPUT_RAW_BYTES {
            runs.push(Vec::new());
            run_bytes = 0;
        }
        run_bytes += s.header.raw_len;
        runs.last_mut().expect("pushed").push(s);
    }
    runs
}

impl Store {
    /// Remove temporaries a killed writer left behind.
    pub fn remove_stale_temporaries(&self) -> u64 {
        let mut n = 0;
        for name in self.dir.names().unwrap_or_default() {
            let Some(name) = name.to_str() else { continue };
            if name.starts_with(".tmp-") && name.ends_with(".seg") && self.dir.remove(name).is_ok()
            {
                n += 1;
            }
        }
        n
    }

    /// Remove the oldest segments of `index` (the writer's view of the
    /// store, kept up to date by it) until the store holds at most
    /// `max_bytes` and nothing that ended before `oldest_ms`.
    pub fn enforce_retention(
        &self,
        index: &mut Vec<SegmentInfo>,
        max_bytes: u64,
        oldest_ms: f64,
    ) -> Retained {
        index.sort_by(|a, b| a.header.end_ms.total_cmp(&b.header.end_ms));
        let mut total: u64 = index.iter().map(|s| s.bytes).sum();
        let mut r = Retained::default();
        let mut keep_from = 0;
        for s in index.iter() {
            if total <= max_bytes && s.header.end_ms >= oldest_ms {
                break;
            }
            match self.dir.remove(file_name(&s.path)) {
                Ok(()) => {
                    r.removed += 1;
                    r.freed += s.bytes;
                }
                // Gone already (removed by hand): it no longer counts.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(_) => break,
            }
            total -= s.bytes;
            keep_from += 1;
        }
        index.drain(..keep_from);
        r.bytes = total;
        r
    }

    /// Compact every 10-minute bucket of `index` that ended before `now_ms`
    /// and holds more than one segment into level-1 segments: each run of
    /// its segments whose inputs fit [`COMPACT_INPUT_RAW_BYTES`] into one,
    /// then the outputs again while two neighbours fit together. Returns
    /// the segments written (those a later pass took in included); a run
    /// whose inputs cannot all be read is left as it is (with a warning),
    /// never half compacted. Memory freed is given back after each pass.
    pub fn compact(
        &self,
        index: &mut Vec<SegmentInfo>,
        now_ms: f64,
        warnings: &mut Vec<String>,
    ) -> u64 {
        let mut buckets: std::collections::BTreeMap<i64, Vec<SegmentInfo>> = Default::default();
        let bucket = bucket_ms();
        for s in index.iter() {
            let b = (s.header.start_ms / bucket).floor() as i64;
            if (b as f64 + 1.0) * bucket <= now_ms {
                buckets.entry(b).or_default().push(s.clone());
            }
        }
        let mut written = 0;
        for (_, group) in buckets {
            let mut group = Self::select(&group, f64::NEG_INFINITY, f64::INFINITY);
            // Passes until no two neighbours fit the budget together: a
            // run's output is a fraction of its inputs (brief processes
            // folded, waits summed, each frame and stack once), so the
            // outputs of one pass are compacted again in the next, and a
            // bucket's frame table is paid once per budget's worth rather
            // than once per run. Each pass that writes leaves fewer
            // segments, so the passes end.
            loop {
                let mut next = Vec::with_capacity(group.len());
                let (mut wrote, mut failed) = (false, false);
                for run in runs_within_budget(group) {
                    if run.len() < 2 {
                        next.extend(run);
                        continue;
                    }
                    match self.compact_run(index, &run, warnings) {
                        Some(info) => {
                            written += 1;
                            wrote = true;
                            next.push(info);
                        }
                        // Left as it is (with a warning); no further pass
                        // tries it again until the next compaction.
                        None => {
                            failed = true;
                            next.extend(run);
                        }
                    }
                }
                if !wrote || failed {
                    break;
                }
                // The pass's decoded inputs are freed: give them back before
                // the next decodes its own (the peak is one pass's, not two).
                crate::sys::process::release_freed_memory();
                group = next;
            }
        }
        written
    }

    /// Compact one run of segments into one; see [`Store::compact`].
    /// Returns the segment written, or None (inputs left as they are).
    fn compact_run(
        &self,
        index: &mut Vec<SegmentInfo>,
        group: &[SegmentInfo],
        warnings: &mut Vec<String>,
    ) -> Option<SegmentInfo> {
        if group.len() < 2 {
            return None;
        }
        let mut recs = Vec::with_capacity(group.len());
        let mut windows = Vec::new();
        for s in group {
            match self.read(s) {
                Ok(r) => {
                    recs.push(r);
                    windows.extend(s.header.windows.iter().copied());
                }
                Err(e) => {
                    if let ReadError::Bad(why) = e {
                        warnings.push(format!("not compacting around {}: {why}", s.path.display()));
                    }
                    return None;
                }
            }
        }
        // Once compacted, a bucket's stacks are no longer kept per Go
        // goroutine (its labels stay), its brief processes of a name run
        // often are one track as `show` gives them (model::fold), its waits
        // are summed per minute and its off-CPU time per 10 s and stack
        // (model::coarse).
        let mut merged = merge::merge_without_goroutines(recs);
        crate::model::fold::fold_within(&mut merged);
        crate::model::coarse::coarsen(&mut merged);
        match self.write(merged, windows, 1) {
            Ok(info) => {
                for s in group {
                    let _ = self.dir.remove(file_name(&s.path));
                }
                index.retain(|x| !group.iter().any(|g| g.path == x.path));
                index.push(info.clone());
                Some(info)
            }
            Err(e) => {
                warnings.push(e.to_string());
                None
            }
        }
    }

    /// Remove segments whose every window a compacted segment holds (the
    /// inputs a compaction killed before it removed them left behind).
    pub fn remove_superseded(&self, index: &mut Vec<SegmentInfo>) -> u64 {
        let kept = Self::select(index, f64::NEG_INFINITY, f64::INFINITY);
        let mut removed = 0;
        index.retain(|s| {
            let keep = kept.iter().any(|k| k.path == s.path);
            if !keep && self.dir.remove(file_name(&s.path)).is_ok() {
                removed += 1;
            }
            keep
        });
        removed
    }
}
