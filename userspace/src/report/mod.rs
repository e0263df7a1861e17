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
//! The file is read once as it is inflated, never held: each thread is
//! handed to the counts as it is parsed and dropped, so memory is one
//! thread and the tallies, whatever the profile's length (`--why` too, a
//! track at a time as JSON, with its facts; `--why --annotate` holds the
//! whole profile, to write it again). The threads come before `meta` in sysprof's
//! files, so they are counted with the categories where sysprof's writer
//! puts them; a profile whose `meta` says otherwise is read a second time.
//!
//! The profile is read through the writer's own types
//! (`crate::profile::schema`); `read` checks its indexes and reads its
//! tables, `counts` counts a thread's samples, `text` writes the report,
//! `folded` the collapsed stacks, `histogram` draws a log2 histogram;
//! `why` charges a thread's waits along the chain of its wakers (`--why`).

mod annotate;
mod counts;
mod folded;
mod histogram;
mod read;
#[cfg(test)]
mod tests;
mod text;
pub mod why;

use std::path::Path;

use crate::cli::ReportArgs;
use crate::error::RecordError;
use crate::profile::output::OutputFile;
#[cfg(test)]
use crate::profile::schema::Profile;
use crate::profile::schema::{process_display_name, MarkerData, MarkerText, Meta, Thread};

use counts::Categories;
use read::ThreadRead;

/// Print the report `args` asks for; returns the exit status.
pub fn run(args: ReportArgs) -> Result<i32, RecordError> {
    // --why reads the file its own way (its tracks as JSON): parsed once, not twice.
    if let Some(id) = args.why {
        return write_out(&args, &why_text(&args, id)?);
    }
    if args.format == crate::cli::ReportFormat::Json {
        return Err(RecordError::Usage(
            "--format json is what --why TID writes; give --why, or --format text or folded".into(),
        ));
    }
    let filter = Filter {
        pids: args.pids.clone(),
        tids: args.tids.clone(),
        comm: args.comm.clone(),
    };
    let (text, matched) = report_file(&args.path, &filter, args.format, args.top.max(1))?;
    if !matched {
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
    write_out(&args, &text)
}

/// The report of the profile at `path` as text or folded stacks, and
/// whether `filter` admitted any thread. sysprof writes its threads before
/// `meta`, which says which category is idle, off-CPU, kernel: they are
/// counted as sysprof's writer places them, and counted again only if
/// `meta`, met at the end, disagrees.
fn report_file(
    path: &Path,
    filter: &Filter,
    format: crate::cli::ReportFormat,
    top: usize,
) -> Result<(String, bool), RecordError> {
    match stream_report(path, Categories::written(), filter, format, top)? {
        Streamed::Done(text, matched) => Ok((text, matched)),
        Streamed::Recount(cats) => match stream_report(path, cats, filter, format, top)? {
            Streamed::Done(text, matched) => Ok((text, matched)),
            Streamed::Recount(_) => Err(not_a_profile(
                path,
                "its meta changed between two reads".into(),
            )),
        },
    }
}

/// What one pass over a profile gave: the report (and whether the filter
/// admitted any thread), or the categories its `meta` holds when they
/// differ from those it was counted with.
enum Streamed {
    Done(String, bool),
    Recount(Categories),
}

/// The report of the profile at `path`, as text or folded stacks, its
/// threads read and counted one at a time with `cats` (none is held past
/// its turn), its `meta` read where it stands.
fn stream_report(
    path: &Path,
    cats: Categories,
    filter: &Filter,
    format: crate::cli::ReportFormat,
    top: usize,
) -> Result<Streamed, RecordError> {
    let mut matched = false;
    let (meta, finish): (Meta, Box<dyn FnOnce(&Meta) -> String>) = match format {
        crate::cli::ReportFormat::Folded => {
            let mut f = folded::Folded::new(cats);
            let meta = each_thread(path, |t| {
                if filter.admits(t) {
                    matched = true;
                    f.add(t);
                }
            })?;
            (meta, Box::new(move |_| f.finish()))
        }
        crate::cli::ReportFormat::Text | crate::cli::ReportFormat::Json => {
            let mut r = text::TextReport::new(cats);
            let meta = each_thread(path, |t| {
                if filter.admits(t) {
                    matched = true;
                    r.add(t);
                }
            })?;
            (
                meta,
                Box::new(move |meta| r.finish(meta, filter, top, path)),
            )
        }
    };
    let actual = Categories::of(&meta);
    if actual != cats {
        return Ok(Streamed::Recount(actual));
    }
    Ok(Streamed::Done(finish(&meta), matched))
}

/// `--why ID`: the profile read again as JSON (the off-CPU markers' waker
/// fields are not in the report's types), answered as text or JSON. It is
/// streamed a track at a time unless `--annotate` writes it again, which
/// needs it whole.
fn why_text(args: &ReportArgs, id: u32) -> Result<String, RecordError> {
    let unparsed = |e| match e {
        Unreadable::File(e) => RecordError::Usage(e.to_string()),
        Unreadable::Json(e) => RecordError::Usage(format!(
            "{}: not a processed profile ({e})",
            args.path.display()
        )),
    };
    let (threads, json) = if args.annotate.is_some() {
        let json: serde_json::Value = parse_profile(&args.path).map_err(unparsed)?;
        (why::Threads::read(&json), Some(json))
    } else {
        (why_threads(&args.path).map_err(unparsed)?, None)
    };
    let tids = threads.resolve(id);
    if tids.is_empty() {
        return Err(RecordError::Usage(format!(
            "no thread or process {id} in {}; `sysprof report {}` lists the processes",
            args.path.display(),
            args.path.display()
        )));
    }
    let (from, to) = (
        args.from.unwrap_or(f64::NEG_INFINITY),
        args.to.unwrap_or(f64::INFINITY),
    );
    let why = threads.why(&tids, from, to, args.top.clamp(1, 20));
    if let (Some(path), Some(mut json)) = (&args.annotate, json) {
        let added = annotate::annotate(&mut json, &threads, &tids, from, to);
        OutputFile::create(path)?.commit(&json)?;
        eprintln!(
            "sysprof: {added} waits (and runs of short waits) marked with where their time went in {}; open it: sysprof view {}",
            crate::escape::path(path),
            crate::escape::path(path)
        );
    }
    Ok(match args.format {
        crate::cli::ReportFormat::Json => why::render_json(&threads, id, &tids, &why),
        crate::cli::ReportFormat::Text => {
            why::render_text(&threads, id, &tids, &why, args.top.max(1))
        }
        crate::cli::ReportFormat::Folded => {
            return Err(RecordError::Usage(
                "--why writes text or json; --format folded is for CPU stacks".into(),
            ))
        }
    })
}

/// The `--why` facts of the profile at `path`, read a track at a time as
/// the file is inflated (a track's JSON held at once, never the whole
/// profile: pgbench's 8 s took 295 MB parsed whole).
fn why_threads(path: &Path) -> Result<why::Threads, Unreadable> {
    struct Tracks {
        reader: why::Reader,
        meta: serde_json::Value,
    }
    impl crate::profile::input::ThreadSink for Tracks {
        type Thread = serde_json::Value;
        fn thread(&mut self, t: serde_json::Value) -> bool {
            self.reader.thread(&t);
            true
        }
        fn keeps(&self, key: &str) -> bool {
            key == "meta"
        }
        fn kept(&mut self, _: &str, meta: serde_json::Value) {
            self.meta = meta;
        }
    }
    let reader = crate::profile::input::open_profile(path).map_err(Unreadable::File)?;
    let watch = reader.watch();
    let mut de =
        serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(1 << 16, reader));
    let mut sink = Tracks {
        reader: why::Reader::default(),
        meta: serde_json::Value::Null,
    };
    crate::profile::input::read_threads(&mut de, &mut sink)
        .and_then(|_| de.end())
        .map_err(|e| match watch.error(&e) {
            Some(file) => Unreadable::File(file),
            None => Unreadable::Json(e),
        })?;
    Ok(sink.reader.finish(&sink.meta))
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
            if let Err(e) = stdout
                .write_all(text.as_bytes())
                .and_then(|_| stdout.flush())
            {
                if e.kind() != std::io::ErrorKind::BrokenPipe {
                    return Err(RecordError::Internal(format!(
                        "cannot write the report: {e}"
                    )));
                }
            }
        }
    }
    Ok(0)
}

/// What a profile's parse failing says: `path` is not one.
fn not_a_profile(path: &Path, what: String) -> RecordError {
    RecordError::Usage(format!(
        "{}: {what}; give a profile written by sysprof record or sysprof show",
        path.display()
    ))
}

/// A parse error of the file at `path` as one line.
fn unreadable(path: &Path, e: Unreadable) -> RecordError {
    match e {
        Unreadable::File(e) if e.says_what_to_do() => RecordError::Usage(e.to_string()),
        Unreadable::File(e) => RecordError::Usage(format!(
            "{e}; give a profile written by sysprof record or sysprof show"
        )),
        Unreadable::Json(e) => not_a_profile(path, format!("not a processed profile ({e})")),
    }
}

/// Hand each thread of the profile at `path` to `each`, one at a time as
/// it is parsed, its strings escaped and its indexes checked (so nothing
/// after can panic, whatever the file says); it is dropped after. Returns
/// the profile's `meta`, its category names escaped. The file is read as
/// it is inflated ([`crate::profile::input`]'s limit), never held.
fn each_thread(path: &Path, each: impl FnMut(&Thread)) -> Result<Meta, RecordError> {
    let reader = crate::profile::input::open_profile(path)
        .map_err(|e| unreadable(path, Unreadable::File(e)))?;
    let watch = reader.watch();
    let mut de =
        serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(1 << 16, reader));
    let mut sink = Checked {
        each,
        inconsistent: None,
        meta: None,
    };
    let parsed = crate::profile::input::read_threads(&mut de, &mut sink)
        .and_then(|shape| de.end().map(|()| shape));
    if let Some(name) = sink.inconsistent {
        return Err(not_a_profile(
            path,
            format!("thread {name} has tables of different lengths or indexes out of range"),
        ));
    }
    match parsed {
        // No threads at all reports as a profile of none.
        Ok(
            crate::profile::input::ThreadsShape::Array
            | crate::profile::input::ThreadsShape::Missing,
        ) => {}
        Ok(crate::profile::input::ThreadsShape::NotArray) => {
            return Err(not_a_profile(path, "its threads are not an array".into()))
        }
        Err(e) => {
            return Err(unreadable(
                path,
                watch
                    .error(&e)
                    .map_or(Unreadable::Json(e), Unreadable::File),
            ))
        }
    }
    match sink.meta {
        Some(Ok(mut meta)) => {
            for c in &mut meta.categories {
                escape_in_place(&mut c.name);
            }
            Ok(meta)
        }
        Some(Err(e)) => Err(not_a_profile(
            path,
            format!("not a processed profile (meta: {e})"),
        )),
        None => Err(not_a_profile(
            path,
            "not a processed profile (it has no meta)".into(),
        )),
    }
}

/// The report's reader of threads: each escaped and checked before `each`
/// sees it; the first inconsistent one stops the parse.
struct Checked<F> {
    each: F,
    inconsistent: Option<String>,
    meta: Option<Result<Meta, serde_json::Error>>,
}

impl<F: FnMut(&Thread)> crate::profile::input::ThreadSink for Checked<F> {
    type Thread = Thread;

    fn thread(&mut self, mut t: Thread) -> bool {
        escape_thread(&mut t);
        if !t.consistent() {
            self.inconsistent = Some(t.name);
            return false;
        }
        (self.each)(&t);
        true
    }

    fn keeps(&self, key: &str) -> bool {
        key == "meta"
    }

    fn kept(&mut self, _: &str, meta: serde_json::Value) {
        self.meta = Some(serde_json::from_value(meta));
    }
}

/// Read and parse the whole profile at `path`, every string escaped and
/// every thread checked (the unit tests' reader; `report` streams).
#[cfg(test)]
fn load(path: &Path) -> Result<Profile, RecordError> {
    let mut profile: Profile = parse_profile(path).map_err(|e| unreadable(path, e))?;
    for c in &mut profile.meta.categories {
        escape_in_place(&mut c.name);
    }
    for t in &mut profile.threads {
        escape_thread(t);
        if !t.consistent() {
            return Err(not_a_profile(
                path,
                format!(
                    "thread {} has tables of different lengths or indexes out of range",
                    t.name
                ),
            ));
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

/// Escape a string a user may have chosen, where it needs it.
fn escape_in_place(s: &mut String) {
    if let std::borrow::Cow::Owned(e) = crate::escape::escape(s) {
        *s = e;
    }
}

/// Escape every string of a thread a user may have chosen (names of
/// processes, threads, functions, libraries, wakers, devices), so no name
/// reaches the terminal raw, in the tables or in folded lines.
fn escape_thread(t: &mut Thread) {
    escape_in_place(&mut t.name);
    if let Some(p) = t.process_name.as_mut() {
        escape_in_place(p);
    }
    t.string_array.iter_mut().for_each(escape_in_place);
    for d in t.markers.data.iter_mut().flatten() {
        match d {
            // An index into the strings, escaped above; the text itself
            // in profiles written before.
            MarkerData::OffCpu {
                waker: Some(MarkerText::Text(w)),
                ..
            }
            | MarkerData::Io {
                device: MarkerText::Text(w),
                ..
            } => escape_in_place(w),
            MarkerData::Goroutine { labels, .. } => {
                if let Some(l) = labels.as_mut() {
                    escape_in_place(l)
                }
            }
            MarkerData::OffCpu { .. }
            | MarkerData::Io { .. }
            | MarkerData::ShortWaits { .. }
            | MarkerData::OnCpu { .. }
            | MarkerData::CpuIdle { .. }
            | MarkerData::RunDelay { .. }
            | MarkerData::Other => {}
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
        let (Some(pid), Some(tid)) = (t.pid(), t.tid()) else {
            return false;
        };
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
            Some(c) => {
                t.name == *c
                    || t.process_name() == c
                    || t.process_name()
                        == crate::escape::escape(&process_display_name(
                            c,
                            t.cgroup.as_deref(),
                            false,
                        ))
            }
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
