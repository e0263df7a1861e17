//! Integration tests of what a file or a process only claims: a hostile
//! user's sparse "libraries" whose headers claim hundreds of MiB of unwind
//! sections, and processes with megabytes of command line, held while root
//! runs `record -a`. Each compares the recording's peak resident set (the
//! kernel's `ru_maxrss` for that process alone, from `wait4`) with the same
//! recording without the attack, and checks that a victim's samples are
//! still in the profile. The hostile user is `nobody` (through setpriv).

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::Duration;

use sysprof_tests::*;

extern "C" {
    fn wait4(pid: i32, status: *mut i32, options: i32, rusage: *mut i64) -> i32;
}

/// Wait for `child` (its stdout and stderr piped) and return its output and
/// its peak resident set in KiB, as the kernel counted it for that process
/// alone (`ru_maxrss` of `wait4`, not of all children).
fn wait_peak_rss_kib(mut child: Child) -> (Output, u64) {
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let (mut status, mut ru) = (0i32, [0i64; 18]);
    loop {
        // SAFETY: struct rusage is 18 longs on 64-bit Linux; the child is ours.
        let r = unsafe { wait4(child.id() as i32, &mut status, 0, ru.as_mut_ptr()) };
        if r == child.id() as i32 {
            break;
        }
        assert!(
            std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted,
            "wait4: {}",
            std::io::Error::last_os_error()
        );
    }
    let status = <ExitStatus as std::os::unix::process::ExitStatusExt>::from_raw(status);
    // ru_maxrss (KiB) follows the two timevals (4 longs).
    (
        Output {
            status,
            stdout: out.join().unwrap(),
            stderr: err.join().unwrap(),
        },
        ru[4] as u64,
    )
}

/// `sysprof record -v -a -F 499 -d SECONDS`, from its start to its end:
/// the output and the peak resident set (KiB).
fn record_all(out: &Path, seconds: &str) -> (Output, u64) {
    let child = Command::new(sysprof_bin())
        .args(["record", "-v", "-a", "-F", "499", "-d", seconds, "-o"])
        .arg(out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running sysprof");
    let (output, peak) = wait_peak_rss_kib(child);
    assert_success(&output);
    (output, peak)
}

/// A process of nobody's, killed (and reaped) when dropped.
struct Nobodys(Child);

impl Drop for Nobodys {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `exe ARGS` as the unprivileged user nobody (setpriv execs it: the
/// child's pid is its), output discarded.
fn as_nobody_in_background(exe: &str, args: &[&str]) -> Nobodys {
    let child = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", exe])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("setpriv (util-linux) runs commands as another user");
    Nobodys(child)
}

/// A 64-bit ELF shared object of 12 KiB on disk whose `.eh_frame`,
/// `.eh_frame_hdr` and `.debug_frame` each claim `claim` bytes (inside the
/// file's length, which `set_len` makes a hole): what a hostile user can
/// make with `truncate`. One executable load segment covers its first 12 KiB.
fn write_claiming_elf(path: &Path, claim: u64) {
    let shstr = b"\0.eh_frame\0.eh_frame_hdr\0.debug_frame\0.shstrtab\0";
    let name_at = |n: &str| {
        let needle = [n.as_bytes(), b"\0"].concat();
        shstr
            .windows(needle.len())
            .position(|w| w == needle)
            .unwrap() as u32
    };
    let mut f = vec![0u8; 0x3000];
    let put =
        |f: &mut Vec<u8>, at: usize, bytes: &[u8]| f[at..at + bytes.len()].copy_from_slice(bytes);
    put(&mut f, 0, &[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
    // e_type ET_DYN, e_machine x86_64, e_version, e_entry, e_phoff, e_shoff.
    put(&mut f, 16, &3u16.to_le_bytes());
    put(&mut f, 18, &62u16.to_le_bytes());
    put(&mut f, 20, &1u32.to_le_bytes());
    put(&mut f, 24, &0x1000u64.to_le_bytes());
    put(&mut f, 32, &64u64.to_le_bytes());
    put(&mut f, 40, &0x1000u64.to_le_bytes());
    // e_ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx.
    for (at, v) in [(52, 64u16), (54, 56), (56, 1), (58, 64), (60, 5), (62, 4)] {
        put(&mut f, at, &v.to_le_bytes());
    }
    // PT_LOAD, R+X, offset 0, address 0, 0x3000 bytes.
    put(&mut f, 64, &1u32.to_le_bytes());
    put(&mut f, 68, &5u32.to_le_bytes());
    put(&mut f, 64 + 32, &0x3000u64.to_le_bytes());
    put(&mut f, 64 + 40, &0x3000u64.to_le_bytes());
    put(&mut f, 64 + 48, &0x1000u64.to_le_bytes());
    let sections = [
        (".eh_frame", 1u32, 2u64, 0x10_0000u64, 0x3000u64, claim),
        (
            ".eh_frame_hdr",
            1,
            2,
            0x10_0000 + claim,
            0x3000 + claim,
            claim,
        ),
        (".debug_frame", 1, 0, 0, 0x3000 + 2 * claim, claim),
        (".shstrtab", 3, 0, 0, 0x2000, shstr.len() as u64),
    ];
    for (i, (name, kind, flags, addr, offset, size)) in sections.into_iter().enumerate() {
        let h = 0x1000 + 64 * (i + 1);
        put(&mut f, h, &name_at(name).to_le_bytes());
        put(&mut f, h + 4, &kind.to_le_bytes());
        put(&mut f, h + 8, &flags.to_le_bytes());
        put(&mut f, h + 16, &addr.to_le_bytes());
        put(&mut f, h + 24, &offset.to_le_bytes());
        put(&mut f, h + 32, &size.to_le_bytes());
        put(&mut f, h + 48, &1u64.to_le_bytes());
    }
    put(&mut f, 0x2000, shstr);
    std::fs::write(path, &f).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(0x3000 + 3 * claim)
        .unwrap();
}

/// A process's CPU time so far (ns), from `/proc/PID/schedstat`.
fn cpu_ns(pid: u64) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Record everything for 3 s at 499 Hz beside a spinning victim (root),
/// returning the peak resident set (KiB), the victim's on-CPU samples in
/// the profile, how many its own CPU time over the recording calls for
/// (499 a CPU second), and whether its spinning function was named.
fn record_beside_victim(dir: &Path, spin: &Path, label: &str) -> (u64, usize, f64, bool) {
    let mut victim = Command::new(spin)
        .arg("12")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(victim.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    let pid: u64 = line
        .trim()
        .strip_prefix("pid=")
        .expect("spin prints its pid")
        .parse()
        .unwrap();
    let out_path = dir.join(format!("{label}.json.gz"));
    let (c0, t0) = (cpu_ns(pid), monotonic_ns());
    let (out, peak) = record_all(&out_path, "3");
    let (c1, t1) = (cpu_ns(pid), monotonic_ns());
    let _ = victim.kill();
    let _ = victim.wait();
    // The victim's share of a CPU while sysprof ran (attaching and writing
    // included), over the 3 s it sampled at least.
    let expected = (c1 - c0) as f64 / (t1 - t0) as f64 * 3.0 * 499.0;
    let profile = Profile::load(&out_path);
    let categories = profile.categories();
    let stacks: Vec<Vec<(String, String)>> = profile
        .process_threads(pid)
        .iter()
        .flat_map(|t| t.on_cpu_stacks(&categories))
        .collect();
    let named = stacks
        .iter()
        .any(|s| s.iter().any(|(n, _)| n == "short_lived_spin"));
    eprintln!("{label}: peak RSS {} MiB, victim {} samples of ~{expected:.0} expected, named: {named}; {}", peak >> 10, stacks.len(), stats_line(&out));
    (peak, stacks.len(), expected, named)
}

/// Check that two sparse files of 12 KiB on disk, each claiming 765 MiB of
/// `.eh_frame`, `.eh_frame_hdr` and `.debug_frame` and held mapped
/// executable by a sleeping process of another user, cost `record -a` less
/// than twice its peak resident set without them (before the fix: 1.9 GB
/// against 0.27 GB), and that a spinning victim keeps its samples (at least
/// half of what its CPU time calls for) and its function's name.
#[test]
fn sparse_unwind_section_claims_cost_nothing() {
    if !can_record("sparse_unwind_section_claims_cost_nothing") {
        return;
    }
    let dir = scratch("claims-sparse");
    let spin = build_c("spin", &dir.join("spin"), &[]);
    let mapexec = build_c("mapexec", &dir.join("mapexec"), &[]);
    let files: Vec<_> = (0..2)
        .map(|i| dir.join(format!("libclaims{i}.so")))
        .collect();
    for f in &files {
        write_claiming_elf(f, 255 << 20);
    }
    let on_disk: u64 = files
        .iter()
        .map(|f| std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(f).unwrap()) * 512)
        .sum();
    if on_disk > 1 << 20 {
        skip(
            "sparse_unwind_section_claims_cost_nothing",
            &format!(
                "{} keeps no holes (the files take {on_disk} bytes)",
                dir.display()
            ),
        );
        return;
    }
    let (base_peak, base_samples, base_expected, base_named) =
        record_beside_victim(&dir, &spin, "unattacked");
    let holders: Vec<Nobodys> = files
        .iter()
        .map(|f| as_nobody_in_background(mapexec.to_str().unwrap(), &[f.to_str().unwrap()]))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let (peak, samples, expected, named) = record_beside_victim(&dir, &spin, "attacked");
    drop(holders);
    // The unattacked peak is the larger of a run before and one after: with
    // -a it follows whatever else the machine runs (a build beside it maps
    // rustc's libraries, whose tables are tens of MiB).
    let (_, after_peak) = record_all(&dir.join("after.json.gz"), "3");
    let base_peak = base_peak.max(after_peak);
    assert!(
        base_named && base_samples as f64 >= 0.5 * base_expected,
        "the unattacked recording has the victim: {base_samples} of ~{base_expected:.0}"
    );
    assert!(
        peak < 2 * base_peak,
        "two sparse claims took the recording from {} MiB to {} MiB",
        base_peak >> 10,
        peak >> 10
    );
    assert!(
        samples as f64 >= 0.5 * expected,
        "the victim kept {samples} samples of ~{expected:.0}"
    );
    assert!(named, "the victim's spinning function is named");
}

/// Check that 200 sleeping processes of another user, each with a 1.8 MB
/// command line (18 arguments of 100 KiB, within ARG_MAX), cost `record -a`
/// less than twice its peak resident set without them (before the fix:
/// 843 MiB against 0.2 GB), and that their command lines, as `/proc`
/// gives them, are what the attack says.
#[test]
fn huge_command_lines_cost_nothing() {
    if !can_record("huge_command_lines_cost_nothing") {
        return;
    }
    let dir = scratch("claims-cmdline");
    let (_, base_peak) = record_all(&dir.join("unattacked.json.gz"), "2");
    let arg = "a".repeat(100 << 10);
    let mut args = vec!["sh", "-c", "sleep 600; exit 0", "sh"];
    args.extend(std::iter::repeat_n(arg.as_str(), 18));
    let sleepers: Vec<Nobodys> = (0..200)
        .map(|_| as_nobody_in_background(args[0], &args[1..]))
        .collect();
    // Wait until setpriv has become each sh with its arguments.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let lengths = || {
        sleepers
            .iter()
            .map(|s| std::fs::read(format!("/proc/{}/cmdline", s.0.id())).map_or(0, |c| c.len()))
            .collect::<Vec<_>>()
    };
    while lengths().iter().any(|&l| l < 1_800_000) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let short = lengths().iter().filter(|&&l| l < 1_800_000).count();
    assert_eq!(short, 0, "every sleeper holds a 1.8 MB command line");
    let (out, peak) = record_all(&dir.join("attacked.json.gz"), "2");
    drop(sleepers);
    // As in the test above: the larger of an unattacked run before and after.
    let (_, after_peak) = record_all(&dir.join("after.json.gz"), "2");
    let base_peak = base_peak.max(after_peak);
    eprintln!(
        "command lines: peak RSS {} MiB unattacked, {} MiB beside 200 command lines of 1.8 MB; {}",
        base_peak >> 10,
        peak >> 10,
        stats_line(&out)
    );
    assert!(
        peak < 2 * base_peak,
        "200 command lines of 1.8 MB took the recording from {} MiB to {} MiB",
        base_peak >> 10,
        peak >> 10
    );
}
