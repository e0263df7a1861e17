//! Build script: the git commit this binary was built from, for
//! `sysprof --version` (`0.1.0 (commit abc1234567)`; `unknown` outside a
//! git checkout).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "--short=10", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=SYSPROF_GIT_COMMIT={commit}");
    // Run again when HEAD moves: a checkout changes HEAD, a commit the
    // branch it names (loose, or packed). Paths from git itself, so a
    // worktree's or a submodule's `.git` file works; outside git, only
    // this script's own changes.
    println!("cargo:rerun-if-changed=build.rs");
    if commit != "unknown" {
        // Existing paths only: cargo reruns the script, and recompiles the
        // crate, whenever one is missing. A directory is watched whole, so
        // `refs/heads` sees a branch's loose ref appear or change.
        // Relative to this package where the git directory is the
        // checkout's own: cargo shares a build between clones that use one
        // target directory (the package's hash leaves out its path), and
        // absolute paths kept watching the first clone's git, so every later
        // clone's --version named that clone's commit.
        let package =
            std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
        let checkout = package
            .parent()
            .map(std::path::Path::to_path_buf)
            .unwrap_or_default();
        for path in ["HEAD", "packed-refs", "refs/heads"] {
            if let Some(file) = git(&["rev-parse", "--path-format=absolute", "--git-path", path]) {
                let file = std::path::PathBuf::from(file);
                if file.exists() {
                    match file.strip_prefix(&checkout) {
                        Ok(inside) if !checkout.as_os_str().is_empty() => {
                            println!("cargo:rerun-if-changed=../{}", inside.display())
                        }
                        _ => println!("cargo:rerun-if-changed={}", file.display()),
                    }
                }
            }
        }
    }
}
