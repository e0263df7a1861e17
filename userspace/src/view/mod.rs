//! `sysprof view`: serve one profile file to the Firefox Profiler.
//!
//! In: the path of a profile (`.json` or `.json.gz`), read once at start;
//! the environment, to tell an SSH session and a sudo invocation. Out: on
//! stdout, the `https://profiler.firefox.com/from-url/…/` link (and, over
//! SSH, the `ssh -L` command that brings the port to the user's machine);
//! an HTTP server on 127.0.0.1 answering exactly one path, `/TOKEN/NAME`,
//! with the file's bytes until SIGINT or SIGTERM; optionally a browser
//! started at the link, as the user who ran sudo.
//!
//! Invariants: nothing listens beyond loopback; a connection is answered
//! only when the kernel says (sock_diag, one lookup per connection) it
//! belongs to us or to the user who ran sudo, because the URL itself is no
//! secret from other local users once a browser has it on its command
//! line; and the path holds 128
//! random bits besides: every other path is a 404. The bytes go out as
//! they are on disk, without `Content-Encoding`: the profiler recognises
//! gzip by its magic and inflates it itself. Starting the browser, as
//! the user who ran sudo, is in `browser.rs`.

use std::convert::Infallible;
use std::ffi::OsStr;
use std::io::Read;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use tokio::signal::unix::{signal, SignalKind};

use crate::cli::ViewArgs;
use crate::error::RecordError;

mod browser;
use browser::{open_browser, Invoker};

/// The Firefox Profiler's page that fetches a profile from a URL.
const PROFILER_FROM_URL: &str = "https://profiler.firefox.com/from-url/";

/// Everything but RFC 3986's unreserved characters (as JavaScript's
/// `encodeURIComponent`, which also spares `!*'()`): the serving URL must
/// travel as a single path segment of the profiler's URL.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The methods the served path answers.
const ALLOWED_METHODS: &str = "GET, HEAD, OPTIONS";

/// Serve `args.path` until Ctrl-C; returns the exit status.
pub fn run(args: ViewArgs) -> Result<i32, RecordError> {
    serve(&args.path, !args.no_open, args.port)
}

/// Serve `path` on 127.0.0.1:`port` (0: any free port) under a random
/// token, print the Firefox Profiler link, open it in a browser if `open`;
/// returns 0 once SIGINT or SIGTERM arrives. Builds its own event loop, so
/// it must be called outside any tokio runtime.
pub fn serve(path: &Path, open: bool, port: u16) -> Result<i32, RecordError> {
    let served = Arc::new(Served::read(path, &token()?)?);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RecordError::EventLoop)?;
    runtime.block_on(serve_until_signal(path, served, open, port))
}

/// The one file served and where.
struct Served {
    /// `/TOKEN/NAME`, the only path answered.
    route: String,
    /// The file's bytes.
    body: Bytes,
    content_type: &'static str,
}

impl Served {
    /// Read the profile at `path` to serve it under `token`.
    fn read(path: &Path, token: &str) -> Result<Served, RecordError> {
        let unusable = |why: String| RecordError::Unservable {
            path: path.to_path_buf(),
            why,
        };
        // Not a FIFO or a device swapped in after a check: opened as what it must be.
        let mut file =
            crate::binaries::open_regular(&path.to_string_lossy(), true).map_err(|e| {
                unusable(
                    e.io_error()
                        .map_or_else(|| e.to_string(), ToString::to_string),
                )
            })?;
        let mut body = Vec::new();
        file.read_to_end(&mut body)
            .map_err(|e| unusable(e.to_string()))?;
        let name = path
            .file_name()
            .map(OsStr::to_string_lossy)
            .unwrap_or_default();
        let content_type = if name.ends_with(".gz") {
            "application/gzip"
        } else {
            "application/json"
        };
        Ok(Served {
            route: route(token, &name),
            body: body.into(),
            content_type,
        })
    }
}

/// 128 random bits from the kernel's generator, in hex.
fn token() -> Result<String, RecordError> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(RecordError::Random)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// `/TOKEN/NAME`, NAME being the file's name with anything but
/// `[A-Za-z0-9._-]` made `_`: a path that needs no escaping matches byte
/// for byte however a client encodes URLs.
fn route(token: &str, file_name: &str) -> String {
    let name: String = file_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("/{token}/{name}")
}

/// The Firefox Profiler link that loads the profile at `url`.
fn profiler_link(url: &str) -> String {
    format!(
        "{PROFILER_FROM_URL}{}/",
        utf8_percent_encode(url, COMPONENT)
    )
}

/// The answer to `method path`: the file at its route, 404 anywhere else.
/// Every answer allows any origin: the profiler's page fetches from
/// profiler.firefox.com, and the token, not the origin, is the secret.
fn respond(served: &Served, method: &Method, path: &str) -> Response<Full<Bytes>> {
    let (status, body) = if path != served.route {
        (StatusCode::NOT_FOUND, Bytes::from_static(b"not found\n"))
    } else {
        match *method {
            Method::GET => (StatusCode::OK, served.body.clone()),
            Method::HEAD => (StatusCode::OK, Bytes::new()),
            Method::OPTIONS => (StatusCode::NO_CONTENT, Bytes::new()),
            _ => (StatusCode::METHOD_NOT_ALLOWED, Bytes::new()),
        }
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    match status {
        StatusCode::OK => {
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(served.content_type),
            );
            // Set by hand so that HEAD, which sends no body, tells the length too.
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(served.body.len()));
        }
        StatusCode::NO_CONTENT => {
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static(ALLOWED_METHODS),
            );
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                HeaderValue::from_static("*"),
            );
            headers.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static("86400"),
            );
        }
        StatusCode::METHOD_NOT_ALLOWED => {
            headers.insert(header::ALLOW, HeaderValue::from_static(ALLOWED_METHODS));
        }
        _ => {}
    }
    response
}

/// Listen, print the link (and the SSH hint), start the browser, then
/// answer connections, each on its own task, until SIGINT or SIGTERM.
async fn serve_until_signal(
    path: &Path,
    served: Arc<Served>,
    open: bool,
    port: u16,
) -> Result<i32, RecordError> {
    // Before the link is printed: whoever reads it may stop us right away.
    let watch = |kind| signal(kind).map_err(RecordError::Signals);
    let (mut sigint, mut sigterm) = (
        watch(SignalKind::interrupt())?,
        watch(SignalKind::terminate())?,
    );
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))
        .await
        .map_err(|source| RecordError::Listen {
            addr: format!("127.0.0.1:{port}"),
            source,
            hint: "choose another port with --port, or leave it out",
        })?;
    let ours = listener
        .local_addr()
        .map_err(|e| RecordError::Internal(format!("cannot tell the port served: {e}")))?;
    let port = ours.port();

    let link = profiler_link(&format!("http://127.0.0.1:{port}{}", served.route));
    println!(
        "serving {} ({} bytes) on 127.0.0.1:{port} until Ctrl-C; open it in the Firefox Profiler:",
        crate::escape::path(path),
        served.body.len()
    );
    println!("{link}");
    // Chrome (142 on) asks before a public page may fetch from loopback,
    // and until the user allows it the load just fails; Firefox does not ask.
    println!("in Chrome: when profiler.firefox.com asks to access other apps and services on this device, allow it, or the profile cannot load");
    let user = env_var("SUDO_USER").or_else(|| env_var("USER"));
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let connection = session_var("SSH_CONNECTION");
    let client = session_var("SSH_CLIENT");
    if let Some(tunnel) = ssh_tunnel(
        connection.as_deref(),
        client.as_deref(),
        user.as_deref(),
        hostname.trim(),
        port,
    ) {
        println!("over SSH: run `{tunnel}` on your own machine, then open the link there");
    }
    if open {
        open_browser(&link);
    }
    // SAFETY: geteuid cannot fail.
    let mut allowed_uids = vec![unsafe { libc::geteuid() }];
    allowed_uids.extend(Invoker::from_sudo().map(|i| i.uid));

    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                // Another user's connection is reset at once, unanswered: a
                // flood of them costs one kernel lookup each and leaves no
                // TIME_WAIT behind (a closed one would hold its port pair
                // for a minute, tens of thousands of them in a flood).
                Ok((stream, peer)) if !allowed_uids.contains(&peer_uid(peer, ours).unwrap_or(u32::MAX)) => {
                    let _ = stream.set_zero_linger();
                }
                Ok((stream, _)) => {
                    let served = Arc::clone(&served);
                    tokio::spawn(async move {
                        let service = service_fn(move |request: Request<Incoming>| {
                            let response = respond(&served, request.method(), request.uri().path());
                            async move { Ok::<_, Infallible>(response) }
                        });
                        // The timer gives hyper's default limit on reading
                        // request headers, so silent connections end. A
                        // client that goes away mid-answer is its own affair.
                        let _ = http1::Builder::new()
                            .timer(TokioTimer::new())
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
                // What accept fails with (a connection reset before it was
                // taken, no file descriptors left) passes; serving goes on.
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            },
            _ = sigint.recv() => break,
            _ = sigterm.recv() => break,
        }
    }
    Ok(0)
}

/// The owner of the loopback connection whose client end is `peer` and
/// whose server end is `ours`: the uid the kernel recorded for the client's
/// socket, asked of sock_diag (one lookup, however many sockets the machine
/// has); from `/proc/net/tcp` only on a kernel that cannot answer that
/// (without `tcp_diag`). None when it cannot be told.
fn peer_uid(peer: std::net::SocketAddr, ours: std::net::SocketAddr) -> Option<u32> {
    match crate::sock_diag::tcp_socket_uid(peer, ours) {
        Ok(uid) => uid,
        Err(_) => match (peer, ours) {
            (std::net::SocketAddr::V4(peer), std::net::SocketAddr::V4(ours))
                if *ours.ip() == Ipv4Addr::LOCALHOST =>
            {
                let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
                peer_uid_in(&table, peer, ours.port())
            }
            _ => None,
        },
    }
}

/// [`peer_uid`] over the text of a `/proc/net/tcp`: addresses are the
/// address's bytes as a native-endian hex word, ports big-endian hex.
fn peer_uid_in(table: &str, peer: std::net::SocketAddrV4, server_port: u16) -> Option<u32> {
    let hex =
        |ip: Ipv4Addr, port: u16| format!("{:08X}:{port:04X}", u32::from_ne_bytes(ip.octets()));
    let (local, remote) = (
        hex(*peer.ip(), peer.port()),
        hex(Ipv4Addr::LOCALHOST, server_port),
    );
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(1) == Some(&local.as_str()) && fields.get(2) == Some(&remote.as_str()))
            .then(|| fields.get(7)?.parse().ok())?
    })
}

/// A non-empty environment variable.
pub(crate) fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// `$name` of the login session: ours, or under sudo, which drops the
/// `SSH_*` variables, the one sudo itself (our parent) was started with.
fn session_var(name: &str) -> Option<String> {
    env_var(name).or_else(|| {
        env_var("SUDO_USER")?;
        let environ = std::fs::read(format!(
            "/proc/{}/environ",
            std::os::unix::process::parent_id()
        ))
        .ok()?;
        environ_var(&environ, name)
    })
}

/// `name`'s non-empty value in a `/proc/PID/environ` (NUL-separated `NAME=value`).
fn environ_var(environ: &[u8], name: &str) -> Option<String> {
    environ
        .split(|&b| b == 0)
        .find_map(|entry| entry.strip_prefix(name.as_bytes())?.strip_prefix(b"="))
        .filter(|value| !value.is_empty())
        .map(|value| String::from_utf8_lossy(value).into_owned())
}

/// The command that forwards `port` of the user's own machine to this
/// machine's loopback, when the session came over SSH: the host is the
/// address the SSH client connected to (`$SSH_CONNECTION` is "client port
/// server port"), else this machine's name (`$SSH_CLIENT` has no server).
fn ssh_tunnel(
    connection: Option<&str>,
    client: Option<&str>,
    user: Option<&str>,
    hostname: &str,
    port: u16,
) -> Option<String> {
    let host = match connection.and_then(|c| c.split_whitespace().nth(2)) {
        Some(server) => server,
        None if connection.is_some() || client.is_some() => hostname,
        None => return None,
    };
    let login = user.map(|u| format!("{u}@")).unwrap_or_default();
    Some(format!("ssh -L {port}:127.0.0.1:{port} {login}{host}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a connection's owner is read from the row whose local end
    /// is the client and whose remote end is our port, not from the
    /// server's own row of the same connection.
    #[test]
    fn the_connecting_users_uid_comes_from_its_own_row() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1\n\
   1: 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 222 1\n\
   2: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 333 1\n";
        let peer = std::net::SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0x9C40);
        assert_eq!(peer_uid_in(table, peer, 0x1F90), Some(1000));
        assert_eq!(
            peer_uid_in(table, peer, 0x1F91),
            None,
            "another server port"
        );
        assert_eq!(
            peer_uid_in(
                table,
                std::net::SocketAddrV4::new(Ipv4Addr::LOCALHOST, 1),
                0x1F90
            ),
            None
        );
    }

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    fn served() -> Served {
        Served {
            route: route(TOKEN, "profile.json.gz"),
            body: Bytes::from_static(b"\x1f\x8b profile"),
            content_type: "application/gzip",
        }
    }

    /// Check that the serving URL is encoded as one component, as
    /// `encodeURIComponent` would: `:` and `/` escaped, unreserved kept.
    #[test]
    fn link_encodes_the_url_as_one_component() {
        let link = profiler_link(&format!("http://127.0.0.1:8000/{TOKEN}/a-b_c.json.gz"));
        assert_eq!(
            link,
            format!("https://profiler.firefox.com/from-url/http%3A%2F%2F127.0.0.1%3A8000%2F{TOKEN}%2Fa-b_c.json.gz/")
        );
        assert_eq!(
            profiler_link("a b~?&=#"),
            "https://profiler.firefox.com/from-url/a%20b~%3F%26%3D%23/"
        );
    }

    /// Check that the route keeps the file's name when safe and replaces
    /// what a client could encode differently.
    #[test]
    fn route_needs_no_escaping() {
        assert_eq!(
            route(TOKEN, "prof-1_a.json.gz"),
            format!("/{TOKEN}/prof-1_a.json.gz")
        );
        assert_eq!(
            route(TOKEN, "my prof%20é.json"),
            format!("/{TOKEN}/my_prof_20_.json")
        );
    }

    /// Check that only the exact route is served, with CORS and the file's bytes.
    #[test]
    fn only_the_route_is_served() {
        let served = served();
        let ok = respond(&served, &Method::GET, &served.route);
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(ok.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
        assert_eq!(ok.headers()[header::CONTENT_TYPE], "application/gzip");
        assert_eq!(
            ok.headers()[header::CONTENT_LENGTH],
            served.body.len().to_string().as_str()
        );
        assert!(ok.headers().get(header::CONTENT_ENCODING).is_none());

        let wrong_token = served.route.replacen('0', "1", 1);
        for path in [
            wrong_token.as_str(),
            "/",
            &format!("/{TOKEN}"),
            &format!("/{TOKEN}/"),
            &format!("{}/x", served.route),
        ] {
            assert_eq!(
                respond(&served, &Method::GET, path).status(),
                StatusCode::NOT_FOUND,
                "{path}"
            );
        }
    }

    /// Check that HEAD tells the length without the body, that a preflight
    /// gets the CORS headers, and that other methods are refused.
    #[test]
    fn head_options_and_other_methods() {
        let served = served();
        let head = respond(&served, &Method::HEAD, &served.route);
        assert_eq!(head.status(), StatusCode::OK);
        assert_eq!(
            head.headers()[header::CONTENT_LENGTH],
            served.body.len().to_string().as_str()
        );

        let preflight = respond(&served, &Method::OPTIONS, &served.route);
        assert_eq!(preflight.status(), StatusCode::NO_CONTENT);
        assert_eq!(
            preflight.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN],
            "*"
        );
        assert_eq!(
            preflight.headers()[header::ACCESS_CONTROL_ALLOW_METHODS],
            ALLOWED_METHODS
        );

        let post = respond(&served, &Method::POST, &served.route);
        assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(post.headers()[header::ALLOW], ALLOWED_METHODS);
    }

    /// Check that the SSH hint names the server address of `$SSH_CONNECTION`,
    /// falls back to the host name with only `$SSH_CLIENT`, and is absent
    /// outside SSH.
    #[test]
    fn ssh_tunnel_from_the_environment() {
        assert_eq!(
            ssh_tunnel(
                Some("10.0.0.1 5555 10.0.0.2 22"),
                None,
                Some("ann"),
                "box",
                4000
            )
            .as_deref(),
            Some("ssh -L 4000:127.0.0.1:4000 ann@10.0.0.2")
        );
        assert_eq!(
            ssh_tunnel(None, Some("10.0.0.1 5555 22"), None, "box", 4000).as_deref(),
            Some("ssh -L 4000:127.0.0.1:4000 box")
        );
        assert_eq!(ssh_tunnel(None, None, Some("ann"), "box", 4000), None);
    }

    /// Check that a variable is found in a `/proc/PID/environ`, by its whole
    /// name only.
    #[test]
    fn environ_lookup() {
        let environ = b"SSH_CONNECTION_X=no\0SSH_CONNECTION=1 2 3 4\0EMPTY=\0";
        assert_eq!(
            environ_var(environ, "SSH_CONNECTION").as_deref(),
            Some("1 2 3 4")
        );
        assert_eq!(environ_var(environ, "EMPTY"), None);
        assert_eq!(environ_var(environ, "SSH"), None);
    }

    /// Check that a missing file and a directory are problems with the request.
    #[test]
    fn unusable_paths_are_usage_errors() {
        for path in ["/nonexistent/profile.json", "/"] {
            match Served::read(Path::new(path), TOKEN) {
                Err(e @ RecordError::Unservable { .. }) => {
                    assert!(e.exit_code() == 2 && !e.to_string().contains('\n'))
                }
                other => panic!("{path}: {:?}", other.map(|s| s.route)),
            }
        }
    }
}
