//! Folded stacks: `frame;frame;frame count` lines, the input of
//! flamegraph.pl, inferno and speedscope.
//!
//! In: a [`Recording`]. Out: one line per distinct on-CPU stack, root
//! first, starting with the process name, inlined calls as frames of their
//! own (outermost first), kernel frames suffixed `_[k]` (the annotation
//! inferno and flamegraph.pl colour as kernel), unnamed code as
//! `library+0xoffset`; the count is the number of samples. Lines are
//! sorted, so equal recordings give equal files. Names have their control
//! characters escaped (a name never breaks a line or reaches a terminal
//! raw) and `;` replaced by `_`.
//!
//! [`FoldedLines`] and [`frame_name`] are the format itself, shared with
//! `report --format folded`, which writes the same lines from a profile.

use std::collections::BTreeMap;
use std::io::Write;

use rustc_hash::FxHashMap;

use crate::model::recording::Recording;
use crate::model::stack_tree::NO_PARENT;

/// `name` as one frame of a line: control characters escaped, `;` (the
/// separator) replaced by `_`, and `_[k]` after a kernel frame.
pub fn frame_name(name: &str, kernel: bool) -> String {
    let clean = crate::escape::escape(name).replace(';', "_");
    if kernel {
        clean + "_[k]"
    } else {
        clean
    }
}

/// Folded lines being counted: each distinct stack once, its counts
/// summed; written sorted, so equal inputs give equal files.
#[derive(Default)]
pub struct FoldedLines {
    lines: BTreeMap<String, u64>,
}

impl FoldedLines {
    /// Count `count` more samples of `stack` (`frame;frame;...`, root first).
    pub fn add(&mut self, stack: String, count: u64) {
        *self.lines.entry(stack).or_default() += count;
    }

    /// Write one `stack count` line per stack; returns how many.
    pub fn write(&self, out: &mut impl Write) -> std::io::Result<u64> {
        for (stack, count) in &self.lines {
            writeln!(out, "{stack} {count}")?;
        }
        Ok(self.lines.len() as u64)
    }
}

/// The names of frame `f` (one per inline depth, outermost first), each
/// cleaned of the separators the format uses.
fn frame_names(rec: &Recording, f: u32) -> Vec<String> {
    let frame = &rec.frames[f as usize];
    if frame.symbols.funcs.is_empty() {
        return vec![frame_name(
            &frame.unknown_code_name(&rec.libs),
            frame.is_kernel(),
        )];
    }
    frame
        .symbols
        .funcs
        .iter()
        .map(|fa| frame_name(&fa.name, frame.is_kernel()))
        .collect()
}

/// Count the samples per stack node, then write one line per node.
pub fn write_folded(rec: &Recording, out: &mut impl Write) -> std::io::Result<u64> {
    let mut per_stack: FxHashMap<(u32, u32), u64> = FxHashMap::default();
    for (pi, p) in rec.processes.iter().enumerate() {
        for t in &p.threads {
            for &s in &t.samples.stack {
                *per_stack.entry((pi as u32, s)).or_default() += 1;
            }
        }
    }
    let mut names: FxHashMap<u32, Vec<String>> = FxHashMap::default();
    let mut lines = FoldedLines::default();
    let mut path = Vec::new();
    for ((pi, node), count) in per_stack {
        let p = &rec.processes[pi as usize];
        let mut line = frame_name(&p.name, false);
        path.clear();
        let mut n = node;
        while n != NO_PARENT {
            let f = rec.stacks.key(n) as u32;
            // A goroutine's id would split each path once per goroutine.
            if rec.frames[f as usize].kind != crate::model::recording::FrameKind::Goroutine {
                path.push(f);
            }
            n = rec.stacks.parent(n);
        }
        for &f in path.iter().rev() {
            for name in names.entry(f).or_insert_with(|| frame_names(rec, f)).iter() {
                line.push(';');
                line.push_str(name);
            }
        }
        lines.add(line, count);
    }
    lines.write(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::recording::*;
    use crate::model::symbols::{AddrInfo, FuncAtAddr};

    /// Check lines are root first with the process name, inlined calls
    /// expand, kernel frames are marked, unnamed frames keep library and
    /// offset, and equal stacks of two threads add up.
    #[test]
    fn lines_root_first_with_counts() {
        let mut rec = Recording::default();
        rec.libs.push(LibRecord {
            path: "/bin/app".into(),
            name: "app".into(),
            build_id: None,
        });
        let named = |names: &[&str]| AddrInfo {
            funcs: names
                .iter()
                .map(|n| FuncAtAddr {
                    name: n.to_string(),
                    file: None,
                    line: None,
                    start_line: None,
                })
                .collect(),
            ..Default::default()
        };
        rec.frames.push(FrameRecord {
            lib: 0,
            address: 0x10,
            kind: FrameKind::Native,
            symbols: named(&["main"]),
        });
        rec.frames.push(FrameRecord {
            lib: 0,
            address: 0x20,
            kind: FrameKind::Native,
            symbols: named(&["outer", "inlined"]),
        });
        rec.frames.push(FrameRecord {
            lib: 0,
            address: 0x30,
            kind: FrameKind::Native,
            symbols: AddrInfo::default(),
        });
        rec.frames.push(FrameRecord {
            lib: 1,
            address: 0x40,
            kind: FrameKind::Kernel,
            symbols: named(&["do_syscall_64"]),
        });
        let a = rec.stacks.child(NO_PARENT, 0);
        let b = rec.stacks.child(a, 1);
        let c = rec.stacks.child(b, 2);
        let k = rec.stacks.child(a, 3);
        let thread = |tid, stacks: Vec<u32>| ThreadRecord {
            tid,
            name: "t".into(),
            start_ns: None,
            end_ns: None,
            samples: ThreadSamples {
                time_ns: vec![0; stacks.len()],
                cpu_delta_ns: vec![0; stacks.len()],
                cpu: vec![0; stacks.len()],
                stack: stacks,
            },
            off_cpu: Default::default(),
            markers: vec![],
            switches: None,
        };
        rec.processes.push(ProcessRecord {
            folded: 0,
            pid: 1,
            name: "my app".into(),
            exe: None,
            cmdline: String::new(),
            start_ns: None,
            end_ns: None,
            cgroup: None,
            profiler: false,
            threads: vec![thread(1, vec![c, c, k]), thread(2, vec![c])],
        });
        let mut out = Vec::new();
        assert_eq!(write_folded(&rec, &mut out).unwrap(), 2);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "my app;main;do_syscall_64_[k] 1\nmy app;main;outer;inlined;app+0x30 3\n"
        );
    }
}
