//! Where the walk finds a thing: its path (for messages, and for the sender, which opens
//! files by it later with its own checks) and, for a plain child of a directory being
//! walked, that directory's descriptor. The child is stat'ed and its symlink read through
//! the descriptor: the kernel resolves one name, not the whole path again, and never
//! through a directory that a symlink replaced after the walk opened it. Each directory is
//! opened `O_DIRECTORY | O_NOFOLLOW` and checked to be the inode the walk stat'ed; below
//! 100 levels (`HELD_DIRS`) the walk goes by path, so a deep tree does not hold more
//! descriptors than the process may have.

use std::ffi::OsString;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use rustix::fs::{Mode, OFlags, RawDir, CWD};

use super::super::meta::Meta;

/// A thing the walk looks at.
#[derive(Clone, Copy)]
pub(super) struct At<'a> {
    /// Its path on this host.
    pub path: &'a Path,
    /// The open directory holding it under its last name; `None`: reach it by path (a
    /// source's root, what a followed symlink leads to, or below [`HELD_DIRS`] levels).
    pub dir: Option<BorrowedFd<'a>>,
}

/// Directories below this many levels are walked by path, so that a deep tree does not
/// hold more descriptors open than the process may have.
pub(super) const HELD_DIRS: usize = 100;

impl At<'_> {
    /// Its last name, as the directory holding it lists it.
    fn name(&self) -> &Path {
        Path::new(self.path.file_name().unwrap_or(self.path.as_os_str()))
    }

    /// Its status, a symlink as a symlink. A path longer than the system takes fails as
    /// it would by path (`ENAMETOOLONG`), even though one name would resolve: the sender
    /// opens files by path, and a path that long cannot be sent.
    pub fn stat(&self) -> io::Result<Meta> {
        if self.path.as_os_str().len() >= libc::PATH_MAX as usize {
            return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
        }
        match self.dir {
            Some(d) => Meta::at(d, self.name()),
            None => Meta::lstat(self.path),
        }
    }

    /// What the symlink it is points to.
    pub fn read_link(&self) -> io::Result<Vec<u8>> {
        match self.dir {
            Some(d) => Ok(rustix::fs::readlinkat(d, self.name(), Vec::new())?.into_bytes()),
            None => Ok(std::fs::read_link(self.path)?.into_os_string().into_vec()),
        }
    }

    /// Opens the directory it is, checked to be the inode `meta` describes: a directory
    /// replaced by a symlink (or by another directory) since it was stat'ed is not
    /// walked.
    pub fn open_dir(&self, meta: &Meta) -> io::Result<OwnedFd> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match self.dir {
            Some(d) => rustix::fs::openat(d, self.name(), flags, Mode::empty()),
            None => rustix::fs::openat(CWD, self.path, flags, Mode::empty()),
        };
        let replaced = || io::Error::other("replaced while being walked; not followed");
        let fd = match fd {
            Ok(fd) => fd,
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => return Err(replaced()),
            Err(e) => return Err(e.into()),
        };
        let now = Meta::of_fd(&fd)?;
        if (now.dev(), now.ino()) != (meta.dev(), meta.ino()) {
            return Err(replaced());
        }
        Ok(fd)
    }
}

/// The entry names the open directory `dir` lists, sorted, without `.` and `..`; after an
/// error, what could be read and the error.
pub(super) fn names(dir: &OwnedFd) -> (Vec<OsString>, Option<io::Error>) {
    // As glibc's readdir: 32 KiB per getdents64, some 1,000 names of a large directory.
    let mut buf = Vec::with_capacity(32 << 10);
    let mut dir = RawDir::new(dir, buf.spare_capacity_mut());
    let mut names = Vec::new();
    while let Some(d) = dir.next() {
        match d {
            Ok(d) => {
                let name = d.file_name().to_bytes();
                if name != b"." && name != b".." {
                    names.push(std::ffi::OsStr::from_bytes(name).to_os_string());
                }
            }
            Err(e) => {
                names.sort();
                return (names, Some(e.into()));
            }
        }
    }
    names.sort();
    (names, None)
}
