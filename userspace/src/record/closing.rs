//! What a recording says when it ends: the summary line (and a second only
//! when something was lost), and the advice for code without symbols.
//!
//! In: the finished recording, what was written where, the missing-symbols
//! counts of its windows. Out: lines on stderr; for the advice, the Debian
//! packages that own the binaries ([`super::dpkg_owners`]).

use std::path::Path;
use std::time::Duration;

use crate::bpf::abi;
use crate::cli::RecordArgs;
use crate::model::recording::Recording;
use crate::sampling::CallGraph;

/// The summary: one line with what was recorded and where it went; a second
/// only when something was lost, saying what and what helps; with `-v`, every
/// total as `key=value` (what scripts and the benchmarks read).
///
/// `written` counts the processes and threads written out during the
/// recording (no longer in `rec`).
pub(super) fn print_summary(
    rec: &Recording,
    written: (usize, usize),
    path: &Path,
    is_file: bool,
    bytes: u64,
    write_time: Duration,
    args: &RecordArgs,
) {
    let st = &rec.stats;
    let threads: usize = written.1 + rec.processes.iter().map(|p| p.threads.len()).sum::<usize>();
    let shown = if path.as_os_str() == "-" {
        "stdout".to_string()
    } else {
        crate::escape::path(path)
    };
    eprintln!(
        "sysprof: {:.2} s, {} samples, {} processes, {threads} threads; wrote {shown} ({}) in {:.2} s{}",
        (rec.end_ns - rec.start_ns) as f64 / 1e9,
        st.samples_kept,
        written.0 + rec.processes.len(),
        crate::units::human_bytes(bytes),
        write_time.as_secs_f64(),
        if is_file { crate::escape::open_hint(path) } else { String::new() },
    );
    let lost = crate::summary::lost_parts(st, true);
    let mut said = Vec::new();
    if !lost.is_empty() {
        said.push(format!("lost {}", lost.join(", ")));
    }
    // Not a ring's loss, but requests the profile cannot show: say so, or a
    // run whose completions the kernel did not trace "lost nothing".
    if st.io_untracked > 0 {
        said.push(format!(
            "{} block I/O requests seen at one end only (begun before the recording, in flight at its end, or completed where tracing cannot see): no marker",
            st.io_untracked
        ));
    }
    // Stacks cut by the copy's end where the copy was as long as
    // --stack-size (not where it reached the end of the stack's readable
    // memory: a larger copy takes those no deeper): a few are normal (deep
    // recursion); past one in a hundred the picture is missing its callers.
    let u = st.unwind;
    let cut = u.copy_exhausted_at_size;
    let sampling = args.capture.sampling();
    if sampling.call_graph == CallGraph::DwarfCopy
        && cut * 100 > u.unwinds
        && sampling.stack_size as usize != abi::MAX_STACK_COPY
    {
        said.push(format!(
            "{cut} of {} user stacks cut at the {}-byte copy (--stack-size {} reaches deeper)",
            u.unwinds,
            sampling.stack_size,
            abi::MAX_STACK_COPY
        ));
    }
    if !said.is_empty() {
        eprintln!("sysprof: {}", said.join("; "));
    }
    if args.verbose {
        eprintln!("sysprof: {}", crate::summary::stats_line(rec));
    }
}

/// What the summary says of code without names, when at least 1 % of the
/// user samples ran in it: the binaries (at least 0.5 % each, three at
/// most) and how to get their names here (debuginfod, the distribution's
/// debug packages). None when there is nothing worth saying.
pub(super) fn missing_symbols_line(
    m: &crate::summary::MissingSymbols,
    debuginfod_on: bool,
) -> Option<String> {
    let all: u64 = m.by_binary.values().sum();
    if m.user_samples == 0 || all * 100 < m.user_samples {
        return None;
    }
    let worst = m.worst(0.5);
    let shown: Vec<String> = worst
        .iter()
        .take(3)
        .map(|(path, _, pct)| format!("{} ({pct:.1}%)", crate::escape::escape(path)))
        .collect();
    let paths: Vec<&str> = worst
        .iter()
        .take(3)
        .map(|(path, _, _)| path.as_str())
        .collect();
    let owners = super::dpkg_owners::packages_of(&paths);
    let packages: Vec<String> = paths
        .iter()
        .filter_map(|path| owners.get(*path))
        .map(|p| format!("{p}-dbgsym"))
        .fold(Vec::new(), |mut v: Vec<String>, p| {
            // Two binaries of one package: the package once.
            if !v.contains(&p) {
                v.push(p);
            }
            v
        });
    let mut how = Vec::new();
    if debuginfod_on {
        how.push("debuginfod (DEBUGINFOD_URLS) gave none for them".to_string());
    } else {
        how.push(format!(
            "set DEBUGINFOD_URLS={} and sysprof fetches their debug files",
            debuginfod_server_hint()
        ));
    }
    if !packages.is_empty() {
        how.push(format!(
            "or install {} (Debian's debian-debug archive)",
            crate::escape::escape(&packages.join(" "))
        ));
    }
    Some(format!(
        "{:.1}% of user samples ran in code without symbols: {}; {}",
        all as f64 * 100.0 / m.user_samples as f64,
        shown.join(", "),
        how.join(", ")
    ))
}

/// The distribution's debuginfod server (from /etc/os-release), else a
/// placeholder the user fills in.
fn debuginfod_server_hint() -> &'static str {
    let release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let id = release
        .lines()
        .find_map(|l| l.strip_prefix("ID="))
        .unwrap_or("")
        .trim_matches('"');
    match id {
        "debian" => "https://debuginfod.debian.net",
        "ubuntu" => "https://debuginfod.ubuntu.com",
        "fedora" => "https://debuginfod.fedoraproject.org",
        "arch" => "https://debuginfod.archlinux.org",
        _ => "<your distribution's debuginfod server>",
    }
}
