//! Starting a browser at the Firefox Profiler link, for `sysprof view`
//! and `record --open`.
//!
//! In: the link; `$BROWSER`, `$DISPLAY`/`$WAYLAND_DISPLAY`, and under sudo
//! `SUDO_UID`/`SUDO_GID`/`SUDO_USER` and the user database. Out: a browser
//! process, detached in its own session, running as the user who ran sudo
//! (never as root), or one line on stderr saying why none was started.
//! Never an error: the link is printed anyway.

use std::ffi::{CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::env_var;

/// Start a browser at `link`: the first of `$BROWSER`'s `:`-separated
/// commands that starts, else `xdg-open`. Never fails: the link is printed,
/// so when no browser starts, one line says so and serving goes on.
pub(super) fn open_browser(link: &str) {
    let commands: Vec<String> = match env_var("BROWSER") {
        Some(list) => list
            .split(':')
            .filter(|c| !c.trim().is_empty())
            .map(String::from)
            .collect(),
        // Without a display xdg-open falls back to text browsers, which
        // cannot run without our terminal.
        None if env_var("DISPLAY").is_none() && env_var("WAYLAND_DISPLAY").is_none() => {
            return no_browser("no display: DISPLAY and WAYLAND_DISPLAY are unset");
        }
        None => vec!["xdg-open".into()],
    };
    let invoker = Invoker::from_sudo();
    // SAFETY: geteuid cannot fail.
    if invoker.is_none() && unsafe { libc::geteuid() } == 0 {
        return no_browser("running as root, not under sudo: a browser is not started as root");
    }
    let mut why = String::from("$BROWSER names no command");
    for command in &commands {
        let argv = browser_argv(command, link);
        match spawn_browser(&argv, invoker.as_ref()) {
            Ok(mut child) => {
                let program = argv[0].clone();
                // Reaped, not awaited: a browser may outlive the server. One
                // that hands the link to a running browser exits at once, and
                // xdg-open exits 3 or 4 when nothing can open it.
                tokio::spawn(async move {
                    if let Ok(status) = child.wait().await {
                        if !status.success() {
                            no_browser(&format!("{program} failed, {status}"));
                        }
                    }
                });
                return;
            }
            Err(e) => why = format!("{}: {e}", argv[0]),
        }
    }
    no_browser(&why);
}

fn no_browser(why: &str) {
    eprintln!("sysprof: no browser started ({why}): open the link above");
}

/// The program and arguments of one `$BROWSER` command: words split on
/// blanks, `%s` standing for the link (the xdg-utils convention), else the
/// link appended.
fn browser_argv(command: &str, link: &str) -> Vec<String> {
    let mut argv: Vec<String> = command.split_whitespace().map(String::from).collect();
    if argv.iter().any(|a| a.contains("%s")) {
        argv.iter_mut().for_each(|a| *a = a.replace("%s", link));
    } else {
        argv.push(link.to_string());
    }
    argv
}

/// Start `argv` detached: stdio on /dev/null, in a session of its own, as
/// `invoker` when there is one.
fn spawn_browser(
    argv: &[String],
    invoker: Option<&Invoker>,
) -> std::io::Result<tokio::process::Child> {
    let mut command = tokio::process::Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let ids = invoker.map(|user| {
        user.set_env(&mut command);
        (user.uid, user.gid, user.groups.clone())
    });
    // SAFETY: between fork and exec the closure makes only system calls,
    // which are async-signal-safe, on data prepared before the fork.
    unsafe {
        command.pre_exec(move || {
            // Its own session: Ctrl-C in this terminal stops the server, not
            // a browser it started.
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some((uid, gid, groups)) = &ids {
                // Groups and gid first: once the uid is dropped they are fixed.
                if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(*gid) != 0
                    || libc::setuid(*uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    command.spawn()
}

/// The user who ran `sudo sysprof …`: a browser runs as them, with their
/// home and session bus, never as root.
pub(super) struct Invoker {
    name: String,
    /// Their uid: their connections are answered too.
    pub(super) uid: libc::uid_t,
    gid: libc::gid_t,
    groups: Vec<libc::gid_t>,
    home: Option<PathBuf>,
}

impl Invoker {
    /// From sudo's `SUDO_UID`, `SUDO_GID` and `SUDO_USER`, when we are root.
    pub(super) fn from_sudo() -> Option<Invoker> {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return None;
        }
        let uid = env_var("SUDO_UID")?.parse().ok()?;
        let gid = env_var("SUDO_GID")?.parse().ok()?;
        let name = env_var("SUDO_USER")?;
        let c_name = CString::new(name.as_str()).ok()?;
        Some(Invoker {
            groups: groups_of(&c_name, gid),
            home: home_of(&c_name),
            name,
            uid,
            gid,
        })
    }

    /// What a desktop program needs to find the user's session.
    fn set_env(&self, command: &mut tokio::process::Command) {
        command.env("USER", &self.name).env("LOGNAME", &self.name);
        if let Some(home) = &self.home {
            command.env("HOME", home);
        }
        let runtime_dir = PathBuf::from(format!("/run/user/{}", self.uid));
        if env_var("XDG_RUNTIME_DIR").is_none() && runtime_dir.is_dir() {
            command.env("XDG_RUNTIME_DIR", &runtime_dir);
        }
        let bus = runtime_dir.join("bus");
        if env_var("DBUS_SESSION_BUS_ADDRESS").is_none() && bus.exists() {
            command.env(
                "DBUS_SESSION_BUS_ADDRESS",
                format!("unix:path={}", bus.display()),
            );
        }
    }
}

/// `user`'s home directory from the user database (files, LDAP, …).
fn home_of(user: &CStr) -> Option<PathBuf> {
    // SAFETY: a zeroed passwd is a valid out-parameter.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut found = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; the strings it stores
    // in `entry` point into `buf`, which outlives their use below.
    let rc = unsafe {
        libc::getpwnam_r(
            user.as_ptr(),
            &mut entry,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() || entry.pw_dir.is_null() {
        return None;
    }
    // SAFETY: getpwnam_r succeeded, so pw_dir is a NUL-terminated string in `buf`.
    let dir = unsafe { CStr::from_ptr(entry.pw_dir) };
    Some(PathBuf::from(OsStr::from_bytes(dir.to_bytes())))
}

/// `user`'s groups, `gid` among them; just `gid` if the database fails.
fn groups_of(user: &CStr, gid: libc::gid_t) -> Vec<libc::gid_t> {
    let mut groups = vec![0; 64];
    // Twice at most: a list too long for the first call reports its length.
    for _ in 0..2 {
        let mut len = groups.len() as libc::c_int;
        // SAFETY: `groups` has room for `len` entries.
        if unsafe { libc::getgrouplist(user.as_ptr(), gid, groups.as_mut_ptr(), &mut len) } >= 0 {
            groups.truncate(len as usize);
            return groups;
        }
        groups.resize(len.max(0) as usize, 0);
    }
    vec![gid]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that `$BROWSER` commands get the link in place of `%s`, else at the end.
    #[test]
    fn browser_commands() {
        assert_eq!(browser_argv("firefox", "L"), ["firefox", "L"]);
        assert_eq!(
            browser_argv("firefox --new-window", "L"),
            ["firefox", "--new-window", "L"]
        );
        assert_eq!(
            browser_argv("open-it --url=%s --now", "L"),
            ["open-it", "--url=L", "--now"]
        );
    }
}
