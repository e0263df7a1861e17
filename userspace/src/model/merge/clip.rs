//! A recording cut to a range of time ([`Recording::clip`]: samples
//! outside go, intervals and markers are cut to it) or to some processes
//! ([`Recording::retain_processes`]); and its count of samples.
//!
//! In: a merged [`Recording`] (or a window) and the range or processes to
//! keep. Out: the same recording, narrowed in place.

use crate::model::recording::*;

impl Recording {
    /// Keep only what lies in [start_ns, end_ns] (this recording's clock):
    /// samples outside go, intervals and markers are cut to the range.
    pub fn clip(&mut self, start_ns: u64, end_ns: u64) {
        let inside = |t: u64| t >= start_ns && t <= end_ns;
        for p in &mut self.processes {
            for t in &mut p.threads {
                let s = &mut t.samples;
                let keep: Vec<bool> = s.time_ns.iter().map(|&x| inside(x)).collect();
                retain_by(&mut s.time_ns, &keep);
                retain_by(&mut s.stack, &keep);
                retain_by(&mut s.cpu_delta_ns, &keep);
                retain_by(&mut s.cpu, &keep);
                let o = &mut t.off_cpu;
                for i in 0..o.time_ns.len() {
                    let (a, b) = (
                        o.time_ns[i].max(start_ns),
                        (o.time_ns[i] + o.duration_ns[i]).min(end_ns),
                    );
                    o.time_ns[i] = a;
                    o.duration_ns[i] = b.saturating_sub(a);
                }
                let keep: Vec<bool> = o
                    .time_ns
                    .iter()
                    .zip(&o.duration_ns)
                    .map(|(&x, &d)| inside(x) && (d > 0 || x < end_ns))
                    .collect();
                retain_by(&mut o.time_ns, &keep);
                retain_by(&mut o.stack, &keep);
                retain_by(&mut o.duration_ns, &keep);
                t.markers.retain_mut(|m| clip_marker(m, start_ns, end_ns));
            }
            // A thread that started or ended in the range stays even without
            // data: the agent keeps a process of a few milliseconds that no
            // sample caught by its lifetime, and `show` must not lose it
            // (seen beside a compiler loop: 1 of 5 such processes gone).
            let lived_here =
                |t: &ThreadRecord| t.start_ns.is_some_and(inside) || t.end_ns.is_some_and(inside);
            p.threads.retain(|t| {
                !t.samples.time_ns.is_empty()
                    || !t.off_cpu.time_ns.is_empty()
                    || !t.markers.is_empty()
                    || lived_here(t)
            });
        }
        self.processes.retain(|p| !p.threads.is_empty());
        for c in &mut self.counters {
            let keep: Vec<bool> = c.time_ns.iter().map(|&x| inside(x)).collect();
            // A level's changes before the first kept sample move into its base.
            if let Some(base) = c.base.as_mut() {
                let first = keep.iter().position(|&k| k).unwrap_or(keep.len());
                *base += c.count.iter().take(first).sum::<f64>();
            }
            retain_by(&mut c.time_ns, &keep);
            retain_by(&mut c.count, &keep);
        }
        self.counters.retain(|c| !c.time_ns.is_empty());
        for (_, markers) in &mut self.cpu_tracks {
            markers.retain_mut(|m| clip_marker(m, start_ns, end_ns));
        }
        self.start_wall_ms += (start_ns as f64 - self.start_ns as f64).max(0.0) / 1e6;
        self.start_ns = self.start_ns.max(start_ns);
        self.end_ns = self.end_ns.min(end_ns).max(self.start_ns);
    }

    /// Keep only the processes `keep` accepts.
    pub fn retain_processes(&mut self, keep: impl Fn(&ProcessRecord) -> bool) {
        self.processes.retain(|p| keep(p));
        // Every kept pid's, a folded track's too: a process of its own
        // taken out before (`show`'s ended ones) may share its pid, and
        // [`Recording::keep_counters_of_own_processes`] sorts them out once
        // all are back.
        let pids: rustc_hash::FxHashSet<u32> = self.processes.iter().map(|p| p.pid).collect();
        self.counters
            .retain(|c| c.pid == 0 || pids.contains(&c.pid));
    }

    /// Drop the counters of processes that have no track of their own
    /// (left out, or folded: a folded track's counters would be one
    /// member's, the memory of a millisecond's process); the machine's
    /// (pid 0) stay.
    pub fn keep_counters_of_own_processes(&mut self) {
        let own: rustc_hash::FxHashSet<u32> = self
            .processes
            .iter()
            .filter(|p| p.folded == 0)
            .map(|p| p.pid)
            .collect();
        self.counters.retain(|c| c.pid == 0 || own.contains(&c.pid));
    }

    /// Samples in the recording (on-CPU).
    pub fn sample_count(&self) -> u64 {
        self.processes
            .iter()
            .flat_map(|p| &p.threads)
            .map(|t| t.samples.time_ns.len() as u64)
            .sum()
    }
}

fn retain_by<T>(v: &mut Vec<T>, keep: &[bool]) {
    let mut i = 0;
    v.retain(|_| {
        i += 1;
        keep[i - 1]
    });
}

/// Cut a marker to [start, end]; false if nothing of it is left.
fn clip_marker(m: &mut MarkerRecord, start: u64, end: u64) -> bool {
    let (s, e) = match m {
        MarkerRecord::OffCpu {
            start_ns, end_ns, ..
        }
        | MarkerRecord::OnCpu {
            start_ns, end_ns, ..
        }
        | MarkerRecord::ShortWaits {
            start_ns, end_ns, ..
        } => (start_ns, end_ns),
        MarkerRecord::Io {
            start_ns, done_ns, ..
        } => (start_ns, done_ns),
    };
    if *e < start || *s > end {
        return false;
    }
    // Short waits are sums over their span: what is cut keeps its share.
    let kept = if *s < start || *e > end {
        let span = (*e - *s).max(1) as f64;
        ((*e).min(end) - (*s).max(start)) as f64 / span
    } else {
        1.0
    };
    *s = (*s).max(start);
    *e = (*e).min(end);
    match m {
        MarkerRecord::Io { issue_ns, .. } => *issue_ns = (*issue_ns).clamp(start, end),
        MarkerRecord::ShortWaits {
            off_cpu_ns,
            waited_ns,
            landing_ns,
            ..
        } if kept < 1.0 => {
            *off_cpu_ns = (*off_cpu_ns as f64 * kept) as u64;
            *waited_ns = (*waited_ns as f64 * kept) as u64;
            *landing_ns = (*landing_ns as f64 * kept) as u64;
        }
        _ => {}
    }
    true
}
