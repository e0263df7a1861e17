//! `--metrics ADDR`: the agent's counters in Prometheus's text format.
//!
//! In: an address and a function that renders the current values. Out: a
//! thread of its own (its own event loop, so a busy agent loop never delays
//! a scrape) answering every HTTP request on that address with the text
//! (`GET /metrics`, or any path), through hyper's HTTP/1 server.
//!
//! A hostile local client must cost a scrape nothing, so every connection
//! is bounded in time and memory, and the connections together are bounded
//! in number:
//! - each is served on its own task: a stuck client holds up only itself;
//! - the request head must arrive whole within [`HEAD_DEADLINE`] of the
//!   connection's start (a deadline for the request, not a timeout per
//!   read: a client sending a byte a second is cut at the deadline), and
//!   the whole connection ends at [`CONNECTION_DEADLINE`] whatever it does
//!   (one that does not read its answer);
//! - one request per connection (no keep-alive: a scraper reconnects);
//! - the head is at most [`MAX_HEAD_BYTES`] (hyper's smallest read buffer);
//! - at most [`MAX_CONNECTIONS`] at once: the next one ends the oldest. A
//!   real scrape is answered within milliseconds of connecting, so the
//!   oldest is always a client that sent nothing useful, and a flood of new
//!   connections cannot lock scrapes out the way refusing new ones would.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;

use super::ExportError;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::task::AbortHandle;

/// Renders the metrics text.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Time for a client to send its whole request head, from connecting.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(2);

/// Time a connection may last, whatever it does.
pub const CONNECTION_DEADLINE: Duration = Duration::from_secs(5);

/// Most connections served at once; the next ends the oldest.
pub const MAX_CONNECTIONS: usize = 256;

/// Most bytes of a request head (hyper's minimum buffer): a longer one is
/// answered 431 and the connection closed.
pub const MAX_HEAD_BYTES: usize = 8192;

/// Listen on `addr` and serve `render()` to every request, from a thread of
/// its own; returns the address bound (the port, when `addr`'s is 0).
pub fn serve(addr: SocketAddr, render: Render) -> Result<SocketAddr, ExportError> {
    let cannot = |source: std::io::Error| ExportError::Listen { addr, source };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ExportError::MetricsRuntime)?;
    // Bound here, not in the thread: a taken address is an error at start.
    let listener = {
        let _context = runtime.enter();
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()
        } else {
            tokio::net::TcpSocket::new_v6()
        }
        .map_err(cannot)?;
        socket.set_reuseaddr(true).map_err(cannot)?;
        socket.bind(addr).map_err(cannot)?;
        socket.listen(1024).map_err(cannot)?
    };
    let bound = listener.local_addr().map_err(cannot)?;
    std::thread::Builder::new()
        .name("sysprof-metrics".into())
        .spawn(move || runtime.block_on(accept_loop(listener, render)))
        .map_err(ExportError::MetricsThread)?;
    Ok(bound)
}

/// Accept forever, each connection on its own task, at most
/// [`MAX_CONNECTIONS`] alive (oldest ended first).
async fn accept_loop(listener: tokio::net::TcpListener, render: Render) {
    // Oldest first. Finished tasks are pruned when the cap is reached, so
    // the queue never holds more than the cap.
    let mut alive: VecDeque<AbortHandle> = VecDeque::with_capacity(MAX_CONNECTIONS);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // What accept fails with (a connection reset before it was
            // taken, no file descriptors left) passes; serving goes on.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if alive.len() >= MAX_CONNECTIONS {
            alive.retain(|task| !task.is_finished());
            if alive.len() >= MAX_CONNECTIONS {
                // Dropping the task's future closes its socket.
                alive.pop_front().expect("at the cap, so not empty").abort();
            }
        }
        let render = render.clone();
        alive.push_back(tokio::spawn(serve_connection(stream, render)).abort_handle());
    }
}

/// Answer one request on `stream`, within the deadlines.
async fn serve_connection(stream: tokio::net::TcpStream, render: Render) {
    let service = service_fn(move |_: Request<Incoming>| {
        let body = render();
        let mut response = Response::new(Full::new(Bytes::from(body)));
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        );
        async move { Ok::<_, Infallible>(response) }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_DEADLINE)
        .keep_alive(false)
        .max_buf_size(MAX_HEAD_BYTES)
        .serve_connection(TokioIo::new(stream), service);
    // Errors (a client gone, a bad or late head) are the client's affair.
    let _ = tokio::time::timeout(CONNECTION_DEADLINE, connection).await;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Instant;

    fn server() -> SocketAddr {
        serve(
            "127.0.0.1:0".parse().unwrap(),
            Arc::new(|| "up 1\n".to_string()),
        )
        .unwrap()
    }

    /// One scrape on a new connection: (status line, body), and how long it took.
    fn scrape(addr: SocketAddr) -> (String, String, Duration) {
        let t = Instant::now();
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        (
            head.lines().next().unwrap_or("").to_string(),
            body.to_string(),
            t.elapsed(),
        )
    }

    /// How long until the server closes `s` (read returns 0 or an error).
    fn time_to_close(mut s: TcpStream, limit: Duration) -> Duration {
        let t = Instant::now();
        s.set_read_timeout(Some(limit)).unwrap();
        let mut buf = [0u8; 1024];
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return t.elapsed(),
                Ok(_) => {}
            }
        }
    }

    /// Check that scrapes are answered at once while 300 idle connections
    /// (more than the cap) are open, and that the oldest idle ones are the
    /// ones ended to make room.
    #[test]
    fn idle_connections_do_not_delay_scrapes() {
        let addr = server();
        let idle: Vec<TcpStream> = (0..MAX_CONNECTIONS + 44)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        for _ in 0..5 {
            let (status, body, took) = scrape(addr);
            assert_eq!(status, "HTTP/1.1 200 OK");
            assert_eq!(body, "up 1\n");
            assert!(took < Duration::from_secs(1), "a scrape took {took:?}");
        }
        // The first connection was ended for a newer one, long before its deadline.
        let first = idle.into_iter().next().unwrap();
        let closed = time_to_close(first, Duration::from_secs(10));
        assert!(
            closed < HEAD_DEADLINE / 2,
            "the oldest idle connection ended after {closed:?}"
        );
    }

    /// Check that a client sending its head one byte every 300 ms is cut at
    /// the head deadline (not kept alive by each byte) and that scrapes go
    /// on meanwhile.
    #[test]
    fn a_slow_head_is_cut_at_the_deadline() {
        let addr = server();
        let mut slow = TcpStream::connect(addr).unwrap();
        let reader = slow.try_clone().unwrap();
        let closer = std::thread::spawn(move || time_to_close(reader, Duration::from_secs(20)));
        let t = Instant::now();
        for b in b"GET /metrics HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            .iter()
            .cycle()
            .take(30)
        {
            if slow.write_all(&[*b]).is_err() || closer.is_finished() {
                break;
            }
            let (status, _, took) = scrape(addr);
            assert_eq!(status, "HTTP/1.1 200 OK");
            assert!(took < Duration::from_secs(1), "a scrape took {took:?}");
            std::thread::sleep(Duration::from_millis(300));
        }
        let closed = closer.join().unwrap();
        assert!(
            closed < HEAD_DEADLINE + Duration::from_millis(700),
            "the slow client was cut after {closed:?}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "bytes kept the slow client alive for {:?}",
            t.elapsed()
        );
    }

    /// Check that an HTTP/1.0 request without a Host header (as a shell
    /// one-liner sends) gets the metrics and the connection is closed after.
    #[test]
    fn http_1_0_is_answered() {
        let addr = server();
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        assert!(
            text.starts_with("HTTP/1.0 200 OK\r\n") && text.ends_with("\r\n\r\nup 1\n"),
            "{text:?}"
        );
    }

    /// Check that a head longer than the cap gets no metrics and is closed.
    #[test]
    fn an_oversized_head_is_refused() {
        let addr = server();
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut head = b"GET /metrics HTTP/1.1\r\nX-Big: ".to_vec();
        head.resize(4 * MAX_HEAD_BYTES, b'a');
        // The server may close before taking it all.
        let _ = s.write_all(&head);
        let mut text = Vec::new();
        let _ = s.read_to_end(&mut text);
        let text = String::from_utf8_lossy(&text);
        assert!(
            !text.contains("up 1"),
            "an oversized head was answered: {text}"
        );
        let (status, _, _) = scrape(addr);
        assert_eq!(status, "HTTP/1.1 200 OK");
    }
}
