//! The validator's own tests: a minimal well-formed profile, and each kind
//! of breakage it must report.
//!
//! In: profiles as JSON values and text. Out: pass or fail.

use super::counters::{ThreadPids, MAX_PIDS};
use super::*;

fn minimal() -> Value {
    serde_json::json!({
        "meta": { "preprocessedProfileVersion": 55, "categories": [{}, {}] },
        "libs": [{}],
        "threads": [{
            "name": "t", "pid": "1", "tid": 1, "processName": "p",
            "stringArray": ["main", "lib"],
            "frameTable": { "length": 2, "address": [1, 2], "inlineDepth": [0, 0], "category": [1, 1],
                "subcategory": [0, 0], "func": [0, 0], "nativeSymbol": [null, 0], "innerWindowID": [null, null],
                "line": [null, null], "column": [null, null] },
            "funcTable": { "length": 1, "name": [0], "isJS": [false], "relevantForJS": [false], "resource": [0],
                "fileName": [null], "lineNumber": [null], "columnNumber": [null] },
            "resourceTable": { "length": 1, "lib": [0], "name": [1], "host": [null], "type": [1] },
            "nativeSymbols": { "length": 1, "libIndex": [0], "address": [0], "name": [0], "functionSize": [null] },
            "stackTable": { "length": 2, "prefix": [null, 0], "frame": [0, 1] },
            "samples": { "length": 2, "stack": [1, 0], "time": [0.0, 1.0], "threadCPUDelta": [0, 1] },
            "markers": { "length": 0, "category": [], "data": [], "endTime": [], "name": [], "phase": [], "startTime": [] }
        }]
    })
}

/// Threads' pids are kept as runs: looked up by thread, none for a
/// thread without one, unknown past the table's bounds.
#[test]
fn thread_pids_are_kept_as_runs() {
    let mut t = ThreadPids::default();
    for (i, pid) in [Some("1"), Some("1"), None, Some("2"), Some("1")]
        .iter()
        .enumerate()
    {
        t.push(i, *pid);
    }
    assert_eq!(t.runs.len(), 4);
    assert_eq!(t.pids.len(), 2);
    let got: Vec<_> = (0..5).map(|i| t.get(i)).collect();
    assert_eq!(
        got,
        vec![
            Some(Some("1")),
            Some(Some("1")),
            Some(None),
            Some(Some("2")),
            Some(Some("1"))
        ]
    );
    let mut many = ThreadPids::default();
    for i in 0..=MAX_PIDS {
        many.push(i, Some(&i.to_string()));
    }
    assert_eq!(many.get(0), None, "past its bounds a pid is not known");
}

/// Check that a well-formed profile passes, and what the format allows
/// does too: a func with no resource (-1), a thread's samples as
/// deltas.
#[test]
fn accepts_well_formed_profile() {
    assert_eq!(validate(&minimal()), Vec::<String>::new());
    // A marker whose cause is a stack of its thread; a counter under
    // a thread of its own pid.
    let mut v = minimal();
    v["threads"][0]["markers"] = serde_json::json!({ "length": 1, "category": [0],
        "data": [{ "type": "OffCpu", "cause": { "tid": 1, "stack": 1, "time": 0.0 } }],
        "endTime": [1.0], "name": [0], "phase": [1], "startTime": [0.0] });
    v["counters"] = serde_json::json!([{ "name": "CPU usage", "pid": "1", "mainThreadIndex": 0,
        "samples": { "length": 2, "time": [0.0, 1.0], "count": [0.0, 1.0] } }]);
    assert_eq!(validate(&v), Vec::<String>::new());
    let mut v = minimal();
    v["threads"][0]["funcTable"]["resource"][0] = (-1).into();
    let s = &mut v["threads"][0]["samples"];
    s.as_object_mut().unwrap().remove("time");
    s["timeDeltas"] = serde_json::json!([0.5, 1.0]);
    assert_eq!(validate(&v), Vec::<String>::new());
}

/// Check that a profile read as text with its threads first (as sysprof
/// writes them, before `meta` and `libs`) is checked against the counts
/// that come after, and that a well-formed one passes in that order.
#[test]
fn checks_threads_against_the_libs_and_categories_after_them() {
    let read = |v: &Value| {
        let text = format!(
            "{{\"threads\":{},\"meta\":{},\"libs\":{}}}",
            v["threads"], v["meta"], v["libs"]
        );
        let mut validator = Validator::default();
        validator
            .read(&mut serde_json::Deserializer::from_str(&text))
            .unwrap();
        validator.finish()
    };
    assert_eq!(read(&minimal()), (1, Vec::new()));
    let mut v = minimal();
    v["threads"][0]["resourceTable"]["lib"][0] = 3.into();
    v["threads"][0]["frameTable"]["category"][1] = 2.into();
    let (threads, problems) = read(&v);
    assert_eq!(threads, 1);
    assert!(
        problems
            .iter()
            .any(|p| p.ends_with("resourceTable.lib[0] = 3 is out of range 0..1")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.ends_with("frameTable.category[1] = 2 is out of range 0..2")),
        "{problems:?}"
    );
    assert_eq!(problems.len(), 2, "{problems:?}");
}

/// Check that a key given twice counts as its last, as `JSON.parse`
/// reads it (a broken table after a good one is found, a table after
/// it that is none makes it missing), and that keys the checks do not
/// read cost nothing however many there are.
#[test]
fn a_repeated_key_counts_as_its_last() {
    let read = |thread_extra: &str| {
        let v = minimal();
        let thread = v["threads"][0].to_string();
        let text = format!(
            "{{\"threads\":[{},{thread_extra}}}],\"meta\":{},\"libs\":{}}}",
            &thread[..thread.len() - 1],
            v["meta"],
            v["libs"]
        );
        let mut validator = Validator::default();
        validator
            .read(&mut serde_json::Deserializer::from_str(&text))
            .unwrap();
        validator.finish().1
    };
    let problems = read(r#""stackTable":{"length":2,"prefix":[1,0],"frame":[9,9]}"#);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("does not point backwards")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("stackTable.frame[0] = 9 is out of range")),
        "{problems:?}"
    );
    let problems = read(r#""stackTable":null"#);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("stackTable.length is missing")),
        "{problems:?}"
    );
    let problems = read(
        r#""funcTable":{"length":1,"name":[0],"isJS":[false],"relevantForJS":[false],"resource":[0],"fileName":[null],"lineNumber":[null],"columnNumber":[null],"name":[7]}"#,
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("funcTable.name[0] = 7 is out of range")),
        "{problems:?}"
    );
    let many: String = (0..10_000).map(|i| format!(r#""x{i}":[1,2],"#)).collect();
    let problems = read(&format!(
        r#""markers":{{{many}"length":0,"category":[],"data":[],"endTime":[],"name":[],"phase":[],"startTime":[]}}"#
    ));
    assert_eq!(problems, Vec::<String>::new());
}

/// Check that each kind of breakage is reported.
#[test]
fn reports_each_kind_of_breakage() {
    type Breakage = Box<dyn Fn(&mut Value)>;
    let with_marker = |v: &mut Value, cause: Value| {
        v["threads"][0]["markers"] = serde_json::json!({ "length": 1, "category": [0],
            "data": [{ "type": "OffCpu", "cause": cause }], "endTime": [1.0], "name": [0],
            "phase": [1], "startTime": [0.0] });
    };
    let with_counter = |v: &mut Value, pid: &str, main: u64, times: Value| {
        v["counters"] = serde_json::json!([{ "name": "CPU usage", "pid": pid, "mainThreadIndex": main,
            "samples": { "length": 2, "time": times, "count": [0.0, 1.0] } }]);
    };
    let cases: Vec<(&str, Breakage)> = vec![
        (
            "markers.data[0].cause.stack = 2 is out of range 0..2",
            Box::new(move |v| {
                with_marker(v, serde_json::json!({ "tid": 1, "stack": 2, "time": 0.0 }))
            }),
        ),
        (
            "markers.data[0].cause.stack = \"a\" is not an index",
            Box::new(move |v| with_marker(v, serde_json::json!({ "stack": "a" }))),
        ),
        (
            "counter 0 (\"CPU usage\"): mainThreadIndex 1 is out of range 0..1",
            Box::new(move |v| with_counter(v, "1", 1, serde_json::json!([0.0, 1.0]))),
        ),
        (
            "counter 0 (\"CPU usage\"): pid \"7\" but its mainThreadIndex 0 is a thread of pid 1",
            Box::new(move |v| with_counter(v, "7", 0, serde_json::json!([0.0, 1.0]))),
        ),
        (
            "counter 0 (\"CPU usage\"): samples.time has 1 entries, length is 2",
            Box::new(move |v| with_counter(v, "1", 0, serde_json::json!([0.0]))),
        ),
        (
            "counters is not an array",
            Box::new(|v| v["counters"] = 5.into()),
        ),
        (
            "counter 0 is not an object",
            Box::new(|v| v["counters"] = serde_json::json!([0])),
        ),
        (
            "has 1 entries",
            Box::new(|v| v["threads"][0]["frameTable"]["func"] = serde_json::json!([0])),
        ),
        (
            "frameTable.func[1]",
            Box::new(|v| v["threads"][0]["frameTable"]["func"][1] = 5.into()),
        ),
        (
            "does not point backwards",
            Box::new(|v| v["threads"][0]["stackTable"]["prefix"][0] = 1.into()),
        ),
        (
            "not sorted",
            Box::new(|v| v["threads"][0]["samples"]["time"][0] = 9.0.into()),
        ),
        (
            "neither time nor timeDeltas",
            Box::new(|v| v["threads"][0]["samples"]["time"] = serde_json::json!([0.0])),
        ),
        (
            "resourceTable.lib[0]",
            Box::new(|v| v["threads"][0]["resourceTable"]["lib"][0] = 3.into()),
        ),
        (
            "funcTable.name[0]",
            Box::new(|v| v["threads"][0]["funcTable"]["name"][0] = 7.into()),
        ),
        (
            "samples.stack[0]",
            Box::new(|v| v["threads"][0]["samples"]["stack"][0] = 2.into()),
        ),
        (
            "frameTable.func[1] = 0.5 is not an index",
            Box::new(|v| v["threads"][0]["frameTable"]["func"][1] = 0.5.into()),
        ),
        (
            "funcTable.resource[0] = -2 is out of range",
            Box::new(|v| v["threads"][0]["funcTable"]["resource"][0] = (-2).into()),
        ),
        (
            "stackTable.prefix[1] = -1 is not an index",
            Box::new(|v| v["threads"][0]["stackTable"]["prefix"][1] = (-1).into()),
        ),
        (
            "frameTable.func[0] = null is not an index",
            Box::new(|v| v["threads"][0]["frameTable"]["func"][0] = Value::Null),
        ),
        (
            "stackTable.length is missing",
            Box::new(|v| v["threads"][0]["stackTable"]["length"] = "2".into()),
        ),
        (
            "name is not a string",
            Box::new(|v| v["threads"][0]["name"] = 3.into()),
        ),
        (
            "funcTable.name[0] = 0 is out of range 0..0",
            Box::new(|v| v["threads"][0]["stringArray"] = Value::Null),
        ),
        (
            "samples.time is not sorted at 0",
            Box::new(|v| {
                let s = &mut v["threads"][0]["samples"];
                s.as_object_mut().unwrap().remove("time");
                s["timeDeltas"] = serde_json::json!([1.0, -0.5]);
            }),
        ),
    ];
    for (needle, breakit) in cases {
        let mut v = minimal();
        breakit(&mut v);
        let problems = validate(&v);
        assert!(
            problems.iter().any(|p| p.contains(needle)),
            "expected {needle:?} in {problems:?}"
        );
    }
}
