//! Counters polled from `/proc` while recording: machine CPU usage and
//! memory, disk bytes per device, CPU usage and RSS of the processes that
//! were running, and hardware cycles/instructions where a PMU exists.
//!
//! In: a poll every 100 ms with the pids sampled since the last poll. Out:
//! [`CounterRecord`]s for the profile, and notes (e.g. "no hardware PMU").
//! Reading `/proc` is cheap at this rate and measures what the kernel
//! itself accounts, which is the oracle users compare with. Its files stay
//! open between polls and are read whole into one buffer
//! ([`KernelFiles`]): a file opened, sized and read ten times per poll was
//! ~2,000 system calls a second beside pgbench's 30 processes.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use perf_event_open_sys as sys;
use rustc_hash::FxHashMap;

use crate::model::recording::CounterRecord;
use crate::sys::kernel_text::TextBuffer;

/// Polls counters; see the module doc.
pub struct CounterPoller {
    series: BTreeMap<(u32, String), CounterRecord>,
    cpu_prev: Option<(u64, u64)>,
    mem_prev: Option<u64>,
    disk_prev: FxHashMap<String, (u64, u64)>,
    proc_prev: FxHashMap<u32, (u64, u64, u64)>, // pid -> (ticks, time_ns, rss_bytes)
    pmu: Vec<(OwnedFd, OwnedFd)>,
    pmu_prev: (u64, u64),
    ticks_per_s: f64,
    page_size: u64,
    /// Notes for the profile's log.
    pub notes: Vec<String>,
    /// When the last reading of CPU shares was taken.
    last_reading_ns: Option<u64>,
    /// When the previous poll was (any reading).
    last_poll_ns: Option<u64>,
    /// The poll before that one, unless a window was cut since
    /// ([`CounterPoller::window_cut`]).
    poll_before_last_ns: Option<u64>,
    files: KernelFiles,
}

/// The files every poll reads, kept open, and the buffer they are read into.
#[derive(Default)]
struct KernelFiles {
    text: TextBuffer,
    /// `/proc/stat`, `/proc/meminfo`, `/proc/diskstats`, opened at the first poll.
    stat: Option<std::fs::File>,
    meminfo: Option<std::fs::File>,
    diskstats: Option<std::fs::File>,
    /// `/proc/PID/stat` of the processes polled, by pid: at most
    /// [`MAX_KEPT_PROCESS_FILES`] (the rest are opened per poll). A kept
    /// file names its process, not the pid: once that process is gone its
    /// reads fail, and the pid's next process gets a file of its own.
    processes: FxHashMap<u32, std::fs::File>,
}

/// How many processes' `/proc/PID/stat` stay open between polls: the file
/// descriptors a poller holds are bounded whatever a machine runs.
const MAX_KEPT_PROCESS_FILES: usize = 256;

impl KernelFiles {
    /// The text of the machine-wide file in `slot` (opened at `path` the
    /// first time), read afresh.
    fn machine<'a>(
        text: &'a mut TextBuffer,
        slot: &mut Option<std::fs::File>,
        path: &str,
    ) -> Option<&'a str> {
        if slot.is_none() {
            *slot = std::fs::File::open(path).ok();
        }
        let bytes = text.read_from_start(slot.as_ref()?).ok()?;
        std::str::from_utf8(bytes).ok()
    }

    fn cpu(&mut self) -> Option<(u64, u64)> {
        parse_cpu(Self::machine(&mut self.text, &mut self.stat, "/proc/stat")?)
    }

    fn mem_used(&mut self) -> Option<u64> {
        parse_mem_used(Self::machine(
            &mut self.text,
            &mut self.meminfo,
            "/proc/meminfo",
        )?)
    }

    fn disks(&mut self) -> Vec<(String, (u64, u64))> {
        match Self::machine(&mut self.text, &mut self.diskstats, "/proc/diskstats") {
            Some(text) => parse_diskstats(text, |name| whole_disks().contains(name)),
            None => Vec::new(),
        }
    }

    /// [`parse_proc_stat`]'s fields for `pid`, from its kept file when it has one.
    fn process(&mut self, pid: u32) -> Option<(u64, u64, u64)> {
        if let Some(file) = self.processes.get(&pid) {
            if let Ok(bytes) = self.text.read_from_start(file) {
                return parse_proc_stat(bytes);
            }
            // That process is gone: the pid may be another's now.
            self.processes.remove(&pid);
        }
        let file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
        let fields = parse_proc_stat(self.text.read_from_start(&file).ok()?);
        if fields.is_some() && self.processes.len() < MAX_KEPT_PROCESS_FILES {
            self.processes.insert(pid, file);
        }
        fields
    }
}

/// The shortest time between two readings of CPU shares: 5 ticks of
/// /proc's CPU times (a tick more or less is then 20 % of one CPU at most),
/// and half of `record`'s 100-ms cadence, whose jitter must not skip one.
pub const MIN_READING_NS: u64 = 50_000_000;

impl CounterPoller {
    /// Start polling; opens hardware counters on `cpus` if the machine has a PMU.
    pub fn new(cpus: &[u32]) -> CounterPoller {
        let mut notes = Vec::new();
        let mut pmu = Vec::new();
        for &cpu in cpus {
            match (
                open_hw(sys::bindings::PERF_COUNT_HW_CPU_CYCLES, cpu),
                open_hw(sys::bindings::PERF_COUNT_HW_INSTRUCTIONS, cpu),
            ) {
                (Ok(c), Ok(i)) => pmu.push((c, i)),
                (Err(e), _) | (_, Err(e)) => {
                    notes.push(format!(
                        "hardware counters (cycles, instructions) unavailable: {e}; this machine has no usable PMU (common in VMs)"
                    ));
                    pmu.clear();
                    break;
                }
            }
        }
        CounterPoller {
            series: BTreeMap::new(),
            cpu_prev: None,
            mem_prev: None,
            disk_prev: FxHashMap::default(),
            proc_prev: FxHashMap::default(),
            pmu,
            pmu_prev: (0, 0),
            ticks_per_s: procfs::ticks_per_second().max(1) as f64,
            page_size: crate::sideband::perf_ring::page_size() as u64,
            notes,
            last_reading_ns: None,
            last_poll_ns: None,
            poll_before_last_ns: None,
            files: KernelFiles::default(),
        }
    }

    fn push(&mut self, pid: u32, name: &str, category: &str, description: &str, t: u64, v: f64) {
        self.push_level(pid, name, category, description, t, v, None);
    }

    /// [`Self::push`] for a change of a level (memory) that was `before`
    /// until this reading: the series' base when this starts it.
    #[allow(clippy::too_many_arguments)]
    fn push_level(
        &mut self,
        pid: u32,
        name: &str,
        category: &str,
        description: &str,
        t: u64,
        v: f64,
        before: Option<f64>,
    ) {
        let s = self
            .series
            .entry((pid, name.to_string()))
            .or_insert_with(|| CounterRecord {
                name: name.to_string(),
                category: category.to_string(),
                description: description.to_string(),
                pid,
                time_ns: Vec::new(),
                count: Vec::new(),
                base: before,
            });
        s.time_ns.push(t);
        s.count.push(v);
    }

    /// Take one reading at `now_ns`; `pids` ran since the previous one.
    /// CPU shares are read at most every [`MIN_READING_NS`] (a reading
    /// closer to the last waits for the next): /proc counts CPU time in ticks
    /// (10 ms), so a reading 2 ms after the last (the one at the stop) gave
    /// "720 % of one CPU" and a machine busy 329 % of its CPUs. Bytes are
    /// exact and read every time.
    pub fn poll(&mut self, now_ns: u64, pids: impl IntoIterator<Item = u32>) {
        let shares = self
            .last_reading_ns
            .is_none_or(|last| now_ns.saturating_sub(last) >= MIN_READING_NS);
        if shares {
            self.last_reading_ns = Some(now_ns);
            self.poll_cpu(now_ns);
        }
        self.poll_memory(now_ns);
        self.poll_disks(now_ns);
        self.poll_pmu(now_ns);
        self.poll_processes(now_ns, pids);
    }

    /// The machine's busy share since the previous reading.
    fn poll_cpu(&mut self, now_ns: u64) {
        if let Some(now) = self.files.cpu() {
            // The first reading is a base sample (0): the front end drops
            // every counter's first value (it has no interval), so without
            // one the first interval's share or bytes were never shown.
            let pct = self.cpu_prev.map(|prev| busy_pct(prev, now)).unwrap_or(0.0);
            self.push(
                0,
                "CPU usage",
                "CPU",
                "Busy share of all CPUs since the previous sample (%), from /proc/stat",
                now_ns,
                pct,
            );
            self.cpu_prev = Some(now);
        }
    }

    /// The machine's memory in use, as a change of its level.
    fn poll_memory(&mut self, now_ns: u64) {
        if let Some(used) = self.files.mem_used() {
            let before = self.mem_prev.unwrap_or(0) as f64;
            let delta = used as f64 - before;
            self.mem_prev = Some(used);
            self.push_level(
                0,
                "Memory",
                "Memory",
                "Machine memory in use (MemTotal - MemAvailable), bytes",
                now_ns,
                delta,
                Some(before),
            );
        }
    }

    /// Bytes read and written per disk since the previous reading.
    fn poll_disks(&mut self, now_ns: u64) {
        for (dev, (rd, wr)) in self.files.disks() {
            // A device's first reading is a base sample (0), as above.
            let (prd, pwr) = self.disk_prev.get(&dev).copied().unwrap_or((rd, wr));
            self.push(
                0,
                &format!("Disk read: {dev}"),
                "Bandwidth",
                "Bytes read from the device since the previous sample",
                now_ns,
                rd.saturating_sub(prd) as f64,
            );
            self.push(
                0,
                &format!("Disk write: {dev}"),
                "Bandwidth",
                "Bytes written to the device since the previous sample",
                now_ns,
                wr.saturating_sub(pwr) as f64,
            );
            self.disk_prev.insert(dev, (rd, wr));
        }
    }

    /// Cycles and instructions on all CPUs since the previous reading,
    /// where there is a PMU.
    fn poll_pmu(&mut self, now_ns: u64) {
        if self.pmu.is_empty() {
            return;
        }
        let (mut cyc, mut ins) = (0u64, 0u64);
        for (c, i) in &self.pmu {
            cyc += read_u64(c);
            ins += read_u64(i);
        }
        let (pc, pi) = self.pmu_prev;
        if pc != 0 {
            self.push(
                0,
                "Cycles",
                "CPU",
                "CPU cycles on all CPUs since the previous sample",
                now_ns,
                cyc.saturating_sub(pc) as f64,
            );
            self.push(
                0,
                "Instructions",
                "CPU",
                "Instructions retired on all CPUs since the previous sample",
                now_ns,
                ins.saturating_sub(pi) as f64,
            );
        }
        self.pmu_prev = (cyc, ins);
    }

    /// The CPU share and RSS of each process of `pids`.
    fn poll_processes(&mut self, now_ns: u64, pids: impl IntoIterator<Item = u32>) {
        let previous_poll = self.last_poll_ns.replace(now_ns);
        // A process is read once it was sampled, and its samples reach the
        // collector a drain after they were taken: one that started just
        // before the previous poll is first read now. Its base goes at its
        // start if that came after the poll before the previous one (a
        // command started 1.7 ms into `record` had its first CPU share
        // 200 ms late in 2 runs of 12: its start, rounded down to /proc's
        // 10-ms tick, fell before the poll the loop makes as it begins).
        let floor =
            std::mem::replace(&mut self.poll_before_last_ns, previous_poll).or(previous_poll);
        for pid in pids {
            if pid == 0 {
                continue;
            }
            let Some((ticks, rss_pages, start_ticks)) = self.files.process(pid) else {
                continue;
            };
            let rss = rss_pages * self.page_size;
            let base = self
                .proc_prev
                .get(&pid)
                .copied()
                .or_else(|| self.base_at_start(pid, start_ticks, floor, now_ns));
            match base {
                // Too soon for a share: its base stays, for the next reading.
                Some((_, ptime, _)) if now_ns.saturating_sub(ptime) < MIN_READING_NS => continue,
                Some((pticks, ptime, prss)) => {
                    let dt = now_ns.saturating_sub(ptime) as f64 / 1e9;
                    let pct = ticks.saturating_sub(pticks) as f64 / self.ticks_per_s / dt * 100.0;
                    self.push_process_cpu(pid, now_ns, pct);
                    self.push_rss(pid, now_ns, rss as f64 - prss as f64, prss as f64);
                }
                // A base, not a change: the front end adds every value to
                // the one before (and drops the first), so an absolute RSS
                // here — a process back after its base was dropped, or any
                // window but the first in `show` — drew a jump of its whole RSS.
                None => self.push_rss(pid, now_ns, 0.0, rss as f64),
            }
            self.proc_prev.insert(pid, (ticks, now_ns, rss));
        }
        // Bases of processes not sampled for a minute go (exited, or idle:
        // an idle one starts again from a fresh base).
        if self.proc_prev.len() > 64 {
            self.proc_prev
                .retain(|_, (_, t, _)| now_ns.saturating_sub(*t) < 60_000_000_000);
            let polled = &self.proc_prev;
            self.files
                .processes
                .retain(|pid, _| polled.contains_key(pid));
        }
    }

    /// The base of process `pid` (started at `start_ticks`, no base yet)
    /// at its start, if it started since the poll at `floor`: pushed as
    /// its counters' first samples and kept.
    fn base_at_start(
        &mut self,
        pid: u32,
        start_ticks: u64,
        floor: Option<u64>,
        now_ns: u64,
    ) -> Option<(u64, u64, u64)> {
        // Started since the previous poll: it had no CPU time and no
        // memory before, so its counters start at its start, not at
        // the reading after (a command's CPU graph was blank for its
        // first 200 ms, until a second reading gave a share).
        // /proc gives the start in whole ticks, rounded down: a
        // process that started less than a tick before the previous
        // poll had less than a tick of CPU by then.
        let tick_ns = 1_000_000_000 / self.ticks_per_s as u64;
        let started = crate::sys::clock::boottime_to_monotonic_ns(start_ticks * tick_ns);
        let started = floor
            .filter(|&p| started + tick_ns > p && started <= now_ns)
            .map(|p| started.max(p))?;
        self.push_process_cpu(pid, started, 0.0);
        self.push_rss(pid, started, 0.0, 0.0);
        self.proc_prev.insert(pid, (0, started, 0));
        Some((0, started, 0))
    }

    /// A sample of process `pid`'s CPU share.
    fn push_process_cpu(&mut self, pid: u32, t: u64, pct: f64) {
        self.push(
            pid,
            "Process CPU",
            "CPU",
            "CPU used by the process since the previous sample (% of one CPU)",
            t,
            pct,
        );
    }

    /// A change of process `pid`'s RSS, from `before`.
    fn push_rss(&mut self, pid: u32, t: u64, change: f64, before: f64) {
        self.push_level(
            pid,
            "RSS",
            "Memory",
            "Resident set size of the process, bytes",
            t,
            change,
            Some(before),
        );
    }

    /// A window was cut at the last poll: no base goes before it.
    pub fn window_cut(&mut self) {
        self.poll_before_last_ns = None;
    }

    /// The counter tracks recorded. A disk that did no I/O at all during
    /// the recording gets no track: a row of zeros only hides the others.
    pub fn finish(mut self) -> Vec<CounterRecord> {
        self.take()
    }

    /// The counter tracks recorded since the previous call (a window of the
    /// agent), as [`CounterPoller::finish`] gives them; polling goes on.
    pub fn take(&mut self) -> Vec<CounterRecord> {
        std::mem::take(&mut self.series)
            .into_values()
            .filter(|c| !(c.name.starts_with("Disk ") && c.count.iter().all(|&v| v == 0.0)))
            .collect()
    }
}

fn open_hw(config: u32, cpu: u32) -> std::io::Result<OwnedFd> {
    let mut attr = sys::bindings::perf_event_attr {
        type_: sys::bindings::PERF_TYPE_HARDWARE,
        size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
        config: config as u64,
        ..Default::default()
    };
    // SAFETY: valid attr; a counting event on one CPU.
    let fd = unsafe {
        sys::perf_event_open(
            &mut attr,
            -1,
            cpu as i32,
            -1,
            sys::bindings::PERF_FLAG_FD_CLOEXEC as _,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn read_u64(fd: &OwnedFd) -> u64 {
    let mut v = 0u64;
    // SAFETY: reading 8 bytes into a u64.
    let n = unsafe { libc::read(fd.as_raw_fd(), &mut v as *mut u64 as *mut libc::c_void, 8) };
    if n == 8 {
        v
    } else {
        0
    }
}

/// (busy, total) jiffies of all CPUs from /proc/stat. Busy excludes idle and iowait.
pub fn read_cpu() -> Option<(u64, u64)> {
    parse_cpu(&crate::sys::kernel_text::read_to_string("/proc/stat").ok()?)
}

/// (busy, total) from the text of /proc/stat: the first line's user, nice,
/// system, idle, iowait, irq, softirq and steal jiffies; busy is all but
/// idle and iowait.
fn parse_cpu(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .take(8)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 8 {
        return None;
    }
    let total: u64 = v.iter().sum();
    Some((total - v[3] - v[4], total))
}

/// Busy share (%) of all CPUs between two (busy, total) readings.
fn busy_pct((prev_busy, prev_total): (u64, u64), (busy, total): (u64, u64)) -> f64 {
    if total > prev_total {
        busy.saturating_sub(prev_busy) as f64 * 100.0 / (total - prev_total) as f64
    } else {
        0.0
    }
}

/// Memory in use (MemTotal - MemAvailable), bytes, from the text of /proc/meminfo.
fn parse_mem_used(m: &str) -> Option<u64> {
    let kb = |key: &str| -> Option<u64> {
        m.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    };
    Some((kb("MemTotal:")? - kb("MemAvailable:")?) * 1024)
}

/// (bytes read, bytes written) per whole disk, from /proc/diskstats.
pub fn read_disks() -> Vec<(String, (u64, u64))> {
    let Ok(text) = crate::sys::kernel_text::read_to_string("/proc/diskstats") else {
        return Vec::new();
    };
    // Whole disks (loop devices and zram included) have a /sys/block entry;
    // partitions, which would count their disk's bytes twice, do not.
    parse_diskstats(&text, |name| whole_disks().contains(name))
}

/// The names under /sys/block, read again at most every ten seconds (a
/// lookup per device per poll was most of what polling disks cost).
fn whole_disks() -> std::sync::MutexGuard<'static, DiskNames> {
    static NAMES: std::sync::Mutex<DiskNames> = std::sync::Mutex::new(DiskNames {
        names: Vec::new(),
        read_at: None,
    });
    let mut g = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if g.read_at
        .is_none_or(|t| t.elapsed() > std::time::Duration::from_secs(10))
    {
        g.names = std::fs::read_dir("/sys/block")
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        g.read_at = Some(std::time::Instant::now());
    }
    g
}

/// Whole disks' names and when they were read.
struct DiskNames {
    names: Vec<String>,
    read_at: Option<std::time::Instant>,
}

impl DiskNames {
    fn contains(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
    }
}

/// (name, (bytes read, bytes written)) of the devices `is_disk` accepts,
/// from the text of /proc/diskstats (fields 6 and 10 are sectors of 512 bytes).
fn parse_diskstats(text: &str, is_disk: impl Fn(&str) -> bool) -> Vec<(String, (u64, u64))> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let name = *f.get(2)?;
            if !is_disk(name) {
                return None;
            }
            let rd: u64 = f.get(5)?.parse().ok()?;
            let wr: u64 = f.get(9)?.parse().ok()?;
            Some((name.to_string(), (rd * 512, wr * 512)))
        })
        .collect()
}

/// A process's CPU ticks (user + system), resident pages and start time in
/// ticks, from the text of its `/proc/PID/stat` alone: its `rss` field is
/// the count `statm`'s second field gives (both the kernel's `get_mm_rss`),
/// so one read per process and poll, not two. The command, before the last
/// closing parenthesis, may hold anything, parentheses and bytes that are
/// not UTF-8 included.
fn parse_proc_stat(stat: &[u8]) -> Option<(u64, u64, u64)> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(stat.get(close + 2..)?).ok()?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let number = |i: usize| f.get(i)?.parse::<u64>().ok();
    let ticks = number(11)? + number(12)?;
    Some((ticks, number(21)?, number(19)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check the fields read from `/proc/PID/stat` against a line written
    /// by hand (a command with a parenthesis and spaces in it), and this
    /// process's resident pages against `statm`'s count of them.
    #[test]
    fn proc_stat_gives_ticks_rss_and_start() {
        let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 1 0 987 12345678 321 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
        assert_eq!(parse_proc_stat(line.as_bytes()), Some((12, 321, 987)));
        let mut not_utf8 = b"4242 (\xff\xfe) x)".to_vec();
        not_utf8.extend_from_slice(&line.as_bytes()[line.find(") S").unwrap() + 1..]);
        assert_eq!(parse_proc_stat(&not_utf8), Some((12, 321, 987)));
        assert_eq!(
            parse_proc_stat(b"4242 (x S 1"),
            None,
            "no closing parenthesis"
        );
        assert_eq!(parse_proc_stat(b"4242 (x) S 1 2"), None, "too few fields");
        let pid = std::process::id();
        let mut files = KernelFiles::default();
        let (_, rss, _) = files.process(pid).expect("our own stat");
        assert!(files.processes.contains_key(&pid), "its file is kept");
        // Read again through the kept file: afresh, the same process.
        let (_, rss_again, _) = files.process(pid).expect("our own stat, kept");
        assert!(rss_again.abs_diff(rss) * 10 <= rss.max(10));
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let statm_rss: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
        // Read a moment apart, by a process that allocates: close, not equal.
        assert!(
            rss.abs_diff(statm_rss) * 10 <= statm_rss.max(10),
            "stat {rss} vs statm {statm_rss} pages"
        );
    }

    /// Check that a kept `/proc/PID/stat` follows its process, not the
    /// pid: once the child is reaped, its kept file is dropped and nothing
    /// is read for it (its pid may be another process's next).
    #[test]
    fn a_kept_process_file_is_dropped_when_its_process_ends() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut files = KernelFiles::default();
        assert!(files.process(pid).is_some(), "the child's stat");
        assert!(files.processes.contains_key(&pid));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(files.process(pid), None, "a reaped child has no stat");
        assert!(!files.processes.contains_key(&pid), "its file was dropped");
    }

    /// Check the busy share against a hand computation: user+nice+system+irq+
    /// softirq+steal are busy, idle and iowait are not, and guest columns
    /// (already inside user) are ignored.
    #[test]
    fn busy_share_counts_everything_but_idle_and_iowait() {
        let a = "cpu  100 10 50 1000 40 5 5 0 7 7\ncpu0 1 2 3\n";
        let b = "cpu  400 10 110 1300 140 15 15 10 9 9\ncpu0 1 2 3\n";
        let (pa, pb) = (parse_cpu(a).unwrap(), parse_cpu(b).unwrap());
        assert_eq!(pa, (170, 1210));
        // busy: +300 user, +60 system, +10 irq, +10 softirq, +10 steal = 390;
        // total adds +300 idle and +100 iowait: 790.
        assert_eq!(pb, (560, 2000));
        let pct = busy_pct(pa, pb);
        assert!((pct - 390.0 * 100.0 / 790.0).abs() < 1e-9, "{pct}");
        assert_eq!(busy_pct(pb, pb), 0.0, "no time passed: 0, not NaN");
        assert_eq!(parse_cpu("intr 1 2 3\n"), None);
        assert_eq!(parse_cpu("cpu  1 2 3\n"), None, "too few columns");
    }

    /// Check that disk bytes come from the sector columns, only for the
    /// devices accepted as whole disks.
    #[test]
    fn diskstats_bytes_of_whole_disks() {
        let text = "   7       0 loop0 200 0 1600 12 3 0 24 1 0 20 13 0 0 0 0 1 0\n                     254       0 vda 10 1 80 2 5 2 40 3 0 6 5 0 0 0 0 0 0\n                     254       1 vda1 9 1 72 2 5 2 40 3 0 6 5 0 0 0 0 0 0\n";
        let disks = parse_diskstats(text, |n| n == "vda" || n == "loop0");
        assert_eq!(
            disks,
            vec![
                ("loop0".to_string(), (1600 * 512, 24 * 512)),
                ("vda".to_string(), (80 * 512, 40 * 512))
            ]
        );
    }

    /// Check that a disk that did no I/O gets no track, one that did keeps
    /// every sample (zeros included), and other counters are untouched.
    #[test]
    fn idle_disks_get_no_track() {
        let mut c = CounterPoller {
            series: BTreeMap::new(),
            cpu_prev: None,
            mem_prev: None,
            disk_prev: FxHashMap::default(),
            proc_prev: FxHashMap::default(),
            pmu: Vec::new(),
            pmu_prev: (0, 0),
            ticks_per_s: 100.0,
            page_size: 4096,
            notes: Vec::new(),
            last_reading_ns: None,
            last_poll_ns: None,
            poll_before_last_ns: None,
            files: KernelFiles::default(),
        };
        for (t, busy, idle) in [(1, 0.0, 0.0), (2, 4096.0, 0.0), (3, 0.0, 0.0)] {
            c.push(0, "Disk read: busy", "Bandwidth", "", t, busy);
            c.push(0, "Disk read: idle", "Bandwidth", "", t, idle);
            c.push(0, "CPU usage", "CPU", "", t, 0.0);
        }
        let names: Vec<(String, usize)> = c
            .finish()
            .into_iter()
            .map(|r| (r.name, r.count.len()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("CPU usage".to_string(), 3),
                ("Disk read: busy".to_string(), 3)
            ]
        );
    }

    /// Check that CPU shares are not read within 50 ms of the previous
    /// reading (the ticks of /proc's CPU times would make hundreds of percent
    /// of it): that time goes to the next reading's share.
    #[test]
    fn shares_too_close_together_wait_for_the_next() {
        let mut c = CounterPoller::new(&[]);
        let me = std::process::id();
        let times = |c: &CounterPoller, pid: u32, name: &str| {
            c.series
                .get(&(pid, name.to_string()))
                .map(|s| s.time_ns.clone())
                .unwrap_or_default()
        };
        c.poll(1_000_000_000, [me]);
        c.poll(1_002_000_000, [me]);
        c.poll(1_040_000_000, [me]);
        assert_eq!(
            times(&c, 0, "CPU usage"),
            vec![1_000_000_000],
            "only the first reading's share"
        );
        assert_eq!(times(&c, me, "Process CPU"), Vec::<u64>::new());
        c.poll(1_200_000_000, [me]);
        assert_eq!(
            times(&c, 0, "CPU usage"),
            vec![1_000_000_000, 1_200_000_000]
        );
        assert_eq!(
            times(&c, me, "Process CPU"),
            vec![1_200_000_000],
            "from the base at 1.0 s"
        );
    }
}
