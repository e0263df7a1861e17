//! Exporters: finished windows in the wire formats fleets' stores take.
//!
//! In: [`Recording`]s (windows read back from the local store, so a window
//! that could not be sent stays there and is retried). Out: pprof files
//! ([`pprof`]), OTLP profiles requests, Pyroscope pushes. What every format
//! shares is here: the host's labels and a process's container or unit.

pub mod pprof;

use crate::collector::recording::{ProcessRecord, Recording};

/// What identifies this host in every export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labels {
    /// The host name (`host.name`, Pyroscope's `hostname`).
    pub host_name: String,
}

impl Labels {
    /// This host's.
    pub fn local() -> Labels {
        let name = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default();
        Labels { host_name: if name.is_empty() { "localhost".into() } else { name } }
    }
}

/// Where a process runs: a container or a systemd unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupIdentity {
    /// A container, by its full id when the cgroup path has it (else 12 digits).
    Container(String),
    /// A systemd unit (`nginx.service`).
    Unit(String),
}

/// The container or unit of `p`, from its cgroup.
pub fn cgroup_identity(p: &ProcessRecord) -> Option<CgroupIdentity> {
    let path = p.cgroup.as_deref()?;
    for part in path.split('/').rev() {
        let core = part.trim_end_matches(".scope");
        let id = core.rsplit(['-', ':']).next().unwrap_or(core);
        if id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Some(CgroupIdentity::Container(id.to_string()));
        }
    }
    let label = crate::sideband::proc_snapshot::cgroup_label(path)?;
    Some(match label.strip_prefix("container ") {
        Some(id) => CgroupIdentity::Container(id.to_string()),
        None => CgroupIdentity::Unit(label),
    })
}

/// The service a process belongs to, as OpenTelemetry's `service.name` and
/// Pyroscope's `service_name`: its systemd unit (without `.service`), else
/// its container, else its executable's name.
pub fn service_name(p: &ProcessRecord) -> String {
    match cgroup_identity(p) {
        Some(CgroupIdentity::Unit(u)) => u.trim_end_matches(".service").trim_end_matches(".scope").to_string(),
        Some(CgroupIdentity::Container(id)) => format!("container-{}", &id[..id.len().min(12)]),
        None => p.name.clone(),
    }
}

/// The recording's on-CPU sample count (for logs of what was sent).
pub fn samples(rec: &Recording) -> u64 {
    rec.sample_count()
}
