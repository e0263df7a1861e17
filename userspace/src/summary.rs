//! The totals line `record -v` and `agent -v` print, and what the
//! summaries of `record` and `show` say was lost.
//!
//! In: a finished [`Recording`] (one recording, or one agent window). Out:
//! `stats: key=value ...`, every counter of its stats in a fixed order: what
//! scripts and the benchmarks read, so keys are only ever added; and the
//! losses by kind, in words.

use crate::model::recording::{Recording, RecordingStats};

/// What was lost, one part per kind ("N samples", ...), each with the
/// option of `record` that helps when `record_hints`.
pub fn lost_parts(st: &RecordingStats, record_hints: bool) -> Vec<String> {
    let hint = |h: &str| {
        if record_hints {
            format!(" ({h})")
        } else {
            String::new()
        }
    };
    let mut lost = Vec::new();
    if st.lost_samples > 0 {
        lost.push(format!(
            "{} samples{}",
            st.lost_samples,
            hint("ring full: lower -F or --stack-size")
        ));
    }
    if st.lost_events + st.lost_stacks > 0 {
        lost.push(format!(
            "{} off-CPU/I-O records and {} stacks{}",
            st.lost_events,
            st.lost_stacks,
            hint("events ring full: its reader fell behind; a higher --off-cpu-threshold folds more waits into fewer records")
        ));
    }
    if st.lost_state > 0 {
        lost.push(format!(
            "{} threads or requests untracked{}",
            st.lost_state,
            hint("state maps full")
        ));
    }
    if st.tracepoint_runs_missed > 0 {
        lost.push(format!(
            "{} tracepoint runs{}",
            st.tracepoint_runs_missed,
            hint("skipped by the kernel: another BPF program ran on that CPU")
        ));
    }
    if st.python_frames_unnamed > 0 {
        lost.push(format!(
            "{} Python, PHP, Perl or Ruby frames or Go labels unnamed (their code objects, functions, subs, iseqs or label maps gone before they were read; {} freed and their addresses reused)",
            st.python_frames_unnamed, st.python_codes_replaced
        ));
    }
    if st.js_frames_unnamed > 0 {
        lost.push(format!(
            "{} JavaScript frames unnamed (their process exited, or V8 moved or freed their functions, before they were read: shown as the code they ran in)",
            st.js_frames_unnamed
        ));
    }
    if st.lost_sideband + st.malformed > 0 {
        lost.push(format!(
            "{} process events{}",
            st.lost_sideband + st.malformed,
            hint("sideband ring full")
        ));
    }
    lost
}

/// Every total of a recording or window as `stats: key=value ...` (what
/// `-v` prints, and what scripts and the benchmarks read).
pub fn stats_line(rec: &Recording) -> String {
    let st = &rec.stats;
    let u = st.unwind;
    format!(
    "stats: samples={} kept={} lost_samples={} kernel_stack_failures={} user_stack_failures={} handovers_skipped={} tracepoint_runs_missed={} \
         off_cpu_intervals={} off_cpu_folded={} off_cpu_end_inferred={} stack_records={} io_requests={} io_untracked={} lost_events={} lost_stacks={} \
         stack_read_failures={} stacks_not_kept={} lost_state={} lost_sideband={} malformed={} processes_without_data={} \
         python_frames_unnamed={} python_codes_replaced={} js_frames_unnamed={} tracer_bytes={} samples_ring_peak={} events_ring_peak={} \
         unwinds={} unwound_to_root={} unwind_copy_exhausted={} unwind_no_info={} unwind_bad_address={} unwinds_here={} unwound_copy_bytes={} unwinds_per_s={:.0} seconds={:.3}",
        st.samples,
        st.samples_kept,
        st.lost_samples,
        st.kernel_stack_failures,
        st.user_stack_failures,
        st.handovers_skipped,
        st.tracepoint_runs_missed,
        st.off_cpu_intervals,
        st.off_cpu_folded,
        st.off_cpu_end_inferred,
        st.stack_records,
        st.io_requests,
        st.io_untracked,
        st.lost_events,
        st.lost_stacks,
        st.stack_read_failures,
        st.stacks_not_kept,
        st.lost_state,
        st.lost_sideband,
        st.malformed,
        st.processes_without_data,
        st.python_frames_unnamed,
        st.python_codes_replaced,
        st.js_frames_unnamed,
        st.tracer_bytes,
        st.samples_ring_peak,
        st.events_ring_peak,
        u.unwinds,
        u.reached_root,
        u.copy_exhausted,
        u.no_unwind_info,
        u.bad_return_address,
        u.unwinds_here,
        u.copied_bytes,
        // Stacks the kernel walked took none of unwind_ns: the rate is of
        // those unwound here (0 when there were none, or read from the store).
        if u.unwind_ns == 0 { 0.0 } else { u.unwinds_here as f64 / (u.unwind_ns as f64 / 1e9) },
        rec.end_ns.saturating_sub(rec.start_ns) as f64 / 1e9,
    )
}

/// Samples whose own frame (the code running) is in a binary's code that
/// has no name: a stripped binary without its debug file here. Counted per
/// window as `record` merges them, said at the end with how to get names.
#[derive(Default, Debug)]
pub struct MissingSymbols {
    /// Samples of user code (not the kernel's, not a pseudo-frame).
    pub user_samples: u64,
    /// Per binary (its path as the process saw it): samples without a name.
    pub by_binary: std::collections::BTreeMap<String, u64>,
}

impl MissingSymbols {
    /// Count the on-CPU samples of `rec` (one window, before it is merged).
    pub fn add(&mut self, rec: &Recording) {
        use crate::model::recording::NO_LIB;
        // Per frame: None for kernel and pseudo frames, else the binary
        // it lacks a name in (or "" for a named frame).
        let mut verdict: Vec<Option<Option<u32>>> = vec![None; rec.frames.len()];
        for (i, f) in rec.frames.iter().enumerate() {
            verdict[i] = if f.is_kernel() || f.is_pseudo() {
                None
            } else if f.lib != NO_LIB && unnamed(f, rec) {
                Some(Some(f.lib))
            } else {
                Some(None)
            };
        }
        for p in &rec.processes {
            for t in &p.threads {
                for &node in &t.samples.stack {
                    if node as usize >= rec.stacks.len() {
                        continue;
                    }
                    let frame = rec.stacks.key(node) as usize;
                    match verdict.get(frame).copied().flatten() {
                        None => {}
                        Some(None) => self.user_samples += 1,
                        Some(Some(lib)) => {
                            self.user_samples += 1;
                            if let Some(l) = rec.libs.get(lib as usize) {
                                *self.by_binary.entry(l.path.clone()).or_default() += 1;
                            }
                        }
                    }
                }
            }
        }
    }

    /// The binaries most samples lack names in, most first, with their
    /// share of the user samples (%), those of at least `min_pct`.
    pub fn worst(&self, min_pct: f64) -> Vec<(String, u64, f64)> {
        let mut v: Vec<(String, u64, f64)> = self
            .by_binary
            .iter()
            .map(|(b, &n)| {
                (
                    b.clone(),
                    n,
                    n as f64 * 100.0 / self.user_samples.max(1) as f64,
                )
            })
            .filter(|(_, _, pct)| *pct >= min_pct)
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }
}

/// Whether a native frame has no name: none at all, or only the one its
/// binary's unwind table gives a function it does not name
/// (`lib+0xOFFSET`, see `symbolize::names`).
fn unnamed(f: &crate::model::recording::FrameRecord, rec: &Recording) -> bool {
    match f.symbols.funcs.as_slice() {
        [] => true,
        [only] => rec.libs.get(f.lib as usize).is_some_and(|lib| {
            only.name
                .strip_prefix(lib.name.as_str())
                .is_some_and(|rest| rest.starts_with("+0x"))
        }),
        _ => false,
    }
}
