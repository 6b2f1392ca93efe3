//! Walks the sources and produces manifest entries, parents before children, one at a
//! time: memory holds the names of one directory per level of depth plus a small record
//! per hardlinked inode, never the whole tree.
//!
//! Not here: reading file data (the stream workers do that) and deciding what the
//! receiver needs (it answers per batch).

use std::collections::HashMap;
use std::fs::{self, File};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::fs::SeekFrom;

use crate::error::{Error, Result};
use crate::protocol::{Entry, EntryKind};

/// One thing to send, as the user named it.
#[derive(Clone, Debug)]
pub struct Source {
    /// The path on this host.
    pub path: PathBuf,
    /// Its name at the destination root; `None` sends a directory's contents into the
    /// root itself (rsync's `src/`).
    pub dest_name: Option<Vec<u8>>,
}

impl Source {
    /// Applies rsync's rule: `dir/` means "the contents", anything else lands under its
    /// own last component.
    pub fn from_arg(arg: &Path) -> Source {
        let bytes = arg.as_os_str().as_bytes();
        let contents = bytes.ends_with(b"/") || bytes.ends_with(b"/.") || bytes == b".";
        let name = if contents {
            None
        } else {
            arg.file_name().map(|n| n.as_bytes().to_vec())
        };
        // `..` or `/` have no file name: send their contents.
        Source {
            path: arg.to_path_buf(),
            dest_name: name,
        }
    }
}

/// A walked entry, with what the sender needs to read its data.
#[derive(Debug)]
pub struct Walked {
    /// The manifest entry.
    pub entry: Entry,
    /// For regular files: where to read, and the byte ranges that hold data.
    pub data: Option<FileData>,
}

/// Where a regular file's data is, on this host.
#[derive(Debug, Clone)]
pub struct FileData {
    /// Path on this host.
    pub path: PathBuf,
    /// File size at walk time.
    pub size: u64,
    /// Data ranges `(start, end)`, sorted, excluding holes.
    pub extents: Vec<(u64, u64)>,
    /// Size, mtime and ctime at walk time: a file whose stamp differs after reading
    /// changed while it was read.
    pub stamp: Stamp,
    /// Its path at the destination (for re-sending it if it changes while read).
    pub dest: Vec<u8>,
}

/// What identifies a version of a file: which inode it is, its size, mtime and ctime
/// (nanoseconds). A path swapped for another file (or a symlink, or a FIFO) between the
/// walk and the read has another stamp, so what was read is never sent under its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// Device and inode.
    pub inode: (u64, u64),
    /// Size.
    pub size: u64,
    /// Modification time, ns since the epoch.
    pub mtime: i128,
    /// Status change time, ns since the epoch.
    pub ctime: i128,
}

impl Stamp {
    /// Whether both stamps are of the same inode.
    pub fn same_file(&self, other: &Stamp) -> bool {
        self.inode == other.inode
    }

    /// The stamp of `meta`.
    pub fn of(meta: &fs::Metadata) -> Stamp {
        Stamp {
            inode: (meta.dev(), meta.ino()),
            size: meta.len(),
            mtime: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
        }
    }
}

/// The entry for one regular file, walked again (after it changed while being read).
/// `None` if it is no longer a regular file.
pub fn file_again(id: u64, path: &Path, dest: Vec<u8>) -> io::Result<Option<Walked>> {
    let meta = fs::symlink_metadata(path)?;
    if !meta.is_file() {
        return Ok(None);
    }
    let extents = data_extents(path, &meta)?;
    let data_bytes = extents.iter().map(|(a, b)| b - a).sum();
    let size = meta.len();
    Ok(Some(Walked {
        entry: make_entry(
            id,
            dest.clone(),
            EntryKind::File { size, data_bytes },
            &meta,
        ),
        data: Some(FileData {
            path: path.to_path_buf(),
            size,
            extents,
            stamp: Stamp::of(&meta),
            dest,
        }),
    }))
}

/// Something the walk could not read; the transfer goes on without it.
#[derive(Debug)]
pub struct Skipped {
    /// The path on this host.
    pub path: PathBuf,
    /// Why.
    pub error: io::Error,
}

/// Checks every source exists before anything is sent, and that no two of them would
/// land under the same name (`a/x b/x`: one would silently replace the other).
pub fn check_sources(sources: &[Source]) -> Result<()> {
    let mut seen: HashMap<&[u8], &Path> = HashMap::new();
    for s in sources {
        if let Some(name) = &s.dest_name {
            if let Some(first) = seen.insert(name, &s.path) {
                return Err(Error::Usage(format!(
                    "{} and {} would both arrive as {}; copy them separately or rename one",
                    crate::progress::escape(&first.display().to_string()),
                    crate::progress::escape(&s.path.display().to_string()),
                    crate::progress::escape(&String::from_utf8_lossy(name)),
                )));
            }
        }
    }
    for s in sources {
        fs::symlink_metadata(&s.path).map_err(|e| Error::Source {
            path: s.path.clone(),
            source: e,
        })?;
    }
    Ok(())
}

/// Walks `sources` in order, calling `emit` for each entry and `skip` for each
/// unreadable directory. Stops early when `emit` returns false (the transfer ended).
pub fn walk(
    sources: &[Source],
    mut emit: impl FnMut(Walked) -> bool,
    mut skip: impl FnMut(Skipped),
) -> Result<()> {
    let mut w = Walker {
        next_id: 0,
        inodes: HashMap::new(),
    };
    for s in sources {
        let meta = fs::symlink_metadata(&s.path).map_err(|e| Error::Source {
            path: s.path.clone(),
            source: e,
        })?;
        let rel = s.dest_name.clone().unwrap_or_default();
        if s.dest_name.is_none() && !meta.is_dir() {
            // `file/` is not a thing; treat as the file itself.
            let name = s
                .path
                .file_name()
                .map(|n| n.as_bytes().to_vec())
                .unwrap_or_default();
            if !w.visit(&s.path, name, &meta, &mut emit, &mut skip) {
                return Ok(());
            }
            continue;
        }
        if !w.visit(&s.path, rel, &meta, &mut emit, &mut skip) {
            return Ok(());
        }
    }
    Ok(())
}

struct Walker {
    next_id: u64,
    /// (dev, ino) of multiply-linked files already sent → their destination path.
    inodes: HashMap<(u64, u64), Vec<u8>>,
}

impl Walker {
    /// Emits `path` (and, for a directory, everything below it). False: stop.
    fn visit(
        &mut self,
        path: &Path,
        rel: Vec<u8>,
        meta: &fs::Metadata,
        emit: &mut impl FnMut(Walked) -> bool,
        skip: &mut impl FnMut(Skipped),
    ) -> bool {
        let Some(walked) = self.entry(path, rel.clone(), meta, skip) else {
            return true;
        };
        if !emit(walked) {
            return false;
        }
        if !meta.is_dir() {
            return true;
        }
        let mut names = match fs::read_dir(path) {
            Ok(rd) => {
                let mut names = Vec::new();
                for d in rd {
                    match d {
                        Ok(d) => names.push(d.file_name()),
                        Err(e) => {
                            skip(Skipped {
                                path: path.to_path_buf(),
                                error: e,
                            });
                            break;
                        }
                    }
                }
                names
            }
            Err(e) => {
                skip(Skipped {
                    path: path.to_path_buf(),
                    error: e,
                });
                return true;
            }
        };
        names.sort();
        for name in names {
            let child = path.join(&name);
            let meta = match fs::symlink_metadata(&child) {
                Ok(m) => m,
                Err(e) => {
                    skip(Skipped {
                        path: child,
                        error: e,
                    });
                    continue;
                }
            };
            let mut child_rel = rel.clone();
            if !child_rel.is_empty() {
                child_rel.push(b'/');
            }
            child_rel.extend_from_slice(name.as_bytes());
            if !self.visit(&child, child_rel, &meta, emit, skip) {
                return false;
            }
        }
        true
    }

    fn entry(
        &mut self,
        path: &Path,
        rel: Vec<u8>,
        meta: &fs::Metadata,
        skip: &mut impl FnMut(Skipped),
    ) -> Option<Walked> {
        let id = self.next_id;
        self.next_id += 1;
        let ft = meta.file_type();
        let mut data = None;
        let kind = if ft.is_dir() {
            EntryKind::Dir
        } else if ft.is_symlink() {
            match fs::read_link(path) {
                Ok(t) => EntryKind::Symlink {
                    target: t.as_os_str().as_bytes().to_vec(),
                },
                Err(e) => {
                    skip(Skipped {
                        path: path.to_path_buf(),
                        error: e,
                    });
                    return None;
                }
            }
        } else if ft.is_file() {
            if meta.nlink() > 1 {
                let key = (meta.dev(), meta.ino());
                if let Some(target) = self.inodes.get(&key) {
                    return Some(Walked {
                        entry: make_entry(
                            id,
                            rel,
                            EntryKind::Hardlink {
                                target: target.clone(),
                            },
                            meta,
                        ),
                        data: None,
                    });
                }
                self.inodes.insert(key, rel.clone());
            }
            let size = meta.len();
            let extents = match data_extents(path, meta) {
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
                size,
                extents,
                stamp: Stamp::of(meta),
                dest: rel.clone(),
            });
            EntryKind::File { size, data_bytes }
        } else if ft.is_fifo() {
            EntryKind::Fifo
        } else if ft.is_block_device() || ft.is_char_device() {
            EntryKind::Device {
                block: ft.is_block_device(),
                rdev: meta.rdev(),
            }
        } else {
            crate::progress::warn(&format!("skipping socket {}", path.display()));
            return None;
        };
        Some(Walked {
            entry: make_entry(id, rel, kind, meta),
            data,
        })
    }
}

fn make_entry(id: u64, path: Vec<u8>, kind: EntryKind, meta: &fs::Metadata) -> Entry {
    Entry {
        id,
        path,
        kind,
        mode: meta.mode() & 0o7777,
        mtime_sec: meta.mtime(),
        mtime_nsec: meta.mtime_nsec().clamp(0, 999_999_999) as u32,
        uid: meta.uid(),
        gid: meta.gid(),
    }
}

/// Opens a source file for reading as the walk saw it: never through a symlink that
/// replaced it, and without blocking on a FIFO that replaced it (the caller compares the
/// open file's [`Stamp`] with the walked one before using a byte).
pub fn open_source(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
}

/// The byte ranges of `path` that hold data. A file whose allocated blocks cover its
/// size is one range without a syscall; others are mapped with SEEK_DATA/SEEK_HOLE.
fn data_extents(path: &Path, meta: &fs::Metadata) -> io::Result<Vec<(u64, u64)>> {
    let size = meta.len();
    if size == 0 {
        return Ok(Vec::new());
    }
    if meta.blocks() * 512 >= size {
        return Ok(vec![(0, size)]);
    }
    let f = open_source(path)?;
    if !Stamp::of(&f.metadata()?).same_file(&Stamp::of(meta)) {
        return Err(io::Error::other("replaced while being read"));
    }
    let mut out = Vec::new();
    let mut pos = 0u64;
    while pos < size {
        let start = match rustix::fs::seek(&f, SeekFrom::Data(pos)) {
            Ok(s) => s,
            Err(rustix::io::Errno::NXIO) => break,
            // File systems without SEEK_DATA: treat the rest as data.
            Err(rustix::io::Errno::INVAL) => {
                out.push((pos, size));
                break;
            }
            Err(e) => return Err(e.into()),
        };
        if start >= size {
            break;
        }
        let end = match rustix::fs::seek(&f, SeekFrom::Hole(start)) {
            Ok(e) => e.min(size),
            Err(e) => return Err(e.into()),
        };
        if end <= start {
            break;
        }
        out.push((start, end));
        pos = end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, Write};

    #[test]
    fn rsync_trailing_slash_rule() {
        assert_eq!(
            Source::from_arg(Path::new("a/b")).dest_name,
            Some(b"b".to_vec())
        );
        assert_eq!(Source::from_arg(Path::new("a/b/")).dest_name, None);
        assert_eq!(Source::from_arg(Path::new(".")).dest_name, None);
        assert_eq!(Source::from_arg(Path::new("/")).dest_name, None);
    }

    #[test]
    fn sparse_file_maps_to_data_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sparse");
        let mut f = File::create(&p).unwrap();
        f.set_len(64 << 20).unwrap();
        f.seek(io::SeekFrom::Start(8 << 20)).unwrap();
        f.write_all(&vec![1u8; 1 << 20]).unwrap();
        f.sync_all().unwrap();
        let meta = fs::metadata(&p).unwrap();
        let x = data_extents(&p, &meta).unwrap();
        let total: u64 = x.iter().map(|(a, b)| b - a).sum();
        assert!((1 << 20..4 << 20).contains(&total), "{x:?}");
        assert!(x.iter().all(|&(a, b)| a < b && b <= 64 << 20));
    }

    #[test]
    fn walk_emits_parents_first_and_links_once() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("t");
        fs::create_dir_all(root.join("a/b")).unwrap();
        fs::write(root.join("a/b/f"), b"x").unwrap();
        fs::hard_link(root.join("a/b/f"), root.join("a/g")).unwrap();
        std::os::unix::fs::symlink("nowhere", root.join("l")).unwrap();
        let mut got = Vec::new();
        walk(
            &[Source::from_arg(&root)],
            |w| {
                got.push(w.entry);
                true
            },
            |s| panic!("{s:?}"),
        )
        .unwrap();
        let paths: Vec<_> = got
            .iter()
            .map(|e| String::from_utf8_lossy(&e.path).into_owned())
            .collect();
        assert_eq!(paths, ["t", "t/a", "t/a/b", "t/a/b/f", "t/a/g", "t/l"]);
        assert!(matches!(&got[4].kind, EntryKind::Hardlink { target } if target == b"t/a/b/f"));
        assert!(matches!(&got[5].kind, EntryKind::Symlink { target } if target == b"nowhere"));
    }
}
