//! A Go goroutine's pprof labels as the name of the frame that carries
//! them at the root of its stacks, and back: the runtimes layer names the
//! frame (`runtimes/go`), the exporters split it into their samples'
//! labels (pprof's, OTLP's attributes) instead of a frame.
//!
//! The goroutine's id likewise names a frame of its own under the labels'
//! (`[goroutine 17]`), which the outputs take out of the stack and give to
//! what the stack is of.
//!
//! In: labels as (key, value) pairs, or a frame's name. Out: the name
//! `[labels: handler="alpha" user="u1"]` (keys as given: the reader sorts
//! them; a key that is not a plain word quoted; values always quoted, `"`
//! and `\` escaped, control characters as `\u{…}`: no name carries a
//! terminal's escape), or the pairs it holds.

/// The name of the frame carrying `labels`.
pub fn labels_name(labels: &[(String, String)]) -> String {
    let mut name = String::from("[labels:");
    for (k, v) in labels {
        name.push(' ');
        push_quoted_key(&mut name, k);
        name.push('=');
        push_quoted(&mut name, v);
    }
    name.push(']');
    name
}

/// A key as it is where it is a plain word (letters, digits, `_-./:`),
/// quoted otherwise.
fn push_quoted_key(out: &mut String, key: &str) {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./:".contains(c));
    if plain {
        out.push_str(key);
    } else {
        push_quoted(out, key);
    }
}

/// `"…"` with `"` and `\` escaped by a backslash, and control characters
/// as `\u{…}`: the name can be split back into its labels ([`parse_labels`]).
fn push_quoted(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The labels a [`labels_name`] name holds, in its order; None for a
/// name that is no such frame's.
pub fn parse_labels(name: &str) -> Option<Vec<(String, String)>> {
    let mut rest = name.strip_prefix("[labels:")?.strip_suffix(']')?;
    let mut out = Vec::new();
    while let Some(r) = rest.strip_prefix(' ') {
        let (key, r) = parse_word(r, '=')?;
        let (value, r) = parse_word(r.strip_prefix('=')?, ' ')?;
        out.push((key, value));
        rest = r;
    }
    rest.is_empty().then_some(out)
}

/// The name of the frame carrying goroutine `id`.
pub fn goroutine_name(id: u64) -> String {
    format!("[goroutine {id}]")
}

/// The goroutine id a [`goroutine_name`] name holds; None for a name that
/// is no such frame's.
pub fn parse_goroutine(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("[goroutine ")?.strip_suffix(']')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The goroutine id a frame carries: Some for a [`FrameKind::Goroutine`]
/// frame whose name holds one.
///
/// [`FrameKind::Goroutine`]: crate::model::recording::FrameKind::Goroutine
pub fn goroutine_of_frame(frame: &crate::model::recording::FrameRecord) -> Option<u64> {
    if frame.kind != crate::model::recording::FrameKind::Goroutine {
        return None;
    }
    parse_goroutine(&frame.symbols.funcs.first()?.name)
}

/// The goroutine of the stack at `node` of `rec` (its frames from the leaf
/// to the root), if a frame of it says one.
pub fn goroutine_of_stack(rec: &crate::model::recording::Recording, node: u32) -> Option<u64> {
    let mut n = node;
    while n != crate::model::stack_tree::NO_PARENT {
        let f = &rec.frames[rec.stacks.key(n) as usize];
        if f.kind == crate::model::recording::FrameKind::Goroutine {
            return goroutine_of_frame(f);
        }
        n = rec.stacks.parent(n);
    }
    None
}

/// One key or value at the start of `s`: quoted, or plain up to `end`.
fn parse_word(s: &str, end: char) -> Option<(String, &str)> {
    let Some(quoted) = s.strip_prefix('"') else {
        let at = s.find(end).unwrap_or(s.len());
        return (at > 0).then(|| (s[..at].to_string(), &s[at..]));
    };
    let mut word = String::new();
    let mut chars = quoted.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((word, &quoted[i + 1..])),
            '\\' => match chars.next()?.1 {
                'u' => {
                    let open = chars.next()?;
                    if open.1 != '{' {
                        return None;
                    }
                    let from = open.0 + 1;
                    let close = quoted[from..].find('}')? + from;
                    word.push(char::from_u32(
                        u32::from_str_radix(&quoted[from..close], 16).ok()?,
                    )?);
                    while chars.next()?.0 < close {}
                }
                c => word.push(c),
            },
            c => word.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_goroutine_name_gives_back_its_id() {
        assert_eq!(parse_goroutine(&goroutine_name(17)), Some(17));
        assert_eq!(
            parse_goroutine(&goroutine_name((1 << 48) - 1)),
            Some((1 << 48) - 1)
        );
        for not in [
            "[goroutine ]",
            "[goroutine -1]",
            "[goroutine 1 ]",
            "goroutine 1",
            "[labels: k=\"v\"]",
        ] {
            assert_eq!(parse_goroutine(not), None, "{not}");
        }
    }

    #[test]
    fn a_labels_name_splits_back_into_its_labels() {
        let labels = vec![
            ("handler".to_string(), "alpha".to_string()),
            (
                "odd key=".to_string(),
                "a \"quoted\" \\ value] x=y".to_string(),
            ),
            ("path".to_string(), "/api/v1".to_string()),
            ("ctl".to_string(), "tab\there\u{1b}[31m".to_string()),
            ("empty".to_string(), String::new()),
        ];
        let name = labels_name(&labels);
        assert!(
            name.starts_with("[labels: handler=\"alpha\" \"odd key=\"="),
            "{name}"
        );
        assert!(!name.chars().any(char::is_control), "{name}");
        assert_eq!(parse_labels(&name), Some(labels));
        assert_eq!(parse_labels(&labels_name(&[])), Some(vec![]));
        for not in [
            "[labels: k]",
            "[labels: k=\"v]",
            "[labels:x=\"v\"]",
            "handler=\"a\"",
            "[labels: =\"v\"]",
            "[labels: k=\"\\u{110000}\"]",
        ] {
            assert_eq!(parse_labels(not), None, "{not}");
        }
    }
}
