//! Where a process runs, from its cgroup path: a container or a systemd
//! unit. In: the cgroup path read from `/proc/PID/cgroup` (kept in each
//! process record). Out: [`CgroupIdentity`], one parse for the profile's
//! track names, `show --container` and the exporters' labels.

/// A container or a systemd unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupIdentity {
    /// A container, by its full 64-digit id (docker, containerd, CRI-O and
    /// podman all name their cgroups after it).
    Container(String),
    /// A systemd unit (`nginx.service`, `app.scope`, not a login session).
    Unit(String),
}

impl CgroupIdentity {
    /// The container or unit a cgroup path names; None for anything else
    /// (the root, a slice, a login session, an unknown runtime's name).
    pub fn of_path(path: &str) -> Option<CgroupIdentity> {
        for part in path.split('/').rev() {
            let core = part.trim_end_matches(".scope");
            let id = core.rsplit(['-', ':']).next().unwrap_or(core);
            if id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Some(CgroupIdentity::Container(id.to_string()));
            }
        }
        let last = path.rsplit('/').next()?;
        (last.ends_with(".service") || last.ends_with(".scope") && !last.starts_with("session-"))
            .then(|| CgroupIdentity::Unit(last.to_string()))
    }

    /// A container's short id: its first 12 digits, as `docker ps` shows it.
    pub fn short_id(id: &str) -> &str {
        &id[..id.len().min(12)]
    }

    /// Whether a user's `--container` choice names it: the full or short
    /// container id, the label as shown, or the unit's name.
    pub fn matches(&self, asked: &str) -> bool {
        match self {
            CgroupIdentity::Container(id) => {
                id == asked || Self::short_id(id) == asked || self.to_string() == asked
            }
            CgroupIdentity::Unit(u) => u == asked,
        }
    }
}

/// As track names show it: "container 4f3c2b1a09e8" or "ssh.service".
impl std::fmt::Display for CgroupIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CgroupIdentity::Container(id) => write!(f, "container {}", Self::short_id(id)),
            CgroupIdentity::Unit(u) => f.write_str(u),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that container ids are found in the cgroup paths of the common
    /// runtimes, systemd units are named, other paths get nothing, and a
    /// container is matched by its full id, its short id or its label.
    #[test]
    fn names_containers_and_units() {
        let id = "4f3c2b1a09e8d7c6b5a49382716f5e4d3c2b1a09e8d7c6b5a49382716f5e4d3c";
        for path in [
            format!("/system.slice/docker-{id}.scope"),
            format!("/docker/{id}"),
            format!("/kubepods.slice/kubepods-burstable.slice/cri-containerd-{id}.scope"),
            format!("/machine.slice/libpod-{id}.scope/container"),
        ] {
            let c = CgroupIdentity::of_path(&path);
            assert_eq!(c, Some(CgroupIdentity::Container(id.into())), "{path}");
            assert_eq!(c.unwrap().to_string(), "container 4f3c2b1a09e8");
        }
        let c = CgroupIdentity::Container(id.into());
        assert!(c.matches(id) && c.matches("4f3c2b1a09e8") && c.matches("container 4f3c2b1a09e8"));
        assert!(!c.matches("4f3c"));
        assert_eq!(
            CgroupIdentity::of_path("/system.slice/ssh.service"),
            Some(CgroupIdentity::Unit("ssh.service".into()))
        );
        assert_eq!(
            CgroupIdentity::of_path("/user.slice/user-0.slice/session-3.scope"),
            None
        );
        assert_eq!(
            CgroupIdentity::of_path("/process_api/feea0b42f8e2f25ba8680eb40b61003f"),
            None
        );
    }
}
