//! `sysprof report`: a profile read back and answered in the terminal, for
//! servers with no browser (what `perf report --stdio`, BCC's `runqlat` and
//! `biolatency` answer, from one file).
//!
//! In: a processed profile (`.json` or `.json.gz`) from `record` or `show`,
//! and filters (pids, tids, a command name). Out: text on stdout (or `-o`):
//! CPU per process; the top functions by self and by total CPU samples; off-CPU
//! time per thread by reason; the top wakers; block I/O latency per device and
//! run-queue delay per thread as log2 histograms. `--format folded` writes the
//! CPU samples as collapsed stacks instead (flamegraph.pl, inferno).
//!
//! The profile is read into columns, as it is written: each thread's tables
//! stay arrays of indexes, samples are counted per stack index first, and only
//! distinct stacks are walked, so a report costs one pass over the samples and
//! one over the distinct stacks. Only what sysprof's writer defines is read
//! (meta's interval and categories; per thread the stack, frame, func and
//! resource tables, samples, markers and strings); the categories are looked
//! up by name, so a profile whose category order differs still reads right.
//!
//! The profile is read through the writer's own types
//! (`crate::profile::schema`); `read` checks its indexes and reads its
//! tables, `counts` counts a thread's samples, `text` writes the report,
//! `folded` the collapsed stacks, `histogram` draws a log2 histogram;
//! `why` charges a thread's waits along the chain of its wakers (`--why`).

mod counts;
mod folded;
mod histogram;
mod read;
mod text;
pub mod why;
#[cfg(test)]
mod tests;

use std::path::Path;

use crate::cli::ReportArgs;
use crate::error::RecordError;
use crate::profile::output::OutputFile;
use crate::profile::schema::{process_display_name, MarkerData, Profile, Thread};

use read::ThreadRead;

/// Print the report `args` asks for; returns the exit status.
pub fn run(args: ReportArgs) -> Result<i32, RecordError> {
    // --why reads the file as JSON itself: parsed once, not twice.
    if let Some(id) = args.why {
        return write_out(&args, &why_text(&args, id)?);
    }
    let profile = load(&args.path)?;
    if args.format == crate::cli::ReportFormat::Json {
        return Err(RecordError::Usage("--format json is what --why TID writes; give --why, or --format text or folded".into()));
    }
    let filter = Filter { pids: args.pids.clone(), tids: args.tids.clone(), comm: args.comm.clone() };
    if !profile.threads.iter().any(|t| filter.admits(t)) {
        return Err(RecordError::Usage(format!(
            "no thread in {} matches {}; `sysprof report {}` without it lists the processes",
            args.path.display(),
            match filter.describe() {
                d if d.is_empty() => "anything".to_string(),
                d => d,
            },
            args.path.display()
        )));
    }
    let text = match args.format {
        crate::cli::ReportFormat::Folded => folded::folded(&profile, &filter),
        crate::cli::ReportFormat::Text | crate::cli::ReportFormat::Json => text::report(&profile, &filter, args.top.max(1), &args.path),
    };
    write_out(&args, &text)
}

/// `--why ID`: the profile read again as JSON (the off-CPU markers' waker
/// fields are not in the report's types), answered as text or JSON.
fn why_text(args: &ReportArgs, id: u32) -> Result<String, RecordError> {
    let json: serde_json::Value = parse_profile(&args.path).map_err(|e| match e {
        Unreadable::File(e) => RecordError::Usage(e.to_string()),
        Unreadable::Json(e) => RecordError::Usage(format!("{}: not a processed profile ({e})", args.path.display())),
    })?;
    let threads = why::Threads::read(&json);
    let tids = threads.resolve(id);
    if tids.is_empty() {
        return Err(RecordError::Usage(format!(
            "no thread or process {id} in {}; `sysprof report {}` lists the processes",
            args.path.display(),
            args.path.display()
        )));
    }
    let (from, to) = (args.from.unwrap_or(f64::NEG_INFINITY), args.to.unwrap_or(f64::INFINITY));
    let why = threads.why(&tids, from, to, args.top.clamp(1, 20));
    Ok(match args.format {
        crate::cli::ReportFormat::Json => why::render_json(&threads, id, &tids, &why),
        crate::cli::ReportFormat::Text => why::render_text(&threads, id, &tids, &why, args.top.max(1)),
        crate::cli::ReportFormat::Folded => return Err(RecordError::Usage("--why writes text or json; --format folded is for CPU stacks".into())),
    })
}

/// The report to `-o` or stdout.
fn write_out(args: &ReportArgs, text: &str) -> Result<i32, RecordError> {
    match &args.output {
        Some(path) => {
            let out = OutputFile::create(path)?;
            out.commit_with(|w| std::io::Write::write_all(w, text.as_bytes()))?;
        }
        None => {
            use std::io::Write;
            let mut stdout = std::io::stdout().lock();
            // A closed pipe (`| head`) is the reader's choice, not an error.
            if let Err(e) = stdout.write_all(text.as_bytes()).and_then(|_| stdout.flush()) {
                if e.kind() != std::io::ErrorKind::BrokenPipe {
                    return Err(RecordError::Internal(format!("cannot write the report: {e}")));
                }
            }
        }
    }
    Ok(0)
}

/// Read and parse `path` (gzip by its magic, as the Firefox Profiler does,
/// inflated within [`crate::profile::input`]'s limit); every string in it
/// comes back with its control characters escaped, so no name reaches the
/// terminal raw, in the tables or in folded lines.
fn load(path: &Path) -> Result<Profile, RecordError> {
    let bad = |what: String| RecordError::Usage(format!("{}: {what}; give a profile written by sysprof record or sysprof show", path.display()));
    let mut profile: Profile = parse_profile(path).map_err(|e| match e {
        Unreadable::File(e) if e.says_what_to_do() => RecordError::Usage(e.to_string()),
        Unreadable::File(e) => RecordError::Usage(format!("{e}; give a profile written by sysprof record or sysprof show")),
        Unreadable::Json(e) => bad(format!("not a processed profile ({e})")),
    })?;
    escape_strings(&mut profile);
    for t in &profile.threads {
        if !t.consistent() {
            return Err(bad(format!("thread {} has tables of different lengths or indexes out of range", t.name)));
        }
    }
    Ok(profile)
}

/// Why a profile was not parsed: the file (unreadable, not gzip, inflates
/// past its limit) or its JSON.
enum Unreadable {
    File(crate::profile::input::ReadError),
    Json(serde_json::Error),
}

/// Parse the profile at `path` as it is inflated: the JSON text (ten times
/// the file) is never held, only what `T` keeps of it.
fn parse_profile<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, Unreadable> {
    let reader = crate::profile::input::open_profile(path).map_err(Unreadable::File)?;
    let watch = reader.watch();
    let parsed = serde_json::from_reader(std::io::BufReader::with_capacity(1 << 16, reader));
    parsed.map_err(|e| match watch.error(&e) {
        Some(file) => Unreadable::File(file),
        None => Unreadable::Json(e),
    })
}

/// Escape every string a user may have chosen (names of processes,
/// threads, functions, libraries, wakers, devices).
fn escape_strings(profile: &mut Profile) {
    let esc = |s: &mut String| {
        if let std::borrow::Cow::Owned(e) = crate::escape::escape(s) {
            *s = e;
        }
    };
    for c in &mut profile.meta.categories {
        esc(&mut c.name);
    }
    for t in &mut profile.threads {
        esc(&mut t.name);
        if let Some(p) = t.process_name.as_mut() {
            esc(p);
        }
        t.string_array.iter_mut().for_each(esc);
        for d in t.markers.data.iter_mut().flatten() {
            match d {
                MarkerData::OffCpu { waker, .. } | MarkerData::ShortWaits { waker, .. } => esc(waker),
                MarkerData::Io { device, .. } => esc(device),
                MarkerData::OnCpu { .. } | MarkerData::CpuIdle { .. } | MarkerData::Other => {}
            }
        }
    }
}

/// Which threads the report covers.
struct Filter {
    pids: Vec<u32>,
    tids: Vec<u32>,
    comm: Option<String>,
}

impl Filter {
    fn admits(&self, t: &Thread) -> bool {
        let (Some(pid), Some(tid)) = (t.pid(), t.tid()) else { return false };
        if !self.pids.is_empty() && !self.pids.contains(&pid) {
            return false;
        }
        if !self.tids.is_empty() && !self.tids.contains(&tid) {
            return false;
        }
        match &self.comm {
            // The track's process name carries its container or service:
            // `c` names the process when that is what the writer would
            // show for a process named `c` in the thread's cgroup.
            Some(c) => t.name == *c || t.process_name() == c || t.process_name() == crate::escape::escape(&process_display_name(c, t.cgroup.as_deref(), false)),
            None => true,
        }
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        if !self.pids.is_empty() {
            parts.push(format!("pid {}", list(&self.pids)));
        }
        if !self.tids.is_empty() {
            parts.push(format!("tid {}", list(&self.tids)));
        }
        if let Some(c) = &self.comm {
            parts.push(format!("comm {c}"));
        }
        parts.join(", ")
    }
}

