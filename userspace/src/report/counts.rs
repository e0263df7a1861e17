//! Counting a thread's samples: per stack, by kind, and per function.
//!
//! In: a [`Thread`] read back and the categories by name. Out: its CPU
//! samples and off-CPU milliseconds per stack index ([`StackCounts`]), and
//! each func's self and total CPU samples ([`func_totals`]).

use rustc_hash::FxHashMap;

use crate::profile::schema::{Meta, Thread};

use super::read::ThreadRead;

/// The categories the report tells apart, by their names in `meta`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Categories {
    pub(super) off_cpu: Option<u32>,
    pub(super) idle: Option<u32>,
    pub(super) kernel: Option<u32>,
}

impl Categories {
    pub(super) fn of(meta: &Meta) -> Categories {
        let find = |name: &str| {
            meta.categories
                .iter()
                .position(|c| c.name == name)
                .map(|i| i as u32)
        };
        Categories {
            off_cpu: find("Off-CPU"),
            idle: find("Idle"),
            kernel: find("Kernel"),
        }
    }

    /// Where sysprof's writer puts them: what a profile is read with
    /// before its `meta` (written after the threads) is met.
    pub(super) fn written() -> Categories {
        use crate::profile::category;
        Categories {
            off_cpu: Some(category::OFF_CPU),
            idle: Some(category::IDLE),
            kernel: Some(category::KERNEL),
        }
    }
}

/// A sample's kind, from its leaf frame's category (and the idle process).
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Cpu,
    Idle,
    OffCpu,
}

/// A thread's samples counted per stack index: CPU samples (with their CPU
/// time) and off-CPU milliseconds.
pub(super) struct StackCounts {
    pub(super) cpu: FxHashMap<u32, u64>,
    pub(super) off_cpu_ms: FxHashMap<u32, f64>,
    pub(super) cpu_samples: u64,
    pub(super) idle_samples: u64,
    /// The kernel's CPU time for the thread's CPU samples, µs.
    pub(super) cpu_delta_us: f64,
}

pub(super) fn count_stacks(t: &Thread, cats: &Categories) -> StackCounts {
    let mut c = StackCounts {
        cpu: FxHashMap::default(),
        off_cpu_ms: FxHashMap::default(),
        cpu_samples: 0,
        idle_samples: 0,
        cpu_delta_us: 0.0,
    };
    let idle_thread = t.pid() == Some(0);
    let traced = t.samples.weight_type == "tracing-ms";
    for (i, stack) in t.samples.stack.iter().enumerate() {
        let Some(stack) = *stack else { continue };
        let category = t.leaf_category(stack);
        let kind = if category.is_some() && category == cats.off_cpu {
            Kind::OffCpu
        } else if idle_thread || (category.is_some() && category == cats.idle) {
            Kind::Idle
        } else {
            Kind::Cpu
        };
        let weight = t.samples.weight.as_ref().map(|w| w[i]);
        match kind {
            Kind::OffCpu => *c.off_cpu_ms.entry(stack).or_default() += weight.unwrap_or(0.0),
            Kind::Cpu | Kind::Idle => {
                // With off-CPU time the weights are milliseconds: a CPU sample is one sample.
                let n = if traced {
                    1
                } else {
                    weight.map(|w| w.max(0.0) as u64).unwrap_or(1)
                };
                if kind == Kind::Idle {
                    c.idle_samples = c.idle_samples.saturating_add(n);
                } else {
                    c.cpu_samples = c.cpu_samples.saturating_add(n);
                }
                let slot = c.cpu.entry(stack).or_default();
                *slot = slot.saturating_add(n);
                c.cpu_delta_us += t
                    .samples
                    .thread_cpu_delta
                    .as_ref()
                    .and_then(|d| d[i])
                    .unwrap_or(0) as f64;
            }
        }
    }
    c
}

/// Per func of `t`: its self and total CPU samples over the stacks in
/// `cpu` (idle leaves left out), a recursive function counted once per
/// sample towards its total.
///
/// Linear in the stack table, however deep the stacks: samples are summed
/// per subtree of the prefix tree (prefixes point backwards, so one pass from
/// the end), then one depth-first walk keeps how often each func is on the
/// path from the root, and a node adds its subtree's samples to its func's
/// total only where it is the func's outermost frame. (Collecting each
/// stack's funcs by walking it took time quadratic in its depth: 112 s for
/// one 200,000-frame stack.)
pub(super) fn func_totals(
    t: &Thread,
    cpu: &FxHashMap<u32, u64>,
    idle: Option<u32>,
) -> (Vec<u64>, Vec<u64>) {
    let n = t.stack_table.frame.len();
    let funcs = t.func_table.name.len();
    let func_of = |i: usize| t.frame_table.func[t.stack_table.frame[i] as usize] as usize;
    let mut own = vec![0u64; funcs];
    let mut total = vec![0u64; funcs];
    let mut subtree = vec![0u64; n];
    for (&stack, &count) in cpu {
        if t.leaf_category(stack).is_some() && t.leaf_category(stack) == idle {
            continue;
        }
        subtree[stack as usize] = subtree[stack as usize].saturating_add(count);
        let f = func_of(stack as usize);
        own[f] = own[f].saturating_add(count);
    }
    for i in (0..n).rev() {
        if let Some(p) = t.stack_table.prefix[i] {
            subtree[p as usize] = subtree[p as usize].saturating_add(subtree[i]);
        }
    }
    // Children of each node (CSR), for the walk; only nodes with samples below.
    let sampled_child = |i: usize| {
        t.stack_table.prefix[i]
            .filter(|_| subtree[i] > 0)
            .map(|p| p as usize)
    };
    let mut first = vec![0u32; n + 1];
    for p in (0..n).filter_map(sampled_child) {
        first[p + 1] += 1;
    }
    for i in 0..n {
        first[i + 1] += first[i];
    }
    let mut fill = first.clone();
    let mut children = vec![0u32; first[n] as usize];
    for (i, p) in (0..n).filter_map(|i| sampled_child(i).map(|p| (i, p))) {
        children[fill[p] as usize] = i as u32;
        fill[p] += 1;
    }
    let mut on_path = vec![0u32; funcs];
    // (node, entered): a node is pushed once to enter and once to leave.
    let mut todo: Vec<(u32, bool)> = (0..n)
        .filter(|&i| t.stack_table.prefix[i].is_none() && subtree[i] > 0)
        .map(|i| (i as u32, false))
        .collect();
    while let Some((i, entered)) = todo.pop() {
        let f = func_of(i as usize);
        if entered {
            on_path[f] -= 1;
            continue;
        }
        if on_path[f] == 0 {
            total[f] = total[f].saturating_add(subtree[i as usize]);
        }
        on_path[f] += 1;
        todo.push((i, true));
        let (a, b) = (first[i as usize] as usize, first[i as usize + 1] as usize);
        todo.extend(children[a..b].iter().map(|&c| (c, false)));
    }
    (own, total)
}

/// The reason an off-CPU leaf names: `[off-CPU: sleeping]` → `sleeping`.
pub(super) fn off_cpu_reason(name: &str) -> &str {
    name.strip_prefix("[off-CPU: ")
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(name)
}
