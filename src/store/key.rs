//! The receiver's journal key: 32 random bytes in a private per-user state directory
//! outside every destination — `/var/lib/haul` for root, else `$XDG_STATE_HOME/haul` or
//! `~/.local/state/haul` — made once (directory 0700, file 0600, the file created
//! `O_EXCL` and moved into place without replacing anything) and checked on its
//! descriptors before every use: ours, not accessible to group or others, one link.
//! Resume journals are authenticated with it (see `journal`), so a journal that anybody
//! else wrote into a destination is never trusted.
//!
//! It deliberately has no weaker fallback: when the key cannot be made or read safely,
//! the caller resumes nothing for that run.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, RenameFlags};

/// The key, in the state directory.
const KEY_NAME: &str = "journal.key";

/// A journal key.
pub type Key = [u8; 32];

/// The key in this user's state directory, made on first use.
pub fn load() -> io::Result<Key> {
    let dir = state_dir()
        .ok_or_else(|| io::Error::other("no state directory: neither XDG_STATE_HOME nor HOME"))?;
    load_from(&dir).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))
}

/// `/var/lib/haul` for root; otherwise `$XDG_STATE_HOME/haul`, else
/// `$HOME/.local/state/haul` (absolute paths only).
fn state_dir() -> Option<PathBuf> {
    if rustix::process::geteuid().is_root() {
        return Some(PathBuf::from("/var/lib/haul"));
    }
    let absolute = |v: std::ffi::OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    let base = std::env::var_os("XDG_STATE_HOME")
        .and_then(absolute)
        .or_else(|| {
            std::env::var_os("HOME")
                .and_then(absolute)
                .map(|h| h.join(".local/state"))
        })?;
    Some(base.join("haul"))
}

/// The key in directory `dir` (made 0700 if missing), made on first use.
pub fn load_from(dir: &Path) -> io::Result<Key> {
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match rfs::mkdir(dir, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(e.into()),
    }
    let dfd = rfs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    private(&rfs::fstat(&dfd)?, FileType::Directory)?;
    for _ in 0..3 {
        match rfs::openat(
            &dfd,
            KEY_NAME,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => return read_key(fd),
            Err(rustix::io::Errno::NOENT) => create(&dfd)?,
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::other("the key keeps disappearing"))
}

/// Checks that `st` is a `kind` only this user can reach (and, for a file, has one link).
fn private(st: &rfs::Stat, kind: FileType) -> io::Result<()> {
    let ok = FileType::from_raw_mode(st.st_mode) == kind
        && st.st_uid == rustix::process::geteuid().as_raw()
        && st.st_mode & 0o077 == 0
        && (kind == FileType::Directory || st.st_nlink == 1);
    if ok {
        Ok(())
    } else {
        Err(io::Error::other(
            "not private to this user (owner, mode 0700/0600, one link)",
        ))
    }
}

fn read_key(fd: OwnedFd) -> io::Result<Key> {
    let st = rfs::fstat(&fd)?;
    private(&st, FileType::RegularFile)?;
    if st.st_size != 32 {
        return Err(io::Error::other("the key is not 32 bytes"));
    }
    let mut key = [0u8; 32];
    File::from(fd).read_exact(&mut key)?;
    Ok(key)
}

/// Makes a new key under a name of our own and moves it into place unless another
/// receiver did so first (then that one is used).
fn create(dfd: &OwnedFd) -> io::Result<()> {
    let tmp = format!("{KEY_NAME}.{}", std::process::id());
    let _ = rfs::unlinkat(dfd, tmp.as_str(), AtFlags::empty());
    let fd = rfs::openat(
        dfd,
        tmp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| io::Error::other(e.to_string()))?;
    let mut f = File::from(fd);
    f.write_all(&key)?;
    f.sync_all()?;
    let moved = rfs::renameat_with(dfd, tmp.as_str(), dfd, KEY_NAME, RenameFlags::NOREPLACE);
    match moved {
        Ok(()) => rfs::fsync(dfd).map_err(io::Error::from),
        Err(rustix::io::Errno::EXIST) => {
            let _ = rfs::unlinkat(dfd, tmp.as_str(), AtFlags::empty());
            Ok(())
        }
        Err(e) => {
            let _ = rfs::unlinkat(dfd, tmp.as_str(), AtFlags::empty());
            Err(e.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn key_is_made_once_and_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state/haul");
        let k = load_from(&dir).unwrap();
        assert_eq!(load_from(&dir).unwrap(), k);
        let m = std::fs::metadata(dir.join(KEY_NAME)).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
        let m = std::fs::metadata(&dir).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o700);
    }

    #[test]
    fn a_key_others_can_read_or_a_link_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("haul");
        load_from(&dir).unwrap();
        let key = dir.join(KEY_NAME);
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(load_from(&dir).is_err());
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::hard_link(&key, tmp.path().join("other")).unwrap();
        assert!(load_from(&dir).is_err());
        std::fs::remove_file(tmp.path().join("other")).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(load_from(&dir).is_err());
    }
}
