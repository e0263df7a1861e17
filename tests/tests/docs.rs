//! The docs name only what exists: every `sysprof SUBCOMMAND --flag` in
//! README.md and docs/*.md (in code blocks and code spans, also as
//! `./target/release/sysprof SUB` and `sudo sysprof SUB`) is a subcommand
//! whose `--help` lists that flag, with a value among its possible values
//! where `--help` lists some; every `cargo xtask TASK --flag` is a task and
//! flag of xtask (or of the bench harness it hands its arguments to), read
//! from their sources; every `cargo test -p PACKAGE --test NAME [FILTER]` is
//! a test target with such a test; every path into the tree and every
//! relative link (and its `#anchor`) resolves. Needs no root and no BPF.
//!
//! Flags are read from a `sysprof SUB` token up to the end of its command:
//! a pipe, `;`, `&&`, `||`, a `#` comment, a bare `--` (the profiled
//! command's own arguments follow it) or the end of the line. Short flags
//! are not checked. A code span that is only a flag (`--window`) must be a
//! flag of sysprof or xtask, or one of the other programs' flags listed in
//! `FOREIGN_FLAGS`. `SYSPROF_DOCS_LIST=1` prints every flag checked.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use sysprof_tests::{sysprof_bin, workspace_root};

/// Flags the docs name as code spans of their own that belong to other
/// programs (so no sysprof or xtask flag is expected).
const FOREIGN_FLAGS: &[(&str, &str)] = &[
    ("--perf-basic-prof", "node"),
    ("--perf-prof", "node"),
    ("--feature-gates", "otelcol-contrib"),
    ("--nonblocking", "py-spy"),
];

/// Words before a command that leave it in command position.
const PREFIXES: &[&str] = &[
    "$", "sudo", "&&", "||", ";", "|", "(", "time", "exec", "nice",
];

/// One markdown file.
struct Doc {
    /// Relative to the workspace root.
    name: String,
    text: String,
}

fn docs() -> Vec<Doc> {
    let root = workspace_root();
    let mut paths = vec![root.join("README.md")];
    let mut more: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    more.sort();
    paths.extend(more);
    paths
        .into_iter()
        .map(|p| Doc {
            name: p.strip_prefix(&root).unwrap().display().to_string(),
            text: std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
        })
        .collect()
}

/// Code from a doc: a line of a fenced block, or an inline code span (its
/// line breaks made spaces).
struct Snippet {
    line: usize,
    text: String,
    fenced: bool,
    /// The fenced block it is in (to carry a command over to option lines).
    block: usize,
}

/// Prose with its line numbers, and the code in it.
struct Parsed {
    snippets: Vec<Snippet>,
    /// Lines outside fenced blocks, with their numbers.
    prose: Vec<(usize, String)>,
    /// Heading texts.
    headings: Vec<String>,
}

fn parse(text: &str) -> Parsed {
    let mut snippets = Vec::new();
    let mut prose = Vec::new();
    let mut headings = Vec::new();
    let mut fence: Option<String> = None;
    let mut block = 0;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim_start();
        if let Some(f) = &fence {
            if trimmed.starts_with(f.as_str())
                && trimmed
                    .trim_start_matches(f.chars().next().unwrap())
                    .trim()
                    .is_empty()
            {
                fence = None;
            } else {
                snippets.push(Snippet {
                    line: n,
                    text: line.to_string(),
                    fenced: true,
                    block,
                });
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            let c = trimmed.chars().next().unwrap();
            fence = Some(trimmed.chars().take_while(|&x| x == c).collect());
            block += 1;
            continue;
        }
        if line.starts_with('#') {
            headings.push(line.trim_start_matches('#').trim().to_string());
        }
        prose.push((n, line.to_string()));
    }
    // Code spans: a run of backticks up to the next run of the same length,
    // across line breaks within the prose.
    let mut chars: Vec<(usize, char)> = Vec::new();
    for (n, line) in &prose {
        chars.extend(line.chars().map(|c| (*n, c)));
        chars.push((*n, '\n'));
    }
    let mut i = 0;
    while i < chars.len() {
        if chars[i].1 != '`' {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && chars[i].1 == '`' {
            i += 1;
        }
        let ticks = i - start;
        let mut j = i;
        let mut end = None;
        while j < chars.len() {
            if chars[j].1 == '`' {
                let run = j;
                while j < chars.len() && chars[j].1 == '`' {
                    j += 1;
                }
                if j - run == ticks {
                    end = Some(run);
                    break;
                }
            } else {
                j += 1;
            }
        }
        let Some(end) = end else { continue };
        let text: String = chars[i..end]
            .iter()
            .map(|&(_, c)| if c == '\n' { ' ' } else { c })
            .collect();
        snippets.push(Snippet {
            line: chars[start].0,
            text: text.trim().to_string(),
            fenced: false,
            block: 0,
        });
        i = j;
    }
    snippets.sort_by_key(|s| s.line);
    Parsed {
        snippets,
        prose,
        headings,
    }
}

/// A command's options as its help or source gives them.
#[derive(Default, Clone)]
struct Options {
    /// Long flag -> its possible values (empty: any value, or none).
    flags: BTreeMap<String, Vec<String>>,
}

impl Options {
    fn with_help(mut self) -> Options {
        self.flags.entry("--help".into()).or_default();
        self
    }
}

/// The long flags (and their possible values) a clap `--help` lists.
fn help_options(help: &str) -> Options {
    let mut opts = Options::default();
    let mut current: Option<String> = None;
    let mut entry = String::new();
    let finish = |flag: &Option<String>, entry: &str, opts: &mut Options| {
        let Some(flag) = flag else { return };
        let values = entry
            .find("[possible values: ")
            .map(|at| {
                let rest = &entry[at + "[possible values: ".len()..];
                let rest = &rest[..rest.find(']').unwrap_or(rest.len())];
                rest.split(',')
                    .map(|v| v.trim().to_string())
                    .filter(|v| !v.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        opts.flags.insert(flag.clone(), values);
    };
    for line in help.lines() {
        let indent = line.len() - line.trim_start().len();
        let head = (indent == 2 || indent == 6) && line.trim_start().starts_with('-');
        if head {
            finish(&current, &entry, &mut opts);
            entry.clear();
            current = line
                .split_whitespace()
                .take_while(|t| t.starts_with('-'))
                .map(|t| t.trim_end_matches(','))
                .find(|t| t.starts_with("--"))
                .map(str::to_string);
        } else if !line.starts_with(' ') {
            finish(&current, &entry, &mut opts);
            entry.clear();
            current = None;
        }
        entry.push_str(line);
        entry.push(' ');
    }
    finish(&current, &entry, &mut opts);
    opts
}

fn help(args: &[&str]) -> String {
    let out = Command::new(sysprof_bin())
        .args(args)
        .output()
        .expect("run sysprof");
    assert!(
        out.status.success(),
        "sysprof {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `sysprof`'s subcommands and their options, from its `--help`.
fn sysprof_commands() -> (Options, BTreeMap<String, Options>) {
    let top = help(&["--help"]);
    let mut subs = BTreeMap::new();
    let mut in_commands = false;
    for line in top.lines() {
        if line.starts_with("Commands:") {
            in_commands = true;
            continue;
        }
        if in_commands {
            if !line.starts_with("  ") {
                break;
            }
            let name = line.split_whitespace().next().unwrap();
            if name != "help" {
                subs.insert(name.to_string(), help_options(&help(&[name, "--help"])));
            }
        }
    }
    assert!(
        subs.contains_key("record") && subs.contains_key("report"),
        "no subcommands in sysprof --help:\n{top}"
    );
    (help_options(&top), subs)
}

fn kebab(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('-');
            }
            out.push(c.to_ascii_lowercase());
        } else if c == '_' {
            out.push('-');
        } else {
            out.push(c);
        }
    }
    out
}

/// The string literals of `value_parser = [...]` in a clap attribute.
fn literal_values(attr: &str) -> Vec<String> {
    let Some(at) = attr.find("value_parser = [") else {
        return Vec::new();
    };
    let rest = &attr[at + "value_parser = [".len()..];
    let rest = &rest[..rest.find(']').unwrap_or(rest.len())];
    rest.split(',')
        .map(|v| v.trim().trim_matches('"').to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

/// The variants of `enum NAME` in a Rust source, kebab-cased.
fn enum_variants(src: &str, name: &str) -> Vec<String> {
    let Some(at) = src.find(&format!("enum {name} {{")) else {
        return Vec::new();
    };
    let body = &src[at..];
    let body = &body[..body.find("\n}").unwrap_or(body.len())];
    body.lines()
        .skip(1)
        .filter(|l| l.starts_with("    ") && !l.starts_with("     "))
        .map(str::trim)
        .filter(|l| l.chars().next().is_some_and(|c| c.is_ascii_uppercase()))
        .map(|l| kebab(l.trim_end_matches([',', '{', ' ', '('])))
        .collect()
}

/// The `#[arg(long ...)]` fields at `indent` in `body`: flag -> values.
fn clap_fields(body: &str, indent: usize, src: &str) -> Options {
    let mut opts = Options::default();
    let mut attrs = String::new();
    for line in body.lines() {
        let ind = line.len() - line.trim_start().len();
        let t = line.trim();
        if ind != indent {
            continue;
        }
        if t.starts_with("#[") {
            attrs.push_str(t);
            continue;
        }
        if t.starts_with("///") || t.is_empty() {
            continue;
        }
        if let Some((field, ty)) = t.split_once(':') {
            let field = field.trim().trim_start_matches("pub ").trim();
            if attrs.contains("#[arg(long") {
                let name = attrs
                    .find("long = \"")
                    .map(|at| {
                        let rest = &attrs[at + "long = \"".len()..];
                        rest[..rest.find('"').unwrap()].to_string()
                    })
                    .unwrap_or_else(|| kebab(field));
                let mut values = literal_values(&attrs);
                if attrs.contains("value_enum") {
                    let ty = ty.trim().trim_end_matches(',');
                    let ty = ty
                        .strip_prefix("Option<")
                        .and_then(|t| t.strip_suffix('>'))
                        .unwrap_or(ty);
                    values = enum_variants(src, ty);
                }
                opts.flags.insert(format!("--{name}"), values);
            }
        }
        attrs.clear();
    }
    opts
}

/// xtask's tasks and their options, from its source; `bench` takes the
/// bench harness's.
fn xtask_commands() -> BTreeMap<String, Options> {
    let root = workspace_root();
    let src = std::fs::read_to_string(root.join("xtask/src/main.rs")).unwrap();
    let at = src.find("enum Task {").expect("xtask's enum Task");
    let body = &src[at..];
    let body = &body[..body.find("\n}").unwrap()];
    let mut tasks = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in body.lines().skip(1) {
        let ind = line.len() - line.trim_start().len();
        let t = line.trim();
        if ind == 4 && t.chars().next().is_some_and(|c| c.is_ascii_uppercase()) {
            if let Some((name, fields)) = current.take() {
                tasks.insert(name, clap_fields(&fields, 8, &src).with_help());
            }
            let name = t.split(|c: char| !c.is_alphanumeric()).next().unwrap();
            current = Some((kebab(name), String::new()));
        } else if let Some((_, fields)) = current.as_mut() {
            fields.push_str(line);
            fields.push('\n');
        }
    }
    if let Some((name, fields)) = current.take() {
        tasks.insert(name, clap_fields(&fields, 8, &src).with_help());
    }
    let bench = std::fs::read_to_string(root.join("benches/src/main.rs")).unwrap();
    let at = bench
        .find("struct Args {")
        .expect("the bench harness's struct Args");
    let body = &bench[at..];
    let body = &body[..body.find("\n}").unwrap()];
    tasks.insert("bench".into(), clap_fields(body, 4, &bench).with_help());
    assert!(
        tasks.contains_key("test") && tasks.contains_key("build-ebpf"),
        "xtask tasks: {:?}",
        tasks.keys()
    );
    tasks
}

/// A snippet's words, brackets of optional parts (`[--check]`) dropped. A
/// code span within a block's line (`cargo test ...` in the layout) is a
/// command of its own: `;` is put before it (a command may begin there) and
/// a backtick after it (prose follows, no command).
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for w in text.split_whitespace() {
        let opens = w.trim_start_matches(['(', '[']).starts_with('`');
        let closes = w
            .trim_end_matches(|c: char| ",.:;)]'".contains(c))
            .ends_with('`')
            && !(opens && w.len() == 1);
        if opens {
            out.push(";".to_string());
        }
        let word = if opens {
            w.trim_start_matches(['(', '['])
        } else {
            w
        };
        let word = word.trim_matches(|c| "[]`\"'".contains(c));
        if !word.is_empty() {
            out.push(word.to_string());
        }
        if closes {
            out.push("`".to_string());
        }
    }
    out
}

/// A word without the punctuation prose puts after it (`sysprof,`, `show`'s).
fn bare(w: &str) -> &str {
    let w = w.split("'s").next().unwrap();
    w.trim_end_matches(|c: char| ",.:;)'`\"".contains(c))
}

fn ends_command(w: &str) -> bool {
    matches!(w, "|" | "||" | "&&" | ";" | "--" | "`") || w.starts_with('#')
}

/// A flag's name from a word (`--foo=bar`, `--foo,` -> `--foo`), if it is one.
fn flag_name(w: &str) -> Option<String> {
    if !w.starts_with("--") || w.len() < 3 {
        return None;
    }
    let name = w.split('=').next().unwrap();
    let name = name.trim_end_matches(|c: char| ",.:;)'`".contains(c));
    let ok = name[2..]
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && name[2..].starts_with(|c: char| c.is_ascii_lowercase());
    ok.then(|| name.to_string())
}

#[derive(Default)]
struct Counts {
    sysprof_commands: usize,
    sysprof_flags: usize,
    values: usize,
    option_lines: usize,
    xtask_commands: usize,
    xtask_flags: usize,
    cargo_tests: usize,
    bare_flags: usize,
    paths: usize,
    links: usize,
    anchors: usize,
}

struct Checker {
    top: Options,
    subs: BTreeMap<String, Options>,
    xtask: BTreeMap<String, Options>,
    counts: Counts,
    errors: Vec<String>,
    /// Subcommand -> flags the docs name for it.
    named: BTreeMap<String, BTreeSet<String>>,
    /// The snippet being checked, for messages.
    current: String,
}

impl Checker {
    /// Check the flags in `ws` (up to the end of the command) against
    /// `opts`; returns the index after the command.
    fn flags(
        &mut self,
        ws: &[String],
        opts: &Options,
        what: &str,
        at: &str,
        sysprof_sub: Option<&str>,
    ) -> usize {
        let mut k = 0;
        while k < ws.len() {
            let w = &ws[k];
            if ends_command(w) {
                break;
            }
            let last = w.ends_with(';');
            if let Some(flag) = flag_name(w) {
                if sysprof_sub.is_some() {
                    self.counts.sysprof_flags += 1;
                } else {
                    self.counts.xtask_flags += 1;
                }
                if let Some(sub) = sysprof_sub {
                    self.named
                        .entry(sub.to_string())
                        .or_default()
                        .insert(flag.clone());
                }
                if std::env::var_os("SYSPROF_DOCS_LIST").is_some() {
                    eprintln!("{at}: {what} {flag}");
                }
                match opts.flags.get(&flag) {
                    None => self.errors.push(format!(
                        "{at}: `{what}` has no flag {flag} (in `{}`)",
                        self.current
                    )),
                    Some(values) if !values.is_empty() => {
                        let value = match w.split_once('=') {
                            Some((_, v)) => Some(v.to_string()),
                            None => ws.get(k + 1).filter(|v| !ends_command(v)).cloned(),
                        };
                        // A placeholder (`N`, `HZ`) or a flag is not a value.
                        if let Some(value) =
                            value.filter(|v| v.starts_with(|c: char| c.is_ascii_lowercase()))
                        {
                            for v in value
                                .trim_end_matches(|c: char| ",.;)`".contains(c))
                                .split(['|', ','])
                            {
                                self.counts.values += 1;
                                if !values.iter().any(|x| x == v) {
                                    self.errors.push(format!(
                                        "{at}: `{what} {flag}` takes one of {values:?}, not {v:?} (in `{}`)",
                                        self.current
                                    ));
                                }
                            }
                        }
                    }
                    Some(_) => {}
                }
            }
            k += 1;
            if last {
                break;
            }
        }
        k
    }

    /// Every command a snippet names. Returns the sysprof subcommand it
    /// names last (for the option lines of a fenced block).
    fn snippet(&mut self, doc: &str, s: &Snippet, block_sub: Option<&str>) -> Option<String> {
        let at = format!("{doc}:{}", s.line);
        let ws = words(&s.text);
        self.current = s.text.trim().to_string();
        let mut last_sub = None;
        // An option line under a `sysprof SUB` line of the same block
        // (`  -F, --frequency HZ   samples per second`).
        if s.fenced && s.text.trim_start().starts_with('-') {
            if let Some(sub) = block_sub {
                let opts = self.subs[sub].clone();
                let lead: Vec<String> = ws
                    .iter()
                    .take_while(|w| w.starts_with('-'))
                    .cloned()
                    .collect();
                let n = lead.len();
                // The option's value placeholder, if any, follows the flags.
                let mut with_value = lead.clone();
                if let Some(v) = ws.get(n) {
                    with_value.push(v.clone());
                }
                self.counts.option_lines += 1;
                self.flags(
                    &with_value,
                    &opts,
                    &format!("sysprof {sub}"),
                    &at,
                    Some(sub),
                );
                return Some(sub.to_string());
            }
        }
        // A span that begins with a subcommand (`record -a`, `show --list`)
        // or is a flag alone (`--window`).
        if !s.fenced {
            if let Some(first) = ws.first() {
                if self.subs.contains_key(first.as_str()) {
                    let opts = self.subs[first.as_str()].clone();
                    let sub = first.clone();
                    self.counts.sysprof_commands += 1;
                    self.flags(&ws[1..], &opts, &format!("sysprof {sub}"), &at, Some(&sub));
                } else if flag_name(first).is_some() {
                    // Each flag of it (`--quick --only compiler,build`); its
                    // value too where one command alone has that flag.
                    for (k, w) in ws.iter().enumerate().take_while(|(_, w)| !ends_command(w)) {
                        let Some(flag) = flag_name(w) else { continue };
                        self.counts.bare_flags += 1;
                        let mut owners: Vec<(String, Options)> = Vec::new();
                        for (sub, o) in &self.subs {
                            if o.flags.contains_key(&flag) {
                                owners.push((format!("sysprof {sub}"), o.clone()));
                            }
                        }
                        for (task, o) in &self.xtask {
                            if o.flags.contains_key(&flag) {
                                owners.push((format!("cargo xtask {task}"), o.clone()));
                            }
                        }
                        if let [(what, opts)] = owners.as_slice() {
                            let sub = what.strip_prefix("sysprof ").map(str::to_string);
                            let end = (k + 2).min(ws.len());
                            self.flags(&ws[k..end], opts, what, &at, sub.as_deref());
                            continue;
                        }
                        let known = !owners.is_empty()
                            || self.top.flags.contains_key(&flag)
                            || FOREIGN_FLAGS.iter().any(|(f, _)| *f == flag);
                        if !known {
                            self.errors.push(format!(
                                "{at}: `{}` names {flag}, which no sysprof subcommand or xtask task has (another program's? add it to FOREIGN_FLAGS)",
                                s.text
                            ));
                        }
                    }
                }
            }
        }
        let mut i = 0;
        while i < ws.len() {
            let w = ws[i].as_str();
            let command_position = i == 0 || PREFIXES.contains(&ws[i - 1].as_str());
            // sysprof, ./target/release/sysprof, /usr/local/bin/sysprof;
            // not the package of `cargo test -p sysprof`.
            // (`sysprof:` begins a line sysprof prints, not a command.)
            let name = w.trim_end_matches(|c: char| ",.;)'`\"".contains(c));
            let program = name == "sysprof" || name.ends_with("/sysprof");
            let package = i > 0 && matches!(ws[i - 1].as_str(), "-p" | "--package" | "--bin");
            if program && !package {
                let Some(next) = ws.get(i + 1) else { break };
                if next.starts_with('-') && !next.starts_with("--") {
                    // A short flag (`sysprof -a`): not checked.
                    i += 1;
                    continue;
                }
                if next.starts_with("--") {
                    self.counts.sysprof_commands += 1;
                    let top = self.top.clone();
                    i += 1 + self.flags(&ws[i + 1..], &top, "sysprof", &at, None);
                    continue;
                }
                let word = bare(next);
                if self.subs.contains_key(word) {
                    self.counts.sysprof_commands += 1;
                    let opts = self.subs[word].clone();
                    last_sub = Some(word.to_string());
                    i += 2 + self.flags(
                        &ws[i + 2..],
                        &opts,
                        &format!("sysprof {word}"),
                        &at,
                        Some(word),
                    );
                    continue;
                }
                if command_position
                    && word.starts_with(|c: char| c.is_ascii_lowercase())
                    && word.chars().all(|c| c.is_ascii_lowercase() || c == '-')
                {
                    self.errors.push(format!(
                        "{at}: `sysprof {word}` is no subcommand (in `{}`)",
                        self.current
                    ));
                }
            } else if w == "cargo" && ws.get(i + 1).is_some_and(|x| x == "xtask") {
                let Some(task) = ws.get(i + 2) else { break };
                let task = task
                    .trim_end_matches(|c: char| ",.:;)'`".contains(c))
                    .to_string();
                self.counts.xtask_commands += 1;
                match self.xtask.get(&task).cloned() {
                    Some(opts) => {
                        i += 3 + self.flags(
                            &ws[i + 3..],
                            &opts,
                            &format!("cargo xtask {task}"),
                            &at,
                            None,
                        );
                        continue;
                    }
                    None if task.starts_with('-') => {}
                    None => self.errors.push(format!(
                        "{at}: `cargo xtask {task}` is no xtask task (in `{}`)",
                        self.current
                    )),
                }
            } else if w == "cargo" && ws.get(i + 1).is_some_and(|x| x == "test") {
                i += 2 + self.cargo_test(&ws[i + 2..], &at);
                continue;
            }
            i += 1;
        }
        last_sub
    }

    /// `cargo test -p PACKAGE --test NAME [FILTER]`: the target exists and
    /// holds a test whose name contains FILTER.
    fn cargo_test(&mut self, ws: &[String], at: &str) -> usize {
        let mut package = None;
        let mut target = None;
        let mut filter = None;
        let mut k = 0;
        while k < ws.len() && !ends_command(&ws[k]) {
            let w = ws[k].trim_end_matches(|c: char| ",.:;)'`".contains(c));
            match w {
                "-p" | "--package" => {
                    package = ws.get(k + 1).cloned();
                    k += 1;
                }
                "--test" => {
                    target = ws.get(k + 1).map(|t| {
                        t.trim_end_matches(|c: char| ",.:;)'`".contains(c))
                            .to_string()
                    });
                    k += 1;
                }
                _ if !w.starts_with('-') && target.is_some() && filter.is_none() => {
                    filter = Some(w.to_string())
                }
                _ => {}
            }
            k += 1;
        }
        let (Some(package), Some(target)) = (package, target) else {
            return k;
        };
        let dir = match package.as_str() {
            "sysprof-tests" => "tests/tests",
            "sysprof" => "userspace/tests",
            _ => return k,
        };
        self.counts.cargo_tests += 1;
        let file = workspace_root().join(dir).join(format!("{target}.rs"));
        match std::fs::read_to_string(&file) {
            Err(_) => self.errors.push(format!(
                "{at}: `cargo test -p {package} --test {target}`: no {dir}/{target}.rs"
            )),
            Ok(src) => {
                if let Some(filter) = filter {
                    let has = src.lines().any(|l| {
                        let l = l.trim_start();
                        l.strip_prefix("fn ")
                            .or_else(|| l.strip_prefix("async fn "))
                            .is_some_and(|rest| {
                                rest.split('(').next().unwrap().contains(filter.as_str())
                            })
                    });
                    if !has {
                        self.errors.push(format!(
                            "{at}: `cargo test -p {package} --test {target} {filter}`: no test in {dir}/{target}.rs has {filter:?} in its name"
                        ));
                    }
                }
            }
        }
        k
    }
}

/// GitHub's anchor for a heading: lower case, punctuation but `-` and `_`
/// dropped, spaces made `-`.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Paths into the tree a snippet names (`tests/workloads/waitchain.c`).
fn tree_paths(text: &str) -> Vec<String> {
    const TOP: &[&str] = &[
        "ebpf/",
        "userspace/",
        "xtask/",
        "tests/",
        "benches/",
        "packaging/",
        "docs/",
        ".ci/",
    ];
    text.split(|c: char| c.is_whitespace() || c == '(' || c == '`' || c == '"' || c == '\'')
        .map(|w| {
            w.trim_start_matches("./")
                .trim_end_matches(|c: char| ",.:;)]".contains(c))
        })
        .filter(|w| TOP.iter().any(|t| w.starts_with(t)))
        .filter(|w| !w.contains(['*', '{', '<', '$']))
        .map(str::to_string)
        .collect()
}

/// The relative links of a line of prose: `[text](target)` and images.
fn links(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end]
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string();
        if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
            out.push(target);
        }
        rest = &after[end..];
    }
    out
}

#[test]
fn docs_name_only_what_exists() {
    let (top, subs) = sysprof_commands();
    let xtask = xtask_commands();
    let mut c = Checker {
        top,
        subs,
        xtask,
        counts: Counts::default(),
        errors: Vec::new(),
        named: BTreeMap::new(),
        current: String::new(),
    };
    let root = workspace_root();
    let docs = docs();
    let parsed: Vec<Parsed> = docs.iter().map(|d| parse(&d.text)).collect();
    let mut headings: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (d, p) in docs.iter().zip(&parsed) {
        headings.insert(d.name.clone(), p.headings.iter().map(|h| slug(h)).collect());
    }
    let mut snippets = 0;
    for (d, p) in docs.iter().zip(&parsed) {
        let mut block_sub: Option<(usize, String)> = None;
        for s in &p.snippets {
            snippets += 1;
            let carried = block_sub
                .as_ref()
                .filter(|(b, _)| s.fenced && *b == s.block)
                .map(|(_, sub)| sub.clone());
            if let Some(sub) = c.snippet(&d.name, s, carried.as_deref()) {
                if s.fenced {
                    block_sub = Some((s.block, sub));
                }
            }
            for path in tree_paths(&s.text) {
                c.counts.paths += 1;
                if !root.join(&path).exists() {
                    c.errors
                        .push(format!("{}:{}: {path} does not exist", d.name, s.line));
                }
            }
        }
        let dir = Path::new(&d.name)
            .parent()
            .unwrap_or(Path::new(""))
            .to_path_buf();
        for (n, line) in &p.prose {
            for target in links(line) {
                c.counts.links += 1;
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p.to_string(), Some(a.to_string())),
                    None => (target.clone(), None),
                };
                let file = if path.is_empty() {
                    PathBuf::from(&d.name)
                } else {
                    dir.join(&path)
                };
                // Normalise `docs/../ARCHITECTURE.md` to `ARCHITECTURE.md`.
                let mut norm = PathBuf::new();
                for part in file.components() {
                    match part {
                        std::path::Component::ParentDir => {
                            norm.pop();
                        }
                        std::path::Component::CurDir => {}
                        other => norm.push(other),
                    }
                }
                if !root.join(&norm).exists() {
                    c.errors.push(format!(
                        "{}:{n}: link {target}: {} does not exist",
                        d.name,
                        norm.display()
                    ));
                    continue;
                }
                if let Some(anchor) = anchor {
                    c.counts.anchors += 1;
                    let name = norm.display().to_string();
                    let known = match headings.get(&name) {
                        Some(h) => h.contains(&anchor),
                        None => std::fs::read_to_string(root.join(&norm))
                            .map(|t| parse(&t).headings.iter().any(|h| slug(h) == anchor))
                            .unwrap_or(false),
                    };
                    if !known {
                        c.errors.push(format!(
                            "{}:{n}: link {target}: {name} has no heading #{anchor}",
                            d.name
                        ));
                    }
                }
            }
        }
    }
    // Every subcommand is documented somewhere.
    for sub in c.subs.keys() {
        let named = docs
            .iter()
            .any(|d| d.text.contains(&format!("sysprof {sub}")));
        if !named {
            c.errors.push(format!("no doc names `sysprof {sub}`"));
        }
    }
    let k = &c.counts;
    eprintln!(
        "docs: {} files, {snippets} code lines and spans; sysprof: {} commands, {} flags (+{} option lines), {} values; \
         cargo xtask: {} commands, {} flags; {} cargo test targets; {} flag spans; {} paths; {} links ({} anchors)",
        docs.len(),
        k.sysprof_commands,
        k.sysprof_flags,
        k.option_lines,
        k.values,
        k.xtask_commands,
        k.xtask_flags,
        k.cargo_tests,
        k.bare_flags,
        k.paths,
        k.links,
        k.anchors
    );
    // What the docs do not name (a short form may be named instead): said, not failed.
    let all_text: String = docs.iter().map(|d| d.text.as_str()).collect();
    for (sub, opts) in &c.subs {
        let named = c.named.get(sub).map_or(0, |n| n.len());
        let unnamed: Vec<&String> = opts
            .flags
            .keys()
            .filter(|f| *f != "--help" && *f != "--version")
            .filter(|f| {
                !all_text.contains(&format!("{f} ")) && !all_text.contains(&format!("{f}`"))
            })
            .collect();
        eprintln!(
            "docs: sysprof {sub}: {} flags, {named} named in a `sysprof {sub}` command{}",
            opts.flags.len(),
            if unnamed.is_empty() {
                String::new()
            } else {
                format!("; no doc names the long form of {unnamed:?}")
            }
        );
    }
    assert!(
        c.errors.is_empty(),
        "the docs name what does not exist:\n{}",
        c.errors.join("\n")
    );
}
