//! Helpers for the integration tests: build C workloads, run `sysprof
//! record` as a child process, and read the profile it wrote.
//!
//! The tests compare what the profile says against oracles the profiler
//! does not produce: the workloads' own measurements, `/proc`, the source.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

/// The `sysprof` binary under test: `$SYSPROF_BIN` (set by `cargo xtask
/// test`), else the workspace's release build, built on first use.
pub fn sysprof_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(p) = std::env::var("SYSPROF_BIN") {
            return PathBuf::from(p);
        }
        let root = workspace_root();
        let status = Command::new(env!("CARGO"))
            .current_dir(&root)
            .args(["build", "--release", "-p", "sysprof"])
            .status()
            .expect("cargo build");
        assert!(status.success(), "building sysprof failed");
        root.join("target/release/sysprof")
    })
    .clone()
}

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// True when recording can run here. Without root it says so loudly; under
/// CI (`CI` set) a missing privilege is a failure, never a silent pass.
pub fn can_record(test: &str) -> bool {
    let root = unsafe { libc_geteuid() } == 0;
    let btf = Path::new("/sys/kernel/btf/vmlinux").exists();
    if root && btf {
        return true;
    }
    let why = if !root {
        "not running as root"
    } else {
        "the kernel has no BTF (/sys/kernel/btf/vmlinux)"
    };
    skip(
        test,
        &format!(
            "cannot record: {why} (kernel {}); run `sudo -E cargo xtask test`",
            kernel_release()
        ),
    );
    false
}

/// Say loudly that `test` cannot run, and why. Under CI (`CI` set) that is a
/// failure. Otherwise it is written past the test harness's output capture
/// (which hides what passing tests print) and appended to
/// `$SYSPROF_SKIP_LOG`, so `cargo xtask test` counts it as skipped, not passed.
pub fn skip(test: &str, why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{test}: {why}; CI must run every test");
    }
    let line = format!("\n*** SKIPPED {test}: {why} ***\n");
    // SAFETY: writing a valid buffer to fd 2.
    unsafe { libc_write(2, line.as_ptr(), line.len()) };
    if let Some(log) = std::env::var_os("SYSPROF_SKIP_LOG") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = writeln!(f, "{test}: {why}");
        }
    }
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
    #[link_name = "write"]
    fn libc_write(fd: i32, buf: *const u8, len: usize) -> isize;
    #[link_name = "open"]
    fn libc_open(path: *const std::ffi::c_char, flags: i32, ...) -> i32;
    #[link_name = "close"]
    fn libc_close(fd: i32) -> i32;
}

/// Have `command`'s process move itself into the cgroup whose
/// `cgroup.procs` is `procs` before it execs, so that everything it
/// allocates (its BPF maps' kernel memory too) is charged there from the
/// start, as under a systemd unit; its spawn fails if it cannot.
pub fn join_cgroup_at_exec(command: &mut Command, procs: &Path) {
    use std::os::unix::process::CommandExt;
    let path = std::ffi::CString::new(procs.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: between fork and exec only async-signal-safe calls
    // (open, write, close) on memory prepared before the fork.
    unsafe {
        command.pre_exec(move || {
            let fd = libc_open(path.as_ptr(), 1 /* O_WRONLY */);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // "0": the writing process itself.
            let written = libc_write(fd, b"0".as_ptr(), 1);
            libc_close(fd);
            if written != 1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A memory cgroup made for a test (v1's controller or v2's, as the
/// machine has), limited to `limit` bytes; removed when dropped.
pub struct MemoryCgroup {
    /// Its directory.
    pub dir: PathBuf,
    v2: bool,
}

impl MemoryCgroup {
    /// Make it, or None (said why) if the machine has no memory controller.
    pub fn make(name: &str, limit: u64) -> Option<MemoryCgroup> {
        let v1 = PathBuf::from("/sys/fs/cgroup/memory");
        let (dir, v2) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(name), false)
        } else if std::fs::read_to_string("/sys/fs/cgroup/cgroup.subtree_control")
            .is_ok_and(|c| c.split_whitespace().any(|w| w == "memory"))
        {
            (PathBuf::from("/sys/fs/cgroup").join(name), true)
        } else {
            return None;
        };
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir(&dir).ok()?;
        let file = if v2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        std::fs::write(dir.join(file), limit.to_string()).ok()?;
        Some(MemoryCgroup { dir, v2 })
    }

    /// Its `cgroup.procs`.
    pub fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    fn number(&self, file: &str) -> u64 {
        std::fs::read_to_string(self.dir.join(file))
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Bytes charged now (page cache, anonymous and kernel memory).
    pub fn usage(&self) -> u64 {
        self.number(if self.v2 {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        })
    }

    /// The most charged so far (v1's own figure; v2's `memory.peak` where
    /// the kernel has it, else 0).
    pub fn peak(&self) -> u64 {
        self.number(if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        })
    }

    /// Kernel memory charged now (v1's `memory.kmem.usage_in_bytes`, v2's
    /// `kernel` of `memory.stat` where the kernel has it, else 0): BPF
    /// maps, page tables, slabs.
    pub fn kernel(&self) -> u64 {
        if !self.v2 {
            return self.number("memory.kmem.usage_in_bytes");
        }
        std::fs::read_to_string(self.dir.join("memory.stat"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("kernel "))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(0)
    }

    /// Processes of it the kernel's OOM killer ended.
    pub fn oom_kills(&self) -> u64 {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        std::fs::read_to_string(self.dir.join(file))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("oom_kill "))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(0)
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// A scratch directory for one test, emptied first.
pub fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join("sysprof-tests").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Compile `tests/workloads/NAME.c` with gcc into `dir` as `out`, with
/// frame pointers and symbols, plus `extra` flags.
pub fn build_c(name: &str, out: &Path, extra: &[&str]) -> PathBuf {
    let src = workspace_root()
        .join("tests/workloads")
        .join(format!("{name}.c"));
    let status = Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-pthread"])
        .arg(&src)
        .args(extra)
        .arg("-o")
        .arg(out)
        .status()
        .expect("gcc is needed to build the test workloads");
    assert!(status.success(), "compiling {} failed", src.display());
    out.to_path_buf()
}

/// The in-kernel walker's verification time, ms, from `record -v`'s load
/// times (`sample_cpu_clock`): it is verified once sampling began, so no
/// sample earlier than this into the range was walked by it.
pub fn walker_ms(stderr: &[u8]) -> f64 {
    let text = String::from_utf8_lossy(stderr);
    text.lines()
        .find_map(|l| l.strip_prefix("sysprof: loaded (ms): "))
        .and_then(|l| {
            l.split(", ")
                .find_map(|p| p.strip_prefix("sample_cpu_clock "))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or_else(|| panic!("no walker load time in -v's output: {text}"))
}

/// Run `sysprof record -v ARGS -o OUT`; returns the process output (whose
/// stderr ends with the `sysprof: stats:` line, for failure messages).
pub fn record(args: &[&str], out: &Path) -> Output {
    Command::new(sysprof_bin())
        .args(["record", "-v", "-o"])
        .arg(out)
        .args(args)
        .output()
        .expect("running sysprof")
}

/// Start `sysprof record -v ARGS -o OUT` in the background (stderr piped)
/// and return once it says it is recording: a workload started after this
/// is seen from its first event. A fixed sleep was not enough: on a loaded
/// machine attaching took longer than 800 ms, and CI missed a workload's
/// first 6 reads. Panics if sysprof exits first or takes over 60 s.
pub fn record_started(args: &[&str], out: &Path) -> std::process::Child {
    use std::io::Read;
    let mut child = Command::new(sysprof_bin())
        .args(["record", "-v", "-o"])
        .arg(out)
        .args(args)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running sysprof");
    let mut stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Byte by byte: what follows the line stays in the pipe for the
        // caller's wait_with_output.
        let mut said = Vec::new();
        let mut byte = [0u8];
        let started = loop {
            match stderr.read(&mut byte) {
                Ok(1) => {
                    said.push(byte[0]);
                    if byte[0] == b'\n'
                        && String::from_utf8_lossy(&said)
                            .lines()
                            .last()
                            .is_some_and(|l| l.starts_with("sysprof: recording; sampling from"))
                    {
                        break true;
                    }
                }
                _ => break false,
            }
        };
        let _ = tx.send((stderr, started, String::from_utf8_lossy(&said).into_owned()));
    });
    match rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok((stderr, true, _)) => {
            child.stderr = Some(stderr);
            child
        }
        Ok((_, false, said)) => {
            let status = child.wait();
            panic!("sysprof record {args:?} ended before recording ({status:?}): {said}");
        }
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("sysprof record {args:?} did not start recording within 60 s");
        }
    }
}

/// The `sysprof: stats: ...` line of a `record -v` run.
pub fn stats_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .find(|l| l.starts_with("sysprof: stats:"))
        .unwrap_or("")
        .to_string()
}

/// One total of `record -v`'s stats line (`key=value`); panics when absent.
pub fn stat(out: &Output, key: &str) -> u64 {
    let line = stats_line(out);
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in the stats: {line}"))
}

/// Panic with sysprof's stderr unless it exited with success.
pub fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "sysprof failed ({}):\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// How far the share of `n` samples that fell in one of two functions may
/// stand from the share of CPU time the workload measured for it
/// (`expected`): each sample lands there with that chance, so the share
/// spreads binomially by sqrt(p(1-p)/n); four of those (passed by chance
/// once in 16,000) and a point for what is not chance (samples on a call's
/// edge). For 2,000 samples at 0.75: 0.049. A fixed 0.02 was two of them,
/// and failed CI by 0.004 (0.771 vs 0.747 of 1,959).
pub fn share_tolerance(expected: f64, n: u64) -> f64 {
    let p = expected.clamp(0.0, 1.0);
    0.01 + 4.0 * (p * (1.0 - p) / n.max(1) as f64).sqrt()
}

/// The machine's steal time so far (a vCPU its host did not run), in
/// milliseconds, from /proc/stat's `cpu` line (USER_HZ, 100 everywhere).
pub fn steal_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let jiffies: u64 = stat
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(8))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    jiffies as f64 * 10.0
}

/// Parse `key=value` from a workload's output.
pub fn field(stdout: &[u8], key: &str) -> Option<u64> {
    String::from_utf8_lossy(stdout).lines().find_map(|l| {
        l.strip_prefix(&format!("{key}="))
            .and_then(|v| v.trim().parse().ok())
    })
}

/// The leaf of a woken wait's run delay (0.1 ms or more), under its
/// reason's leaf (sysprof's `RUN_DELAY_FRAME_NAME`).
pub const RUN_DELAY_LEAF: &str = "[off-CPU: woken, waiting for a CPU]";

/// An off-CPU stack's reason frame (`[off-CPU: sleeping]`...), given its
/// frame names root first: its leaf, or the frame above a run-delay leaf
/// (the end of the same wait). None for an on-CPU stack.
pub fn off_cpu_reason<'a>(names: impl DoubleEndedIterator<Item = &'a str>) -> Option<&'a str> {
    let mut rev = names.rev();
    let leaf = rev.next()?;
    let reason = if leaf == RUN_DELAY_LEAF {
        rev.next()?
    } else {
        leaf
    };
    reason.starts_with("[off-CPU").then_some(reason)
}

/// A written profile.
pub struct Profile {
    /// The JSON.
    pub json: Value,
}

/// One frame of a sample's stack ([`ThreadView::stack_views`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameView {
    /// Its function's name.
    pub name: String,
    /// Its category's name.
    pub category: String,
    /// Its function's file ("" for none).
    pub file: String,
    /// 0 for a machine frame's own function; 1, 2, ... for the functions
    /// a compiler inlined into it, innermost deepest.
    pub inline_depth: u64,
    /// Native code's library path, the frame's address and its symbol's
    /// start (both relative to the library), where the profile has them.
    pub native: Option<(String, u64, u64)>,
}

/// One thread of a profile, with helpers to walk its samples.
pub struct ThreadView<'a> {
    /// The thread's JSON.
    pub t: &'a Value,
}

impl Profile {
    /// Read a `.json` or `.json.gz` profile and check it with the structural
    /// validator; panics with every problem found.
    pub fn load(path: &Path) -> Profile {
        let bytes =
            std::fs::read(path).unwrap_or_else(|e| panic!("no profile at {}: {e}", path.display()));
        let json: Value = if bytes.starts_with(&[0x1f, 0x8b]) {
            serde_json::from_reader(flate2::read::GzDecoder::new(&bytes[..])).expect("gzip JSON")
        } else {
            serde_json::from_slice(&bytes).expect("JSON")
        };
        let problems = sysprof::profile::validate::validate(&json);
        assert!(
            problems.is_empty(),
            "the profile is malformed:\n{}",
            problems.join("\n")
        );
        Profile { json }
    }

    /// Every thread.
    pub fn threads(&self) -> Vec<ThreadView<'_>> {
        self.json["threads"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| ThreadView { t })
            .collect()
    }

    /// The thread with this tid in process pid.
    pub fn thread(&self, pid: u64, tid: u64) -> Option<ThreadView<'_>> {
        self.threads()
            .into_iter()
            .find(|t| t.pid() == pid && t.tid() == tid)
    }

    /// Threads of process pid.
    pub fn process_threads(&self, pid: u64) -> Vec<ThreadView<'_>> {
        self.threads()
            .into_iter()
            .filter(|t| t.pid() == pid)
            .collect()
    }
}

impl ThreadView<'_> {
    /// Process id; `u64::MAX` for a track of no process (the machine's and
    /// the per-CPU tracks: pid "0" as the idle task's, but the front end's
    /// parent process type "default"; `"machine"` or `"cpus"` in older
    /// profiles), which no real pid equals.
    pub fn pid(&self) -> u64 {
        let pid = self.t["pid"].as_str().unwrap();
        match pid {
            "machine" | "cpus" => u64::MAX,
            _ if self.t["processType"] == "default" => u64::MAX,
            _ => pid.parse().unwrap(),
        }
    }
    /// Thread id.
    pub fn tid(&self) -> u64 {
        self.t["tid"].as_u64().unwrap()
    }
    /// Thread name.
    pub fn name(&self) -> &str {
        self.t["name"].as_str().unwrap()
    }
    /// Process name.
    pub fn process_name(&self) -> &str {
        self.t["processName"].as_str().unwrap()
    }
    /// Number of samples.
    pub fn sample_count(&self) -> usize {
        self.t["samples"]["length"].as_u64().unwrap() as usize
    }
    /// Sum of `threadCPUDelta` (µs).
    pub fn cpu_delta_us(&self) -> u64 {
        self.t["samples"]["threadCPUDelta"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_u64)
            .sum()
    }

    /// Each sample's time, ms since the profile's start.
    pub fn times(&self) -> Vec<f64> {
        sysprof::profile::validate::sample_times(&self.t["samples"]).expect("sample times")
    }

    /// Each sample's weight (1 when the profile is not weighted).
    pub fn weights(&self) -> Vec<f64> {
        match self.t["samples"]["weight"].as_array() {
            Some(w) => w.iter().map(|v| v.as_f64().unwrap()).collect(),
            None => vec![1.0; self.sample_count()],
        }
    }

    /// Markers as (name, data), in table order, with their `startTime` and
    /// `endTime`: for an off-CPU wait the whole wait, run delay included,
    /// also where it is drawn to its wakeup's enqueue (`drawnEndTime`, the
    /// marker's own end) and its run delay follows as a "Waiting for a CPU"
    /// marker.
    pub fn markers(&self) -> Vec<(String, Value)> {
        let strings = self.t["stringArray"].as_array().unwrap();
        let m = &self.t["markers"];
        (0..m["length"].as_u64().unwrap() as usize)
            .map(|i| {
                let name = strings[m["name"][i].as_u64().unwrap() as usize]
                    .as_str()
                    .unwrap()
                    .to_string();
                let mut data = m["data"][i].clone();
                data["startTime"] = m["startTime"][i].clone();
                data["endTime"] = m["endTime"][i].clone();
                data["drawnEndTime"] = m["endTime"][i].clone();
                // An off-CPU marker drawn to its wakeup's enqueue says the
                // whole wait apart (its run delay is a marker of its own).
                if let (Some(s), Some(whole)) =
                    (m["startTime"][i].as_f64(), data["offCpu"].as_f64())
                {
                    if data["type"] == "OffCpu" {
                        data["endTime"] = (s + whole).into();
                    }
                }
                (name, data)
            })
            .collect()
    }

    /// Stacks of on-CPU samples only (off-CPU samples end in an "[off-CPU: …]" leaf).
    pub fn on_cpu_stacks(&self, categories: &[String]) -> Vec<Vec<(String, String)>> {
        self.stacks(categories)
            .into_iter()
            .filter(|s| !s.last().is_some_and(|(n, _)| n.starts_with("[off-CPU")))
            .collect()
    }

    /// Each sample's leaf frame's library name (`libs[...].name`), None for
    /// frames in no library.
    pub fn leaf_libs(&self, profile: &Value) -> Vec<Option<String>> {
        let t = self.t;
        let libs = profile["libs"].as_array().unwrap();
        t["samples"]["stack"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let frame = t["stackTable"]["frame"][s.as_u64()? as usize].as_u64()? as usize;
                let func = t["frameTable"]["func"][frame].as_u64()? as usize;
                let resource = t["funcTable"]["resource"][func]
                    .as_i64()
                    .filter(|&r| r >= 0)? as usize;
                let lib = t["resourceTable"]["lib"][resource].as_u64()? as usize;
                Some(libs[lib]["name"].as_str()?.to_string())
            })
            .collect()
    }

    /// The function names of stack `node` of this thread's stack table,
    /// root first (a marker's `cause.stack`).
    pub fn stack_names(&self, node: u64) -> Vec<String> {
        let t = self.t;
        let strings = t["stringArray"].as_array().unwrap();
        let mut out = Vec::new();
        let mut node = Some(node);
        while let Some(n) = node {
            let frame = t["stackTable"]["frame"][n as usize].as_u64().unwrap() as usize;
            let func = t["frameTable"]["func"][frame].as_u64().unwrap() as usize;
            out.push(
                strings[t["funcTable"]["name"][func].as_u64().unwrap() as usize]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
            node = t["stackTable"]["prefix"][n as usize].as_u64();
        }
        out.reverse();
        out
    }

    /// Each sample's stack as (function name, line) pairs, root first (the
    /// frame's line, where the profile has one).
    pub fn stack_lines(&self) -> Vec<Vec<(String, Option<u64>)>> {
        self.sample_frames(|name, frame| {
            (
                name.to_string(),
                self.t["frameTable"]["line"][frame].as_u64(),
            )
        })
    }

    /// The off-CPU time of its samples, ms: the weights of those whose leaf
    /// is an `[off-CPU ...]` frame.
    pub fn off_cpu_ms(&self, categories: &[String]) -> f64 {
        self.stacks(categories)
            .iter()
            .zip(self.weights())
            .filter(|(s, _)| s.last().is_some_and(|(n, _)| n.starts_with("[off-CPU")))
            .map(|(_, w)| w)
            .sum()
    }

    /// Its off-CPU markers whose reason is "sleeping".
    pub fn sleeping_markers(&self) -> Vec<(String, Value)> {
        self.markers()
            .into_iter()
            .filter(|(_, d)| d["type"] == "OffCpu" && d["reason"] == "sleeping")
            .collect()
    }

    /// Each sample's stack as (function name, category name) pairs, root first.
    pub fn stacks(&self, categories: &[String]) -> Vec<Vec<(String, String)>> {
        self.sample_frames(|name, frame| {
            let cat = self.t["frameTable"]["category"][frame]
                .as_u64()
                .unwrap_or(0) as usize;
            (
                name.to_string(),
                categories.get(cat).cloned().unwrap_or_default(),
            )
        })
    }

    /// Each sample's stack, root first, each frame with its inline depth
    /// and, for native code, where it is (see [`FrameView`]).
    pub fn stack_views(&self, profile: &Value, categories: &[String]) -> Vec<Vec<FrameView>> {
        let t = self.t;
        let strings = t["stringArray"].as_array().unwrap();
        let libs = profile["libs"].as_array().unwrap();
        self.sample_frames(|name, frame| {
            let ft = &t["frameTable"];
            let func = ft["func"][frame].as_u64().unwrap() as usize;
            let cat = ft["category"][frame].as_u64().unwrap_or(0) as usize;
            let native = ft["nativeSymbol"][frame].as_u64().and_then(|s| {
                let s = s as usize;
                let syms = &t["nativeSymbols"];
                let lib = syms["libIndex"][s].as_u64()? as usize;
                Some((
                    libs.get(lib)?["path"].as_str()?.to_string(),
                    ft["address"][frame].as_u64()?,
                    syms["address"][s].as_u64()?,
                ))
            });
            FrameView {
                name: name.to_string(),
                category: categories.get(cat).cloned().unwrap_or_default(),
                file: t["funcTable"]["fileName"][func]
                    .as_u64()
                    .and_then(|n| strings[n as usize].as_str())
                    .unwrap_or("")
                    .to_string(),
                inline_depth: ft["inlineDepth"][frame].as_u64().unwrap_or(0),
                native,
            }
        })
    }

    /// Each sample's stack as (function name, category name, file name)
    /// triples, root first (the file is "" for a function without one).
    pub fn stack_files(&self, categories: &[String]) -> Vec<Vec<(String, String, String)>> {
        let strings = self.t["stringArray"].as_array().unwrap();
        self.sample_frames(|name, frame| {
            let cat = self.t["frameTable"]["category"][frame]
                .as_u64()
                .unwrap_or(0) as usize;
            let func = self.t["frameTable"]["func"][frame].as_u64().unwrap() as usize;
            let file = self.t["funcTable"]["fileName"][func]
                .as_u64()
                .and_then(|n| strings[n as usize].as_str())
                .unwrap_or("")
                .to_string();
            (
                name.to_string(),
                categories.get(cat).cloned().unwrap_or_default(),
                file,
            )
        })
    }

    /// The files of this thread's functions named `name`.
    pub fn func_files(&self, name: &str) -> Vec<String> {
        let strings = self.t["stringArray"].as_array().unwrap();
        let f = &self.t["funcTable"];
        (0..f["length"].as_u64().unwrap() as usize)
            .filter(|&i| strings[f["name"][i].as_u64().unwrap() as usize].as_str() == Some(name))
            .filter_map(|i| f["fileName"][i].as_u64())
            .filter_map(|n| strings[n as usize].as_str().map(str::to_string))
            .collect()
    }

    /// Each sample's stack as (function name, category name, resource
    /// name) triples, root first (the resource is "" for a frame without one).
    pub fn stack_resources(&self, categories: &[String]) -> Vec<Vec<(String, String, String)>> {
        let strings = self.t["stringArray"].as_array().unwrap();
        self.sample_frames(|name, frame| {
            let cat = self.t["frameTable"]["category"][frame]
                .as_u64()
                .unwrap_or(0) as usize;
            let func = self.t["frameTable"]["func"][frame].as_u64().unwrap() as usize;
            let resource = self.t["funcTable"]["resource"][func]
                .as_i64()
                .filter(|&r| r >= 0)
                .and_then(|r| self.t["resourceTable"]["name"][r as usize].as_u64())
                .and_then(|n| strings[n as usize].as_str())
                .unwrap_or("")
                .to_string();
            (
                name.to_string(),
                categories.get(cat).cloned().unwrap_or_default(),
                resource,
            )
        })
    }

    /// Each sample's stack, root first, as `describe(function name, frame index)` of each frame.
    fn sample_frames<T>(&self, describe: impl Fn(&str, usize) -> T) -> Vec<Vec<T>> {
        let t = self.t;
        let strings = t["stringArray"].as_array().unwrap();
        t["samples"]["stack"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let mut out = Vec::new();
                let mut node = s.as_u64();
                while let Some(n) = node {
                    let frame = t["stackTable"]["frame"][n as usize].as_u64().unwrap() as usize;
                    let func = t["frameTable"]["func"][frame].as_u64().unwrap() as usize;
                    let name = strings[t["funcTable"]["name"][func].as_u64().unwrap() as usize]
                        .as_str()
                        .unwrap();
                    out.push(describe(name, frame));
                    node = t["stackTable"]["prefix"][n as usize].as_u64();
                }
                out.reverse();
                out
            })
            .collect()
    }
}

impl Profile {
    /// Category names, by index.
    pub fn categories(&self) -> Vec<String> {
        self.json["meta"]["categories"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    }
}

/// A loop block device over a file in a scratch directory, with direct I/O:
/// a disk nothing else on the machine touches, so its `/sys/block/NAME/stat`
/// counts exactly what a test's workload did. Detached when dropped.
pub struct LoopDevice {
    /// `/dev/loopN`.
    pub path: PathBuf,
    /// `loopN`, as sysfs and the profile name it.
    pub name: String,
}

impl LoopDevice {
    /// Attach a new loop device over a `mib` MiB file in `dir`, with its
    /// blocks written out (reads of holes would be answered without I/O on
    /// the backing file, but the loop device itself still sees every request).
    ///
    /// The loop device reads its backing file with direct I/O, so each of
    /// its requests completes in the interrupt of the disk under it, in the
    /// context of whatever task that CPU was running: for tests of who wakes
    /// a disk wait.
    pub fn new(dir: &Path, mib: usize) -> LoopDevice {
        LoopDevice::attach(dir, mib, "on")
    }

    /// A loop device as [`LoopDevice::new`], whose backing file is read
    /// through the page cache: each request completes in the loop's worker
    /// (the block softirq then runs in ksoftirqd), never in an interrupt
    /// taken in another task's context. For tests that count every request:
    /// this VM runs no BPF program in the context of its PID 1, whose
    /// threads in a CI run were on the disk interrupt's CPU for 42 of 200
    /// completions (each counted as untracked); `perf record -e
    /// block:block_rq_complete` here sees 200 of 200 in ksoftirqd.
    pub fn through_page_cache(dir: &Path, mib: usize) -> LoopDevice {
        LoopDevice::attach(dir, mib, "off")
    }

    fn attach(dir: &Path, mib: usize, direct_io: &str) -> LoopDevice {
        let backing = dir.join("loop.img");
        let f = std::fs::File::create(&backing).unwrap();
        for _ in 0..mib {
            std::io::Write::write_all(&mut &f, &vec![7u8; 1 << 20]).unwrap();
        }
        f.sync_all().unwrap();
        drop(f);
        let out = Command::new("losetup")
            .args(["--find", "--show", &format!("--direct-io={direct_io}")])
            .arg(&backing)
            .output()
            .expect("losetup (util-linux) is needed for the block I/O tests");
        assert!(
            out.status.success(),
            "losetup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        LoopDevice { path, name }
    }

    /// The device's counters now.
    pub fn stat(&self) -> DiskStat {
        DiskStat::read(&self.name)
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.path).status();
    }
}

/// Completed requests and sectors of one disk, from `/sys/block/NAME/stat`
/// (Documentation/block/stat.rst): the kernel's own accounting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskStat {
    /// Read requests completed.
    pub reads: u64,
    /// Sectors (512 bytes) read.
    pub read_sectors: u64,
    /// Write requests completed.
    pub writes: u64,
    /// Sectors written.
    pub write_sectors: u64,
    /// Discard requests completed.
    pub discards: u64,
    /// Flush requests completed.
    pub flushes: u64,
}

impl DiskStat {
    /// Read the counters of `/sys/block/NAME`.
    pub fn read(name: &str) -> DiskStat {
        let text = std::fs::read_to_string(format!("/sys/block/{name}/stat")).unwrap();
        let f: Vec<u64> = text
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect();
        let at = |i: usize| f.get(i).copied().unwrap_or(0);
        DiskStat {
            reads: at(0),
            read_sectors: at(2),
            writes: at(4),
            write_sectors: at(6),
            discards: at(11),
            flushes: at(15),
        }
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &DiskStat) -> DiskStat {
        DiskStat {
            reads: self.reads - earlier.reads,
            read_sectors: self.read_sectors - earlier.read_sectors,
            writes: self.writes - earlier.writes,
            write_sectors: self.write_sectors - earlier.write_sectors,
            discards: self.discards - earlier.discards,
            flushes: self.flushes - earlier.flushes,
        }
    }
}

/// CLOCK_MONOTONIC now, ns (the clock of the profile's timestamps).
pub fn monotonic_ns() -> u64 {
    sysprof::sys::clock::monotonic_ns()
}

/// CPU time of every task on the machine so far, by tid (the first field of
/// every `/proc/PID/task/TID/schedstat`, the kernel's per-task accounting), ns.
pub fn all_tasks_cpu_ns() -> std::collections::HashMap<u64, u64> {
    let mut tasks_cpu = std::collections::HashMap::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return tasks_cpu;
    };
    for p in procs.flatten() {
        if !p
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let Ok(tasks) = std::fs::read_dir(p.path().join("task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Ok(tid) = t.file_name().to_string_lossy().parse::<u64>() else {
                continue;
            };
            if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
                tasks_cpu.insert(
                    tid,
                    s.split_whitespace()
                        .next()
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0),
                );
            }
        }
    }
    tasks_cpu
}

/// CPU time all tasks used between two [`all_tasks_cpu_ns`] readings, ns:
/// per task, so a task that exits in between takes only its last stretch
/// with it, not everything it had used before.
pub fn cpu_ns_between(
    before: &std::collections::HashMap<u64, u64>,
    after: &std::collections::HashMap<u64, u64>,
) -> u64 {
    after
        .iter()
        .map(|(tid, &ns)| ns.saturating_sub(before.get(tid).copied().unwrap_or(0)))
        .sum()
}

/// Wait for `child` at most `timeout`; on timeout kill it and panic, so a
/// sysprof that ignores a signal fails the test instead of hanging CI.
pub fn wait_with_timeout(
    mut child: std::process::Child,
    timeout: std::time::Duration,
    what: &str,
) -> Output {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match child.try_wait().unwrap() {
            Some(_) => return child.wait_with_output().unwrap(),
            None if std::time::Instant::now() >= deadline => {
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                panic!(
                    "{what}: still running after {timeout:?}; killed. stderr: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            None => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
}

/// A section of a 64-bit little-endian ELF file, as its header says.
#[derive(Debug, Clone, Copy)]
pub struct ElfSection {
    /// Where its header is in the file.
    pub header_at: usize,
    /// sh_type.
    pub kind: u32,
    /// sh_flags.
    pub flags: u64,
    /// sh_offset.
    pub offset: u64,
    /// sh_size.
    pub size: u64,
}

/// The sections of an ELF file, by name: for tests that damage binaries.
pub fn elf_sections(elf: &[u8]) -> Vec<(String, ElfSection)> {
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap()) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap());
    let (shoff, shentsize, shnum, shstrndx) = (
        u64_at(0x28) as usize,
        u16_at(0x3a),
        u16_at(0x3c),
        u16_at(0x3e),
    );
    let header = |i: usize| shoff + i * shentsize;
    let strtab = u64_at(header(shstrndx) + 0x18) as usize;
    (0..shnum)
        .map(|i| {
            let h = header(i);
            let name_at = strtab + u32_at(h) as usize;
            let end = elf[name_at..].iter().position(|&b| b == 0).unwrap();
            let name = String::from_utf8_lossy(&elf[name_at..name_at + end]).into_owned();
            (
                name,
                ElfSection {
                    header_at: h,
                    kind: u32_at(h + 4),
                    flags: u64_at(h + 8),
                    offset: u64_at(h + 0x18),
                    size: u64_at(h + 0x20),
                },
            )
        })
        .collect()
}

/// Find section `name` of `elf`.
pub fn elf_section(elf: &[u8], name: &str) -> ElfSection {
    elf_sections(elf)
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no section {name}"))
        .1
}

/// Rewrite a section header's flags, offset and size.
pub fn set_elf_section(elf: &mut [u8], s: &ElfSection, flags: u64, offset: u64, size: u64) {
    elf[s.header_at + 8..s.header_at + 16].copy_from_slice(&flags.to_le_bytes());
    elf[s.header_at + 0x18..s.header_at + 0x20].copy_from_slice(&offset.to_le_bytes());
    elf[s.header_at + 0x20..s.header_at + 0x28].copy_from_slice(&size.to_le_bytes());
}

/// SHF_COMPRESSED.
pub const SHF_COMPRESSED: u64 = 0x800;

/// An ELF compression header (Elf64_Chdr) for zlib data of `size` bytes decompressed.
pub fn zlib_chdr(size: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(24);
    h.extend(1u32.to_le_bytes()); // ELFCOMPRESS_ZLIB
    h.extend(0u32.to_le_bytes());
    h.extend(size.to_le_bytes());
    h.extend(1u64.to_le_bytes());
    h
}

/// Run `sh -c script` as the unprivileged user nobody (a hostile local
/// user for the tests), with `setpriv`; panics if it fails.
pub fn as_nobody(script: &str) {
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
            script,
        ])
        .output()
        .expect("setpriv (util-linux) runs commands as another user");
    assert!(
        out.status.success(),
        "as nobody: {script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The largest resident set of any child this process has waited for, MiB.
pub fn children_peak_rss_mib() -> f64 {
    let mut ru: [i64; 18] = [0; 18];
    extern "C" {
        fn getrusage(who: i32, usage: *mut i64) -> i32;
    }
    // SAFETY: struct rusage is 18 longs on 64-bit Linux; RUSAGE_CHILDREN = -1.
    unsafe { getrusage(-1, ru.as_mut_ptr()) };
    // ru_maxrss (KiB) follows the two timevals (4 longs).
    ru[4] as f64 / 1024.0
}

/// A running `sysprof agent`, its stderr collected as it arrives. Killed
/// (SIGKILL) when dropped if still running.
pub struct Agent {
    child: Option<std::process::Child>,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
    /// The store directory.
    pub store: PathBuf,
}

impl Agent {
    /// Start `sysprof agent --store STORE ARGS` with `env`, and wait until it
    /// says it records (panics with its stderr if it exits first or takes
    /// more than 30 s).
    ///
    /// Compaction is off unless `env` sets `SYSPROF_STORE_BUCKET_SECONDS`:
    /// a run that crosses a 10-minute boundary of the wall clock would see
    /// its windows merged (CI saw 25 one-second windows stored as 4 files
    /// when a test spanned hh:50:00), which is the compaction test's
    /// business, not every other test's. The bucket here (10^12 s) has no
    /// boundary after 1970.
    pub fn start(store: &Path, args: &[&str], env: &[(&str, &str)]) -> Agent {
        Agent::start_in(store, args, env, None)
    }

    /// [`Agent::start`], the agent in the cgroup whose `cgroup.procs` is
    /// `procs` from before it runs (so the kernel memory of the BPF maps it
    /// makes is charged there, as under a systemd unit).
    pub fn start_in(
        store: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        procs: Option<&Path>,
    ) -> Agent {
        use std::io::Read;
        let mut command = Command::new(sysprof_bin());
        if let Some(procs) = procs {
            join_cgroup_at_exec(&mut command, procs);
        }
        if !env
            .iter()
            .any(|(k, _)| *k == "SYSPROF_STORE_BUCKET_SECONDS")
        {
            command.env("SYSPROF_STORE_BUCKET_SECONDS", "1e12");
        }
        let mut child = command
            .arg("agent")
            .arg("--store")
            .arg(store)
            .args(args)
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("running sysprof agent");
        let mut pipe = child.stderr.take().unwrap();
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = stderr.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let mut agent = Agent {
            child: Some(child),
            stderr,
            reader: Some(reader),
            store: store.to_path_buf(),
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        // The whole line: stderr is unbuffered and a formatted line can
        // arrive in pieces (CI once read "recording every process at ").
        let started = |s: &str| {
            s.split_once("recording every process")
                .is_some_and(|(_, rest)| rest.contains('\n'))
        };
        while !started(&agent.stderr()) {
            if let Some(status) = agent.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "sysprof agent exited ({status}) before it recorded: {}",
                    agent.stderr()
                );
            }
            assert!(
                std::time::Instant::now() < deadline,
                "sysprof agent did not start in 30 s: {}",
                agent.stderr()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        agent
    }

    /// Its stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Wait until the store holds a window that ends at or after `wall_ms`
    /// (ms since the epoch), at most `timeout`.
    pub fn wait_for_window_ending_after(&self, wall_ms: f64, timeout: std::time::Duration) {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if store_segments(&self.store).iter().any(|s| s.2 >= wall_ms) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no window ending after {wall_ms} within {timeout:?}: {}",
                self.stderr()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Send `signal` and wait for the exit (at most 30 s); returns the status and stderr.
    pub fn stop_with(mut self, signal: i32) -> (std::process::ExitStatus, String) {
        let mut child = self.child.take().unwrap();
        // SAFETY: sending a signal to our own child.
        unsafe { libc_kill(child.id() as i32, signal) };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "sysprof agent did not exit within 30 s of signal {signal}: {}",
                    self.stderr()
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        (status, self.stderr())
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// The segment files of a store: (path, start ms, end ms, level) from their
/// names, oldest first.
pub fn store_segments(store: &Path) -> Vec<(PathBuf, f64, f64, u32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(store).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !name.ends_with(".seg") {
            continue;
        }
        let stem = name.trim_end_matches(".seg");
        let (range, level) = stem.split_once(".L").unwrap_or((stem, "0"));
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        if let (Ok(a), Ok(b), Ok(l)) = (a.parse::<f64>(), b.parse::<f64>(), level.parse::<u32>()) {
            out.push((e.path(), a, b, l));
        }
    }
    out.sort_by(|x, y| x.1.total_cmp(&y.1));
    out
}

/// Wall clock now, ms since the epoch.
pub fn wall_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1e3
}

/// Run `sysprof show ARGS`; returns the process output.
pub fn show(args: &[&str]) -> Output {
    Command::new(sysprof_bin())
        .arg("show")
        .args(args)
        .output()
        .expect("running sysprof show")
}

/// Run `cmd` quietly; true when it succeeded.
fn quiet(cmd: &mut Command) -> bool {
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `go` (for `go tool pprof`, Google's pprof reader), installed from Debian's
/// `golang-go` when missing. None (said loudly; a failure under CI) when it
/// cannot be had.
pub fn go_tool(test: &str) -> Option<PathBuf> {
    let found = || {
        Command::new("go")
            .arg("version")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|_| PathBuf::from("go"))
    };
    if let Some(g) = found() {
        return Some(g);
    }
    let _ = quiet(Command::new("apt-get").args(["install", "-y", "golang-go"]))
        || (quiet(Command::new("apt-get").arg("update"))
            && quiet(Command::new("apt-get").args(["install", "-y", "golang-go"])));
    if let Some(g) = found() {
        return Some(g);
    }
    skip(test, "go (Debian's golang-go, for `go tool pprof`) is missing and could not be installed: `apt-get install golang-go`");
    None
}

/// A Python with the official OpenTelemetry protocol classes and grpcio (a
/// venv under target/, made on first use from PyPI). None (said loudly; a
/// failure under CI) when it cannot be had.
pub fn otel_python(test: &str) -> Option<PathBuf> {
    let venv = workspace_root().join("target/test-venv");
    let python = venv.join("bin/python");
    let ready = || {
        quiet(Command::new(&python).args(["-c", "import grpc, opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2_grpc"]))
    };
    if python.exists() && ready() {
        return Some(python);
    }
    let _ = quiet(Command::new("python3").args(["-m", "venv"]).arg(&venv))
        || (quiet(Command::new("apt-get").args(["install", "-y", "python3-venv"]))
            && quiet(Command::new("python3").args(["-m", "venv"]).arg(&venv)));
    let _ = quiet(Command::new(venv.join("bin/pip")).args([
        "install",
        "-q",
        "opentelemetry-proto>=1.39",
        "grpcio",
    ]));
    if ready() {
        return Some(python);
    }
    skip(test, "a Python venv with opentelemetry-proto and grpcio could not be made (python3-venv and PyPI are needed)");
    None
}

/// py-spy (PyPI), in the test venv: an outside sampler of Python programs.
/// None (said loudly; a failure under CI) when it cannot be had.
pub fn py_spy(test: &str) -> Option<PathBuf> {
    let venv = workspace_root().join("target/test-venv");
    let spy = venv.join("bin/py-spy");
    if !spy.exists() {
        let _ = quiet(Command::new("python3").args(["-m", "venv"]).arg(&venv))
            || (quiet(Command::new("apt-get").args(["install", "-y", "python3-venv"]))
                && quiet(Command::new("python3").args(["-m", "venv"]).arg(&venv)));
        let _ = quiet(Command::new(venv.join("bin/pip")).args(["install", "-q", "py-spy"]));
    }
    if spy.exists() {
        return Some(spy);
    }
    skip(
        test,
        "py-spy could not be installed from PyPI into target/test-venv",
    );
    None
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A test receiver (a script of tests/receivers/) running until dropped.
pub struct Receiver {
    child: std::process::Child,
}

impl Receiver {
    /// Start `python SCRIPT ARGS` and wait for it to print "ready".
    pub fn start(python: &Path, script: &str, args: &[&str]) -> Receiver {
        use std::io::BufRead;
        let mut child = Command::new(python)
            .arg(workspace_root().join("tests/receivers").join(script))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("starting a test receiver");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "{script} did not start");
        Receiver { child }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A workload running in the background until dropped (then killed).
pub struct Background {
    child: std::process::Child,
}

impl Background {
    /// Start `exe ARGS` with its output discarded.
    pub fn start(exe: &Path, args: &[&str]) -> Background {
        let child = Command::new(exe)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", exe.display()));
        Background { child }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Resident memory of a process, KiB.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// The anonymous part of a process's resident memory (heap, anonymous
/// maps), in KiB: what holding data costs, without the file-backed pages
/// (program text, mapped debug files, BPF ring buffers) whose residency
/// follows what runs and what the kernel keeps in its page cache.
pub fn anon_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "RssAnon:")
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Send `signal` (e.g. 2, SIGINT: Ctrl-C) to a child process.
pub fn send_signal(child: &std::process::Child, signal: i32) {
    // SAFETY: signalling our own child, by pid.
    unsafe { libc_kill(child.id() as i32, signal) };
}

/// The peak resident set (`VmHWM`, KiB) in /proc/PID/status; None once the
/// process is gone (a zombie has none).
pub fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Wait for `child` (its output piped) at most `timeout`, reading its peak
/// resident set (VmHWM) from `/proc` every 20 ms: (its output, the last
/// peak read, MiB). The kernel's figure, not the program's own.
pub fn wait_with_peak_rss(
    mut child: std::process::Child,
    timeout: std::time::Duration,
    what: &str,
) -> (Output, f64) {
    use std::io::Read;
    let peak_kib = vm_hwm_kib;
    // The pipes are read as the child writes, so a full pipe cannot stall it.
    let pipe_reader = |p: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = p {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = pipe_reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = pipe_reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = std::time::Instant::now() + timeout;
    let mut peak = 0u64;
    let status = loop {
        // Read before asking whether it ended: a zombie has no VmHWM left.
        if let Some(kib) = peak_kib(child.id()) {
            peak = peak.max(kib);
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what}: still running after {timeout:?}; killed. stderr: {}",
                String::from_utf8_lossy(&stderr.join().unwrap_or_default())
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let out = Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    };
    (out, peak as f64 / 1024.0)
}

/// A PostgreSQL cluster for a test (Debian's packages: `pg_lsclusters`,
/// `pg_ctlcluster`), started if it was down and stopped again when dropped,
/// with a scratch database pgbench initialised.
pub struct Postgres {
    version: String,
    cluster: String,
    started_here: bool,
}

/// The scratch database's name.
const PG_DATABASE: &str = "sysprof_bench";

impl Postgres {
    /// The first cluster, running, with the database ready; None (said as a
    /// skip, which fails in CI) without PostgreSQL.
    pub fn start(test: &str) -> Option<Postgres> {
        let listed = Command::new("pg_lsclusters").arg("--no-header").output();
        let Some(line) = listed.ok().and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_string)
        }) else {
            skip(test, "PostgreSQL is not installed (Debian: apt-get install postgresql; `cargo xtask test` installs it)");
            return None;
        };
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (version, cluster, status) = (fields[0].to_string(), fields[1].to_string(), fields[3]);
        let started_here = status != "online";
        if started_here {
            let ok = Command::new("pg_ctlcluster")
                .args([&version, &cluster, "start"])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "pg_ctlcluster {version} {cluster} start failed");
        }
        let pg = Postgres {
            version,
            cluster,
            started_here,
        };
        let exists = pg.as_postgres(
            "psql",
            &[
                "-tAc",
                &format!("select 1 from pg_database where datname = '{PG_DATABASE}'"),
            ],
        );
        if String::from_utf8_lossy(&exists.stdout).trim() != "1" {
            let made = pg.as_postgres("createdb", &[PG_DATABASE]);
            assert!(
                made.status.success(),
                "createdb: {}",
                String::from_utf8_lossy(&made.stderr)
            );
            let init = pg.as_postgres("pgbench", &["-i", "-q", "-s", "5", PG_DATABASE]);
            assert!(
                init.status.success(),
                "pgbench -i: {}",
                String::from_utf8_lossy(&init.stderr)
            );
        }
        Some(pg)
    }

    fn as_postgres(&self, program: &str, args: &[&str]) -> Output {
        Command::new("runuser")
            .args(["-u", "postgres", "--", program])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("runuser {program}: {e}"))
    }

    /// pgbench on the scratch database with `args`, running (its output piped).
    pub fn pgbench(&self, args: &[&str]) -> std::process::Child {
        Command::new("runuser")
            .args(["-u", "postgres", "--", "pgbench"])
            .args(args)
            .arg(PG_DATABASE)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("runuser pgbench")
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if self.started_here {
            let _ = Command::new("pg_ctlcluster")
                .args([&self.version, &self.cluster, "stop"])
                .status();
        }
    }
}

/// Assembly for a library of `rows` unwind rows: functions of 1,000 rows
/// each (ordinary FDEs of ~2 KiB), whose CFA alternates between two
/// offsets at every instruction. The first function is named `name`.
pub fn many_rows_source(dir: &Path, name: &str, rows: usize) -> PathBuf {
    const ROWS_PER_FUNCTION: usize = 1000;
    let src = dir.join(format!("{name}.s"));
    let mut asm = String::from("\t.section .note.GNU-stack,\"\",@progbits\n\t.text\n");
    for f in 0..rows.div_ceil(ROWS_PER_FUNCTION) {
        let fname = if f == 0 {
            name.to_string()
        } else {
            format!("{name}_{f}")
        };
        asm += &format!(
            "\t.globl {fname}\n\t.type {fname},@function\n{fname}:\n\t.cfi_startproc\n\t.rept {}\n\tnop\n\t.cfi_adjust_cfa_offset 8\n\tnop\n\t.cfi_adjust_cfa_offset -8\n\t.endr\n\tret\n\t.cfi_endproc\n\t.size {fname}, .-{fname}\n",
            ROWS_PER_FUNCTION / 2
        );
    }
    std::fs::write(&src, asm).unwrap();
    src
}

/// `pid`'s BPF maps as the kernel accounts them, once per map id (from
/// `/proc/PID/fdinfo` of its map descriptors): (map type, max entries,
/// memlock bytes).
pub fn kernel_maps(pid: u32) -> Vec<(u64, u64, u64)> {
    let mut by_id = std::collections::BTreeMap::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        let is_map = std::fs::read_link(fd.path())
            .is_ok_and(|t| t.to_string_lossy() == "anon_inode:bpf-map");
        if !is_map {
            continue;
        }
        let info = std::fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            fd.file_name().to_string_lossy()
        ))
        .unwrap_or_default();
        let get = |k: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(k))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let (Some(id), Some(kind), Some(entries), Some(bytes)) = (
            get("map_id:"),
            get("map_type:"),
            get("max_entries:"),
            get("memlock:"),
        ) {
            by_id.insert(id, (kind, entries, bytes));
        }
    }
    by_id.into_values().collect()
}
