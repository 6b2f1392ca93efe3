//! The control sockets of `haul limit` through the real binary: a sender stopped by
//! SIGINT, SIGTERM or SIGHUP removes its socket and dies of that signal (one its caller
//! ignored stays ignored), and so does a sender that fails; sockets left by killed
//! senders are removed by the next sender and do not keep `haul limit` from the live one;
//! a fallback directory made by another user, and a socket another user or process
//! listens on, are refused.
//!
//! Each test runs its haul processes as a user of its own (through `setpriv`), with a
//! runtime directory of its own, so that the transfers of tests running at the same time
//! (and root's, in `/run/haul`) are not in the way.

mod support;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
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

    /// python3 running `script` as this user.
    fn python(&self, script: &str) -> Command {
        python(Some(self.uid), script)
    }

    /// `haul limit ARGS` as this user, to completion.
    fn limit(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = self.haul("limit");
        cmd.args(args).stdin(Stdio::null());
        cmd.output().unwrap()
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

#[test]
fn sockets_of_killed_transfers_do_not_keep_haul_limit_from_the_live_one() {
    let Some((tmp, file)) = source("sockets_of_killed_transfers", 40) else {
        return;
    };
    let user = User::with_runtime(61_002, tmp.path());
    let dir = user.sockets();
    // The live one: 160 s at this cap, a few seconds once the cap is lifted.
    let (live_recv, live) = user.send_slowly(&file, &tmp.path().join("live"), "256K");
    wait_for(&socket(&dir, live.pid()));
    // One killed with SIGKILL leaves its socket (nothing can remove it then)...
    let (r, killed) = user.send_slowly(&file, &tmp.path().join("killed"), "64K");
    let killed_sock = socket(&dir, killed.pid());
    wait_for(&killed_sock);
    killed.kill();
    r.kill();
    assert!(killed_sock.exists(), "SIGKILL cannot remove a socket");
    // ...one ended with SIGTERM does not...
    let (r, termed) = user.send_slowly(&file, &tmp.path().join("termed"), "64K");
    let termed_sock = socket(&dir, termed.pid());
    wait_for(&termed_sock);
    // SAFETY: kill() on the pid of our own unreaped child.
    assert_eq!(unsafe { libc::kill(termed.pid() as i32, libc::SIGTERM) }, 0);
    termed.wait();
    r.kill();
    // ...and a socket nothing listens on, under the name of a process that lives.
    let idle = Helper::start(user.python(IDLE_SOCKET).arg(&dir));
    let idle_sock = PathBuf::from(&idle.first);

    let o = user.limit(&["off"]);
    idle.kill();
    assert!(o.status.success(), "haul limit off: {o:?}");
    assert!(!killed_sock.exists(), "the dead sender's socket stayed");
    assert!(!termed_sock.exists(), "the stopped sender's socket stayed");
    assert!(!idle_sock.exists(), "the socket nothing listens on stayed");
    live.wait().assert_code(0);
    live_recv.wait().assert_code(0);
    assert_contents_equal(&file, &tmp.path().join("live/data"));
}

#[test]
fn a_new_transfer_removes_the_socket_a_killed_one_left() {
    let Some((tmp, file)) = source("a_new_transfer_removes_the_socket", 8) else {
        return;
    };
    let user = User::with_runtime(61_007, tmp.path());
    let (r, killed) = user.send_slowly(&file, &tmp.path().join("killed"), "64K");
    let killed_sock = socket(&user.sockets(), killed.pid());
    wait_for(&killed_sock);
    killed.kill();
    r.kill();
    let (r, next) = user.send_slowly(&file, &tmp.path().join("next"), "64K");
    // A sender removes what is stale before its own socket appears.
    wait_for(&socket(&user.sockets(), next.pid()));
    let stayed = killed_sock.exists();
    next.kill();
    r.kill();
    assert!(!stayed, "the next transfer left {}", killed_sock.display());
}

#[test]
fn a_sender_that_fails_removes_its_socket() {
    let Some((tmp, file)) = source("a_sender_that_fails_removes_its_socket", 8) else {
        return;
    };
    let user = User::with_runtime(61_008, tmp.path());
    let recv = recv(&tmp.path().join("dst"), &[]);
    let mut cmd = user.haul("send");
    cmd.arg(&file)
        .args(["--to", &recv.ticket, "--limit", "64K", "--retries", "0"]);
    let sender = Running::spawn("send", cmd);
    let sock = socket(&user.sockets(), sender.pid());
    wait_for(&sock);
    recv.kill();
    let out = sender.wait();
    assert_ne!(out.code(), Some(0), "{}", out.describe());
    assert!(out.code().is_some(), "{}", out.describe());
    assert!(!sock.exists(), "a failed sender left {}", sock.display());
}

#[test]
fn a_sighup_the_caller_ignored_stays_ignored() {
    // As under nohup: the transfer runs on to its end, and only then its socket goes.
    let Some((tmp, file)) = source("a_sighup_the_caller_ignored_stays_ignored", 4) else {
        return;
    };
    let user = User::with_runtime(61_009, tmp.path());
    let recv = recv(&tmp.path().join("dst"), &[]);
    let mut cmd = user.haul("send");
    cmd.arg(&file).args(["--to", &recv.ticket, "--limit", "2M"]);
    // SAFETY: signal() is async-signal-safe, and nothing else runs in the child here.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let sender = Running::spawn("send", cmd);
    let sock = socket(&user.sockets(), sender.pid());
    wait_for(&sock);
    // SAFETY: kill() on the pid of our own unreaped child.
    assert_eq!(unsafe { libc::kill(sender.pid() as i32, libc::SIGHUP) }, 0);
    sender.wait().assert_code(0);
    recv.wait().assert_code(0);
    assert_contents_equal(&file, &tmp.path().join("dst/data"));
    assert!(!sock.exists(), "{} stayed", sock.display());
}

#[test]
fn a_signal_ends_a_sender_whose_stderr_blocks() {
    let Some((tmp, file)) = source("a_signal_ends_a_sender_whose_stderr_blocks", 8) else {
        return;
    };
    let user = User::with_runtime(61_010, tmp.path());
    let recv = recv(&tmp.path().join("dst"), &[]);
    // A pipe nobody reads, full before haul starts: its last line cannot be written.
    let (_unread, full) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
    rustix::fs::fcntl_setfl(&full, rustix::fs::OFlags::NONBLOCK).unwrap();
    while rustix::io::write(&full, &[b'x'; 4096]).is_ok() {}
    rustix::fs::fcntl_setfl(&full, rustix::fs::OFlags::empty()).unwrap();
    let mut cmd = user.haul("send");
    cmd.arg(&file)
        .args(["--to", &recv.ticket, "--limit", "64K"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(full));
    let mut sender = cmd.spawn().unwrap();
    let sock = socket(&user.sockets(), sender.id());
    wait_for(&sock);
    // SAFETY: kill() on the pid of our own unreaped child.
    assert_eq!(unsafe { libc::kill(sender.id() as i32, libc::SIGTERM) }, 0);
    let until = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = sender.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > until {
            let _ = sender.kill();
            let _ = sender.wait();
            panic!("SIGTERM did not end a sender whose stderr blocks within 30 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    recv.kill();
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    assert!(!sock.exists(), "{} stayed", sock.display());
}

/// Binds (without listening) `limit-<its pid>.sock` in the directory it is given, prints
/// the path, and sleeps.
const IDLE_SOCKET: &str = "import os, socket, sys, time
p = os.path.join(sys.argv[1], 'limit-%d.sock' % os.getpid())
s = socket.socket(socket.AF_UNIX)
s.bind(p)
print(p, flush=True)
time.sleep(120)";

/// Listens on `limit-<pid>.sock` in `argv[1]` (`pid`: `argv[2]`, or its own), as uid
/// `argv[3]` when given (bound as root first), prints the path, then answers every
/// line with `ok` and prints what it was told.
const FAKE_SENDER: &str = "import os, socket, sys
pid = int(sys.argv[2]) or os.getpid()
p = os.path.join(sys.argv[1], 'limit-%d.sock' % pid)
s = socket.socket(socket.AF_UNIX)
s.bind(p)
os.chmod(p, 0o777)
if len(sys.argv) > 3:
    os.setuid(int(sys.argv[3]))
s.listen(8)
print(p, flush=True)
while True:
    c, _ = s.accept()
    line = c.recv(64)
    if line:
        print('told', line.decode().strip(), flush=True)
        c.sendall(b'ok 52428800\\n')
    c.close()";

/// A helper process: its first stdout line, and the rest once it is killed.
struct Helper {
    child: Child,
    first: String,
    rest: std::sync::mpsc::Receiver<String>,
}

impl Helper {
    /// Starts `cmd` and reads its first line (at most 30 s).
    fn start(cmd: &mut Command) -> Helper {
        let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(out);
            let mut line = String::new();
            let _ = r.read_line(&mut line);
            let _ = tx.send(line);
            let mut rest = String::new();
            let _ = r.read_to_string(&mut rest);
            let _ = tx.send(rest);
        });
        let first = rx.recv_timeout(Duration::from_secs(30));
        let first = first.unwrap_or_else(|e| {
            let _ = child.kill();
            panic!("{cmd:?} printed no line: {e}")
        });
        Helper {
            child,
            first: first.trim_end().to_string(),
            rest: rx,
        }
    }

    /// Kills it and returns what it printed after its first line.
    fn kill(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.rest
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_default()
    }
}

/// A fake sender started with `args` after the script (directory, pid, uid), as root or
/// as `as_uid`.
fn fake_sender(as_uid: Option<u32>, args: &[&str]) -> Helper {
    Helper::start(python(as_uid, FAKE_SENDER).args(args))
}

/// The system's python3 running `script`, as root or as `as_uid`.
fn python(as_uid: Option<u32>, script: &str) -> Command {
    let mut cmd = match as_uid {
        Some(u) => {
            let mut c = Command::new("setpriv");
            c.args([
                &format!("--reuid={u}"),
                &format!("--regid={u}"),
                "--clear-groups",
                PYTHON,
            ]);
            c
        }
        None => Command::new(PYTHON),
    };
    cmd.args(["-c", script]);
    cmd
}

/// Not the first python3 on root's PATH (pyenv's, which other users may not run).
const PYTHON: &str = "/usr/bin/python3";

#[test]
fn a_fallback_directory_another_user_made_is_refused_by_sender_and_haul_limit() {
    let Some((tmp, file)) = source("a_fallback_directory_another_user_made", 2) else {
        return;
    };
    let victim = User {
        uid: 61_003,
        runtime: None,
    };
    let attacker = 61_004u32;
    let squat = victim.sockets();
    let _ = std::fs::remove_dir_all(&squat);
    // The attacker makes /tmp/haul-VICTIM first, open to all, with a socket of its own.
    let o = Command::new("setpriv")
        .args([
            &format!("--reuid={attacker}"),
            &format!("--regid={attacker}"),
            "--clear-groups",
            PYTHON,
            "-c",
            "import os, sys; os.mkdir(sys.argv[1]); os.chmod(sys.argv[1], 0o777)",
        ])
        .arg(&squat)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let fake = fake_sender(Some(attacker), &[squat.to_str().unwrap(), "0"]);

    let (recv, sender) = victim.send_slowly(&file, &tmp.path().join("dst"), "4M");
    let sent = sender.wait();
    let told_by_limit = victim.limit(&["50M"]);
    let told = fake.kill();
    let _ = std::fs::remove_dir_all(&squat);

    assert!(
        !told.contains("told"),
        "the attacker's socket was told: {told}"
    );
    sent.assert_code(0);
    recv.wait().assert_code(0);
    let refusal = format!("/tmp/haul-61003 belongs to uid {attacker}, not to you");
    assert!(
        sent.stderr
            .contains(&format!("haul limit cannot reach this transfer: {refusal}")),
        "{}",
        sent.describe()
    );
    assert_eq!(told_by_limit.status.code(), Some(2), "{told_by_limit:?}");
    let err = String::from_utf8_lossy(&told_by_limit.stderr);
    assert!(err.contains(&refusal), "{err}");
}

#[test]
fn a_socket_another_user_or_process_listens_on_is_not_told() {
    let Some((_, tmp)) = unprivileged_tempdir("a_socket_another_user_or_process_listens_on") else {
        return;
    };
    let user = User::with_runtime(61_005, tmp.path());
    let dir = user.sockets();
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(user.uid), Some(user.uid)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    // Bound in the user's directory by root, listening as another user...
    let other_uid = fake_sender(None, &[dir.to_str().unwrap(), "0", "61006"]);
    // ...and one of the user's own processes listening under pid 1's name.
    let other_pid = fake_sender(Some(user.uid), &[dir.to_str().unwrap(), "1"]);

    let any = user.limit(&["off"]);
    let by_uid = user.limit(&["off", "--pid", &other_uid.child.id().to_string()]);
    let by_pid = user.limit(&["off", "--pid", "1"]);
    let told = other_pid.kill() + &other_uid.kill();
    assert!(!told.contains("told"), "a fake sender was told: {told}");

    for (o, says) in [
        (&any, "is held by"),
        (&by_uid, "is held by uid 61006, not by you (uid 61005)"),
        (&by_pid, "is held by pid "),
    ] {
        assert_eq!(o.status.code(), Some(2), "{o:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{says}: {err}");
    }
}
