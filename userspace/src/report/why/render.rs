//! The `--why` answer as text or as JSON.
//!
//! In: [`Why`] (the total, the blame table, the longest waits) and
//! [`Threads`] to name the culprits. Out: the text report (a table of
//! where the time went, then the longest waits) or one JSON object.

use super::{Culprit, Threads, Why};

impl Culprit {
    /// "I/O on vda", "running", ...
    pub fn what_text(&self) -> String {
        match &self.device {
            Some(d) => format!("{} on {d}", self.what),
            None => self.what.to_string(),
        }
    }
}

/// The answer as text: the total, where it went (with the functions the
/// running parts ran), and the longest waits.
pub fn render_text(threads: &Threads, id: u32, tids: &[u32], why: &Why, top: usize) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let who = if tids == [id] {
        threads.describe(id)
    } else {
        format!("process {id} ({} threads)", tids.len())
    };
    let _ = writeln!(s, "{who}: {:.3} ms off-CPU in {} waits (those under --off-cpu-threshold are charged from their sums per waker: an estimate)", why.off_cpu_ms, why.waits);
    if why.blame.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "\nwhere it went:\n{:>12}  {:>6}  {:<28}  thread (process, pid/tid)",
        "ms", "share", "what"
    );
    for (c, ms) in why.blame.iter().take(top) {
        let share = 100.0 * ms / why.off_cpu_ms.max(f64::MIN_POSITIVE);
        let _ = writeln!(
            s,
            "{ms:>12.3}  {share:>5.1}%  {:<28}  {}",
            c.what_text(),
            threads.describe(c.tid)
        );
    }
    if why.blame.len() > top {
        let rest: f64 = why.blame[top..].iter().map(|(_, ms)| ms).sum();
        let _ = writeln!(
            s,
            "{rest:>12.3}  {:>5.1}%  ({} more rows)",
            100.0 * rest / why.off_cpu_ms,
            why.blame.len() - top
        );
    }
    let _ = writeln!(
        s,
        "\nlongest waits (start ms, length, reason: where it went):"
    );
    for (start, ms, reason, own) in &why.longest {
        let parts: Vec<String> = own
            .iter()
            .take(4)
            .map(|(c, ms)| {
                format!(
                    "{ms:.3} ms {} of {}",
                    c.what_text(),
                    threads.describe(c.tid)
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "  {start:>10.3}  {ms:>9.3} ms  {reason}: {}",
            parts.join("; ")
        );
    }
    s
}

/// The answer as JSON: `{"tid"|"pid", "off_cpu_ms", "waits", "blame": [...],
/// "longest": [...]}`, the blame summing to `off_cpu_ms`.
pub fn render_json(threads: &Threads, id: u32, tids: &[u32], why: &Why) -> String {
    let culprit = |c: &Culprit, ms: f64| {
        let (pid, comm) = threads
            .identity(c.tid)
            .map(|(p, n)| (Some(p), Some(n)))
            .unwrap_or((None, None));
        serde_json::json!({ "pid": pid, "tid": c.tid, "comm": comm, "what": c.what, "device": c.device, "ms": ms })
    };
    let key = if tids == [id] { "tid" } else { "pid" };
    let v = serde_json::json!({
        key: id,
        "tids": tids,
        "off_cpu_ms": why.off_cpu_ms,
        "waits": why.waits,
        "blame": why.blame.iter().map(|(c, ms)| culprit(c, *ms)).collect::<Vec<_>>(),
        "longest": why.longest.iter().map(|(start, ms, reason, own)| serde_json::json!({
            "start_ms": start, "ms": ms, "reason": reason,
            "blame": own.iter().map(|(c, ms)| culprit(c, *ms)).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    format!("{v}\n")
}
