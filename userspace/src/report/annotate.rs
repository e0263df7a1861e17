//! `sysprof report --why ID --annotate OUT`: the profile again, each of the
//! threads' waits carrying a marker of where its time went, to see
//! `--why`'s answer on the timeline.
//!
//! In: a profile's JSON (as `--why` read it) and the per-wait blame of
//! [`why::Threads::each_wait`] and [`why::Threads::each_short_run`]. Out:
//! the same JSON with, per wait of each thread asked about, a "Wait
//! charged to" marker over the whole wait (its run delay included), and
//! per run of its short waits one over the run's span (its share: of the
//! waits' off-CPU time, spread over the span), labelled and colored by the largest share of
//! its time at the end of the chain: the disk, the thread that was
//! running, whoever held its CPU, a timer. The recording's own off-CPU
//! markers are colored by what *ended* a wait (the wakeup: a thread, an
//! interrupt); a server's fdatasync ends with a kworker's wakeup, and its
//! time was the disk's. The schema entry tells the Firefox Profiler how to
//! show it.

use serde_json::{json, Value};

use super::why::{Culprit, Threads, WaitBlame};

/// The marker's name and type. Its field is `chargedTo`: the front end reads
/// a marker's `cause` as a stack.
const MARKER_NAME: &str = "Wait charged to";
const MARKER_TYPE: &str = "WaitCharged";

/// Shares under this are left out of a marker's detail.
const DETAIL_MIN_SHARE: f64 = 0.01;

/// Add a marker per wait of `tids` between `from` and `to` to `profile`;
/// returns how many were added.
pub fn annotate(profile: &mut Value, threads: &Threads, tids: &[u32], from: f64, to: f64) -> usize {
    let category = profile["meta"]["categories"]
        .as_array()
        .and_then(|c| c.iter().position(|c| c["name"] == "Off-CPU"))
        .unwrap_or(0);
    let mut added = 0;
    for t in profile["threads"].as_array_mut().into_iter().flatten() {
        let machine = crate::profile::is_machine_track(t["processType"].as_str().unwrap_or(""));
        let Some(tid) = t["tid"].as_u64().filter(|_| !machine).map(|t| t as u32) else {
            continue;
        };
        if !tids.contains(&tid) {
            continue;
        }
        // A wait's blame sums to its length; a short run's to its waits'
        // off-CPU time, spread over its span.
        let mut waits: Vec<(f64, WaitBlame)> = threads
            .each_wait(tid, from, to)
            .into_iter()
            .map(|w| (w.end - w.start, w))
            .collect();
        waits.extend(
            threads
                .each_short_run(tid, from, to)
                .into_iter()
                .map(|(_, off_cpu, run)| (off_cpu, run)),
        );
        if waits.is_empty() {
            continue;
        }
        let Some(name) = string_index(t, MARKER_NAME) else {
            continue;
        };
        let m = &mut t["markers"];
        let push = |m: &mut Value, key: &str, v: Value| {
            if let Some(a) = m[key].as_array_mut() {
                a.push(v);
            }
        };
        let columns = ["data", "name", "startTime", "endTime", "phase", "category"];
        if columns.iter().any(|c| !m[*c].is_array()) {
            continue;
        }
        // Annotated again (another range, a newer build): this annotation
        // replaces the thread's last one rather than adding a second.
        remove_markers_of_type(m, MARKER_TYPE);
        for (wait_ms, w) in waits {
            let Some((top, top_ms)) = w.blame.first() else {
                continue;
            };
            let wait_ms = wait_ms.max(f64::MIN_POSITIVE);
            let detail: Vec<String> = w
                .blame
                .iter()
                .filter(|(_, ms)| ms / wait_ms >= DETAIL_MIN_SHARE)
                .take(4)
                .map(|(c, ms)| {
                    format!(
                        "{:.0} % {} of {}",
                        100.0 * ms / wait_ms,
                        c.what_text(),
                        threads.describe(c.tid)
                    )
                })
                .collect();
            let data = json!({
                "type": MARKER_TYPE,
                "chargedTo": cause_label(threads, top),
                "share": top_ms / wait_ms,
                "reason": w.reason,
                "detail": detail.join("; "),
                "color": color_of(top),
            });
            push(m, "data", data);
            push(m, "name", json!(name));
            push(m, "startTime", json!(w.start));
            push(m, "endTime", json!(w.end));
            push(m, "phase", json!(1));
            push(m, "category", json!(category));
            added += 1;
        }
        let count = m["data"].as_array().map_or(0, |a| a.len());
        m["length"] = json!(count);
    }
    if let Some(schema) = profile["meta"]["markerSchema"].as_array_mut() {
        schema.retain(|s| s["name"] != MARKER_TYPE);
        schema.push(schema_entry());
    }
    added
}

/// `markers` (a thread's marker table) without those whose data's type is
/// `ty`: every column of the table's length keeps the same rows.
fn remove_markers_of_type(markers: &mut Value, ty: &str) {
    let Some(data) = markers["data"].as_array() else {
        return;
    };
    let rows = data.len();
    let keep: Vec<bool> = data.iter().map(|d| d["type"] != ty).collect();
    if keep.iter().all(|&k| k) {
        return;
    }
    let Some(table) = markers.as_object_mut() else {
        return;
    };
    for column in table.values_mut() {
        if let Some(a) = column.as_array_mut().filter(|a| a.len() == rows) {
            let mut row = 0;
            a.retain(|_| {
                row += 1;
                keep[row - 1]
            });
        }
    }
    table.insert("length".into(), json!(keep.iter().filter(|&&k| k).count()));
}

/// "I/O on vda", "running: postgres (postgres, 12/12)", "holding its CPU: ...".
fn cause_label(threads: &Threads, c: &Culprit) -> String {
    match c.what {
        "I/O" | "timer" | "softirq" | "interrupt" | "several wakers" | "unknown waker" => {
            c.what_text()
        }
        _ => format!("{}: {}", c.what_text(), threads.describe(c.tid)),
    }
}

/// The marker's color (the front end's GraphColor names) by what the time
/// was at the end of the chain.
fn color_of(c: &Culprit) -> &'static str {
    match c.what {
        "I/O" => "orange",
        "running" => "blue",
        "holding its CPU" | "runnable" => "red",
        "timer" | "softirq" | "interrupt" => "green",
        "waking its CPU" => "yellow",
        _ => "grey",
    }
}

/// The index of `s` in the thread's strings, added when absent.
fn string_index(thread: &mut Value, s: &str) -> Option<usize> {
    let strings = thread["stringArray"].as_array_mut()?;
    Some(match strings.iter().position(|x| x == s) {
        Some(i) => i,
        None => {
            strings.push(json!(s));
            strings.len() - 1
        }
    })
}

fn schema_entry() -> Value {
    json!({
        "name": MARKER_TYPE,
        "display": ["marker-chart", "marker-table"],
        "chartLabel": "{marker.data.chargedTo}",
        "tooltipLabel": "Charged to {marker.data.chargedTo}",
        "tableLabel": "{marker.data.chargedTo} ({marker.data.reason})",
        "colorField": "color",
        "description": "Where a wait's time went at the end of the chain of who woke whom (sysprof report --why): its largest share names it. Orange the disk, blue a thread running (the waker, or whoever woke it in turn), red a thread holding the CPU this one waited for (or its own run queue), green a timer or an interrupt, yellow its wakeup reaching an idle CPU, grey no waker seen or several. Over a run of short waits (reason: short waits), the run's span; its share is of their off-CPU time",
        "fields": [
            { "key": "chargedTo", "label": "Charged to", "format": "string" },
            { "key": "share", "label": "Share of the wait", "format": "percentage" },
            { "key": "reason", "label": "Reason", "format": "string" },
            { "key": "detail", "label": "Where it went", "format": "string" },
            { "key": "color", "label": "Color", "format": "string", "hidden": true },
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_earlier_annotation_is_removed_row_by_row() {
        let mut m = json!({
            "length": 3,
            "data": [{"type": "OffCpu"}, {"type": MARKER_TYPE}, {"type": "BlockIo"}],
            "name": [1, 2, 3],
            "startTime": [0.5, 1.5, 2.5],
            "endTime": [1.0, 2.0, 3.0],
            "phase": [1, 1, 1],
            "category": [4, 4, 5],
        });
        remove_markers_of_type(&mut m, MARKER_TYPE);
        assert_eq!(m["length"], 2);
        assert_eq!(m["name"], json!([1, 3]));
        assert_eq!(m["startTime"], json!([0.5, 2.5]));
        assert_eq!(m["category"], json!([4, 5]));
        assert_eq!(m["data"][1]["type"], "BlockIo");
        // None left: nothing changes.
        let before = m.clone();
        remove_markers_of_type(&mut m, MARKER_TYPE);
        assert_eq!(m, before);
    }
}
