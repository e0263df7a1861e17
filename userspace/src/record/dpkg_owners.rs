//! Which Debian package holds a binary, for the advice a recording ends
//! with on code without symbols ("install postgresql-15-dbgsym").
//!
//! In: the paths of the binaries the advice names (three at most). Out:
//! path → package, for the paths one package holds, read from dpkg's own
//! file lists (root's files, bounded) rather than by running `dpkg-query
//! -S`: that parses dpkg's status database and every list for each call,
//! 134 ms of CPU against ~20 ms for the lists here.
//!
//! Even that was 4.8 % of a 10-s `record -a`'s CPU beside pgbench (~37 ms of
//! ~760, `perf record --call-graph dwarf -p` of the recording: 8.3 MB in
//! 774 lists, mostly read from the disk, the VM keeping little page
//! cache), paid again by every recording of the same binaries. So the
//! answers (a package, or none) are kept in a small file of root's,
//! `/var/cache/sysprof/dpkg-owners`, valid while dpkg's list directory and
//! status file are unchanged (every install, upgrade and removal renames
//! files in the one and rewrites the other): a later recording reads the
//! lists only for a path it has not asked before. The file is read and
//! written only in a directory private to root, bounded, and a line that
//! does not parse (a path with a tab or a newline is never written) makes
//! the whole file a miss.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::sys::dir::DirHandle;

/// The answers kept between recordings, unless `SYSPROF_DPKG_CACHE` names
/// another directory (`off`: none kept).
const CACHE_DIR: &str = "/var/cache/sysprof";
const CACHE_FILE: &str = "dpkg-owners";
/// The file's first word and format.
const CACHE_MAGIC: &str = "sysprof-dpkg-owners-1";
/// Most answers kept (a recording asks three): past it, the file starts
/// again from the recording's own.
const CACHE_ENTRIES: usize = 1024;
/// A cache file larger than this is not read.
const CACHE_MAX_BYTES: u64 = 1 << 20;
/// dpkg's status database: rewritten by every dpkg run that changes a package.
const DPKG_STATUS: &str = "/var/lib/dpkg/status";

/// The packages holding `paths` (see the module doc): from the cache where
/// it answers, from the lists for the rest.
pub(super) fn packages_of(paths: &[&str]) -> HashMap<String, String> {
    if paths.is_empty() {
        return HashMap::new();
    }
    let stamp = dpkg_stamp(Path::new(DPKG_INFO_DIR), Path::new(DPKG_STATUS));
    packages_of_cached(paths, stamp.as_deref(), cache_dir().as_ref())
}

/// [`packages_of`] with dpkg's `stamp` (None: no dpkg, nothing kept) and
/// the cache's directory given.
fn packages_of_cached(
    paths: &[&str],
    stamp: Option<&str>,
    dir: Option<&DirHandle>,
) -> HashMap<String, String> {
    let Some(stamp) = stamp else {
        return scan_lists(paths);
    };
    let mut known = dir.and_then(|d| read_cache(d, stamp)).unwrap_or_default();
    let unknown: Vec<&str> = paths
        .iter()
        .copied()
        .filter(|p| !known.contains_key(*p))
        .collect();
    if !unknown.is_empty() {
        let found = scan_lists(&unknown);
        if known.len() + unknown.len() > CACHE_ENTRIES {
            known.clear();
        }
        for path in unknown {
            known.insert(path.to_string(), found.get(path).cloned());
        }
        if let Some(d) = dir {
            // A cache that cannot be written costs the next recording a scan, nothing more.
            let _ = write_cache(d, stamp, &known);
        }
    }
    paths
        .iter()
        .filter_map(|p| Some((p.to_string(), known.get(*p)?.clone()?)))
        .collect()
}

/// What the answers hold for: dpkg's list directory's and status file's
/// identity and modification times; None if either is missing.
fn dpkg_stamp(info_dir: &Path, status: &Path) -> Option<String> {
    let d = std::fs::metadata(info_dir).ok()?;
    let s = std::fs::metadata(status).ok()?;
    Some(format!(
        "{}:{}:{}.{:09} {}:{}:{}.{:09}:{}",
        d.dev(),
        d.ino(),
        d.mtime(),
        d.mtime_nsec(),
        s.dev(),
        s.ino(),
        s.mtime(),
        s.mtime_nsec(),
        s.size()
    ))
}

/// The cache's directory, if root's alone (see [`crate::sys::dir::root_private`]).
fn cache_dir() -> Option<DirHandle> {
    match std::env::var_os("SYSPROF_DPKG_CACHE") {
        Some(v) if v == "off" => None,
        Some(v) => crate::sys::dir::root_private(Path::new(&v)),
        None => crate::sys::dir::root_private(Path::new(CACHE_DIR)),
    }
}

/// The answers in the cache file, if it is a regular file of root's made
/// for `stamp`, within its bounds, every line whole; None otherwise.
fn read_cache(dir: &DirHandle, stamp: &str) -> Option<HashMap<String, Option<String>>> {
    let file = dir.open_read(CACHE_FILE).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.uid() != 0 || meta.len() > CACHE_MAX_BYTES {
        return None;
    }
    let mut text = String::new();
    file.take(CACHE_MAX_BYTES).read_to_string(&mut text).ok()?;
    parse_cache(&text, stamp)
}

/// The answers `text` holds for `stamp` (see [`read_cache`]).
fn parse_cache(text: &str, stamp: &str) -> Option<HashMap<String, Option<String>>> {
    let mut lines = text.split_terminator('\n');
    let head = lines.next()?;
    if head.strip_prefix(CACHE_MAGIC)?.strip_prefix(' ')? != stamp {
        return None;
    }
    let mut known = HashMap::new();
    for line in lines {
        let (path, package) = line.split_once('\t')?;
        if !path.starts_with('/') || !(package.is_empty() || is_package_name(package)) {
            return None;
        }
        known.insert(
            path.to_string(),
            (!package.is_empty()).then(|| package.to_string()),
        );
        if known.len() > CACHE_ENTRIES {
            return None;
        }
    }
    Some(known)
}

/// Debian's package names: lower-case letters, digits, `+ - .`, at least
/// two characters, starting with a letter or digit.
fn is_package_name(name: &str) -> bool {
    name.len() >= 2
        && name.len() <= 128
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b))
}

/// The cache file's text for `known` (see [`parse_cache`]): a path that
/// would not read back (a tab, a newline, not absolute) is left out.
fn cache_text(stamp: &str, known: &HashMap<String, Option<String>>) -> String {
    let mut text = format!("{CACHE_MAGIC} {stamp}\n");
    let mut rows: Vec<_> = known
        .iter()
        .filter(|(path, package)| {
            path.starts_with('/')
                && !path.contains(['\t', '\n', '\r'])
                && package.as_deref().is_none_or(is_package_name)
        })
        .collect();
    rows.sort();
    for (path, package) in rows {
        text.push_str(path);
        text.push('\t');
        text.push_str(package.as_deref().unwrap_or(""));
        text.push('\n');
    }
    text
}

/// Replace the cache file with `known`'s answers: a temporary in the same
/// directory, renamed over it (no fsync: a cache lost in a crash is a scan).
fn write_cache(
    dir: &DirHandle,
    stamp: &str,
    known: &HashMap<String, Option<String>>,
) -> std::io::Result<()> {
    let text = cache_text(stamp, known);
    crate::sys::atomic_file::replace_unsynced_in(dir, CACHE_FILE, ".dpkg-owners", text.as_bytes())
}

/// Where dpkg keeps each installed package's file list (`NAME[:ARCH].list`).
const DPKG_INFO_DIR: &str = "/var/lib/dpkg/info";

/// A file list larger than this is not read (the largest on a desktop is
/// a few MB; the directory is root's, the bound is against a broken one).
const DPKG_LIST_MAX_BYTES: u64 = 64 << 20;

/// The packages holding `paths`, read from every one of dpkg's file lists;
/// a merged /usr's file is also looked for where the package put it
/// (`/usr/bin/gzip` is `/bin/gzip` to dpkg). Returns path → package for
/// those one package holds. Diversions are not followed: a diverted
/// binary's package is its list's.
fn scan_lists(paths: &[&str]) -> HashMap<String, String> {
    let mut owners = HashMap::new();
    if paths.is_empty() {
        return owners;
    }
    let Ok(dir) = std::fs::read_dir(DPKG_INFO_DIR) else {
        return owners;
    };
    // path asked → the packages found holding it (two: shared, none named).
    let mut found: HashMap<&str, Vec<String>> = Default::default();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that the cache's text reads back as written, that a path
    /// that would not (a newline, a tab, relative) is left out, that a
    /// lying package name, another stamp, a torn line or a file past the
    /// entry bound is a miss, and that a path with no package keeps "none".
    #[test]
    fn the_cache_reads_back_what_it_wrote_and_refuses_the_rest() {
        let mut known = HashMap::new();
        known.insert("/usr/bin/gzip".to_string(), Some("gzip".to_string()));
        known.insert("/opt/own/tool".to_string(), None);
        known.insert("/tmp/a\nb".to_string(), Some("libc6".to_string()));
        known.insert("/tmp/a\tb".to_string(), None);
        known.insert("relative".to_string(), None);
        let text = cache_text("S", &known);
        let back = parse_cache(&text, "S").expect("its own text parses");
        assert_eq!(back.len(), 2, "{text}");
        assert_eq!(back["/usr/bin/gzip"].as_deref(), Some("gzip"));
        assert_eq!(back["/opt/own/tool"], None);
        assert!(parse_cache(&text, "T").is_none(), "another stamp");
        assert!(parse_cache(&format!("{text}/x\tBad Name\n"), "S").is_none());
        assert!(parse_cache(&format!("{text}/x no tab\n"), "S").is_none());
        assert!(parse_cache("", "S").is_none());
        let mut many = format!("{CACHE_MAGIC} S\n");
        for i in 0..=CACHE_ENTRIES {
            many.push_str(&format!("/p{i}\t\n"));
        }
        assert!(parse_cache(&many, "S").is_none(), "past the bound");
    }

    /// Check that a later call answers from the cache, not the lists (a
    /// planted answer comes back), that a path it has not seen is read from
    /// the lists and added, that a path no package holds is kept as none,
    /// and that another stamp (dpkg ran since) reads nothing of it.
    #[test]
    fn answers_are_kept_for_the_next_recording() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: the cache is root's only (run as root)");
            return;
        }
        let base = std::env::temp_dir().join(format!("sysprof-dpkg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dir = crate::sys::dir::root_private(&base).expect("a private temp dir");
        let mut planted = HashMap::new();
        planted.insert("/usr/bin/gzip".to_string(), Some("planted".to_string()));
        planted.insert("/nowhere/bin".to_string(), None);
        write_cache(&dir, "stamp-1", &planted).unwrap();
        assert_eq!(read_cache(&dir, "stamp-1").as_ref(), Some(&planted));
        let got = packages_of_cached(
            &["/usr/bin/gzip", "/nowhere/bin"],
            Some("stamp-1"),
            Some(&dir),
        );
        assert_eq!(
            got.get("/usr/bin/gzip").map(String::as_str),
            Some("planted")
        );
        assert!(!got.contains_key("/nowhere/bin"));
        if Path::new(DPKG_INFO_DIR).is_dir()
            && Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6").exists()
        {
            let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
            let got = packages_of_cached(&[libc], Some("stamp-1"), Some(&dir));
            assert_eq!(got.get(libc).map(String::as_str), Some("libc6"));
            let kept = read_cache(&dir, "stamp-1").unwrap();
            assert_eq!(kept[libc].as_deref(), Some("libc6"));
            assert_eq!(kept["/usr/bin/gzip"].as_deref(), Some("planted"));
        } else {
            eprintln!("not checked: no dpkg lists or no libc here to add");
        }
        // Another stamp: the planted answer is not read (the lists are).
        assert_eq!(read_cache(&dir, "stamp-2"), None);
        // The stamp moves when dpkg's status file changes.
        let status = base.join("status");
        std::fs::write(&status, "a").unwrap();
        let a = dpkg_stamp(&base, &status).unwrap();
        std::fs::write(&status, "ab").unwrap();
        assert_ne!(a, dpkg_stamp(&base, &status).unwrap());
        std::fs::remove_dir_all(&base).unwrap();
    }

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
        let ours = scan_lists(&paths);
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
