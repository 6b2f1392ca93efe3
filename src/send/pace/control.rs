//! Changing a running sender's cap from another shell (`haul limit RATE|off`): each
//! sender listens on a Unix socket `limit-<pid>.sock` in a directory only its user can
//! enter (root: `/run/haul`; others: `$XDG_RUNTIME_DIR/haul`, else `/tmp/haul-<uid>`),
//! accepts only peers of its own user (or root, checked with `SO_PEERCRED`), and takes
//! one line: a rate in bytes per second, or `off`.
//!
//! A directory that is not ours or that others may enter is refused (no socket, one
//! warning): nobody else can change or learn our cap. The socket goes when the sender
//! ends, by an error or by SIGINT, SIGTERM or SIGHUP ([`crate::signals`]).

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::Pacer;

/// How long a client has to send its line.
const CLIENT_WAIT: Duration = Duration::from_secs(2);

/// Where this user's senders put their sockets.
pub fn dir() -> PathBuf {
    let uid = rustix::process::geteuid();
    if uid.is_root() {
        return PathBuf::from("/run/haul");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("haul"),
        _ => PathBuf::from(format!("/tmp/haul-{}", uid.as_raw())),
    }
}

/// Creates `dir` (mode 0700) if missing and checks it is a directory of ours that no one
/// else may enter.
fn checked_dir(dir: &Path) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let m = std::fs::symlink_metadata(dir)?;
    let me = rustix::process::geteuid().as_raw();
    if !m.is_dir() || m.uid() != me || m.mode() & 0o077 != 0 {
        return Err(io::Error::other(format!(
            "{} is not a private directory of this user",
            dir.display()
        )));
    }
    Ok(())
}

/// The socket of a running sender; removed when dropped, or when a signal stops us.
pub struct Control {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    _on_stop: crate::signals::OnStop,
}

impl Drop for Control {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Opens the socket through which `haul limit` changes `pace` while the transfer runs;
/// `None` (after one warning) when this user has no private place for it.
pub fn listen(pace: &Arc<Pacer>) -> Option<Control> {
    match serve(Arc::clone(pace)) {
        Ok(c) => Some(c),
        Err(e) => {
            crate::progress::warn(&format!(
                "haul limit cannot reach this transfer: {}",
                crate::progress::escape(&e.to_string())
            ));
            None
        }
    }
}

/// Listens for `haul limit` on behalf of `pacer` until the returned handle is dropped.
pub fn serve(pacer: Arc<Pacer>) -> io::Result<Control> {
    let dir = dir();
    checked_dir(&dir)?;
    let path = dir.join(format!("limit-{}.sock", std::process::id()));
    // A socket left by a process that had our pid before us.
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)?;
    listener.set_nonblocking(true)?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = Arc::clone(&stop);
    std::thread::Builder::new()
        .name("haul-limit".into())
        .spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => answer(s, &pacer),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            }
        })?;
    let on_stop = {
        let path = path.clone();
        crate::signals::on_stop(move || {
            let _ = std::fs::remove_file(&path);
        })
    };
    Ok(Control {
        path,
        stop,
        _on_stop: on_stop,
    })
}

/// One client: its user must be ours (or root); one line in, one line out.
fn answer(s: UnixStream, pacer: &Pacer) {
    let me = rustix::process::geteuid().as_raw();
    let ok_peer = rustix::net::sockopt::socket_peercred(&s)
        .map(|c| c.uid.as_raw() == me || c.uid.is_root())
        .unwrap_or(false);
    if !ok_peer {
        return;
    }
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(CLIENT_WAIT));
    let mut line = String::new();
    let mut r = BufReader::new(io::Read::take(&s, 64));
    if r.read_line(&mut line).is_err() {
        return;
    }
    let reply = match parse_line(line.trim()) {
        Some(rate) => {
            pacer.set(rate);
            match rate {
                Some(r) => format!("ok {r}\n"),
                None => "ok off\n".to_string(),
            }
        }
        None => "error: expected a rate in bytes per second or off\n".to_string(),
    };
    let mut w = &s;
    let _ = w.write_all(reply.as_bytes());
}

/// `off` or a number of bytes per second (`Some(None)`: no cap).
fn parse_line(s: &str) -> Option<Option<u64>> {
    if s == "off" {
        return Some(None);
    }
    s.parse::<u64>().ok().map(|n| (n > 0).then_some(n))
}

/// The senders of this user that can be told a new cap, by pid.
pub fn running() -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_dir(dir())
        .map(|it| {
            it.flatten()
                .filter_map(|e| {
                    let n = e.file_name();
                    let n = n.to_str()?;
                    n.strip_prefix("limit-")?
                        .strip_suffix(".sock")?
                        .parse()
                        .ok()
                })
                .collect()
        })
        .unwrap_or_default();
    pids.sort_unstable();
    pids
}

/// Tells the sender `pid` its new cap (`None`: none); returns its answer.
pub fn tell(pid: u32, rate: Option<u64>) -> io::Result<String> {
    let path = dir().join(format!("limit-{pid}.sock"));
    let mut s = UnixStream::connect(&path)?;
    s.set_read_timeout(Some(CLIENT_WAIT))?;
    let line = match rate {
        Some(r) => format!("{r}\n"),
        None => "off\n".to_string(),
    };
    s.write_all(line.as_bytes())?;
    let mut reply = String::new();
    BufReader::new(io::Read::take(&s, 256)).read_line(&mut reply)?;
    if reply.is_empty() {
        return Err(io::Error::other(
            "the transfer did not answer (another user's?)",
        ));
    }
    Ok(reply.trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        assert_eq!(parse_line("off"), Some(None));
        assert_eq!(parse_line("0"), Some(None));
        assert_eq!(parse_line("1048576"), Some(Some(1 << 20)));
        assert_eq!(parse_line("10M"), None);
    }
}
