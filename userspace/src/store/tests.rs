//! The store's tests: writing, querying, compaction, retention and its directory.
use super::maintain::BUCKET_MS;
use super::*;
use crate::model::merge;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sysprof-store-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn window(start_ms: f64, start_ns: u64) -> (Recording, Vec<WindowSpan>) {
    let mut r = segment::tests::sample_recording(start_ns);
    r.start_wall_ms = start_ms;
    (
        r,
        vec![WindowSpan {
            start_ms,
            end_ms: start_ms + 10_000.0,
        }],
    )
}

/// Check that windows written come back by range, that compaction
/// keeps every window once (and a reader seeing both the compacted file
/// and its inputs counts each window once), and that retention drops
/// the oldest first.
#[test]
fn write_query_compact_retain() {
    let d = dir("cycle");
    let store = Store::open(&d, true).unwrap();
    let t0 = 1_800_000_000_000.0; // a bucket boundary
    let mut inputs = Vec::new();
    for i in 0..6 {
        let (r, w) = window(t0 + i as f64 * 10_000.0, 1_000_000_000 + i * 10_000_000_000);
        inputs.push(store.write(r, w, 0).unwrap());
    }
    let q = store.query(t0, t0 + 60_000.0);
    assert_eq!(q.recordings.len(), 6);
    assert!(q.warnings.is_empty(), "{:?}", q.warnings);
    let q = store.query(t0 + 25_000.0, t0 + 35_000.0);
    assert_eq!(q.recordings.len(), 2, "windows 2 and 3 overlap the range");

    // A compacted copy beside its inputs (as a killed compaction leaves it).
    let recs: Vec<Recording> = inputs.iter().map(|s| store.read(s).unwrap()).collect();
    let windows: Vec<WindowSpan> = inputs
        .iter()
        .flat_map(|s| s.header.windows.clone())
        .collect();
    let merged = merge::merge_without_goroutines(recs);
    assert_eq!(merged.sample_count(), 18);
    store.write(merged, windows, 1).unwrap();
    let q = store.query(t0, t0 + 60_000.0);
    assert_eq!(
        q.recordings.len(),
        1,
        "the compacted segment, not its inputs too"
    );
    assert_eq!(q.recordings[0].sample_count(), 18);
    // The inputs a killed compaction left are removed.
    let mut index = store.list().0;
    assert_eq!(store.remove_superseded(&mut index), 6);
    assert_eq!(store.list().0.len(), 1);

    // Compaction of a finished bucket; an unfinished one is left alone.
    let t1 = t0 + BUCKET_MS;
    for i in 0..3 {
        let (r, w) = window(
            t1 + i as f64 * 10_000.0,
            700_000_000_000 + i * 10_000_000_000,
        );
        index.push(store.write(r, w, 0).unwrap());
    }
    let mut warnings = Vec::new();
    assert_eq!(
        store.compact(&mut index, t1 + 30_000.0, &mut warnings),
        0,
        "its bucket is not over"
    );
    assert_eq!(
        store.compact(&mut index, t1 + BUCKET_MS, &mut warnings),
        1,
        "{warnings:?}"
    );
    assert_eq!(index.len(), 2);
    assert_eq!(store.list().0.len(), 2);
    let q = store.query(t1, t1 + BUCKET_MS);
    assert_eq!(
        q.recordings.iter().map(|r| r.sample_count()).sum::<u64>(),
        9
    );

    // Retention: everything older than the age limit goes, then by size.
    let r = store.enforce_retention(&mut index, u64::MAX, t1);
    assert_eq!(r.removed, 1);
    assert_eq!(store.list().0.len(), 1);
    let r = store.enforce_retention(&mut index, 0, 0.0);
    assert_eq!(r.removed, 1);
    assert_eq!(r.bytes, 0);
    assert!(index.is_empty());
    let _ = std::fs::remove_dir_all(&d);
}

/// Check that compaction folds a bucket's brief processes of a name run
/// often into one track, as `show` would: its samples and off-CPU time all
/// kept, the count of processes said, a long-lived process untouched.
#[test]
fn compaction_folds_brief_processes_of_a_name_run_often() {
    let d = dir("fold");
    let store = Store::open(&d, true).unwrap();
    let t0 = 1_800_000_000_000.0; // a bucket boundary
    let mut index = Vec::new();
    let (mut samples, mut off_cpu_ns) = (0, 0);
    for i in 0..3u64 {
        let start_ns = 1_000_000_000 + i * 10_000_000_000;
        let (mut r, w) = window(t0 + i as f64 * 10_000.0, start_ns);
        for j in 0..20u64 {
            let begun = start_ns + j * 100_000_000;
            let pid = (1000 + i * 20 + j) as u32;
            r.processes
                .push(brief_process(pid, begun, 2_000_000, 500_000, String::new()));
        }
        samples += r.sample_count();
        off_cpu_ns += off_cpu_total(&r);
        index.push(store.write(r, w, 0).unwrap());
    }
    let mut warnings = Vec::new();
    assert_eq!(
        store.compact(&mut index, t0 + BUCKET_MS, &mut warnings),
        1,
        "{warnings:?}"
    );
    let q = store.query(t0, t0 + BUCKET_MS);
    assert_eq!(q.recordings.len(), 1);
    let rec = &q.recordings[0];
    let tracks: Vec<(&str, u64)> = rec
        .processes
        .iter()
        .map(|p| (p.name.as_str(), p.folded))
        .collect();
    assert_eq!(tracks, vec![("x", 0), ("true ×60", 60)]);
    assert_eq!(rec.sample_count(), samples, "every sample kept");
    assert_eq!(off_cpu_total(rec), off_cpu_ns, "every off-CPU ns kept");
    let _ = std::fs::remove_dir_all(&d);
}

/// Check that a bucket too large to compact in one run is compacted again
/// from the first runs' outputs, which fit together: 12 windows of 3,000
/// brief processes each (~0.5 MiB each before folding) are 4 runs, then one
/// segment, with every sample and every process counted. Before, the 4 runs'
/// segments stayed apart until the next bucket's compaction, each with its
/// own frame table.
#[test]
fn compaction_compacts_its_runs_outputs_again() {
    let d = dir("passes");
    let store = Store::open(&d, true).unwrap();
    let t0 = 1_800_000_000_000.0; // a bucket boundary
    let mut index = Vec::new();
    let (mut samples, mut off_cpu_ns) = (0, 0);
    let mut raw = 0;
    const WINDOWS: u64 = 12;
    const PER_WINDOW: u64 = 3_000;
    for i in 0..WINDOWS {
        let (r, w) = brief_processes_window(t0, i, PER_WINDOW);
        samples += r.sample_count();
        off_cpu_ns += off_cpu_total(&r);
        let info = store.write(r, w, 0).unwrap();
        raw += info.header.raw_len;
        index.push(info);
    }
    assert!(
        raw > 2 * super::maintain::COMPACT_INPUT_RAW_BYTES,
        "the bucket needs several runs: {raw} raw bytes"
    );
    let mut warnings = Vec::new();
    let written = store.compact(&mut index, t0 + BUCKET_MS, &mut warnings);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(index.len(), 1, "one segment left: {index:?}");
    let (on_disk, _) = store.list();
    assert_eq!(on_disk.len(), 1, "one file left: {on_disk:?}");
    assert!(written >= 3, "runs, then their outputs: {written}");
    let q = store.query(t0, t0 + BUCKET_MS);
    assert_eq!(q.recordings.len(), 1);
    let rec = &q.recordings[0];
    assert_eq!(rec.sample_count(), samples, "every sample kept");
    assert_eq!(off_cpu_total(rec), off_cpu_ns, "every off-CPU ns kept");
    let tracks: Vec<(&str, u64)> = rec
        .processes
        .iter()
        .map(|p| (p.name.as_str(), p.folded))
        .collect();
    let brief = WINDOWS * PER_WINDOW;
    assert_eq!(
        tracks,
        vec![("x", 0), (format!("true ×{brief}").as_str(), brief)]
    );
    assert_eq!(index[0].header.windows.len(), WINDOWS as usize);
    let _ = std::fs::remove_dir_all(&d);
}

/// A process named `true` of one thread that lived `life_ns` from `begun`:
/// one sample at half its life, charged that half, and one off-CPU
/// interval of `off_cpu_ns` from its start.
fn brief_process(
    pid: u32,
    begun: u64,
    life_ns: u64,
    off_cpu_ns: u64,
    cmdline: String,
) -> crate::model::recording::ProcessRecord {
    use crate::model::recording::{ProcessRecord, ThreadRecord};
    let mut t = ThreadRecord {
        tid: pid,
        name: "true".into(),
        start_ns: Some(begun),
        end_ns: Some(begun + life_ns),
        ..Default::default()
    };
    t.samples.time_ns.push(begun + life_ns / 2);
    t.samples.stack.push(1);
    t.samples.cpu_delta_ns.push(life_ns / 2);
    t.samples.cpu.push(0);
    t.off_cpu.time_ns.push(begun);
    t.off_cpu.stack.push(1);
    t.off_cpu.duration_ns.push(off_cpu_ns);
    ProcessRecord {
        pid,
        name: "true".into(),
        cmdline,
        start_ns: Some(begun),
        end_ns: Some(begun + life_ns),
        threads: vec![t],
        ..Default::default()
    }
}

/// Window `i` of the bucket starting at `t0`: the test recording and
/// `per_window` brief processes named `true`, 3 ms apart, each with a
/// sample, an off-CPU interval and a command line of 130-136 bytes (~0.5 MiB
/// decoded for 3,000).
fn brief_processes_window(t0: f64, i: u64, per_window: u64) -> (Recording, Vec<WindowSpan>) {
    let start_ns = 1_000_000_000 + i * 10_000_000_000;
    let (mut r, w) = window(t0 + i as f64 * 10_000.0, start_ns);
    for j in 0..per_window {
        let begun = start_ns + j * 3_000_000;
        let pid = (10_000 + i * per_window + j) as u32;
        r.processes.push(brief_process(
            pid,
            begun,
            1_000_000,
            // Whole microseconds: the store keeps times to the µs.
            200_000 + (j % 7) * 1_000,
            format!("/bin/true {}", "x".repeat(120 + (j % 7) as usize)),
        ));
    }
    (r, w)
}

/// Check that a run of a bucket that cannot be read stops the passes and
/// keeps its files, while the bucket's other runs are compacted: 8 windows
/// of ~0.5 MiB are several runs; the sixth file is damaged. Its run's files
/// stay as they are, with one warning, no second pass is made, each window
/// is held once (in the index and on disk), and every window but the
/// damaged one is still read back, every sample of them.
#[test]
fn a_damaged_run_keeps_its_files_and_stops_the_passes() {
    const WINDOWS: u64 = 8;
    const PER_WINDOW: u64 = 3_000;
    let d = dir("damaged-run");
    let store = Store::open(&d, true).unwrap();
    let t0 = 1_800_000_000_000.0; // a bucket boundary
    let mut index = Vec::new();
    let mut samples_per_window = Vec::new();
    for i in 0..WINDOWS {
        let (r, w) = brief_processes_window(t0, i, PER_WINDOW);
        samples_per_window.push(r.sample_count());
        index.push(store.write(r, w, 0).unwrap());
    }
    let damaged = index[5].path.clone();
    let mut bytes = std::fs::read(&damaged).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&damaged, &bytes).unwrap();
    let mut warnings = Vec::new();
    let written = store.compact(&mut index, t0 + BUCKET_MS, &mut warnings);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("not compacting around") && warnings[0].contains("1800000050000"),
        "{warnings:?}"
    );
    let at = |level: u8| -> Vec<&SegmentInfo> {
        index.iter().filter(|s| s.header.level == level).collect()
    };
    assert!(
        at(0).iter().any(|s| s.path == damaged),
        "the damaged file stays in the index: {index:?}"
    );
    assert_eq!(
        std::fs::read(&damaged).unwrap(),
        bytes,
        "the damaged file stays on disk as it was"
    );
    assert!(
        at(0).len() >= 2 && at(0).iter().all(|s| s.path.exists()) && !at(1).is_empty(),
        "its run's files stay, the other runs are compacted: {index:?}"
    );
    assert_eq!(
        written as usize,
        at(1).len(),
        "no pass after the failing one"
    );
    let expected: Vec<f64> = (0..WINDOWS).map(|i| t0 + i as f64 * 10_000.0).collect();
    let starts = |segments: &[SegmentInfo]| -> Vec<f64> {
        let mut s: Vec<f64> = segments
            .iter()
            .flat_map(|s| s.header.windows.iter().map(|w| w.start_ms))
            .collect();
        s.sort_by(f64::total_cmp);
        s
    };
    assert_eq!(
        starts(&index),
        expected,
        "every window held once: {index:?}"
    );
    let (on_disk, _) = store.list();
    assert_eq!(starts(&on_disk), expected, "and once on disk: {on_disk:?}");
    let q = store.query(t0, t0 + BUCKET_MS);
    assert_eq!(
        q.recordings.len(),
        index.len() - 1,
        "all but the damaged one read"
    );
    assert_eq!(q.warnings.len(), 1, "{:?}", q.warnings);
    let read: u64 = q.recordings.iter().map(|r| r.sample_count()).sum();
    let undamaged: u64 = samples_per_window
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != 5)
        .map(|(_, &n)| n)
        .sum();
    assert_eq!(read, undamaged, "every sample of the other windows read");
    let _ = std::fs::remove_dir_all(&d);
}

fn off_cpu_total(rec: &Recording) -> u64 {
    rec.processes
        .iter()
        .flat_map(|p| &p.threads)
        .flat_map(|t| &t.off_cpu.duration_ns)
        .sum()
}

/// Check that a damaged segment is skipped with a warning naming it,
/// and the others are still read.
#[test]
fn damaged_segment_is_a_warning() {
    let d = dir("damaged");
    let store = Store::open(&d, true).unwrap();
    let t0 = 1_800_000_000_000.0;
    let a = store.write(window(t0, 1).0, window(t0, 1).1, 0).unwrap();
    store
        .write(window(t0 + 10_000.0, 2).0, window(t0 + 10_000.0, 2).1, 0)
        .unwrap();
    let mut bytes = std::fs::read(&a.path).unwrap();
    let n = bytes.len();
    bytes[n - 3] ^= 0xff;
    std::fs::write(&a.path, &bytes).unwrap();
    std::fs::write(d.join("0000000000001-0000000000002.L0.seg"), b"garbage").unwrap();
    let q = store.query(0.0, f64::INFINITY);
    assert_eq!(q.recordings.len(), 1);
    assert_eq!(q.warnings.len(), 2, "{:?}", q.warnings);
    assert!(
        q.warnings
            .iter()
            .any(|w| w.contains(&a.path.display().to_string()) && w.contains("checksum")),
        "{:?}",
        q.warnings
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// Check that once the store is open, swapping its directory for a
/// symlink to another directory moves neither a segment write nor a
/// retention delete there: the segment lands in the directory opened,
/// and a file of the same name in the link's target survives retention.
#[test]
fn a_store_swapped_for_a_symlink_keeps_writing_where_it_was_opened() {
    let d = dir("swapped");
    std::fs::create_dir_all(&d).unwrap();
    let (path, moved, target) = (d.join("store"), d.join("moved"), d.join("target"));
    let store = Store::open(&path, true).unwrap();
    std::fs::create_dir(&target).unwrap();
    std::fs::rename(&path, &moved).unwrap();
    std::os::unix::fs::symlink(&target, &path).unwrap();

    let t0 = 1_800_000_000_000.0;
    let (r, w) = window(t0, 1);
    let seg = store.write(r, w, 0).unwrap();
    let name = seg.path.file_name().unwrap().to_owned();
    assert!(
        moved.join(&name).is_file(),
        "the segment is in the directory opened"
    );
    assert_eq!(
        std::fs::read_dir(&target).unwrap().count(),
        0,
        "nothing was written through the link"
    );
    assert_eq!(
        store.query(0.0, f64::INFINITY).recordings.len(),
        1,
        "read back through the handle"
    );

    std::fs::write(target.join(&name), b"not ours").unwrap();
    let mut index = store.list().0;
    assert_eq!(store.enforce_retention(&mut index, 0, 0.0).removed, 1);
    assert!(!moved.join(&name).exists(), "retention removed our segment");
    assert_eq!(
        std::fs::read(target.join(&name)).unwrap(),
        b"not ours",
        "retention deleted through the link"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// Check that a small file (an exporter's cursor) is replaced whole and
/// read back, leaves no temporary, and that a symlink in its place is
/// not followed.
#[test]
fn small_files_are_replaced_and_links_not_followed() {
    let d = dir("small");
    let store = Store::open(&d, true).unwrap();
    store.replace_small(".export-x.cursor", b"1.000\n").unwrap();
    store.replace_small(".export-x.cursor", b"2.000\n").unwrap();
    assert_eq!(
        store.read_small(".export-x.cursor").as_deref(),
        Some("2.000\n")
    );
    let names: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [".export-x.cursor"], "no temporary left");
    let secret = d.with_extension("secret");
    std::fs::write(&secret, b"3.000\n").unwrap();
    std::os::unix::fs::symlink(&secret, d.join(".export-y.cursor")).unwrap();
    assert_eq!(store.read_small(".export-y.cursor"), None);
    let _ = std::fs::remove_file(&secret);
    let _ = std::fs::remove_dir_all(&d);
}

/// Check that a store directory others could write to, or a symlink,
/// is refused with a line that says what to do.
#[test]
fn unsafe_directories_are_refused() {
    let d = dir("unsafe");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let e = Store::open(&d, true).unwrap_err().to_string();
    assert!(e.contains("chmod go-w"), "{e}");
    let l = dir("unsafe-link");
    std::os::unix::fs::symlink(&d, &l).unwrap();
    let e = Store::open(&l, true).unwrap_err().to_string();
    assert!(e.contains("symlink"), "{e}");
    let _ = std::fs::remove_file(&l);
    let _ = std::fs::remove_dir_all(&d);
}

/// Check that a segment of a format version this sysprof does not read is
/// skipped with one line that names the file and its version, and the
/// others are still read.
#[test]
fn a_segment_of_another_version_is_refused_by_name_and_version() {
    let d = dir("version");
    let store = Store::open(&d, true).unwrap();
    let t0 = 1_800_000_000_000.0;
    let a = store.write(window(t0, 1).0, window(t0, 1).1, 0).unwrap();
    store
        .write(window(t0 + 10_000.0, 2).0, window(t0 + 10_000.0, 2).1, 0)
        .unwrap();
    let mut bytes = std::fs::read(&a.path).unwrap();
    let next = segment::VERSION + 1;
    bytes[8..10].copy_from_slice(&next.to_le_bytes());
    std::fs::write(&a.path, &bytes).unwrap();
    let q = store.query(0.0, f64::INFINITY);
    assert_eq!(q.recordings.len(), 1);
    assert_eq!(
        q.warnings,
        vec![format!(
            "skipping {}: segment format version {next}, this sysprof reads 2 to {}",
            a.path.display(),
            segment::VERSION
        )]
    );
    let _ = std::fs::remove_dir_all(&d);
}
