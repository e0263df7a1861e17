//! A gate between a spawned command's fork and its exec, as perf holds its
//! workload: the child says its pid and waits until the parent opens the
//! gate, so whatever the parent must do for that pid before the program
//! runs (write its kernel entries) is done before its first instruction.
//!
//! In: a command about to be spawned (`pre_exec` takes [`ExecGate::in_child`]).
//! Out: the child's pid, read before its exec ([`ExecGate::child_pid`]), and
//! the exec let go ([`ExecGate::open`], or the gate dropped); whether exec
//! may run a file ([`may_execute`]). The child's
//! side is async-signal-safe (read, write, close, getpid: it runs between
//! fork and exec); every descriptor is close-on-exec, so the program
//! inherits none.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Whether exec may run `path`, as the kernel asks it (`access(X_OK)`): an
/// execute bit for others only is refused to root's exec too, and `execvp`
/// then goes on to the next `PATH` entry.
pub fn may_execute(path: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path that lives across the call.
    unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 }
}

/// Two pipes: the child's pid to the parent, the parent's go to the child.
#[derive(Debug)]
pub struct ExecGate {
    pid_read: OwnedFd,
    /// The child's end of the pid pipe; the spawner drops it once the spawn
    /// returns, so a fork that failed reads as an end, not a wait forever.
    pid_write: Option<OwnedFd>,
    go_read: OwnedFd,
    go_write: Option<OwnedFd>,
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds is two ints for the kernel to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just opened and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl ExecGate {
    /// A closed gate.
    pub fn new() -> io::Result<ExecGate> {
        let (pid_read, pid_write) = pipe()?;
        let (go_read, go_write) = pipe()?;
        Ok(ExecGate {
            pid_read,
            pid_write: Some(pid_write),
            go_read,
            go_write: Some(go_write),
        })
    }

    /// What the child runs between fork and exec: close the parent's ends,
    /// write its pid, wait for the go (or the parent's end closed).
    pub fn in_child(&self) -> impl FnMut() -> io::Result<()> + Send + Sync + 'static {
        let pid_read = self.pid_read.as_raw_fd();
        let pid_write = self.pid_write.as_ref().map_or(-1, |f| f.as_raw_fd());
        let go_read = self.go_read.as_raw_fd();
        let go_write = self.go_write.as_ref().map_or(-1, |f| f.as_raw_fd());
        move || {
            // SAFETY: only async-signal-safe calls on descriptors this
            // (forked) process holds; the buffers are on its stack.
            unsafe {
                libc::close(pid_read);
                libc::close(go_write);
                let pid = libc::getpid().to_ne_bytes();
                // A pipe write of 4 bytes is whole or fails.
                while libc::write(pid_write, pid.as_ptr().cast(), pid.len()) < 0
                    && *libc::__errno_location() == libc::EINTR
                {}
                libc::close(pid_write);
                let mut go = 0u8;
                while libc::read(go_read, (&mut go as *mut u8).cast(), 1) < 0
                    && *libc::__errno_location() == libc::EINTR
                {}
            }
            Ok(())
        }
    }

    /// The child's end of the pid pipe, for the spawner to drop once the
    /// spawn returned.
    fn take_child_end(&mut self) -> Option<OwnedFd> {
        self.pid_write.take()
    }

    /// The child's pid once it wrote it; None if the spawn failed before
    /// (the child's end closed without a word). Blocks until one or the
    /// other: call it while another thread spawns, after
    /// [`ExecGate::take_child_end`].
    pub fn child_pid(&self) -> Option<u32> {
        let mut pid = [0u8; 4];
        let mut got = 0;
        while got < pid.len() {
            // SAFETY: reads into the rest of `pid`, a local buffer.
            let n = unsafe {
                libc::read(
                    self.pid_read.as_raw_fd(),
                    pid[got..].as_mut_ptr().cast(),
                    pid.len() - got,
                )
            };
            match n {
                n if n > 0 => got += n as usize,
                0 => return None,
                _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
                _ => return None,
            }
        }
        Some(i32::from_ne_bytes(pid) as u32)
    }

    /// Spawn `command` with `spawn` on a thread of its own (a spawn returns
    /// only once the exec has) while `before_exec` runs here with the
    /// child's pid (None: it failed before the gate), then open the gate.
    /// The caller gave the command [`ExecGate::in_child`] as `pre_exec`.
    /// Should `before_exec` panic, the gate is dropped (opened) as the
    /// panic leaves, and the wait for the spawner ends. Err: the spawner
    /// panicked.
    pub fn spawn_through<C: Send, T: Send>(
        mut self,
        command: C,
        spawn: impl FnOnce(C) -> T + Send,
        before_exec: impl FnOnce(Option<u32>),
    ) -> std::thread::Result<T> {
        let child_end = self.take_child_end();
        std::thread::scope(|scope| {
            let mut gate = self;
            let spawner = scope.spawn(move || {
                let child = spawn(command);
                drop(child_end);
                child
            });
            before_exec(gate.child_pid());
            gate.open();
            spawner.join()
        })
    }

    /// Let the child exec.
    pub fn open(&mut self) {
        if let Some(go) = self.go_write.take() {
            // SAFETY: one byte from a local; a failed write is an open gate
            // all the same, as the end closes below.
            unsafe { libc::write(go.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    /// `command` spawned through a gate, `before_exec` given the pid.
    fn spawn_gated(
        mut command: std::process::Command,
        before_exec: impl FnOnce(Option<u32>),
    ) -> io::Result<std::process::Child> {
        let gate = ExecGate::new().unwrap();
        // SAFETY: in_child is async-signal-safe.
        unsafe { command.pre_exec(gate.in_child()) };
        gate.spawn_through(command, |mut c| c.spawn(), before_exec)
            .unwrap()
    }

    /// The child stops at the gate with its pid said, and execs once the
    /// gate opens: a file it would create is not there before.
    #[test]
    fn the_child_waits_at_the_gate_and_says_its_pid() {
        let dir = std::env::temp_dir().join(format!("exec-gate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mark = dir.join("ran");
        let mut command = std::process::Command::new("/bin/sh");
        command.arg("-c").arg(format!("touch {}", mark.display()));
        let mut said = None;
        let mut child = spawn_gated(command, |pid| {
            said = pid;
            std::thread::sleep(std::time::Duration::from_millis(100));
            assert!(!mark.exists(), "the command ran before the gate opened");
        })
        .unwrap();
        assert_eq!(Some(child.id()), said, "the child says its pid");
        assert!(child.wait().unwrap().success());
        assert!(mark.exists(), "the command ran once the gate opened");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A program that cannot be exec'd: the child said its pid and waited;
    /// opened, its exec fails and the spawn says so.
    #[test]
    fn an_exec_that_fails_is_the_spawns_error() {
        let command = std::process::Command::new("/nonexistent/sysprof-no-such-command");
        let spawned = spawn_gated(command, |pid| {
            assert!(pid.is_some(), "the child got to the gate");
        });
        assert!(spawned.is_err());
    }

    /// A child that fails before the gate (its working directory cannot be
    /// entered: std does that before the `pre_exec` closures): no pid, and
    /// no wait forever.
    #[test]
    fn a_spawn_that_fails_before_the_gate_reads_as_no_pid() {
        let mut command = std::process::Command::new("/bin/true");
        command.current_dir("/nonexistent/sysprof-no-such-directory");
        let spawned = spawn_gated(command, |pid| assert_eq!(pid, None));
        assert!(spawned.is_err());
    }
}
