//! Child processes wired to each other: a producer's stdout into `haul send -`, `haul recv -`
//! into a consumer's stdin, and long-running servers that say on stderr when they are
//! ready. [`Running`] owns its child's stdin and stdout; a [`Proc`] leaves them to the
//! caller and reads only stderr, line by line.
//!
//! An exit is noticed when stderr closes; each wait is bounded, and a process still
//! running when its `Proc` is dropped is killed (by pid, not yet reaped) and reaped.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::process::{Running, PROCESS_TIMEOUT};

/// A child whose stdin/stdout the caller wires (to another child, unlike [`Running`]),
/// with stderr read line by line; killed and reaped when dropped.
pub struct Proc {
    name: String,
    /// The child, for taking the stdio handles the caller asked to be piped.
    pub child: Child,
    lines: Receiver<String>,
    stderr_log: Arc<Mutex<String>>,
    stderr_thread: Option<JoinHandle<()>>,
    stdout_thread: Option<JoinHandle<Vec<u8>>>,
    reaped: bool,
}

/// How a [`Proc`] ended.
pub struct Finished {
    /// What it was started as.
    pub name: String,
    /// The exit status.
    pub status: ExitStatus,
    /// Its stdout, when piped and not taken by the caller.
    pub stdout: Vec<u8>,
    /// Its stderr, lossily decoded.
    pub stderr: String,
}

impl Finished {
    /// Panics, showing the output, unless the exit status is 0.
    pub fn assert_success(&self) {
        assert!(
            self.status.success(),
            "{} failed ({:?})\n{}",
            self.name,
            self.status,
            self.describe()
        );
    }

    /// The status and output, for failure messages.
    pub fn describe(&self) -> String {
        format!(
            "--- {} ({:?}) stdout ---\n{}\n--- stderr ---\n{}",
            self.name,
            self.status,
            String::from_utf8_lossy(&self.stdout),
            self.stderr
        )
    }
}

/// Starts a [`Proc`] from a `Command`.
pub trait SpawnProc {
    /// Spawns with stderr captured; a piped stdout the caller did not take is captured too.
    fn spawn_proc(&mut self, name: &str) -> Proc;
}

impl SpawnProc for Command {
    fn spawn_proc(&mut self, name: &str) -> Proc {
        self.stderr(Stdio::piped());
        let mut child = self
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({self:?}): {e}"));
        let stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        let stderr_log = Arc::new(Mutex::new(String::new()));
        let log = Arc::clone(&stderr_log);
        // The channel closes at stderr's EOF, which is how an exit is noticed.
        let stderr_thread = thread::spawn(move || {
            for line in BufReader::new(stderr).split(b'\n').map_while(Result::ok) {
                let line = String::from_utf8_lossy(&line).into_owned();
                let mut all = log.lock().unwrap();
                all.push_str(&line);
                all.push('\n');
                drop(all);
                let _ = tx.send(line);
            }
        });
        Proc {
            name: name.to_string(),
            child,
            lines,
            stderr_log,
            stderr_thread: Some(stderr_thread),
            stdout_thread: None,
            reaped: false,
        }
    }
}

impl Proc {
    /// The first stderr line; panics if none comes within `timeout`.
    pub fn first_stderr_line(&mut self, timeout: Duration) -> String {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => line,
            Err(e) => {
                let out = self.kill_now();
                panic!(
                    "{} printed no stderr line ({e:?})\n{}",
                    self.name,
                    out.describe()
                )
            }
        }
    }

    /// Waits for a stderr line containing `needle`; panics (showing the log) if the process
    /// exits or `timeout` passes first.
    pub fn wait_stderr_for(&mut self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return,
                Ok(_) => {}
                Err(e) => {
                    let out = self.kill_now();
                    panic!(
                        "{} did not print {needle:?} ({e:?})\n{}",
                        self.name,
                        out.describe()
                    )
                }
            }
        }
    }

    /// Everything it wrote to stderr so far.
    pub fn stderr_so_far(&self) -> String {
        self.stderr_log
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// Waits for the exit (stderr closing, then the reap); kills it and panics after
    /// [`PROCESS_TIMEOUT`].
    pub fn finish(mut self) -> Finished {
        if self.stdout_thread.is_none() {
            if let Some(mut out) = self.child.stdout.take() {
                self.stdout_thread = Some(thread::spawn(move || {
                    let mut all = Vec::new();
                    let _ = out.read_to_end(&mut all);
                    all
                }));
            }
        }
        if !self.stderr_closed_within(PROCESS_TIMEOUT) {
            let out = self.kill_now();
            panic!(
                "{} did not exit in time; killed it\n{}",
                self.name,
                out.describe()
            );
        }
        self.collect(true)
    }

    /// Sends `signal`, waits up to `grace` for the exit, then kills; always reaps.
    pub fn stop(&mut self, signal: libc::c_int, grace: Duration) {
        if self.reaped {
            return;
        }
        // SAFETY: our own child, not yet reaped, so the pid is still ours.
        unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        let _ = self.stderr_closed_within(grace);
        let _ = self.kill_now();
    }

    /// Whether stderr reached EOF within `timeout` (lines still arriving are skipped).
    fn stderr_closed_within(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(_) => {}
                Err(RecvTimeoutError::Disconnected) => return true,
                Err(RecvTimeoutError::Timeout) => return false,
            }
        }
    }

    fn kill_now(&mut self) -> Finished {
        // Not yet reaped, so the pid cannot have been reused.
        let _ = self.child.kill();
        self.collect(false)
    }

    /// Reaps the child; `exited` when its stderr closed, so its stdout reader ends too
    /// (after a kill, an orphaned helper may still hold the pipes: do not wait for them).
    fn collect(&mut self, exited: bool) -> Finished {
        let status = self.child.wait().expect("wait");
        self.reaped = true;
        let stdout = match self.stdout_thread.take() {
            Some(h) if exited || h.is_finished() => h.join().unwrap_or_default(),
            _ => Vec::new(),
        };
        if let Some(h) = self.stderr_thread.take() {
            if exited || h.is_finished() {
                let _ = h.join();
            }
        }
        Finished {
            name: self.name.clone(),
            status,
            stdout,
            stderr: self.stderr_log.lock().unwrap().clone(),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
