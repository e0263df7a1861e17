//! What a thread did over a span, remembered for the next chain that
//! reaches it.
//!
//! In: the culprits [`Threads::charge_activity`](super::Threads::charge_activity)
//! found for a thread over a span, keyed by the chain's first tid, the
//! tid and the span. Out: the same culprits when asked again, within a
//! memory budget ([`MEMO_BYTES`]).

use rustc_hash::FxHashMap;

use super::blame::{Blame, Key};

/// Bytes [`Memo`] may hold: when full, it forgets every span and starts
/// again. A span's entry is ~60 bytes and 16 a culprit; pgbench's client's
/// 10 s kept ~400,000 spans. Unbudgeted, with each culprit stored whole,
/// that was 300-400 MB more than the profile's own parse.
pub(super) const MEMO_BYTES: usize = 64 << 20;

/// A thread over a span, for one thread asked about: (the chain's first
/// tid, the tid, the span's start and end as bits). Kept for one chain's
/// root only: another root's chains cut other threads as cycles (a
/// thread's own wait was charged to its own running).
type SpanOf = (u32, u32, u64, u64);

/// What [`Threads::charge_activity`](super::Threads::charge_activity)
/// found per thread and span, kept for the next chain that reaches the
/// same: its culprits as keys (a word each), within [`MEMO_BYTES`].
#[derive(Default)]
pub(super) struct Memo {
    spans: FxHashMap<SpanOf, Box<[(Key, f64)]>>,
    /// The spans' boxed entries' heap bytes (with malloc's header each).
    boxed: usize,
}

impl Memo {
    /// Add what was kept for `key` to `out`; false if nothing was.
    pub(super) fn read(&self, key: &SpanOf, out: &mut Blame) -> bool {
        let Some(known) = self.spans.get(key) else {
            return false;
        };
        out.add_scaled(known, 1.0);
        true
    }

    /// What it holds, in bytes: the table at its capacity (a slot and a
    /// control byte each) and the entries.
    fn bytes(&self) -> usize {
        let slot = std::mem::size_of::<SpanOf>() + std::mem::size_of::<Box<[(Key, f64)]>>() + 1;
        self.spans.capacity() * slot + self.boxed
    }

    /// Keep `its` for `key`, forgetting every span first (the table's
    /// memory too) if that would pass [`MEMO_BYTES`].
    pub(super) fn keep(&mut self, key: SpanOf, its: &[(Key, f64)]) {
        let size = 16 + std::mem::size_of_val(its);
        if self.bytes() + size > MEMO_BYTES {
            self.spans = FxHashMap::default();
            self.boxed = 0;
        }
        self.boxed += size;
        self.spans.insert(key, its.into());
    }
}
