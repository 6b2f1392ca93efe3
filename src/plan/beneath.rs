//! Opening what the walk found again, later, without leaving its source. Every open is
//! resolved from a descriptor of the source's root with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` (on kernels without `openat2`, one
//! `openat(O_NOFOLLOW)` per name: `crate::resolve`): a directory swapped for a symlink after the walk makes
//! the open fail, instead of opening (as root, `O_NONBLOCK`) whatever the symlink leads to
//! outside the source, a device node or a FIFO included.
//!
//! A source directory's descriptor is opened once, when its walk starts, and checked to
//! be the directory the walk stat'ed. What needs no descriptor held for long (the
//! directory holding a source that is a single file, what a followed symlink leads to) is
//! opened by path at each use with `O_DIRECTORY` (which opens nothing else) and checked
//! to be the directory the walk saw.
//!
//! Not here: checking that the file opened is the one the walk saw (the caller compares
//! its stamp), and the walk.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::meta::Meta;
use crate::resolve;

/// The error of a file whose directory (or the directory of the source) is no longer the
/// one the walk listed.
pub fn replaced() -> io::Error {
    io::Error::other("its directory was replaced since the walk (by a symlink?); not followed")
}

/// The error of a path that would leave its source (`..`, or absolute).
fn escapes() -> io::Error {
    io::Error::other("leads outside its source; not followed")
}

/// A directory that walked paths are resolved beneath.
#[derive(Debug)]
pub struct Root {
    /// Its path, as the walk named it: walked paths start with it.
    path: PathBuf,
    /// Device and inode the walk saw.
    id: (u64, u64),
    /// Held open (a source directory); `None`: opened by path at each use.
    fd: Option<OwnedFd>,
}

impl Root {
    /// The source directory at `path`, opened now and checked to be what `meta` (the
    /// walk's stat of it) describes.
    pub fn held(path: &Path, meta: &Meta) -> io::Result<Root> {
        let mut root = Root::by_path(path.to_path_buf(), (meta.dev(), meta.ino()));
        root.fd = Some(root.open_by_path()?);
        Ok(root)
    }

    /// The directory at `path`, opened by path at each use and then checked to be
    /// `(dev, ino)`.
    pub fn by_path(path: PathBuf, id: (u64, u64)) -> Root {
        Root { path, id, fd: None }
    }

    /// The root for a walked `path` that is not below a held source directory: the
    /// directory itself, or for anything else the directory holding it.
    pub fn of(path: &Path, meta: &Meta) -> io::Result<Root> {
        if meta.is_dir() {
            return Ok(Root::by_path(path.to_path_buf(), (meta.dev(), meta.ino())));
        }
        let dir = path.parent().unwrap_or(Path::new(""));
        let m = Meta::stat(nonempty(dir))?;
        Ok(Root::by_path(dir.to_path_buf(), (m.dev(), m.ino())))
    }

    /// Its path, as the walk named it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens `rel` beneath it with `flags` (plus `O_NOFOLLOW | O_CLOEXEC`), following no
    /// symlink on the way and not the last name either. An empty `rel` is the root.
    pub fn open(&self, rel: &Path, flags: OFlags) -> io::Result<OwnedFd> {
        if rel
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::RootDir))
        {
            return Err(escapes());
        }
        let fresh;
        let dir = match &self.fd {
            Some(fd) => fd.as_fd(),
            None => {
                fresh = self.open_by_path()?;
                fresh.as_fd()
            }
        };
        let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match open_beneath(dir, rel, flags) {
            Ok(fd) => Ok(fd),
            // A symlink (or a non-directory) on the way: a directory replaced since the
            // walk, unless it is the last name itself (a file replaced by a symlink,
            // which the caller sees as a file that changed).
            Err(e @ (Errno::LOOP | Errno::NOTDIR)) => {
                let parent = rel.parent().unwrap_or(Path::new(""));
                let dirs = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                match open_beneath(dir, parent, dirs) {
                    Err(Errno::LOOP | Errno::NOTDIR | Errno::XDEV) => Err(replaced()),
                    _ => Err(e.into()),
                }
            }
            Err(Errno::XDEV) => Err(escapes()),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens the root itself by its path, checked to be the directory the walk saw.
    fn open_by_path(&self) -> io::Result<OwnedFd> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd =
            rustix::fs::open(nonempty(&self.path), flags, Mode::empty()).map_err(|e| match e {
                Errno::NOTDIR | Errno::LOOP => replaced(),
                e => e.into(),
            })?;
        let m = Meta::of_fd(&fd)?;
        if (m.dev(), m.ino()) != self.id {
            return Err(replaced());
        }
        Ok(fd)
    }
}

/// `dir`, or `.` for the empty path (the parent of a bare name).
fn nonempty(dir: &Path) -> &Path {
    match dir.as_os_str().is_empty() {
        true => Path::new("."),
        false => dir,
    }
}

/// A walked thing: the root it is beneath and its path from there.
#[derive(Clone, Debug)]
pub struct Within {
    /// The root.
    pub root: Arc<Root>,
    /// Its path beneath the root (empty: the root itself).
    pub rel: PathBuf,
}

impl Within {
    /// What `path` (a path the walk built from `root`'s) is beneath `root`.
    pub fn new(root: &Arc<Root>, path: &Path) -> io::Result<Within> {
        let rel = path.strip_prefix(&root.path).map_err(|_| escapes())?;
        Ok(Within {
            root: Arc::clone(root),
            rel: rel.to_path_buf(),
        })
    }

    /// Opens it with `flags`, as [`Root::open`].
    pub fn open(&self, flags: OFlags) -> io::Result<OwnedFd> {
        self.root.open(&self.rel, flags)
    }

    /// Opens it to read a regular file's data, without blocking on a FIFO that replaced
    /// it.
    pub fn open_file(&self) -> io::Result<File> {
        Ok(File::from(self.open(OFlags::RDONLY | OFlags::NONBLOCK)?))
    }
}

/// Opens `rel` (no `..`, not absolute) beneath `dir`, following no symlink.
fn open_beneath(dir: BorrowedFd<'_>, rel: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
    resolve::open(dir, rel.as_os_str().as_bytes(), flags, Mode::empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::io::Read;
    use std::os::unix::fs::symlink;

    /// A source `t` with `t/a/b/f`, and `elsewhere/b/f` outside it.
    fn tree() -> (tempfile::TempDir, Arc<Root>) {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("t");
        fs::create_dir_all(t.join("a/b")).unwrap();
        fs::write(t.join("a/b/f"), b"mine").unwrap();
        fs::create_dir_all(dir.path().join("elsewhere/b")).unwrap();
        fs::write(dir.path().join("elsewhere/b/f"), b"secret").unwrap();
        let root = Root::held(&t, &Meta::lstat(&t).unwrap()).unwrap();
        (dir, Arc::new(root))
    }

    fn read(f: io::Result<File>) -> io::Result<String> {
        let mut s = String::new();
        f?.read_to_string(&mut s)?;
        Ok(s)
    }

    /// Both ways of resolving: `openat2`, and the names one by one.
    fn open_both(root: &Root, rel: &str) -> [Result<OwnedFd, Errno>; 2] {
        let Some(fd) = &root.fd else {
            panic!("not held")
        };
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let rel = Path::new(rel);
        [
            open_beneath(fd.as_fd(), rel, flags),
            resolve::by_names(fd.as_fd(), rel.as_os_str().as_bytes(), flags, Mode::empty()),
        ]
    }

    #[test]
    fn a_nested_file_is_opened() {
        let (dir, root) = tree();
        let w = Within::new(&root, &dir.path().join("t/a/b/f")).unwrap();
        assert_eq!(w.rel, Path::new("a/b/f"));
        assert_eq!(read(w.open_file()).unwrap(), "mine");
        for r in open_both(&root, "a/b/f") {
            assert_eq!(
                read(r.map(File::from).map_err(io::Error::from)).unwrap(),
                "mine"
            );
        }
        // The root itself.
        let w = Within::new(&root, &dir.path().join("t")).unwrap();
        assert!(w.open(OFlags::RDONLY | OFlags::DIRECTORY).is_ok());
    }

    #[test]
    fn a_parent_swapped_for_a_symlink_to_outside_is_refused() {
        let (dir, root) = tree();
        let t = dir.path().join("t");
        let w = Within::new(&root, &t.join("a/b/f")).unwrap();
        fs::rename(t.join("a"), t.join("a.old")).unwrap();
        fs::create_dir(t.join("a")).unwrap();
        symlink(dir.path().join("elsewhere/b"), t.join("a/b")).unwrap();
        let e = w.open_file().unwrap_err();
        assert!(e.to_string().contains("its directory was replaced"), "{e}");
        for r in open_both(&root, "a/b/f") {
            let e = r.unwrap_err();
            assert!(matches!(e, Errno::LOOP | Errno::NOTDIR), "{e}");
        }
        // A relative symlink out of the source, too.
        fs::remove_file(t.join("a/b")).unwrap();
        symlink("../../elsewhere/b", t.join("a/b")).unwrap();
        let e = w.open_file().unwrap_err();
        assert!(e.to_string().contains("its directory was replaced"), "{e}");
    }

    #[test]
    fn the_last_name_a_symlink_is_not_followed() {
        let (dir, root) = tree();
        let t = dir.path().join("t");
        fs::remove_file(t.join("a/b/f")).unwrap();
        symlink(dir.path().join("elsewhere/b/f"), t.join("a/b/f")).unwrap();
        let e = Within::new(&root, &t.join("a/b/f"))
            .unwrap()
            .open_file()
            .unwrap_err();
        // As a file replaced by a symlink: the sender sees it as changed.
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
    }

    #[test]
    fn dot_dot_and_absolute_paths_are_refused() {
        let (_dir, root) = tree();
        for rel in ["../elsewhere/b/f", "a/../../elsewhere/b/f", "/etc/passwd"] {
            let e = root.open(Path::new(rel), OFlags::RDONLY).unwrap_err();
            assert!(e.to_string().contains("outside its source"), "{rel}: {e}");
            for r in open_both(&root, rel) {
                assert!(r.is_err(), "{rel}");
            }
        }
    }

    #[test]
    fn a_root_opened_by_path_must_be_the_directory_the_walk_saw() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("d");
        fs::create_dir(&d).unwrap();
        fs::write(d.join("f"), b"mine").unwrap();
        let root = Arc::new(Root::of(&d.join("f"), &Meta::lstat(&d.join("f")).unwrap()).unwrap());
        let w = Within::new(&root, &d.join("f")).unwrap();
        assert_eq!(read(w.open_file()).unwrap(), "mine");
        let other = dir.path().join("other");
        fs::create_dir(&other).unwrap();
        fs::write(other.join("f"), b"secret").unwrap();
        fs::rename(&d, dir.path().join("d.old")).unwrap();
        symlink(&other, &d).unwrap();
        let e = w.open_file().unwrap_err();
        assert!(e.to_string().contains("its directory was replaced"), "{e}");
    }
}
