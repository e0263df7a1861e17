//! `report --format folded`: a profile's CPU samples as collapsed stacks.
//!
//! In: a profile's `meta`, then the threads the filter admits, one at a
//! time as they are read. Out: the lines
//! [`crate::profile::folded`] writes from a recording, in its format
//! (`process;frame;...;leaf count`, root first, kernel frames `_[k]`,
//! sorted), here from the profile's tables.

use crate::profile::folded::{frame_name, FoldedLines};
use crate::profile::schema::Thread;

use super::counts::{count_stacks, Categories};
use super::read::ThreadRead;
#[cfg(test)]
use super::Filter;

/// The collapsed stacks, built a thread at a time from threads read one by
/// one ([`Folded::add`]), then written ([`Folded::finish`]).
pub(super) struct Folded {
    cats: Categories,
    lines: FoldedLines,
}

impl Folded {
    /// Collapsed stacks of a profile whose categories are `cats`.
    pub(super) fn new(cats: Categories) -> Folded {
        Folded {
            cats,
            lines: FoldedLines::default(),
        }
    }

    /// Add the CPU samples (idle included, as perf's collapse does) of a
    /// thread the filter admits, as `process;frame;...;leaf` stacks, root
    /// first; kernel frames end in `_[k]`.
    pub(super) fn add(&mut self, t: &Thread) {
        let counts = count_stacks(t, &self.cats);
        for (&stack, &n) in &counts.cpu {
            let mut frames = Vec::new();
            let mut s = Some(stack);
            while let Some(i) = s {
                let frame = t.stack_table.frame[i as usize] as usize;
                let kernel = t.frame_table.category[frame].is_some()
                    && t.frame_table.category[frame] == self.cats.kernel;
                frames.push(frame_name(t.func_name(t.frame_table.func[frame]), kernel));
                s = t.stack_table.prefix[i as usize];
            }
            frames.push(frame_name(t.process_name(), false));
            frames.reverse();
            self.lines.add(frames.join(";"), n);
        }
    }

    /// The lines with their counts, sorted, so equal profiles give equal output.
    pub(super) fn finish(self) -> String {
        let mut out = Vec::new();
        self.lines.write(&mut out).expect("writing to memory");
        String::from_utf8(out).expect("names are UTF-8")
    }
}

/// The collapsed stacks of the threads `filter` admits, from a profile held whole.
#[cfg(test)]
pub(super) fn folded(profile: &crate::profile::schema::Profile, filter: &Filter) -> String {
    let mut f = Folded::new(Categories::of(&profile.meta));
    for t in profile.threads.iter().filter(|t| filter.admits(t)) {
        f.add(t);
    }
    f.finish()
}
