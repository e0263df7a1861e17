//! Replay of scheduler and block I/O records: off-CPU intervals become
//! weighted samples and markers, I/O requests become markers, per-thread
//! switch totals are attached, and per-CPU tracks are derived.
//!
//! In: [`OffCpuEvent`]s and [`IoEvent`]s in time order (merged with samples
//! and sideband by [`super::Collector::finish`]), the stacks map contents.
//! Out: fields of the replay's thread states.

use super::*;

impl Replay {
    /// Stack ids (leaf first each) to absolute addresses, root first:
    /// user frames outermost first, then kernel frames.
    fn stack_addrs(&mut self, c: &Collector, kernel: i32, user: i32) -> Vec<u64> {
        let mut out = Vec::new();
        for (id, is_user) in [(user, true), (kernel, false)] {
            if id < 0 {
                continue;
            }
            match c.stacks_by_id.get(&id) {
                Some(addrs) => out.extend(
                    addrs.iter().rev().copied().filter(|&a| a != 0 && (a >= KERNEL_ADDR_MIN) != is_user),
                ),
                None => self.missing_stacks += 1,
            }
        }
        out
    }

    fn stack_with_leaf(&mut self, c: &Collector, pid: u32, kernel: i32, user: i32, leaf: Option<PseudoFrame>) -> Option<NodeIndex> {
        let addrs = self.stack_addrs(c, kernel, user);
        let mut node = self.resolve_addrs(pid, &addrs);
        if let Some(leaf) = leaf {
            let frame = self.frame(FrameKey { binary: PSEUDO_BINARY, address: leaf as u64, pid: 0 });
            node = self.stacks.child(node, frame as u64);
        }
        (node != NO_PARENT).then_some(node)
    }

    pub(super) fn off_cpu(&mut self, c: &Collector, e: &OffCpuEvent) {
        let pid = e.pid;
        if !self.processes.get(&pid).is_some_and(|p| p.tracked) {
            return;
        }
        let reason = OffCpuReason::from_abi(e.state);
        let leaf = match reason {
            OffCpuReason::Preempted => PseudoFrame::Preempted,
            OffCpuReason::Sleeping => PseudoFrame::Sleeping,
            OffCpuReason::Blocked => PseudoFrame::Blocked,
            OffCpuReason::Other => PseudoFrame::Other,
        };
        let stack = self.stack_with_leaf(c, pid, e.kstack_id, e.ustack_id, Some(leaf)).expect("has a leaf");
        let folded = (e.short_count > 0).then(|| self.stack_with_leaf(c, pid, -1, -1, Some(PseudoFrame::Folded)).expect("leaf"));
        let duration = e.end_ns.saturating_sub(e.start_ns);
        let waker = (e.wake_ns != 0).then(|| (e.waker_pid, e.waker_tid, crate::bpf::abi::comm_str(&e.waker_comm)));
        let waker_stack = if e.wake_ns != 0 {
            self.stack_with_leaf(c, e.waker_pid, e.waker_kstack_id, e.waker_ustack_id, None)
        } else {
            None
        };
        let marker_min = c.options.marker_min_ns;
        let name = crate::bpf::abi::comm_str(&e.comm);
        let t = self.processes.get_mut(&pid).expect("tracked").thread(e.tid);
        if t.name.is_empty() {
            t.name = name;
        }
        if let Some(folded) = folded {
            t.off_cpu.time_ns.push(e.start_ns);
            t.off_cpu.stack.push(folded);
            t.off_cpu.duration_ns.push(e.short_ns);
        }
        t.off_cpu.time_ns.push(e.start_ns);
        t.off_cpu.stack.push(stack);
        t.off_cpu.duration_ns.push(duration);
        if duration >= marker_min {
            let runnable_since = if e.wake_ns != 0 { e.wake_ns } else { e.start_ns };
            t.markers.push(MarkerRecord::OffCpu {
                start_ns: e.start_ns,
                end_ns: e.end_ns,
                reason,
                run_delay_ns: e.end_ns.saturating_sub(runnable_since),
                waker,
                cpus: (e.cpu_out, e.cpu_in),
                waker_stack,
            });
        }
    }

    pub(super) fn io(&mut self, c: &Collector, e: &IoEvent) {
        if !self.processes.get(&e.pid).is_some_and(|p| p.tracked) {
            return;
        }
        let stack = self.stack_with_leaf(c, e.pid, e.kstack_id, e.ustack_id, None);
        let rwbs = crate::bpf::abi::comm_str(&e.rwbs);
        let op = match rwbs.chars().find(|c| matches!(c, 'R' | 'W' | 'D' | 'F' | 'N')) {
            Some('R') => "read",
            Some('W') => "write",
            Some('D') => "discard",
            Some('F') => "flush",
            _ => "other",
        };
        let t = self.processes.get_mut(&e.pid).expect("tracked").thread(e.tid);
        t.markers.push(MarkerRecord::Io {
            start_ns: e.start_ns,
            issue_ns: if e.issue_ns != 0 { e.issue_ns } else { e.start_ns },
            done_ns: e.done_ns,
            device: device_name(e.dev),
            op: format!("{op} ({rwbs})"),
            bytes: e.bytes,
            sector: e.sector,
            error: e.error,
            stack,
        });
    }

    /// Attach switch totals, and the folded off-CPU time no record carried.
    pub(super) fn finish_switches(&mut self, c: &Collector, end_ns: u64) {
        for (&tid, sw) in &c.switches {
            let pid = sw.pid;
            if !self.processes.get(&pid).is_some_and(|p| p.tracked) {
                continue;
            }
            let folded = (sw.short_count > 0).then(|| {
                let frame = self.frame(FrameKey { binary: PSEUDO_BINARY, address: PseudoFrame::Folded as u64, pid: 0 });
                self.stacks.child(NO_PARENT, frame as u64)
            });
            let t = self.processes.get_mut(&pid).expect("tracked").thread(tid);
            t.switches = Some((sw.voluntary, sw.involuntary));
            if let Some(node) = folded {
                t.off_cpu.time_ns.push(t.end_ns.unwrap_or(end_ns));
                t.off_cpu.stack.push(node);
                t.off_cpu.duration_ns.push(sw.short_ns);
            }
        }
    }

    /// One track per CPU: runs of consecutive samples of the same thread.
    /// Sample resolution (one interval), not exact switch times.
    pub(super) fn cpu_tracks(&self, c: &Collector, order: &[(u64, u8, u32)], interval_ms: f64) -> Vec<(u32, Vec<MarkerRecord>)> {
        let interval_ns = (interval_ms * 1e6) as u64;
        let mut tracks: std::collections::BTreeMap<u32, Vec<MarkerRecord>> = Default::default();
        let mut open: FxHashMap<u32, (u32, u32, u64, u64)> = FxHashMap::default(); // cpu -> (pid, tid, start, last)
        let name_of = |pid: u32, tid: u32| -> String {
            let p = self.processes.get(&pid);
            let t = p.and_then(|p| p.threads.get(&tid)).map(|t| t.name.clone()).unwrap_or_default();
            let pn = p.map(|p| p.exe.as_deref().and_then(|e| e.rsplit('/').next()).unwrap_or(&p.comm).to_string()).unwrap_or_default();
            if pid == 0 { "idle".to_string() } else { format!("{t} ({pn}, {tid})") }
        };
        let close = |tracks: &mut std::collections::BTreeMap<u32, Vec<MarkerRecord>>, cpu: u32, (pid, tid, start, last): (u32, u32, u64, u64)| {
            if pid != 0 {
                tracks.entry(cpu).or_default().push(MarkerRecord::OnCpu { start_ns: start, end_ns: last + interval_ns, pid, tid, name: name_of(pid, tid) });
            } else {
                tracks.entry(cpu).or_default();
            }
        };
        for &(t, kind, i) in order {
            if kind != 0 {
                continue;
            }
            let i = i as usize;
            let (cpu, pid, tid) = (c.samples.cpu[i], c.samples.pid[i], c.samples.tid[i]);
            match open.get_mut(&cpu) {
                Some(cur) if cur.1 == tid && t <= cur.3 + 2 * interval_ns => cur.3 = t,
                _ => {
                    if let Some(prev) = open.insert(cpu, (pid, tid, t, t)) {
                        close(&mut tracks, cpu, prev);
                    }
                }
            }
        }
        for (cpu, cur) in open {
            close(&mut tracks, cpu, cur);
        }
        tracks.into_iter().collect()
    }
}

/// `sda`, `nvme0n1`, … for a kernel dev_t (major << 20 | minor), looked up
/// in sysfs once per device.
fn device_name(dev: u32) -> String {
    static NAMES: std::sync::Mutex<Option<FxHashMap<u32, String>>> = std::sync::Mutex::new(None);
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    names
        .get_or_insert_with(FxHashMap::default)
        .entry(dev)
        .or_insert_with(|| {
            let (major, minor) = (dev >> 20, dev & 0xfffff);
            std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/uevent"))
                .ok()
                .and_then(|u| u.lines().find_map(|l| l.strip_prefix("DEVNAME=").map(str::to_string)))
                .unwrap_or_else(|| format!("{major}:{minor}"))
        })
        .clone()
}
