//! The crate's layers, checked from its own source: every `crate::X` path
//! (outside comments) in a file of top-level module `M` is an edge M -> X.
//! In: `userspace/src/**/*.rs`. Out: a failure naming each edge that points
//! up the layers, and any cycle. The layers are ARCHITECTURE.md's; change
//! both together.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level modules by layer, lowest first. A module may use its own
/// layer and those below it, never one above.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "sys",
        &["sys", "escape", "units", "log", "error", "sock_diag"],
    ),
    ("model", &["model"]),
    ("kernel interfaces", &["bpf", "sideband"]),
    ("binaries", &["binaries"]),
    ("unwind and symbolize", &["unwind", "symbolize"]),
    ("runtimes", &["runtimes"]),
    ("collector", &["collector"]),
    ("capture", &["capture"]),
    ("outputs", &["profile", "store", "export"]),
    (
        "commands",
        &[
            "record", "agent", "show", "report", "view", "cli", "sampling", "summary",
        ],
    ),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, mods)| mods.contains(&module))
}

/// The source without `//` comments (doc links name modules freely).
fn code_only(src: &str) -> String {
    src.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Modules named by `crate::name` and `crate::{a, b::c}` in `code`.
fn used_modules(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level names of the group: the first identifier of each
            // comma-separated item at nesting depth 0.
            let mut depth = 0;
            let mut item_start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && (c.is_alphanumeric() || c == '_') => {
                        let name: String = group[j..]
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        out.insert(name);
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Edges between top-level modules: (from, to) -> the first file that has it.
fn edges() -> BTreeMap<(String, String), String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut out = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if top == "lib" || top == "main" {
            continue;
        }
        let code = code_only(&std::fs::read_to_string(&f).unwrap());
        for used in used_modules(&code) {
            if used != top {
                out.entry((top.clone(), used))
                    .or_insert_with(|| rel.display().to_string());
            }
        }
    }
    out
}

/// Check that every top-level module is in a layer and uses only its own
/// layer and those below: no edge points up, so there is no cycle across
/// layers.
#[test]
fn dependencies_point_down_the_layers() {
    let mut problems = Vec::new();
    for ((from, to), file) in edges() {
        match (layer_of(&from), layer_of(&to)) {
            (None, _) => problems.push(format!(
                "{from} (in {file}) is in no layer: add it to LAYERS and ARCHITECTURE.md"
            )),
            (_, None) => problems.push(format!(
                "{from} uses {to} (in {file}), which is in no layer"
            )),
            (Some(a), Some(b)) if b > a => problems.push(format!(
                "{from} ({}) uses {to} ({}) in {file}: that points up",
                LAYERS[a].0, LAYERS[b].0
            )),
            _ => {}
        }
    }
    assert!(
        problems.is_empty(),
        "{} upward dependencies:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// Check that the modules within a layer have no cycle among them either
/// (a layer's modules may use each other, one way).
#[test]
fn no_cycle_among_top_level_modules() {
    let edges = edges();
    let mut graph: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        graph.entry(from).or_default().push(to);
    }
    // Depth-first search with colours; a grey node met again closes a cycle.
    fn visit<'a>(
        n: &'a str,
        g: &BTreeMap<&'a str, Vec<&'a str>>,
        colour: &mut BTreeMap<&'a str, u8>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<&'a str>> {
        colour.insert(n, 1);
        path.push(n);
        for &m in g.get(n).map(|v| v.as_slice()).unwrap_or(&[]) {
            match colour.get(m).copied().unwrap_or(0) {
                1 => {
                    let at = path.iter().position(|&p| p == m).unwrap();
                    let mut cycle = path[at..].to_vec();
                    cycle.push(m);
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(m, g, colour, path) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        colour.insert(n, 2);
        None
    }
    let mut colour = BTreeMap::new();
    for &n in graph.keys() {
        if colour.get(n).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(n, &graph, &mut colour, &mut Vec::new()) {
                panic!("a cycle among top-level modules: {}", c.join(" -> "));
            }
        }
    }
}

/// Check that the parser finds what it must: a plain path, a group with
/// nested items, and nothing in a comment.
#[test]
fn the_dependency_parser_reads_paths_and_groups() {
    let code = code_only("use crate::model::recording::X;\nuse crate::{sys::clock, units, binaries::{elf, Binary}};\n// crate::agent\n");
    let got: Vec<String> = used_modules(&code).into_iter().collect();
    assert_eq!(got, ["binaries", "model", "sys", "units"]);
}
