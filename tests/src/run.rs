//! Running sysprof and workloads: the binary under test, recording as a
//! child process, its stats line, scratch directories, C workloads built
//! with gcc, tests that cannot run said loudly, other users and signals.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use crate::*;

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
    pub(crate) fn libc_geteuid() -> u32;
    #[link_name = "write"]
    pub(crate) fn libc_write(fd: i32, buf: *const u8, len: usize) -> isize;
    #[link_name = "open"]
    pub(crate) fn libc_open(path: *const std::ffi::c_char, flags: i32, ...) -> i32;
    #[link_name = "close"]
    pub(crate) fn libc_close(fd: i32) -> i32;
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

/// Parse `key=value` from a workload's output.
pub fn field(stdout: &[u8], key: &str) -> Option<u64> {
    String::from_utf8_lossy(stdout).lines().find_map(|l| {
        l.strip_prefix(&format!("{key}="))
            .and_then(|v| v.trim().parse().ok())
    })
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

/// Send `signal` (e.g. 2, SIGINT: Ctrl-C) to a child process.
pub fn send_signal(child: &std::process::Child, signal: i32) {
    // SAFETY: signalling our own child, by pid.
    unsafe { libc_kill(child.id() as i32, signal) };
}
