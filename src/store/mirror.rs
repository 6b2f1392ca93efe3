//! `--delete`: removes destination entries that are absent at the source, only inside
//! directories the source sent (as rsync does), never following a symlink and never
//! leaving the destination root. What the sender's filter rules exclude stays (rsync's
//! default without --delete-excluded). In a dry run it only lists what it would remove;
//! either way each removal is an [`Item`] when items are collected (children before their
//! directory, as rsync prints them).

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

use super::fsops;
use super::state::Store;
use crate::error::Result;
use crate::protocol::{Change, Filter, Item, ItemKind, SafeRelPath};

impl Store {
    /// Deletes, in each directory the sender sent, every entry it did not send.
    pub(super) fn delete_extraneous(&self, dirs: &[SafeRelPath]) -> Result<()> {
        // Taken, not copied: nothing needs it after this (a copy doubled its peak).
        let seen = self
            .seen
            .lock()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default();
        let protect = self.protect.lock().map(|p| p.clone()).unwrap_or_default();
        let dry = self.options().dry_run;
        for dir in dirs {
            let fd = match self.at(dir, fsops::open_dir) {
                Ok(fd) if !self.absent => fd,
                // A dry run's new directory: nothing in it to delete.
                Err(_) | Ok(_) if dry => continue,
                Err(x) => return Err(self.dest_err(dir, x)),
                Ok(fd) => fd,
            };
            for name in list(&fd).map_err(|x| self.dest_err(dir, x))? {
                if name.starts_with(fsops::PARTIAL_PREFIX.as_bytes()) {
                    continue;
                }
                let Ok(child) = dir.join(&name) else { continue };
                if seen.contains(&seen_key(&child)) || excluded(&protect, &fd, &name, &child) {
                    continue;
                }
                let mut gone = Vec::new();
                let how = Removal {
                    rules: &protect,
                    dry,
                };
                remove_tree(&fd, &name, &child, &how, &mut gone)
                    .map_err(|x| self.dest_err(&child, x))?;
                self.note_deleted(gone);
            }
        }
        Ok(())
    }

    /// Counts and lists (`-v`, `-i`) what a removal took, children first.
    fn note_deleted(&self, gone: Vec<(Vec<u8>, bool)>) {
        self.deleted.fetch_add(gone.len() as u64, Ordering::Relaxed);
        for (path, is_dir) in gone {
            self.note_item(Item {
                path,
                kind: if is_dir {
                    ItemKind::Dir
                } else {
                    ItemKind::File
                },
                change: Change {
                    deleted: true,
                    ..Change::default()
                },
                target: Vec::new(),
            });
        }
    }

    /// Clears the way for a file, link or special named `name` in `pfd` (at `path`) where
    /// a directory has that name, as rsync does: an empty directory is removed; one that
    /// is not only with `--delete`, its content as `--delete` removes it (what the filter
    /// rules protect stays, and then so does the directory, which fails the run); without
    /// `--delete` the run fails naming it. Nothing or a non-directory there (never
    /// followed): nothing to do. A dry run changes nothing.
    pub(super) fn make_way(&self, pfd: &OwnedFd, name: &[u8], path: &SafeRelPath) -> Result<()> {
        let opts = self.options();
        if opts.dry_run {
            return Ok(());
        }
        let in_the_way = |what: &str| {
            let message = format!("a directory is in the way{what}");
            self.dest_err(path, io::Error::other(message))
        };
        match rustix::fs::unlinkat(pfd, name, AtFlags::REMOVEDIR) {
            Ok(()) => {
                self.note_deleted(vec![(path.as_bytes().to_vec(), true)]);
                return Ok(());
            }
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => return Ok(()),
            Err(rustix::io::Errno::NOTEMPTY | rustix::io::Errno::EXIST) if opts.delete => {}
            Err(rustix::io::Errno::NOTEMPTY | rustix::io::Errno::EXIST) => {
                return Err(in_the_way(" and not empty (--delete replaces it)"));
            }
            Err(x) => return Err(self.dest_err(path, x.into())),
        }
        let protect = self.protect.lock().map(|p| p.clone()).unwrap_or_default();
        let how = Removal {
            rules: &protect,
            dry: false,
        };
        let mut gone = Vec::new();
        let removed =
            remove_tree(pfd, name, path, &how, &mut gone).map_err(|x| self.dest_err(path, x))?;
        self.note_deleted(gone);
        match removed {
            true => Ok(()),
            false => Err(in_the_way(", holding what the filter rules protect")),
        }
    }
}

/// What `--delete` keeps of a path the sender sent: 16 bytes of its BLAKE3 hash instead of
/// the path (a million paths took 160 MiB as paths; as keys, 16 bytes each in the set). Two
/// paths sharing a key (about one chance in 2^128 per pair) could only keep an entry that
/// should have been deleted, never delete one that was sent; and a sender that wants an
/// entry kept can simply send it.
pub(super) fn seen_key(path: &SafeRelPath) -> u128 {
    let h = blake3::hash(path.as_bytes());
    let mut key = [0u8; 16];
    key.copy_from_slice(&h.as_bytes()[..16]);
    u128::from_le_bytes(key)
}

/// How `remove_tree` removes: what stays (the sender's rules), and whether it only lists.
struct Removal<'a> {
    rules: &'a Filter,
    dry: bool,
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
/// the rules do not exclude (symlinks are removed, never followed); a directory that keeps
/// an excluded entry stays, as with rsync. A dry run removes nothing. Adds each entry
/// removed to `gone` (its path, and whether it is a directory), children first; returns
/// whether `name` itself was removed.
fn remove_tree(
    parent: &OwnedFd,
    name: &[u8],
    path: &SafeRelPath,
    how: &Removal<'_>,
    gone: &mut Vec<(Vec<u8>, bool)>,
) -> io::Result<bool> {
    let st = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        if !how.dry {
            rustix::fs::unlinkat(parent, name, AtFlags::empty())?;
        }
        gone.push((path.as_bytes().to_vec(), false));
        return Ok(true);
    }
    // A read-only directory cannot be emptied until it is writable, nor listed until it is
    // readable: made u+rwx through its descriptor, its mode put back if anything stays.
    let (fd, mode) = match how.dry {
        true => (
            rustix::fs::openat(
                parent,
                name,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?,
            None,
        ),
        false => {
            let (fd, m) = fsops::open_dir_owned(parent, name)?;
            (fd, Some(m))
        }
    };
    let mut kept = false;
    for child in list(&fd)? {
        let Ok(child_path) = path.join(&child) else {
            kept = true;
            continue;
        };
        if excluded(how.rules, &fd, &child, &child_path) {
            kept = true;
            continue;
        }
        kept |= !remove_tree(&fd, &child, &child_path, how, gone)?;
    }
    if kept {
        if let Some(m) = mode {
            let _ = rustix::fs::fchmod(&fd, Mode::from_raw_mode(m));
        }
        return Ok(false);
    }
    if !how.dry {
        rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR)?;
    }
    gone.push((path.as_bytes().to_vec(), true));
    Ok(true)
}
