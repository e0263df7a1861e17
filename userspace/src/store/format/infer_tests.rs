//! The kinds of frames stored before they had one, told as the outputs
//! told them then, and the kinds a segment stores, checked.

use super::*;
use crate::model::recording::{FrameRecord, LibRecord};
use crate::model::symbols::{AddrInfo, FuncAtAddr};

fn frame(lib: u32, kind: FrameKind, name: &str, file: Option<&str>) -> FrameRecord {
    FrameRecord {
        lib,
        address: 0,
        kind,
        symbols: AddrInfo {
            funcs: vec![FuncAtAddr {
                name: name.into(),
                file: file.map(Into::into),
                line: None,
                start_line: None,
            }],
            ..Default::default()
        },
    }
}

#[test]
fn each_runtime_is_told_by_its_names_and_files() {
    let lib = |name: &str| LibRecord {
        path: name.into(),
        name: name.into(),
        build_id: None,
    };
    let mut rec = Recording {
        libs: vec![lib("python3.11"), lib("JIT (java)")],
        ..Default::default()
    };
    let native = FrameKind::Native;
    let before = [
        // V8's anonymous functions end in `)` as Java methods do: their
        // files tell them apart.
        (
            frame(
                NO_LIB,
                native,
                "(anonymous)",
                Some("/usr/lib/node_modules/npm/index.js"),
            ),
            FrameKind::JavaScript,
        ),
        (
            frame(
                NO_LIB,
                native,
                "Module._load",
                Some("node:internal/modules/cjs/loader"),
            ),
            FrameKind::JavaScript,
        ),
        (
            frame(NO_LIB, native, "long Hot.hotOne(int)", Some("Hot.java")),
            FrameKind::Java,
        ),
        (
            frame(
                NO_LIB,
                native,
                "main",
                Some("/usr/lib/python3.11/json/tool.py"),
            ),
            FrameKind::Python,
        ),
        // A native function with a source file is in its library.
        (
            frame(0, native, "_PyEval_EvalFrameDefault", Some("ceval.c")),
            native,
        ),
        (
            frame(1, native, "long Hot.hotOne(int)", None),
            FrameKind::Jit,
        ),
        (
            frame(NO_LIB, FrameKind::Missing, "[off-CPU: sleeping]", None),
            FrameKind::OffCpu,
        ),
        (
            frame(
                NO_LIB,
                FrameKind::Missing,
                "[truncated: no unwind information]",
                None,
            ),
            FrameKind::Missing,
        ),
        (
            frame(NO_LIB, FrameKind::Kernel, "schedule", None),
            FrameKind::Kernel,
        ),
    ];
    rec.frames = before.iter().map(|(f, _)| f.clone()).collect();
    infer_kinds(&mut rec);
    for (f, (b, want)) in rec.frames.iter().zip(&before) {
        assert_eq!(f.kind, *want, "{:?}", b.symbols.funcs[0].name);
    }
}

#[test]
fn stored_kinds_are_all_or_refused() {
    let mut rec = Recording {
        frames: vec![frame(NO_LIB, FrameKind::Python, "f", Some("f.py"))],
        ..Default::default()
    };
    let kinds = StoredKinds::of(&rec);
    assert_eq!(kinds.kinds, vec![FrameKind::Python as u8]);
    rec.frames[0].kind = FrameKind::Native;
    assert!(kinds.clone().apply(&mut rec));
    assert_eq!(rec.frames[0].kind, FrameKind::Python);
    assert!(
        !StoredKinds { kinds: vec![] }.apply(&mut rec),
        "a count that is not the frames'"
    );
    assert!(
        !StoredKinds { kinds: vec![200] }.apply(&mut rec),
        "a byte that is no kind"
    );
    // VERSION 7's to 11's kinds come back as written.
    for kind in [
        FrameKind::JavaInterpreted,
        FrameKind::JavaCompiled,
        FrameKind::Java,
        FrameKind::Php,
        FrameKind::Perl,
        FrameKind::Ruby,
        FrameKind::GoLabels,
    ] {
        rec.frames[0].kind = kind;
        let kinds = StoredKinds::of(&rec);
        rec.frames[0].kind = FrameKind::Native;
        assert!(kinds.apply(&mut rec));
        assert_eq!(rec.frames[0].kind, kind);
    }
}
