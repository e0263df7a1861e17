//! A file replaced whole: readers, and whoever looks after a crash or a
//! power loss, see the old content or the new, never part of it.
//!
//! In: a directory ([`DirHandle`], or a path whose parent is opened as one),
//! a name and the bytes. Out: the file in place, or an error and nothing
//! left behind. The bytes go to a hidden temporary with a random name in
//! the same directory (created mode 0600, never through a symlink), which
//! is fsynced (its pages then dropped from the page cache, where they were
//! charged to this process's cgroup), renamed over the name, and then the
//! directory is fsynced so the rename itself survives a power loss. A temporary a killed writer
//! left is named `.tmp-<random><suffix>`: the caller's suffix lets it find
//! and remove its own.

use std::io::Write;
use std::path::Path;

use super::dir::DirHandle;
use super::random::random_suffix;

/// The name of a temporary for a file ending in `suffix`.
pub fn temp_name(suffix: &str) -> String {
    format!(".tmp-{}{suffix}", random_suffix())
}

/// Replace `name` in `dir` with `bytes` through a temporary ending in
/// `suffix`, as [`write_in`] does but neither synced nor let go from the
/// page cache: for a cache that is worth nothing after a crash and is read
/// again soon (a reader still sees the old file or the new, whole).
pub fn replace_unsynced_in(
    dir: &DirHandle,
    name: &str,
    suffix: &str,
    bytes: &[u8],
) -> std::io::Result<()> {
    let temp = temp_name(suffix);
    let result = dir
        .create_new(&temp)
        .and_then(|mut f| f.write_all(bytes))
        .and_then(|()| dir.rename(&temp, name));
    if result.is_err() {
        let _ = dir.remove(&temp);
    }
    result
}

/// Replace `name` in `dir` with `bytes`, through a temporary ending in
/// `suffix` (see the module doc).
pub fn write_in(dir: &DirHandle, name: &str, suffix: &str, bytes: &[u8]) -> std::io::Result<()> {
    let temp = temp_name(suffix);
    let result = (|| {
        let mut f = dir.create_new(&temp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        // Written for later: its pages need not stay charged to us.
        super::cgroup_memory::drop_cached_pages(&f);
        dir.rename(&temp, name)?;
        dir.sync()
    })();
    if result.is_err() {
        let _ = dir.remove(&temp);
    }
    result
}

/// Replace the file at `path` with `bytes` (see [`write_in`]); its parent
/// directory is opened first, so a symlink swapped in for the directory
/// during the write moves nothing.
pub fn write(path: &Path, suffix: &str, bytes: &[u8]) -> std::io::Result<()> {
    let invalid = || std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name");
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(invalid)?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    write_in(&DirHandle::open(parent)?, name, suffix, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Check that a file is replaced whole, mode 0600, with no temporary
    /// left; that a failed write (a directory in the name's place) leaves no
    /// temporary and the old content; and that a symlink at the name is
    /// replaced, not written through.
    #[test]
    fn replaces_whole_and_leaves_nothing_behind() {
        let d = std::env::temp_dir().join(format!("sysprof-atomic-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let path = d.join("a.bin");
        write(&path, ".bin", b"one").unwrap();
        write(&path, ".bin", b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let names = || {
            std::fs::read_dir(&d)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(), ["a.bin"], "no temporary left");

        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/x"), b"").unwrap();
        assert!(
            write(&d.join("sub"), ".bin", b"three").is_err(),
            "a non-empty directory cannot be renamed over"
        );
        let mut left = names();
        left.sort();
        assert_eq!(left, ["a.bin", "sub"], "no temporary left after a failure");

        let target = d.join("target");
        std::fs::write(&target, b"theirs").unwrap();
        std::os::unix::fs::symlink(&target, d.join("link")).unwrap();
        write(&d.join("link"), ".bin", b"ours").unwrap();
        assert_eq!(
            std::fs::read(&target).unwrap(),
            b"theirs",
            "not written through the link"
        );
        assert!(std::fs::symlink_metadata(d.join("link")).unwrap().is_file());
        let _ = std::fs::remove_dir_all(&d);
    }
}
