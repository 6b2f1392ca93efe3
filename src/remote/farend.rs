//! Starting the far end over the remote shell (`ssh host 'sh -c …'`), copying this
//! executable there when the far host has no usable haul, and the instruction channel
//! (instruction lines each way, see `wire`).
//!
//! **Starting.** One ssh session runs a small POSIX sh script on the far host (`upload`).
//! It asks the configured remote haul for its versions (`haul serve --probe`, stdin
//! closed); when they match it `exec`s `haul serve`. Otherwise it runs this executable's
//! copy: from the far user's private cache when the copy there is intact (`haul-cached`),
//! or after reading exactly this binary's size from stdin (`haul-upload-cache`, or
//! `haul-upload` for a temporary directory removed on exit). The copy greets with the
//! BLAKE3 of its own executable, compared here with this one's. One session, so the user
//! authenticates once, and nothing is installed. Up to 1,000 lines of login-script noise
//! before the greeting are skipped.
//!
//! **Prompts and errors.** ssh's stdin and stdout are ours (the instruction channel); its
//! password and host-key prompts use the terminal directly, as with scp. Its stderr, and so
//! the far end's, is shown line by line prefixed with the host name.
//!
//! **One authentication.** When the remote shell command is ssh, the session is made a
//! connection master (`ControlMaster=auto`, a private `ControlPath`), so tunnels opened
//! later ride on it without asking again.
//!
//! Not here: what the far end does (`serve`), the data connections (`route`), or choosing
//! push/pull (`mod`).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use super::rsh::{sh_quote, spawn_prefixer, Rsh};
use super::upload::{self, Exe, Stopped};
pub use super::wire::Done;
use super::wire::{self, Reply, Request};
use crate::config::{RemotePath, SshOptions};
use crate::error::{exit, Error, Result};
use crate::progress::escape;
use crate::transport;

/// Most lines of noise (a chatty login script) skipped before the greeting.
const MAX_NOISE_LINES: usize = 1000;

/// One far end: the ssh process running `haul serve` on a host.
pub struct FarEnd {
    /// The host, as the user wrote it (for messages).
    pub host: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Option<String>>,
    stderr: Option<JoinHandle<()>>,
    reaped: Option<ExitStatus>,
}

impl FarEnd {
    /// Starts `haul serve` on `at`'s host and waits for its greeting, running this
    /// executable's copy there when the far host has no usable haul: from the far user's
    /// cache, or uploaded first (see `upload`).
    pub fn start(rsh: &Rsh, at: &RemotePath, ssh: &SshOptions, quiet: bool) -> Result<FarEnd> {
        let host = at.host.clone();
        let remote_haul = &ssh.remote_haul;
        let exe_path = Path::new("/proc/self/exe");
        let exe = Exe::read(exe_path)?;
        let script = upload::bootstrap_script(remote_haul, exe.size, &exe.sha256, ssh.cache);
        let mut cmd = rsh.command();
        cmd.arg(at.ssh_destination())
            .arg(format!("sh -c {}", sh_quote(&script)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| Error::Host {
            host: host.clone(),
            message: format!("cannot run '{}': {e}", rsh.words[0]),
            code: exit::NETWORK,
        })?;
        let stdin = child.stdin.take();
        let lines = spawn_line_reader(child.stdout.take());
        let stderr = child
            .stderr
            .take()
            .and_then(|e| spawn_prefixer(e, host.clone()));
        let mut far = FarEnd {
            host,
            child,
            stdin,
            lines,
            stderr,
            reaped: None,
        };
        let (host, haul) = (escape(&far.host), escape(remote_haul));
        let say = |what: &str| {
            if !quiet {
                eprintln!("haul: {host}: no usable haul at '{haul}' there; {what}");
            }
        };
        let mib = exe.size as f64 / (1 << 20) as f64;
        let expect = match far.next_greeting()? {
            Greeted::Ready(g) => return far.check_greeting(&g, None).map(|()| far),
            Greeted::Cached => {
                say("running this one's copy cached there");
                exe.blake3
            }
            Greeted::Upload { cache } => {
                say(&match cache {
                    true => format!("copying this one ({mib:.1} MiB) to your cache there"),
                    false => format!(
                        "copying this one ({mib:.1} MiB) to a private temporary directory \
                         for this transfer"
                    ),
                });
                far.upload(exe_path, exe.size, quiet)?
            }
        };
        match far.next_greeting()? {
            Greeted::Ready(g) => far.check_greeting(&g, Some(&expect))?,
            _ => return Err(far.error("asked twice for an upload")),
        }
        Ok(far)
    }

    /// Streams `size` bytes of the executable to the far end's stdin; their BLAKE3, hex.
    fn upload(&mut self, exe: &Path, size: u64, quiet: bool) -> Result<String> {
        let Some(stdin) = self.stdin.as_mut() else {
            return Err(self.error("the instruction channel is closed"));
        };
        match upload::stream(exe, size, stdin, &self.host, quiet) {
            Ok(hash) => Ok(hash),
            Err(Stopped::Local(e)) => Err(e),
            Err(Stopped::Gone) => Err(self.gone("copying haul there")),
        }
    }

    /// An error about this host, carrying `code`.
    fn error_code(&self, message: impl Into<String>, code: i32) -> Error {
        Error::Host {
            host: self.host.clone(),
            message: message.into(),
            code,
        }
    }

    fn error(&self, message: impl Into<String>) -> Error {
        self.error_code(message, exit::INTEGRITY)
    }

    /// The next line, `None` when the far end closed its stdout.
    fn next_line(&mut self) -> Option<String> {
        self.lines.recv().ok().flatten()
    }

    /// Why the far end went away without a word: ssh's or the shell's exit status.
    fn gone(&mut self, doing: &str) -> Error {
        let status = self.wait_exit(Duration::from_secs(10));
        let code = status.and_then(|s| s.code());
        let (message, code) = match code {
            Some(255) => (
                format!("ssh failed while {doing} (exit status 255; see ssh's message above)"),
                exit::NETWORK,
            ),
            Some(126) | Some(127) => (
                format!(
                    "the far end could not run haul while {doing} (exit status {}: \
                     another architecture, or a temporary directory mounted noexec?)",
                    code.unwrap_or_default()
                ),
                exit::OTHER,
            ),
            Some(c) => (
                format!("the far end exited with status {c} while {doing}"),
                if c == 0 { exit::NETWORK } else { c },
            ),
            None => (
                format!("the far end was killed while {doing}"),
                exit::NETWORK,
            ),
        };
        self.error_code(message, code)
    }

    fn next_greeting(&mut self) -> Result<Greeted> {
        for _ in 0..MAX_NOISE_LINES {
            let Some(line) = self.next_line() else {
                return Err(self.gone("starting haul there"));
            };
            let line = line.trim_end();
            match line {
                upload::UPLOAD_LINE => return Ok(Greeted::Upload { cache: false }),
                upload::UPLOAD_CACHE_LINE => return Ok(Greeted::Upload { cache: true }),
                upload::CACHED_LINE => return Ok(Greeted::Cached),
                _ => {}
            }
            if let Some(g) = wire::parse_greeting(line) {
                return Ok(Greeted::Ready(g));
            }
            // Noise from a login script: rsync would fail here; we skip it.
        }
        Err(self.error("too much unexpected output before haul started (is the shell clean?)"))
    }

    fn check_greeting(&self, g: &wire::Greeting, expect_hash: Option<&str>) -> Result<()> {
        if !g.compatible() {
            return Err(self.error_code(
                format!(
                    "haul there speaks serve/protocol version {}/{}, we speak {}/{}",
                    g.serve,
                    g.protocol,
                    wire::SERVE_VERSION,
                    transport::PROTOCOL_VERSION
                ),
                exit::VERSION,
            ));
        }
        if let Some(want) = expect_hash {
            if g.hash.as_deref() != Some(want) {
                return Err(self.error(
                    "the copy of haul uploaded there does not match this one (BLAKE3 differs)",
                ));
            }
        }
        Ok(())
    }

    /// Sends one instruction line.
    pub fn send(&mut self, req: &Request) -> Result<()> {
        let line = wire::encode(req);
        let ok = match self.stdin.as_mut() {
            Some(s) => writeln!(s, "{line}").and_then(|()| s.flush()).is_ok(),
            None => false,
        };
        if ok {
            Ok(())
        } else {
            Err(self.gone("sending instructions"))
        }
    }

    /// The far end's next message; its exit status when it went away instead.
    pub fn recv(&mut self, doing: &str) -> Result<Reply> {
        let Some(line) = self.next_line() else {
            return Err(self.gone(doing));
        };
        wire::decode(&line).map_err(|m| self.error(format!("{m} (while {doing})")))
    }

    /// Waits for the far end's `Ready`; a `Done` instead (it failed to set up) becomes its
    /// error, with its host and exit code.
    pub fn ready(&mut self, doing: &str) -> Result<Ready> {
        match self.recv(doing)? {
            Reply::Ready {
                ticket,
                port,
                single_file,
                rename,
            } => Ok(Ready {
                ticket,
                port,
                single_file,
                rename,
            }),
            Reply::Probed { .. } | Reply::SourceProbed(_) => Err(self.error(format!(
                "a probe's result where it should be ready (while {doing})"
            ))),
            Reply::Done(d) => Err(self.done_error(&d)),
        }
    }

    /// Waits up to `wait` (`None`: as long as it takes) for the far end's `Done`, then
    /// closes its stdin and reaps it. `None` when it went away without one.
    pub fn finish(&mut self, wait: Option<Duration>) -> Option<Done> {
        let deadline = wait.map(|w| Instant::now() + w);
        let mut done = None;
        loop {
            let line = match deadline {
                None => self.lines.recv().ok().flatten(),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    match self.lines.recv_timeout(left) {
                        Ok(l) => l,
                        Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                            None
                        }
                    }
                }
            };
            let Some(line) = line else { break };
            if let Ok(Reply::Done(d)) = wire::decode::<Reply>(&line) {
                done = Some(d);
                break;
            }
        }
        self.stdin = None;
        self.wait_exit(Duration::from_secs(10));
        done
    }

    /// Closes stdin (the far end stops) and waits up to `grace` for the exit, then kills.
    fn wait_exit(&mut self, grace: Duration) -> Option<ExitStatus> {
        if let Some(s) = self.reaped {
            return Some(s);
        }
        self.stdin = None;
        let deadline = Instant::now() + grace;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) => {
                    let _ = self.child.kill();
                    break self.child.wait().ok();
                }
                Err(_) => break None,
            }
        };
        if let Some(h) = self.stderr.take() {
            let _ = h.join();
        }
        self.reaped = status;
        status
    }

    /// The error a far end's `Done` stands for, with the host name.
    pub fn done_error(&self, d: &Done) -> Error {
        self.error_code(d.message.clone(), d.code)
    }
}

impl Drop for FarEnd {
    fn drop(&mut self) {
        if self.reaped.is_none() {
            self.stdin = None;
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

enum Greeted {
    Ready(wire::Greeting),
    /// The far script waits for this executable (to cache it, or not).
    Upload {
        cache: bool,
    },
    /// The far script runs this executable's copy from its cache.
    Cached,
}

/// Reads stdout line by line into a channel; `None` at the end.
fn spawn_line_reader<R: Read + Send + 'static>(out: Option<R>) -> Receiver<Option<String>> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let Some(out) = out else {
        let _ = tx.send(None);
        return rx;
    };
    let r = std::thread::Builder::new()
        .name("haul-far-out".into())
        .spawn(move || {
            let mut reader = BufReader::new(out);
            loop {
                let mut line = Vec::new();
                match reader
                    .by_ref()
                    .take(wire::MAX_LINE as u64)
                    .read_until(b'\n', &mut line)
                {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if tx
                            .send(Some(String::from_utf8_lossy(&line).into_owned()))
                            .is_err()
                        {
                            return;
                        }
                    }
                }
            }
            let _ = tx.send(None);
        });
    // Without a reader thread the channel is disconnected at once: "went away".
    drop(r);
    rx
}

/// What a far end reported when it was ready (see `Reply::Ready`).
pub struct Ready {
    /// The ticket to dial, when it listens.
    pub ticket: Option<String>,
    /// Its port on its own loopback (for the ssh fallback).
    pub port: Option<u16>,
    /// Sender: whether the sources are one non-directory.
    pub single_file: bool,
    /// Receiver: the single source's new name at the destination, if renamed.
    pub rename: Option<Vec<u8>>,
}
