//! Entries other than regular files (what the summary counts as `other`): directories,
//! symlinks, FIFOs, devices and hardlinks. Each is made under a temporary name and renamed
//! into place (directories are made in place), never following a symlink — except, with
//! -K, a symlink to a directory that was at the destination before the run.
//!
//! It deliberately does not apply directory metadata or fsync directories (the facade's
//! `Store::finish` does, once everything beneath them exists), and knows nothing of
//! regular files' data.

use std::sync::atomic::Ordering;

use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::fsops;
use super::state::Store;
use crate::error::Result;
use crate::protocol::{Entry, EntryKind, ProtocolError, SafeRelPath};

impl Store {
    /// Makes directory `path` (its metadata waits for `finish`) and remembers it.
    pub(super) fn make_dir(&self, path: SafeRelPath, e: Entry) -> Result<()> {
        if let Some((parent, name)) = path.split_last() {
            let err = |x| self.dest_err(&path, x);
            let pdir = self.dir(&parent).map_err(err)?;
            match self.kept_dirlink(&pdir.fd, &path, name) {
                Some(fd) => {
                    if let Ok(mut l) = self.dirlinks.lock() {
                        l.insert(path.clone(), std::sync::Arc::new(fd));
                    }
                    // Paths below it resolve differently from now on.
                    self.dir_cache.clear();
                }
                None => {
                    if fsops::make_dir(&pdir.fd, name).map_err(err)? {
                        self.made_dir(&path).map_err(err)?;
                    }
                }
            }
        }
        if let Ok(mut d) = self.dirs.lock() {
            d.meta(path, e);
        }
        self.other.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// With -K, the directory that `name` in `pfd` leads to when it is a symlink to a
    /// directory that this run did not make and that belongs to the receiving user or
    /// root (a link someone else planted is replaced, as without -K).
    fn kept_dirlink(&self, pfd: &OwnedFd, path: &SafeRelPath, name: &[u8]) -> Option<OwnedFd> {
        if !self.accept().keep_dirlinks {
            return None;
        }
        let st = rustix::fs::statat(pfd, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        let me = rustix::process::geteuid().as_raw();
        let ours = st.st_uid == me || st.st_uid == 0;
        if FileType::from_raw_mode(st.st_mode) != FileType::Symlink || !ours {
            return None;
        }
        if self.made_links.lock().map_or(true, |m| m.contains(path)) {
            return None;
        }
        rustix::fs::openat(
            pfd,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()
    }

    /// Makes a symlink, FIFO or device (devices only as root; otherwise skipped with a
    /// warning), with its metadata, under a temporary name renamed into place.
    pub(super) fn make_special(&self, path: &SafeRelPath, e: &Entry) -> Result<()> {
        let (parent, name) = path
            .split_last()
            .ok_or(ProtocolError::Malformed("special file at the root path"))?;
        if let EntryKind::Device { .. } = e.kind {
            if !self.as_root {
                crate::progress::warn(&format!(
                    "skipping device {} (only root can create devices)",
                    path.display()
                ));
                self.skipped.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        }
        let pfd = self
            .at(&parent, fsops::open_dir)
            .map_err(|x| self.dest_err(path, x))?;
        self.make_way(&pfd, name, path)?;
        let tmp = fsops::temp_name(name);
        fsops::remove_if_present(&pfd, &tmp).map_err(|x| self.dest_err(path, x))?;
        let mode = e.mode & 0o7777;
        let made = match &e.kind {
            EntryKind::Symlink { target } => {
                rustix::fs::symlinkat(target.as_slice(), &pfd, tmp.as_slice())
            }
            EntryKind::Fifo => rustix::fs::mknodat(
                &pfd,
                tmp.as_slice(),
                FileType::Fifo,
                Mode::from_raw_mode(mode),
                0,
            ),
            EntryKind::Device { block, rdev } => rustix::fs::mknodat(
                &pfd,
                tmp.as_slice(),
                if *block {
                    FileType::BlockDevice
                } else {
                    FileType::CharacterDevice
                },
                Mode::from_raw_mode(mode),
                *rdev,
            ),
            _ => return Ok(()),
        };
        made.map_err(|x| self.dest_err(path, x.into()))?;
        fsops::race_point("special-made");
        let kind = match &e.kind {
            EntryKind::Symlink { .. } => FileType::Symlink,
            EntryKind::Fifo => FileType::Fifo,
            EntryKind::Device { block: true, .. } => FileType::BlockDevice,
            _ => FileType::CharacterDevice,
        };
        if kind == FileType::Symlink && self.accept().keep_dirlinks {
            if let Ok(mut m) = self.made_links.lock() {
                m.insert(path.clone());
            }
        }
        let done = fsops::apply_meta_made(&pfd, &tmp, e, self.owners(), kind)
            .and_then(|done| fsops::rename_in(&pfd, &tmp, name).map(|()| done))
            .map_err(|x| self.dest_err(path, x))?;
        self.note_xattrs(path, done);
        self.other.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Makes `path` a hardlink to `target` (both beneath the root), replacing what has
    /// that name.
    pub(super) fn make_hardlink(&self, path: &SafeRelPath, target: &SafeRelPath) -> Result<()> {
        let err = |x| self.dest_err(path, x);
        let (tparent, tname) = target
            .split_last()
            .ok_or(ProtocolError::Malformed("hardlink"))?;
        let (parent, name) = path
            .split_last()
            .ok_or(ProtocolError::Malformed("hardlink"))?;
        let tfd = self.at(&tparent, fsops::open_dir).map_err(err)?;
        let pfd = self.at(&parent, fsops::open_dir).map_err(err)?;
        self.make_way(&pfd, name, path)?;
        let tmp = fsops::temp_name(name);
        fsops::remove_if_present(&pfd, &tmp).map_err(err)?;
        rustix::fs::linkat(
            &tfd,
            tname,
            &pfd,
            tmp.as_slice(),
            rustix::fs::AtFlags::empty(),
        )
        .map_err(|x| err(x.into()))?;
        fsops::rename_in(&pfd, &tmp, name).map_err(err)?;
        // rename(2) of a name onto another name of the same inode (a re-run, where the
        // link is already there) does nothing and leaves the temporary name behind.
        fsops::remove_if_present(&pfd, &tmp).map_err(err)?;
        self.other.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::protocol::{Accept, Entry, EntryKind, SafeRelPath, SyncOptions};
    use crate::store::Store;

    fn entry(path: &str, kind: EntryKind) -> Entry {
        Entry {
            id: 0,
            path: path.as_bytes().to_vec(),
            kind,
            mode: 0o755,
            mtime_sec: 1_700_000_000,
            mtime_nsec: 0,
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
            xattrs: None,
        }
    }

    fn keep_dirlinks_store(dest: &Path) -> Store {
        let s = Store::open(dest).unwrap();
        s.configure(1 << 20, SyncOptions::default(), [9u8; 32]);
        s.set_accept(Accept {
            keep_dirlinks: true,
            ..Accept::default()
        })
        .unwrap();
        s
    }

    #[test]
    fn keep_dirlinks_follows_a_link_that_was_there() {
        let tmp = tempfile::tempdir().unwrap();
        let (dest, disk) = (tmp.path().join("dest"), tmp.path().join("disk"));
        std::fs::create_dir_all(&dest).unwrap();
        std::fs::create_dir_all(&disk).unwrap();
        std::os::unix::fs::symlink(&disk, dest.join("wal")).unwrap();
        let s = keep_dirlinks_store(&dest);
        s.apply_entries(vec![
            entry("", EntryKind::Dir),
            entry("wal", EntryKind::Dir),
            entry("wal/sub", EntryKind::Dir),
        ])
        .unwrap();
        assert!(disk.join("sub").is_dir());
        assert!(std::fs::symlink_metadata(dest.join("wal"))
            .unwrap()
            .file_type()
            .is_symlink());
    }

    #[test]
    fn a_hardlink_already_there_leaves_no_temporary_name() {
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("dest");
        std::fs::create_dir_all(&dest).unwrap();
        std::fs::write(dest.join("a"), b"x").unwrap();
        std::fs::hard_link(dest.join("a"), dest.join("b")).unwrap();
        let s = keep_dirlinks_store(&dest);
        let (a, b) = (SafeRelPath::parse(b"a"), SafeRelPath::parse(b"b"));
        s.make_hardlink(&b.unwrap(), &a.unwrap()).unwrap();
        let mut names: Vec<_> = std::fs::read_dir(&dest)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn keep_dirlinks_never_follows_a_link_the_sender_just_made() {
        let tmp = tempfile::tempdir().unwrap();
        let (dest, elsewhere) = (tmp.path().join("dest"), tmp.path().join("elsewhere"));
        std::fs::create_dir_all(&dest).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        let s = keep_dirlinks_store(&dest);
        let target = elsewhere.to_str().unwrap().as_bytes().to_vec();
        s.apply_entries(vec![
            entry("", EntryKind::Dir),
            entry("a", EntryKind::Symlink { target }),
            entry("a", EntryKind::Dir),
            entry("a/planted", EntryKind::Dir),
        ])
        .unwrap();
        assert!(!elsewhere.join("planted").exists());
        assert!(dest.join("a/planted").is_dir());
        assert!(!std::fs::symlink_metadata(dest.join("a"))
            .unwrap()
            .file_type()
            .is_symlink());
    }
}
