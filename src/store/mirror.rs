//! `--delete`: removes destination entries that are absent at the source, only inside
//! directories the source sent (as rsync does), never following a symlink and never
//! leaving the destination root. What the sender's filter rules exclude stays (rsync's
//! default without --delete-excluded).

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

use super::fsops;
use super::state::Store;
use crate::error::Result;
use crate::protocol::{Filter, SafeRelPath};

impl Store {
    /// Deletes, in each directory the sender sent, every entry it did not send.
    pub(super) fn delete_extraneous(&self, dirs: &[SafeRelPath]) -> Result<()> {
        let seen = self.seen.lock().map(|s| s.clone()).unwrap_or_default();
        let protect = self.protect.lock().map(|p| p.clone()).unwrap_or_default();
        for dir in dirs {
            let fd = self
                .at(dir, fsops::open_dir)
                .map_err(|x| self.dest_err(dir, x))?;
            for name in list(&fd).map_err(|x| self.dest_err(dir, x))? {
                if name.starts_with(fsops::PARTIAL_PREFIX.as_bytes()) {
                    continue;
                }
                let Ok(child) = dir.join(&name) else { continue };
                if seen.contains(&child) || excluded(&protect, &fd, &name, &child) {
                    continue;
                }
                let n = remove_tree(&fd, &name, &protect, &child)
                    .map_err(|x| self.dest_err(&child, x))?;
                self.deleted.fetch_add(n.0, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

/// Whether the sender's rules exclude `name` (at `path`) in the directory `dir`: then it
/// stays, as with rsync's --delete without --delete-excluded.
fn excluded(rules: &Filter, dir: &OwnedFd, name: &[u8], path: &SafeRelPath) -> bool {
    if rules.is_empty() {
        return false;
    }
    let is_dir = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory);
    rules.excluded(path.as_bytes(), is_dir)
}

/// The names in a directory, without `.` and `..`.
fn list(fd: &OwnedFd) -> io::Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut d = Dir::read_from(fd)?;
    while let Some(e) = d.read() {
        let e = e?;
        let name = e.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push(name.to_vec());
        }
    }
    Ok(out)
}

/// Removes `name` (at `path`) in `parent` and, for a directory, everything below it that
/// `rules` do not exclude (symlinks are removed, never followed); a directory that keeps
/// an excluded entry stays, as with rsync. Returns how many entries were removed and
/// whether `name` itself was.
fn remove_tree(
    parent: &OwnedFd,
    name: &[u8],
    rules: &Filter,
    path: &SafeRelPath,
) -> io::Result<(u64, bool)> {
    let st = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        rustix::fs::unlinkat(parent, name, AtFlags::empty())?;
        return Ok((1, true));
    }
    let fd = rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    // A read-only directory cannot be emptied until it is writable (its mode read from
    // the descriptor: the name may have been swapped since the stat).
    let mode = rustix::fs::fstat(&fd).ok().map(|st| st.st_mode & 0o7777);
    if let Some(m) = mode {
        let _ = rustix::fs::fchmod(&fd, Mode::from_raw_mode(m | 0o700));
    }
    let (mut n, mut kept) = (0, false);
    for child in list(&fd)? {
        let Ok(child_path) = path.join(&child) else {
            kept = true;
            continue;
        };
        if excluded(rules, &fd, &child, &child_path) {
            kept = true;
            continue;
        }
        let (removed, gone) = remove_tree(&fd, &child, rules, &child_path)?;
        n += removed;
        kept |= !gone;
    }
    if kept {
        if let Some(m) = mode {
            let _ = rustix::fs::fchmod(&fd, Mode::from_raw_mode(m));
        }
        return Ok((n, false));
    }
    rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR)?;
    Ok((n + 1, true))
}
