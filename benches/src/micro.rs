//! Micro-benchmarks of the userspace hot path on a synthetic event stream.
//!
//! In: nothing (the stream is generated: 1000 distinct stacks of 20 user
//! and 8 kernel frames, the user frames inside this benchmark's own binary
//! so symbolication does real work). Out: per stage, items per second —
//! decoding + collecting (samples/s), finishing (replay, resolve and
//! symbolicate, samples/s), symbolizing with a warm cache (addresses/s),
//! writing the gzip profile (samples/s), reading the kernel's symbols
//! (symbols/s), reading a Python code object from a live interpreter (code
//! objects/s).

use std::time::Instant;

use sysprof::bpf::abi::{decode_sample, SampleEvent, MAX_STACK_DEPTH, RECORD_SAMPLE};
use sysprof::collector::{Collector, CollectorOptions, PidFilter, WindowRange};
use sysprof::profile::{build_profile, HostInfo};
use sysprof::sideband::{MmapEvent, SidebandEvent};
use sysprof::symbolize::Symbolicator;

const PID: u32 = 4242;
const BASE: u64 = 0x5555_0000_0000;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Records as 8-byte-aligned word buffers, like the ring buffer's.
fn records(n: usize, text_len: u64) -> Vec<Vec<u64>> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let stacks: Vec<(Vec<u64>, Vec<u64>)> = (0..1000)
        .map(|_| {
            let user = (0..20)
                .map(|_| BASE + 0x1000 + rng.next() % text_len.saturating_sub(0x2000).max(1))
                .collect();
            let kernel = (0..8)
                .map(|_| 0xffff_ffff_8100_0000 + rng.next() % 0x80_0000)
                .collect();
            (user, kernel)
        })
        .collect();
    let words = std::mem::size_of::<SampleEvent>() / 8;
    (0..n)
        .map(|i| {
            let (u, k) = &stacks[rng.next() as usize % stacks.len()];
            let mut e: SampleEvent = unsafe { std::mem::zeroed() };
            e.kind = RECORD_SAMPLE;
            e.time_ns = 1_000_000 + i as u64 * 1_000_000;
            e.sum_exec_runtime = i as u64 * 900_000;
            e.pid = PID;
            e.tid = PID + (i % 4) as u32;
            e.comm[..5].copy_from_slice(b"bench");
            e.ustack_len = u.len() as u32;
            e.kstack_len = k.len() as u32;
            e.ustack[..u.len().min(MAX_STACK_DEPTH)].copy_from_slice(u);
            e.kstack[..k.len()].copy_from_slice(k);
            let mut buf = vec![0u64; words];
            // SAFETY: buf holds exactly size_of::<SampleEvent>() bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    &e as *const _ as *const u8,
                    buf.as_mut_ptr() as *mut u8,
                    words * 8,
                )
            };
            buf
        })
        .collect()
}

/// Run every stage; returns (stage, items per second).
pub fn run(quick: bool) -> Vec<(String, f64)> {
    // The same stream in --quick: it takes seconds, and a smaller one would
    // measure fixed costs instead of the per-sample path.
    let _ = quick;
    let n = 500_000;
    let exe = std::fs::read_link("/proc/self/exe").expect("own executable");
    let text_len = std::fs::metadata(&exe)
        .map(|m| m.len())
        .unwrap_or(1 << 20)
        .min(8 << 20);
    let recs = records(n, text_len);
    let mut out = Vec::new();

    let mut c = Collector::new(PidFilter::All, CollectorOptions::default());
    c.handle_sideband(SidebandEvent::Mmap(MmapEvent {
        time: 0,
        pid: PID,
        start: BASE,
        len: text_len,
        pgoff: 0,
        path: exe.to_string_lossy().into_owned(),
        build_id: None,
        inode: None,
    }));
    let t = Instant::now();
    for r in &recs {
        // SAFETY: viewing our own word buffer as bytes.
        let bytes = unsafe { std::slice::from_raw_parts(r.as_ptr() as *const u8, r.len() * 8) };
        c.handle_sample(&decode_sample(bytes).expect("valid record"));
    }
    out.push((
        "decode + collect (samples)".to_string(),
        n as f64 / t.elapsed().as_secs_f64(),
    ));

    let t = Instant::now();
    let rec = c.finish_window(WindowRange {
        start_ns: 0,
        end_ns: n as u64 * 1_000_000 + 2_000_000,
        start_wall_ms: 0.0,
        interval_ms: 1.0,
        continuous: false,
    });
    out.push((
        "finish: replay, resolve, symbolicate (samples)".to_string(),
        n as f64 / t.elapsed().as_secs_f64(),
    ));

    let t = Instant::now();
    let profile = build_profile(&rec, &HostInfo::default(), None);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
    serde_json::to_writer(&mut gz, &profile).unwrap();
    let bytes = gz.finish().unwrap();
    out.push((
        "write gzip profile (samples)".to_string(),
        n as f64 / t.elapsed().as_secs_f64(),
    ));
    eprintln!(
        "micro: {n} samples, {} frames, profile {} bytes ({:.1} bytes/sample)",
        rec.frames.len(),
        bytes.len(),
        bytes.len() as f64 / n as f64
    );

    let mut sym = Symbolicator::new();
    let mut rng = Rng(7);
    let mut offsets: Vec<u64> = (0..20_000)
        .map(|_| 0x1000 + rng.next() % text_len.saturating_sub(0x2000).max(1))
        .collect();
    offsets.sort_unstable();
    let path = exe.to_string_lossy().into_owned();
    let _ = sym.symbolize_elf(&path, &offsets, true);
    let t = Instant::now();
    let _ = sym.symbolize_elf(&path, &offsets, true);
    out.push((
        "symbolize, warm cache (addresses)".to_string(),
        offsets.len() as f64 / t.elapsed().as_secs_f64(),
    ));
    if let Some(rate) = kernel_symbols() {
        out.push(("read and index /proc/kallsyms (symbols)".to_string(), rate));
    }
    if let Some(rate) = python_code_objects() {
        out.push((
            "read a Python code object from its process (code objects)".to_string(),
            rate,
        ));
    }
    out
}

/// Kernel symbols read and indexed per second, as `record` does at its
/// start when no recording of this boot kept them (the kernel formatting
/// the text is most of it): the best of five reads; and, printed beside,
/// the best of five snapshots as `record` takes them (from the kept file
/// once one is). None where `/proc/kallsyms` hides its addresses.
fn kernel_symbols() -> Option<f64> {
    let mut best = f64::MAX;
    let mut count = 0;
    for _ in 0..5 {
        let t = Instant::now();
        let table = sysprof::symbolize::kernel::KernelSymbols::read_kallsyms().ok()?;
        best = best.min(t.elapsed().as_secs_f64());
        count = table.len();
    }
    let mut best_kept = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let _ = sysprof::symbolize::kernel::KernelSymbols::snapshot();
        best_kept = best_kept.min(t.elapsed().as_secs_f64());
    }
    eprintln!(
        "micro: {count} kernel text symbols, best read {:.1} ms; best snapshot {:.1} ms (kept between recordings where root)",
        best * 1e3,
        best_kept * 1e3
    );
    Some(count as f64 / best)
}

/// Code objects read per second from a live CPython (Debian's python3, left
/// waiting on its stdin): names, file and line table each, as the collector
/// reads a new one. None without that interpreter.
fn python_code_objects() -> Option<f64> {
    use std::io::{BufRead, Write};
    // Each code object with what its fingerprint is made of (the objects'
    // ids are their addresses), as the kernel would read it.
    let script = "import sys\nfs=[]\nfor i in range(2000):\n    exec(f'def f{i}(x):\\n    return x+{i}\\n', globals())\n    fs.append(globals()[f'f{i}'])\nc=[f.__code__ for f in fs]\nprint(sys.version_info.minor, id(type(c[0])), *[f'{id(x)},{id(x.co_qualname)},{id(x.co_filename)},{id(x.co_linetable)},{x.co_firstlineno}' for x in c], flush=True)\nsys.stdin.read()\n";
    let mut child = std::process::Command::new("/usr/bin/python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take()?)
        .read_line(&mut line)
        .ok()?;
    let mut words = line.split_whitespace();
    let layout = sysprof::runtimes::python::binary::layout(words.next()?.parse().ok()?)?;
    let code_type: u64 = words.next()?.parse().ok()?;
    let codes: Vec<(u64, u32)> = words
        .filter_map(|w| {
            let v: Vec<u64> = w.split(',').filter_map(|x| x.parse().ok()).collect();
            (v.len() == 5).then(|| {
                (
                    v[0],
                    sysprof::runtimes::python::read::fingerprint(v[1], v[2], v[3], v[4] as u32),
                )
            })
        })
        .collect();
    let t = Instant::now();
    let read = codes
        .iter()
        .filter(|&&(c, fp)| {
            sysprof::runtimes::python::read::read_code(child.id(), c, fp, layout, code_type).is_ok()
        })
        .count();
    let rate = read as f64 / t.elapsed().as_secs_f64();
    eprintln!("micro: {read} of {} Python code objects read", codes.len());
    let _ = child.stdin.take().map(|mut s| s.write_all(b""));
    let _ = child.kill();
    let _ = child.wait();
    (read == codes.len()).then_some(rate)
}
