//! A culprit as the charging passes it around: one word, and the small
//! tables that sum time per culprit.
//!
//! In: a thread, what it was doing ([`What`]) and the device of an I/O
//! piece (interned by [`super::read`]). Out: a [`Key`] (a `u64`: copied,
//! compared and hashed as an integer) and [`Blame`], the time per key of
//! one charge; [`super::Culprit`] is made from a key only for the answer.
//!
//! Why: a chain's charge makes and sums a few culprits at every step, and
//! pgbench's client's 8 s take hundreds of thousands of steps. As a struct
//! holding the text of what it was and a device name, each step hashed the
//! text, cloned the name and grew a hash map: `report --why` of that
//! client took 7.6 s, 84 % of it charging, half of that in hash maps and
//! malloc. A step's culprits are few (under ten): a list searched in
//! place sums them without a hash or an allocation.

/// What a piece of a wait was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum What {
    Running,
    Runnable,
    HoldingCpu,
    WakingCpu,
    Io,
    Timer,
    Softirq,
    Interrupt,
    SeveralWakers,
    UnknownWaker,
    Cycle,
    TooDeep,
}

impl What {
    const ALL: [What; 12] = [
        What::Running,
        What::Runnable,
        What::HoldingCpu,
        What::WakingCpu,
        What::Io,
        What::Timer,
        What::Softirq,
        What::Interrupt,
        What::SeveralWakers,
        What::UnknownWaker,
        What::Cycle,
        What::TooDeep,
    ];

    /// The words the answer says it with ([`super::Culprit::what`]).
    pub(super) fn text(self) -> &'static str {
        match self {
            What::Running => "running",
            What::Runnable => "runnable",
            What::HoldingCpu => "holding its CPU",
            What::WakingCpu => "waking its CPU",
            What::Io => "I/O",
            What::Timer => "timer",
            What::Softirq => "softirq",
            What::Interrupt => "interrupt",
            What::SeveralWakers => "several wakers",
            What::UnknownWaker => "unknown waker",
            What::Cycle => "waiting (cycle)",
            What::TooDeep => "waiting (chain too deep)",
        }
    }
}

/// A device id meaning "no device" (an id is its index in the interned
/// names plus one).
pub(super) const NO_DEVICE: u16 = 0;

/// A culprit in one word: tid in the low 32 bits, [`What`] in the next 8,
/// the device id in the 16 above.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Key(u64);

impl Key {
    pub(super) fn new(tid: u32, what: What, device: u16) -> Key {
        Key(tid as u64 | (what as u64) << 32 | (device as u64) << 40)
    }

    pub(super) fn tid(self) -> u32 {
        self.0 as u32
    }

    pub(super) fn what(self) -> What {
        What::ALL[((self.0 >> 32) & 0xff) as usize]
    }

    pub(super) fn device(self) -> u16 {
        (self.0 >> 40) as u16
    }
}

/// Entries past which [`Blame`] finds a key through a hash index rather
/// than by searching its list: a profile anyone wrote can put thousands of
/// threads on one CPU's track in one span, and a list searched for each of
/// them is quadratic.
const INDEXED_PAST: usize = 32;

/// Time per culprit of one charge: a short list, summed in place (with an
/// index once it is long), in the order the culprits came.
#[derive(Debug, Default, Clone)]
pub(super) struct Blame {
    list: Vec<(Key, f64)>,
    /// Each key's place in `list`, kept once `list` passes [`INDEXED_PAST`].
    index: Option<rustc_hash::FxHashMap<Key, usize>>,
}

impl Blame {
    /// Add `ms` (nothing if not positive) to `key`.
    pub(super) fn put(&mut self, key: Key, ms: f64) {
        if ms > 0.0 {
            self.add(key, ms);
        }
    }

    /// Add `ms` to `key`, whatever its sign.
    pub(super) fn add(&mut self, key: Key, ms: f64) {
        match self.place(key) {
            Some(i) => self.list[i].1 += ms,
            None => {
                self.list.push((key, ms));
                let n = self.list.len();
                match &mut self.index {
                    Some(index) => {
                        index.insert(key, n - 1);
                    }
                    None if n > INDEXED_PAST => {
                        self.index = Some(
                            self.list
                                .iter()
                                .enumerate()
                                .map(|(i, &(k, _))| (k, i))
                                .collect(),
                        );
                    }
                    None => {}
                }
            }
        }
    }

    /// Where `key` is in the list.
    fn place(&self, key: Key) -> Option<usize> {
        match &self.index {
            Some(index) => index.get(&key).copied(),
            None => self.list.iter().position(|(k, _)| *k == key),
        }
    }

    /// Add all of `other`, each scaled by `scale`.
    pub(super) fn add_scaled(&mut self, other: &[(Key, f64)], scale: f64) {
        for &(k, ms) in other {
            self.add(k, ms * scale);
        }
    }

    pub(super) fn get_mut(&mut self, key: Key) -> Option<&mut f64> {
        let i = self.place(key)?;
        Some(&mut self.list[i].1)
    }

    /// Forget every key (the list's memory is kept, the index dropped).
    pub(super) fn clear(&mut self) {
        self.list.clear();
        self.index = None;
    }

    pub(super) fn total(&self) -> f64 {
        self.list.iter().map(|(_, v)| v).sum()
    }

    pub(super) fn entries(&self) -> &[(Key, f64)] {
        &self.list
    }

    pub(super) fn into_entries(self) -> Vec<(Key, f64)> {
        self.list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_gives_back_what_made_it() {
        for what in What::ALL {
            for (tid, device) in [(0, 0), (u32::MAX, u16::MAX), (12345, 7)] {
                let k = Key::new(tid, what, device);
                assert_eq!((k.tid(), k.what(), k.device()), (tid, what, device));
            }
        }
        assert_ne!(
            Key::new(1, What::Running, 0),
            Key::new(1, What::Runnable, 0)
        );
        assert_ne!(Key::new(1, What::Io, 1), Key::new(1, What::Io, 2));
    }

    /// Check that a long sum (past the index's threshold) sums per key in
    /// the order the keys came, as a short one does.
    #[test]
    fn a_long_blame_sums_as_a_short_one() {
        let mut m = Blame::default();
        for round in 0..3 {
            for tid in 0..1000u32 {
                m.put(Key::new(tid, What::HoldingCpu, 0), 1.0 + round as f64);
            }
        }
        assert_eq!(m.entries().len(), 1000);
        for (i, &(k, v)) in m.entries().iter().enumerate() {
            assert_eq!((k.tid(), v), (i as u32, 6.0));
        }
        *m.get_mut(Key::new(999, What::HoldingCpu, 0)).unwrap() = 0.0;
        assert_eq!(m.total(), 999.0 * 6.0);
        m.clear();
        m.put(Key::new(5, What::Io, 1), 2.0);
        assert_eq!(m.entries(), &[(Key::new(5, What::Io, 1), 2.0)]);
        assert!(m.get_mut(Key::new(6, What::Io, 1)).is_none());
    }

    #[test]
    fn blame_sums_per_key_and_drops_nothing_positive() {
        let (a, b) = (Key::new(1, What::Running, 0), Key::new(2, What::Io, 3));
        let mut m = Blame::default();
        m.put(a, 1.5);
        m.put(b, 2.0);
        m.put(a, 0.5);
        m.put(b, 0.0);
        m.put(b, -1.0);
        assert_eq!(m.entries(), &[(a, 2.0), (b, 2.0)]);
        let mut n = Blame::default();
        n.add_scaled(m.entries(), 0.5);
        assert_eq!(n.total(), 2.0);
        *n.get_mut(b).unwrap() -= 1.0;
        assert_eq!(n.entries(), &[(a, 1.0), (b, 0.0)]);
    }
}
