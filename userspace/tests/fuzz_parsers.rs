//! Property tests of the parsers that read files any user can write: ELF
//! (headers, sections, symbol tables, PLT, FDEs, debug links, and the
//! symbolizer behind them), jitdump and perf maps, CPython binaries and the
//! code objects and line tables read from a Python process. Each runs mutated and
//! truncated inputs for a few seconds (cargo fuzz needs a nightly
//! toolchain; this runs on stable, in CI): no panic, no hang, and no single
//! allocation larger than a limit however large the sizes the file claims
//! (a global allocator watches them). No root needed.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sysprof::binaries::elf::{ElfLimits, ElfReader};
use sysprof::binaries::jitdump::{self, JitdumpTail};
use sysprof::binaries::perfmap::PerfMap;
use sysprof::binaries::{Binaries, BinaryIndex};
use sysprof::symbolize::{names, Symbolicator};

/// Records the largest single allocation.
struct Watch;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Watch {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Watch = Watch;

/// Largest allocation any input may cause: the limits' biggest section
/// (256 MiB) is far above what these small files hold, so 64 MiB means a
/// size claimed by the file was believed.
const MAX_ALLOCATION: usize = 64 << 20;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A small real ELF executable with DWARF, a PLT and FDEs, compiled here.
fn sample_elf() -> Vec<u8> {
    let dir = std::env::temp_dir().join(format!("sysprof-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("a.c");
    std::fs::write(&src, "#include <stdio.h>\nstatic int f(int x) { return x * 3; }\nint g(int x) { return f(x) + 1; }\nint main(int c, char **v) { printf(\"%d\\n\", g(c)); return 0; }\n").unwrap();
    let exe = dir.join("a");
    let ok = std::process::Command::new("cc")
        .args(["-g", "-O1", "-Wl,--build-id"])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("cc is needed")
        .success();
    assert!(ok);
    let bytes = std::fs::read(&exe).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    bytes
}

/// A mutation of `elf`: bytes flipped where headers live (the ELF header,
/// section headers, program headers, section contents), sizes made huge,
/// or a truncation.
fn mutate(elf: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut m = elf.to_vec();
    let shoff = u64::from_le_bytes(elf[0x28..0x30].try_into().unwrap()) as usize;
    match rng.below(4) {
        0 => {
            for _ in 0..1 + rng.below(8) {
                let at = rng.below(m.len());
                m[at] = rng.next() as u8;
            }
        }
        1 => {
            // A section header field: offset, size, link, entsize, flags.
            let shnum = u16::from_le_bytes(elf[0x3c..0x3e].try_into().unwrap()) as usize;
            let h = shoff + rng.below(shnum) * 64;
            let field = [8, 0x18, 0x20, 0x28, 0x38][rng.below(5)];
            let value = [u64::MAX, 1 << 40, rng.next(), 0, 7][rng.below(5)];
            if h + field + 8 <= m.len() {
                m[h + field..h + field + 8].copy_from_slice(&value.to_le_bytes());
            }
        }
        2 => {
            // The ELF header or program headers.
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(0x40 + 56 * 13).min(m.len() - 1);
                m[at] = rng.next() as u8;
            }
        }
        _ => m.truncate(rng.below(m.len())),
    }
    m
}

/// Check that ELF files damaged in every way give answers or errors, never
/// a panic, a hang or a huge allocation: the reader's every method, the
/// unwinder's and the symbolizer's entry points through sysprof's guards.
#[test]
fn damaged_elf_files_never_panic_hang_or_blow_up() {
    let elf = sample_elf();
    let dir = std::env::temp_dir().join(format!("sysprof-fuzz-elf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut symbolizer = Symbolicator::new().with_budget(Duration::from_secs(5));
    let deadline = Instant::now() + Duration::from_secs(8);
    let mut runs = 0;
    while Instant::now() < deadline {
        let m = mutate(&elf, &mut rng);
        let path = dir.join(format!("m{}", runs % 8));
        std::fs::write(&path, &m).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let r = ElfReader::new(&file, ElfLimits::default());
        let _ = r.entry();
        let _ = r.segments();
        let _ = r.build_id();
        let _ = r.debuglink();
        let _ = r.dwarf_check();
        let t = r.name_tables();
        let _ = t.plt_at(0x1030);
        let _ = r.fde_ranges();
        let _ = r.section_data(".eh_frame");
        // Through the same path as a recording: the symbolizer gets what
        // the guards let through (every 4th input: it takes milliseconds).
        if runs % 4 == 0 {
            let mut binaries = Binaries::new();
            let b: BinaryIndex = binaries.intern(&sysprof::sideband::MmapEvent {
                time: 0,
                pid: std::process::id(),
                start: 0,
                len: 0,
                pgoff: 0,
                path: path.to_string_lossy().into_owned(),
                build_id: None,
                inode: None,
            });
            let n = names::symbolize_binary(
                &mut symbolizer,
                binaries.get(b),
                &[0x1040, 0x1100, 0x1200, 0x2000],
                ElfLimits::default(),
                None,
            );
            assert_eq!(n.infos.len(), 4);
        }
        runs += 1;
    }
    let largest = LARGEST.load(Ordering::Relaxed);
    eprintln!(
        "elf: {runs} damaged files, largest allocation {} KiB",
        largest >> 10
    );
    assert!(runs >= 100, "the loop ran: {runs}");
    assert!(
        largest < MAX_ALLOCATION,
        "an allocation of {largest} bytes: a claimed size was believed"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A jitdump with an unwinding-info record and a code load.
fn sample_jitdump() -> Vec<u8> {
    let mut d = Vec::new();
    d.extend(0x4A69_5444u32.to_le_bytes());
    d.extend(1u32.to_le_bytes());
    d.extend(40u32.to_le_bytes());
    d.extend([0u8; 28]);
    let eh = [7u8; 48];
    let hdr = [1u8; 20];
    let mut rec = Vec::new();
    rec.extend(4u32.to_le_bytes());
    rec.extend(((16 + 24 + 68 + 4) as u32).to_le_bytes());
    rec.extend(0u64.to_le_bytes());
    rec.extend(68u64.to_le_bytes());
    rec.extend(20u64.to_le_bytes());
    rec.extend(80u64.to_le_bytes());
    rec.extend(eh);
    rec.extend(hdr);
    rec.extend([0u8; 4]);
    d.extend(rec);
    let mut load = Vec::new();
    load.extend(0u32.to_le_bytes());
    load.extend(((16 + 40 + 4 + 11) as u32).to_le_bytes());
    load.extend(0u64.to_le_bytes());
    load.extend([0u8; 8]);
    load.extend(0x7f00_0000_1000u64.to_le_bytes());
    load.extend(0x7f00_0000_1000u64.to_le_bytes());
    load.extend(11u64.to_le_bytes());
    load.extend(1u64.to_le_bytes());
    load.extend(b"fn\0\0");
    load.extend([0xc3u8; 11]);
    d.extend(load);
    d
}

/// Check that damaged jitdump files (read whole, and as they grow) and
/// perf maps never panic or allocate what they claim.
#[test]
fn damaged_jitdumps_and_perf_maps_never_panic() {
    let good = sample_jitdump();
    let dir = std::env::temp_dir().join(format!("sysprof-fuzz-jit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("jit-1.dump");
    std::fs::write(&path, &good).unwrap();
    let f = std::fs::File::open(&path).unwrap();
    let codes = JitdumpTail::default().poll(&f, 1 << 20);
    assert_eq!(
        codes.len(),
        1,
        "the intact dump has one code load with unwind tables"
    );
    assert_eq!(
        (
            codes[0].start,
            codes[0].size,
            codes[0].eh_frame.len(),
            codes[0].eh_frame_hdr.len()
        ),
        (0x7f00_0000_1000, 11, 48, 20)
    );
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut runs = 0;
    while Instant::now() < deadline {
        let mut m = good.clone();
        for _ in 0..1 + rng.below(6) {
            let at = rng.below(m.len());
            m[at] = rng.next() as u8;
        }
        if rng.below(3) == 0 {
            m.truncate(rng.below(m.len()));
        }
        let _ = jitdump::parse(&m);
        std::fs::write(&path, &m).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let mut tail = JitdumpTail::default();
        let _ = tail.poll(&f, 1 << 20);
        let _ = tail.poll(&f, 1 << 20);
        let text: Vec<u8> = m
            .iter()
            .map(|&b| b"0123456789abcdef \n"[b as usize % 18])
            .collect();
        let map = PerfMap::parse(&text);
        let _ = map.lookup(rng.next());
        runs += 1;
    }
    let largest = LARGEST.load(Ordering::Relaxed);
    eprintln!(
        "jitdump/perf map: {runs} damaged files, largest allocation {} KiB",
        largest >> 10
    );
    assert!(largest < MAX_ALLOCATION, "an allocation of {largest} bytes");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Check that what a Python process's memory or a CPython binary can hold
/// never panics, hangs or blows up the reader: location tables of random
/// bytes, code objects read from random memory (our own, a buffer of random
/// words whose type field is made to match now and then, so the names and
/// line table behind them are followed), and a damaged CPython executable.
#[test]
fn damaged_python_memory_and_binaries_never_panic() {
    use sysprof::runtimes::python::binary as python;
    use sysprof::runtimes::python::read::{fingerprint, location_line, read_code};
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let layout = python::layout(11).expect("3.11's layout");
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut runs = 0;
    let mut words = vec![0u64; 4096];
    while Instant::now() < deadline {
        let table: Vec<u8> = (0..rng.below(64)).map(|_| rng.next() as u8).collect();
        let _ = location_line(&table, rng.next() as u32, rng.next() as i64 % 1000);
        for w in words.iter_mut() {
            // Pointers into the buffer itself, small numbers, or noise.
            *w = match rng.below(3) {
                0 => 0,
                1 => rng.next() % 512,
                _ => rng.next(),
            };
        }
        let base = words.as_ptr() as u64;
        for w in words.iter_mut().step_by(7) {
            *w = base + (rng.next() % (4096 * 8 - 256)) & !7;
        }
        let at = base + (rng.below(2048) * 8) as u64;
        let code_type = if rng.below(2) == 0 {
            words[((at - base) / 8 + 1) as usize]
        } else {
            1
        };
        // The kernel's fingerprint: that of what is there now and then (so
        // the names and line table are followed), else any.
        let word = |off: u64| {
            words
                .get(((at - base + off) / 8) as usize)
                .copied()
                .unwrap_or(0)
        };
        let expected = match rng.below(2) {
            0 => fingerprint(
                word(layout.code_qualname),
                word(layout.code_filename),
                word(layout.code_linetable),
                word(layout.code_firstlineno) as u32,
            ),
            _ => rng.next() as u32,
        };
        let _ = read_code(std::process::id(), at, expected, layout, code_type);
        runs += 1;
    }
    let interpreter = std::fs::read("/usr/bin/python3").unwrap_or_default();
    let mut damaged = 0;
    if !interpreter.is_empty() {
        let dir = std::env::temp_dir().join(format!("sysprof-fuzz-py-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("python3");
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            std::fs::write(&path, mutate(&interpreter, &mut rng)).unwrap();
            let f = std::fs::File::open(&path).unwrap();
            let _ = python::read(&ElfReader::new(&f, ElfLimits::default()));
            damaged += 1;
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    let largest = LARGEST.load(Ordering::Relaxed);
    eprintln!("python: {runs} code objects from random memory, {damaged} damaged interpreters, largest allocation {} KiB", largest >> 10);
    assert!(
        runs > 100 && largest < MAX_ALLOCATION,
        "an allocation of {largest} bytes"
    );
}

/// HotSpot's structure tables, methods' line tables and signatures, read
/// from memory a JVM's user writes: random words (pointers into the buffer
/// itself, small numbers, noise) as its tables, random bytes as its line
/// tables and descriptors. No panic, no hang, bounded allocations.
#[test]
fn damaged_jvm_memory_never_panics() {
    use sysprof::runtimes::hotspot::binary::HotSpotSymbols;
    use sysprof::runtimes::hotspot::read::{decode_line_table, external_name, HotSpotLayout};
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let deadline = Instant::now() + Duration::from_secs(2);
    let (mut runs, mut layouts) = (0, 0);
    let mut words = vec![0u64; 4096];
    while Instant::now() < deadline {
        let bytes: Vec<u8> = (0..rng.below(96)).map(|_| rng.next() as u8).collect();
        let _ = decode_line_table(&bytes);
        let sig: Vec<u8> = bytes
            .iter()
            .map(|b| b"()[LIJZV;/a"[*b as usize % 11])
            .collect();
        let _ = external_name(&bytes, &bytes, &sig);
        let base = words.as_ptr() as u64;
        for w in words.iter_mut() {
            *w = match rng.below(4) {
                0 => 0,
                1 => rng.next() % 64,
                2 => base + (rng.next() % (4096 * 8 - 64)),
                _ => rng.next(),
            };
        }
        let mut at = || (rng.below(4096) * 8) as u64;
        let s = HotSpotSymbols {
            structs: at(),
            struct_type_name: at(),
            struct_field_name: at(),
            struct_is_static: at(),
            struct_offset: at(),
            struct_address: at(),
            struct_stride: at(),
            types: at(),
            type_name: at(),
            type_size: at(),
            type_stride: at(),
            int_constants: at(),
            int_name: at(),
            int_value: at(),
            int_stride: at(),
        };
        if let Ok(l) = HotSpotLayout::read(std::process::id(), base, &s) {
            layouts += 1;
            let _ = l.interpreter(std::process::id(), base);
            let _ = l.method(std::process::id(), base + at());
        }
        runs += 1;
    }
    let largest = LARGEST.load(Ordering::Relaxed);
    eprintln!(
        "jvm: {runs} layouts from random memory ({layouts} read), largest allocation {} KiB",
        largest >> 10
    );
    assert!(
        runs > 50 && largest < MAX_ALLOCATION,
        "an allocation of {largest} bytes"
    );
}
