//! The OTLP request's tests: samples and their times, the deduplicated
//! dictionary, locations and the frame types of JIT code.

use super::*;
use crate::model::recording::FrameKind;
use crate::model::recording::{FrameRecord, LibRecord};
use crate::store::segment::tests::sample_recording;

fn labels() -> Labels {
    Labels {
        host_name: "h".into(),
    }
}

/// Check that each sample of the recording is one timestamp of the
/// samples profile, at its wall time, with the thread's attributes;
/// that off-CPU time is kept as values; and that the dictionary holds
/// each string, attribute and stack once.
#[test]
fn samples_keep_their_times_and_the_dictionary_is_deduplicated() {
    let rec = sample_recording(5_000_000_000);
    let req = build(&rec, &labels());
    let d = req.dictionary.as_ref().unwrap();
    assert_eq!(d.string_table[0], "", "index 0 is the empty string");
    let mut strings = d.string_table.clone();
    strings.sort();
    strings.dedup();
    assert_eq!(strings.len(), d.string_table.len(), "strings interned once");
    let mut stacks: Vec<&Vec<i32>> = d.stack_table.iter().map(|s| &s.location_indices).collect();
    stacks.sort();
    stacks.dedup();
    assert_eq!(stacks.len(), d.stack_table.len(), "stacks interned once");
    assert_eq!(req.resource_profiles.len(), 1);
    let rp = &req.resource_profiles[0];
    let pid = rp
        .resource
        .as_ref()
        .unwrap()
        .attributes
        .iter()
        .find(|a| a.key == "process.pid")
        .unwrap();
    assert_eq!(
        pid.value.as_ref().unwrap().value,
        Some(any_value::Value::IntValue(7))
    );
    let profiles = &rp.scope_profiles[0].profiles;
    let name = |i: i32| d.string_table[i as usize].as_str();
    let on = profiles
        .iter()
        .find(|p| name(p.sample_type.unwrap().type_strindex) == "samples")
        .unwrap();
    let mut times: Vec<u64> = on
        .samples
        .iter()
        .flat_map(|s| s.timestamps_unix_nano.clone())
        .collect();
    times.sort_unstable();
    let want: Vec<u64> = rec.processes[0].threads[0]
        .samples
        .time_ns
        .iter()
        .map(|&t| wall_ns(&rec, t))
        .collect();
    assert_eq!(times, want);
    assert_eq!(times[0], 1_700_000_000_000_005_000, "1.7e12 ms + 5 µs");
    for s in &on.samples {
        let keys: Vec<&str> = s
            .attribute_indices
            .iter()
            .map(|&a| name(d.attribute_table[a as usize].key_strindex))
            .collect();
        assert_eq!(keys, ["thread.name", "thread.id", "cpu.logical_number"]);
    }
    let off = profiles
        .iter()
        .find(|p| name(p.sample_type.unwrap().type_strindex) == "off_cpu")
        .unwrap();
    let total: i64 = off.samples.iter().flat_map(|s| s.values.iter()).sum();
    assert_eq!(total, 5_001_000);
}

/// Check that a location of an unnamed frame has its address and no
/// lines, and a named one's lines name functions of the dictionary.
#[test]
fn locations_carry_addresses_and_mappings() {
    let rec = sample_recording(5_000_000_000);
    let req = build(&rec, &labels());
    let d = req.dictionary.unwrap();
    let addresses: Vec<u64> = d.location_table.iter().skip(1).map(|l| l.address).collect();
    assert!(
        addresses.contains(&0x1234) && addresses.contains(&0x99),
        "{addresses:?}"
    );
    let mapped = d
        .location_table
        .iter()
        .find(|l| l.address == 0x1234)
        .unwrap();
    let m = &d.mapping_table[mapped.mapping_index as usize];
    assert_eq!(d.string_table[m.filename_strindex as usize], "/usr/bin/x");
    // Each code frame says its kind.
    let kind = |l: &pb::Location| {
        l.attribute_indices
            .iter()
            .map(|&i| &d.attribute_table[i as usize])
            .find(|a| d.string_table[a.key_strindex as usize] == "profile.frame.type")
            .map(|a| format!("{:?}", a.value))
    };
    assert!(
        kind(mapped).is_some_and(|v| v.contains("native")),
        "{:?}",
        kind(mapped)
    );
}

/// Check that JIT frames are typed by the runtime of the process they
/// are in: a JVM's `jvm`, node's `v8js`, any other's `native`; and that
/// a JVM's library frames stay `native`.
#[test]
fn jit_frames_are_typed_by_their_runtime() {
    for (exe, expected) in [
        ("/usr/lib/jvm/java-17-openjdk-amd64/bin/java", "jvm"),
        ("/usr/bin/node", "v8js"),
        ("/usr/bin/luajit", "native"),
    ] {
        let mut rec = sample_recording(5_000_000_000);
        rec.processes[0].exe = Some(exe.into());
        rec.libs.push(LibRecord {
            path: "/tmp/perf-7.map".into(),
            name: "JIT (perf-7.map)".into(),
            build_id: None,
        });
        rec.frames.push(FrameRecord {
            lib: 1,
            address: 0x7f00_0000_1000,
            kind: FrameKind::Native,
            symbols: Default::default(),
        });
        let leaf = rec
            .stacks
            .child(rec.processes[0].threads[0].samples.stack[1], 2);
        rec.processes[0].threads[0].samples.stack[2] = leaf;
        let d = build(&rec, &labels()).dictionary.unwrap();
        let kind = |address: u64| {
            let l = d
                .location_table
                .iter()
                .find(|l| l.address == address)
                .expect("a location at the address");
            l.attribute_indices
                .iter()
                .map(|&i| &d.attribute_table[i as usize])
                .find(|a| d.string_table[a.key_strindex as usize] == "profile.frame.type")
                .map(|a| format!("{:?}", a.value))
                .unwrap_or_default()
        };
        assert!(
            kind(0x7f00_0000_1000).contains(&format!("\"{expected}\"")),
            "{exe}: {}",
            kind(0x7f00_0000_1000)
        );
        assert!(
            kind(0x1234).contains("\"native\""),
            "{exe}: a library's frame: {}",
            kind(0x1234)
        );
    }
}
