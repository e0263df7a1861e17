//! Reading a thread of a profile read back: its indexes checked, its
//! tables followed.
//!
//! In: a [`Thread`] as `report` loaded it. Out: whether every index it
//! holds stays in its table (checked once, so nothing after can panic,
//! whatever the file says), and its pid, tid, process name, function
//! names and libraries, and a stack's leaf category.

use crate::profile::schema::Thread;

/// What `report` reads of a thread, beyond its columns.
pub(super) trait ThreadRead {
    /// Every index the report follows stays in its table, so reading it
    /// cannot panic whatever the file says.
    fn consistent(&self) -> bool;
    /// The pid, None for a track of no process (the machine's and the
    /// per-CPU tracks).
    fn pid(&self) -> Option<u32>;
    /// The tid.
    fn tid(&self) -> Option<u32>;
    /// The name the track shows for the process, else the thread's.
    fn process_name(&self) -> &str;
    /// A func's name.
    fn func_name(&self, func: u32) -> &str;
    /// A func's library; for code in none (Python, interpreted Java) its
    /// file and first line, `file:line`, which with its name identify it;
    /// "" for neither.
    fn func_library(&self, func: u32) -> std::borrow::Cow<'_, str>;
    /// The category of a stack's leaf frame.
    fn leaf_category(&self, stack: u32) -> Option<u32>;
}

impl ThreadRead for Thread {
    fn consistent(&self) -> bool {
        let (stacks, frames, funcs) = (
            self.stack_table.frame.len(),
            self.frame_table.func.len(),
            self.func_table.name.len(),
        );
        let strings = self.string_array.len();
        self.stack_table.prefix.len() == stacks
            && self
                .stack_table
                .prefix
                .iter()
                .enumerate()
                .all(|(i, p)| p.is_none_or(|p| (p as usize) < i))
            && self
                .stack_table
                .frame
                .iter()
                .all(|&f| (f as usize) < frames)
            && self.frame_table.category.len() == frames
            && self.frame_table.func.iter().all(|&f| (f as usize) < funcs)
            && self.func_table.resource.len() == funcs
            && self.func_table.name.iter().all(|&s| (s as usize) < strings)
            && self
                .func_table
                .resource
                .iter()
                .all(|&r| r < 0 || (r as usize) < self.resource_table.name.len())
            && (self.func_table.file_name.is_empty() || self.func_table.file_name.len() == funcs)
            && (self.func_table.line_number.is_empty()
                || self.func_table.line_number.len() == funcs)
            && self
                .func_table
                .file_name
                .iter()
                .all(|s| s.is_none_or(|s| (s as usize) < strings))
            && self
                .resource_table
                .name
                .iter()
                .all(|&s| (s as usize) < strings)
            && self
                .samples
                .stack
                .iter()
                .all(|s| s.is_none_or(|s| (s as usize) < stacks))
            && self.samples.weight.as_ref().is_none_or(|w| {
                w.len() == self.samples.stack.len()
                    && w.iter()
                        .all(|&x| x.is_finite() && (0.0..=1e12).contains(&x))
            })
            && self
                .samples
                .thread_cpu_delta
                .as_ref()
                .is_none_or(|d| d.len() == self.samples.stack.len())
            && self.markers.start_time.len() == self.markers.data.len()
            && self.markers.end_time.len() == self.markers.data.len()
    }

    fn pid(&self) -> Option<u32> {
        if crate::profile::is_machine_track(&self.process_type) {
            return None;
        }
        self.pid.parse().ok()
    }

    fn tid(&self) -> Option<u32> {
        Some(self.tid)
    }

    fn process_name(&self) -> &str {
        self.process_name.as_deref().unwrap_or(&self.name)
    }

    fn func_name(&self, func: u32) -> &str {
        &self.string_array[self.func_table.name[func as usize] as usize]
    }

    fn func_library(&self, func: u32) -> std::borrow::Cow<'_, str> {
        match self.func_table.resource[func as usize] {
            r if r < 0 => {
                let file = self
                    .func_table
                    .file_name
                    .get(func as usize)
                    .copied()
                    .flatten()
                    .map(|s| self.string_array[s as usize].as_str());
                match (
                    file,
                    self.func_table
                        .line_number
                        .get(func as usize)
                        .copied()
                        .flatten(),
                ) {
                    (Some(file), Some(line)) => format!("{file}:{line}").into(),
                    (Some(file), None) => file.into(),
                    _ => "".into(),
                }
            }
            r => self.string_array[self.resource_table.name[r as usize] as usize]
                .as_str()
                .into(),
        }
    }

    fn leaf_category(&self, stack: u32) -> Option<u32> {
        self.frame_table.category[self.stack_table.frame[stack as usize] as usize]
    }
}
