//! The errors the commands can end with, each one line that says what to do.
//!
//! In: failures from loading BPF, opening perf events, reading `/proc`,
//! checking options, opening the store, writing the output. Out: a
//! [`RecordError`] whose `Display` is the message shown to the user and
//! whose [`RecordError::exit_code`] is the process's exit status (2 for a
//! problem with what the user asked, 1 otherwise).
//!
//! This module sits below everything that returns it, so a cause defined
//! higher up (a command's option errors, the store's) travels boxed in
//! [`RecordError::BadOption`] or [`RecordError::Store`], its type intact.

use std::path::PathBuf;

/// A cause defined in a layer above this one, kept as a typed error.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why recording could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Loading BPF or opening perf events was refused for lack of privileges.
    #[error(
        "permission denied for {what}: run as root (sudo sysprof ...) or grant CAP_BPF, CAP_PERFMON \
         and CAP_SYS_RESOURCE (kernel.perf_event_paranoid is {paranoid})"
    )]
    NotPermitted {
        /// What was refused.
        what: String,
        /// Current `/proc/sys/kernel/perf_event_paranoid`.
        paranoid: String,
    },
    /// The kernel has no BTF, so CO-RE programs cannot be loaded.
    #[error(
        "/sys/kernel/btf/vmlinux is missing: this kernel was built without CONFIG_DEBUG_INFO_BTF; \
         use a distribution kernel 5.15 or newer"
    )]
    NoBtf,
    /// The kernel rejected a BPF program or map.
    #[error("the kernel rejected the BPF program {program}: {detail} (kernel {kernel}; 5.15 or newer is needed)")]
    BpfRejected {
        /// Program or object name.
        program: String,
        /// The loader's message (first line of the verifier log).
        detail: String,
        /// `uname -r`.
        kernel: String,
    },
    /// A perf event could not be opened.
    #[error("cannot open {what}: {source} (kernel.perf_event_paranoid is {paranoid}; as root, or set it with `sysctl kernel.perf_event_paranoid=-1`)", paranoid = paranoid())]
    PerfEvent {
        /// Which event.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A pid given with `-p` does not exist.
    #[error("no process with pid {0}: check the pid with `ps -p {0}`")]
    UnknownPid(u32),
    /// The output cannot be written.
    #[error("cannot write {path}: {source}; choose another path with -o")]
    OutputNotWritable {
        /// The output path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The command to profile could not be started.
    #[error("cannot run {command}: {source}; check that it exists and is executable")]
    Spawn {
        /// The command.
        command: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A BPF ring buffer could not be registered with the event loop.
    #[error("cannot poll the {what} ring buffer: {source}")]
    RingPoll {
        /// Which ring.
        what: String,
        /// The OS error (from epoll).
        source: std::io::Error,
    },
    /// A BPF ring buffer could not be mapped for reading.
    #[error("cannot map the {what} ring buffer: {source}")]
    RingMap {
        /// Which ring.
        what: String,
        /// The OS error (from mmap), or why the map is no ring.
        source: std::io::Error,
    },
    /// A flag's or setting's value cannot be used (out of range, malformed,
    /// naming what is not there); the cause says which and what would be right.
    #[error(transparent)]
    BadOption(Cause),
    /// The store cannot be opened or created.
    #[error("{source}; {hint}")]
    Store {
        /// Why (the store's error).
        #[source]
        source: Cause,
        /// Which flag names another.
        hint: &'static str,
    },
    /// An address to serve on is taken or not ours.
    #[error("cannot listen on {addr}: {source}; {hint}")]
    Listen {
        /// The address.
        addr: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
        /// What to do instead.
        hint: &'static str,
    },
    /// A profile given to serve or read is not usable as one.
    #[error("cannot serve {}: {why}; give the path of a profile written by sysprof record (.json or .json.gz)", path.display())]
    Unservable {
        /// The path given.
        path: PathBuf,
        /// Why not.
        why: String,
    },
    /// The store holds no window in the range asked for.
    #[error("{} holds nothing between {since} and {until}; {held}", store.display())]
    NothingInRange {
        /// The store.
        store: PathBuf,
        /// The range's start, as local time.
        since: String,
        /// The range's end, as local time.
        until: String,
        /// What the store does hold.
        held: String,
    },
    /// No process in the range matches the filters.
    #[error("no process in that range matches -p, --comm or --container")]
    NoProcessMatches,
    /// The event loop (tokio's runtime) could not be built.
    #[error("cannot start the event loop: {0}")]
    EventLoop(#[source] std::io::Error),
    /// SIGINT or SIGTERM cannot be watched for.
    #[error("cannot watch for Ctrl-C: {0}")]
    Signals(#[source] std::io::Error),
    /// Writing to stdout failed.
    #[error("cannot write to stdout: {0}")]
    Stdout(#[source] std::io::Error),
    /// The kernel's random generator cannot be read.
    #[error("cannot read /dev/urandom: {0}; check that /dev is mounted")]
    Random(#[source] std::io::Error),
    /// The options make no sense together.
    #[error("{0}")]
    Usage(String),
    /// The BPF object lacks a program or map this build asks for.
    #[error(
        "the BPF object has no {what}: this sysprof binary is damaged; build it again \
         (`cargo xtask build-ebpf`, then `cargo build --release`)"
    )]
    BpfMissing {
        /// `program NAME` or `map NAME`.
        what: String,
    },
    /// A BPF map could not be taken as its type or used.
    #[error("the BPF map {map}: {source}")]
    BpfMap {
        /// The map, or what was done with it.
        map: String,
        /// aya's error, with its syscall and OS error.
        #[source]
        source: aya::maps::MapError,
    },
    /// A BPF program could not be taken as its type, attached or handed on.
    #[error("the BPF program {program}: {source}")]
    BpfProgram {
        /// The program, or what was done with it.
        program: String,
        /// aya's error, with its syscall and OS error.
        #[source]
        source: aya::programs::ProgramError,
    },
    /// The CPUs could not be listed.
    #[error("cannot read {path}: {source}; check that /sys is mounted")]
    Cpus {
        /// The file read.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Anything else; a bug or an unusual system.
    #[error("{0}")]
    Internal(String),
}

impl RecordError {
    /// The process exit status for this error: 2 for problems with the
    /// request (bad pid, bad output path, bad options), 1 for the rest.
    pub fn exit_code(&self) -> i32 {
        match self {
            RecordError::UnknownPid(_)
            | RecordError::OutputNotWritable { .. }
            | RecordError::Usage(_)
            | RecordError::BadOption(_)
            | RecordError::Store { .. }
            | RecordError::Listen { .. }
            | RecordError::Unservable { .. }
            | RecordError::Spawn { .. } => 2,
            _ => 1,
        }
    }

    /// Program `name` is missing from the BPF object.
    pub fn no_program(name: &str) -> RecordError {
        RecordError::BpfMissing {
            what: format!("program {name}"),
        }
    }

    /// Map `name` is missing from the BPF object.
    pub fn no_map(name: &str) -> RecordError {
        RecordError::BpfMissing {
            what: format!("map {name}"),
        }
    }

    /// Ring `what` could not be mapped.
    pub fn ring(what: &str, source: std::io::Error) -> RecordError {
        RecordError::RingMap {
            what: what.into(),
            source,
        }
    }

    /// A failure of BPF map `map` (or of what was done with it), its source kept.
    pub fn map(map: impl Into<String>) -> impl FnOnce(aya::maps::MapError) -> RecordError {
        let map = map.into();
        move |source| RecordError::BpfMap { map, source }
    }

    /// A failure of BPF program `program` (or of what was done with it), its source kept.
    pub fn program(
        program: impl Into<String>,
    ) -> impl FnOnce(aya::programs::ProgramError) -> RecordError {
        let program = program.into();
        move |source| RecordError::BpfProgram { program, source }
    }

    /// Classify an aya object-load failure.
    pub fn from_bpf_load(object: &str, e: &aya::EbpfError) -> RecordError {
        if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
            return RecordError::NoBtf;
        }
        if is_permission_denied(e) {
            return RecordError::NotPermitted {
                what: "loading BPF".into(),
                paranoid: paranoid(),
            };
        }
        RecordError::BpfRejected {
            program: object.into(),
            detail: first_line(&error_chain(e)),
            kernel: kernel_release(),
        }
    }

    /// Classify an aya program-load failure (usually the verifier).
    pub fn from_program_load(program: &str, e: &aya::programs::ProgramError) -> RecordError {
        if let aya::programs::ProgramError::LoadError {
            io_error,
            verifier_log,
        } = e
        {
            let log = verifier_log.to_string();
            if !log.trim().is_empty() {
                // The verifier said why: that is a rejection, not a privilege problem.
                if std::env::var_os("SYSPROF_VERIFIER_LOG").is_some() {
                    eprintln!("{log}");
                }
                let why = log
                    .lines()
                    .rev()
                    .find(|l| {
                        let l = l.trim();
                        !l.is_empty()
                            && !["processed ", "verification time", "stack depth"]
                                .iter()
                                .any(|p| l.starts_with(p))
                    })
                    .unwrap_or("");
                return RecordError::BpfRejected {
                    program: program.into(),
                    detail: format!("{io_error}: {}", why.trim()),
                    kernel: kernel_release(),
                };
            }
        }
        if is_permission_denied(e) {
            return RecordError::NotPermitted {
                what: format!("loading BPF program {program}"),
                paranoid: paranoid(),
            };
        }
        RecordError::BpfRejected {
            program: program.into(),
            detail: first_line(&error_chain(e)),
            kernel: kernel_release(),
        }
    }
}

/// An error and its sources, joined by ": ".
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Whether `e` or one of its sources is an OS error EPERM or EACCES. aya
/// wraps some of its `io::Error`s transparently (their `source()` skips
/// them), so those are looked for in aya's own variants too.
pub fn is_permission_denied(e: &(dyn std::error::Error + 'static)) -> bool {
    use aya::maps::MapError;
    use aya::programs::ProgramError;
    let denied = |io: &std::io::Error| io.kind() == std::io::ErrorKind::PermissionDenied;
    let mut next = Some(e);
    while let Some(e) = next {
        let io = e
            .downcast_ref::<std::io::Error>()
            .or_else(|| match e.downcast_ref::<ProgramError>() {
                Some(ProgramError::IOError(io)) => Some(io),
                Some(ProgramError::SyscallError(s)) => Some(&s.io_error),
                _ => None,
            })
            .or_else(|| match e.downcast_ref::<MapError>() {
                Some(MapError::IoError(io)) => Some(io),
                Some(MapError::SyscallError(s)) => Some(&s.io_error),
                _ => None,
            });
        if io.is_some_and(denied) {
            return true;
        }
        next = e.source();
    }
    false
}

fn first_line(text: &str) -> String {
    text.lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(300)
        .collect()
}

/// `/proc/sys/kernel/perf_event_paranoid`, for error messages.
pub fn paranoid() -> String {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// `uname -r`.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a BPF map's or program's failure keeps aya's error as its
    /// source (its syscall and OS error), so a denied permission under it
    /// is still told by its code, and that its one line names the map.
    #[test]
    fn bpf_failures_keep_their_source() {
        use aya::sys::SyscallError;
        let denied = aya::maps::MapError::SyscallError(SyscallError {
            call: "bpf_map_update_elem",
            io_error: std::io::Error::from_raw_os_error(libc::EPERM),
        });
        let e = RecordError::map("walker")(denied);
        assert!(e.to_string().starts_with("the BPF map walker: "), "{e}");
        let source = std::error::Error::source(&e).expect("a source");
        assert!(source.downcast_ref::<aya::maps::MapError>().is_some());
        assert!(is_permission_denied(&e));
        let e = RecordError::program("walk_stack")(aya::programs::ProgramError::NotLoaded);
        assert!(std::error::Error::source(&e)
            .and_then(|s| s.downcast_ref::<aya::programs::ProgramError>())
            .is_some());
        assert!(!is_permission_denied(&e));
        assert!(RecordError::no_map("drops")
            .to_string()
            .contains("has no map drops"));
    }

    /// Check that EPERM and EACCES are told by their error code wherever
    /// aya wraps them (directly, in a syscall error, behind a transparent
    /// variant, under a map or program error of the object), and that
    /// another error whose text only mentions them is not.
    #[test]
    fn permission_is_told_by_the_error_code() {
        use aya::programs::ProgramError;
        use aya::sys::SyscallError;
        let eperm = || std::io::Error::from_raw_os_error(libc::EPERM);
        let eacces = || std::io::Error::from_raw_os_error(libc::EACCES);
        assert!(is_permission_denied(&eperm()));
        assert!(is_permission_denied(&ProgramError::IOError(eacces())));
        let syscall = ProgramError::SyscallError(SyscallError {
            call: "perf_event_open",
            io_error: eperm(),
        });
        assert!(is_permission_denied(&syscall));
        assert!(is_permission_denied(&aya::EbpfError::ProgramError(syscall)));
        let map = aya::maps::MapError::CreateError {
            name: "m".into(),
            io_error: eperm(),
        };
        assert!(is_permission_denied(&aya::EbpfError::MapError(map)));
        assert!(!is_permission_denied(&std::io::Error::from_raw_os_error(
            libc::EINVAL
        )));
        assert!(!is_permission_denied(&std::io::Error::other(
            "Operation not permitted (EPERM) in a message"
        )));
    }
}
