//! What a thread did over a span, remembered for the next chain that
//! reaches it.
//!
//! In: the culprits [`Threads::charge_activity`](super::Threads::charge_activity)
//! found for a thread over a span, keyed by the chain's first tid, the
//! tid and the span. Out: the same culprits when asked again, within a
//! memory budget ([`MEMO_BYTES`]).

use rustc_hash::FxHashMap;

use super::Culprit;

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
/// same: its culprits interned (a few hundred distinct ones, against
/// hundreds of thousands of spans), within [`MEMO_BYTES`].
#[derive(Default)]
pub(super) struct Memo {
    spans: FxHashMap<SpanOf, Box<[(u32, f64)]>>,
    culprits: Vec<Culprit>,
    ids: FxHashMap<Culprit, u32>,
    /// The spans' boxed entries' heap bytes (with malloc's header each).
    boxed: usize,
    /// The interned culprits' bytes, both copies (never forgotten: a few
    /// hundred).
    interned: usize,
}

impl Memo {
    /// Add what was kept for `key` to `out`; false if nothing was.
    pub(super) fn read(&self, key: &SpanOf, out: &mut FxHashMap<Culprit, f64>) -> bool {
        let Some(known) = self.spans.get(key) else {
            return false;
        };
        for &(id, ms) in known.iter() {
            *out.entry(self.culprits[id as usize].clone()).or_default() += ms;
        }
        true
    }

    /// What it holds, in bytes: the table at its capacity (a slot and a
    /// control byte each), the entries, the culprits.
    fn bytes(&self) -> usize {
        let slot = std::mem::size_of::<SpanOf>() + std::mem::size_of::<Box<[(u32, f64)]>>() + 1;
        self.spans.capacity() * slot + self.boxed + self.interned
    }

    /// Keep `its` for `key`, forgetting every span first (the table's
    /// memory too) if that would pass [`MEMO_BYTES`].
    pub(super) fn keep(&mut self, key: SpanOf, its: &FxHashMap<Culprit, f64>) {
        let size = 16 + its.len() * std::mem::size_of::<(u32, f64)>();
        if self.bytes() + size > MEMO_BYTES {
            self.spans = FxHashMap::default();
            self.boxed = 0;
        }
        let entry: Box<[(u32, f64)]> = its
            .iter()
            .map(|(c, &ms)| {
                let id = match self.ids.get(c) {
                    Some(&id) => id,
                    None => {
                        let id = self.culprits.len() as u32;
                        self.culprits.push(c.clone());
                        self.ids.insert(c.clone(), id);
                        let one = std::mem::size_of::<Culprit>()
                            + c.device.as_ref().map_or(0, |d| d.len() + 16);
                        self.interned += 2 * one + 8;
                        id
                    }
                };
                (id, ms)
            })
            .collect();
        self.boxed += size;
        self.spans.insert(key, entry);
    }
}
