//! Integration tests of node's JavaScript frames: real kernel, real BPF,
//! as root. Oracles: the workload's own clock and source, and node's own
//! sampler (`--cpu-prof`) on the same run.

use sysprof_tests::*;

/// Samples of `node --perf-basic-prof` running hot.js, with `tamper` applied
/// to its map: the profile, node's pid, sysprof's stderr, and the hot
/// loop's own CPU time in ms (as hot.js measured it).
fn record_node(test: &str, tamper: &str) -> Option<(Profile, u64, String, f64)> {
    let node = node(test)?;
    let dir = scratch(test);
    let script = workspace_root().join("tests/workloads/hot.js");
    let out_path = dir.join("p.json.gz");
    let mut args = vec![
        "--no-off-cpu",
        "--",
        node.to_str().unwrap(),
        "--perf-basic-prof",
        script.to_str().unwrap(),
        "1500",
    ];
    if !tamper.is_empty() {
        args.push(tamper);
    }
    // node leaves isolate-*.log files in its working directory: keep them in the scratch one.
    let out = std::process::Command::new(sysprof_bin())
        .current_dir(&dir)
        .arg("record")
        .arg("-o")
        .arg(&out_path)
        .args(&args)
        .output()
        .unwrap();
    assert_success(&out);
    let pid = field(&out.stdout, "pid").expect("node printed its pid");
    for suffix in ["", ".real"] {
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map{suffix}"));
    }
    Some((
        Profile::load(&out_path),
        pid,
        String::from_utf8_lossy(&out.stderr).into_owned(),
        loop_ms(&out.stdout),
    ))
}

/// The CPU time of hot.js's loop, ms, from its `loop_ms=` line.
fn loop_ms(stdout: &[u8]) -> f64 {
    String::from_utf8_lossy(stdout)
        .lines()
        .find_map(|l| l.strip_prefix("loop_ms="))
        .expect("hot.js says its loop's CPU time")
        .parse()
        .unwrap()
}

fn hot_js_samples(profile: &Profile, pid: u64) -> (usize, usize) {
    let t = profile.thread(pid, pid).expect("node's main thread");
    let stacks = t.on_cpu_stacks(&profile.categories());
    let named = stacks
        .iter()
        .filter(|s| s.iter().any(|(n, _)| n.contains("sysprofHotLoop")))
        .count();
    (named, stacks.len())
}

/// Check that node with no flag (no perf map, no jitdump) has its
/// JavaScript functions named from V8's own objects, read at the sample:
/// of the main thread's samples, as many as the hot loop's own CPU time
/// gives (−20 %) have `sysprofHotLoop` (category JavaScript, file hot.js)
/// as their innermost JavaScript frame, and ≥ 90 % of those reach `_start`
/// through `node::Start` by V8's frame pointers.
#[test]
fn node_functions_are_named_without_flags() {
    let test = "node_functions_are_named_without_flags";
    if !can_record(test) {
        return;
    }
    let Some(node) = node(test) else { return };
    let dir = scratch(test);
    let script = workspace_root().join("tests/workloads/hot.js");
    let out_path = dir.join("p.json.gz");
    let out = std::process::Command::new(sysprof_bin())
        .current_dir(&dir)
        .args(["record", "--no-off-cpu", "-o"])
        .arg(&out_path)
        .args([
            "--",
            node.to_str().unwrap(),
            script.to_str().unwrap(),
            "1500",
        ])
        .output()
        .unwrap();
    assert_success(&out);
    let pid = field(&out.stdout, "pid").expect("node printed its pid");
    let loop_ms = loop_ms(&out.stdout);
    let profile = Profile::load(&out_path);
    let t = profile.thread(pid, pid).expect("node's main thread");
    let stacks = t.on_cpu_stacks(&profile.categories());
    let hot: Vec<_> = stacks
        .iter()
        .filter(|s| {
            s.iter()
                .rev()
                .find(|(_, c)| c == "JavaScript")
                .is_some_and(|(n, _)| n == "sysprofHotLoop")
        })
        .collect();
    let rooted = hot
        .iter()
        .filter(|s| {
            s.first().is_some_and(|(n, _)| n == "_start")
                && s.iter().any(|(n, _)| n.starts_with("node::Start"))
        })
        .count();
    let files = t.func_files("sysprofHotLoop");
    eprintln!("node, no flag: {} samples in sysprofHotLoop (files {files:?}), {rooted} of them reach _start; its loop {loop_ms} ms of CPU", hot.len());
    // The loop's time includes its schedstat reads (readFileSync: ~5 % of
    // its samples), which are not sysprofHotLoop's.
    assert!(
        hot.len() as f64 >= loop_ms * 0.8,
        "the loop's {loop_ms} ms of CPU: {} samples in sysprofHotLoop",
        hot.len()
    );
    assert!(
        files.iter().all(|f| f.ends_with("tests/workloads/hot.js")) && !files.is_empty(),
        "sysprofHotLoop's file is hot.js: {files:?}"
    );
    assert!(
        rooted * 100 >= hot.len() * 90,
        "{rooted} of {} sysprofHotLoop stacks reach _start through node::Start",
        hot.len()
    );
}

/// Check that the hot JavaScript function's name, from the perf map node
/// writes, appears in the profile's frames: in at least 90 % of the samples
/// its loop's own CPU time gives.
#[test]
fn node_jit_frames_are_named_from_the_perf_map() {
    if !can_record("node_jit_frames_are_named_from_the_perf_map") {
        return;
    }
    let Some((profile, pid, _, loop_ms)) =
        record_node("node_jit_frames_are_named_from_the_perf_map", "")
    else {
        return;
    };
    let (named, total) = hot_js_samples(&profile, pid);
    eprintln!("node: {named} of {total} main-thread samples in sysprofHotLoop, its loop {loop_ms} ms of CPU");
    assert!(
        total >= 1000,
        "node ran its hot loop for 1.5 s of its own CPU time: {total} samples"
    );
    // Judged against the loop's own CPU time: node's start-up before it is
    // 150-200 samples more on a busy machine (there 89 % of all samples
    // were named, 97 % of the loop's).
    let in_loop = loop_ms * 999.0 / 1000.0;
    assert!(named as f64 >= in_loop * 0.9, "the hot JS function is named in {named} samples of a loop of {loop_ms} ms of CPU at 999 Hz ({total} samples in all)");
}

/// Check that a perf map owned by another user, or a symlink, is refused
/// with a warning: no JIT names come from it.
#[test]
fn hostile_perf_maps_are_refused_with_a_warning() {
    for (tamper, expected) in [("chown", "owned by uid 65534"), ("symlink", "is a symlink")] {
        let test = format!("hostile_perf_map_{tamper}");
        if !can_record(&test) {
            return;
        }
        let Some((profile, pid, stderr, loop_ms)) = record_node(&test, tamper) else {
            return;
        };
        let (named, total) = hot_js_samples(&profile, pid);
        eprintln!(
            "hostile {tamper}: {named} of {total} named; stderr: {}",
            stderr
                .lines()
                .find(|l| l.contains("perf map"))
                .unwrap_or("")
        );
        // The JIT code ran and was sampled (so names could have come from
        // the map): judged against the loop's own CPU time, as node's
        // start-up is more of its samples on a busy machine ...
        let in_loop = loop_ms * 999.0 / 1000.0;
        assert!(
            total >= 1000,
            "{total} samples, its loop {loop_ms} ms of CPU at 999 Hz"
        );
        // ... but none was named from it (the map names a function
        // `JS:*sysprofHotLoop …`, in a JIT library): the function is named
        // from V8's own objects, as without a map.
        let t = profile.thread(pid, pid).expect("node's main thread");
        let from_map = t
            .on_cpu_stacks(&profile.categories())
            .iter()
            .filter(|s| {
                s.iter()
                    .any(|(n, c)| n.contains("sysprofHotLoop") && c != "JavaScript")
            })
            .count();
        assert_eq!(from_map, 0, "a {tamper}ed perf map must not name frames");
        assert!(
            named as f64 >= in_loop * 0.8,
            "{named} samples in sysprofHotLoop, named from V8's objects, of a loop of {loop_ms} ms of CPU"
        );
        assert!(
            stderr.contains("warning") && stderr.contains(expected),
            "{tamper}: the warning says why: {stderr}"
        );
    }
}

/// Check that JIT frames are named from the jitdump file a process maps
/// (`node --perf-prof` writes one; no perf map exists then): the hot
/// function in at least 90 % of the samples its loop's own CPU time gives.
#[test]
fn node_jit_frames_are_named_from_its_jitdump() {
    let test = "node_jit_frames_are_named_from_its_jitdump";
    if !can_record(test) {
        return;
    }
    let Some(node) = node(test) else { return };
    let dir = scratch("jitdump");
    let script = workspace_root().join("tests/workloads/hot.js");
    let out_path = dir.join("p.json.gz");
    // node writes jit-PID.dump into its working directory.
    let out = std::process::Command::new(sysprof_bin())
        .current_dir(&dir)
        .args(["record", "-o"])
        .arg(&out_path)
        .args([
            "--no-off-cpu",
            "--",
            node.to_str().unwrap(),
            "--perf-prof",
            script.to_str().unwrap(),
            "1500",
        ])
        .output()
        .unwrap();
    assert_success(&out);
    let pid = field(&out.stdout, "pid").unwrap();
    let profile = Profile::load(&out_path);
    let (named, total) = hot_js_samples(&profile, pid);
    let libs: Vec<String> = profile.json["libs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_string())
        .collect();
    eprintln!(
        "jitdump: {named} of {total} main-thread samples in sysprofHotLoop; JIT libs {:?}",
        libs.iter()
            .filter(|l| l.starts_with("JIT"))
            .collect::<Vec<_>>()
    );
    assert!(libs.contains(&format!("JIT (jit-{pid}.dump)")));
    assert!(
        total >= 1000,
        "node ran its hot loop for 1.5 s of its own CPU time: {total} samples"
    );
    // Judged against the loop's own CPU time, not all of node's samples:
    // its start-up (loading, snapshot, OpenSSL) is 150-230 samples, more
    // on a busy machine (86 % of all samples named there, 97 % of the
    // loop's).
    let loop_ms = loop_ms(&out.stdout);
    let in_loop = loop_ms * 999.0 / 1000.0;
    assert!(named as f64 >= in_loop * 0.9, "the hot JS function is named in {named} samples of a loop of {loop_ms} ms of CPU at 999 Hz ({total} samples in all)");
}

/// Check JavaScript names against V8's own sampler in the same run: node
/// (no perf-map flag) runs npm's own semver, diff and minimatch
/// (`npmwork.js`) under sysprof and `node --cpu-prof`. The main thread's
/// samples' JavaScript frames (category JavaScript) are held against the
/// cpu-prof profile's functions, by name and file:
/// - every function that is the innermost JavaScript one of ≥ 1 % of
///   sysprof's samples is one cpu-prof knows (a name the program's code
///   really has, in that file), and so is that of ≥ 95 % of the samples
///   (rarer ones V8's sampler may never have caught: `parseOptions`,
///   inlined at the start of `SemVer`, is 0.3-0.6 % here and 0-0.04 % in
///   cpu-prof, whose sampler gives such ticks to the code around it; one
///   on ≥ 1 % that sysprof names inlined at the leaf in most of its
///   samples, which V8's sampler cannot see, must be defined in a file of
///   its name among npm's packages instead: `parseOptions` reached 1.0-1.2 %
///   on a faster host);
/// - of cpu-prof's ten named functions on most samples (inclusive), at
///   least six within 3 pp and every one within 15 pp. The functions
///   V8's optimizing compiler inlined are among them (`test` in
///   `maxSatisfying`'s callback, `Minimatch` in `minimatch`, and both
///   `maxSatisfying` and `minimatch` in the loop's on-stack-replaced code:
///   without their inlined functions named they were 16-39 pp off).
///   `SemVer` is 4.5-10.3 pp above cpu-prof's in every run, `test` 1.7-5.3:
///   sysprof's samples in SemVer's own code are ~15 % more than V8's under
///   each of its callers alike (its self share 37.6 % against 33.2 %), not
///   taken from another function's; not explained (what was ruled out,
///   and where V8 puts those ticks instead, `test`'s own line 203 `new
///   SemVer(...)`: ARCHITECTURE.md decision 44).
#[test]
fn node_functions_match_cpu_prof() {
    let test = "node_functions_match_cpu_prof";
    if !can_record(test) {
        return;
    }
    let Some(node) = node(test) else { return };
    let npm = std::path::Path::new("/usr/lib/node_modules/npm/node_modules");
    if !npm.join("semver").is_dir() {
        skip(
            test,
            "npm's bundled packages are needed (/usr/lib/node_modules/npm)",
        );
        return;
    }
    let dir = scratch(test);
    let prof_dir = dir.join("cpuprof");
    let _ = std::fs::remove_dir_all(&prof_dir);
    let script = workspace_root().join("tests/workloads/npmwork.js");
    let out_path = dir.join("p.json.gz");
    let out = std::process::Command::new(sysprof_bin())
        .current_dir(&dir)
        .args(["record", "--no-off-cpu", "-o"])
        .arg(&out_path)
        .arg("--")
        .arg(&node)
        .arg("--cpu-prof")
        .arg("--cpu-prof-dir")
        .arg(&prof_dir)
        .arg(&script)
        .arg("3000")
        .output()
        .unwrap();
    assert_success(&out);
    let pid = field(&out.stdout, "pid").expect("npmwork.js printed its pid");
    let cpuprof_path = std::fs::read_dir(&prof_dir)
        .expect("node wrote its CPU profile")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "cpuprofile"))
        .expect("a .cpuprofile");
    let cp: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&cpuprof_path).unwrap()).unwrap();
    let base = |url: &str| url.rsplit('/').next().unwrap_or("").to_string();
    // cpu-prof's nodes: id -> (function, parent).
    type Func = (String, String);
    let mut func_of: std::collections::HashMap<u64, Option<Func>> = Default::default();
    let mut parent: std::collections::HashMap<u64, u64> = Default::default();
    for n in cp["nodes"].as_array().unwrap() {
        let id = n["id"].as_u64().unwrap();
        let cf = &n["callFrame"];
        let url = cf["url"].as_str().unwrap_or("");
        let name = cf["functionName"].as_str().unwrap_or("");
        let f = (!url.is_empty()).then(|| {
            (
                if name.is_empty() {
                    "(anonymous)".to_string()
                } else {
                    name.to_string()
                },
                base(url),
            )
        });
        func_of.insert(id, f);
        for c in n["children"].as_array().into_iter().flatten() {
            parent.insert(c.as_u64().unwrap(), id);
        }
    }
    let known: std::collections::HashSet<&Func> = func_of.values().flatten().collect();
    let mut theirs: std::collections::HashMap<Func, usize> = Default::default();
    let mut their_total = 0usize;
    for s in cp["samples"].as_array().unwrap() {
        let mut chain = std::collections::HashSet::new();
        let mut id = Some(s.as_u64().unwrap());
        while let Some(i) = id {
            if let Some(Some(f)) = func_of.get(&i) {
                chain.insert(f.clone());
            }
            id = parent.get(&i).copied();
        }
        // (program), (garbage collector), (idle): no JavaScript frame.
        if chain.is_empty() {
            continue;
        }
        their_total += 1;
        for f in chain {
            *theirs.entry(f).or_default() += 1;
        }
    }
    let profile = Profile::load(&out_path);
    let t = profile.thread(pid, pid).expect("node's main thread");
    // sysprof's stacks, and the same as V8's sampler would see them.
    let mut ours: std::collections::HashMap<Func, usize> = Default::default();
    let mut as_v8: std::collections::HashMap<Func, usize> = Default::default();
    let (mut our_total, mut v8_total, mut gc) = (0usize, 0usize, 0usize);
    let (mut frameless, mut leaf_inlined) = (0usize, 0usize);
    let mut innermost: std::collections::HashMap<Func, usize> = Default::default();
    // Of those, the samples whose innermost JavaScript function sysprof
    // names as inlined into the frame's code: V8's sampler gives those
    // ticks to the code they were inlined in.
    let mut innermost_inlined: std::collections::HashMap<Func, usize> = Default::default();
    let mut code = CodeBytes::default();
    let js_of = |s: &[FrameView]| -> Vec<Func> {
        s.iter()
            .filter(|f| f.category == "JavaScript")
            .map(|f| (f.name.clone(), base(&f.file)))
            .collect()
    };
    for s in t.stack_views(&profile.json, &profile.categories()) {
        // V8's sampler puts garbage collection apart; so does this count.
        if s.iter()
            .any(|f| f.name.contains("Heap::CollectGarbage") || f.name.contains("Scavenger"))
        {
            gc += 1;
            continue;
        }
        let js = js_of(&s);
        if let Some(inner) = js.last() {
            our_total += 1;
            *innermost.entry(inner.clone()).or_default() += 1;
            if s.iter()
                .rev()
                .find(|f| f.category == "JavaScript")
                .is_some_and(|f| f.inline_depth > 0)
            {
                *innermost_inlined.entry(inner.clone()).or_default() += 1;
            }
            for f in js.into_iter().collect::<std::collections::HashSet<_>>() {
                *ours.entry(f).or_default() += 1;
            }
        }
        let (seen, how) = as_v8_sampler_sees(&s, &mut code);
        frameless += usize::from(how == V8Sees::CallerOfFramelessDropped);
        leaf_inlined += usize::from(how == V8Sees::LeafInliningFolded);
        let js = js_of(&seen);
        if !js.is_empty() {
            v8_total += 1;
            for f in js.into_iter().collect::<std::collections::HashSet<_>>() {
                *as_v8.entry(f).or_default() += 1;
            }
        }
    }
    let mut top: Vec<(&Func, &usize)> = theirs
        .iter()
        .filter(|(f, _)| f.0 != "(anonymous)")
        .collect();
    top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let share = |n: usize, of: usize| n as f64 / of as f64;
    let (mut close, mut far, mut table) = (0, 0, String::new());
    for (f, &n) in top.iter().take(10) {
        let (th, mi, seen) = (
            share(n, their_total),
            share(ours.get(*f).copied().unwrap_or(0), our_total),
            share(as_v8.get(*f).copied().unwrap_or(0), v8_total),
        );
        close += usize::from((seen - th).abs() <= 0.03);
        far += usize::from((mi - th).abs() > 0.10);
        table.push_str(&format!(
            "\n  cpu-prof {:6.2} %, sysprof {:6.2} %, as V8's sampler sees it {:6.2} %  {} ({})",
            th * 100.0,
            mi * 100.0,
            seen * 100.0,
            f.0,
            f.1
        ));
    }
    // A function V8's sampler never caught (it samples less often beside a
    // busy CPU, or gave to the function its code is inlined in) is not
    // judged if rare; one on ≥ 1 % of samples must be one it knows.
    let innermost_known: usize = innermost
        .iter()
        .filter(|(f, _)| known.contains(f))
        .map(|(_, &n)| n)
        .sum();
    // One V8's sampler cannot see (named inlined at the leaf in most of
    // its samples) is held to the program's source instead: a function of
    // that name in a file of that name among npm's packages. On a faster
    // host `parseOptions`, inlined at the start of `SemVer`, reached
    // 1.0-1.2 % of sysprof's samples and none of cpu-prof's.
    let (mut unknown, mut in_source): (Vec<&Func>, Vec<&Func>) = (Vec::new(), Vec::new());
    for (f, &n) in &innermost {
        if known.contains(f) || n * 100 < our_total {
            continue;
        }
        let inlined = innermost_inlined.get(f).copied().unwrap_or(0);
        if inlined * 2 > n && defined_in_source(npm, f) {
            in_source.push(f);
        } else {
            unknown.push(f);
        }
    }
    eprintln!(
        "node + npm's packages: {our_total} sysprof samples with JavaScript frames ({gc} in GC left out), {their_total} cpu-prof's; innermost function known to cpu-prof in {innermost_known}, unknown with ≥ 1 %: {unknown:?} (and inlined at the leaf, found in npm's source: {in_source:?}); as V8's sampler sees them: {frameless} samples lose the caller of a builtin's frameless part, {leaf_inlined} their leaf's inlined functions; inclusive shares of cpu-prof's top ten:{table}"
    );
    assert!(
        our_total >= 1000 && their_total >= 1000,
        "too few samples to compare: sysprof {our_total}, cpu-prof {their_total}"
    );
    assert!(
        unknown.is_empty(),
        "functions on ≥ 1 % of samples that cpu-prof never saw: {unknown:?}"
    );
    assert!(
        innermost_known * 100 >= our_total * 95,
        "{innermost_known} of {our_total} samples' innermost JavaScript function is one cpu-prof knows"
    );
    // Both of V8's blind spots were in the run, so the check bites: the
    // profile kept the builtins' frameless leaves, and marked the
    // functions TurboFan inlined by their inline depth.
    assert!(
        frameless * 50 >= our_total && leaf_inlined * 50 >= our_total,
        "of {our_total} samples, {frameless} leaves in a builtin's frameless part with their caller, {leaf_inlined} leaves in inlined functions: fewer than 2 % each"
    );
    assert!(
        close == 10 && far == 0,
        "{close} of cpu-prof's ten top functions within 3 pp as V8's sampler sees sysprof's stacks, {far} more than 10 pp off as sysprof sees them:{table}"
    );
}

/// How [`as_v8_sampler_sees`] changed a stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum V8Sees {
    Same,
    CallerOfFramelessDropped,
    LeafInliningFolded,
}

/// A sample's stack (root first) as V8's own sampler, `node --cpu-prof`,
/// would have taken it. Two things it cannot see, by its design (node 20's
/// V8, `src/profiler/tick-sample.cc` and `symbolizer.cc`), and sysprof
/// shows:
/// - It walks from the frame pointer, and takes the sampled instruction's
///   code for the leaf. Where that is a builtin's part that keeps no frame
///   (`StringAdd_CheckNone`'s and `ToNumber`'s fast paths, no `push rbp;
///   mov rbp, rsp` before the instruction), the frame pointer is still
///   the JavaScript function's that called it, and the walk goes on from
///   that function's caller: the function is not in V8's stack. Its code
///   is read here from the library at the frame's address.
/// - It names the sampled instruction by its code object's function only:
///   the functions its compiler inlined there are expanded at return
///   addresses, not at the leaf.
fn as_v8_sampler_sees(stack: &[FrameView], code: &mut CodeBytes) -> (Vec<FrameView>, V8Sees) {
    let mut s = stack.to_vec();
    // The sample lands in user code (a page fault's kernel frames above it
    // end in the instruction that faulted).
    while s.last().is_some_and(|f| f.category == "Kernel") {
        s.pop();
    }
    let Some(leaf) = s.last() else {
        return (s, V8Sees::Same);
    };
    if leaf.category == "JavaScript" && leaf.inline_depth > 0 {
        while s
            .last()
            .is_some_and(|f| f.category == "JavaScript" && f.inline_depth > 0)
        {
            s.pop();
        }
        return (s, V8Sees::LeafInliningFolded);
    }
    let caller_is_js = s.len() >= 2 && s[s.len() - 2].category == "JavaScript";
    let frameless = leaf.name.starts_with("Builtins_")
        && leaf
            .native
            .as_ref()
            .is_some_and(|(lib, at, start)| code.keeps_no_frame(lib, *start, *at));
    if caller_is_js && frameless {
        // The caller's whole machine frame: it and what was inlined into it.
        let mut i = s.len() - 2;
        while i > 0 && s[i].inline_depth > 0 && s[i - 1].category == "JavaScript" {
            i -= 1;
        }
        s.drain(i..s.len() - 1);
        return (s, V8Sees::CallerOfFramelessDropped);
    }
    (s, V8Sees::Same)
}

/// Whether function `f` (name, file name) is defined in a file of that
/// name under `dir` (npm's packages): `function NAME(`, `NAME(…) {` as a
/// method, or `NAME = ` / `const NAME` bound to a function.
fn defined_in_source(dir: &std::path::Path, f: &(String, String)) -> bool {
    let (name, file) = f;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let Ok(kind) = e.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() && path.file_name().is_some_and(|n| n == file.as_str()) {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                if [
                    format!("function {name}("),
                    format!("function {name} ("),
                    format!("{name} = ("),
                    format!("{name} = function"),
                    format!("const {name} ="),
                    format!("\n  {name}("),
                ]
                .iter()
                .any(|p| text.contains(p.as_str()))
                {
                    return true;
                }
            }
        }
    }
    false
}

/// Libraries' bytes, read once each (the test reads node's own code).
#[derive(Default)]
struct CodeBytes(std::collections::HashMap<String, Option<Vec<u8>>>);

impl CodeBytes {
    /// Whether the code from `start` up to `at` (offsets into `lib`'s file)
    /// sets up no frame pointer (`push rbp; mov rbp, rsp`).
    fn keeps_no_frame(&mut self, lib: &str, start: u64, at: u64) -> bool {
        let bytes = self
            .0
            .entry(lib.to_string())
            .or_insert_with(|| std::fs::read(lib).ok());
        let Some(b) = bytes
            .as_ref()
            .and_then(|b| b.get(start as usize..at as usize))
        else {
            return false;
        };
        !b.windows(4).any(|w| w == [0x55, 0x48, 0x89, 0xe5])
    }
}
