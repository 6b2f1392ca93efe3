//! Changing a running sender's cap from another shell (`haul limit RATE|off`): each
//! sender listens on a Unix socket `limit-<pid>.sock` in a directory only its user can
//! enter ([`place`]), accepts only peers of its own user (or root, checked with
//! `SO_PEERCRED`), and takes one line: a rate in bytes per second, or `off`.
//! `haul limit`, in turn, talks only to a socket whose listener is of its own user and
//! has the pid of the name.
//!
//! A directory that is not ours or that others may enter is refused (no socket, one
//! warning): nobody else can change or learn our cap. The socket goes when the sender
//! ends, by an error or by SIGINT, SIGTERM or SIGHUP ([`crate::signals`]); one left by a
//! process that could not clean up (SIGKILL) is removed by the next sender or `haul
//! limit` that finds nothing listening on it.

pub mod place;

use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use place::Place;

use super::Pacer;

/// Where this user's senders put their sockets.
pub fn dir() -> PathBuf {
    place::path()
}

/// The socket of a running sender; removed when dropped.
pub struct Control {
    dir: Arc<OwnedFd>,
    name: String,
    stop: Arc<AtomicBool>,
    _on_stop: crate::signals::OnStop,
}

impl Drop for Control {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = rustix::fs::unlinkat(&*self.dir, &self.name, rustix::fs::AtFlags::empty());
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
/// Sockets of senders that died without removing theirs are removed first.
pub fn serve(pacer: Arc<Pacer>) -> io::Result<Control> {
    let place = Place::make()?;
    for pid in place.pids() {
        if let Ok(place::Reach::Stale) = place.reach(pid) {
            place.remove(&place::name(pid));
        }
    }
    let me = std::process::id();
    let (name, new) = (place::name(me), place::new_name(me));
    // Bound under another name and then renamed, so that a socket under a sender's name
    // always listens: one that refuses connections is a dead sender's.
    place.remove(&new);
    let listener = UnixListener::bind(place.at(&new))?;
    place.rename(&new, &name)?;
    listener.set_nonblocking(true)?;
    let dir = Arc::new(place.into_fd());
    let on_stop = {
        let (dir, name) = (Arc::clone(&dir), name.clone());
        crate::signals::on_stop(move || {
            let _ = rustix::fs::unlinkat(&*dir, &name, rustix::fs::AtFlags::empty());
        })
    };
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = Arc::clone(&stop);
    std::thread::Builder::new()
        .name("haul-limit".into())
        .spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => answer(s, &pacer),
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            }
        })?;
    Ok(Control {
        dir,
        name,
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
    let _ = s.set_read_timeout(Some(place::LINE_WAIT));
    let mut line = String::new();
    let mut r = BufReader::new(io::Read::take(&s, 64));
    // Nothing at all: `haul limit` or a starting sender only looked whether we listen.
    if r.read_line(&mut line).is_err() || line.is_empty() {
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

/// Tells the sender at the other end of `s` (from [`Place::reach`]) its new cap (`None`:
/// none); returns its answer.
pub fn tell(mut s: UnixStream, rate: Option<u64>) -> io::Result<String> {
    let line = match rate {
        Some(r) => format!("{r}\n"),
        None => "off\n".to_string(),
    };
    s.write_all(line.as_bytes())?;
    let mut reply = String::new();
    BufReader::new(io::Read::take(&s, 256)).read_line(&mut reply)?;
    if reply.is_empty() {
        return Err(io::Error::other("the transfer did not answer"));
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
