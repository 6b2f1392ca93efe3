//! Runs the real `haul` binary: receivers whose ticket is read from stdout, senders and
//! local copies, each bounded by a generous timeout and killed (by pid) if it overruns or if
//! the test panics first.
//!
//! Readiness comes from the process itself: a receiver is ready when its first stdout line
//! (the ticket) arrives, and an exit is noticed by `waitid` in a waiter thread. Nothing here
//! sleeps to guess that something has happened.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// How long any one haul process may run before the test fails. Generous on purpose: it only
/// turns a hang into a failure, and a debug build on two busy cores is slow.
pub const PROCESS_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a receiver may take to print its ticket.
pub const TICKET_TIMEOUT: Duration = Duration::from_secs(60);
/// Every ticket starts with this.
pub const TICKET_PREFIX: &str = "haul1-";

/// Path of the binary under test.
pub fn haul_bin() -> &'static str {
    env!("CARGO_BIN_EXE_haul")
}

/// How a finished haul process ended and what it printed.
#[derive(Debug)]
pub struct Outcome {
    /// What `haul` was run as ("recv", "send", "copy").
    pub name: String,
    /// The exit status.
    pub status: ExitStatus,
    /// Everything on stdout (for a receiver, the ticket line included).
    pub stdout: Vec<u8>,
    /// Everything on stderr, lossily decoded.
    pub stderr: String,
}

impl Outcome {
    /// The exit code, or `None` when killed by a signal.
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Panics, showing stderr, unless the exit code is `expected`.
    pub fn assert_code(&self, expected: i32) {
        assert_eq!(
            self.code(),
            Some(expected),
            "haul {} exited with {:?}, expected {expected}\n{}",
            self.name,
            self.status,
            self.describe()
        );
    }

    /// Panics, showing stderr, unless the exit code is one of `expected`.
    pub fn assert_code_in(&self, expected: &[i32]) {
        assert!(
            self.code().is_some_and(|c| expected.contains(&c)),
            "haul {} exited with {:?}, expected one of {expected:?}\n{}",
            self.name,
            self.status,
            self.describe()
        );
    }

    /// Stdout after the first line: a receiver must print nothing there when not on a tty.
    pub fn stdout_after_first_line(&self) -> &[u8] {
        match self.stdout.iter().position(|&b| b == b'\n') {
            Some(i) => &self.stdout[i + 1..],
            None => &[],
        }
    }

    /// The status and output, for failure messages.
    pub fn describe(&self) -> String {
        format!(
            "--- haul {} ({:?}) stdout ---\n{}\n--- stderr ---\n{}",
            self.name,
            self.status,
            String::from_utf8_lossy(&self.stdout),
            self.stderr
        )
    }
}

/// A running haul process, killed by its pid and reaped when dropped unfinished.
#[derive(Debug)]
pub struct Running {
    name: String,
    child: Child,
    exited: Receiver<()>,
    first_line: Receiver<Option<Vec<u8>>>,
    stdout: Option<JoinHandle<Vec<u8>>>,
    stderr: Option<JoinHandle<Vec<u8>>>,
    reaped: bool,
}

impl Running {
    /// Starts `cmd` with stdin closed and stdout/stderr captured.
    pub fn spawn(name: &str, mut cmd: Command) -> Running {
        cmd.stdout(Stdio::piped());
        Running::spawn_with_stdout(name, cmd)
    }

    /// Starts `cmd` with stdin closed, stderr captured and stdout where `cmd` has it (a
    /// terminal, a closed pipe); a stdout still piped is captured too.
    pub fn spawn_with_stdout(name: &str, mut cmd: Command) -> Running {
        cmd.stdin(Stdio::null()).stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let pid = child.id();

        let (exit_tx, exited) = mpsc::channel();
        thread::spawn(move || {
            wait_exit_no_reap(pid);
            let _ = exit_tx.send(());
        });

        let (line_tx, first_line) = mpsc::channel();
        let out = child.stdout.take();
        let stdout = thread::spawn(move || {
            let Some(mut out) = out else {
                let _ = line_tx.send(None);
                return Vec::new();
            };
            let mut reader = BufReader::new(&mut out);
            let mut all = Vec::new();
            let _ = reader.read_until(b'\n', &mut all);
            let _ = line_tx.send(if all.is_empty() {
                None
            } else {
                Some(all.clone())
            });
            let _ = reader.read_to_end(&mut all);
            all
        });
        let mut err = child.stderr.take().unwrap();
        let stderr = thread::spawn(move || {
            let mut all = Vec::new();
            let _ = err.read_to_end(&mut all);
            all
        });
        Running {
            name: name.to_string(),
            child,
            exited,
            first_line,
            stdout: Some(stdout),
            stderr: Some(stderr),
            reaped: false,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has exited (without reaping it).
    pub fn has_exited(&self) -> bool {
        match self.exited.try_recv() {
            Ok(()) | Err(mpsc::TryRecvError::Disconnected) => true,
            Err(mpsc::TryRecvError::Empty) => false,
        }
    }

    /// The first stdout line, without its newline; `None` if stdout closed without one.
    /// Kills the process and panics if nothing comes within [`TICKET_TIMEOUT`].
    pub fn first_line(&mut self) -> Option<Vec<u8>> {
        match self.first_line.recv_timeout(TICKET_TIMEOUT) {
            Ok(Some(mut line)) => {
                if line.last() == Some(&b'\n') {
                    line.pop();
                }
                Some(line)
            }
            Ok(None) | Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => {
                let out = self.kill_now();
                panic!(
                    "haul {} printed no first line within {TICKET_TIMEOUT:?}\n{}",
                    self.name,
                    out.describe()
                );
            }
        }
    }

    /// Waits for the exit (at most [`PROCESS_TIMEOUT`]; then kills it and panics).
    pub fn wait(mut self) -> Outcome {
        if let Err(RecvTimeoutError::Timeout) = self.exited.recv_timeout(PROCESS_TIMEOUT) {
            let out = self.kill_now();
            panic!(
                "haul {} did not exit within {PROCESS_TIMEOUT:?}; killed it\n{}",
                self.name,
                out.describe()
            );
        }
        self.collect()
    }

    /// Sends SIGKILL now (harmless if it already exited) and collects the outcome.
    pub fn kill(mut self) -> Outcome {
        self.kill_now()
    }

    fn kill_now(&mut self) -> Outcome {
        // The child is not reaped until `collect`, so its pid cannot have been reused.
        let _ = self.child.kill();
        self.collect()
    }

    fn collect(&mut self) -> Outcome {
        let status = self.child.wait().expect("wait for haul");
        self.reaped = true;
        let stdout = self
            .stdout
            .take()
            .map(|h| h.join().unwrap())
            .unwrap_or_default();
        let stderr = self
            .stderr
            .take()
            .map(|h| h.join().unwrap())
            .unwrap_or_default();
        Outcome {
            name: self.name.clone(),
            status,
            stdout,
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Blocks until process `pid` (our child) has exited, leaving it unreaped so that its pid
/// stays ours until `Child::wait` collects it.
fn wait_exit_no_reap(pid: u32) {
    loop {
        // SAFETY: `info` is a plain C struct that waitid fills in; zeroed is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: a valid pointer to `info`; P_PID with our own child's pid.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// Builds haul commands, optionally run as another user through `setpriv`.
#[derive(Debug, Clone, Default)]
pub struct Haul {
    user: Option<(u32, u32)>,
}

impl Haul {
    /// Runs haul as the current user.
    pub fn new() -> Self {
        Haul { user: None }
    }

    /// Runs haul as `uid:gid` with no supplementary groups (needs root and `setpriv`).
    pub fn as_user(uid: u32, gid: u32) -> Self {
        Haul {
            user: Some((uid, gid)),
        }
    }

    /// `haul` with no arguments yet (behind `setpriv` when running as another user).
    pub fn base(&self) -> Command {
        let Some((uid, gid)) = self.user else {
            return Command::new(haul_bin());
        };
        let mut cmd = Command::new("setpriv");
        cmd.arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .arg("--clear-groups")
            .arg(haul_bin());
        cmd
    }

    /// `haul SUBCOMMAND`, ready for more arguments.
    pub fn command(&self, subcommand: &str) -> Command {
        let mut cmd = self.base();
        cmd.arg(subcommand);
        cmd
    }

    /// Starts `haul recv DIR ARGS` (adding `--listen 127.0.0.1:0` unless ARGS has
    /// `--listen`) and reads its ticket; `Err` with the outcome if it exits without one.
    pub fn try_recv(&self, dir: &Path, args: &[&str]) -> Result<Recv, Outcome> {
        let mut cmd = self.command("recv");
        cmd.arg(dir).args(args);
        if !args.iter().any(|a| a.starts_with("--listen")) {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        let mut proc = Running::spawn("recv", cmd);
        let Some(line) = proc.first_line() else {
            return Err(proc.wait());
        };
        let ticket = String::from_utf8(line).unwrap_or_else(|e| {
            let out = proc.kill_now();
            panic!("ticket is not UTF-8: {e}\n{}", out.describe())
        });
        let well_formed = ticket.starts_with(TICKET_PREFIX)
            && ticket.len() > TICKET_PREFIX.len()
            && !ticket.chars().any(char::is_whitespace);
        if !well_formed {
            let out = proc.kill_now();
            panic!(
                "first stdout line of recv is not one `{TICKET_PREFIX}…` token: {ticket:?}\n{}",
                out.describe()
            );
        }
        Ok(Recv { proc, ticket })
    }

    /// Like [`Haul::try_recv`], but panics if no ticket is printed.
    pub fn recv(&self, dir: &Path, args: &[&str]) -> Recv {
        self.try_recv(dir, args)
            .unwrap_or_else(|out| panic!("recv exited without a ticket\n{}", out.describe()))
    }

    /// Starts `haul send PATHS... --to TICKET ARGS`.
    pub fn spawn_send(&self, paths: &[&Path], ticket: &str, args: &[&str]) -> Running {
        let mut cmd = self.command("send");
        cmd.args(paths).arg("--to").arg(ticket).args(args);
        Running::spawn("send", cmd)
    }

    /// Runs `haul send PATHS... --to TICKET ARGS` to completion.
    pub fn send(&self, paths: &[&Path], ticket: &str, args: &[&str]) -> Outcome {
        self.spawn_send(paths, ticket, args).wait()
    }

    /// Runs `haul copy SRCS... DST ARGS` to completion.
    pub fn copy(&self, srcs: &[&Path], dst: &Path, args: &[&str]) -> Outcome {
        let mut cmd = self.command("copy");
        cmd.args(srcs).arg(dst).args(args);
        Running::spawn("copy", cmd).wait()
    }

    /// Runs haul with arbitrary arguments to completion.
    pub fn run(&self, args: &[&OsStr]) -> Outcome {
        let mut cmd = self.base();
        cmd.args(args);
        Running::spawn("(raw)", cmd).wait()
    }

    /// One whole transfer: starts a receiver into `dest`, sends `paths` to it, waits for both.
    pub fn transfer(
        &self,
        paths: &[&Path],
        dest: &Path,
        send_args: &[&str],
        recv_args: &[&str],
    ) -> (Outcome, Outcome) {
        let recv = self.recv(dest, recv_args);
        let sent = self.send(paths, &recv.ticket, send_args);
        let received = recv.wait();
        (sent, received)
    }
}

/// A receiver that has printed its ticket.
#[derive(Debug)]
pub struct Recv {
    /// The process.
    pub proc: Running,
    /// The ticket from its first stdout line.
    pub ticket: String,
}

impl Recv {
    /// Waits for the receiver to exit (see [`Running::wait`]).
    pub fn wait(self) -> Outcome {
        self.proc.wait()
    }

    /// Kills the receiver and collects its outcome.
    pub fn kill(self) -> Outcome {
        self.proc.kill()
    }
}

/// Starts a receiver as the current user (see [`Haul::recv`]).
pub fn recv(dir: &Path, args: &[&str]) -> Recv {
    Haul::new().recv(dir, args)
}

/// Runs a sender as the current user (see [`Haul::send`]).
pub fn send(paths: &[&Path], ticket: &str, args: &[&str]) -> Outcome {
    Haul::new().send(paths, ticket, args)
}

/// Runs a local copy as the current user (see [`Haul::copy`]).
pub fn copy(srcs: &[&Path], dst: &Path, args: &[&str]) -> Outcome {
    Haul::new().copy(srcs, dst, args)
}

/// One whole transfer as the current user (see [`Haul::transfer`]).
pub fn transfer(
    paths: &[&Path],
    dest: &Path,
    send_args: &[&str],
    recv_args: &[&str],
) -> (Outcome, Outcome) {
    Haul::new().transfer(paths, dest, send_args, recv_args)
}

/// Asserts a successful transfer: both sides exit 0, and the receiver printed nothing on
/// stdout after its ticket.
pub fn assert_transfer_ok(sent: &Outcome, received: &Outcome) {
    assert!(
        sent.code() == Some(0) && received.code() == Some(0),
        "transfer failed\n{}\n{}",
        sent.describe(),
        received.describe()
    );
    assert!(
        received.stdout_after_first_line().is_empty(),
        "recv printed more than the ticket on stdout (not a terminal)\n{}",
        received.describe()
    );
}
