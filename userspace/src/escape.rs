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
//! Backslashes are kept as they are: the aim is a safe display, not a
//! reversible encoding (`ps` does the same).

use std::borrow::Cow;

/// Whether `c` must not reach a terminal raw.
fn is_unsafe(c: char) -> bool {
    c.is_control() || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}')
}

/// `s` with its control characters escaped; borrowed when there is none.
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\x1b' => out.push_str("\\e"),
            c if (c as u32) < 0x100 && is_unsafe(c) => out.push_str(&format!("\\x{:02x}", c as u32)),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a forged line and terminal escapes come out as visible
    /// text on one line, with printable UTF-8 untouched.
    #[test]
    fn control_characters_become_visible_escapes() {
        let s = "x\nsysprof agent: forged\n\x1b]0;PWNED\x07 \t\r\x7f\u{9b}\u{202e}é中";
        let e = escape(s);
        assert_eq!(e, "x\\nsysprof agent: forged\\n\\e]0;PWNED\\x07 \\t\\r\\x7f\\x9b\\u{202e}é中");
        assert!(e.bytes().all(|b| b >= 0x20 && b != 0x7f), "{e}");
        assert!(matches!(escape("plain name é"), Cow::Borrowed(_)));
    }
}
