//! What the agent and its exporters say on stderr while they run: one
//! escaped line each, the same line at most once a minute. In: lines built
//! from names and paths other users chose. Out: stderr.

use std::time::{Duration, Instant};

/// At most one repeat of the same error line per this long.
const ERROR_REPEAT: Duration = Duration::from_secs(60);

/// One line to stderr, with the same line at most once a minute.
#[derive(Debug, Default)]
pub struct ErrorLog {
    /// By the line's shape ([`shape`]): when it was last said, and how
    /// many times it came since.
    last: std::collections::HashMap<String, (Instant, u64)>,
}

/// A line with its numbers taken out: what makes two lines the same
/// warning. A window's warning says its own counts, pids and sizes ("12
/// perf map(s) … ignored (e.g. /tmp/perf-4711.map)"), so its exact text
/// differs every window and, keyed by it, was said every window.
fn shape(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_number = false;
    for c in line.chars() {
        if c.is_ascii_digit() {
            if !in_number {
                out.push('#');
            }
            in_number = true;
        } else {
            in_number = false;
            out.push(c);
        }
    }
    out
}

impl ErrorLog {
    /// Say `line` (prefixed "sysprof agent: "), unless a line of its shape
    /// (the same but for its numbers) was said less than a minute ago.
    /// Escaped and cut first ([`crate::escape::warning`]): a line may hold
    /// paths and names others chose, and one log line must stay one line.
    pub fn say(&mut self, line: String) {
        if let Some(said) = self.admit(line, Instant::now()) {
            eprintln!("sysprof agent: {said}");
        }
    }

    /// What to say of `line` at `now`, if anything.
    fn admit(&mut self, line: String, now: Instant) -> Option<String> {
        // Cut too: one answer or file another user wrote can make a line
        // kilobytes long.
        let line = crate::escape::warning(&line);
        // Lines not said for two minutes are forgotten (their suppressed
        // count with them): the map must not grow with the agent's age.
        self.last
            .retain(|_, (at, _)| now.duration_since(*at) < ERROR_REPEAT * 2);
        match self.last.get_mut(&shape(&line)) {
            Some((at, suppressed)) if now.duration_since(*at) < ERROR_REPEAT => {
                *suppressed += 1;
                None
            }
            Some((at, suppressed)) => {
                let n = std::mem::take(suppressed);
                *at = now;
                Some(if n > 0 {
                    format!("{line} (and {n} times more in the last minute)")
                } else {
                    line
                })
            }
            None => {
                self.last.insert(shape(&line), (now, 0));
                Some(line)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a warning whose counts and paths change from window to
    /// window is said once a minute, with how many times it came between;
    /// that another warning is said at once; and that one not heard of for
    /// two minutes is said afresh.
    #[test]
    fn a_warning_is_said_once_a_minute_whatever_its_numbers() {
        let mut log = ErrorLog::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let window = |n: u32| format!("{n} perf map(s) ignored (e.g. /tmp/perf-{}.map)", 4000 + n);
        assert_eq!(
            log.admit(window(12), at(0)).as_deref(),
            Some("12 perf map(s) ignored (e.g. /tmp/perf-4012.map)")
        );
        for s in 1..60 {
            assert_eq!(log.admit(window(s as u32), at(s)), None, "second {s}");
        }
        assert!(log.admit("the store is behind".into(), at(30)).is_some());
        assert_eq!(
            log.admit(window(7), at(61)).as_deref(),
            Some("7 perf map(s) ignored (e.g. /tmp/perf-4007.map) (and 59 times more in the last minute)")
        );
        assert_eq!(log.admit(window(8), at(62)), None);
        assert_eq!(
            log.admit(window(9), at(62 + 121)).as_deref(),
            Some("9 perf map(s) ignored (e.g. /tmp/perf-4009.map)")
        );
        assert_eq!(shape("pid 12 of 3.5 s"), "pid # of #.# s");
    }
}
