//! What the sender knows of a source file's data: where its bytes are (sparse files are
//! mapped with SEEK_DATA/SEEK_HOLE), the stamp that tells whether it changed, how it
//! is read through a descriptor opened beneath its source root (see `plan::beneath`), and
//! its extended attributes.
//!
//! Extended attributes (`source_xattrs`): one `llistxattr` on the walked name finds that
//! most files have none; else the file is opened beneath its source root, `O_NOFOLLOW |
//! O_NONBLOCK`, checked to be the walked inode, and read with `flistxattr`/`fgetxattr` (a
//! symlink through `/proc/self/fd/N` of an `O_PATH` descriptor).

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{OFlags, SeekFrom};

use super::beneath::Within;
use super::meta::Meta;
use crate::protocol::Xattrs;
use crate::store::xattr;

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

    /// The stamp of what the walk read, `meta`.
    pub fn of_meta(meta: &Meta) -> Stamp {
        let ns = |(s, n): (i64, u32)| i128::from(s) * 1_000_000_000 + i128::from(n);
        Stamp {
            inode: (meta.dev(), meta.ino()),
            size: meta.len(),
            mtime: ns(meta.mtime()),
            ctime: ns(meta.ctime()),
        }
    }
}

/// Opens a file by its path to read it, never through a symlink that replaced it (on the
/// last name only) and without blocking on a FIFO that replaced it. For the probe's
/// samples, which it finds by path; the sender opens what it walked beneath its source
/// root (`plan::beneath`).
pub fn open_source(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
}

/// The extended attributes of the walked `path` when it is a regular file, directory or
/// symlink (`None` for other kinds, or with a warning when they cannot be read), read
/// through a descriptor opened beneath its source root (`open`, see `plan::beneath`) and
/// checked to be the inode `meta` describes: the file or directory opened without
/// following a symlink or blocking, a symlink as `O_PATH` (see `store::xattr`). Most
/// files have none, which one `llistxattr` on the name (following nothing but the
/// directories the walk just went through) says without opening anything.
pub(super) fn source_xattrs(
    path: &Path,
    meta: &Meta,
    open: impl FnOnce(OFlags) -> io::Result<OwnedFd>,
) -> Option<Xattrs> {
    let flags = if meta.is_symlink() {
        OFlags::PATH
    } else if meta.is_dir() {
        OFlags::RDONLY | OFlags::DIRECTORY
    } else if meta.is_file() {
        OFlags::RDONLY | OFlags::NONBLOCK
    } else {
        return None;
    };
    match rustix::fs::llistxattr_query(path) {
        Ok(0) | Err(rustix::io::Errno::NOTSUP) => return Some(Xattrs::default()),
        _ => {}
    }
    let read = || -> io::Result<Xattrs> {
        let fd = open(flags)?;
        let st = rustix::fs::fstat(&fd)?;
        if (st.st_dev, st.st_ino) != (meta.dev(), meta.ino()) {
            return Err(io::Error::other("replaced while being read"));
        }
        xattr::read(match meta.is_symlink() {
            true => xattr::Target::Path(fd.as_fd()),
            false => xattr::Target::Fd(fd.as_fd()),
        })
    };
    match read() {
        Ok(x) => Some(x),
        Err(e) => {
            crate::progress::warn(&format!(
                "cannot read the extended attributes of {}: {e}; sent without them",
                crate::progress::escape(&path.to_string_lossy())
            ));
            None
        }
    }
}

/// The byte ranges of the walked file `at` that hold data. A file whose allocated blocks
/// cover its size is one range without a syscall; others are opened beneath their source
/// root and mapped with SEEK_DATA/SEEK_HOLE.
pub(super) fn data_extents(at: &Within, meta: &Meta) -> io::Result<Vec<(u64, u64)>> {
    let size = meta.len();
    if size == 0 {
        return Ok(Vec::new());
    }
    if meta.blocks() * 512 >= size {
        return Ok(vec![(0, size)]);
    }
    let f = at.open_file()?;
    if !Stamp::of(&f.metadata()?).same_file(&Stamp::of_meta(meta)) {
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
    fn sparse_file_maps_to_data_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sparse");
        let mut f = File::create(&p).unwrap();
        f.set_len(64 << 20).unwrap();
        f.seek(io::SeekFrom::Start(8 << 20)).unwrap();
        f.write_all(&vec![1u8; 1 << 20]).unwrap();
        f.sync_all().unwrap();
        let meta = Meta::stat(&p).unwrap();
        let root = std::sync::Arc::new(super::super::beneath::Root::of(&p, &meta).unwrap());
        let x = data_extents(&Within::new(&root, &p).unwrap(), &meta).unwrap();
        let total: u64 = x.iter().map(|(a, b)| b - a).sum();
        assert!((1 << 20..4 << 20).contains(&total), "{x:?}");
        assert!(x.iter().all(|&(a, b)| a < b && b <= 64 << 20));
    }
}
