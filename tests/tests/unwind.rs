//! Integration tests of DWARF unwinding: real kernel, real BPF, as root.
//! Oracle: the call chain written in the workload's source.

use sysprof_tests::*;

fn assert_success(out: &std::process::Output) {
    assert!(out.status.success(), "sysprof failed ({}):\nstderr: {}", out.status, String::from_utf8_lossy(&out.stderr));
}

const CHAIN: [&str; 6] = ["level1", "level2", "level3", "level4", "level5", "level6"];

/// Share of on-CPU samples in level6 whose stack holds the whole chain, in
/// order, right under the thread's start (start_thread or clone3).
fn whole_chain_share(call_graph: &str, exe: &std::path::Path, dir: &std::path::Path) -> (usize, usize) {
    let out_path = dir.join(format!("{call_graph}.json.gz"));
    let out = record(&["--call-graph", call_graph, "--no-off-cpu", "--", exe.to_str().unwrap(), "1.5"], &out_path);
    assert_success(&out);
    eprintln!("{call_graph}: {}", String::from_utf8_lossy(&out.stderr).trim());
    let (pid, tid) = (field(&out.stdout, "pid").unwrap(), field(&out.stdout, "tid").unwrap());
    let profile = Profile::load(&out_path);
    let t = profile.thread(pid, tid).expect("the deep thread");
    let stacks = t.on_cpu_stacks(&profile.categories());
    let mut whole = 0;
    for s in &stacks {
        let names: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
        let Some(root) = names.iter().position(|n| *n == "start_thread" || *n == "clone3" || n.starts_with("__clone")) else { continue };
        let Some(i1) = names.iter().position(|n| *n == "level1") else { continue };
        // deep -> level1 -> ... -> level6, below the thread root.
        if i1 > root && names.get(i1 - 1) == Some(&"deep") && names[i1..].starts_with(&CHAIN) {
            whole += 1;
        }
    }
    (whole, stacks.len())
}

/// Check that without frame pointers at least 95% of samples unwind through
/// all six functions, in order, to the thread's start with DWARF unwinding
/// (and report what frame pointers give on the same binary).
#[test]
fn dwarf_unwinding_reaches_the_thread_root_without_frame_pointers() {
    if !can_record("dwarf_unwinding_reaches_the_thread_root_without_frame_pointers") {
        return;
    }
    let dir = scratch("deep");
    let exe = build_c("deep", &dir.join("deep"), &["-O2", "-fomit-frame-pointer"]);
    let (dwarf_whole, dwarf_total) = whole_chain_share("dwarf", &exe, &dir);
    let (fp_whole, fp_total) = whole_chain_share("fp", &exe, &dir);
    eprintln!(
        "deep: whole chain to the thread root: dwarf {dwarf_whole}/{dwarf_total} ({:.1}%), fp {fp_whole}/{fp_total} ({:.1}%)",
        dwarf_whole as f64 * 100.0 / dwarf_total.max(1) as f64,
        fp_whole as f64 * 100.0 / fp_total.max(1) as f64
    );
    assert!(dwarf_total >= 1000, "1.5 s of CPU at 999 Hz: {dwarf_total} samples");
    assert!(dwarf_whole * 100 >= dwarf_total * 95, "dwarf: {dwarf_whole} of {dwarf_total} samples have the whole chain");
}

/// Check that the same binary, stripped, with its debug file under
/// /usr/lib/debug/.build-id/, still gets the function names.
#[test]
fn stripped_binary_gets_names_from_its_build_id_debug_file() {
    if !can_record("stripped_binary_gets_names_from_its_build_id_debug_file") {
        return;
    }
    let dir = scratch("stripped");
    let full = build_c("deep", &dir.join("deep.full"), &["-O2", "-fomit-frame-pointer", "-Wl,--build-id=sha1"]);
    let stripped = dir.join("deep");
    let st = std::process::Command::new("objcopy").arg("--strip-all").arg(&full).arg(&stripped).status().expect("objcopy (binutils)");
    assert!(st.success());
    // The build id, from the ELF note, names the debug file.
    let notes = std::process::Command::new("readelf").args(["-n"]).arg(&stripped).output().unwrap();
    let text = String::from_utf8_lossy(&notes.stdout);
    let id = text.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")).expect("a build id").trim().to_string();
    let debug_dir = std::path::PathBuf::from(format!("/usr/lib/debug/.build-id/{}", &id[..2]));
    std::fs::create_dir_all(&debug_dir).unwrap();
    let debug_file = debug_dir.join(format!("{}.debug", &id[2..]));
    let st = std::process::Command::new("objcopy").arg("--only-keep-debug").arg(&full).arg(&debug_file).status().unwrap();
    assert!(st.success());
    let nm = std::process::Command::new("nm").arg(&stripped).output().unwrap();
    assert!(!String::from_utf8_lossy(&nm.stdout).contains("level6"), "the binary is stripped");

    let out_path = dir.join("p.json.gz");
    let out = record(&["--no-off-cpu", "--", stripped.to_str().unwrap(), "1.0"], &out_path);
    let _ = std::fs::remove_file(&debug_file);
    assert_success(&out);
    let (pid, tid) = (field(&out.stdout, "pid").unwrap(), field(&out.stdout, "tid").unwrap());
    let profile = Profile::load(&out_path);
    let t = profile.thread(pid, tid).expect("the deep thread");
    let stacks = t.on_cpu_stacks(&profile.categories());
    let named = stacks.iter().filter(|s| s.iter().any(|(n, _)| n == "level6")).count();
    eprintln!("stripped: {named} of {} samples name level6", stacks.len());
    assert!(named * 10 >= stacks.len() * 9);
}
