//! A log2 histogram of microseconds, drawn as BCC's tools draw them
//! (`runqlat`, `biolatency`).
//!
//! In: durations, µs. Out: their counts per power-of-two bucket, and the
//! lines that draw them.

use std::fmt::Write as _;

/// Width of a histogram's bar, in characters (as BCC draws them).
const BAR_WIDTH: usize = 40;

/// A log2 histogram of microseconds, as BCC's tools print them.
#[derive(Default)]
pub(super) struct Log2Histogram {
    pub(super) counts: Vec<u64>,
}

impl Log2Histogram {
    /// Count one duration.
    pub(super) fn add(&mut self, us: f64) {
        // Bucket 0 holds 0-1 µs, bucket k holds [2^k, 2^(k+1)).
        let v = us.max(0.0) as u64;
        // At most bucket 62, so its upper bound fits in a u64.
        let bucket = if v < 2 {
            0
        } else {
            (63 - v.leading_zeros() as usize).min(62)
        };
        if self.counts.len() <= bucket {
            self.counts.resize(bucket + 1, 0);
        }
        self.counts[bucket] += 1;
    }

    /// The durations counted.
    pub(super) fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Draw it: one line per bucket from the first that holds any.
    pub(super) fn write(&self, out: &mut String, unit: &str) {
        let max = self.counts.iter().copied().max().unwrap_or(0).max(1);
        let first = self.counts.iter().position(|&c| c > 0).unwrap_or(0);
        let _ = writeln!(out, "     {unit:>19} : count    distribution");
        for (k, &count) in self.counts.iter().enumerate().skip(first) {
            let (lo, hi) = if k == 0 {
                (0u64, 1u64)
            } else {
                (1u64 << k, (1u64 << (k + 1)) - 1)
            };
            let bar =
                "*".repeat(((count as u128 * BAR_WIDTH as u128).div_ceil(max as u128)) as usize);
            let _ = writeln!(
                out,
                "     {lo:>8} -> {hi:<8} : {count:<8} |{bar:<BAR_WIDTH$}|"
            );
        }
    }
}
