//! Where a user's senders keep their `haul limit` sockets, and reaching one of them.
//!
//! The directory is `/run/haul` for root, else `$XDG_RUNTIME_DIR/haul`, else
//! `/tmp/haul-<uid>`. It is opened once, without following a symlink, and used only when
//! that descriptor is a directory the user owns that no one else may enter (mode 0700);
//! every later step goes through the descriptor. A directory that fails the check is
//! refused by both sides, never repaired or used: whoever owns it could pose as the
//! user's transfers (`/tmp/haul-<uid>` can be made by anyone first). A socket counts as
//! a sender's only when the process listening on it (`SO_PEERCRED`) is of this user and
//! has the pid the name says; a name nothing listens on is left by a process that died
//! (SIGKILL, a crash) and is removed by whoever finds it. Not done: finding senders of
//! other users (root's `haul limit` sees root's transfers only).

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

/// How long either side waits for the other's line.
pub const LINE_WAIT: Duration = Duration::from_secs(2);

/// Entries of the directory looked at, at most (senders running at once are a handful).
const MAX_ENTRIES: usize = 4096;

/// The directory of this user's sockets, as a path (for messages).
pub fn path() -> PathBuf {
    let uid = rustix::process::geteuid();
    if uid.is_root() {
        return PathBuf::from("/run/haul");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("haul"),
        _ => PathBuf::from(format!("/tmp/haul-{}", uid.as_raw())),
    }
}

/// The socket name of the sender `pid`.
pub fn name(pid: u32) -> String {
    format!("limit-{pid}.sock")
}

/// The name a sender binds before its socket takes [`name`] (so a socket under that
/// name is always one that listens).
pub fn new_name(pid: u32) -> String {
    format!(".limit-{pid}.new")
}

/// The checked directory, open.
pub struct Place {
    fd: OwnedFd,
    path: PathBuf,
}

/// What one socket of the directory turned out to be.
pub enum Reach {
    /// A sender of ours listens: connected to it.
    Live(UnixStream),
    /// Nothing listens: left by a process that died.
    Stale,
    /// No such name (any more).
    Gone,
    /// Something else listens (another user, another pid): not talked to.
    Refused(String),
}

impl Place {
    /// The directory for a sender, made (mode 0700) when missing.
    pub fn make() -> io::Result<Place> {
        let path = path();
        match rustix::fs::mkdir(&path, Mode::RWXU) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(io::Error::other(format!("{}: {e}", path.display()))),
        }
        Place::open_at(path)
    }

    /// The directory for `haul limit`: it must exist.
    pub fn open() -> io::Result<Place> {
        Place::open_at(path())
    }

    fn open_at(path: PathBuf) -> io::Result<Place> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::open(&path, flags, Mode::empty()).map_err(|e| {
            // O_DIRECTORY makes a symbolic link ENOTDIR; the message tells which it was.
            let link = || std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_symlink());
            let why = match e {
                Errno::LOOP | Errno::NOTDIR if link() => {
                    "is a symbolic link: not used (remove it)".to_string()
                }
                Errno::NOTDIR => "is not a directory: not used (remove it)".to_string(),
                Errno::NOENT => "does not exist".to_string(),
                e => format!("cannot be opened: {e}"),
            };
            io::Error::new(
                io::Error::from(e).kind(),
                format!("{} {why}", path.display()),
            )
        })?;
        check(&fd, &path)?;
        Ok(Place { fd, path })
    }

    /// The directory's path, for messages.
    pub fn shown(&self) -> &Path {
        &self.path
    }

    /// `name` inside the directory, reached through its descriptor (whatever the path
    /// now names).
    pub fn at(&self, name: &str) -> PathBuf {
        use std::os::fd::AsRawFd;
        PathBuf::from(format!("/proc/self/fd/{}/{name}", self.fd.as_raw_fd()))
    }

    /// Removes `name` from the directory (nothing if it is not there).
    pub fn remove(&self, name: &str) {
        let _ = rustix::fs::unlinkat(&self.fd, name, AtFlags::empty());
    }

    /// Gives the socket bound as `from` its name `to`.
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        rustix::fs::renameat(&self.fd, from, &self.fd, to).map_err(io::Error::from)
    }

    /// The directory's descriptor, shared with a clean-up that outlives this value.
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }

    /// The pids whose sockets the directory holds, sorted; leftovers of senders that
    /// died before their socket took its name are removed on the way.
    pub fn pids(&self) -> Vec<u32> {
        let Ok(dir) = rustix::fs::Dir::read_from(&self.fd) else {
            return Vec::new();
        };
        let mut pids = Vec::new();
        for entry in dir.flatten().take(MAX_ENTRIES) {
            let Ok(n) = entry.file_name().to_str() else {
                continue;
            };
            if let Some(pid) = pid_in(n, "limit-", ".sock") {
                pids.push(pid);
            } else if let Some(pid) = pid_in(n, ".limit-", ".new") {
                if !alive(pid) {
                    self.remove(n);
                }
            }
        }
        pids.sort_unstable();
        pids
    }

    /// Connects to the socket of sender `pid`, checking who listens on it.
    pub fn reach(&self, pid: u32) -> io::Result<Reach> {
        let name = name(pid);
        let s = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )?;
        let addr = SocketAddrUnix::new(self.at(&name))?;
        match rustix::net::connect(&s, &addr) {
            Ok(()) => {}
            Err(Errno::CONNREFUSED) => return Ok(Reach::Stale),
            Err(Errno::NOENT) => return Ok(Reach::Gone),
            Err(Errno::AGAIN) => {
                return Err(io::Error::other(format!(
                    "{name} accepts no connection (its queue is full)"
                )))
            }
            Err(e) => return Err(io::Error::other(format!("{name}: {e}"))),
        }
        let peer = rustix::net::sockopt::socket_peercred(&s)?;
        let me = rustix::process::geteuid();
        if peer.uid != me {
            return Ok(Reach::Refused(format!(
                "{name} in {} is held by uid {}, not by you (uid {}): not told",
                self.path.display(),
                peer.uid.as_raw(),
                me.as_raw()
            )));
        }
        if peer.pid.as_raw_nonzero().get() as u32 != pid {
            return Ok(Reach::Refused(format!(
                "{name} in {} is held by pid {}, not by pid {pid}: not told",
                self.path.display(),
                peer.pid.as_raw_nonzero()
            )));
        }
        let s = UnixStream::from(s);
        s.set_nonblocking(false)?;
        s.set_read_timeout(Some(LINE_WAIT))?;
        s.set_write_timeout(Some(LINE_WAIT))?;
        Ok(Reach::Live(s))
    }

    /// The senders of ours that listen, connected, and what was refused; sockets nothing
    /// listens on are removed.
    pub fn senders(&self) -> (Vec<(u32, UnixStream)>, Vec<String>) {
        let mut live = Vec::new();
        let mut refused = Vec::new();
        for pid in self.pids() {
            match self.reach(pid) {
                Ok(Reach::Live(s)) => live.push((pid, s)),
                Ok(Reach::Stale) => self.remove(&name(pid)),
                Ok(Reach::Gone) => {}
                Ok(Reach::Refused(why)) => refused.push(why),
                Err(e) => refused.push(e.to_string()),
            }
        }
        (live, refused)
    }
}

/// Refuses a directory that is not ours alone: another user could listen in it.
fn check(fd: &impl AsFd, path: &Path) -> io::Result<()> {
    let st = rustix::fs::fstat(fd)?;
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != me {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} belongs to uid {}, not to you (uid {me}): not used, since its owner could \
                 pose as your transfers; remove it (as root), or set XDG_RUNTIME_DIR",
                path.display(),
                st.st_uid
            ),
        ));
    }
    let mode = st.st_mode & 0o7777;
    if mode & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is open to other users (mode {mode:04o}): not used; make it private \
                 with chmod 700",
                path.display()
            ),
        ));
    }
    Ok(())
}

/// The pid in `name` between `prefix` and `suffix`.
fn pid_in(name: &str, prefix: &str, suffix: &str) -> Option<u32> {
    let digits = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether a process `pid` exists (of any user).
fn alive(pid: u32) -> bool {
    let Some(p) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    !matches!(rustix::process::test_kill_process(p), Err(Errno::SRCH))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_private_directory_of_ours_is_used() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let ours = tmp.path().join("ours");
        std::fs::create_dir(&ours).unwrap();
        std::fs::set_permissions(&ours, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(Place::open_at(ours.clone()).is_ok());
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&ours, &link).unwrap();
        let open = |p: &Path| Place::open_at(p.to_path_buf()).err().unwrap().to_string();
        assert!(open(&link).ends_with("link is a symbolic link: not used (remove it)"));
        std::fs::set_permissions(&ours, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(open(&ours).contains("is open to other users (mode 0755)"));
        let file = tmp.path().join("file");
        std::fs::write(&file, b"").unwrap();
        assert!(open(&file).ends_with("file is not a directory: not used (remove it)"));
    }

    #[test]
    fn names() {
        assert_eq!(pid_in(&name(42), "limit-", ".sock"), Some(42));
        assert_eq!(pid_in(&new_name(42), ".limit-", ".new"), Some(42));
        assert_eq!(pid_in("limit-.sock", "limit-", ".sock"), None);
        assert_eq!(pid_in("limit-+4.sock", "limit-", ".sock"), None);
        assert_eq!(pid_in("limit-4.sock.x", "limit-", ".sock"), None);
    }
}
