//! Which of a recording's warnings its reader wants to read.
//!
//! In: the recording's warnings (one line each, most naming the binary they
//! are about) and the uids whose binaries concern the reader (root's and the
//! user's who ran sysprof). Out: the warnings to show, and how many are
//! about other users' binaries: on a shared machine those are most of them
//! (29 unwind-table warnings in one `record -a` beside other users' builds),
//! and they are counted, not listed, in Profile Info and on the summary.
//! `-v` still prints every one.

use std::os::unix::fs::MetadataExt;

/// The warnings to show, and the number about binaries of uids not in
/// `viewers`. A warning naming no path, or a path that is gone, is shown.
pub fn split<'a>(warnings: &'a [String], viewers: &[u32]) -> (Vec<&'a str>, usize) {
    let mut shown = Vec::new();
    let mut others = 0;
    for w in warnings {
        let owner = first_path(w)
            .and_then(|p| std::fs::symlink_metadata(p).ok())
            .map(|m| m.uid());
        match owner {
            Some(uid) if !viewers.contains(&uid) => others += 1,
            _ => shown.push(w.as_str()),
        }
    }
    (shown, others)
}

/// The binary a warning is about: the path it starts with ("PATH: why",
/// "PATH (debug file ...): why") or the one the unwinder names ("no
/// in-kernel unwind table for PATH: why", "cannot read unwind information of
/// PATH; ..."), up to the `: `, ` (` or `; ` that ends it. Other warnings
/// are about a process or sysprof itself (a perf map another user planted
/// for the user's own process must stay in view): None.
fn first_path(w: &str) -> Option<&str> {
    let rest = if w.starts_with('/') {
        w
    } else {
        ["unwind table for /", "unwind information of /"]
            .iter()
            .find_map(|m| w.find(m).map(|i| &w[i + m.len() - 1..]))?
    };
    let end = [": ", " (", "; "]
        .iter()
        .filter_map(|sep| rest.find(sep))
        .min()
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that warnings about binaries of uids the reader is not are
    /// counted, and those about the reader's own, or naming none, shown.
    #[test]
    fn other_users_binaries_are_counted_not_shown() {
        let dir = std::env::temp_dir().join(format!("sysprof-warnings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let own = dir.join("own bin");
        std::fs::write(&own, b"x").unwrap();
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        let warnings = vec![
            format!(
                "{}: DWARF not read: truncated; names come from its symbol table",
                own.display()
            ),
            "no in-kernel unwind table for /etc/passwd: not an ELF file".to_string(),
            "perf map of pid 12: owned by uid 65534".to_string(),
            "/nonexistent/gone: cannot read unwind information".to_string(),
        ];
        // Read by the user who ran the test: their file's warning is shown,
        // root's /etc/passwd is another user's unless they are root.
        let (shown, others) = split(&warnings, &[me]);
        assert_eq!(
            (shown.len(), others),
            if me == 0 { (4, 0) } else { (3, 1) },
            "{shown:?}"
        );
        // The same warnings read by uid 4242 (none of these files is theirs).
        let (shown, others) = split(&warnings, &[4242]);
        assert_eq!(shown, vec![warnings[2].as_str(), warnings[3].as_str()]);
        assert_eq!(others, 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Check where a warning's path begins and ends.
    #[test]
    fn the_first_path_is_found() {
        assert_eq!(first_path("/usr/bin/a b: why"), Some("/usr/bin/a b"));
        assert_eq!(
            first_path("no in-kernel unwind table for /lib/x.so (debug file /y): z"),
            Some("/lib/x.so")
        );
        assert_eq!(first_path("read/write failed"), None);
        assert_eq!(
            first_path(
                "cannot read unwind information of /opt/p; its frames are walked by frame pointer"
            ),
            Some("/opt/p")
        );
        assert_eq!(
            first_path("perf map of pid 7: /tmp/perf-7.map is owned by uid 65534"),
            None,
            "about the process, not the file"
        );
    }
}
