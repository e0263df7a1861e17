//! The output file's own tests: planted links and FIFOs, abandoned and
//! failed writes.
//!
//! In: files made in a temporary directory. Out: pass or fail.

use std::os::unix::fs::FileTypeExt;

use super::*;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sysprof-output-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Check that a planted symlink at the output path is replaced, not
/// written through, and that nothing else is left in the directory.
#[test]
fn replaces_a_planted_symlink_without_following_it() {
    let d = dir("symlink");
    let target = d.join("victim");
    std::fs::write(&target, "precious").unwrap();
    let out = d.join("p.json");
    std::os::unix::fs::symlink(&target, &out).unwrap();
    let o = OutputFile::create(&out).unwrap();
    o.commit(&serde_json::json!({"ok": true})).unwrap();
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
    assert!(!std::fs::symlink_metadata(&out)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read_to_string(&out).unwrap(), r#"{"ok":true}"#);
    let names: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    let _ = std::fs::remove_dir_all(&d);
}

fn mkfifo(p: &Path) {
    let c = cstring(p).unwrap();
    // SAFETY: a valid path.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) },
        0,
        "mkfifo {}",
        p.display()
    );
}

/// Check that a FIFO at the output path is written through to its
/// reader (who opens it only after the output was prepared) and stays a
/// FIFO, with nothing else left in the directory.
#[test]
fn a_fifo_is_written_through_not_replaced() {
    let d = dir("fifo");
    let out = d.join("p.json");
    mkfifo(&out);
    let o = OutputFile::create(&out).unwrap();
    assert!(!o.is_file());
    let reader = {
        let out = out.clone();
        std::thread::spawn(move || std::fs::read_to_string(out).unwrap())
    };
    let n = o.commit(&serde_json::json!({"ok": true})).unwrap();
    assert_eq!(reader.join().unwrap(), r#"{"ok":true}"#);
    assert_eq!(n, 11);
    assert!(std::fs::symlink_metadata(&out)
        .unwrap()
        .file_type()
        .is_fifo());
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
    let _ = std::fs::remove_dir_all(&d);
}

/// Check that a symlink to a FIFO that another user planted is not
/// followed: it is replaced by the profile, as any planted symlink is.
#[test]
fn another_users_symlink_to_a_fifo_is_replaced() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED another_users_symlink_to_a_fifo_is_replaced: needs root to give the symlink to nobody");
        return;
    }
    let d = dir("fifo-link");
    let fifo = d.join("fifo");
    mkfifo(&fifo);
    let out = d.join("p.json");
    std::os::unix::fs::symlink(&fifo, &out).unwrap();
    std::os::unix::fs::lchown(&out, Some(65534), Some(65534)).unwrap();
    let o = OutputFile::create(&out).unwrap();
    assert!(o.is_file(), "not written through");
    o.commit(&serde_json::json!({"ok": true})).unwrap();
    assert!(std::fs::symlink_metadata(&out)
        .unwrap()
        .file_type()
        .is_file());
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    let _ = std::fs::remove_dir_all(&d);
}

/// Check that another user's FIFO at the output path (planted in a
/// shared directory) is replaced by the profile, never written through:
/// no reader could then hold or hang the end of the recording.
#[test]
fn another_users_fifo_is_replaced() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED another_users_fifo_is_replaced: needs root to give the FIFO to nobody");
        return;
    }
    let d = dir("their-fifo");
    let out = d.join("p.json");
    mkfifo(&out);
    std::os::unix::fs::chown(&out, Some(65534), Some(65534)).unwrap();
    let o = OutputFile::create(&out).unwrap();
    assert!(o.is_file(), "not written through");
    o.commit(&serde_json::json!({"ok": true})).unwrap();
    assert!(std::fs::symlink_metadata(&out)
        .unwrap()
        .file_type()
        .is_file());
    let _ = std::fs::remove_dir_all(&d);
}

/// Check that a profile never written leaves nothing behind.
#[test]
fn an_abandoned_profile_leaves_nothing() {
    let d = dir("abandoned");
    let o = OutputFile::create(&d.join("p.json.gz")).unwrap();
    drop(o);
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
    let _ = std::fs::remove_dir_all(&d);
}

/// Check that a failed write leaves nothing and says which path.
#[test]
fn a_failed_write_leaves_nothing() {
    let d = dir("failed");
    let o = OutputFile::create(&d.join("p.json")).unwrap();
    let e = o
        .commit_with(|_| Err(std::io::Error::other("disk full")))
        .unwrap_err();
    assert!(
        e.to_string().contains("p.json") && e.to_string().contains("disk full"),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
    let _ = std::fs::remove_dir_all(&d);
}
