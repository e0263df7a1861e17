//! Integration tests of `sysprof view`: the release binary serves a file,
//! and a hand-written HTTP/1.1 client plays the Firefox Profiler (which
//! must get the bytes, with CORS) and another local user (who must not find
//! them without the token). Needs no root and no BPF.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use sysprof_tests::*;

const PROFILER: &str = "https://profiler.firefox.com/from-url/";

/// How long output may take to appear on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(10);

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

const SIGTERM: i32 = 15;

/// A running `sysprof view --no-open`, killed if a test fails before it ends.
struct Viewer {
    child: Child,
    lines: Receiver<String>,
    /// Stdout lines up to the link.
    printed: Vec<String>,
    /// The served URL, decoded from the link.
    port: u16,
    path: String,
}

impl Viewer {
    /// Start serving `file` with `env` added, and wait for the link.
    fn start(file: &Path, env: &[(&str, &str)]) -> Viewer {
        let mut child = Command::new(sysprof_bin())
            .args(["view", "--no-open"])
            .arg(file)
            .env_remove("SSH_CONNECTION")
            .env_remove("SSH_CLIENT")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .spawn()
            .expect("running sysprof view");
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let mut viewer = Viewer {
            child,
            lines,
            printed: Vec::new(),
            port: 0,
            path: String::new(),
        };
        let link = viewer.wait_for_line(|l| l.starts_with(PROFILER));
        let url = percent_decode(
            link.strip_prefix(PROFILER)
                .unwrap()
                .strip_suffix('/')
                .expect("the link ends with /"),
        );
        let (authority, path) = url
            .strip_prefix("http://")
            .unwrap()
            .split_once('/')
            .unwrap();
        let (host, port) = authority.split_once(':').unwrap();
        assert_eq!(host, "127.0.0.1", "served on loopback only: {url}");
        viewer.port = port.parse().unwrap();
        viewer.path = format!("/{path}");
        viewer
    }

    /// The next stdout line that `wanted` accepts; panics after [`PATIENCE`].
    fn wait_for_line(&mut self, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if wanted(&line) => return line,
                Ok(line) => self.printed.push(line),
                Err(e) => panic!(
                    "sysprof view did not print the expected line ({e}); it printed {:?}",
                    self.printed
                ),
            }
        }
    }

    /// SIGTERM, then the exit status once it has exited.
    fn terminate(&mut self) -> ExitStatus {
        // SAFETY: signalling our own child, which has not been reaped yet.
        assert_eq!(unsafe { kill(self.child.id() as i32, SIGTERM) }, 0);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "sysprof view still runs 5 s after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Viewer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 answer.
struct Answer {
    status: u16,
    /// Header names in lower case.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `method path` on a new connection to 127.0.0.1:`port`, with the
/// profiler's Origin and `extra` header lines; the connection is closed
/// after the answer, so the body is whatever follows the head.
fn request(port: u16, method: &str, path: &str, extra: &str) -> Answer {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connecting to sysprof view");
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: https://profiler.firefox.com\r\n{extra}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("reading the answer");
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP head");
    let head = String::from_utf8(raw[..end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{status_line}"));
    let headers = lines
        .map(|l| {
            let (name, value) = l.split_once(':').unwrap();
            (name.trim().to_ascii_lowercase(), value.trim().to_string())
        })
        .collect();
    Answer {
        status,
        headers,
        body: raw[end + 4..].to_vec(),
    }
}

/// `%XX` escapes back to bytes.
fn percent_decode(s: &str) -> String {
    let mut out = Vec::new();
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex = [bytes.next().unwrap(), bytes.next().unwrap()];
            out.push(u8::from_str_radix(std::str::from_utf8(&hex).unwrap(), 16).unwrap());
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).unwrap()
}

/// ~100 KB of random bytes named like a compressed profile.
fn random_profile(dir: &Path) -> (std::path::PathBuf, Vec<u8>) {
    let mut bytes = vec![0u8; 100_000];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut bytes)
        .unwrap();
    let path = dir.join("profile.json.gz");
    std::fs::write(&path, &bytes).unwrap();
    (path, bytes)
}

/// Check that the link leads the profiler to the file's exact bytes, with
/// CORS, on loopback; that a token one digit off, or the root, finds
/// nothing; that a preflight is answered; and that SIGTERM ends it with 0.
#[test]
fn view_serves_the_file_to_the_profiler_and_nobody_else() {
    let dir = scratch("view-serves");
    let (file, bytes) = random_profile(&dir);
    let mut viewer = Viewer::start(&file, &[]);
    let port = viewer.port;
    // Chrome blocks a public page's fetch from loopback until the user
    // allows it: the user is told what it will ask, right under the link.
    let chrome = viewer.wait_for_line(|l| l.starts_with("in Chrome"));
    assert!(
        chrome.contains("access other apps and services on this device")
            && chrome.contains("allow it"),
        "{chrome}"
    );

    let token = viewer.path.split('/').nth(1).unwrap().to_string();
    assert!(
        token.len() >= 32 && token.bytes().all(|b| b.is_ascii_hexdigit()),
        "a 128-bit hex token: {token}"
    );

    let got = request(port, "GET", &viewer.path, "");
    assert_eq!(got.status, 200);
    assert!(
        got.body == bytes,
        "the body is the file byte for byte ({} bytes, file {})",
        got.body.len(),
        bytes.len()
    );
    assert!(
        got.header("access-control-allow-origin").is_some(),
        "CORS: {:?}",
        got.headers
    );
    assert_eq!(
        got.header("content-length"),
        Some(bytes.len().to_string().as_str())
    );
    assert_eq!(got.header("content-encoding"), None, "served as on disk");

    let flipped = if token.starts_with('0') { '1' } else { '0' };
    let wrong = viewer
        .path
        .replacen(&token, &format!("{flipped}{}", &token[1..]), 1);
    assert_eq!(request(port, "GET", &wrong, "").status, 404, "{wrong}");
    assert_eq!(request(port, "GET", "/", "").status, 404);

    // Loopback only: 127.0.0.2 is loopback too, but not the address bound.
    assert!(
        TcpStream::connect(("127.0.0.2", port)).is_err(),
        "listening beyond 127.0.0.1"
    );
    // Another local user who has the whole URL (a browser's command line
    // shows it) gets the connection closed, no answer: bash's /dev/tcp as
    // nobody, its reply's first line written to a file we can read. SIGPIPE
    // ignored: the connection may be closed before the request is written,
    // and the reading must still happen.
    let reply = dir.join("nobody-reply");
    // Truncated by nobody's redirection: proof the script ran and could write.
    std::fs::write(&reply, b"unwritten").unwrap();
    std::fs::set_permissions(&reply, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    as_nobody(&format!(
        "bash -c 'trap \"\" PIPE; exec 3<>/dev/tcp/127.0.0.1/{port}; printf \"GET {} HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n\" >&3; head -c 200 <&3 > {}' || true",
        viewer.path,
        reply.display()
    ));
    let answered = std::fs::read_to_string(&reply).unwrap();
    assert!(
        answered.is_empty(),
        "another user got an answer: {answered:?}"
    );
    // The same request from us is answered (the check above is not a broken request).
    assert_eq!(request(port, "GET", &viewer.path, "").status, 200);

    let preflight = request(
        port,
        "OPTIONS",
        &viewer.path,
        "Access-Control-Request-Method: GET\r\n",
    );
    assert!(
        (200..300).contains(&preflight.status),
        "preflight status {}",
        preflight.status
    );
    assert!(
        preflight.header("access-control-allow-origin").is_some(),
        "{:?}",
        preflight.headers
    );
    assert!(
        preflight
            .header("access-control-allow-methods")
            .is_some_and(|m| m.contains("GET")),
        "{:?}",
        preflight.headers
    );

    let status = viewer.terminate();
    assert_eq!(status.code(), Some(0), "exit after SIGTERM: {status}");
}

/// Check that a missing file is a problem with the request: exit 2 and one
/// line on stderr.
#[test]
fn view_of_a_missing_file_says_so_in_one_line() {
    let out = Command::new(sysprof_bin())
        .args(["view", "--no-open", "/nonexistent"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr:?}");
}

/// Check that over SSH the output says how to forward the served port.
#[test]
fn view_over_ssh_prints_the_tunnel_command() {
    let dir = scratch("view-ssh");
    let (file, _) = random_profile(&dir);
    let mut viewer = Viewer::start(&file, &[("SSH_CONNECTION", "10.0.0.1 5555 10.0.0.2 22")]);
    let port = viewer.port;
    let hint = viewer.wait_for_line(|l| l.contains("ssh -L"));
    assert!(
        hint.contains(&format!("ssh -L {port}:127.0.0.1:{port} ")),
        "{hint}"
    );
    assert!(
        hint.contains("10.0.0.2"),
        "the host the SSH client connected to: {hint}"
    );
}

/// Check that `--version` names the commit the binary was built from (as
/// git says), and that the man pages and completions come from the option
/// definitions: every subcommand has its page, and `record`'s page and the
/// bash completion know `--off-cpu-threshold`.
#[test]
fn version_man_pages_and_completions_come_from_the_build() {
    let head = Command::new("git")
        .args(["rev-parse", "--short=10", "HEAD"])
        .current_dir(workspace_root())
        .output()
        .unwrap();
    let version = Command::new(sysprof_bin())
        .arg("--version")
        .output()
        .unwrap();
    let version = String::from_utf8_lossy(&version.stdout);
    if head.status.success() {
        let head = String::from_utf8_lossy(&head.stdout);
        assert!(
            version.contains(&format!("(commit {})", head.trim())),
            "{version} vs HEAD {head}"
        );
    } else {
        assert!(
            version.contains("(commit unknown)"),
            "outside git: {version}"
        );
    }
    let dir = scratch("generate-man");
    let out = Command::new(sysprof_bin())
        .args(["generate", "man"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for sub in [
        "",
        "-record",
        "-agent",
        "-show",
        "-view",
        "-report",
        "-validate",
    ] {
        assert!(
            dir.join(format!("sysprof{sub}.1")).exists(),
            "sysprof{sub}.1"
        );
    }
    let page = std::fs::read_to_string(dir.join("sysprof-record.1")).unwrap();
    assert!(
        page.contains(".TH") && page.contains("off\\-cpu\\-threshold"),
        "{page}"
    );
    let bash = Command::new(sysprof_bin())
        .args(["generate", "bash"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&bash.stdout).contains("--off-cpu-threshold"));
}

/// CPU time `pid` has used, whole process (utime + stime of /proc/PID/stat), seconds.
fn process_cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which ends at the last ')': state is 3, utime 14, stime 15.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    // USER_HZ is 100 on every Linux architecture sysprof runs on.
    ticks / 100.0
}

/// `connflood`'s count of `key` in its result file.
fn flood_count(result: &Path, key: &str) -> u64 {
    let text = std::fs::read_to_string(result).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {text:?}"))
}

/// Check that a flood of connections from another user (nobody, two
/// processes each keeping 256 connections in flight, every one asking for
/// the real path) gets not one byte back, while the owner's downloads
/// during the flood all complete and are the file byte for byte; and that
/// the same flood run by the owner is answered (so the count of answered
/// bytes can tell). Download times and the server's CPU time are printed.
#[test]
fn a_connection_flood_from_another_user_neither_gets_answers_nor_starves_the_owner() {
    if !can_record(
        "a_connection_flood_from_another_user_neither_gets_answers_nor_starves_the_owner",
    ) {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("view-flood");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (file, bytes) = random_profile(&dir);
    let flood = build_c("connflood", &dir.join("connflood"), &[]);
    let mut viewer = Viewer::start(&file, &[]);
    let (port, path) = (viewer.port.to_string(), viewer.path.clone());

    // The owner's own flood, briefly: answered.
    let ours = dir.join("flood-owner");
    let status = Command::new(&flood)
        .args([port.as_str(), path.as_str(), "0.5"])
        .arg(&ours)
        .status()
        .unwrap();
    assert!(status.success());
    assert!(
        flood_count(&ours, "answered_bytes") > 0,
        "the owner's connections were not answered either"
    );

    let results: Vec<std::path::PathBuf> = (0..2)
        .map(|i| dir.join(format!("flood-nobody-{i}")))
        .collect();
    let floods: Vec<Child> = results
        .iter()
        .map(|result| {
            // Created here, written by nobody.
            std::fs::write(result, b"").unwrap();
            std::fs::set_permissions(result, std::fs::Permissions::from_mode(0o666)).unwrap();
            Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(&flood)
                .args([port.as_str(), path.as_str(), "8"])
                .arg(result)
                .spawn()
                .expect("setpriv (util-linux) runs the flood as nobody")
        })
        .collect();
    let cpu_before = process_cpu_seconds(viewer.child.id());
    let started = Instant::now();
    std::thread::sleep(Duration::from_millis(500));
    let mut downloads = Vec::new();
    while started.elapsed() < Duration::from_secs(7) {
        let t = Instant::now();
        let got = request(viewer.port, "GET", &path, "");
        downloads.push(t.elapsed());
        assert_eq!(got.status, 200);
        assert!(
            got.body == bytes,
            "the owner got {} bytes, not the file's {}",
            got.body.len(),
            bytes.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let cpu = process_cpu_seconds(viewer.child.id()) - cpu_before;
    let wall = started.elapsed();
    for (mut child, result) in floods.into_iter().zip(&results) {
        assert!(
            child.wait().unwrap().success(),
            "the flood as nobody failed"
        );
        let (connections, answered) = (
            flood_count(result, "connections"),
            flood_count(result, "answered_bytes"),
        );
        eprintln!("flood as nobody: {connections} connections, {answered} bytes answered");
        assert!(
            connections >= 100,
            "the flood made only {connections} connections"
        );
        assert_eq!(answered, 0, "another user's connections were answered");
    }
    downloads.sort();
    eprintln!(
        "owner's downloads during the flood: {} of {} bytes, median {:.3} s, slowest {:.3} s; view used {cpu:.2} s of CPU in {:.1} s",
        downloads.len(),
        bytes.len(),
        downloads[downloads.len() / 2].as_secs_f64(),
        downloads.last().unwrap().as_secs_f64(),
        wall.as_secs_f64()
    );
    assert!(!downloads.is_empty());
    assert!(
        *downloads.last().unwrap() < Duration::from_secs(10),
        "a download took {:?}",
        downloads.last()
    );
    assert_eq!(viewer.terminate().code(), Some(0));
}
