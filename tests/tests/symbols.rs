//! Integration tests of naming a stripped binary's functions from its debug
//! file, found by its build id under /usr/lib/debug or fetched from a
//! debuginfod server: real kernel, real BPF, as root. Oracle: the
//! functions written in the workload's source.

use sysprof_tests::*;

/// deep.c built without frame pointers (`deep.full`, with a build id) and a
/// stripped copy (`deep`); returns (full, stripped, build id in hex).
fn stripped_deep(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let full = build_c(
        "deep",
        &dir.join("deep.full"),
        &["-O2", "-fomit-frame-pointer", "-Wl,--build-id=sha1"],
    );
    let stripped = dir.join("deep");
    let st = std::process::Command::new("objcopy")
        .arg("--strip-all")
        .arg(&full)
        .arg(&stripped)
        .status()
        .expect("objcopy (binutils)");
    assert!(st.success());
    // The build id, from the ELF note, names the debug file.
    let notes = std::process::Command::new("readelf")
        .arg("-n")
        .arg(&stripped)
        .output()
        .unwrap();
    let id = String::from_utf8_lossy(&notes.stdout)
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Build ID: ")
                .map(|s| s.trim().to_string())
        })
        .expect("a build id");
    (full, stripped, id)
}

/// Check that the same binary, stripped, with its debug file under
/// /usr/lib/debug/.build-id/, still gets the function names.
#[test]
fn stripped_binary_gets_names_from_its_build_id_debug_file() {
    if !can_record("stripped_binary_gets_names_from_its_build_id_debug_file") {
        return;
    }
    let dir = scratch("stripped");
    let (full, stripped, id) = stripped_deep(&dir);
    let debug_dir = std::path::PathBuf::from(format!("/usr/lib/debug/.build-id/{}", &id[..2]));
    std::fs::create_dir_all(&debug_dir).unwrap();
    let debug_file = debug_dir.join(format!("{}.debug", &id[2..]));
    let st = std::process::Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&full)
        .arg(&debug_file)
        .status()
        .unwrap();
    assert!(st.success());
    let nm = std::process::Command::new("nm")
        .arg(&stripped)
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&nm.stdout).contains("level6"),
        "the binary is stripped"
    );

    let out_path = dir.join("p.json.gz");
    let out = record(
        &["--no-off-cpu", "--", stripped.to_str().unwrap(), "1.0"],
        &out_path,
    );
    let _ = std::fs::remove_file(&debug_file);
    assert_success(&out);
    let (pid, tid) = (
        field(&out.stdout, "pid").unwrap(),
        field(&out.stdout, "tid").unwrap(),
    );
    let profile = Profile::load(&out_path);
    let t = profile.thread(pid, tid).expect("the deep thread");
    let stacks = t.on_cpu_stacks(&profile.categories());
    let named = stacks
        .iter()
        .filter(|s| s.iter().any(|(n, _)| n == "level6"))
        .count();
    eprintln!("stripped: {named} of {} samples name level6", stacks.len());
    assert!(
        stacks.len() >= 500,
        "1 s of CPU at 999 Hz: {} samples",
        stacks.len()
    );
    assert!(
        named * 100 >= stacks.len() * 95,
        "{named} of {} samples name level6",
        stacks.len()
    );
}

/// Check that --debuginfod fetches a stripped binary's debug file from a
/// debuginfod server (one on loopback, serving /buildid/ID/debuginfo) and
/// names its functions, and that without the flag nothing is fetched.
#[test]
fn debuginfod_fetches_missing_debug_files() {
    if !can_record("debuginfod_fetches_missing_debug_files") {
        return;
    }
    let dir = scratch("debuginfod");
    let (full, stripped, id) = stripped_deep(&dir);
    let served = dir.join(format!("srv/buildid/{id}"));
    std::fs::create_dir_all(&served).unwrap();
    assert!(std::process::Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&full)
        .arg(served.join("debuginfo"))
        .status()
        .unwrap()
        .success());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = std::process::Command::new("python3")
        .args([
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            &port.to_string(),
            "--directory",
        ])
        .arg(dir.join("srv"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("python3 serves the debug file");
    std::thread::sleep(std::time::Duration::from_millis(700));
    let run = |extra: &[&str], name: &str| {
        let out_path = dir.join(name);
        let out = std::process::Command::new(sysprof_bin())
            .env("DEBUGINFOD_URLS", format!("http://127.0.0.1:{port}"))
            .env("DEBUGINFOD_CACHE_PATH", dir.join("cache"))
            .args(["record", "--no-off-cpu", "-o"])
            .arg(&out_path)
            .args(extra)
            .args(["--", stripped.to_str().unwrap(), "0.5"])
            .output()
            .unwrap();
        assert_success(&out);
        let (pid, tid) = (
            field(&out.stdout, "pid").unwrap(),
            field(&out.stdout, "tid").unwrap(),
        );
        let profile = Profile::load(&out_path);
        let t = profile.thread(pid, tid).expect("the deep thread");
        let stacks = t.on_cpu_stacks(&profile.categories());
        let named = stacks
            .iter()
            .filter(|s| s.iter().any(|(n, _)| n == "level6"))
            .count();
        // What the summary says of code without names.
        let said = String::from_utf8_lossy(&out.stderr)
            .lines()
            .find(|l| l.contains("ran in code without symbols"))
            .map(str::to_string);
        (named, stacks.len(), said)
    };
    // DEBUGINFOD_URLS set: fetched unless told not to (as perf does).
    let without = run(&["--no-debuginfod"], "without.json.gz");
    let with = run(&[], "with.json.gz");
    let _ = server.kill();
    let _ = server.wait();
    eprintln!(
        "debuginfod: without the flag {}/{} named, with it {}/{}",
        without.0, without.1, with.0, with.1
    );
    assert!(
        without.1 >= 250 && with.1 >= 250,
        "0.5 s of CPU at 999 Hz each: {} and {} samples",
        without.1,
        with.1
    );
    assert_eq!(without.0, 0, "nothing is fetched with --no-debuginfod");
    // The stripped program spins in its own code: the summary names it,
    // with its share, and says how to get its names; once they are there
    // it says nothing.
    let said = without
        .2
        .expect("the summary says the program has no symbols");
    assert!(
        said.contains(stripped.to_str().unwrap()) && said.contains("DEBUGINFOD_URLS"),
        "{said}"
    );
    let share: f64 = said
        .split("sysprof: ")
        .last()
        .and_then(|l| l.split('%').next())
        .and_then(|n| n.trim().parse().ok())
        .expect("a share in the line");
    assert!(
        share >= 90.0,
        "the program's own code is most user samples: {said}"
    );
    assert_eq!(with.2, None, "named: nothing to say");
    assert!(
        with.0 * 100 >= with.1 * 95,
        "the fetched debug file names level6 in {} of {}",
        with.0,
        with.1
    );
    assert!(dir.join("cache").exists(), "fetched files are cached");
}
