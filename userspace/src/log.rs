//! What the agent and its exporters say on stderr while they run: one
//! escaped line each, the same line at most once a minute. In: lines built
//! from names and paths other users chose. Out: stderr.

use std::time::{Duration, Instant};

/// At most one repeat of the same error line per this long.
const ERROR_REPEAT: Duration = Duration::from_secs(60);

/// One line to stderr, with the same line at most once a minute.
#[derive(Debug, Default)]
pub struct ErrorLog {
    last: std::collections::HashMap<String, (Instant, u64)>,
}

impl ErrorLog {
    /// Say `line` (prefixed "sysprof agent: "), unless it was said less than a minute ago.
    /// Escaped and cut first ([`crate::escape::warning`]): a line may hold
    /// paths and names others chose, and one log line must stay one line.
    pub fn say(&mut self, line: String) {
        // Cut too: one answer or file another user wrote can make a line
        // kilobytes long.
        let line = crate::escape::warning(&line);
        let now = Instant::now();
        // Lines not said for two minutes are forgotten (their suppressed
        // count with them): lines hold names and counts that change, and the
        // map must not grow with the agent's age.
        self.last
            .retain(|_, (at, _)| now.duration_since(*at) < ERROR_REPEAT * 2);
        match self.last.get_mut(&line) {
            Some((at, suppressed)) if now.duration_since(*at) < ERROR_REPEAT => *suppressed += 1,
            Some((at, suppressed)) => {
                let n = std::mem::take(suppressed);
                *at = now;
                if n > 0 {
                    eprintln!("sysprof agent: {line} (and {n} times more in the last minute)");
                } else {
                    eprintln!("sysprof agent: {line}");
                }
            }
            None => {
                eprintln!("sysprof agent: {line}");
                self.last.insert(line, (now, 0));
            }
        }
    }
}
