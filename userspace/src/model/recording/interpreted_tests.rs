//! Which runtime a frame belongs to, told by its name and file, checked.

use super::*;
use crate::model::symbols::{AddrInfo, FuncAtAddr};

fn frame(name: &str, file: &str) -> FrameRecord {
    FrameRecord {
        lib: NO_LIB,
        address: 0,
        kernel: false,
        symbols: AddrInfo {
            funcs: vec![FuncAtAddr {
                name: name.into(),
                file: Some(file.into()),
                line: None,
                start_line: None,
            }],
            ..Default::default()
        },
        pseudo: false,
    }
}

#[test]
fn each_runtime_is_told_by_its_names_and_files() {
    // V8's anonymous functions end in `)` as Java methods do: their
    // files tell them apart (a Java method is keyed by name alone, so
    // taken for one, every `(anonymous)` became one function).
    let js = frame(
        "(anonymous)",
        "/usr/lib/node_modules/npm/node_modules/semver/index.js",
    );
    assert!(js.is_interpreted_javascript() && !js.is_interpreted_java());
    let node = frame("Module._load", "node:internal/modules/cjs/loader");
    assert!(node.is_interpreted_javascript());
    let java = frame("long Hot.hotOne(int)", "Hot.java");
    assert!(java.is_interpreted_java() && !java.is_interpreted_javascript());
    let py = frame("main", "/usr/lib/python3.11/json/tool.py");
    assert!(py.is_interpreted() && !py.is_interpreted_java() && !py.is_interpreted_javascript());
}
