//! Names for a JVM's compiled code without a flag on it: sysprof asks the
//! running JVM to write its perf map (`/tmp/perf-PID.map`), as `jcmd PID
//! Compiler.perfmap` does, through HotSpot's attach mechanism.
//!
//! In: the pid of a process that maps `libjvm.so`. Out: the JVM wrote its
//! map (read by [`crate::binaries::perfmap`] like any other), or why not, in
//! one line. The protocol (HotSpot's `attachListener_linux.cpp`): a file
//! `.attach_pid<PID>` in the JVM's /tmp and a SIGQUIT make it open the
//! socket `/tmp/.java_pid<PID>`; a request is `1\0jcmd\0<command>\0\0\0`, the
//! answer a status line then the command's output. Everything is done
//! through `/proc/PID/root`, so a JVM in a container is asked in its own
//! /tmp under its own pid.
//!
//! A SIGQUIT to a JVM that does not handle it (one still starting; with
//! `-Xrs`, until HotSpot installs its handler late) would end it, so the
//! signal is sent only while the JVM's SIGQUIT handler is installed
//! (`SigCgt` in its status: [`AttachError::NotYet`] otherwise), through a
//! pidfd opened before /proc was looked at (the pid cannot be another's by
//! then). A JVM that forbids attaching (`-XX:+DisableAttachMechanism`) is
//! not asked (SIGQUIT would print a thread dump on its output): its own
//! flag is read from its flag table, so the flag counts wherever the JVM
//! took it from (`JAVA_TOOL_OPTIONS`, an `@argfile`, `-XX:VMOptionsFile`);
//! where that table cannot be read, its command line and option variables
//! are, and a JVM that takes options from a file is not asked.
//!
//! Everything done in the JVM's /tmp, which its user chooses (a bind mount
//! of `/etc` in a namespace of its own, links), is done by a thread of ours
//! whose filesystem credentials are the JVM's user's ([`as_user`]: its
//! fsuid, fsgid and no supplementary groups, so the kernel checks every
//! directory on the way as it would for that user): the look for its
//! socket, the trigger file made and removed, the connection. Such a user
//! gets `EACCES`, not a file root made in `/etc` (which an O_NOFOLLOW on
//! the last component did not prevent), nor root's connection to another
//! socket its link points at. O_EXCL and O_NOFOLLOW still keep a planted
//! link or file from being followed or reused.

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::time::{Duration, Instant};

use crate::runtimes::hotspot::binary::HotSpotSymbols;
use crate::runtimes::hotspot::read::LayoutError;

/// How long the JVM has to start its attach listener, and to answer.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(5);
/// The most of an answer read (the perf map goes to its file, not here).
const MAX_ANSWER: u64 = 64 << 10;

/// What /proc says of a JVM: its user, its pid in its own namespace,
/// whether it handles SIGQUIT now.
struct JvmStatus {
    pid: u32,
    uid: u32,
    gid: u32,
    ns_pid: u32,
    handles_sigquit: bool,
}

fn status(pid: u32) -> Result<JvmStatus, String> {
    let text = crate::sys::kernel_text::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("pid {pid}: {e}"))?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::split_whitespace)
    };
    // Effective ids: the attach listener checks its peer and its trigger file against them.
    let uid = field("Uid:")
        .and_then(|mut f| f.nth(1))
        .and_then(|v| v.parse().ok())
        .ok_or("no Uid line")?;
    let gid = field("Gid:")
        .and_then(|mut f| f.nth(1))
        .and_then(|v| v.parse().ok())
        .ok_or("no Gid line")?;
    let ns_pid = field("NSpid:")
        .and_then(|f| f.last())
        .and_then(|v| v.parse().ok())
        .unwrap_or(pid);
    let caught = field("SigCgt:")
        .and_then(|mut f| f.next())
        .and_then(|v| u64::from_str_radix(v, 16).ok())
        .unwrap_or(0);
    Ok(JvmStatus {
        pid,
        uid,
        gid,
        ns_pid,
        handles_sigquit: caught & (1 << (libc::SIGQUIT - 1)) != 0,
    })
}

/// Why a JVM did not write its map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttachError {
    /// Not asked now, nothing sent: its SIGQUIT handler is not installed
    /// (still starting, or `-Xrs`); worth asking again later.
    NotYet(String),
    /// Asking it failed, or it must not be asked: not to be asked again.
    Failed(String),
}

impl std::fmt::Display for AttachError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttachError::NotYet(s) | AttachError::Failed(s) => f.write_str(s),
        }
    }
}

/// Ask JVM `pid` to write its perf map now. `hotspot` (its libjvm's
/// structure-table symbols and where its address 0 lies), when known,
/// reads whether it forbids attaching from its own flag.
pub fn write_perf_map(
    pid: u32,
    hotspot: Option<(&HotSpotSymbols, u64)>,
) -> Result<(), AttachError> {
    ask(pid, hotspot, PERF_MAP).map(drop).map_err(|e| match e {
        Ok(not_yet) => AttachError::NotYet(not_yet),
        Err(failed) => AttachError::Failed(failed),
    })
}

/// The threads of JVM `pid` by their full names, as it says them
/// (`jcmd PID Thread.print`): the kernel keeps 15 bytes of a thread's name
/// ("C2 CompilerThre", "Reference Handl"). Keyed by tid as sysprof sees
/// it (a JVM in a container says its own namespace's). Asked as
/// [`write_perf_map`] asks, with the same checks.
pub fn thread_names(
    pid: u32,
    hotspot: Option<(&HotSpotSymbols, u64)>,
) -> Result<Vec<(u32, String)>, AttachError> {
    let answer = ask(pid, hotspot, THREAD_PRINT).map_err(|e| match e {
        Ok(not_yet) => AttachError::NotYet(not_yet),
        Err(failed) => AttachError::Failed(failed),
    })?;
    let named = parse_thread_names(&answer);
    let ns_pid = status(pid).map(|s| s.ns_pid).unwrap_or(pid);
    if ns_pid == pid {
        return Ok(named);
    }
    // Its namespace's tids, to ours (NSpid: ours first, its own last).
    let mut ours = rustc_hash::FxHashMap::default();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let Ok(text) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        let ids: Vec<u32> = text
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .map(|l| {
                l.split_whitespace()
                    .filter_map(|v| v.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        if let (Some(&host), Some(&inner)) = (ids.first(), ids.last()) {
            ours.insert(inner, host);
        }
    }
    Ok(named
        .into_iter()
        .filter_map(|(tid, name)| Some((*ours.get(&tid)?, name)))
        .collect())
}

/// The longest thread name kept (a JVM's user names its threads).
const MAX_THREAD_NAME: usize = 128;

/// Each thread's (native tid, name) from a `Thread.print` answer: its
/// header lines, `"NAME" #N daemon prio=5 os_prio=0 ... nid=0x1a2b ...`
/// (JDK 17 writes the tid in hex, 19 on in decimal) and the VM's own
/// threads' `"NAME" os_prio=0 ... nid=...`. The name is what lies between
/// the first quote and the last quote before ` os_prio=`.
fn parse_thread_names(answer: &[u8]) -> Vec<(u32, String)> {
    let text = String::from_utf8_lossy(answer);
    let mut out = Vec::new();
    for line in text.lines().filter(|l| l.starts_with('"')) {
        let Some(prio) = line.rfind(" os_prio=") else {
            continue;
        };
        let Some(end) = line[..prio].rfind('"').filter(|&e| e > 0) else {
            continue;
        };
        let Some(nid) = line[prio..]
            .split_whitespace()
            .find_map(|f| f.strip_prefix("nid="))
        else {
            continue;
        };
        let tid = match nid.strip_prefix("0x") {
            Some(hex) => u32::from_str_radix(hex, 16).ok(),
            None => nid.parse().ok(),
        };
        let name: String = line[1..end]
            .chars()
            .filter(|c| !c.is_control())
            .take(MAX_THREAD_NAME)
            .collect();
        if let Some(tid) = tid.filter(|&t| t > 0) {
            out.push((tid, name));
        }
    }
    out
}

/// The variables that add to a JVM's options: the JVM's own two, and the
/// `java` launcher's.
const OPTION_VARIABLES: [&[u8]; 3] = [
    b"JAVA_TOOL_OPTIONS=",
    b"_JAVA_OPTIONS=",
    b"JDK_JAVA_OPTIONS=",
];
const DISABLE_ATTACH: &[u8] = b"-XX:+DisableAttachMechanism";

/// Whether `haystack` holds `needle`.
fn holds(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Why JVM `pid` must not be asked, if it forbids attaching: from its own
/// flag where it can be read; else from its command line and environment,
/// and a JVM that may take options from a file (an `@argfile`,
/// `-XX:Flags=`, `-XX:VMOptionsFile=`) is then not asked either: those
/// files are its user's, not read here.
fn attach_forbidden(
    pid: u32,
    hotspot: Option<(&HotSpotSymbols, u64)>,
) -> Result<Option<String>, String> {
    if let Some((symbols, base)) = hotspot {
        match crate::runtimes::hotspot::read::bool_flag(
            pid,
            base,
            symbols,
            "DisableAttachMechanism",
        ) {
            Ok(true) => return Ok(Some("it runs with -XX:+DisableAttachMechanism".into())),
            Ok(false) => return Ok(None),
            // Its flags are set before it fills its tables: asked again later.
            Err(LayoutError::NotYet) => return Err("its flags are not readable yet".into()),
            Err(_) => {}
        }
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let args = cmdline.split(|&b| b == 0);
    let mut options = environ
        .split(|&b| b == 0)
        .filter(|v| OPTION_VARIABLES.iter().any(|o| v.starts_with(o)));
    if args.clone().any(|a| a == DISABLE_ATTACH) || options.any(|v| holds(v, DISABLE_ATTACH)) {
        return Ok(Some("started with -XX:+DisableAttachMechanism".into()));
    }
    let from_file = args.skip(1).any(|a| {
        a.starts_with(b"@") || a.starts_with(b"-XX:Flags=") || a.starts_with(b"-XX:VMOptionsFile=")
    });
    if from_file {
        return Ok(Some(
            "its flags could not be read and it takes options from a file (which may forbid attaching)".into(),
        ));
    }
    Ok(None)
}

/// A request: the command, and the most of its answer read.
struct Command {
    request: &'static [u8],
    max_answer: u64,
}

const PERF_MAP: Command = Command {
    request: b"1\0jcmd\0Compiler.perfmap\0\0\0",
    max_answer: MAX_ANSWER,
};

/// Every thread's header and stack: the headers are what is read of it,
/// and a JVM of thousands of threads writes megabytes (read to 4 MiB).
const THREAD_PRINT: Command = Command {
    request: b"1\0jcmd\0Thread.print\0\0\0",
    max_answer: 4 << 20,
};

/// The request; its answer's output (after the status line).
/// Err(Ok(_)) when nothing was sent and it may be tried again.
fn ask(
    pid: u32,
    hotspot: Option<(&HotSpotSymbols, u64)>,
    command: Command,
) -> Result<Vec<u8>, Result<String, String>> {
    // Held from before the look at /proc to the signal: the pid cannot
    // become another process's meanwhile.
    let process = Pidfd::open(pid).map_err(|e| Err(format!("pid {pid}: {e}")))?;
    let st = status(pid).map_err(Err)?;
    match attach_forbidden(pid, hotspot) {
        Ok(Some(why)) => return Err(Err(why)),
        Ok(None) => {}
        Err(not_yet) => return Err(Ok(not_yet)),
    }
    let (uid, gid) = (st.uid, st.gid);
    as_user(uid, gid, move || Ok(send(&process, &st, &command)))
        .map_err(|e| Err(format!("cannot act as its user, uid {uid}: {e}")))?
}

/// A process held by a pidfd: signalled as that process, whatever its pid
/// is given to later.
struct Pidfd(std::os::fd::OwnedFd);

impl Pidfd {
    fn open(pid: u32) -> std::io::Result<Pidfd> {
        use std::os::fd::FromRawFd;
        // SAFETY: pidfd_open(2) takes a pid and flags and returns a new fd.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a new fd of our own.
        Ok(Pidfd(unsafe {
            std::os::fd::OwnedFd::from_raw_fd(fd as i32)
        }))
    }

    fn signal(&self, signal: i32) -> bool {
        use std::os::fd::AsRawFd;
        // SAFETY: pidfd_send_signal(2) with our fd, a signal and no info.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            ) == 0
        }
    }
}

/// Everything said to the JVM, on a thread acting as its user ([`as_user`]):
/// its /tmp is looked at, the trigger made and removed, the socket
/// connected to as that user could. A path its user laid (a bind mount, a
/// link to another socket) leads only where that user may go.
/// Err(Ok(_)) when nothing was sent and it may be tried again.
fn send(
    process: &Pidfd,
    st: &JvmStatus,
    command: &Command,
) -> Result<Vec<u8>, Result<String, String>> {
    let tmp = format!("/proc/{}/root/tmp", st.pid);
    let socket = format!("{tmp}/.java_pid{}", st.ns_pid);
    if !is_listener(&socket, st.uid) && !st.handles_sigquit {
        return Err(Ok(
            "it does not handle SIGQUIT (-Xrs, or still starting): not asked".into(),
        ));
    }
    talk(process, st, &tmp, &socket, command).map_err(Err)
}

fn talk(
    process: &Pidfd,
    st: &JvmStatus,
    tmp: &str,
    socket: &str,
    command: &Command,
) -> Result<Vec<u8>, String> {
    if !is_listener(socket, st.uid) {
        let trigger = format!("{tmp}/.attach_pid{}", st.ns_pid);
        create_trigger(&trigger)
            .map_err(|e| format!("cannot create its attach trigger as uid {}: {e}", st.uid))?;
        let sent = process.signal(libc::SIGQUIT);
        let start = Instant::now();
        while sent && !is_listener(socket, st.uid) && start.elapsed() < ATTACH_TIMEOUT {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_file(&trigger);
        if !is_listener(socket, st.uid) {
            return Err("its attach listener did not start".into());
        }
    }
    let mut stream = std::os::unix::net::UnixStream::connect(socket)
        .map_err(|e| format!("cannot connect to its attach listener: {e}"))?;
    stream
        .set_read_timeout(Some(ATTACH_TIMEOUT))
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(ATTACH_TIMEOUT))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(command.request)
        .map_err(|e| format!("asking it: {e}"))?;
    let mut answer = Vec::new();
    stream
        .take(command.max_answer)
        .read_to_end(&mut answer)
        .map_err(|e| format!("its answer: {e}"))?;
    let status_end = answer
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(answer.len());
    match &answer[..status_end] {
        b"0" => Ok(answer.split_off((status_end + 1).min(answer.len()))),
        status => Err(format!(
            "it refused (status {})",
            crate::escape::escape(&String::from_utf8_lossy(status))
        )),
    }
}

/// Create the attach trigger `path` (mode 0600, O_EXCL, O_NOFOLLOW), on a
/// thread acting as the JVM's user: where that user may not write, it is
/// not created.
fn create_trigger(path: &str) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map(drop)
}

/// Run `f` on a thread of its own whose filesystem credentials are
/// `uid`:`gid` with no supplementary groups. Linux keeps these per thread
/// (the raw system calls: glibc's `setgroups` would change every thread's),
/// and a nonzero fsuid clears the thread's CAP_DAC_OVERRIDE and the other
/// filesystem capabilities, so the kernel judges every path `f` opens as it
/// would that user's. The thread ends with `f`, and its credentials with it.
fn as_user<T: Send + 'static>(
    uid: u32,
    gid: u32,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    std::thread::Builder::new()
        .name("sysprof-as-user".into())
        .spawn(move || {
            // SAFETY: system calls on this thread's own credentials, with
            // no pointers but a null list of zero groups.
            unsafe {
                if libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::syscall(libc::SYS_setfsgid, gid);
                libc::syscall(libc::SYS_setfsuid, uid);
                // Each returns the previous value: asked again, it is the one set, or the change failed.
                if libc::syscall(libc::SYS_setfsgid, gid) as u32 != gid
                    || libc::syscall(libc::SYS_setfsuid, uid) as u32 != uid
                {
                    return Err(std::io::Error::other(
                        "could not take the user's filesystem credentials",
                    ));
                }
            }
            f()
        })?
        .join()
        .map_err(|_| std::io::Error::other("the thread acting as the user panicked"))?
}

/// Whether `path` is a socket of the JVM's user: its listener (a socket
/// another user put there is not talked to).
fn is_listener(path: &str, uid: u32) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket() && m.uid() == uid)
}

#[cfg(test)]
mod thread_name_tests {
    use super::parse_thread_names;

    /// JDK 17's headers (hex nid), JDK 21's (decimal), the VM's own
    /// threads', a name with quotes and " os_prio=" in it; stack lines and
    /// a header without a nid are not names.
    #[test]
    fn thread_print_headers_give_full_names() {
        let answer = br#"2026-11-29 04:40:00
Full thread dump OpenJDK 64-Bit Server VM (17.0.13+11-Debian-2deb12u1 mixed mode, sharing):

"main" #1 prio=5 os_prio=0 cpu=812.51ms elapsed=1.20s tid=0x00007f3c6c024ec0 nid=0x1d2e runnable  [0x00007f3c73b6a000]
   java.lang.Thread.State: RUNNABLE
	at Spin.main(Spin.java:5)

"C2 CompilerThread0" #5 daemon prio=9 os_prio=0 cpu=100.00ms elapsed=1.19s tid=0x00007f3c6c0f1000 nid=7475 waiting on condition  [0x0000000000000000]
"a "quoted" os_prio=1 name" #17 prio=5 os_prio=0 cpu=0.10ms elapsed=0.50s tid=0x1 nid=0x1d40 waiting
"VM Periodic Task Thread" os_prio=0 cpu=1.10ms elapsed=1.18s tid=0x00007f3c6c13e000 nid=0x1d3a waiting on condition
"no nid" os_prio=0 cpu=1ms
"#;
        assert_eq!(
            parse_thread_names(answer),
            vec![
                (0x1d2e, "main".to_string()),
                (7475, "C2 CompilerThread0".to_string()),
                (0x1d40, "a \"quoted\" os_prio=1 name".to_string()),
                (0x1d3a, "VM Periodic Task Thread".to_string()),
            ]
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check, as root, that the attach trigger is created as the JVM's
    /// user would create it: not in a directory only root may write (the
    /// `/etc` a user bind-mounts on its `/tmp`), and, in one the user may
    /// write, owned by the user; that a link the user lays to root's socket
    /// is not connected through; and that root's credentials are untouched
    /// on the calling thread. Without root it says so and checks nothing.
    #[test]
    fn the_attach_trigger_is_created_only_where_the_jvms_user_may_write() {
        // SAFETY: geteuid has no arguments.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED the_attach_trigger_is_created_only_where_the_jvms_user_may_write: not root");
            return;
        }
        let nobody = 65534;
        let root_only =
            std::env::temp_dir().join(format!("sysprof-attach-root-{}", std::process::id()));
        let users =
            std::env::temp_dir().join(format!("sysprof-attach-user-{}", std::process::id()));
        for d in [&root_only, &users] {
            let _ = std::fs::remove_dir_all(d);
            std::fs::create_dir(d).unwrap();
        }
        std::fs::set_permissions(
            &root_only,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        std::os::unix::fs::chown(&users, Some(nobody), Some(nobody)).unwrap();
        let denied = root_only.join(".attach_pid1");
        let as_nobody = |p: &std::path::Path| {
            let p = p.to_path_buf();
            as_user(nobody, nobody, move || create_trigger(p.to_str().unwrap()))
        };
        let e = as_nobody(&denied).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
        assert!(!denied.exists(), "root made a file where its user may not");
        let made = users.join(".attach_pid1");
        as_nobody(&made).unwrap();
        let m = std::fs::metadata(&made).unwrap();
        assert_eq!(
            (m.uid(), m.gid(), m.mode() & 0o777),
            (nobody, nobody, 0o600)
        );
        assert!(as_nobody(&made).is_err(), "an existing file is not reused");
        // A link the user laid to root's socket leads nowhere as the user.
        let root_socket = root_only.join("root.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&root_socket).unwrap();
        std::fs::set_permissions(
            &root_socket,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        let link = users.join(".java_pid1");
        std::os::unix::fs::symlink(&root_socket, &link).unwrap();
        let through = link.clone();
        let e = as_user(nobody, nobody, move || {
            std::os::unix::net::UnixStream::connect(&through)
        })
        .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
        assert!(
            !is_listener(link.to_str().unwrap(), nobody),
            "a link is no listener"
        );
        std::os::unix::net::UnixStream::connect(&link).expect("root's own connect, the control");
        std::fs::remove_file(&link).unwrap();
        // This thread is still root: it can write where nobody cannot.
        std::fs::write(root_only.join("still-root"), b"").unwrap();
        as_user(nobody, nobody, {
            let made = made.clone();
            move || std::fs::remove_file(&made)
        })
        .unwrap();
        assert!(!made.exists());
        for d in [&root_only, &users] {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
