//! What a thread waited on, told by the kernel functions of the stack it
//! left the CPU with: a lock (futex), a pipe, a socket, poll or epoll, a
//! timer (a sleep), the disk, an fsync, a child process, a page fault.
//!
//! In: the kernel frames' function names of one off-CPU stack, outermost
//! first. Out: a short label, or None where nothing says (a kernel thread's
//! idle loop, a wait no rule covers).
//!
//! The system call says what the program asked for, so it is read first
//! (`__x64_sys_futex` is a lock whatever the kernel did inside). Calls that
//! wait on many kinds of things (read, write, ioctl, openat...) or none at
//! all (a fault in user code) are told by the innermost function that says
//! what was asked for (`anon_pipe_read`, `unix_stream_read_generic`,
//! `do_fsync`), else by the innermost that says how it waited
//! (`folio_wait_bit_common`: the disk). Names are matched as parts, so a
//! kernel's `.isra.0` suffixes and renames (`pipe_read` became
//! `anon_pipe_read`) do not matter.

/// A lock: futex waits (pthread mutexes, condition variables, Java monitors).
pub const LOCK: &str = "lock (futex)";

/// The label for system call `name` (without `__x64_sys_`), when the call
/// alone says what it waits on.
fn by_syscall(name: &str) -> Option<&'static str> {
    Some(match name {
        "futex" | "futex_waitv" => LOCK,
        "fsync" | "fdatasync" | "sync_file_range" | "syncfs" | "sync" | "msync" => "fsync",
        "nanosleep" | "clock_nanosleep" => "timer",
        "poll" | "ppoll" | "select" | "pselect6" => "poll",
        "epoll_wait" | "epoll_pwait" | "epoll_pwait2" => "epoll",
        "recvfrom" | "recvmsg" | "recvmmsg" | "sendto" | "sendmsg" | "sendmmsg" | "accept"
        | "accept4" | "connect" => "socket",
        "wait4" | "waitid" => "child process",
        "io_uring_enter" => "io_uring",
        "io_getevents" | "io_pgetevents" => "aio",
        "pause" | "rt_sigsuspend" | "rt_sigtimedwait" => "signal",
        "flock" => "file lock",
        "msgrcv" | "msgsnd" | "semop" | "semtimedop" | "mq_timedreceive" | "mq_timedsend" => "IPC",
        _ => return None,
    })
}

/// Functions that say what the program asked for (a sync, a lock, a
/// pipe...): the innermost one found names the wait. Matched as parts of
/// names: kernels rename (`pipe_read` is `anon_pipe_read` in 6.18).
const ASKED_FOR: &[(&str, &str)] = &[
    ("futex_", LOCK),
    ("do_fsync", "fsync"),
    ("vfs_fsync", "fsync"),
    ("_sync_file", "fsync"),
    ("file_write_and_wait", "fsync"),
    ("jbd2_log_wait_commit", "fsync"),
    ("pipe_", "pipe"),
    ("unix_stream_", "socket"),
    ("unix_dgram_", "socket"),
    ("sk_wait_", "socket"),
    ("sk_stream_wait", "socket"),
    ("skb_wait_for_more_packets", "socket"),
    ("sock_", "socket"),
    ("tcp_recvmsg", "socket"),
    ("tcp_sendmsg", "socket"),
    ("inet_csk_accept", "socket"),
    ("n_tty_", "terminal"),
    ("tty_read", "terminal"),
    ("do_nanosleep", "timer"),
    ("ep_poll", "epoll"),
    ("do_poll", "poll"),
    ("do_select", "poll"),
    ("do_wait", "child process"),
];

/// Functions that say how a wait no asked-for function names waited: on
/// the disk, on a kernel lock, in a page fault. The innermost one found.
const HOW: &[(&str, &str)] = &[
    ("io_schedule", "disk I/O"),
    ("folio_wait", "disk I/O"),
    ("__folio_lock", "disk I/O"),
    ("wait_on_page", "disk I/O"),
    ("bit_wait_io", "disk I/O"),
    ("blk_mq_get_tag", "disk I/O"),
    ("submit_bio_wait", "disk I/O"),
    ("mutex_lock", "kernel lock"),
    ("rwsem_down_", "kernel lock"),
    ("percpu_rwsem_wait", "kernel lock"),
    ("exc_page_fault", "page fault"),
    ("handle_mm_fault", "page fault"),
];

/// What a wait with these kernel functions (outermost first) waited on.
pub fn classify(outermost_first: &[&str]) -> Option<&'static str> {
    for name in outermost_first {
        let call = [
            "__x64_sys_",
            "__ia32_sys_",
            "__do_sys_",
            "__se_sys_",
            "ksys_",
        ]
        .iter()
        .find_map(|p| name.strip_prefix(p));
        if let Some(call) = call {
            // The call's name ends at a compiler's suffix (`.isra.0`).
            if let Some(kind) = by_syscall(call.split('.').next().unwrap_or(call)) {
                return Some(kind);
            }
            break;
        }
    }
    let innermost = |table: &[(&str, &'static str)]| {
        outermost_first.iter().rev().find_map(|name| {
            table
                .iter()
                .find(|(part, _)| name.contains(part))
                .map(|&(_, kind)| kind)
        })
    };
    innermost(ASKED_FOR).or_else(|| innermost(HOW))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check the system call first, the innermost telling function after,
    /// and nothing where nothing tells.
    #[test]
    fn waits_are_told_by_their_call_then_their_innermost_function() {
        let mutex = [
            "entry_SYSCALL_64_after_hwframe",
            "do_syscall_64",
            "__x64_sys_futex",
            "do_futex",
            "futex_wait",
            "__futex_wait",
            "futex_wait_queue",
            "schedule",
            "__schedule",
        ];
        assert_eq!(classify(&mutex), Some(LOCK));
        // 6.18: no __x64_sys_read frame (inlined), and the pipe's read renamed.
        let pipe = [
            "entry_SYSCALL_64_after_hwframe",
            "do_syscall_64",
            "ksys_read",
            "vfs_read",
            "anon_pipe_read",
            "schedule",
            "__schedule",
        ];
        assert_eq!(classify(&pipe), Some("pipe"));
        let inlined_fsync = [
            "do_syscall_64",
            "do_fsync",
            "ext4_sync_file",
            "jbd2_log_wait_commit",
            "schedule",
        ];
        assert_eq!(classify(&inlined_fsync), Some("fsync"));
        // fdatasync waits on the disk inside; what the program asked for is the sync.
        let fsync = [
            "__x64_sys_fdatasync",
            "file_write_and_wait_range",
            "filemap_fdatawait_range",
            "folio_wait_bit_common",
            "io_schedule",
        ];
        assert_eq!(classify(&fsync), Some("fsync"));
        let direct_read = [
            "__x64_sys_pread64",
            "ext4_file_read_iter",
            "iomap_dio_rw",
            "blk_io_schedule",
            "io_schedule",
        ];
        assert_eq!(classify(&direct_read), Some("disk I/O"));
        let poll = [
            "__x64_sys_ppoll",
            "do_sys_poll",
            "do_poll.constprop.0",
            "schedule_hrtimeout_range_clock",
        ];
        assert_eq!(classify(&poll), Some("poll"));
        let sock = [
            "__x64_sys_read",
            "sock_read_iter",
            "unix_stream_read_generic",
            "schedule_timeout",
        ];
        assert_eq!(classify(&sock), Some("socket"));
        let fault = [
            "asm_exc_page_fault",
            "exc_page_fault",
            "do_user_addr_fault",
            "handle_mm_fault",
            "__folio_lock_or_retry",
            "io_schedule",
        ];
        assert_eq!(classify(&fault), Some("disk I/O"));
        let idle_worker = ["ret_from_fork", "kthread", "worker_thread", "schedule"];
        assert_eq!(classify(&idle_worker), None);
        assert_eq!(classify(&[]), None);
    }
}
