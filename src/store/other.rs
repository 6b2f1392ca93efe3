//! Entries other than regular files (what the summary counts as `other`): directories,
//! symlinks, FIFOs, devices and hardlinks. Each is made under a temporary name and renamed
//! into place (directories are made in place), never following a symlink.
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
            let pfd = fsops::open_dir(&self.root, &parent).map_err(|x| self.dest_err(&path, x))?;
            fsops::make_dir(&pfd, name).map_err(|x| self.dest_err(&path, x))?;
        }
        if let Ok(mut d) = self.dirs.lock() {
            d.push((path, e));
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
                return Ok(());
            }
        }
        let pfd = fsops::open_dir(&self.root, &parent).map_err(|x| self.dest_err(path, x))?;
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
        fsops::apply_meta_made(&pfd, &tmp, e, self.as_root, kind)
            .and_then(|()| fsops::rename_in(&pfd, &tmp, name))
            .map_err(|x| self.dest_err(path, x))?;
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
        let tfd = fsops::open_dir(&self.root, &tparent).map_err(err)?;
        let pfd = fsops::open_dir(&self.root, &parent).map_err(err)?;
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
        self.other.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}
