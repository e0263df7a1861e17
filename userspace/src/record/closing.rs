//! What a recording says when it ends: the summary line (and a second only
//! when something was lost), and the advice for code without symbols.
//!
//! In: the finished recording, what was written where, the missing-symbols
//! counts of its windows. Out: lines on stderr; for the advice, the Debian
//! packages that own the binaries, read from dpkg's own file lists (root's
//! files, bounded) rather than by running `dpkg-query`.

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
    // Stacks cut by the copy's end: a few are normal (deep recursion); past
    // one in a hundred the picture is missing its callers.
    let u = st.unwind;
    let cut = u.copy_exhausted - u.copy_exhausted_in_profiler;
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
    let owners = debian_packages_of(&paths);
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

/// Where dpkg keeps each installed package's file list (`NAME[:ARCH].list`).
const DPKG_INFO_DIR: &str = "/var/lib/dpkg/info";

/// A file list larger than this is not read (the largest on a desktop is
/// a few MB; the directory is root's, the bound is against a broken one).
const DPKG_LIST_MAX_BYTES: u64 = 64 << 20;

/// The packages holding `paths`, from dpkg's file lists, where dpkg is the
/// package manager; a merged /usr's file is also looked for where the
/// package put it (`/usr/bin/gzip` is `/bin/gzip` to dpkg). Returns path →
/// package for those one package holds.
///
/// Read here rather than through `dpkg-query -S`: that parses dpkg's
/// status database and every list for each call, 134 ms of CPU against
/// ~20 ms here (8.3 MB of lists on this VM), and it ran at the end of every
/// recording with unsymbolized samples (5 % of a 10-s `record -a`'s CPU
/// beside pgbench). Diversions are not followed: a diverted binary's
/// package is its list's.
fn debian_packages_of(paths: &[&str]) -> std::collections::HashMap<String, String> {
    let mut owners = std::collections::HashMap::new();
    if paths.is_empty() {
        return owners;
    }
    let Ok(dir) = std::fs::read_dir(DPKG_INFO_DIR) else {
        return owners;
    };
    // path asked → the packages found holding it (two: shared, none named).
    let mut found: std::collections::HashMap<&str, Vec<String>> = Default::default();
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(package) = name.to_str().and_then(dpkg_list_package) else {
            continue;
        };
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() || meta.len() > DPKG_LIST_MAX_BYTES {
            continue;
        }
        let Ok(list) = std::fs::read(entry.path()) else {
            continue;
        };
        for path in listed(&list, paths) {
            let holders = found.entry(path).or_default();
            if !holders.iter().any(|h| h == package) {
                holders.push(package.to_string());
            }
        }
    }
    for (path, mut holders) in found {
        if holders.len() == 1 {
            owners.insert(path.to_string(), holders.pop().unwrap_or_default());
        }
    }
    owners
}

/// The package a dpkg file list's name names: "libc6:amd64.list" → "libc6";
/// None for dpkg's other files (`.md5sums`, `.postinst`, …).
fn dpkg_list_package(file_name: &str) -> Option<&str> {
    let stem = file_name.strip_suffix(".list")?;
    let package = stem.split(':').next()?;
    (!package.is_empty()).then_some(package)
}

/// The `paths` a dpkg file list (one path a line) holds, each as asked: a
/// line equal to the path, or to the path without a merged /usr's `/usr`.
fn listed<'p>(list: &[u8], paths: &[&'p str]) -> Vec<&'p str> {
    let mut held = Vec::new();
    for line in list.split(|&b| b == b'\n') {
        for &path in paths {
            let bytes = path.as_bytes();
            if (line == bytes || bytes.strip_prefix(b"/usr") == Some(line)) && !held.contains(&path)
            {
                held.push(path);
            }
        }
    }
    held
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a dpkg file list's name gives its package (arch cut),
    /// that dpkg's other files give none, and that a list holds a path as
    /// written or under a merged /usr, never a longer or shorter one.
    #[test]
    fn reads_dpkg_file_lists() {
        assert_eq!(
            dpkg_list_package("python3.11-minimal.list"),
            Some("python3.11-minimal")
        );
        assert_eq!(dpkg_list_package("libc6:amd64.list"), Some("libc6"));
        assert_eq!(dpkg_list_package("libc6:amd64.md5sums"), None);
        assert_eq!(dpkg_list_package(".list"), None);
        let list =
            b"/.\n/bin\n/bin/gzip\n/usr/lib/x86_64-linux-gnu/libz.so.1.2.13\n/usr/bin/gzipx\n";
        let asked = [
            "/usr/bin/gzip",
            "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13",
            "/usr/bin/gzi",
            "/bin",
        ];
        assert_eq!(
            listed(list, &asked),
            vec![
                "/bin",
                "/usr/bin/gzip",
                "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13"
            ]
        );
        assert!(listed(b"", &asked).is_empty());
    }

    /// Check the lists' answer against `dpkg-query -S` (the oracle) for a
    /// binary and a library every Debian has, through a merged /usr.
    #[test]
    fn dpkg_lists_name_the_package_dpkg_query_names() {
        if !std::path::Path::new(DPKG_INFO_DIR).is_dir() {
            eprintln!("SKIPPED: no {DPKG_INFO_DIR} (not a dpkg system)");
            return;
        }
        let paths = ["/usr/bin/gzip", "/usr/lib/x86_64-linux-gnu/libc.so.6"];
        let ours = debian_packages_of(&paths);
        let mut checked = 0;
        for path in paths {
            if !std::path::Path::new(path).exists() {
                eprintln!("not checked: no {path} here");
                continue;
            }
            // dpkg lists a merged /usr's file where the package put it.
            let out = std::process::Command::new("dpkg-query")
                .args(["-S", path, path.strip_prefix("/usr").unwrap_or(path)])
                .output()
                .expect("dpkg-query runs where dpkg's lists are");
            let text = String::from_utf8_lossy(&out.stdout);
            let oracle = text
                .lines()
                .next()
                .and_then(|l| l.split(':').next())
                .unwrap_or_default()
                .trim();
            assert!(!oracle.is_empty(), "dpkg-query -S {path}: {text}");
            assert_eq!(ours.get(path).map(String::as_str), Some(oracle), "{path}");
            checked += 1;
        }
        assert!(checked > 0, "neither {paths:?} is here to check");
    }
}
