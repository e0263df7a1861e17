//! Integration tests of unwinding (DWARF in userspace, the in-kernel
//! unwinder, without tracefs) and naming threads by their start routine:
//! real kernel, real BPF, as root.
//! Oracle: the call chain written in the workload's source.

use sysprof_tests::*;

const CHAIN: [&str; 6] = ["level1", "level2", "level3", "level4", "level5", "level6"];

/// The on-CPU stacks (root first) of the thread `exe` names by its "pid="
/// and "tid=" lines, `exe 1.5` recorded with `--call-graph call_graph` and
/// no off-CPU time.
fn on_cpu_stacks_of(
    call_graph: &str,
    exe: &std::path::Path,
    dir: &std::path::Path,
) -> (Vec<Vec<(String, String)>>, String) {
    let out_path = dir.join(format!("{call_graph}.json.gz"));
    let out = record(
        &[
            "--call-graph",
            call_graph,
            "--no-off-cpu",
            "--",
            exe.to_str().unwrap(),
            "1.5",
        ],
        &out_path,
    );
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    eprintln!("{call_graph}: {}", stderr.trim());
    let (pid, tid) = (
        field(&out.stdout, "pid").unwrap(),
        field(&out.stdout, "tid").unwrap(),
    );
    let profile = Profile::load(&out_path);
    let t = profile.thread(pid, tid).expect("the workload's thread");
    (t.on_cpu_stacks(&profile.categories()), stderr)
}

/// Share of on-CPU samples in level6 whose stack holds the whole chain, in
/// order, right under the thread's start (start_thread or clone3).
fn whole_chain_share(
    call_graph: &str,
    exe: &std::path::Path,
    dir: &std::path::Path,
) -> (usize, usize) {
    let (stacks, _) = on_cpu_stacks_of(call_graph, exe, dir);
    let mut whole = 0;
    for s in &stacks {
        let names: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
        let Some(root) = names
            .iter()
            .position(|n| *n == "start_thread" || *n == "clone3" || n.starts_with("__clone"))
        else {
            continue;
        };
        let Some(i1) = names.iter().position(|n| *n == "level1") else {
            continue;
        };
        // deep -> level1 -> ... -> level6, below the thread root.
        if i1 > root && names.get(i1 - 1) == Some(&"deep") && names[i1..].starts_with(&CHAIN) {
            whole += 1;
        }
    }
    (whole, stacks.len())
}

/// Check that without frame pointers at least 95% of samples unwind through
/// all six functions, in order, to the thread's start with DWARF unwinding,
/// walked in the kernel and from stack copies (and report what frame
/// pointers give on the same binary).
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
    assert!(
        dwarf_total >= 1000,
        "1.5 s of CPU at 999 Hz: {dwarf_total} samples"
    );
    assert!(
        dwarf_whole * 100 >= dwarf_total * 95,
        "dwarf: {dwarf_whole} of {dwarf_total} samples have the whole chain"
    );
    // The same in userspace from each sample's stack copy (the mode the
    // kernel's walker falls back to), whose copy is read in halves.
    let (copy_whole, copy_total) = whole_chain_share("dwarf-copy", &exe, &dir);
    eprintln!("deep: dwarf-copy {copy_whole}/{copy_total}");
    assert!(
        copy_total >= 1000 && copy_whole * 100 >= copy_total * 95,
        "dwarf-copy: {copy_whole} of {copy_total} samples have the whole chain"
    );
}

/// Check the same for a binary linked by lld (the linker rustc uses; its
/// code segment's address and file offset differ by a page more than the
/// segment before it, which once sent every unwind through it astray). It
/// is linked with the `ld.lld` of the Rust toolchain that builds these tests.
#[test]
fn dwarf_unwinding_works_in_an_lld_linked_binary() {
    if !can_record("dwarf_unwinding_works_in_an_lld_linked_binary") {
        return;
    }
    let sysroot = std::process::Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .expect("rustc");
    let gcc_ld = std::path::Path::new(String::from_utf8_lossy(&sysroot.stdout).trim())
        .join("lib/rustlib/x86_64-unknown-linux-gnu/bin/gcc-ld");
    assert!(
        gcc_ld.join("ld.lld").exists(),
        "the Rust toolchain has no ld.lld at {}",
        gcc_ld.display()
    );
    let dir = scratch("deep-lld");
    let b = format!("-B{}", gcc_ld.display());
    let exe = build_c(
        "deep",
        &dir.join("deep"),
        &["-O2", "-fomit-frame-pointer", &b, "-fuse-ld=lld"],
    );
    // The layout this test is about: the executable segment's address is
    // not its file offset (GNU ld keeps them equal).
    let headers = std::process::Command::new("readelf")
        .args(["-lW"])
        .arg(&exe)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&headers.stdout);
    let code = text
        .lines()
        .find(|l| l.trim_start().starts_with("LOAD") && l.contains(" R E "))
        .expect("an executable segment");
    let hex = |v: &str| u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap();
    let f: Vec<&str> = code.split_whitespace().collect();
    assert_ne!(
        hex(f[1]),
        hex(f[2]),
        "lld laid the code out at its file offset: {code}"
    );
    let (whole, total) = whole_chain_share("dwarf", &exe, &dir);
    eprintln!(
        "deep (lld): whole chain to the thread root: {whole}/{total} ({:.1}%)",
        whole as f64 * 100.0 / total.max(1) as f64
    );
    assert!(total >= 1000, "1.5 s of CPU at 999 Hz: {total} samples");
    assert!(
        whole * 100 >= total * 95,
        "lld: {whole} of {total} samples have the whole chain"
    );
}

/// Check that a stack whose top is followed by a page that cannot be read
/// (a makecontext stack under a guard page, as a Go M's system stack can
/// sit below an untouched heap page) is copied to its very top, where its
/// outermost return address lies: every sample of the leaf reaches the
/// context's first function and the frame under it, in userspace from the
/// copy (`dwarf-copy`) and walked in the kernel (`dwarf`, its first samples
/// handed over as copies). Oracle: the workload's source, whose leaf runs at
/// each 16-byte stack offset modulo 64 from that top. Before the last piece
/// of the copy went to the byte, 711 of 1,445 `dwarf-copy` samples ended
/// "copy exhausted" under ctx_main, and the summary advised a larger
/// `--stack-size`, which reaches no deeper there.
#[test]
fn a_stack_under_an_unreadable_page_is_copied_to_its_top() {
    let test = "a_stack_under_an_unreadable_page_is_copied_to_its_top";
    if !can_record(test) {
        return;
    }
    let dir = scratch("ctxtop");
    let exe = build_c(
        "ctxtop",
        &dir.join("ctxtop"),
        &["-O2", "-fomit-frame-pointer"],
    );
    for call_graph in ["dwarf-copy", "dwarf"] {
        let (mut leaf, mut reached) = (0usize, 0usize);
        let mut other: std::collections::BTreeMap<String, usize> = Default::default();
        let (stacks, stderr) = on_cpu_stacks_of(call_graph, &exe, &dir);
        // Its copies end at the context stack's top, below the page that
        // cannot be read, not at --stack-size: a larger copy reaches no
        // deeper, and the summary must not say it would (it did, with 732
        // of 1,502 stacks ended "copy exhausted" under ctx_main).
        assert!(
            !stderr.contains("reaches deeper"),
            "{call_graph}: advice to copy more where the stack's top was reached: {stderr}"
        );
        for s in stacks {
            let names: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
            if names.last() != Some(&"ctx_spin") {
                continue;
            }
            leaf += 1;
            // Root first: the frame under ctx_main is __start_context's
            // (unnamed where libc has no symbol table); a cut copy puts
            // its end there instead.
            match names.iter().position(|n| *n == "ctx_main") {
                Some(i) if i > 0 && !names[i - 1].starts_with('[') => reached += 1,
                Some(i) if i > 0 => *other.entry(names[i - 1].to_string()).or_default() += 1,
                _ => *other.entry(names[0].to_string()).or_default() += 1,
            }
        }
        eprintln!("ctxtop {call_graph}: {reached} of {leaf} leaf samples reach under ctx_main; the others end {other:?}");
        assert!(
            leaf >= 1000,
            "1.5 s of CPU at 999 Hz: {leaf} samples in ctx_spin"
        );
        assert!(
            reached * 100 >= leaf * 99,
            "{call_graph}: {reached} of {leaf} samples reach the frame under ctx_main; the others end {other:?}"
        );
    }
}

/// Check that a thread sleeping in a binary without frame pointers has
/// off-CPU stacks that unwind through its functions to the thread's start.
#[test]
fn off_cpu_stacks_unwind_without_frame_pointers() {
    if !can_record("off_cpu_stacks_unwind_without_frame_pointers") {
        return;
    }
    let dir = scratch("sleeper-nofp");
    let exe = build_c(
        "sleeper",
        &dir.join("sleeper"),
        &["-O2", "-fomit-frame-pointer"],
    );
    let out_path = dir.join("p.json.gz");
    let out = record(&["--", exe.to_str().unwrap(), "30"], &out_path);
    assert_success(&out);
    let (pid, tid) = (
        field(&out.stdout, "pid").unwrap(),
        field(&out.stdout, "tid").unwrap(),
    );
    let profile = Profile::load(&out_path);
    let t = profile.thread(pid, tid).expect("the sleeper thread");
    let stacks = t.stacks(&profile.categories());
    let sleeping: Vec<_> = stacks
        .iter()
        .filter(|s| {
            off_cpu_reason(s.iter().map(|(n, _)| n.as_str())) == Some("[off-CPU: sleeping]")
        })
        .collect();
    let whole = sleeping
        .iter()
        .filter(|s| {
            let names: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
            let root = names
                .iter()
                .position(|n| *n == "start_thread" || *n == "clone3");
            let f = names.iter().position(|n| *n == "sleep_loop");
            matches!((root, f), (Some(r), Some(f)) if r < f)
        })
        .count();
    eprintln!(
        "sleeper-nofp: {whole} of {} sleeping stacks reach the thread root through sleep_loop",
        sleeping.len()
    );
    assert!(
        sleeping.len() >= 28,
        "one sleeping interval per sleep: {}",
        sleeping.len()
    );
    assert!(
        whole * 100 >= sleeping.len() * 95,
        "{whole} of {} reach the root",
        sleeping.len()
    );
}

/// How a stack of the recurse workload came out.
#[derive(Debug, PartialEq, Eq)]
enum Chain {
    /// The thread root, recurse_thread, `descend` exactly this many times in
    /// a row, then (signal mode: under_signal ... handler, in_handler) bottom.
    Whole(usize),
    /// Ends (root end) in a "[truncated: …]" frame: stopped, and said so.
    Truncated,
    /// Anything else: a stack that claims to be whole and is not.
    Wrong,
}

/// Classify one root-first stack of the recurse thread that holds `bottom`.
fn chain_of(names: &[&str], through_signal: bool) -> Chain {
    if names.first().is_some_and(|n| n.starts_with("[truncated")) {
        return Chain::Truncated;
    }
    let Some(root) = names.iter().position(|n| *n == "start_thread") else {
        return Chain::Wrong;
    };
    // Above the thread root, only clone3.
    if !names[..root]
        .iter()
        .all(|n| *n == "clone3" || n.starts_with("__clone"))
        || names.get(root + 1) != Some(&"recurse_thread")
    {
        return Chain::Wrong;
    }
    let rest = &names[root + 2..];
    let descends = rest.iter().take_while(|n| **n == "descend").count();
    let after = &rest[descends..];
    let ok = if through_signal {
        // under_signal -> raise -> (libc) -> the signal trampoline -> handler -> in_handler -> bottom
        let h = after.iter().position(|n| *n == "handler");
        after.first() == Some(&"under_signal")
            && after.get(1) == Some(&"raise")
            && h.is_some_and(|h| {
                h >= 3
                    && after.get(h + 1) == Some(&"in_handler")
                    && after.get(h + 2) == Some(&"bottom")
            })
    } else {
        after.first() == Some(&"bottom")
    };
    if ok {
        Chain::Whole(descends)
    } else {
        Chain::Wrong
    }
}

/// A stack as text, runs of one name shown once with their count.
fn compress(names: &[&str]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < names.len() {
        let run = names[i..].iter().take_while(|n| **n == names[i]).count();
        out.push(if run > 1 {
            format!("{} x{run}", names[i])
        } else {
            names[i].to_string()
        });
        i += run;
    }
    out.join(";")
}

/// Record the recurse workload; the chains of its samples in `bottom`, per
/// image (an exec gives a second one), and the stderr summary.
fn recurse_chains(
    dir: &std::path::Path,
    exe: &std::path::Path,
    args: &[&str],
    call_graph: &str,
) -> (Vec<Chain>, String) {
    let (chains, out) = recurse_chains_with(dir, exe, args, call_graph, &[]);
    (chains, String::from_utf8_lossy(&out.stderr).to_string())
}

/// [`recurse_chains`] with more options for `record` (before the command),
/// giving the whole output (its stats line).
fn recurse_chains_with(
    dir: &std::path::Path,
    exe: &std::path::Path,
    args: &[&str],
    call_graph: &str,
    options: &[&str],
) -> (Vec<Chain>, std::process::Output) {
    let out_path = dir.join(format!("{call_graph}.json.gz"));
    let mut record_args = vec!["--call-graph", call_graph, "--no-off-cpu"];
    record_args.extend_from_slice(options);
    record_args.extend_from_slice(&["--", exe.to_str().unwrap()]);
    record_args.extend_from_slice(args);
    let out = record(&record_args, &out_path);
    assert_success(&out);
    let pid = field(&out.stdout, "pid").unwrap();
    let profile = Profile::load(&out_path);
    let through_signal = args.contains(&"signal");
    let mut chains = Vec::new();
    for t in profile
        .process_threads(pid)
        .into_iter()
        .filter(|t| t.name().starts_with("recurse"))
    {
        for s in t.on_cpu_stacks(&profile.categories()) {
            let names: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
            // Only samples in bottom count (the thread's start and end run
            // elsewhere for a few microseconds).
            if names.contains(&"bottom") || names.iter().any(|n| n.starts_with("[truncated")) {
                let chain = chain_of(&names, through_signal);
                if chain == Chain::Wrong {
                    eprintln!("wrong: {}", compress(&names));
                }
                chains.push(chain);
            }
        }
    }
    (chains, out)
}

/// Check the in-kernel unwinder on stacks no copy holds: 200 frames of 512
/// bytes of locals (over 100 KiB), -O2 -fomit-frame-pointer. At least 99%
/// of the samples in `bottom` must come out whole through every frame, none
/// wrong; the copying unwinder, on the same binary, gets none whole (the
/// check can fail).
#[test]
fn kernel_unwinding_reaches_the_root_of_a_200_frame_stack() {
    if !can_record("kernel_unwinding_reaches_the_root_of_a_200_frame_stack") {
        return;
    }
    let dir = scratch("kernel_unwinding_reaches_the_root_of_a_200_frame_stack");
    let exe = build_c(
        "recurse",
        &dir.join("recurse"),
        &["-O2", "-fomit-frame-pointer"],
    );
    let (chains, stderr) = recurse_chains(&dir, &exe, &["2.0", "200"], "dwarf");
    let whole = chains.iter().filter(|c| **c == Chain::Whole(200)).count();
    let wrong: Vec<&Chain> = chains
        .iter()
        .filter(|c| matches!(c, Chain::Wrong | Chain::Whole(_)) && **c != Chain::Whole(200))
        .collect();
    eprintln!(
        "dwarf: {whole} of {} samples whole at 200 frames; {}",
        chains.len(),
        stats_line_of(&stderr)
    );
    assert!(
        chains.len() >= 1000,
        "only {} samples in bottom",
        chains.len()
    );
    assert!(
        wrong.is_empty(),
        "{} stacks claim to be whole and are not: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    assert!(
        whole * 100 >= chains.len() * 99,
        "{whole} of {} whole",
        chains.len()
    );

    let (copied, copied_stderr) = recurse_chains(&dir, &exe, &["1.0", "200"], "dwarf-copy");
    let copied_whole = copied.iter().filter(|c| **c == Chain::Whole(200)).count();
    eprintln!("dwarf-copy: {copied_whole} of {} whole", copied.len());
    assert!(
        copied_whole * 2 < copied.len(),
        "the copy unwinder cannot see 100 KiB deep: {copied_whole} of {}",
        copied.len()
    );
    // Those copies were as long as --stack-size: the summary says how many
    // were cut there, and that a larger copy reaches deeper.
    let advice = copied_stderr
        .lines()
        .find(|l| l.contains("cut at the 16384-byte copy (--stack-size 32768 reaches deeper)"))
        .unwrap_or_else(|| panic!("no advice to copy more: {copied_stderr}"));
    // "sysprof: [lost ...; ]N of M user stacks cut at the ..."
    let said_cut: usize = advice
        .split("; ")
        .find(|part| part.contains("user stacks cut at the"))
        .and_then(|part| part.trim_start_matches("sysprof: ").split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count before \"of\" in {advice}"));
    assert!(
        said_cut + copied_whole >= copied.len() / 2,
        "{said_cut} stacks said cut at the copy's size, of {} in bottom, {copied_whole} whole: {advice}",
        copied.len()
    );
}

/// Check that a thread's stack copy stops at the thread's top: recurse's
/// thread 8 frames of 512 bytes deep (~4.5 KiB of frames, under its
/// descriptor and TLS at the top of its mapping), copied and unwound here
/// (`dwarf-copy`, 32-KiB copies). 99 % of the samples in `bottom` or cut
/// short (`[truncated ...]`) must reach the thread's root through all 8
/// frames, and the copies average under 12 KiB: 7.4 here, where a
/// copy that ran on past the thread's descriptor, to wherever memory stopped
/// being readable, averaged 17.7 (and beside an I/O storm, copies of 8-13
/// KiB where the frames took 1: 44 MB in the half second the running
/// processes' tables loaded).
#[test]
fn a_thread_s_stack_copy_ends_at_its_top() {
    if !can_record("a_thread_s_stack_copy_ends_at_its_top") {
        return;
    }
    let dir = scratch("a_thread_s_stack_copy_ends_at_its_top");
    let exe = build_c(
        "recurse",
        &dir.join("recurse"),
        &["-O2", "-fomit-frame-pointer"],
    );
    let (chains, out) = recurse_chains_with(
        &dir,
        &exe,
        &["1.0", "8"],
        "dwarf-copy",
        &["--stack-size", "32768"],
    );
    let whole = chains.iter().filter(|c| **c == Chain::Whole(8)).count();
    let copies = stat(&out, "unwinds_here");
    let bytes = stat(&out, "unwound_copy_bytes");
    eprintln!(
        "{whole} of {} samples in bottom or cut whole; {copies} copies of {bytes} bytes",
        chains.len()
    );
    assert!(
        chains.len() >= 500,
        "only {} samples in bottom or cut",
        chains.len()
    );
    assert!(
        whole * 100 >= chains.len() * 99,
        "{whole} of {} whole: a copy cut below the thread's root",
        chains.len()
    );
    assert!(
        copies as usize >= chains.len(),
        "{copies} copies unwound here for {} samples",
        chains.len()
    );
    assert!(
        bytes < copies * 12288,
        "{copies} copies took {bytes} bytes, {} each: past the thread's top",
        bytes / copies.max(1)
    );
}

/// The `stats:` line of a `record -v` stderr.
fn stats_line_of(stderr: &str) -> &str {
    stderr
        .lines()
        .find(|l| l.starts_with("sysprof: stats:"))
        .unwrap_or("")
}

/// Check that the in-kernel unwinder walks through a signal frame: samples
/// in a SIGUSR1 handler show the handler, the trampoline, the interrupted
/// raise() and every one of the 100 frames under it, to the thread root.
#[test]
fn kernel_unwinding_crosses_a_signal_frame() {
    if !can_record("kernel_unwinding_crosses_a_signal_frame") {
        return;
    }
    let dir = scratch("kernel_unwinding_crosses_a_signal_frame");
    let exe = build_c(
        "recurse",
        &dir.join("recurse"),
        &["-O2", "-fomit-frame-pointer"],
    );
    let (chains, stderr) = recurse_chains(&dir, &exe, &["1.5", "100", "signal"], "dwarf");
    let whole = chains.iter().filter(|c| **c == Chain::Whole(100)).count();
    eprintln!(
        "{whole} of {} samples whole through the signal frame; {}",
        chains.len(),
        stats_line_of(&stderr)
    );
    let wrong = chains
        .iter()
        .filter(|c| matches!(c, Chain::Wrong | Chain::Whole(_)) && **c != Chain::Whole(100))
        .count();
    assert!(
        chains.len() >= 700,
        "only {} samples in the handler",
        chains.len()
    );
    assert_eq!(wrong, 0, "stacks that claim to be whole and are not");
    assert!(
        whole * 100 >= chains.len() * 99,
        "{whole} of {} whole",
        chains.len()
    );
}

/// Check a process whose program changes under the profiler: recurse runs
/// 50 deep, execs itself (same pid) and runs 200 deep. The old program's
/// tables must not walk the new one's stacks (no wrong stack), and the new
/// one's tables arrive in time (or its first samples say why not).
#[test]
fn kernel_unwinding_follows_an_exec() {
    if !can_record("kernel_unwinding_follows_an_exec") {
        return;
    }
    let dir = scratch("kernel_unwinding_follows_an_exec");
    let exe = build_c(
        "recurse",
        &dir.join("recurse"),
        &["-O2", "-fomit-frame-pointer"],
    );
    let (chains, stderr) = recurse_chains(&dir, &exe, &["1.0", "50", "exec"], "dwarf");
    let before = chains.iter().filter(|c| **c == Chain::Whole(50)).count();
    let after = chains.iter().filter(|c| **c == Chain::Whole(200)).count();
    let truncated = chains.iter().filter(|c| **c == Chain::Truncated).count();
    let wrong = chains.len() - before - after - truncated;
    eprintln!(
        "{before} whole at 50, {after} at 200, {truncated} truncated, {wrong} wrong of {}; {}",
        chains.len(),
        stats_line_of(&stderr)
    );
    assert_eq!(wrong, 0, "stacks that claim to be whole and are not");
    assert!(
        before >= 600 && after >= 600,
        "both programs sampled whole: {before} and {after}"
    );
    assert!(
        (before + after) * 100 >= chains.len() * 98,
        "{} of {} whole",
        before + after,
        chains.len()
    );
}

/// Check that a binary whose .eh_frame is damaged (every CIE's version
/// byte overwritten, so no FDE can be read) gives stacks that say they were
/// cut, never a wrong stack, and a warning naming what is wrong.
#[test]
fn damaged_eh_frame_gives_truncated_stacks_and_a_warning() {
    if !can_record("damaged_eh_frame_gives_truncated_stacks_and_a_warning") {
        return;
    }
    let dir = scratch("damaged_eh_frame_gives_truncated_stacks_and_a_warning");
    let exe = build_c(
        "recurse",
        &dir.join("recurse.good"),
        &["-O2", "-fomit-frame-pointer"],
    );
    let mut elf = std::fs::read(&exe).unwrap();
    let eh = elf_section(&elf, ".eh_frame");
    // Walk the CIE/FDE records: length, CIE id (0 for a CIE), then a CIE's version.
    let (start, end) = (eh.offset as usize, (eh.offset + eh.size) as usize);
    let mut at = start;
    let mut cies = 0;
    while at + 9 <= end {
        let len = u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) as usize;
        if len == 0 || len == 0xffff_ffff {
            break;
        }
        if u32::from_le_bytes(elf[at + 4..at + 8].try_into().unwrap()) == 0 {
            elf[at + 8] = 0x7f; // no such CIE version
            cies += 1;
        }
        at += 4 + len;
    }
    assert!(cies > 0, "no CIE found in .eh_frame");
    let bad = dir.join("recurse");
    std::fs::write(&bad, &elf).unwrap();
    std::fs::set_permissions(&bad, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (chains, stderr) = recurse_chains(&dir, &bad, &["1.0", "60"], "dwarf");
    let truncated = chains.iter().filter(|c| **c == Chain::Truncated).count();
    eprintln!(
        "{truncated} of {} truncated; {}",
        chains.len(),
        stats_line_of(&stderr)
    );
    assert!(chains.len() >= 500, "only {} samples", chains.len());
    assert_eq!(
        truncated,
        chains.len(),
        "every stack says it was cut: {:?}",
        chains.iter().find(|c| **c != Chain::Truncated)
    );
    let why = format!(
        "no in-kernel unwind table for {}: .eh_frame: unknown DWARF version",
        bad.display()
    );
    assert!(
        stderr.contains(&why),
        "a warning says which file and why: {stderr}"
    );
}

/// Check that sysprof needs no tracefs: in a mount namespace of its own
/// where tracefs is not mounted (as on minimal VMs and containers; the
/// namespace's mount table is the oracle), the in-kernel unwinder still
/// attaches and a 150-frame stack reaches its thread root in at least 95%
/// of the samples. (With the exec program a tracefs tracepoint, it failed
/// to attach there and 0 of 3,998 stacks were whole.)
#[test]
fn recording_needs_no_tracefs() {
    if !can_record("recording_needs_no_tracefs") {
        return;
    }
    let dir = scratch("bare-mounts");
    let exe = build_c(
        "recurse",
        &dir.join("recurse"),
        &["-O2", "-fomit-frame-pointer"],
    );
    let out_path = dir.join("p.json.gz");
    // Unmount every tracefs in a private mount namespace, prove none is
    // left, then become sysprof there.
    let script = r#"for m in $(awk '$9 == "tracefs" { print $5 }' /proc/self/mountinfo); do umount -l "$m" || exit 97; done
if awk '$9 == "tracefs" { found = 1 } END { exit !found }' /proc/self/mountinfo; then echo "tracefs still mounted" >&2; exit 98; fi
exec "$@""#;
    let out = std::process::Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(sysprof_bin())
        .args(["record", "-v", "--no-off-cpu", "-o"])
        .arg(&out_path)
        .args(["--", exe.to_str().unwrap(), "1.5", "150"])
        .output()
        .expect("unshare (util-linux)");
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !stderr.contains("tracefs"),
        "nothing asks for tracefs: {stderr}"
    );
    let pid = field(&out.stdout, "pid").unwrap();
    let profile = Profile::load(&out_path);
    let mut chains = Vec::new();
    for t in profile
        .process_threads(pid)
        .into_iter()
        .filter(|t| t.name().starts_with("recurse"))
    {
        for s in t.on_cpu_stacks(&profile.categories()) {
            let names: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
            if names.contains(&"bottom") || names.iter().any(|n| n.starts_with("[truncated")) {
                chains.push(chain_of(&names, false));
            }
        }
    }
    let whole = chains.iter().filter(|c| **c == Chain::Whole(150)).count();
    eprintln!(
        "no tracefs: {whole} of {} samples whole at 150 frames; {}",
        chains.len(),
        stats_line_of(&stderr)
    );
    assert!(
        chains.len() >= 1000,
        "1.5 s of its own CPU at 999 Hz: {} samples in bottom",
        chains.len()
    );
    assert!(
        whole * 100 >= chains.len() * 95,
        "{whole} of {} whole without tracefs",
        chains.len()
    );
}

/// Check that threads nobody named are told apart by the routine they were
/// started with: node's three worker threads (all "node" to the kernel)
/// are `node (Worker::StartThread #K)`, K node's own `threadId` for the
/// thread each worker said it ran on (`workers.js`, from
/// `/proc/thread-self/stat`); no two of node's threads share a name (one
/// whose stacks never reached its start is `node (tid N)`), and the main
/// thread keeps its own.
#[test]
fn unnamed_threads_are_named_by_their_start_routine() {
    let test = "unnamed_threads_are_named_by_their_start_routine";
    if !can_record(test) {
        return;
    }
    let Some(node) = node(test) else {
        return;
    };
    let dir = scratch(test);
    let out_path = dir.join("p.json.gz");
    let script = workspace_root().join("tests/workloads/workers.js");
    let out = std::process::Command::new(sysprof_bin())
        .current_dir(&dir)
        .args(["record", "-o"])
        .arg(&out_path)
        .arg("--")
        .arg(&node)
        .arg(&script)
        .output()
        .unwrap();
    assert_success(&out);
    let pid = field(&out.stdout, "pid").expect("workers.js printed its pid");
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    let workers: Vec<(u64, u64)> = said
        .lines()
        .filter_map(|l| {
            let l = l.strip_prefix("worker ")?;
            let num = |key: &str| -> Option<u64> {
                l.split(' ')
                    .find_map(|kv| kv.strip_prefix(key))?
                    .parse()
                    .ok()
            };
            Some((num("thread_id=")?, num("tid=")?))
        })
        .collect();
    assert_eq!(workers.len(), 3, "three workers said their thread: {said}");
    let profile = Profile::load(&out_path);
    let threads = profile.process_threads(pid);
    let names: Vec<(u64, String)> = threads
        .iter()
        .map(|t| (t.tid(), t.name().to_string()))
        .collect();
    for (thread_id, tid) in &workers {
        let name = names
            .iter()
            .find(|(t, _)| t == tid)
            .map(|(_, n)| n.as_str());
        assert_eq!(
            name,
            Some(format!("node (Worker::StartThread #{thread_id})").as_str()),
            "worker {thread_id} ran on tid {tid}: {names:?}"
        );
    }
    let main = names
        .iter()
        .find(|(t, _)| *t == pid)
        .map(|(_, n)| n.as_str());
    assert_eq!(main, Some("node"), "{names:?}");
    let mut unique: Vec<&str> = names.iter().map(|(_, n)| n.as_str()).collect();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(
        unique.len(),
        names.len(),
        "no two threads share a name: {names:?}"
    );
}

/// `tables_cached=N` of a `record -v` stderr's kernel-unwinding line.
fn tables_cached(stderr: &str) -> u64 {
    stderr
        .lines()
        .find(|l| l.starts_with("sysprof: kernel unwinding:"))
        .and_then(|l| l.split("tables_cached=").nth(1))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no tables_cached in {stderr}"))
}

/// Sets an environment variable for the sysprof runs of one test, and
/// removes it when the test ends, passed or not.
struct EnvFor(&'static str);

impl EnvFor {
    fn set(name: &'static str, value: &std::path::Path) -> EnvFor {
        std::env::set_var(name, value);
        EnvFor(name)
    }
}

impl Drop for EnvFor {
    fn drop(&mut self) {
        std::env::remove_var(self.0);
    }
}

/// Check that the system's compiled unwind tables are kept on disk and read
/// back by the next run, and never for a file that changed since: the
/// 200-frame victim (root's, in a root directory, with 20,000 rows of its
/// own) recorded three times with a cache of its own. The second run reads its tables from the cache and
/// its stacks are as whole as the first's (at least 99 % of the samples in
/// `bottom`, none wrong); the victim rebuilt with other flags at the same
/// path (other code, other CFI) is compiled again, one cache hit fewer, and
/// its stacks are still whole: a stale table would cut them.
#[test]
fn kernel_unwinding_tables_are_kept_between_runs() {
    if !can_record("kernel_unwinding_tables_are_kept_between_runs") {
        return;
    }
    let dir = scratch("kernel_unwinding_tables_are_kept_between_runs");
    let cache = dir.join("tables");
    let _env = EnvFor::set("SYSPROF_TABLE_CACHE", &cache);
    let exe = dir.join("recurse");
    // 20,000 rows of its own (as libpython has more): a table the worker
    // compiles, which is what is kept.
    let pad = many_rows_source(&dir, "pad", 20_000);
    let mut hits = Vec::new();
    for (run, flags) in [
        ["-O2", "-fomit-frame-pointer"],
        ["-O2", "-fomit-frame-pointer"],
        ["-O1", "-fomit-frame-pointer"],
    ]
    .iter()
    .enumerate()
    {
        if run != 1 {
            let _ = std::fs::remove_file(&exe);
            let mut flags = flags.to_vec();
            flags.push(pad.to_str().unwrap());
            build_c("recurse", &exe, &flags);
        }
        let (chains, stderr) = recurse_chains(&dir, &exe, &["1.0", "200"], "dwarf");
        let whole = chains.iter().filter(|c| **c == Chain::Whole(200)).count();
        let wrong = chains
            .iter()
            .filter(|c| matches!(c, Chain::Wrong | Chain::Whole(_)) && **c != Chain::Whole(200))
            .count();
        let kept = std::fs::read_dir(&cache).map(|d| d.count()).unwrap_or(0);
        hits.push(tables_cached(&stderr));
        eprintln!(
            "run {run} ({flags:?}): {whole} of {} whole, {wrong} wrong; {} tables from the cache, {kept} files in it; {}",
            chains.len(),
            hits[run],
            stderr.lines().find(|l| l.starts_with("sysprof: kernel unwinding:")).unwrap_or("")
        );
        assert!(
            chains.len() >= 500,
            "run {run}: only {} samples in bottom",
            chains.len()
        );
        assert_eq!(
            wrong, 0,
            "run {run}: stacks that claim to be whole and are not"
        );
        assert!(
            whole * 100 >= chains.len() * 99,
            "run {run}: {whole} of {} whole",
            chains.len()
        );
        assert!(
            kept >= 2,
            "run {run}: the program's and libc's tables are kept: {kept} files"
        );
    }
    assert_eq!(hits[0], 0, "a cold cache gives nothing");
    assert!(
        hits[1] >= 2,
        "the second run reads the program's and libc's tables: {hits:?}"
    );
    assert_eq!(
        hits[2] + 1,
        hits[1],
        "the rebuilt program's table is compiled again: {hits:?}"
    );
}

/// Check that a child's stacks from before its exec are walked in the image
/// it was forked with: forkexec forks 80 children, each spends 5 ms of CPU
/// in main -> child_work -> level1 -> ... -> level6 (-O2
/// -fomit-frame-pointer) and then execs /bin/true. A child that short has
/// no entry in the kernel's unwinder yet, so its stacks are handed over, in
/// the same batch as its exec, whose mappings are applied first. At least
/// 90% of the children's samples in level6 must hold the source's chain
/// (before: 227 of 409, the rest unwound in /bin/true's mappings, their
/// leaf alone).
#[test]
fn stacks_from_before_an_exec_unwind_in_the_image_they_were_taken_in() {
    if !can_record("stacks_from_before_an_exec_unwind_in_the_image_they_were_taken_in") {
        return;
    }
    let dir = scratch("stacks_from_before_an_exec");
    let exe = build_c(
        "forkexec",
        &dir.join("forkexec"),
        &["-O2", "-fomit-frame-pointer"],
    );
    let out_path = dir.join("forkexec.json.gz");
    let out = record(
        &["--no-off-cpu", "--", exe.to_str().unwrap(), "80", "5"],
        &out_path,
    );
    assert_success(&out);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let children: Vec<u64> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("child=")?.trim().parse().ok())
        .collect();
    assert_eq!(children.len(), 80, "forkexec's children: {stdout}");
    let profile = Profile::load(&out_path);
    let (mut in_level6, mut whole) = (0, 0);
    for &child in &children {
        for t in profile.process_threads(child) {
            for s in t.on_cpu_stacks(&profile.categories()) {
                let names: Vec<&str> = s.iter().map(|(n, _)| n.as_str()).collect();
                if !names.contains(&"level6") {
                    continue;
                }
                in_level6 += 1;
                let i1 = names.iter().position(|n| *n == "level1");
                let ok = i1.is_some_and(|i1| {
                    i1 >= 2
                        && names[i1 - 1] == "child_work"
                        && names[i1 - 2] == "main"
                        && names[i1..].starts_with(&CHAIN)
                }) && !names.iter().any(|n| n.starts_with("[truncated"));
                if ok {
                    whole += 1;
                } else if in_level6 - whole <= 5 {
                    eprintln!("not whole: {}", compress(&names));
                }
            }
        }
    }
    eprintln!(
        "{whole} of {in_level6} children's samples in level6 whole; {}",
        stats_line_of(&String::from_utf8_lossy(&out.stderr))
    );
    // 80 × 5 ms at the default rate, with room for a loaded machine.
    assert!(in_level6 >= 200, "only {in_level6} samples in level6");
    assert!(
        whole * 100 >= in_level6 * 90,
        "{whole} of {in_level6} whole"
    );
}
