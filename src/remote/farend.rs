//! Starting the far end over the remote shell (`ssh host 'sh -c …'`), copying this
//! executable there when the far host has no usable haul, and the instruction channel
//! (one JSON line each way, see `wire`).
//!
//! **Starting.** One ssh session runs a small POSIX sh script on the far host. It asks the
//! configured remote haul for its versions (`haul serve --probe`, stdin closed); when they
//! match it `exec`s `haul serve`. Otherwise it prints `haul-upload`, reads exactly this
//! binary's size from stdin into a fresh `mktemp -d` directory (umask 077), runs that copy
//! with `serve --uploaded` (which greets with the BLAKE3 of its own executable, compared
//! here with the bytes sent) and removes the directory when it exits (trap on EXIT). One
//! session, so the user authenticates once, and nothing is installed.
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

use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use super::rsh::{sh_quote, spawn_prefixer, Rsh};
use super::wire::{self, Reply, Request};
use crate::config::RemotePath;
use crate::error::{exit, Error, Result};
use crate::transport;

/// Most lines of noise (a chatty login script) skipped before the greeting.
const MAX_NOISE_LINES: usize = 1000;
/// What the upload request line says.
const UPLOAD_LINE: &str = "haul-upload";

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
    /// Starts `haul serve` on `at`'s host and waits for its greeting, uploading this
    /// executable first when the far host has no usable haul.
    pub fn start(rsh: &Rsh, at: &RemotePath, remote_haul: &str, quiet: bool) -> Result<FarEnd> {
        let host = at.host.clone();
        let exe = Path::new("/proc/self/exe");
        let size = std::fs::metadata(exe)
            .map_err(|e| Error::io("reading this executable's size", e))?
            .len();
        let sha256 = exe_sha256(exe)?;
        let mut cmd = rsh.command();
        cmd.arg(at.ssh_destination())
            .arg(format!(
                "sh -c {}",
                sh_quote(&bootstrap_script(remote_haul, size, &sha256))
            ))
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
        match far.next_greeting()? {
            Greeted::Ready(g) => far.check_greeting(&g, None)?,
            Greeted::Upload => {
                if !quiet {
                    eprintln!(
                        "haul: {}: no usable haul at '{remote_haul}' there; copying this one \
                         ({:.1} MB) to a private temporary directory for this transfer",
                        far.host,
                        size as f64 / 1e6
                    );
                }
                let hash = far.upload(exe, size)?;
                match far.next_greeting()? {
                    Greeted::Ready(g) => far.check_greeting(&g, Some(&hash))?,
                    Greeted::Upload => return Err(far.error("asked twice for an upload")),
                }
            }
        }
        Ok(far)
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
            if line == UPLOAD_LINE {
                return Ok(Greeted::Upload);
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

    /// Streams `size` bytes of the executable to the far end's stdin; their BLAKE3, hex.
    fn upload(&mut self, exe: &Path, size: u64) -> Result<String> {
        let mut f =
            std::fs::File::open(exe).map_err(|e| Error::io("reading this executable", e))?;
        let mut hasher = blake3::Hasher::new();
        let mut left = size;
        let mut buf = vec![0u8; 1 << 20];
        let Some(stdin) = self.stdin.as_mut() else {
            return Err(self.error("the instruction channel is closed"));
        };
        let mut failed = None;
        while left > 0 {
            let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            let n = match f.read(&mut buf[..want]) {
                Ok(0) => {
                    failed = Some(Error::io(
                        "reading this executable",
                        io::Error::new(io::ErrorKind::UnexpectedEof, "it shrank while copying"),
                    ));
                    break;
                }
                Ok(n) => n,
                Err(e) => {
                    failed = Some(Error::io("reading this executable", e));
                    break;
                }
            };
            hasher.update(&buf[..n]);
            if stdin.write_all(&buf[..n]).is_err() {
                break;
            }
            left -= n as u64;
        }
        if let Some(e) = failed {
            return Err(e);
        }
        if left > 0 || stdin.flush().is_err() {
            return Err(self.gone("copying haul there"));
        }
        Ok(hasher.finalize().to_hex().to_string())
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
            Reply::Done {
                code,
                message,
                files,
                bytes,
                deleted,
            } => Err(self.done_error(&Done {
                code,
                message,
                files,
                bytes,
                deleted,
            })),
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
            if let Ok(Reply::Done {
                code,
                message,
                files,
                bytes,
                deleted,
            }) = wire::decode::<Reply>(&line)
            {
                done = Some(Done {
                    code,
                    message,
                    files,
                    bytes,
                    deleted,
                });
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

/// The far end's final word.
#[derive(Clone, Debug)]
pub struct Done {
    /// Its exit code.
    pub code: i32,
    /// Its error, when `code` is not 0.
    pub message: String,
    /// Files moved.
    pub files: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Entries removed by `--delete`.
    pub deleted: u64,
}

enum Greeted {
    Ready(wire::Greeting),
    Upload,
}

/// The script the far host's shell runs (through `sh -c`, whatever the login shell is).
fn bootstrap_script(remote_haul: &str, size: u64, sha256: &str) -> String {
    let probe = wire::greeting(None);
    format!(
        r#"h={haul}
if [ "$("$h" serve --probe </dev/null 2>/dev/null)" = '{probe}' ]; then exec "$h" serve; fi
echo {UPLOAD_LINE}
m=$(umask)
umask 077
d=$(mktemp -d "${{TMPDIR:-/tmp}}/haul.XXXXXXXX") || exit 1
trap 'rm -rf "$d"' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
head -c {size} > "$d/haul" || exit 1
if command -v sha256sum >/dev/null 2>&1; then
  [ "$(sha256sum < "$d/haul")" = '{sha256}  -' ] || {{ echo 'haul: the uploaded copy of haul is damaged (SHA-256 differs); not running it' >&2; exit 1; }}
fi
chmod 700 "$d/haul" || exit 1
umask "$m"
"$d/haul" serve --uploaded"#,
        haul = sh_quote(remote_haul),
    )
}

/// SHA-256 of this process's executable, hex: the far shell checks the upload with
/// `sha256sum` (coreutils, on every Linux host) before running it. BLAKE3 would need a
/// tool the far host does not have.
fn exe_sha256(exe: &Path) -> Result<String> {
    let mut f = std::fs::File::open(exe).map_err(|e| Error::io("reading this executable", e))?;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => ctx.update(&buf[..n]),
            Err(e) => return Err(Error::io("reading this executable", e)),
        }
    }
    Ok(ctx
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn script_is_plain_sh() {
        let s = bootstrap_script("/opt/my haul/it's", 1234, "ab12");
        assert!(s.contains("= 'ab12  -' ]"));
        assert!(s.contains(r"h='/opt/my haul/it'\''s'"));
        assert!(s.contains("head -c 1234 "));
        assert!(s.contains(&format!("= '{}' ]", wire::greeting(None))));
        // Valid sh syntax.
        let ok = Command::new("sh")
            .arg("-n")
            .arg("-c")
            .arg(&s)
            .status()
            .map(|st| st.success())
            .unwrap_or(true);
        assert!(ok, "{s}");
    }

    /// A damaged upload is refused before it runs: the "binary" here is a script that
    /// would leave a marker, sent with the hash of other bytes.
    #[test]
    fn damaged_upload_is_not_run() {
        let d = tempfile::tempdir().unwrap();
        let marker = d.path().join("ran");
        let body = format!("#!/bin/sh\ntouch '{}'\n", marker.display());
        let script = bootstrap_script(
            "/nonexistent/haul",
            body.len() as u64,
            "0000000000000000000000000000000000000000000000000000000000000000",
        );
        let out = run_script(&script, d.path(), body.as_bytes());
        assert!(!out.status.success());
        assert!(!marker.exists(), "the damaged upload was run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("damaged"), "{err}");
        // The same bytes with their own hash are run.
        let good = exe_sha256_of(body.as_bytes());
        let script = bootstrap_script("/nonexistent/haul", body.len() as u64, &good);
        let _ = run_script(&script, d.path(), body.as_bytes());
        assert!(marker.exists(), "an intact upload was not run");
    }

    /// Runs the bootstrap script with `input` on stdin and TMPDIR in `tmp`.
    fn run_script(script: &str, tmp: &Path, input: &[u8]) -> std::process::Output {
        use std::io::Write as _;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .env("TMPDIR", tmp)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        child.wait_with_output().unwrap()
    }

    fn exe_sha256_of(bytes: &[u8]) -> String {
        ring::digest::digest(&ring::digest::SHA256, bytes)
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}
