//! Why a stack ends: the one vocabulary of the unwinders, the raw stack
//! tree and the profile's pseudo frames.
//!
//! In: nothing (the kernel's `UNWIND_END_*` codes become a [`StackEnd`] in
//! one place, `StackEnd::from_abi` in `bpf::abi`). Out: how an unwind ended
//! ([`StackEnd::Root`] or a cut), the key that stands for a cut at the root
//! end of a raw stack ([`StackEnd::raw_key`]), and the frame name the profile
//! shows for it ([`StackEnd::frame_name`]).

/// How a user stack ends, or why it is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StackEnd {
    /// It reached the thread's root: the stack is whole (no marker frame).
    Root,
    /// The copied stack ended first: a deeper copy would have gone further.
    CopyExhausted,
    /// No usable unwind rule or frame pointer for some frame.
    NoUnwindInfo,
    /// A return address outside every executable mapping of the process:
    /// what was read is no return address, and the walk stops before it.
    BadReturnAddress,
    /// An event referred to a stack that was not available (its record was
    /// lost, or no longer kept when the event arrived).
    NotAvailable,
    /// The in-kernel unwinder had no tables for the process yet.
    TablesNotReady,
    /// The in-kernel unwinder could not read the stack.
    Unreadable,
    /// A rule the in-kernel unwinder's tables cannot express.
    UnsupportedRule,
    /// The in-kernel unwinder's most frames.
    MaxDepth,
}

/// The cuts, in the order of their raw keys (1 first).
const CUTS: [StackEnd; 8] = [
    StackEnd::CopyExhausted,
    StackEnd::NoUnwindInfo,
    StackEnd::BadReturnAddress,
    StackEnd::NotAvailable,
    StackEnd::TablesNotReady,
    StackEnd::Unreadable,
    StackEnd::UnsupportedRule,
    StackEnd::MaxDepth,
];

impl StackEnd {
    /// The key that stands for this cut in a raw stack (addresses, placed at
    /// the root end): 1..=8, where no code lives. `None` for a whole stack.
    pub fn raw_key(self) -> Option<u64> {
        CUTS.iter().position(|&c| c == self).map(|i| i as u64 + 1)
    }

    /// The cut a raw stack key stands for, `None` for an address.
    pub fn from_raw_key(key: u64) -> Option<StackEnd> {
        key.checked_sub(1)
            .and_then(|i| CUTS.get(i as usize))
            .copied()
    }

    /// The name of the pseudo frame that ends a cut stack in the profile.
    pub fn frame_name(self) -> &'static str {
        match self {
            // Never a frame: a whole stack gets no marker.
            StackEnd::Root => "[root]",
            StackEnd::CopyExhausted => "[truncated: user stack copy exhausted (--stack-size)]",
            StackEnd::NoUnwindInfo => "[truncated: no unwind information]",
            StackEnd::BadReturnAddress => "[truncated: return address outside any code]",
            StackEnd::NotAvailable => "[stack not available]",
            StackEnd::TablesNotReady => {
                "[truncated: unwind tables not loaded yet (the process or the recording had just started)]"
            }
            StackEnd::Unreadable => "[truncated: user stack not readable (not resident)]",
            StackEnd::UnsupportedRule => {
                "[truncated: an unwind rule the kernel unwinder cannot follow]"
            }
            StackEnd::MaxDepth => "[truncated: 1024 frames]",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that every cut has a distinct raw key in 1..=8 that reads back
    /// as itself, and that a whole stack and real addresses have none.
    #[test]
    fn raw_keys_round_trip() {
        for (i, c) in CUTS.iter().enumerate() {
            assert_eq!(c.raw_key(), Some(i as u64 + 1));
            assert_eq!(StackEnd::from_raw_key(i as u64 + 1), Some(*c));
        }
        assert_eq!(StackEnd::Root.raw_key(), None);
        assert_eq!(StackEnd::from_raw_key(0), None);
        assert_eq!(StackEnd::from_raw_key(9), None);
        assert_eq!(StackEnd::from_raw_key(0x5555_0000_1234), None);
    }
}
