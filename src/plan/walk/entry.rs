//! What one walked thing becomes: its manifest entry (kind, mode, times, owner, xattrs),
//! the hardlink it may be, where its data is, and the warning for a symlink leading
//! outside the source.

use std::io;
use std::path::Path;

use rustix::fs::{FileType, OFlags};

use crate::protocol::{Entry, EntryKind};

use super::super::beneath::{replaced, Within};
use super::super::extents::{data_extents, source_xattrs};
use super::super::meta::Meta;
use super::{At, FileData, Skipped, Stamp, Walked, Walker, OUTSIDE_NAMED};

/// The entry for one regular file, walked again (after it changed while being read).
/// `None` if it is no longer a regular file. It is looked up beneath its source root
/// (`at`) without following a symlink, and with `parent` (where the walk found it) only in
/// that same directory: a directory swapped for a symlink (or another directory) since the
/// walk fails here instead of sending a file from outside the source.
pub fn file_again(
    id: u64,
    path: &Path,
    dest: Vec<u8>,
    xattrs: bool,
    at: &Within,
    parent: Option<(u64, u64)>,
) -> io::Result<Option<Walked>> {
    let dir_rel = at.rel.parent().unwrap_or(Path::new(""));
    let name = at.rel.file_name().map(Path::new).unwrap_or(Path::new("."));
    let dir = at
        .root
        .open(dir_rel, OFlags::RDONLY | OFlags::DIRECTORY)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP | libc::ENOTDIR) => replaced(),
            _ => e,
        })?;
    if let Some(p) = parent {
        let m = Meta::of_fd(&dir)?;
        if (m.dev(), m.ino()) != p {
            return Err(replaced());
        }
    }
    let meta = Meta::at(&dir, name)?;
    if !meta.is_file() {
        return Ok(None);
    }
    let extents = data_extents(at, &meta)?;
    let data_bytes = extents.iter().map(|(a, b)| b - a).sum();
    let size = meta.len();
    let mut entry = make_entry(
        id,
        dest.clone(),
        EntryKind::File { size, data_bytes },
        &meta,
    );
    entry.xattrs = xattrs
        .then(|| source_xattrs(path, &meta, |flags| at.open(flags)))
        .flatten();
    Ok(Some(Walked {
        entry,
        len: size,
        data: Some(FileData {
            path: path.to_path_buf(),
            at: at.clone(),
            size,
            extents,
            stamp: Stamp::of_meta(&meta),
            dest,
            parent,
        }),
    }))
}

impl Walker<'_> {
    /// Where the walked `path` is opened again: beneath the current root.
    fn within(&self, path: &Path) -> io::Result<Within> {
        match &self.root {
            Some(root) => Within::new(root, path),
            None => Err(io::Error::other("no source root")),
        }
    }

    /// Warns (the first few times) that the symlink at `rel` points outside its source,
    /// so what it points to is not sent.
    fn note_outside(&mut self, rel: &[u8], target: &[u8]) {
        let inside = rel.get(self.base..).unwrap_or_default();
        if !super::super::select::unsafe_symlink(target, inside) {
            return;
        }
        self.outside += 1;
        if self.outside <= OUTSIDE_NAMED && !self.select.quiet {
            crate::progress::warn(&format!(
                "{} is a symlink to {}, outside the source: sent as a link, without what it \
                 points to (-L or --copy-unsafe-links send that)",
                crate::progress::escape(&String::from_utf8_lossy(rel)),
                crate::progress::escape(&String::from_utf8_lossy(target)),
            ));
        }
    }

    /// For a name of an inode that has others (a file, device or FIFO, as rsync's `-H`
    /// links them): a hardlink entry to the first name sent, or `None` for the first
    /// (remembered) and for an inode with one name.
    fn hardlink(&mut self, id: u64, rel: &[u8], meta: &Meta) -> Option<Walked> {
        if meta.nlink() < 2 {
            return None;
        }
        let key = (meta.dev(), meta.ino());
        let Some(target) = self.inodes.get(&key) else {
            self.inodes.insert(key, rel.to_vec());
            return None;
        };
        let kind = EntryKind::Hardlink {
            target: target.clone(),
        };
        Some(Walked {
            entry: make_entry(id, rel.to_vec(), kind, meta),
            data: None,
            len: meta.len(),
        })
    }

    /// The entry for `path`, which `meta` describes; `None` (reported through `skip`, or
    /// warned for a socket) when it is not sent.
    pub(super) fn entry(
        &mut self,
        at: At<'_>,
        rel: Vec<u8>,
        meta: &Meta,
        skip: &mut impl FnMut(Skipped),
    ) -> Option<Walked> {
        let path = at.path;
        let id = self.next_id;
        self.next_id += 1;
        let mut data = None;
        let kind = match meta.kind() {
            FileType::Directory => EntryKind::Dir,
            FileType::Symlink => match at.read_link() {
                Ok(target) => {
                    self.note_outside(&rel, &target);
                    EntryKind::Symlink { target }
                }
                Err(e) => {
                    skip(Skipped {
                        path: path.to_path_buf(),
                        error: e,
                    });
                    return None;
                }
            },
            FileType::RegularFile => {
                if let Some(link) = self.hardlink(id, &rel, meta) {
                    return Some(link);
                }
                let size = meta.len();
                let within = match self.within(path) {
                    Ok(w) => w,
                    Err(e) => {
                        skip(Skipped {
                            path: path.to_path_buf(),
                            error: e,
                        });
                        return None;
                    }
                };
                let extents = match data_extents(&within, meta) {
                    Ok(x) => x,
                    Err(e) => {
                        skip(Skipped {
                            path: path.to_path_buf(),
                            error: e,
                        });
                        return None;
                    }
                };
                let data_bytes = extents.iter().map(|(a, b)| b - a).sum();
                data = Some(FileData {
                    path: path.to_path_buf(),
                    at: within,
                    size,
                    extents,
                    stamp: Stamp::of_meta(meta),
                    dest: rel.clone(),
                    parent: self.ancestors.last().copied(),
                });
                EntryKind::File { size, data_bytes }
            }
            FileType::Fifo | FileType::BlockDevice | FileType::CharacterDevice => {
                if let Some(link) = self.hardlink(id, &rel, meta) {
                    return Some(link);
                }
                match meta.kind() {
                    FileType::Fifo => EntryKind::Fifo,
                    k => EntryKind::Device {
                        block: k == FileType::BlockDevice,
                        rdev: meta.rdev(),
                    },
                }
            }
            _ => {
                crate::progress::warn(&format!(
                    "skipping socket {}",
                    crate::progress::shown_path(path)
                ));
                return None;
            }
        };
        let mut entry = make_entry(id, rel, kind, meta);
        if !self.select.no_xattrs {
            entry.xattrs = source_xattrs(path, meta, |flags| self.within(path)?.open(flags));
        }
        let len = match entry.kind {
            EntryKind::File { size, .. } => size,
            _ => 0,
        };
        Some(Walked { entry, data, len })
    }
}

fn make_entry(id: u64, path: Vec<u8>, kind: EntryKind, meta: &Meta) -> Entry {
    let (mtime_sec, mtime_nsec) = meta.mtime();
    Entry {
        id,
        path,
        kind,
        mode: meta.mode() & 0o7777,
        mtime_sec,
        mtime_nsec: mtime_nsec.min(999_999_999),
        uid: meta.uid(),
        gid: meta.gid(),
        xattrs: None,
        checksum: None,
    }
}
