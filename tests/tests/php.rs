//! Integration tests of PHP frames: Debian's PHP 8.2 CLI, real BPF, as root,
//! one at a time. The oracles are the script's own CPU clock per function
//! (getrusage around each call) and, for a program nobody here wrote
//! (Composer building a class map), its own source files.

use std::path::Path;
use std::process::Command;

use sysprof_tests::*;

/// Check PHP 8.2's layout in sysprof's table against what a running
/// script's memory holds (`tests/oracles/php_layout.py`, reading it through
/// /proc/PID/mem as root): every offset the kernel and the reader use.
#[test]
fn the_php_layout_matches_what_a_running_script_holds() {
    let test = "the_php_layout_matches_what_a_running_script_holds";
    let Some((php, _)) = php_tools(test) else {
        return;
    };
    let oracle = workspace_root().join("tests/oracles/php_layout.py");
    let out = Command::new("python3")
        .arg(oracle)
        .arg(&php)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let l = sysprof::runtimes::php::binary::layout("8.2").expect("8.2 is read");
    let expect = [
        ("eg_current_execute_data", l.eg_current_execute_data),
        ("ex_func", l.ex_func as u64),
        ("ex_prev", l.ex_prev as u64),
        ("ex_call_info", l.ex_call_info as u64),
        ("fn_name", l.fn_name),
        ("fn_scope", l.fn_scope),
        ("op_filename", l.op_filename),
        ("op_line_start", l.op_line_start),
        ("opline_lineno", l.opline_lineno as u64),
    ];
    for (field, want) in expect {
        let said = text
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{field}=")))
            .unwrap_or_else(|| panic!("no {field} in {text}"));
        assert_eq!(said, want.to_string(), "{field}: {text}");
    }
    eprintln!("php layout: {text}");
}

/// Check that a PHP script's samples carry its functions by name, with
/// nothing asked of it (`php -n`: no extension, no ini): the split of
/// samples between `Hot::three` and `hot_one` is the split of the process's
/// CPU time the script measured (±3 points); each such stack holds the
/// whole chain `{main}` -> `main` -> `work` -> the function (through
/// `{closure}` where `array_map` called back, `{eval}` where `eval` ran it),
/// with no `execute_ex` left
/// and PHP's native frames below `{main}` down to the program's entry;
/// the functions in the PHP category, with their files and first lines.
#[test]
fn php_functions_are_named_with_the_split_the_script_measured() {
    let test = "php_functions_are_named_with_the_split_the_script_measured";
    if !can_record(test) {
        return;
    }
    let Some((php, _)) = php_tools(test) else {
        return;
    };
    let dir = scratch("php-split");
    let out_path = dir.join("p.json.gz");
    let script = workspace_root().join("tests/workloads/phpsplit.php");
    let out = record(
        &[
            "--",
            php.to_str().unwrap(),
            "-n",
            script.to_str().unwrap(),
            "2.0",
        ],
        &out_path,
    );
    assert_success(&out);
    let pid = field(&out.stdout, "pid").expect("the script printed its pid");
    let (three_ns, one_ns) = (
        field(&out.stdout, "three_ns").unwrap() as f64,
        field(&out.stdout, "one_ns").unwrap() as f64,
    );
    let expected = three_ns / (three_ns + one_ns);
    let profile = Profile::load(&out_path);
    let cats = profile.categories();
    let threads = profile.process_threads(pid);
    let t = threads.first().expect("the php process");
    let stacks = t.stack_views(&profile.json, &cats);
    let mut evals = 0usize;
    let (mut three, mut one, mut whole, mut rooted, mut vm_left) =
        (0usize, 0usize, 0usize, 0usize, 0usize);
    for s in &stacks {
        let names: Vec<&str> = s.iter().map(|f| f.name.as_str()).collect();
        // The VM's loop as it enters the script or leaves it, with no
        // frame of its own yet or any more.
        vm_left += usize::from(names.iter().any(|n| *n == "execute_ex"));
        if names.first().is_some_and(|n| *n == "_start") {
            rooted += 1;
        }
        let Some(hot) = names
            .iter()
            .rposition(|n| *n == "Hot::three" || *n == "hot_one")
        else {
            continue;
        };
        let f = &s[hot];
        assert_eq!(f.category, "PHP", "{names:?}");
        assert!(f.file.ends_with("/phpsplit.php"), "{f:?}");
        let (first, line) = (f.first_line.unwrap_or(0), f.line.unwrap_or(0));
        // Their `function` lines in phpsplit.php, and lines in their bodies
        // (or none: a frame whose saved line was not its own).
        let body = if f.name == "Hot::three" {
            18..=27
        } else {
            30..=39
        };
        assert!(
            first == *body.start() && (line == 0 || body.contains(&line)),
            "{f:?}"
        );
        if f.name == "Hot::three" {
            three += 1;
        } else {
            one += 1;
        }
        // Down to the hot function (cpu_ns may run above it).
        let php_frames: Vec<&str> = s[..=hot]
            .iter()
            .filter(|f| f.category == "PHP")
            .map(|f| f.name.as_str())
            .collect();
        let chain_ok = php_frames == ["{main}", "main", "work", names[hot]]
            || php_frames == ["{main}", "main", "work", "{closure}", "hot_one"]
            || php_frames == ["{main}", "main", "work", "{eval}", "hot_one"];
        whole += usize::from(chain_ok);
        evals += usize::from(php_frames.contains(&"{eval}"));
    }
    let got = three as f64 / (three + one).max(1) as f64;
    eprintln!(
        "php: Hot::three {three}, hot_one {one} of {} samples: share {got:.3} vs {expected:.3} measured; {whole} whole chains ({evals} through {{eval}}); {rooted} reach _start; {vm_left} with execute_ex",
        stacks.len()
    );
    // eval()'s code, freed once run, named by what the kernel saw: ~2 % of
    // the script's CPU.
    assert!(evals >= 5, "{evals} stacks through {{eval}}");
    // Measured 1-16 of ~2,040 (the script entering or leaving the VM).
    assert!(
        vm_left * 100 <= stacks.len() * 2,
        "{vm_left} of {} stacks keep the VM's loop",
        stacks.len()
    );
    assert!(
        three + one >= 1400,
        "2 s of CPU at 999 Hz: {} samples in the hot functions",
        three + one
    );
    assert!(
        (got - expected).abs() <= 0.03,
        "share {got:.3} vs {expected:.3}"
    );
    assert!(
        whole * 100 >= (three + one) * 98,
        "{whole} of {} stacks whole",
        three + one
    );
    assert!(
        rooted * 100 >= stacks.len() * 95,
        "{rooted} of {} stacks reach _start",
        stacks.len()
    );
}

/// Check PHP frames against the source of a program nobody here wrote:
/// Composer (Debian's, in PHP) building an optimized class map of copies of
/// Debian's PHP libraries. Every PHP frame's function must be declared at
/// its first line in its file (`function NAME`, a closure's `function` or
/// `fn`), and its line must lie in that file at or after it; Composer's own
/// class-map code must be among the functions sampled.
#[test]
fn php_frames_agree_with_composers_source() {
    let test = "php_frames_agree_with_composers_source";
    if !can_record(test) {
        return;
    }
    let Some((_, composer)) = php_tools(test) else {
        return;
    };
    let dir = scratch("php-composer");
    let project = dir.join("project");
    std::fs::create_dir_all(project.join("src")).unwrap();
    for i in 0..8 {
        let copy = Command::new("cp")
            .args(["-r", "/usr/share/php"])
            .arg(project.join(format!("src/c{i}")))
            .status()
            .unwrap();
        assert!(copy.success());
    }
    std::fs::write(
        project.join("composer.json"),
        r#"{"name": "sysprof/classmap", "autoload": {"classmap": ["src"]}}"#,
    )
    .unwrap();
    let out_path = dir.join("p.json.gz");
    let run = format!(
        "cd {} && for i in 1 2 3 4; do rm -rf vendor; {} dump-autoload --optimize --no-interaction -q; done",
        project.display(),
        composer.display()
    );
    let out = Command::new(sysprof_bin())
        .args(["record", "-o"])
        .arg(&out_path)
        .args(["--", "sh", "-c", &run])
        .env("COMPOSER_ALLOW_SUPERUSER", "1")
        .output()
        .unwrap();
    assert_success(&out);
    assert!(
        project
            .join("vendor/composer/autoload_classmap.php")
            .exists(),
        "composer built no class map"
    );
    let profile = Profile::load(&out_path);
    let cats = profile.categories();
    let mut files: std::collections::HashMap<String, Option<Vec<String>>> = Default::default();
    let (mut with_php, mut checked, mut no_line, mut bad) = (0usize, 0usize, 0usize, Vec::new());
    let mut names = std::collections::BTreeMap::<String, usize>::new();
    for t in profile.threads() {
        for s in t.stack_views(&profile.json, &cats) {
            let php: Vec<_> = s.iter().filter(|f| f.category == "PHP").collect();
            if php.is_empty() {
                continue;
            }
            with_php += 1;
            *names.entry(php.last().unwrap().name.clone()).or_default() += 1;
            for f in php {
                let lines = files
                    .entry(f.file.clone())
                    .or_insert_with(|| {
                        std::fs::read_to_string(Path::new(&f.file))
                            .ok()
                            .map(|t| t.lines().map(str::to_string).collect())
                    })
                    .as_ref();
                let Some(lines) = lines else { continue };
                checked += 1;
                let (first, line) = (
                    f.first_line.unwrap_or(0) as usize,
                    f.line.unwrap_or(0) as usize,
                );
                let declared = lines.get(first.wrapping_sub(1)).map_or(false, |l| {
                    let name = f.name.rsplit("::").next().unwrap_or("");
                    match name {
                        "{main}" => true,
                        // PHP names a closure in a namespace by it, as its
                        // own traces do: `Symfony\Component\Process\{closure}`.
                        _ if name.ends_with("{closure}") => {
                            l.contains("function") || l.contains("fn")
                        }
                        _ => {
                            l.contains(&format!("function {name}"))
                                || l.contains(&format!("function &{name}"))
                        }
                    }
                });
                // No line (0): the frame's saved one was not its own.
                no_line += usize::from(line == 0);
                let placed = line == 0 || (line >= first && line <= lines.len());
                if !(declared || f.name == "{main}") || !placed {
                    bad.push(format!("{} {}:{first} line {line}", f.name, f.file));
                }
            }
        }
    }
    let mut top: Vec<_> = names.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1));
    eprintln!(
        "php composer: {with_php} samples with PHP frames, {checked} frames checked, {} contradicted, {no_line} without a line; leaves {:?}",
        bad.len(),
        &top[..top.len().min(6)]
    );
    assert!(with_php >= 1000, "{with_php} samples with PHP frames");
    assert!(
        checked >= with_php,
        "{checked} frames checked of {with_php} samples"
    );
    assert!(
        bad.is_empty(),
        "frames the source contradicts: {:?}",
        &bad[..bad.len().min(10)]
    );
    assert!(
        no_line * 100 <= checked,
        "{no_line} of {checked} frames without a line"
    );
    assert!(
        top.iter().any(|(n, _)| n.contains("ClassMapGenerator")),
        "Composer's class-map code sampled: {top:?}"
    );
}

/// Check that a PHP function's waits are charged to it: two functions
/// sleeping 5 and 15 ms at a time from the same `usleep` get the off-CPU
/// time each measured of its sleeps (±5 %), under `{main}` -> `work` ->
/// `nap_a` / `nap_b` (the chain read at the switch, as at a sample).
#[test]
fn off_cpu_time_is_charged_to_the_php_function_that_waited() {
    let test = "off_cpu_time_is_charged_to_the_php_function_that_waited";
    if !can_record(test) {
        return;
    }
    let Some((php, _)) = php_tools(test) else {
        return;
    };
    let dir = scratch("php-naps");
    let out_path = dir.join("p.json.gz");
    let script = workspace_root().join("tests/workloads/phpnaps.php");
    let out = record(
        &[
            "--",
            php.to_str().unwrap(),
            "-n",
            script.to_str().unwrap(),
            "1.5",
        ],
        &out_path,
    );
    assert_success(&out);
    let pid = field(&out.stdout, "pid").unwrap();
    let (a_ms, b_ms) = (
        field(&out.stdout, "nap_a_ns").unwrap() as f64 / 1e6,
        field(&out.stdout, "nap_b_ns").unwrap() as f64 / 1e6,
    );
    let profile = Profile::load(&out_path);
    let cats = profile.categories();
    let t = profile
        .process_threads(pid)
        .into_iter()
        .next()
        .expect("the php process");
    let (mut got_a, mut got_b) = (0.0, 0.0);
    for (s, w) in t.stacks(&cats).iter().zip(t.weights()) {
        let n: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
        if off_cpu_reason(n.iter().copied()) != Some("[off-CPU: sleeping]") {
            continue;
        }
        let chain = |f: &str| n.windows(3).any(|x| x == ["{main}", "work", f]);
        if chain("nap_a") {
            got_a += w;
        } else if chain("nap_b") {
            got_b += w;
        }
    }
    eprintln!("php naps: off-CPU under nap_a {got_a:.1} ms (measured {a_ms:.1}), nap_b {got_b:.1} ms (measured {b_ms:.1})");
    assert!(
        (got_a - a_ms).abs() <= a_ms * 0.05,
        "nap_a: {got_a:.1} ms off-CPU vs {a_ms:.1} ms measured"
    );
    assert!(
        (got_b - b_ms).abs() <= b_ms * 0.05,
        "nap_b: {got_b:.1} ms off-CPU vs {b_ms:.1} ms measured"
    );
}
