//! `--metrics ADDR`: the agent's counters in Prometheus's text format.
//!
//! In: an address and a function that renders the current values. Out: a
//! thread answering every HTTP request on that address with the text
//! (`GET /metrics`, or any path). Written here rather than with an HTTP
//! server crate: one fixed response to a read-only scrape needs no
//! routing, no keep-alive and no body parsing; what it does need is
//! bounds (a request head of at most 8 KiB, two seconds to send it, one
//! connection at a time), so a stuck or hostile client costs nothing.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

/// Renders the metrics text.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Listen on `addr` and serve `render()` to every request.
pub fn serve(addr: SocketAddr, render: Render) -> Result<std::thread::JoinHandle<()>, String> {
    let listener = TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr} for --metrics: {e}; choose another address"))?;
    Ok(std::thread::Builder::new()
        .name("sysprof-metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = conn.set_write_timeout(Some(Duration::from_secs(2)));
                // Read the request head (up to the blank line), bounded.
                let mut head = Vec::with_capacity(512);
                let mut buf = [0u8; 1024];
                while head.len() < 8192 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let body = render();
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(response.as_bytes());
            }
        })
        .expect("spawning the metrics thread"))
}

/// One metric: `# HELP`, `# TYPE` and its samples (labels, value).
pub fn metric(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(String, f64)]) {
    out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
    for (labels, v) in samples {
        if labels.is_empty() {
            out.push_str(&format!("{name} {v}\n"));
        } else {
            out.push_str(&format!("{name}{{{labels}}} {v}\n"));
        }
    }
}
