//! A structural validator for processed profiles.
//!
//! In: a profile as JSON. Out: every problem found, as text: columns whose
//! length differs from the table's `length`, indexes out of range (strings,
//! frames, funcs, resources, libs, native symbols, stacks), stack prefixes
//! that do not point backwards, sample times out of order. Used by the
//! tests on every recorded profile and by `sysprof validate`.

use serde_json::Value;

/// A samples table's absolute times, from `time` or by adding up `timeDeltas`.
pub fn sample_times(samples: &Value) -> Option<Vec<f64>> {
    let len = samples["length"].as_u64()? as usize;
    let times: Vec<f64> = if let Some(t) = samples["time"].as_array() {
        t.iter().filter_map(Value::as_f64).collect()
    } else {
        let mut acc = 0.0;
        samples["timeDeltas"].as_array()?.iter().filter_map(Value::as_f64).map(|d| {
            acc += d;
            acc
        }).collect()
    };
    (times.len() == len).then_some(times)
}

/// Check a whole profile; an empty list means it is well formed.
pub fn validate(profile: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let libs = profile["libs"].as_array().map(|a| a.len()).unwrap_or(0);
    if profile["meta"]["preprocessedProfileVersion"].as_u64().is_none() {
        problems.push("meta.preprocessedProfileVersion is missing".into());
    }
    let categories = profile["meta"]["categories"].as_array().map(|a| a.len()).unwrap_or(0);
    let Some(threads) = profile["threads"].as_array() else {
        problems.push("threads is not an array".into());
        return problems;
    };
    for (ti, t) in threads.iter().enumerate() {
        let mut p = |msg: String| problems.push(format!("thread {ti} ({}): {msg}", t["name"]));
        let strings = t["stringArray"].as_array().map(|a| a.len()).unwrap_or(0);
        let tables = [
            ("frameTable", &["address", "inlineDepth", "category", "subcategory", "func", "nativeSymbol", "innerWindowID", "line", "column"][..]),
            ("funcTable", &["name", "isJS", "relevantForJS", "resource", "fileName", "lineNumber", "columnNumber"][..]),
            ("resourceTable", &["lib", "name", "host", "type"][..]),
            ("nativeSymbols", &["libIndex", "address", "name", "functionSize"][..]),
            ("stackTable", &["prefix", "frame"][..]),
            ("samples", &["stack", "threadCPUDelta"][..]),
            ("markers", &["category", "data", "endTime", "name", "phase", "startTime"][..]),
        ];
        let mut len = std::collections::HashMap::new();
        for (table, columns) in tables {
            let Some(n) = t[table]["length"].as_u64() else {
                p(format!("{table}.length is missing"));
                continue;
            };
            len.insert(table, n as usize);
            for c in columns {
                match t[table][c].as_array() {
                    Some(a) if a.len() == n as usize => {}
                    Some(a) => p(format!("{table}.{c} has {} entries, length is {n}", a.len())),
                    None => p(format!("{table}.{c} is missing")),
                }
            }
        }
        let check = |table: &str, column: &str, bound: usize, nullable: bool, p: &mut dyn FnMut(String)| {
            for (i, v) in t[table][column].as_array().into_iter().flatten().enumerate() {
                match v.as_i64() {
                    Some(x) if x >= 0 && (x as usize) < bound => {}
                    Some(-1) if table == "funcTable" && column == "resource" => {}
                    None if nullable && v.is_null() => {}
                    _ => p(format!("{table}.{column}[{i}] = {v} is out of range 0..{bound}")),
                }
            }
        };
        let l = |name: &str| len.get(name).copied().unwrap_or(0);
        check("frameTable", "func", l("funcTable"), false, &mut p);
        check("frameTable", "nativeSymbol", l("nativeSymbols"), true, &mut p);
        check("frameTable", "category", categories, true, &mut p);
        check("funcTable", "name", strings, false, &mut p);
        check("funcTable", "resource", l("resourceTable"), false, &mut p);
        check("funcTable", "fileName", strings, true, &mut p);
        check("resourceTable", "lib", libs, true, &mut p);
        check("resourceTable", "name", strings, false, &mut p);
        check("nativeSymbols", "libIndex", libs, false, &mut p);
        check("nativeSymbols", "name", strings, false, &mut p);
        check("stackTable", "frame", l("frameTable"), false, &mut p);
        check("samples", "stack", l("stackTable"), true, &mut p);
        check("markers", "name", strings, false, &mut p);
        for (i, v) in t["stackTable"]["prefix"].as_array().into_iter().flatten().enumerate() {
            if let Some(x) = v.as_u64() {
                if x as usize >= i {
                    p(format!("stackTable.prefix[{i}] = {x} does not point backwards"));
                }
            } else if !v.is_null() {
                p(format!("stackTable.prefix[{i}] = {v} is not an index"));
            }
        }
        let times = sample_times(&t["samples"]);
        match &times {
            None => p("samples has neither time nor timeDeltas of its length".into()),
            Some(times) => {
                if let Some(i) = times.windows(2).position(|w| w[1] < w[0]) {
                    p(format!("samples.time is not sorted at {i}: {} > {}", times[i], times[i + 1]));
                }
            }
        }
        for key in ["pid", "name", "processName"] {
            if !t[key].is_string() {
                p(format!("{key} is not a string"));
            }
        }
        if !t["tid"].is_number() {
            p("tid is not a number".into());
        }
    }
    problems
}

#[cfg(test)]
mod tests {
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

    /// Check that a well-formed profile passes.
    #[test]
    fn accepts_well_formed_profile() {
        assert_eq!(validate(&minimal()), Vec::<String>::new());
    }

    /// Check that each kind of breakage is reported.
    #[test]
    fn reports_each_kind_of_breakage() {
        type Breakage = Box<dyn Fn(&mut Value)>;
        let cases: Vec<(&str, Breakage)> = vec![
            ("has 1 entries", Box::new(|v| v["threads"][0]["frameTable"]["func"] = serde_json::json!([0]))),
            ("frameTable.func[1]", Box::new(|v| v["threads"][0]["frameTable"]["func"][1] = 5.into())),
            ("does not point backwards", Box::new(|v| v["threads"][0]["stackTable"]["prefix"][0] = 1.into())),
            ("not sorted", Box::new(|v| v["threads"][0]["samples"]["time"][0] = 9.0.into())),
            ("neither time nor timeDeltas", Box::new(|v| v["threads"][0]["samples"]["time"] = serde_json::json!([0.0]))),
            ("resourceTable.lib[0]", Box::new(|v| v["threads"][0]["resourceTable"]["lib"][0] = 3.into())),
            ("funcTable.name[0]", Box::new(|v| v["threads"][0]["funcTable"]["name"][0] = 7.into())),
            ("samples.stack[0]", Box::new(|v| v["threads"][0]["samples"]["stack"][0] = 2.into())),
        ];
        for (needle, breakit) in cases {
            let mut v = minimal();
            breakit(&mut v);
            let problems = validate(&v);
            assert!(problems.iter().any(|p| p.contains(needle)), "expected {needle:?} in {problems:?}");
        }
    }
}
