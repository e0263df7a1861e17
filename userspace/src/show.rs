//! `sysprof show`: a profile of any past range, from the agent's store.
//!
//! In: [`ShowArgs`]. Out: the windows overlapping `--since`..`--until`
//! merged into one recording ([`crate::model::merge`]) a segment at a
//! time, narrowed to the processes asked for, brief processes of a name
//! run often folded into one track ([`crate::model::fold`]), cut to the
//! range, and written through the
//! same writers as `record` (Firefox Profiler with its timeline, folded
//! stacks, pprof); or with `--list`, the store's windows as a table.
//! Damaged windows are skipped with a warning naming the file; the rest
//! of the range is still shown.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::cli::{ShowArgs, ShowFormat};
use crate::error::RecordError;
use crate::model::fold::{Folded, Folder};
use crate::model::merge;
use crate::model::recording::{CounterRecord, ProcessRecord, Recording};
use crate::profile::output::OutputFile;
use crate::profile::{HostInfo, ProfileWriter};
use crate::store::Store;

/// Wall clock now, ms since the epoch.
fn now_ms() -> f64 {
    crate::sys::clock::clock_anchor().0
}

/// Local time fields to ms since the epoch (None if it does not exist).
fn local_ms(year: i32, month: u32, day: u32, h: u32, m: u32, s: f64) -> Option<f64> {
    // SAFETY: a zeroed tm is valid; mktime reads and normalizes it.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    tm.tm_year = year - 1900;
    tm.tm_mon = month as i32 - 1;
    tm.tm_mday = day as i32;
    tm.tm_hour = h as i32;
    tm.tm_min = m as i32;
    tm.tm_sec = s.trunc() as i32;
    tm.tm_isdst = -1;
    // SAFETY: a valid tm.
    let t = unsafe { libc::mktime(&mut tm) };
    (t != -1).then(|| t as f64 * 1e3 + s.fract() * 1e3)
}

/// Today's date in local time: (year, month, day).
fn today() -> (i32, u32, u32) {
    // SAFETY: time and localtime_r with valid pointers.
    unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&t, &mut tm);
        (tm.tm_year + 1900, tm.tm_mon as u32 + 1, tm.tm_mday as u32)
    }
}

fn parse_clock(s: &str) -> Option<(u32, u32, f64)> {
    let mut it = s.split(':');
    let h: u32 = it.next()?.parse().ok()?;
    let m: u32 = it.next()?.parse().ok()?;
    let sec: f64 = match it.next() {
        Some(x) => x.parse().ok()?,
        None => 0.0,
    };
    (it.next().is_none() && h < 24 && m < 60 && (0.0..61.0).contains(&sec)).then_some((h, m, sec))
}

/// Why a `--since` or `--until` was not understood; each says what works.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WhenError {
    /// Has a `:` but is no clock time.
    #[error("{0:?}: not a time (like 03:12, 03:12:30 or 2026-11-22T03:12:00)")]
    NotATime(String),
    /// The date part is no date.
    #[error("{0:?}: not a date (write it 2026-11-22T03:12:00)")]
    NotADate(String),
    /// A date and time that local time skips.
    #[error("{0:?}: no such local time")]
    NoSuchTime(String),
    /// A time today that local time skips.
    #[error("{0:?}: no such local time today")]
    NoSuchTimeToday(String),
    /// Neither a duration nor a time.
    #[error(
        "{0:?}: give a duration ago (30s, 10m, 2h, 1d) or a time (03:12, 2026-11-22T03:12:00)"
    )]
    Unknown(String),
}

/// A bad `--since` or `--until`, said with its flag.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{flag} {error}")]
pub struct BadWhen {
    /// `--since` or `--until`.
    pub flag: &'static str,
    /// What is wrong with it.
    pub error: WhenError,
}

/// A moment from `--since`/`--until`: `now`, a duration ago (`30s`, `10m`,
/// `2h`, `1d`), a local time today (`03:12`, `03:12:30`; yesterday if that
/// is still to come), or a local date and time (`2026-11-22T03:12:00`,
/// `2026-11-22 03:12`). Returns ms since the epoch.
pub fn parse_when(s: &str, now_ms: f64) -> Result<f64, WhenError> {
    let t = s.trim();
    if t == "now" {
        return Ok(now_ms);
    }
    if t.contains(':') {
        let (date, clock) = match t.split_once(['T', ' ']) {
            Some((d, c)) => (Some(d), c),
            None => (None, t),
        };
        let (h, m, sec) = parse_clock(clock).ok_or_else(|| WhenError::NotATime(s.into()))?;
        return match date {
            Some(d) => {
                let mut parts = d.split('-');
                let (y, mo, da) = (
                    parts.next().and_then(|x| x.parse().ok()),
                    parts.next().and_then(|x| x.parse().ok()),
                    parts.next().and_then(|x| x.parse().ok()),
                );
                match (y, mo, da, parts.next()) {
                    (Some(y), Some(mo), Some(da), None)
                        if (1..=12).contains(&mo) && (1..=31).contains(&da) =>
                    {
                        local_ms(y, mo, da, h, m, sec)
                            .ok_or_else(|| WhenError::NoSuchTime(s.into()))
                    }
                    _ => Err(WhenError::NotADate(s.into())),
                }
            }
            None => {
                let (y, mo, da) = today();
                let at = local_ms(y, mo, da, h, m, sec)
                    .ok_or_else(|| WhenError::NoSuchTimeToday(s.into()))?;
                Ok(if at > now_ms { at - 86_400_000.0 } else { at })
            }
        };
    }
    let d = crate::units::parse_duration(t).map_err(|_| WhenError::Unknown(s.into()))?;
    Ok(now_ms - d.as_secs_f64() * 1e3)
}

/// A time as local `YYYY-MM-DD HH:MM:SS`.
pub fn local_time_string(ms: f64) -> String {
    // SAFETY: localtime_r with valid pointers.
    let tm = unsafe {
        let t = (ms / 1e3).floor() as libc::time_t;
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&t, &mut tm);
        tm
    };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// Run `show`; returns the exit status.
pub fn run(args: ShowArgs) -> Result<i32, RecordError> {
    let store = Store::open(&args.store, false).map_err(|e| RecordError::Store {
        source: e.into(),
        hint: "give the agent's store with --store",
    })?;
    if args.list {
        return list(&store, args.sizes);
    }
    let (since, until) = range(&args)?;
    let output = open_output(&args)?;
    // One segment at a time: what ended a segment earlier is narrowed to
    // the processes asked for and folded (brief ones of a name run often
    // are one track), so an hour of a fork storm is neither held nor
    // written one process at a time.
    let (state, warnings) = store.query_each(since, until, ShowMerge::default, |m, window| {
        m.add(window, &args)
    });
    for w in &warnings {
        eprintln!("sysprof: warning: {}", crate::escape::warning(w));
    }
    let Some(state) = state.filter(|m| m.windows > 0) else {
        return Err(nothing_in_range(&store, &args, since, until));
    };
    let (mut rec, folded) = state.finish(&args);
    // Wall-clock range on the merged recording's clock.
    let to_ns = |ms: f64| (rec.start_ns as f64 + (ms - rec.start_wall_ms) * 1e6).max(0.0) as u64;
    let (a, b) = (to_ns(since), to_ns(until));
    rec.clip(a, b);
    if rec.processes.is_empty() {
        return Err(RecordError::NoProcessMatches);
    }
    if let Some((path, bytes)) = write(&rec, args.format, output)? {
        say_written(&rec, &folded, &path, bytes, args.format);
    }
    // Said by kind (samples are not scheduler records), for the windows shown.
    let lost = crate::summary::lost_parts(&rec.stats, false);
    if !lost.is_empty() {
        eprintln!(
            "sysprof: the agent lost {} in the windows shown",
            lost.join(", ")
        );
    }
    Ok(0)
}

/// `--since` and `--until` as ms since the epoch, the first before the second.
fn range(args: &ShowArgs) -> Result<(f64, f64), RecordError> {
    let now = now_ms();
    let since = parse_when(&args.since, now).map_err(|error| {
        RecordError::BadOption(
            BadWhen {
                flag: "--since",
                error,
            }
            .into(),
        )
    })?;
    let until = match &args.until {
        Some(u) => parse_when(u, now).map_err(|error| {
            RecordError::BadOption(
                BadWhen {
                    flag: "--until",
                    error,
                }
                .into(),
            )
        })?,
        None => now,
    };
    if since >= until {
        return Err(RecordError::Usage(format!(
            "--since ({}) is not before --until ({})",
            local_time_string(since),
            local_time_string(until)
        )));
    }
    Ok((since, until))
}

/// The file to write, `-o`'s or the format's default; None for folded
/// stacks to stdout.
fn open_output(args: &ShowArgs) -> Result<Option<OutputFile>, RecordError> {
    let output = match (&args.output, args.format) {
        (Some(p), _) => Some(p.clone()),
        (None, ShowFormat::Firefox) => Some(PathBuf::from("profile.json.gz")),
        (None, ShowFormat::Pprof) => Some(PathBuf::from("profile.pb.gz")),
        (None, ShowFormat::Folded) => None,
    };
    Ok(match output {
        // `-` too: written to stdout through the same path.
        Some(p) => Some(OutputFile::create(&p)?),
        None => None,
    })
}

/// The error for a range with no window, saying what the store holds.
fn nothing_in_range(store: &Store, args: &ShowArgs, since: f64, until: f64) -> RecordError {
    let (all, _) = store.list();
    let held = match (all.first(), all.last()) {
        (Some(a), Some(b)) => format!(
            "it holds {} to {}",
            local_time_string(a.header.start_ms),
            local_time_string(b.header.end_ms)
        ),
        _ => "it is empty (is `sysprof agent` running with this --store?)".into(),
    };
    RecordError::NothingInRange {
        store: args.store.clone(),
        since: local_time_string(since),
        until: local_time_string(until),
        held,
    }
}

/// Write `rec` in `format` to `output` (folded stacks to stdout without
/// one); the file written and its bytes.
fn write(
    rec: &Recording,
    format: ShowFormat,
    output: Option<OutputFile>,
) -> Result<Option<(PathBuf, u64)>, RecordError> {
    Ok(match (format, output) {
        (ShowFormat::Folded, None) => {
            let stdout = std::io::stdout();
            let mut lock = std::io::BufWriter::new(stdout.lock());
            crate::profile::folded::write_folded(rec, &mut lock)
                .and_then(|n| lock.flush().map(|_| n))
                .map_err(RecordError::Stdout)?;
            None
        }
        (ShowFormat::Folded, Some(out)) => {
            let path = out.path().to_path_buf();
            let bytes =
                out.commit_with(|w| crate::profile::folded::write_folded(rec, w).map(|_| ()))?;
            Some((path, bytes))
        }
        (ShowFormat::Pprof, Some(out)) => {
            let path = out.path().to_path_buf();
            let bytes = out.commit_with(|w| {
                w.write_all(&crate::export::pprof::encode_gzip(
                    rec,
                    &crate::export::Labels::local(),
                ))
            })?;
            Some((path, bytes))
        }
        (ShowFormat::Firefox, Some(out)) => {
            let host = HostInfo::current(std::env::args().collect::<Vec<_>>().join(" "));
            let path = out.path().to_path_buf();
            let written = out.stream().and_then(|s| {
                ProfileWriter::new(s)
                    .and_then(|w| w.finish(rec, None, &host, None))
                    .map_err(|source| RecordError::OutputNotWritable {
                        path: path.clone(),
                        source,
                    })
            })?;
            let bytes = out.commit_stream(written)?;
            Some((path, bytes))
        }
        // Firefox and pprof have a default file above.
        (_, None) => {
            return Err(RecordError::Usage(
                "give a file with -o for this format".into(),
            ))
        }
    })
}

/// The line saying what was written: the range, samples, processes
/// (brief ones folded said apart), threads, and the file.
fn say_written(rec: &Recording, folded: &Folded, path: &Path, bytes: u64, format: ShowFormat) {
    let threads: usize = rec.processes.iter().map(|p| p.threads.len()).sum();
    let processes = (rec.processes.len() as u64 + folded.processes).saturating_sub(folded.tracks);
    let folded_text = match folded.tracks {
        0 => String::new(),
        1 => format!(
            " ({} brief ones of a name run often, as one track)",
            folded.processes
        ),
        n => format!(
            " ({} brief ones of {n} names run often, one track per name)",
            folded.processes
        ),
    };
    eprintln!(
        "sysprof: {} to {}: {} samples, {processes} processes{folded_text}, {threads} threads; wrote {} ({}){}",
        local_time_string(rec.start_wall_ms),
        local_time_string(rec.start_wall_ms + (rec.end_ns - rec.start_ns) as f64 / 1e6),
        rec.sample_count(),
        crate::escape::path(path),
        crate::units::human_bytes(bytes),
        if format == ShowFormat::Firefox { crate::escape::open_hint(path) } else { String::new() },
    );
}

/// Whether `-p`, `--comm` and `--container` ask for process `p`.
fn wanted(p: &ProcessRecord, args: &ShowArgs) -> bool {
    let container = args.container.as_deref();
    // A track the store folded stands for many pids: none of them is asked
    // for by its own.
    (args.pids.is_empty() || (args.pids.contains(&p.pid) && p.folded == 0))
        && args
            .comm
            .as_deref()
            .is_none_or(|c| p.base_name() == c || p.threads.first().is_some_and(|t| t.name == c))
        && container.is_none_or(|c| {
            p.cgroup.as_deref().is_some_and(|g| {
                g.contains(c)
                    || crate::model::cgroup::CgroupIdentity::of_path(g)
                        .is_some_and(|id| id.matches(c))
            })
        })
}

/// The store's segments merged as they are read: processes that ended a
/// segment earlier are taken out, narrowed and folded as they come.
#[derive(Default)]
struct ShowMerge {
    merger: merge::Merger,
    windows: usize,
    /// Ended processes asked for that keep a track of their own.
    ended: Vec<ProcessRecord>,
    counters: Vec<CounterRecord>,
    folder: Folder,
}

impl ShowMerge {
    fn add(&mut self, window: Recording, args: &ShowArgs) {
        // Segments come oldest first: nothing later adds to a process that
        // ended before the last one began.
        let cut = self.merger.last_start_ns();
        self.merger.add(window);
        self.windows += 1;
        let (ended, counters) = self.merger.take_ended(cut);
        for p in ended.into_iter().filter(|p| wanted(p, args)) {
            self.ended.extend(self.folder.add(p));
        }
        self.counters.extend(counters);
    }

    /// The merged recording of what was asked for, and what was folded.
    fn finish(self, args: &ShowArgs) -> (Recording, Folded) {
        let mut rec = self.merger.finish();
        rec.retain_processes(|p| wanted(p, args));
        // Nothing more is coming: what ended in the last segments is folded too.
        let mut folder = self.folder;
        rec.processes = std::mem::take(&mut rec.processes)
            .into_iter()
            .filter_map(|p| folder.add(p))
            .collect();
        let (held, groups, folded) = folder.finish();
        rec.processes.extend(self.ended);
        rec.processes.extend(held);
        rec.processes.extend(groups);
        rec.processes.sort_by_key(|p| (p.pid, p.start_ns));
        rec.counters.extend(self.counters);
        rec.keep_counters_of_own_processes();
        rec.counters
            .sort_by(|a, b| (a.pid, &a.name).cmp(&(b.pid, &b.name)));
        (rec, folded)
    }
}

/// `--list`: one line per segment, then the totals.
fn list(store: &Store, sizes: bool) -> Result<i32, RecordError> {
    let (segs, warnings) = store.list();
    for w in &warnings {
        eprintln!("sysprof: warning: {}", crate::escape::warning(w));
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{:<19}  {:<19}  {:>7}  {:>9}  {:>9}  {:>10}  file",
        "from", "to", "windows", "samples", "processes", "bytes"
    );
    let (mut samples, mut bytes) = (0u64, 0u64);
    for s in &segs {
        let h = &s.header;
        samples += h.samples;
        bytes += s.bytes;
        let _ = writeln!(
            out,
            "{:<19}  {:<19}  {:>7}  {:>9}  {:>9}  {:>10}  {}",
            local_time_string(h.start_ms),
            local_time_string(h.end_ms),
            h.windows.len(),
            h.samples,
            h.processes,
            s.bytes,
            s.path
                .file_name()
                .map(|n| crate::escape::escape(&n.to_string_lossy()).into_owned())
                .unwrap_or_default()
        );
    }
    let _ = writeln!(
        out,
        "{} files, {} windows, {samples} samples, {} ({:.1} bytes per sample)",
        segs.len(),
        segs.iter().map(|s| s.header.windows.len()).sum::<usize>(),
        crate::units::human_bytes(bytes),
        bytes as f64 / samples.max(1) as f64
    );
    if sizes {
        list_sizes(&mut out, store, &segs);
    }
    Ok(0)
}

/// `--sizes`: per kind, the bytes a sample of the compacted segments and of
/// the rest hold ([`crate::store::segment::PartSizes`]); a segment that
/// cannot be read (damaged, compacted away meanwhile) is left out and said.
fn list_sizes(out: &mut impl Write, store: &Store, segs: &[crate::store::SegmentInfo]) {
    use crate::store::segment::PartSizes;
    let mut levels: [(PartSizes, u64, usize); 2] = Default::default();
    let mut unread = 0;
    for s in segs {
        match store.part_sizes(s) {
            Ok(p) => {
                let l = &mut levels[usize::from(s.header.level > 0)];
                l.0.add(&p);
                l.1 += s.header.samples;
                l.2 += 1;
            }
            Err(_) => unread += 1,
        }
    }
    for (name, (parts, samples, files)) in [("compacted", &levels[1]), ("windows", &levels[0])] {
        if *files == 0 {
            continue;
        }
        let per = |b: f64| b / (*samples).max(1) as f64;
        let each: Vec<String> = parts
            .parts()
            .iter()
            .map(|(n, b)| format!("{n} {:.1}", per(*b)))
            .collect();
        let _ = writeln!(
            out,
            "{name} ({files} files, {samples} samples): {:.1} bytes per sample: {}",
            per(parts.total()),
            each.join(", ")
        );
    }
    if unread > 0 {
        let _ = writeln!(
            out,
            "{unread} files not read for their sizes (damaged, or compacted meanwhile)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check durations ago, times today (yesterday when still to come),
    /// dates with times, and that nonsense is one line saying what works.
    #[test]
    fn when() {
        let now = 1_800_000_000_000.0;
        assert_eq!(parse_when("30s", now).unwrap(), now - 30_000.0);
        assert_eq!(parse_when("2h", now).unwrap(), now - 7_200_000.0);
        assert_eq!(parse_when("now", now).unwrap(), now);
        let t = parse_when("2026-11-22T03:12:00", now).unwrap();
        assert_eq!(local_time_string(t), "2026-11-22 03:12:00");
        let t = parse_when("2026-11-22 03:12", now).unwrap();
        assert_eq!(local_time_string(t), "2026-11-22 03:12:00");
        let real_now = now_ms();
        let t = parse_when("00:00", real_now).unwrap();
        assert!(t <= real_now && real_now - t < 86_400_000.0);
        let e = parse_when("yesterday-ish", now).unwrap_err().to_string();
        assert!(e.contains("10m") && e.contains("03:12"), "{e}");
        assert!(parse_when("25:00", now).is_err());
        assert!(parse_when("2026-13-01T00:00", now).is_err());
    }
}
