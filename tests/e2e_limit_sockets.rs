//! The control sockets of `haul limit` through the real binary: a sender stopped by
//! SIGINT, SIGTERM or SIGHUP removes its socket and dies of that signal.
//!
//! Each test runs its haul processes as a user of its own (through `setpriv`), with a
//! runtime directory of its own, so that the transfers of tests running at the same time
//! (and root's, in `/run/haul`) are not in the way.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use support::*;

/// A user of this test binary's own (one per test), as `setpriv` takes it.
struct User {
    uid: u32,
    /// Its `XDG_RUNTIME_DIR`; `None`: unset (the `/tmp/haul-UID` fallback).
    runtime: Option<PathBuf>,
}

impl User {
    /// `uid` with a private runtime directory inside `tmp`.
    fn with_runtime(uid: u32, tmp: &Path) -> User {
        let dir = tmp.join(format!("run-{uid}"));
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(uid), Some(uid)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        User {
            uid,
            runtime: Some(dir),
        }
    }

    /// Where its senders' sockets are.
    fn sockets(&self) -> PathBuf {
        match &self.runtime {
            Some(d) => d.join("haul"),
            None => PathBuf::from(format!("/tmp/haul-{}", self.uid)),
        }
    }

    /// `haul SUBCOMMAND` as this user, SIGINT and SIGHUP as a terminal would leave them
    /// (whatever the test runner was started with).
    fn haul(&self, subcommand: &str) -> Command {
        let mut cmd = Haul::as_user(self.uid, self.uid).command(subcommand);
        match &self.runtime {
            Some(d) => cmd.env("XDG_RUNTIME_DIR", d),
            None => cmd.env_remove("XDG_RUNTIME_DIR"),
        };
        default_signals(&mut cmd);
        cmd
    }

    /// A sender of `file` to a new receiver into `dst` at `limit`, started.
    fn send_slowly(&self, file: &Path, dst: &Path, limit: &str) -> (Recv, Running) {
        let recv = recv(dst, &[]);
        let mut cmd = self.haul("send");
        cmd.arg(file).args(["--to", &recv.ticket, "--limit", limit]);
        (recv, Running::spawn("send", cmd))
    }
}

/// Lets `cmd` start with SIGINT and SIGHUP at their default (a test runner started in the
/// background of a script has them ignored, and haul keeps an ignored signal ignored).
fn default_signals(cmd: &mut Command) {
    // SAFETY: signal() is async-signal-safe, and nothing else runs in the child here.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            Ok(())
        });
    }
}

/// Waits (at most 30 s) until `path` exists.
fn wait_for(path: &Path) {
    let until = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        assert!(Instant::now() < until, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The socket of sender `pid` in `dir`.
fn socket(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("limit-{pid}.sock"))
}

/// A temporary directory others may enter, and a file of `mib` MiB in it.
fn source(test: &str, mib: u64) -> Option<(tempfile::TempDir, PathBuf)> {
    let (_, tmp) = unprivileged_tempdir(test)?;
    let file = tmp.path().join("data");
    write_random_file(&file, mib * MIB, 36);
    Some((tmp, file))
}

#[test]
fn sigint_sigterm_and_sighup_remove_the_socket_and_end_with_that_signal() {
    let Some((tmp, file)) = source("sigint_sigterm_and_sighup_remove_the_socket", 8) else {
        return;
    };
    let user = User::with_runtime(61_001, tmp.path());
    for (sig, name) in [
        (libc::SIGINT, "SIGINT"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGHUP, "SIGHUP"),
    ] {
        // 128 s at this cap: it is still running when the signal comes.
        let (recv, sender) = user.send_slowly(&file, &tmp.path().join(name), "64K");
        let sock = socket(&user.sockets(), sender.pid());
        wait_for(&sock);
        // SAFETY: kill() on the pid of our own unreaped child.
        assert_eq!(unsafe { libc::kill(sender.pid() as i32, sig) }, 0);
        let out = sender.wait();
        recv.kill();
        assert_eq!(out.status.signal(), Some(sig), "{name}: {}", out.describe());
        assert!(!sock.exists(), "{name} left {}", sock.display());
        assert!(
            out.stderr.contains(&format!("haul: stopped by {name}")),
            "{name}: {}",
            out.describe()
        );
    }
}
