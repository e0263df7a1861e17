//! `report --format folded`: a profile's CPU samples as collapsed stacks.
//!
//! In: a profile read back, the threads the filter admits. Out: the lines
//! [`crate::profile::folded`] writes from a recording, in its format
//! (`process;frame;...;leaf count`, root first, kernel frames `_[k]`,
//! sorted), here from the profile's tables.

use crate::profile::folded::{frame_name, FoldedLines};
use crate::profile::schema::Profile;

use super::counts::{count_stacks, Categories};
use super::read::ThreadRead;
use super::Filter;

/// The CPU samples (idle included, as perf's collapse does) as `process;
/// frame;...;leaf count` lines, root first; kernel frames end in `_[k]`.
/// Lines are sorted, so equal profiles give equal output.
pub(super) fn folded(profile: &Profile, filter: &Filter) -> String {
    let cats = Categories::of(&profile.meta);
    let mut lines = FoldedLines::default();
    for t in profile.threads.iter().filter(|t| filter.admits(t)) {
        let counts = count_stacks(t, &cats);
        for (&stack, &n) in &counts.cpu {
            let mut frames = Vec::new();
            let mut s = Some(stack);
            while let Some(i) = s {
                let frame = t.stack_table.frame[i as usize] as usize;
                let kernel = t.frame_table.category[frame].is_some() && t.frame_table.category[frame] == cats.kernel;
                frames.push(frame_name(t.func_name(t.frame_table.func[frame]), kernel));
                s = t.stack_table.prefix[i as usize];
            }
            frames.push(frame_name(t.process_name(), false));
            frames.reverse();
            lines.add(frames.join(";"), n);
        }
    }
    let mut out = Vec::new();
    lines.write(&mut out).expect("writing to memory");
    String::from_utf8(out).expect("names are UTF-8")
}
