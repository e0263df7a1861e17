//! The Firefox Profiler's processed profile format, as far as sysprof
//! writes it: declared once, written by the profile writer and read back
//! by `report`.
//!
//! In: the tables the writer builds (`super::tables`), or a profile's
//! JSON. Out: the JSON (`Serialize`, fields in the order the files have
//! always had them: `meta`'s keys sorted, as the `serde_json::Value` it
//! used to be wrote them), or the typed profile (`Deserialize`).
//!
//! Reading is as lenient, and as light, as `report` has always been: the
//! columns and parts it does not use are not read at all
//! (`skip_deserializing`: whatever their shape, they take no memory), the
//! optional ones it uses and `meta`'s may be missing (`default`); a pid or
//! tid may be a number or a string, as the format allows. Threads, with their columns and markers, stay typed
//! structs: a `serde_json::Value` tree would hold each number as a 32-byte
//! value and each marker as a map of strings, which on an I/O-heavy
//! recording (tens of thousands of markers) doubled peak RSS and the time
//! to write.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer, Serialize};

/// A text the writer always writes as a constant and a reader reads back.
pub type Text = Cow<'static, str>;

/// The profile.
#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Profile {
    pub(crate) meta: Meta,
    #[serde(skip_deserializing)]
    pub(crate) libs: Vec<serde_json::Value>,
    pub(crate) threads: Vec<Thread>,
    #[serde(skip_deserializing)]
    pub(crate) pages: [(); 0],
    #[serde(skip_deserializing)]
    pub(crate) counters: Vec<serde_json::Value>,
    #[serde(skip_deserializing)]
    pub(crate) profiler_overhead: [(); 0],
}

impl Profile {
    /// The profile as a JSON value tree (tests and small tools).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("serializable")
    }
}

/// `meta`, its keys in byte order (as the `serde_json::Value` it was
/// wrote them). Only `interval` is required to read one.
#[derive(Serialize, Deserialize, Default)]
pub struct Meta {
    #[serde(rename = "CPUName", default)]
    pub(crate) cpu_name: String,
    #[serde(default)]
    pub(crate) arguments: String,
    #[serde(default)]
    pub(crate) categories: Vec<Category>,
    #[serde(default)]
    pub(crate) debug: bool,
    /// When the recording ended because its command (or every `-p`
    /// process) did, wall-clock ms: the front end says "Main process
    /// ended". Left out where it ended otherwise (a duration, a signal, the
    /// agent's windows; `-a` has no main process): the recording's end is
    /// `profilingEndTime`.
    #[serde(rename = "endTime", skip_serializing_if = "Option::is_none")]
    pub(crate) end_time: Option<f64>,
    #[serde(default)]
    pub(crate) extensions: serde_json::Value,
    #[serde(default)]
    pub(crate) extra: serde_json::Value,
    #[serde(rename = "initialSelectedThreads", default)]
    pub(crate) initial_selected_threads: Vec<usize>,
    #[serde(rename = "initialVisibleThreads", default)]
    pub(crate) initial_visible_threads: Vec<usize>,
    /// The sampling interval, ms.
    pub(crate) interval: f64,
    #[serde(rename = "keepProfileThreadOrder", default)]
    pub(crate) keep_profile_thread_order: bool,
    #[serde(rename = "logicalCPUs", default)]
    pub(crate) logical_cpus: u32,
    #[serde(rename = "mainMemory", default)]
    pub(crate) main_memory: Option<u64>,
    #[serde(rename = "markerSchema", default)]
    pub(crate) marker_schema: serde_json::Value,
    #[serde(default)]
    pub(crate) oscpu: String,
    #[serde(rename = "pausedRanges", default)]
    pub(crate) paused_ranges: Vec<serde_json::Value>,
    #[serde(rename = "physicalCPUs", default)]
    pub(crate) physical_cpus: u32,
    #[serde(default)]
    pub(crate) platform: Text,
    #[serde(rename = "preprocessedProfileVersion", default)]
    pub(crate) preprocessed_profile_version: u32,
    #[serde(rename = "processType", default)]
    pub(crate) process_type: u32,
    #[serde(default)]
    pub(crate) product: String,
    #[serde(rename = "profilingEndTime", default)]
    pub(crate) profiling_end_time: Option<f64>,
    #[serde(rename = "profilingStartTime", default)]
    pub(crate) profiling_start_time: Option<f64>,
    #[serde(rename = "sampleUnits", default)]
    pub(crate) sample_units: serde_json::Value,
    #[serde(rename = "sourceCodeIsNotOnSearchfox", default)]
    pub(crate) source_code_is_not_on_searchfox: bool,
    #[serde(default)]
    pub(crate) stackwalk: u32,
    #[serde(rename = "startTime", default)]
    pub(crate) start_time: f64,
    #[serde(rename = "startTimeAsClockMonotonicNanosecondsSinceBoot", default)]
    pub(crate) start_time_as_clock_monotonic_nanoseconds_since_boot: u64,
    #[serde(default)]
    pub(crate) symbolicated: bool,
    #[serde(default)]
    pub(crate) toolkit: Text,
    #[serde(rename = "usesOnlyOneStackType", default)]
    pub(crate) uses_only_one_stack_type: bool,
    #[serde(default)]
    pub(crate) version: u32,
}

/// A category of `meta.categories`; frames name it by index.
#[derive(Serialize, Deserialize, Default)]
pub struct Category {
    #[serde(default)]
    pub(crate) color: Text,
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) subcategories: Vec<Text>,
}

/// One track: a thread's tables, samples and markers, or a CPU's slices.
#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Thread {
    pub(crate) name: String,
    /// A string in the format (ours hold a number; the per-CPU tracks `cpus`).
    #[serde(deserialize_with = "id_text")]
    pub(crate) pid: String,
    #[serde(deserialize_with = "id_number")]
    pub(crate) tid: u32,
    #[serde(default)]
    pub(crate) process_type: Text,
    /// What the track shows: the command name, and its container or
    /// service (see [`process_display_name`]). Always written.
    #[serde(default)]
    pub(crate) process_name: Option<String>,
    /// The executable the process ran (its name is its command name, as ps shows).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) process_executable: Option<String>,
    #[serde(default)]
    pub(crate) is_main_thread: bool,
    #[serde(default)]
    pub(crate) process_startup_time: f64,
    #[serde(default)]
    pub(crate) process_shutdown_time: Option<f64>,
    #[serde(default)]
    pub(crate) register_time: f64,
    #[serde(default)]
    pub(crate) unregister_time: Option<f64>,
    #[serde(skip_deserializing)]
    pub(crate) paused_ranges: Vec<()>,
    #[serde(default)]
    pub(crate) show_markers_in_timeline: bool,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) context_switches: Option<serde_json::Value>,
    /// The process's cgroup path, as read from `/proc/PID/cgroup`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) cgroup: Option<String>,
    pub(crate) frame_table: FrameTable,
    pub(crate) func_table: FuncTable,
    pub(crate) resource_table: ResourceTable,
    #[serde(skip_deserializing)]
    pub(crate) native_symbols: NativeSymbols,
    pub(crate) stack_table: StackTable,
    pub(crate) samples: Samples,
    pub(crate) markers: Markers,
    pub(crate) string_array: Vec<String>,
}

/// The name a track shows for a process: its command name, with the
/// container or service it runs in (from its cgroup) as ` [label]`; the
/// profiler says what it is, so nobody takes it for the workload.
pub fn process_display_name(name: &str, cgroup: Option<&str>, profiler: bool) -> String {
    match cgroup.and_then(crate::model::cgroup::CgroupIdentity::of_path) {
        _ if profiler => format!("{name} (the profiler)"),
        Some(label) => format!("{name} [{label}]"),
        None => name.to_string(),
    }
}

/// A pid as the format holds it, a string, from a string or a number.
fn id_text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => s,
        v => v.to_string(),
    })
}

/// A tid, from a number or a string holding one.
fn id_number<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    let n = match &v {
        serde_json::Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        serde_json::Value::String(s) => s.parse().ok(),
        _ => None,
    };
    n.ok_or_else(|| serde::de::Error::custom(format!("tid {v} is not a thread id")))
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct FrameTable {
    #[serde(skip_deserializing)]
    pub(crate) length: usize,
    #[serde(skip_deserializing)]
    pub(crate) address: Vec<i64>,
    #[serde(skip_deserializing)]
    pub(crate) inline_depth: Vec<u32>,
    /// Always a category the writer sets; the format allows null.
    pub(crate) category: Vec<Option<u32>>,
    #[serde(skip_deserializing)]
    pub(crate) subcategory: Vec<u32>,
    pub(crate) func: Vec<u32>,
    #[serde(skip_deserializing)]
    pub(crate) native_symbol: Vec<Option<u32>>,
    #[serde(rename = "innerWindowID", skip_deserializing)]
    pub(crate) inner_window_id: Vec<Option<u32>>,
    #[serde(skip_deserializing)]
    pub(crate) line: Vec<Option<u32>>,
    #[serde(skip_deserializing)]
    pub(crate) column: Vec<Option<u32>>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct FuncTable {
    #[serde(skip_deserializing)]
    pub(crate) length: usize,
    pub(crate) name: Vec<u32>,
    #[serde(rename = "isJS", skip_deserializing)]
    pub(crate) is_js: Vec<bool>,
    #[serde(rename = "relevantForJS", skip_deserializing)]
    pub(crate) relevant_for_js: Vec<bool>,
    /// A resource index, or -1 for none.
    pub(crate) resource: Vec<i64>,
    /// Read back by `report`: an interpreted function (in no library) is
    /// told apart by its file and first line.
    #[serde(default)]
    pub(crate) file_name: Vec<Option<u32>>,
    #[serde(default)]
    pub(crate) line_number: Vec<Option<u32>>,
    #[serde(skip_deserializing)]
    pub(crate) column_number: Vec<Option<u32>>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ResourceTable {
    #[serde(skip_deserializing)]
    pub(crate) length: usize,
    #[serde(skip_deserializing)]
    pub(crate) lib: Vec<Option<u32>>,
    pub(crate) name: Vec<u32>,
    #[serde(skip_deserializing)]
    pub(crate) host: Vec<Option<u32>>,
    #[serde(rename = "type", skip_deserializing)]
    pub(crate) kind: Vec<u32>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct NativeSymbols {
    pub(crate) length: usize,
    pub(crate) lib_index: Vec<u32>,
    pub(crate) address: Vec<u64>,
    pub(crate) name: Vec<u32>,
    pub(crate) function_size: Vec<Option<u64>>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct StackTable {
    #[serde(skip_deserializing)]
    pub(crate) length: usize,
    pub(crate) prefix: Vec<Option<u32>>,
    pub(crate) frame: Vec<u32>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Samples {
    #[serde(skip_deserializing)]
    pub(crate) length: usize,
    pub(crate) stack: Vec<Option<u32>>,
    /// Milliseconds since the previous sample (the first: since the start):
    /// smaller than absolute times, and they compress better.
    #[serde(skip_deserializing)]
    pub(crate) time_deltas: Vec<f64>,
    /// Always written (null without off-CPU time).
    #[serde(default)]
    pub(crate) weight: Option<Vec<f64>>,
    /// `samples`, or `tracing-ms` when the weights are milliseconds.
    #[serde(default)]
    pub(crate) weight_type: Text,
    /// CPU time since the previous sample, µs. Always written.
    #[serde(rename = "threadCPUDelta", default)]
    pub(crate) thread_cpu_delta: Option<Vec<Option<u64>>>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Markers {
    #[serde(skip_deserializing)]
    pub(crate) length: usize,
    #[serde(skip_deserializing)]
    pub(crate) category: Vec<u32>,
    /// Always a payload the writer sets; the format allows null.
    pub(crate) data: Vec<Option<MarkerData>>,
    pub(crate) end_time: Vec<Option<f64>>,
    #[serde(skip_deserializing)]
    pub(crate) name: Vec<u32>,
    #[serde(skip_deserializing)]
    pub(crate) phase: Vec<u8>,
    pub(crate) start_time: Vec<Option<f64>>,
}

/// One marker's payload; `type` names its entry in `meta.markerSchema`.
/// Read back: the waker, run delay and device (what `report` shows); a
/// column of these is held whole when read, so the fields only written
/// stay small (`&'static str`, a `u32` stack). A text that repeats across a
/// thread's markers (a waker, a reason, a device, an operation) is an index
/// into the thread's `stringArray` (`u32`, [`MarkerText`]), the schema's
/// `unique-string` format: written once per thread, not per marker, and
/// no allocation per marker.
#[derive(Serialize, Deserialize)]
#[serde(tag = "type", rename_all_fields = "camelCase")]
pub enum MarkerData {
    OffCpu {
        #[serde(skip_deserializing)]
        reason: u32,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        run_delay: Option<f64>,
        /// The whole wait, ms, where the marker is drawn to the wakeup's
        /// enqueue only and its run delay follows as a `RunDelay` marker
        /// (one of 0.1 ms or more: `RUN_DELAY_APART_MIN_NS`); left out where the
        /// marker is the whole wait. Readers take the wait as
        /// `startTime + offCpu`.
        #[serde(skip_serializing_if = "Option::is_none", default)]
        off_cpu: Option<f64>,
        /// Before the run delay, from the wakeup to its enqueue, ms: the
        /// wakeup on its way to the wakee's CPU (left out where not seen).
        #[serde(skip_serializing_if = "Option::is_none", default)]
        wakeup_landing: Option<f64>,
        /// None where no wakeup was seen (a preempted thread is not woken):
        /// the field is left out rather than shown empty. Profiles written
        /// before say "—".
        #[serde(skip_serializing_if = "Option::is_none", default)]
        waker: Option<MarkerText>,
        /// ", woken by " and the waker, for the marker's titles (hidden):
        /// a label's missing field is empty, so a preemption's title ends
        /// at its reason instead of at "woken by" with nothing after.
        #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
        woken_by: Option<u32>,
        /// A string: the front end's `pid` format finds the process's name
        /// by the threads' (string) pids; a tid stays a number, as threads'.
        /// Left out where there is none (a preemption, an interrupt): a
        /// third of a busy server's markers wrote three nulls each. Hidden
        /// in the front end's tooltip and sidebar, as the tid: `waker` names
        /// them already, and the three rows said the same.
        #[serde(
            skip_deserializing,
            skip_serializing_if = "Option::is_none",
            serialize_with = "some_pid_as_text"
        )]
        waker_pid: Option<u32>,
        #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
        waker_tid: Option<u32>,
        #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
        waker_context: Option<u32>,
        #[serde(skip_deserializing)]
        cpu_out: u32,
        #[serde(skip_deserializing)]
        cpu_in: u32,
        /// What it waited on (a lock, a pipe, the disk...), from its stack's
        /// kernel functions; left out where they do not say.
        #[serde(skip_serializing_if = "Option::is_none", skip_deserializing)]
        waited_on: Option<u32>,
        /// What ended it, as the marker chart's color (`colorField`).
        #[serde(skip_deserializing)]
        color: &'static str,
        /// The thread's block request that completed as it was woken by
        /// an interrupt: "read vda, 4096 B at sector 8".
        #[serde(skip_serializing_if = "Option::is_none", skip_deserializing)]
        request: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none", skip_deserializing)]
        cause: Option<Cause>,
        /// The Go goroutine that waited (a blocking system call keeps it
        /// on its thread), from its stack; left out elsewhere.
        #[serde(skip_serializing_if = "Option::is_none", skip_deserializing)]
        goroutine: Option<u64>,
        /// The Go goroutine that woke it, from the waker's stack.
        #[serde(skip_serializing_if = "Option::is_none", skip_deserializing)]
        waker_goroutine: Option<u64>,
    },
    /// Waits too short for a marker each, summed over a span per waker.
    ShortWaits {
        #[serde(skip_deserializing)]
        count: u32,
        /// Their off-CPU time, ms.
        #[serde(skip_deserializing)]
        off_cpu: f64,
        /// Of it, before their wakeups, ms (left out where none: preempted waits).
        #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
        waited: Option<f64>,
        /// Of the rest, the time their wakeups took to reach a run queue,
        /// ms (left out where none was seen).
        #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
        landing: Option<f64>,
        #[serde(skip_deserializing)]
        waker: u32,
        /// A string, as `OffCpu`'s.
        #[serde(
            skip_deserializing,
            skip_serializing_if = "Option::is_none",
            serialize_with = "some_pid_as_text"
        )]
        waker_pid: Option<u32>,
        #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
        waker_tid: Option<u32>,
        #[serde(skip_deserializing)]
        waker_context: u32,
        #[serde(skip_deserializing)]
        color: &'static str,
    },
    #[serde(rename = "BlockIo")]
    Io {
        device: MarkerText,
        #[serde(skip_deserializing)]
        op: u32,
        #[serde(skip_deserializing)]
        bytes: u64,
        /// Left out for a request at no sector (a flush).
        #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
        sector: Option<u64>,
        #[serde(skip_deserializing)]
        queue_time: f64,
        #[serde(skip_deserializing)]
        service_time: f64,
        /// The request's error; left out where it succeeded.
        #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
        error: Option<i32>,
        #[serde(skip_serializing_if = "Option::is_none", skip_deserializing)]
        cause: Option<Cause>,
        /// The Go goroutine that made it, from its stack; left out elsewhere.
        #[serde(skip_serializing_if = "Option::is_none", skip_deserializing)]
        goroutine: Option<u64>,
    },
    /// A thread's run of one Go goroutine (its consecutive samples).
    Goroutine {
        #[serde(skip_deserializing)]
        goroutine: u64,
        /// Its pprof labels, `k="v" …`; left out where it has none.
        #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
        labels: Option<String>,
        #[serde(skip_deserializing)]
        samples: u32,
    },
    OnCpu {
        #[serde(skip_deserializing)]
        thread: u32,
        /// A string, as `waker_pid`.
        #[serde(skip_deserializing, serialize_with = "pid_as_text")]
        pid: u32,
        #[serde(skip_deserializing)]
        tid: u32,
    },
    /// The end of an off-CPU wait spent waiting for a CPU: from its
    /// wakeup's enqueue to running again, drawn apart from the wait before
    /// it so that a blocked wait's bar holds the blocking only.
    RunDelay {
        /// The wait's reason, as its `OffCpu` marker says it.
        #[serde(skip_deserializing)]
        after: u32,
        /// The CPU it waited for (and resumed on).
        #[serde(skip_deserializing)]
        cpu: u32,
        #[serde(skip_deserializing)]
        color: &'static str,
    },
    /// A stretch a CPU was idle: its own type, kept out of the track's
    /// overview, where every marker is drawn as the same black bar and an
    /// idle CPU looked as busy as a running one.
    CpuIdle {
        #[serde(skip_deserializing)]
        thread: u32,
    },
    /// A payload of a type sysprof does not write (read only).
    #[serde(other)]
    Other,
}

/// A marker's payload as `report --why` reads it back: the fields of
/// [`MarkerData`] it uses, under the names [`MarkerData`] writes them
/// (serde's camelCase of the same fields; the unit test
/// `marker_view_reads_what_marker_data_writes` holds the two together),
/// borrowed from the parsed profile. Every field may be missing (profiles
/// written before it); a marker of another type is `Other`.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all_fields = "camelCase")]
pub enum MarkerView<'a> {
    OffCpu {
        #[serde(borrow, default)]
        reason: Option<MarkerStr<'a>>,
        #[serde(default)]
        off_cpu: Option<f64>,
        #[serde(default)]
        run_delay: Option<f64>,
        #[serde(default)]
        wakeup_landing: Option<f64>,
        #[serde(borrow, default)]
        waker: Option<MarkerStr<'a>>,
        #[serde(borrow, default)]
        waker_pid: Option<&'a str>,
        #[serde(default)]
        waker_tid: Option<u32>,
        #[serde(borrow, default)]
        waker_context: Option<MarkerStr<'a>>,
        #[serde(default)]
        cpu_out: Option<u32>,
        #[serde(default)]
        cpu_in: Option<u32>,
        #[serde(borrow, default)]
        waited_on: Option<MarkerStr<'a>>,
    },
    ShortWaits {
        #[serde(default)]
        count: Option<f64>,
        #[serde(default)]
        off_cpu: Option<f64>,
        #[serde(default)]
        waited: Option<f64>,
        #[serde(default)]
        landing: Option<f64>,
        #[serde(borrow, default)]
        waker: Option<MarkerStr<'a>>,
        #[serde(borrow, default)]
        waker_pid: Option<&'a str>,
        #[serde(default)]
        waker_tid: Option<u32>,
        #[serde(borrow, default)]
        waker_context: Option<MarkerStr<'a>>,
    },
    #[serde(rename = "BlockIo")]
    Io {
        #[serde(borrow, default)]
        device: Option<MarkerStr<'a>>,
    },
    #[serde(other)]
    Other,
}

/// A marker's text as [`MarkerData`] holds one it reads back: an index
/// into the thread's `stringArray` (the `unique-string` format), or, in a
/// profile written before, the text itself.
#[derive(Debug, Clone, PartialEq)]
pub enum MarkerText {
    Index(u32),
    Text(String),
}

impl MarkerText {
    /// Its text, an index looked up in the thread's `strings`; None for an
    /// index past them.
    pub fn resolve<'a>(&'a self, strings: &'a [String]) -> Option<&'a str> {
        match self {
            MarkerText::Index(i) => strings.get(*i as usize).map(String::as_str),
            MarkerText::Text(t) => Some(t),
        }
    }
}

impl Serialize for MarkerText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            MarkerText::Index(i) => s.serialize_u32(*i),
            MarkerText::Text(t) => s.serialize_str(t),
        }
    }
}

impl<'de> Deserialize<'de> for MarkerText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = MarkerText;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string table index or a string")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<MarkerText, E> {
                u32::try_from(v)
                    .map(MarkerText::Index)
                    .map_err(|_| E::custom(format!("string index {v} past u32")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<MarkerText, E> {
                Ok(MarkerText::Text(v.to_string()))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<MarkerText, E> {
                Ok(MarkerText::Text(v))
            }
        }
        d.deserialize_any(Visit)
    }
}

/// [`MarkerText`] borrowed from a parsed profile, as [`MarkerView`] reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MarkerStr<'a> {
    Index(u32),
    Text(&'a str),
}

impl<'a> MarkerStr<'a> {
    /// Its text, an index looked up in the thread's `stringArray`; None for
    /// an index past it or not a string.
    pub fn resolve(self, strings: &'a [serde_json::Value]) -> Option<&'a str> {
        match self {
            MarkerStr::Index(i) => strings.get(i as usize)?.as_str(),
            MarkerStr::Text(t) => Some(t),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for MarkerStr<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = MarkerStr<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string table index or a borrowed string")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<MarkerStr<'de>, E> {
                u32::try_from(v)
                    .map(MarkerStr::Index)
                    .map_err(|_| E::custom(format!("string index {v} past u32")))
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                v: &'de str,
            ) -> Result<MarkerStr<'de>, E> {
                Ok(MarkerStr::Text(v))
            }
        }
        d.deserialize_any(Visit)
    }
}

/// A pid as the front end's `pid` format takes it, a string, written
/// without one made per marker.
fn pid_as_text<S: serde::Serializer>(pid: &u32, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(pid)
}

/// [`pid_as_text`] of a pid that is there (the field is skipped where not).
fn some_pid_as_text<S: serde::Serializer>(pid: &Option<u32>, s: S) -> Result<S::Ok, S::Error> {
    match pid {
        Some(p) => s.collect_str(p),
        None => s.serialize_none(),
    }
}

/// A marker's stack: an index into the thread's stack table.
#[derive(Serialize, Deserialize)]
pub struct Cause {
    pub(crate) stack: u32,
}
