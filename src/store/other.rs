//! Entries other than regular files (what the summary counts as `other`): directories,
//! symlinks, FIFOs, devices and hardlinks. Each is made under a temporary name and renamed
//! into place (directories are made in place), never following a symlink — except, with
//! -K, a symlink to a directory that was at the destination before the run (`dirlink`).
//!
//! It deliberately does not apply directory metadata or fsync directories (the facade's
//! `Store::finish` does, once everything beneath them exists), and knows nothing of
//! regular files' data.

use std::sync::atomic::Ordering;

use rustix::fs::{FileType, Mode};

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
                self.specials_skipped.store(true, Ordering::Relaxed);
                return Ok(());
            }
        }
        if self.special_unchanged(path, e) {
            return Ok(());
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
        let done = fsops::apply_meta_made(&pfd, &tmp, e, (self.owners(), self.namespaces()), kind)
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
        let linked = rustix::fs::linkat(
            &tfd,
            tname,
            &pfd,
            tmp.as_slice(),
            rustix::fs::AtFlags::empty(),
        );
        match linked {
            // Another name of a device or FIFO this receiver skipped: skipped as well.
            Err(rustix::io::Errno::NOENT) if self.specials_skipped.load(Ordering::Relaxed) => {
                self.skipped.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            other => other.map_err(|x| err(x.into()))?,
        }
        // `--stats` counts the length of every name (the manifest does not carry it).
        if let Ok(st) =
            rustix::fs::statat(&pfd, tmp.as_slice(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        {
            crate::progress::Counters::add(&self.stats.file_size, st.st_size as u64);
        }
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
    use crate::protocol::SafeRelPath;
    use crate::store::dirlink::tests::keep_dirlinks_store;

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
}
