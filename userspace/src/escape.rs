//! Escaping text that others control before it reaches a terminal or a log.
//!
//! In: any text that may hold a name, path or command line some user chose
//! (a binary's path, a thread's name, a profile's strings). Out: the same
//! text with every control character written as a visible escape, as `ps`
//! and systemd do: `\n`, `\t`, `\r`, `\e` for ESC, `\xNN` for the other C0
//! and C1 controls and DEL, `\u{NNNN}` for the Unicode direction overrides
//! (which reorder what a terminal shows). Printable UTF-8 is kept as is, so
//! a name in any script reads the same. The result never holds a byte below
//! 0x20, so one log line stays one line and no escape sequence reaches the
//! terminal (window titles, cleared screens, forged lines).
//!
//! [`shell_word`] and [`open_hint`] quote a path as one shell word, for the
//! `sysprof view FILE` the summaries end with.
//!
//! A backslash that does not begin one of these escapes (nor `\\`) is
//! written `\\`: a garbage answer's `\o` reads `\\o`, not as if it were an
//! escape. One that does is kept, so that escaping what was escaped changes
//! nothing: names are escaped where they are read and their messages again
//! where they are printed, and a strict `\\` for every backslash doubled
//! them at each pass (`report --format folded` showed `\\e` for ESC). What
//! stays: a name holding the text `\e` reads as one holding ESC would.
//! [`open_hint`]'s command keeps its backslashes: its path is single-quoted
//! for the shell, where a backslash is itself.

use std::borrow::Cow;

/// Whether `c` must not reach a terminal raw.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}')
}

/// `s` with its control characters escaped, and its backslashes that
/// begin no escape; borrowed when there is none.
pub fn escape(s: &str) -> Cow<'_, str> {
    escape_with(s, true)
}

/// The most characters of one warning printed: a file or an answer any
/// user controls can make one kilobytes long (a debuginfod client's error
/// repeated its cause three times over).
pub const WARNING_MAX_CHARS: usize = 400;

/// A warning as printed: escaped, and cut at [`WARNING_MAX_CHARS`] with
/// how much was left out.
pub fn warning(s: &str) -> String {
    let e = escape(s);
    let n = e.chars().count();
    if n <= WARNING_MAX_CHARS {
        return e.into_owned();
    }
    let cut: String = e.chars().take(WARNING_MAX_CHARS).collect();
    format!("{cut}… ({} more characters)", n - WARNING_MAX_CHARS)
}

/// Whether the backslash at the start of `rest` begins an escape this
/// module writes (`\\`, `\n`, `\t`, `\r`, `\e`, `\xNN`, `\u{N...}`), or
/// how many bytes of it do.
fn escape_at(rest: &str) -> Option<usize> {
    let b = rest.as_bytes();
    match b.get(1)? {
        b'\\' | b'n' | b't' | b'r' | b'e' => Some(2),
        b'x' if b.len() >= 4 && b[2].is_ascii_hexdigit() && b[3].is_ascii_hexdigit() => Some(4),
        b'u' if b.get(2) == Some(&b'{') => {
            let digits = b[3..].iter().take_while(|c| c.is_ascii_hexdigit()).count();
            (1..=6).contains(&digits).then_some(())?;
            (b.get(3 + digits) == Some(&b'}')).then_some(4 + digits)
        }
        _ => None,
    }
}

fn escape_with(s: &str, backslashes: bool) -> Cow<'_, str> {
    let lone_backslash = |i: usize| backslashes && escape_at(&s[i..]).is_none();
    if !s
        .char_indices()
        .any(|(i, c)| is_unsafe(c) || (c == '\\' && lone_backslash(i)))
    {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    let mut kept_until = 0;
    for (i, c) in s.char_indices() {
        if i < kept_until {
            out.push(c);
            continue;
        }
        match c {
            '\\' if backslashes => match escape_at(&s[i..]) {
                // An escape already: kept whole (its second backslash too).
                Some(n) => {
                    kept_until = i + n;
                    out.push('\\');
                }
                None => out.push_str("\\\\"),
            },
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\x1b' => out.push_str("\\e"),
            c if (c as u32) < 0x100 && is_unsafe(c) => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if is_unsafe(c) => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A path for display, escaped (and lossy where it is not UTF-8).
pub fn path(p: &std::path::Path) -> String {
    escape(&p.to_string_lossy()).into_owned()
}

/// `s` as one shell word: as is when it is plain, else single-quoted.
pub fn shell_word(s: &str) -> String {
    // A path starting with `-` would read as an option.
    let s = if s.starts_with('-') {
        format!("./{s}")
    } else {
        s.to_string()
    };
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c))
    {
        s
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// What the summaries of `record` and `show` end with: how to open the
/// profile written at `path`, as a command the user can paste.
pub fn open_hint(path: &std::path::Path) -> String {
    format!(
        "; open it: sysprof view {}",
        // Quoted for the shell, a backslash is itself: doubled, the
        // command would name another file.
        escape_with(&shell_word(&path.to_string_lossy()), false)
    )
}

#[cfg(test)]
mod tests {

    /// A long warning is cut and says by how much; a short one is only escaped.
    #[test]
    fn warnings_are_cut_and_escaped() {
        assert_eq!(warning("a\x1bb"), "a\\eb");
        let long = "x".repeat(1000);
        let w = warning(&long);
        assert!(w.starts_with(&"x".repeat(WARNING_MAX_CHARS)));
        assert!(w.ends_with("… (600 more characters)"), "{w}");
    }

    use super::*;

    /// Check that a path becomes one word a shell reads back as the same
    /// path: plain ones as they are, others quoted, a leading `-` not an option.
    #[test]
    fn shell_words_read_back_as_the_path() {
        assert_eq!(shell_word("/tmp/p.json.gz"), "/tmp/p.json.gz");
        assert_eq!(shell_word("my profile's.json"), "'my profile'\\''s.json'");
        assert_eq!(shell_word("-o.json"), "./-o.json");
        assert_eq!(
            open_hint(std::path::Path::new("a b")),
            "; open it: sysprof view 'a b'"
        );
    }

    /// Check that a forged line and terminal escapes come out as visible
    /// text on one line, with printable UTF-8 untouched.
    #[test]
    fn control_characters_become_visible_escapes() {
        let s = "x\nsysprof agent: forged\n\x1b]0;PWNED\x07 \t\r\x7f\u{9b}\u{202e}é中";
        let e = escape(s);
        assert_eq!(
            e,
            "x\\nsysprof agent: forged\\n\\e]0;PWNED\\x07 \\t\\r\\x7f\\x9b\\u{202e}é中"
        );
        assert!(e.bytes().all(|b| b >= 0x20 && b != 0x7f), "{e}");
        assert!(matches!(escape("plain name é"), Cow::Borrowed(_)));
        // A backslash that begins no escape cannot pass for one; one that
        // does is kept, so escaping twice is escaping once.
        assert_eq!(
            escape("a\\o \\x1 \\u{zz} \\\x1b"),
            "a\\\\o \\\\x1 \\\\u{zz} \\\\\\e"
        );
        for s in [
            s,
            "a\\o\\",
            "\\\\\\",
            "\\x1b\\u{202e}\\n",
            "\\u{1234567}\\",
            "é\\é\x07",
        ] {
            let once = escape(s).into_owned();
            assert_eq!(escape(&once), once, "escaping {s:?} twice");
            assert!(once.bytes().all(|b| b >= 0x20 && b != 0x7f), "{once}");
        }
        assert_eq!(
            open_hint(std::path::Path::new("a\\b")),
            "; open it: sysprof view 'a\\b'"
        );
    }
}
