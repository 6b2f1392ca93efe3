//! `--delete`: removes destination entries that are absent at the source, only inside
//! directories the source sent (as rsync does), never following a symlink and never
//! leaving the destination root. In a dry run it only lists what it would remove; either
//! way each removal is an [`Item`] when items are collected (children before their
//! directory, as rsync prints them).

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

use super::fsops;
use super::state::Store;
use crate::error::Result;
use crate::protocol::{Change, Item, ItemKind, SafeRelPath};

impl Store {
    /// Deletes, in each directory the sender sent, every entry it did not send.
    pub(super) fn delete_extraneous(&self, dirs: &[SafeRelPath]) -> Result<()> {
        let seen = self.seen.lock().map(|s| s.clone()).unwrap_or_default();
        let dry = self.options().dry_run;
        for dir in dirs {
            let fd = match fsops::open_dir(&self.root, dir) {
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
                if seen.contains(&child) {
                    continue;
                }
                let mut gone = Vec::new();
                remove_tree(&fd, &name, dry, &mut gone).map_err(|x| self.dest_err(&child, x))?;
                self.deleted.fetch_add(gone.len() as u64, Ordering::Relaxed);
                for (rel, is_dir) in gone {
                    self.note_item(Item {
                        path: fsops::join(dir, &rel),
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
        }
        Ok(())
    }
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

/// Removes `name` in `parent` and, for a directory, everything below it (symlinks are
/// removed, never followed); only lists them when `dry`. Adds each entry removed to
/// `gone` (its path from `parent`, and whether it is a directory), children first.
fn remove_tree(
    parent: &OwnedFd,
    name: &[u8],
    dry: bool,
    gone: &mut Vec<(Vec<u8>, bool)>,
) -> io::Result<()> {
    let st = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        if !dry {
            rustix::fs::unlinkat(parent, name, AtFlags::empty())?;
        }
        gone.push((name.to_vec(), false));
        return Ok(());
    }
    let fd = rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    // A read-only directory cannot be emptied until it is writable (its mode read from
    // the descriptor: the name may have been swapped since the stat).
    if let (Ok(st), false) = (rustix::fs::fstat(&fd), dry) {
        let _ = rustix::fs::fchmod(&fd, Mode::from_raw_mode((st.st_mode & 0o7777) | 0o700));
    }
    let mut below = Vec::new();
    for child in list(&fd)? {
        remove_tree(&fd, &child, dry, &mut below)?;
    }
    if !dry {
        rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR)?;
    }
    for (rel, is_dir) in below {
        let mut p = name.to_vec();
        p.push(b'/');
        p.extend_from_slice(&rel);
        gone.push((p, is_dir));
    }
    gone.push((name.to_vec(), true));
    Ok(())
}
