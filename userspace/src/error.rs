//! The errors `sysprof record` can end with, each one line that says what to do.
//!
//! In: failures from loading BPF, opening perf events, reading `/proc`,
//! writing the output. Out: a [`RecordError`] whose `Display` is the message
//! shown to the user and whose [`RecordError::exit_code`] is the process's
//! exit status (2 for a problem with what the user asked, 1 otherwise).

use std::path::PathBuf;

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
    /// The options make no sense together.
    #[error("{0}")]
    Usage(String),
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
            | RecordError::Spawn { .. } => 2,
            _ => 1,
        }
    }

    /// Classify an aya object-load failure.
    pub fn from_bpf_load(object: &str, e: &aya::EbpfError) -> RecordError {
        if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
            return RecordError::NoBtf;
        }
        let text = error_chain(e);
        if is_permission(&text) {
            return RecordError::NotPermitted { what: "loading BPF".into(), paranoid: paranoid() };
        }
        RecordError::BpfRejected { program: object.into(), detail: first_line(&text), kernel: kernel_release() }
    }

    /// Classify an aya program-load failure (usually the verifier).
    pub fn from_program_load(program: &str, e: &aya::programs::ProgramError) -> RecordError {
        if let aya::programs::ProgramError::LoadError { io_error, verifier_log } = e {
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
                        !l.is_empty() && !["processed ", "verification time", "stack depth"].iter().any(|p| l.starts_with(p))
                    })
                    .unwrap_or("");
                return RecordError::BpfRejected {
                    program: program.into(),
                    detail: format!("{io_error}: {}", why.trim()),
                    kernel: kernel_release(),
                };
            }
        }
        let text = error_chain(e);
        if is_permission(&text) {
            return RecordError::NotPermitted { what: format!("loading BPF program {program}"), paranoid: paranoid() };
        }
        RecordError::BpfRejected { program: program.into(), detail: first_line(&text), kernel: kernel_release() }
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

/// Whether an error text says permission was denied.
pub fn is_permission(text: &str) -> bool {
    text.contains("Operation not permitted") || text.contains("Permission denied") || text.contains("EPERM")
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").chars().take(300).collect()
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
