//! The plain copy against the compressed file it came from: the same names,
//! files and lines from the symbolizer, the cache's reuse, its budget, and
//! the files it refuses.

use super::*;
use std::path::PathBuf;

/// A private directory of root's for a test, or None (said) when not root.
fn root_dir(name: &str) -> Option<(PathBuf, DirHandle)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED (not root): the DWARF cache is only kept by root");
        return None;
    }
    let d = std::env::temp_dir().join(format!("sysprof-inflated-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let handle = crate::sys::dir::root_private(&d.join("cache"))
        .expect("a root-private directory under /tmp");
    Some((d, handle))
}

/// A program built by gcc with its DWARF compressed (`-gz=zlib`), and the
/// address of its function `helper`.
fn compiled(dir: &Path, name: &str, body: &str) -> (PathBuf, u64) {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, body).unwrap();
    let out = dir.join(name);
    let status = std::process::Command::new("gcc")
        .args(["-g", "-gz=zlib", "-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("gcc runs (.ci/run installs it)");
    assert!(status.success(), "gcc -gz=zlib failed");
    let data = std::fs::read(&out).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let helper = file
        .symbols()
        .find(|s| object::ObjectSymbol::name(s) == Ok("helper"))
        .map(|s| object::ObjectSymbol::address(&s))
        .expect("helper in the symbol table");
    (out, helper)
}

const PROGRAM: &str = "int helper(int x)\n{\n\treturn x * 3;\n}\n\nint main(int c, char **v)\n{\n\treturn helper(c);\n}\n";

/// The `.debug_*` sections of an ELF file: (name, compressed, size as stored).
fn debug_sections(path: &Path) -> Vec<(String, bool, u64)> {
    let data = std::fs::read(path).unwrap();
    let file = ElfFile64::<Endianness>::parse(&*data).unwrap();
    let endian = file.endian();
    let headers = file.elf_header().section_headers(endian, &*data).unwrap();
    file.sections()
        .filter(|s| s.name().is_ok_and(|n| n.starts_with(".debug_")))
        .map(|s| {
            let h = &headers[s.index().0];
            (
                s.name().unwrap().to_string(),
                h.sh_flags(endian).0 & elf::SHF_COMPRESSED.0 != 0,
                h.sh_size(endian),
            )
        })
        .collect()
}

fn debug_file(path: &Path) -> DebugFile {
    DebugFile {
        path: path.display().to_string(),
        file: std::fs::File::open(path).unwrap(),
    }
}

/// Check that the plain copy stores every DWARF section uncompressed, at
/// the size the compressed one's header gave, and that blazesym names the
/// same function, file and line from either file.
#[test]
fn the_plain_copy_names_what_the_compressed_file_names() {
    let Some((d, dir)) = root_dir("names") else {
        return;
    };
    let (prog, helper) = compiled(&d, "prog", PROGRAM);
    let before = debug_sections(&prog);
    assert!(
        before.iter().any(|s| s.0 == ".debug_info" && s.1),
        "{before:?}"
    );

    let plain = plain_copy_in(&debug_file(&prog), &dir, MAX_INFLATED_BYTES).expect("a plain copy");
    let plain_path = format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&plain.file)
    );
    let after = debug_sections(Path::new(&plain_path));
    // -O2 gives the argument a location list: left out of the copy.
    assert!(
        before.iter().any(|s| s.0 == ".debug_loclists"),
        "{before:?}"
    );
    let kept: Vec<&String> = before
        .iter()
        .map(|s| &s.0)
        .filter(|n| !NOT_FOR_NAMES.contains(&n.as_str()))
        .collect();
    assert_eq!(after.iter().map(|s| &s.0).collect::<Vec<_>>(), kept);
    let data = std::fs::read(&prog).unwrap();
    let original = ElfFile64::<Endianness>::parse(&*data).unwrap();
    for (name, compressed, size) in &after {
        assert!(!compressed, "{name} still compressed");
        let full = original
            .section_by_name(name)
            .unwrap()
            .compressed_data()
            .unwrap()
            .uncompressed_size;
        assert_eq!(*size, full, "{name}");
    }

    // blazesym itself (the symbolizer's own layer is above this one).
    use blazesym::symbolize::{source, Input, Symbolized, Symbolizer};
    let from = |path: &str| {
        let sym = Symbolizer::builder()
            .enable_code_info(true)
            .enable_inlined_fns(true)
            .build();
        let src = source::Source::Elf(source::Elf::new(path));
        match sym
            .symbolize_single(&src, Input::VirtOffset(helper + 1))
            .unwrap()
        {
            Symbolized::Sym(s) => {
                let code = s
                    .code_info
                    .as_ref()
                    .map(|c| (c.file.to_string_lossy().into_owned(), c.line));
                (s.name.to_string(), code, s.inlined.len())
            }
            Symbolized::Unknown(why) => panic!("{path}: {why:?}"),
        }
    };
    let compressed = from(prog.to_str().unwrap());
    let uncompressed = from(&plain_path);
    assert_eq!(compressed.0, "helper");
    // helper's lines in PROGRAM are 1-4; its prologue is on one of them.
    let (file, line) = compressed.1.clone().expect("a file and line");
    assert!(
        file == "prog.c" && line.is_some_and(|l| (1..=4).contains(&l)),
        "{compressed:?}"
    );
    assert_eq!(uncompressed, compressed);
    let _ = std::fs::remove_dir_all(&d);
}

/// Check that a second recording gets the entry the first wrote (the same
/// inode), and that a debug file rewritten in place gets an entry of its own.
#[test]
fn the_cache_is_reused_until_the_debug_file_changes() {
    let Some((d, dir)) = root_dir("reuse") else {
        return;
    };
    let (prog, _) = compiled(&d, "prog", PROGRAM);
    let ino = |f: &DebugFile| f.file.metadata().unwrap().ino();
    let first = plain_copy_in(&debug_file(&prog), &dir, MAX_INFLATED_BYTES).unwrap();
    let again = plain_copy_in(&debug_file(&prog), &dir, MAX_INFLATED_BYTES).unwrap();
    assert_eq!(ino(&first), ino(&again));

    let (other, _) = compiled(&d, "other", &PROGRAM.replace("x * 3", "x * 5 + 1"));
    std::fs::copy(&other, &prog).unwrap();
    let changed = plain_copy_in(&debug_file(&prog), &dir, MAX_INFLATED_BYTES).unwrap();
    assert_ne!(ino(&first), ino(&changed));
    let entries = dir.names().unwrap().len();
    assert_eq!(entries, 2, "one entry per version of the file");
    let _ = std::fs::remove_dir_all(&d);
}

/// Check that a debug file not root's, or one with no compressed DWARF,
/// gets no plain copy (and leaves nothing in the cache).
#[test]
fn files_not_roots_or_not_compressed_are_left_as_they_are() {
    let Some((d, dir)) = root_dir("refused") else {
        return;
    };
    let (prog, _) = compiled(&d, "prog", PROGRAM);
    std::os::unix::fs::chown(&prog, Some(65534), None).unwrap();
    assert!(plain_copy_in(&debug_file(&prog), &dir, MAX_INFLATED_BYTES).is_none());
    std::os::unix::fs::chown(&prog, Some(0), None).unwrap();
    let plain = d.join("plain");
    let status = std::process::Command::new("gcc")
        .args(["-g", "-O0", "-o"])
        .arg(&plain)
        .arg(d.join("prog.c"))
        .status()
        .unwrap();
    assert!(status.success());
    assert!(plain_copy_in(&debug_file(&plain), &dir, MAX_INFLATED_BYTES).is_none());
    let mut sink = BoundedFile {
        out: std::io::BufWriter::new(std::fs::File::create(d.join("sink")).unwrap()),
        limit: MAX_INFLATED_BYTES,
        failed: false,
    };
    assert!(inflate_into(b"\x7fELF not really", MAX_INFLATED_BYTES, &mut sink).is_none());
    // Within its DWARF budget only: the same file with a budget below its inflated size.
    assert!(plain_copy_in(&debug_file(&prog), &dir, 2000).is_none());
    assert_eq!(dir.names().unwrap().len(), 0);
    let _ = std::fs::remove_dir_all(&d);
}

/// Check that past its budget the cache removes its oldest entries first,
/// never the one just written, and leaves other files alone.
#[test]
fn the_cache_keeps_to_its_budget_oldest_first() {
    let Some((d, dir)) = root_dir("budget") else {
        return;
    };
    for (i, name) in ["a.debug", "b.debug", "c.debug", "notes.txt"]
        .iter()
        .enumerate()
    {
        let path = d.join("cache").join(name);
        std::fs::write(&path, vec![0u8; 1000]).unwrap();
        let t = std::time::SystemTime::UNIX_EPOCH
            + std::time::Duration::from_secs(1_000_000 + i as u64);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }
    // a is the oldest but was just written: b goes; then, c kept, a goes.
    keep_within_budget(&dir, "a.debug", 2000);
    let mut left: Vec<String> = dir
        .names()
        .unwrap()
        .into_iter()
        .map(|n| n.into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["a.debug", "c.debug", "notes.txt"]);
    keep_within_budget(&dir, "c.debug", 1000);
    let mut left: Vec<String> = dir
        .names()
        .unwrap()
        .into_iter()
        .map(|n| n.into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["c.debug", "notes.txt"]);
    let _ = std::fs::remove_dir_all(&d);
}

/// Check that a section whose alignment would pad the copy to gigabytes
/// gets no copy (object places sections at their alignment), and that a
/// copy left cut short, or half-written by a killed recording, is not used
/// and goes.
#[test]
fn lying_alignments_and_broken_copies_are_refused() {
    let Some((d, dir)) = root_dir("lying") else {
        return;
    };
    let (prog, _) = compiled(&d, "prog", PROGRAM);
    let mut data = std::fs::read(&prog).unwrap();
    let comment = {
        let file = ElfFile64::<Endianness>::parse(&*data).unwrap();
        let shoff = file.elf_header().e_shoff(Endianness::Little) as usize;
        shoff + 64 * file.section_by_name(".comment").unwrap().index().0
    };
    // sh_addralign: the header's last field but one.
    data[comment + 48..comment + 56].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let liar = d.join("liar");
    std::fs::write(&liar, &data).unwrap();
    assert!(plain_copy_in(&debug_file(&liar), &dir, MAX_INFLATED_BYTES).is_none());
    assert_eq!(dir.names().unwrap().len(), 0, "its temporary file removed");

    let good = plain_copy_in(&debug_file(&prog), &dir, MAX_INFLATED_BYTES).unwrap();
    let name = dir.names().unwrap()[0].clone().into_string().unwrap();
    let len = good.file.metadata().unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("cache").join(&name))
        .unwrap()
        .set_len(len - 100)
        .unwrap();
    assert!(
        open_entry(&dir, &name).is_none(),
        "a copy cut short is not used"
    );

    let stale = d.join("cache").join(format!("{TMP_PREFIX}0123"));
    std::fs::write(&stale, b"half").unwrap();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(old)
        .unwrap();
    keep_within_budget(&dir, &name, CACHE_BUDGET_BYTES);
    assert!(
        !stale.exists(),
        "a killed recording's half-written copy goes"
    );
    let _ = std::fs::remove_dir_all(&d);
}
