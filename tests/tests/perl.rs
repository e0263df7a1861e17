//! Integration tests of Perl frames: Debian's Perl 5.36, real BPF, as root,
//! one at a time. The oracles are the script's own CPU clock per sub
//! (CLOCK_THREAD_CPUTIME_ID around each call), Perl's own B module for the
//! layout, and, for a program nobody here wrote (`json_pp`, JSON::PP
//! reading and writing a large document), its own source files.

use std::path::Path;
use std::process::Command;

use sysprof_tests::*;

/// `perl` running the workload `script` with its argument, recorded into
/// a scratch directory of `dir`: the profile's path, the command's output
/// (checked to have succeeded) and the pid the script printed.
fn record_script(
    perl: &Path,
    dir: &str,
    script: &str,
    arg: &str,
) -> (std::path::PathBuf, std::process::Output, u64) {
    let out_path = scratch(dir).join("p.json.gz");
    let script = workspace_root().join("tests/workloads").join(script);
    let out = record(
        &["--", perl.to_str().unwrap(), script.to_str().unwrap(), arg],
        &out_path,
    );
    assert_success(&out);
    let pid = field(&out.stdout, "pid").expect("the script printed its pid");
    (out_path, out, pid)
}

/// Check Perl 5.36's layout in sysprof's table against what a running
/// script's memory holds (`tests/oracles/perl_layout.py`: the addresses
/// Perl's B module gives of its objects, found in its memory through
/// /proc/PID/mem as root): every offset the kernel and the reader use.
#[test]
fn the_perl_layout_matches_what_a_running_script_holds() {
    let test = "the_perl_layout_matches_what_a_running_script_holds";
    let Some(perl) = perl_tools(test) else {
        return;
    };
    let oracle = workspace_root().join("tests/oracles/perl_layout.py");
    let out = Command::new("python3")
        .arg(oracle)
        .arg(&perl)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let l = sysprof::runtimes::perl::binary::layout("5.36").expect("5.36 is read");
    let expect = [
        ("interp_curstackinfo", l.interp_curstackinfo as u64),
        ("interp_curcop", l.interp_curcop as u64),
        ("interp_phase", l.interp_phase as u64),
        ("interp_origfilename", l.interp_origfilename as u64),
        ("si_cxstack", l.si_cxstack as u64),
        ("si_prev", l.si_prev as u64),
        ("si_cxsubix", l.si_cxsubix as u64),
        ("si_cxix", l.si_cxix as u64),
        ("cx_size", sysprof::bpf::abi::PERL_CX_SIZE),
        ("cx_cv", l.cx_cv as u64),
        ("cx_retop", l.cx_retop as u64),
        ("cx_old_cxsubix", l.cx_old_cxsubix as u64),
        ("cx_oldcop", l.cx_oldcop as u64),
        ("cop_line", l.cop_line as u64),
        ("cop_file", l.cop_file as u64),
        ("cv_start", l.cv_start),
        ("cv_root", l.cv_start + 8),
        ("cv_gv", l.cv_gv),
        ("cv_file", l.cv_file),
        ("cv_stash", l.cv_stash),
        ("cv_flags", l.cv_flags),
        ("cvf_named", l.cvf_named as u64),
        ("cv_gv_named", l.cv_gv),
        ("cv_stash_named", l.cv_stash),
        ("gv_name", l.gv_name),
        ("gv_stash", l.gv_stash),
        ("hek_len", l.hek_len),
        ("hek_key", l.hek_key),
        ("sv_flags", l.sv_flags),
        ("svf_ook", l.svf_ook as u64),
        ("hv_aux", l.hv_aux),
    ];
    for (field, want) in expect {
        let said = text
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{field}=")))
            .unwrap_or_else(|| panic!("no {field} in {text}"));
        assert_eq!(said, want.to_string(), "{field}: {text}");
    }
    assert!(
        text.contains("cx_by_name=yes"),
        "the comparator's context one below mid's: {text}"
    );
    eprintln!("perl layout: {text}");
}

/// Check that a Perl script's samples carry its subs by name, with nothing
/// asked of it: the split of samples between `Hot::three` and
/// `main::hot_one` is the split of the thread's CPU time the script
/// measured (±3 points); each such stack holds the whole chain `<main>` ->
/// `main::main` -> `main::work` -> the sub (through `main::by_cost` where a
/// sort's comparator, run by a loop of its own, called it, `main::__ANON__`
/// where a code reference did, `(eval)` where a string eval did), each sub
/// at a line of its body in the script, with no run loop left; and Perl's
/// native frames below `<main>` down to the program's entry.
#[test]
fn perl_subs_are_named_with_the_split_the_script_measured() {
    let test = "perl_subs_are_named_with_the_split_the_script_measured";
    if !can_record(test) {
        return;
    }
    let Some(perl) = perl_tools(test) else {
        return;
    };
    let (out_path, out, pid) = record_script(&perl, "perl-split", "perlsplit.pl", "2.0");
    let (three_ns, one_ns) = (
        field(&out.stdout, "three_ns").unwrap() as f64,
        field(&out.stdout, "one_ns").unwrap() as f64,
    );
    let expected = three_ns / (three_ns + one_ns);
    let profile = Profile::load(&out_path);
    let cats = profile.categories();
    let threads = profile.process_threads(pid);
    let t = threads.first().expect("the perl process");
    let stacks = t.stack_views(&profile.json, &cats);
    let (mut three, mut one, mut whole, mut rooted, mut loop_left) = (0usize, 0, 0, 0, 0);
    let (mut sorts, mut anons, mut evals) = (0usize, 0, 0);
    for s in &stacks {
        let names: Vec<&str> = s.iter().map(|f| f.name.as_str()).collect();
        // The run loop as it enters the script or leaves it, with no sub
        // of its own yet or any more.
        loop_left += usize::from(names.contains(&"Perl_runops_standard"));
        if names.first().is_some_and(|n| *n == "_start") {
            rooted += 1;
        }
        let Some(hot) = names
            .iter()
            .rposition(|n| *n == "Hot::three" || *n == "main::hot_one")
        else {
            continue;
        };
        let f = &s[hot];
        assert_eq!(f.category, "Perl", "{names:?}");
        assert!(f.file.ends_with("/perlsplit.pl"), "{f:?}");
        // Lines of their bodies in perlsplit.pl (or none: a sub being
        // entered or left, its statement still its caller's).
        let body = if f.name == "Hot::three" {
            21..=30
        } else {
            35..=44
        };
        let line = f.line.unwrap_or(0);
        assert!(line == 0 || body.contains(&line), "{f:?}");
        if f.name == "Hot::three" {
            three += 1;
        } else {
            one += 1;
        }
        // Down to the hot sub (cpu_ns and Time::HiRes may run above it).
        let perl_frames: Vec<&str> = s[..=hot]
            .iter()
            .filter(|f| f.category == "Perl")
            .map(|f| f.name.as_str())
            .collect();
        let head = ["<main>", "main::main", "main::work"];
        let chain_ok = perl_frames.len() >= 4
            && perl_frames[..3] == head
            && match &perl_frames[3..] {
                [leaf] => *leaf == names[hot],
                ["main::by_cost", "main::hot_one"] => {
                    sorts += 1;
                    true
                }
                ["main::__ANON__", "main::hot_one"] => {
                    anons += 1;
                    true
                }
                ["(eval)", "main::hot_one"] => {
                    evals += 1;
                    true
                }
                _ => false,
            };
        whole += usize::from(chain_ok);
    }
    let got = three as f64 / (three + one).max(1) as f64;
    eprintln!(
        "perl: Hot::three {three}, main::hot_one {one} of {} samples: share {got:.3} vs {expected:.3} measured; {whole} whole chains ({sorts} through a sort, {anons} an anonymous sub, {evals} an eval); {rooted} reach _start; {loop_left} with Perl_runops_standard",
        stacks.len()
    );
    assert!(
        three + one >= 1400,
        "2 s of CPU at 999 Hz: {} samples in the hot subs",
        three + one
    );
    assert!(
        (got - expected).abs() <= 0.03,
        "share {got:.3} vs {expected:.3}"
    );
    assert!(
        whole * 100 >= (three + one) * 99,
        "{whole} of {} stacks whole",
        three + one
    );
    // ~2 % of the script's CPU each, through the other three ways.
    assert!(
        sorts >= 5 && anons >= 5 && evals >= 5,
        "{sorts} through a sort, {anons} an anonymous sub, {evals} an eval"
    );
    assert!(
        loop_left * 100 <= stacks.len() * 2,
        "{loop_left} of {} stacks keep the run loop",
        stacks.len()
    );
    assert!(
        rooted * 100 >= stacks.len() * 95,
        "{rooted} of {} stacks reach _start",
        stacks.len()
    );
}

/// Check Perl frames against the source of a program nobody here wrote:
/// `json_pp` (JSON::PP, Debian's, in pure Perl) reading and writing a
/// large document. Every Perl frame's line must lie in its file (but a
/// require's while Perl compiles the file: the parser's position), and a
/// named sub's line must lie in that sub: the nearest `sub NAME` at or
/// before it names it; at most 1 % of frames without a line (a sub being
/// entered or left); JSON::PP's own subs must be among the leaves.
#[test]
fn perl_frames_agree_with_json_pps_source() {
    let test = "perl_frames_agree_with_json_pps_source";
    if !can_record(test) {
        return;
    }
    let Some(_perl) = perl_tools(test) else {
        return;
    };
    let dir = scratch("perl-json-pp");
    // A document of nested objects and arrays, strings and numbers: ~3 MB.
    let mut doc = String::from("[");
    for i in 0..12_000 {
        if i > 0 {
            doc.push(',');
        }
        doc.push_str(&format!(
            r#"{{"id":{i},"name":"item \"{i}\" é","tags":["a{i}","b","c"],"score":{}.{},"nested":{{"ok":true,"none":null,"list":[1,2,3,{i}]}}}}"#,
            i % 97,
            i % 13
        ));
    }
    doc.push(']');
    let input = dir.join("doc.json");
    std::fs::write(&input, doc).unwrap();
    let out_path = dir.join("p.json.gz");
    let run = format!(
        "for i in 1 2; do json_pp -f json -t json -json_opt pretty,canonical < {} > /dev/null; done",
        input.display()
    );
    let out = record(&["--", "sh", "-c", &run], &out_path);
    assert_success(&out);
    let profile = Profile::load(&out_path);
    let cats = profile.categories();
    let mut files: std::collections::HashMap<String, Option<Vec<String>>> = Default::default();
    let (mut with_perl, mut checked, mut no_line, mut bad) = (0usize, 0usize, 0usize, Vec::new());
    let mut leaves = std::collections::BTreeMap::<String, usize>::new();
    for t in profile.threads() {
        for s in t.stack_views(&profile.json, &cats) {
            let perl: Vec<_> = s.iter().filter(|f| f.category == "Perl").collect();
            if perl.is_empty() {
                continue;
            }
            with_perl += 1;
            *leaves.entry(perl.last().unwrap().name.clone()).or_default() += 1;
            // Perl compiling a file it requires: the require's line is the
            // parser's position then, not a statement's.
            let compiling = s.iter().any(|f| f.name == "Perl_yyparse");
            // The main program is json_pp's, compiling or running.
            if perl[0].name == "<main>" && perl[0].file != "/usr/bin/json_pp" {
                bad.push(format!("<main> in {}", perl[0].file));
            }
            for f in perl {
                if compiling && f.name == "(eval)" {
                    continue;
                }
                let lines = files
                    .entry(f.file.clone())
                    .or_insert_with(|| {
                        std::fs::read_to_string(Path::new(&f.file))
                            .ok()
                            .map(|t| t.lines().map(str::to_string).collect())
                    })
                    .as_ref();
                // An eval's code has no file to read.
                let Some(lines) = lines else { continue };
                checked += 1;
                // No line (0): a sub being entered or left.
                let line = f.line.unwrap_or(0) as usize;
                no_line += usize::from(line == 0);
                let placed = line <= lines.len();
                let name = f.name.rsplit("::").next().unwrap_or("");
                let in_sub = !placed
                    || line == 0
                    || f.name == "<main>"
                    || f.name == "(eval)"
                    || name == "__ANON__"
                    || name == "BEGIN"
                    || enclosing_sub(lines, line).is_some_and(|s| s == name);
                if !placed || !in_sub {
                    bad.push(format!(
                        "{} {}:{line} (in sub {:?})",
                        f.name,
                        f.file,
                        enclosing_sub(lines, line.max(1))
                    ));
                }
            }
        }
    }
    let mut top: Vec<_> = leaves.into_iter().collect();
    top.sort_by_key(|t| std::cmp::Reverse(t.1));
    eprintln!(
        "perl json_pp: {with_perl} samples with Perl frames, {checked} frames checked, {} contradicted, {no_line} without a line; leaves {:?}",
        bad.len(),
        &top[..top.len().min(6)]
    );
    assert!(with_perl >= 1000, "{with_perl} samples with Perl frames");
    assert!(
        checked >= with_perl,
        "{checked} frames checked of {with_perl} samples"
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
        top.iter().any(|(n, _)| n.starts_with("JSON::PP::")),
        "JSON::PP's own subs sampled: {top:?}"
    );
}

/// The name of the sub whose `sub NAME` line is the nearest at or before
/// `line` (1-based) in `lines`.
fn enclosing_sub(lines: &[String], line: usize) -> Option<&str> {
    lines[..line.min(lines.len())].iter().rev().find_map(|l| {
        let rest = l.trim_start().strip_prefix("sub ")?;
        let name: &str = rest
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .next()?;
        (!name.is_empty()).then(|| name.rsplit("::").next().unwrap_or(name))
    })
}

/// Check that a Perl sub's waits are charged to it: two subs sleeping 5 and
/// 15 ms at a time from the same `usleep` get the off-CPU time each
/// measured of its sleeps (±5 %), under `<main>` -> `main::work` ->
/// `main::nap_a` / `main::nap_b` (the chain read at the switch, as at a
/// sample).
#[test]
fn off_cpu_time_is_charged_to_the_perl_sub_that_waited() {
    let test = "off_cpu_time_is_charged_to_the_perl_sub_that_waited";
    if !can_record(test) {
        return;
    }
    let Some(perl) = perl_tools(test) else {
        return;
    };
    let (out_path, out, pid) = record_script(&perl, "perl-naps", "perlnaps.pl", "1.5");
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
        .expect("the perl process");
    let (mut got_a, mut got_b) = (0.0, 0.0);
    for (s, w) in t.stacks(&cats).iter().zip(t.weights()) {
        let n: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
        if off_cpu_reason(n.iter().copied()) != Some("[off-CPU: sleeping]") {
            continue;
        }
        let chain = |f: &str| n.windows(3).any(|x| x == ["<main>", "main::work", f]);
        if chain("main::nap_a") {
            got_a += w;
        } else if chain("main::nap_b") {
            got_b += w;
        }
    }
    eprintln!("perl naps: off-CPU under nap_a {got_a:.1} ms (measured {a_ms:.1}), nap_b {got_b:.1} ms (measured {b_ms:.1})");
    assert!(
        (got_a - a_ms).abs() <= a_ms * 0.05,
        "nap_a: {got_a:.1} ms off-CPU vs {a_ms:.1} ms measured"
    );
    assert!(
        (got_b - b_ms).abs() <= b_ms * 0.05,
        "nap_b: {got_b:.1} ms off-CPU vs {b_ms:.1} ms measured"
    );
}

/// Check that Perl code called from C at the top level, not from a sub,
/// keeps its place: a sort's comparator by name (its context kept while
/// the sort compares in C), an object's DESTROY and an END block, each
/// spending its time in `main::spin`. Every stack with Perl frames has
/// `<main>` as its first (rootmost) Perl frame, after `perl_run` (or
/// `perl_parse`, compiling: `use`; `perl_destruct`, running END), and
/// `main::spin`'s stacks read `<main>` -> `main::by_cost` / `Obj::DESTROY`
/// / `main::END` -> `main::spin`.
#[test]
fn perl_called_from_c_at_the_top_level_keeps_its_place() {
    let test = "perl_called_from_c_at_the_top_level_keeps_its_place";
    if !can_record(test) {
        return;
    }
    let Some(perl) = perl_tools(test) else {
        return;
    };
    let (out_path, _, pid) = record_script(&perl, "perl-top", "perltop.pl", "1.5");
    let profile = Profile::load(&out_path);
    let cats = profile.categories();
    let t = profile
        .process_threads(pid)
        .into_iter()
        .next()
        .expect("the perl process");
    let (mut with_perl, mut misplaced, mut spins) = (0usize, Vec::new(), 0usize);
    let mut chains = std::collections::BTreeMap::<String, usize>::new();
    for s in t.stack_views(&profile.json, &cats) {
        let names: Vec<&str> = s.iter().map(|f| f.name.as_str()).collect();
        let perl: Vec<&str> = s
            .iter()
            .filter(|f| f.category == "Perl")
            .map(|f| f.name.as_str())
            .collect();
        if perl.is_empty() {
            continue;
        }
        with_perl += 1;
        let main_at = names.iter().position(|n| *n == "<main>");
        // perl_run runs the program, perl_parse compiles it (its BEGIN
        // blocks: `use`), perl_destruct runs its END blocks.
        let run_at = names
            .iter()
            .position(|n| ["perl_run", "perl_parse", "perl_destruct"].contains(n));
        let placed = perl[0] == "<main>" && main_at > run_at && run_at.is_some();
        if !placed {
            misplaced.push(names.join(";"));
        }
        if let Some(spin) = perl.iter().position(|n| *n == "main::spin") {
            spins += 1;
            *chains.entry(perl[..=spin].join(";")).or_default() += 1;
        }
    }
    eprintln!(
        "perl top level: {with_perl} stacks with Perl frames, {} misplaced; main::spin under {chains:?}",
        misplaced.len()
    );
    assert!(with_perl >= 1000, "{with_perl} stacks with Perl frames");
    assert!(
        misplaced.len() * 100 <= with_perl,
        "{} of {with_perl} stacks with Perl frames out of place: {:?}",
        misplaced.len(),
        &misplaced[..misplaced.len().min(5)]
    );
    for chain in [
        "<main>;main::by_cost;main::spin",
        "<main>;Obj::DESTROY;main::spin",
        "<main>;main::END;main::spin",
    ] {
        assert!(
            chains.get(chain).copied().unwrap_or(0) >= 20,
            "{chain}: {chains:?}"
        );
    }
    let whole: usize = chains
        .iter()
        .filter(|(c, _)| {
            [
                "<main>;main::by_cost;main::spin",
                "<main>;Obj::DESTROY;main::spin",
                "<main>;main::END;main::spin",
            ]
            .contains(&c.as_str())
        })
        .map(|(_, n)| n)
        .sum();
    assert!(
        whole * 100 >= spins * 98,
        "{whole} of {spins} whole: {chains:?}"
    );
}
