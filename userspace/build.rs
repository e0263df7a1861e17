//! Build script: the git commit this binary was built from, for
//! `sysprof --version` (`0.1.0 (commit abc1234567)`; `unknown` outside a
//! git checkout).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "--short=10", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=SYSPROF_GIT_COMMIT={commit}");
    // Run again when HEAD moves: a checkout changes HEAD, a commit the
    // branch it names.
    println!("cargo:rerun-if-changed=../.git/HEAD");
    println!("cargo:rerun-if-changed=../.git/packed-refs");
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        println!("cargo:rerun-if-changed=../.git/{branch}");
    }
}
