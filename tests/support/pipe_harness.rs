//! Helpers of the pipe-mode end-to-end tests (`tests/e2e_pipe.rs`): processes wired by
//! pipes (stdin, stdout and the test's own threads in between), receivers that write a
//! ticket file, senders whose stdin the test feeds, the `--json` report's fields, a pair of
//! network namespaces to cut connections in, and a peak-RSS watcher.
//!
//! Every process runs under a generous deadline and is killed (by pid) if the test ends
//! first; nothing here sleeps to guess that something happened, it polls for it.

use std::fs;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::{haul_bin, Outcome, Rng, MIB};

/// Longest any one process of these tests may run: only turns a hang into a failure.
pub const DEADLINE: Duration = Duration::from_secs(240);
/// How long a receiver may take to write its ticket file.
pub const TICKET_DEADLINE: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------
// Processes

/// A child process whose stderr (and optionally stdout) is collected; killed by its pid if
/// dropped before it was waited for.
pub struct Proc {
    name: String,
    child: Child,
    stdout: Option<JoinHandle<Vec<u8>>>,
    stderr: Option<JoinHandle<Vec<u8>>>,
    reaped: bool,
}

impl Proc {
    /// Starts `cmd` with stderr captured; stdin and stdout are what `cmd` says.
    pub fn start(name: &str, mut cmd: Command) -> Proc {
        cmd.stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let mut err = child.stderr.take().unwrap();
        let stderr = thread::spawn(move || {
            let mut all = Vec::new();
            let _ = err.read_to_end(&mut all);
            all
        });
        Proc {
            name: name.to_string(),
            child,
            stdout: None,
            stderr: Some(stderr),
            reaped: false,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn take_stdin(&mut self) -> ChildStdin {
        self.child.stdin.take().expect("stdin was not piped")
    }

    pub fn take_stdout(&mut self) -> ChildStdout {
        self.child.stdout.take().expect("stdout was not piped")
    }

    /// Collects the (piped) stdout in memory, for [`Outcome::stdout`].
    pub fn capture_stdout(&mut self) {
        let mut out = self.take_stdout();
        self.stdout = Some(thread::spawn(move || {
            let mut all = Vec::new();
            let _ = out.read_to_end(&mut all);
            all
        }));
    }

    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Waits for the exit, at most [`DEADLINE`] (then kills it and panics).
    pub fn wait(mut self) -> Outcome {
        let until = Instant::now() + DEADLINE;
        while !self.exited() {
            if Instant::now() > until {
                let _ = self.child.kill();
                let out = self.collect();
                panic!(
                    "{} did not exit within {DEADLINE:?}; killed it\n{}",
                    out.name,
                    out.describe()
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
        self.collect()
    }

    fn collect(&mut self) -> Outcome {
        let status = self.child.wait().expect("wait");
        self.reaped = true;
        let join =
            |h: Option<JoinHandle<Vec<u8>>>| h.map(|h| h.join().unwrap()).unwrap_or_default();
        Outcome {
            name: self.name.clone(),
            status,
            stdout: join(self.stdout.take()),
            stderr: String::from_utf8_lossy(&join(self.stderr.take())).into_owned(),
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

/// `haul ARGS...`, optionally inside network namespace `ns`.
pub fn haul(ns: Option<&str>, args: &[&str]) -> Command {
    let mut cmd = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, haul_bin()]);
            c
        }
        None => Command::new(haul_bin()),
    };
    cmd.args(args);
    cmd.stdin(Stdio::null()).stdout(Stdio::null());
    cmd
}

/// Waits until the receiver wrote its ticket file, failing if it exits first.
pub fn await_ticket(recv: &mut Proc, file: &Path) {
    let until = Instant::now() + TICKET_DEADLINE;
    while !fs::metadata(file).is_ok_and(|m| m.len() > 0) {
        if recv.exited() {
            let out = recv.collect();
            panic!("recv exited without a ticket\n{}", out.describe());
        }
        assert!(
            Instant::now() < until,
            "no ticket within {TICKET_DEADLINE:?}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Copies `from` into `to` (when given), hashing it and counting it into `progress`; the
/// thread yields (length, BLAKE3). `throttle` caps the rate in bytes per second.
pub fn drain(
    mut from: impl Read + Send + 'static,
    mut to: Option<Box<dyn Write + Send>>,
    progress: Arc<AtomicU64>,
    throttle: Option<u64>,
) -> JoinHandle<(u64, blake3::Hash)> {
    thread::spawn(move || {
        let mut hasher = blake3::Hasher::new();
        let mut buf = vec![0u8; 64 << 10];
        let (mut total, started) = (0u64, Instant::now());
        loop {
            if let Some(rate) = throttle {
                let due = Duration::from_secs_f64(total as f64 / rate as f64);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    thread::sleep(wait);
                }
            }
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            hasher.update(&buf[..n]);
            if let Some(w) = to.as_mut() {
                if w.write_all(&buf[..n]).is_err() {
                    to = None;
                }
            }
            total += n as u64;
            progress.store(total, Ordering::Relaxed);
        }
        (total, hasher.finalize())
    })
}

/// Writes `len` seeded random bytes into `to`, yielding their BLAKE3 (a write error stops
/// it early; the hash is then of what was generated, which the caller does not use).
pub fn feed_random(mut to: ChildStdin, len: u64, seed: u64) -> JoinHandle<blake3::Hash> {
    thread::spawn(move || {
        let mut rng = Rng::new(seed);
        let mut hasher = blake3::Hasher::new();
        let mut buf = vec![0u8; MIB as usize];
        let mut left = len;
        while left > 0 {
            let n = left.min(MIB) as usize;
            rng.fill(&mut buf[..n]);
            hasher.update(&buf[..n]);
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
            left -= n as u64;
        }
        hasher.finalize()
    })
}

/// The value of `"key":` in the last JSON object line of `text`.
pub fn json_field(text: &str, key: &str) -> Option<String> {
    let line = text.lines().rev().find(|l| l.starts_with('{'))?;
    let pat = format!("\"{key}\":");
    let rest = &line[line.find(&pat)? + pat.len()..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim_matches('"').to_string())
}

pub fn json_u64(out: &Outcome, text: &str, key: &str) -> u64 {
    json_field(text, key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no numeric {key:?} in the JSON\n{}", out.describe()))
}

pub fn assert_ok(outs: &[&Outcome]) {
    for o in outs {
        assert_eq!(o.code(), Some(0), "{} failed\n{}", o.name, o.describe());
    }
}

/// Asserts that `o` failed with an exit code (not a signal, not 0) and said why.
pub fn assert_failed_clearly(o: &Outcome, words: &[&str]) {
    assert!(
        o.code().is_some_and(|c| c != 0),
        "{} should have failed with an exit code\n{}",
        o.name,
        o.describe()
    );
    let lower = o.stderr.to_lowercase();
    assert!(
        lower.contains("haul:") && words.iter().any(|w| lower.contains(w)),
        "{} failed without a message naming any of {words:?}\n{}",
        o.name,
        o.describe()
    );
}

/// A receiver started with `--ticket-file`, and the ticket file's path.
pub fn start_recv(
    ns: Option<&str>,
    listen: &str,
    ticket: &Path,
    args: &[&str],
    stdout: Stdio,
) -> Proc {
    let t = ticket.to_str().unwrap();
    let mut cmd = haul(
        ns,
        &["recv", "--ticket-file", t, "--listen", listen, "--json"],
    );
    cmd.args(args).stdout(stdout);
    let mut recv = Proc::start("recv", cmd);
    await_ticket(&mut recv, ticket);
    recv
}

/// A sender of stdin (piped), its stdout (the JSON) captured.
pub fn start_send(ns: Option<&str>, ticket: &Path, args: &[&str]) -> Proc {
    let t = ticket.to_str().unwrap();
    let mut cmd = haul(ns, &["send", "--ticket-file", t, "--json"]);
    cmd.args(args).stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut send = Proc::start("send", cmd);
    send.capture_stdout();
    send
}

/// Two network namespaces joined by a veth pair, deleted (with what runs inside) on drop.
pub struct Netlab {
    /// The sender's namespace.
    pub a: String,
    /// The receiver's namespace.
    pub b: String,
    /// The address in `a`.
    pub ip_a: &'static str,
    /// The address in `b`.
    pub ip_b: &'static str,
}

impl Netlab {
    /// `hpA<pid>` (198.18.200.1) and `hpB<pid>` (198.18.200.2); the sender's side capped
    /// at `rate` (a tc rate) so that the stream takes long enough to be cut.
    pub fn up(rate: &str) -> Netlab {
        let pid = std::process::id();
        let lab = Netlab {
            a: format!("hpA{pid}"),
            b: format!("hpB{pid}"),
            ip_a: "198.18.200.1",
            ip_b: "198.18.200.2",
        };
        let (dev_a, dev_b) = (format!("vhA{pid}"), format!("vhB{pid}"));
        let (a, b) = (lab.a.as_str(), lab.b.as_str());
        ip(&["netns", "add", a]);
        ip(&["netns", "add", b]);
        ip(&[
            "link", "add", &dev_a, "netns", a, "type", "veth", "peer", "name", &dev_b, "netns", b,
        ]);
        for (ns, dev, addr) in [(a, &dev_a, lab.ip_a), (b, &dev_b, lab.ip_b)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/30"), "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        ip(&[
            "netns", "exec", a, "tc", "qdisc", "replace", "dev", &dev_a, "root", "tbf", "rate",
            rate, "burst", "256k", "limit", "1m",
        ]);
        lab
    }

    /// `haul send --json FILE --ticket-file WORK/ticket ARGS...` in `a`, to a `haul recv -q
    /// --listen` into `WORK/dst` in `b`; waits for both and returns (send, recv), the
    /// sender's stdout (its JSON report) captured.
    pub fn send_file(&self, work: &Path, file: &Path, args: &[&str]) -> (Outcome, Outcome) {
        let (ticket, dst) = (work.join("ticket"), work.join("dst"));
        let listen = format!("{}:0", self.ip_b);
        let (ticket_arg, dst_arg) = (ticket.to_str().unwrap(), dst.to_str().unwrap());
        let recv_args = ["recv", "-q", "--listen", &listen, dst_arg];
        let mut recv = haul(Some(&self.b), &recv_args);
        recv.args(["--ticket-file", ticket_arg]);
        let mut recv = Proc::start("recv", recv);
        await_ticket(&mut recv, &ticket);
        let mut send = haul(Some(&self.a), &["send", "--json"]);
        send.arg(file)
            .args(["--ticket-file", ticket_arg])
            .args(args);
        send.stdout(Stdio::piped());
        let mut send = Proc::start("send", send);
        send.capture_stdout();
        (send.wait(), recv.wait())
    }

    /// Kills the established TCP connections `filter` selects inside `ns`; returns how
    /// many `ss` listed.
    pub fn cut(&self, ns: &str, filter: &[&str]) -> usize {
        let mut args = vec![
            "netns",
            "exec",
            ns,
            "ss",
            "-HK",
            "-t",
            "state",
            "established",
        ];
        args.extend_from_slice(filter);
        let out = Command::new("ip").args(&args).output().expect("run ss -K");
        assert!(
            out.status.success(),
            "ss -K failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count()
    }
}

impl Drop for Netlab {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    if let Ok(pid) = pid.parse::<i32>() {
                        // SAFETY: plain kill(2) of a process inside our own namespace.
                        unsafe { libc::kill(pid, libc::SIGKILL) };
                    }
                }
            }
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Peak resident memory (VmHWM, KiB) of each of `pids`, polled until each has exited.
pub fn watch_peak_rss(pids: Vec<u32>, done: Arc<AtomicBool>) -> JoinHandle<Vec<u64>> {
    thread::spawn(move || {
        let mut peaks = vec![0u64; pids.len()];
        // Once a process is gone its pid may be reused: stop reading it.
        let mut gone = vec![false; pids.len()];
        while !done.load(Ordering::Relaxed) {
            for (i, pid) in pids.iter().enumerate() {
                if gone[i] {
                    continue;
                }
                let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                let hwm = status
                    .lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
                match hwm {
                    Some(kib) => peaks[i] = peaks[i].max(kib),
                    None => gone[i] = true,
                }
            }
            thread::sleep(Duration::from_millis(20));
        }
        peaks
    })
}
