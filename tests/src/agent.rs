//! The agent run by a test: started on a store, stopped, its segments
//! listed, `sysprof show` run on it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::*;

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
    pub(crate) fn libc_kill(pid: i32, sig: i32) -> i32;
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

/// Run `sysprof show ARGS`; returns the process output.
pub fn show(args: &[&str]) -> Output {
    Command::new(sysprof_bin())
        .arg("show")
        .args(args)
        .output()
        .expect("running sysprof show")
}
