//! A source file's status as the walk reads it: one `statx` relative to the descriptor of
//! the directory that holds it (the kernel resolves one name, not the whole path, and
//! what it resolves is the directory the walk opened), or by path for a source's root.

use std::io;
use std::os::fd::AsFd;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Statx, StatxFlags, CWD};

/// What `statx` says of one file.
#[derive(Clone, Copy)]
pub struct Meta(Statx);

impl std::fmt::Debug for Meta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meta")
            .field("kind", &self.kind())
            .field("dev", &self.dev())
            .field("ino", &self.ino())
            .field("len", &self.len())
            .finish()
    }
}

impl Meta {
    /// `name` in the directory `dir`, not following a symlink there.
    pub fn at(dir: impl AsFd, name: &Path) -> io::Result<Meta> {
        statx(dir, name, AtFlags::SYMLINK_NOFOLLOW)
    }

    /// `path` itself, a symlink as a symlink (`lstat`).
    pub fn lstat(path: &Path) -> io::Result<Meta> {
        statx(CWD, path, AtFlags::SYMLINK_NOFOLLOW)
    }

    /// What `path` leads to, following symlinks (`stat`).
    pub fn stat(path: &Path) -> io::Result<Meta> {
        statx(CWD, path, AtFlags::empty())
    }

    /// The open file `fd` (`fstat`).
    pub fn of_fd(fd: impl AsFd) -> io::Result<Meta> {
        statx(fd, "", AtFlags::EMPTY_PATH)
    }

    /// Its type.
    pub fn kind(&self) -> FileType {
        FileType::from_raw_mode(u32::from(self.0.stx_mode))
    }

    /// A directory.
    pub fn is_dir(&self) -> bool {
        self.kind() == FileType::Directory
    }

    /// A regular file.
    pub fn is_file(&self) -> bool {
        self.kind() == FileType::RegularFile
    }

    /// A symlink.
    pub fn is_symlink(&self) -> bool {
        self.kind() == FileType::Symlink
    }

    /// The device holding it, encoded as `st_dev` (and `std`'s `MetadataExt::dev`) are.
    pub fn dev(&self) -> u64 {
        rustix::fs::makedev(self.0.stx_dev_major, self.0.stx_dev_minor)
    }

    /// Its inode number.
    pub fn ino(&self) -> u64 {
        self.0.stx_ino
    }

    /// Its number of hard links.
    pub fn nlink(&self) -> u64 {
        u64::from(self.0.stx_nlink)
    }

    /// Its size in bytes.
    pub fn len(&self) -> u64 {
        self.0.stx_size
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// 512-byte blocks allocated to it.
    pub fn blocks(&self) -> u64 {
        self.0.stx_blocks
    }

    /// Its type and permission bits, as `st_mode`.
    pub fn mode(&self) -> u32 {
        u32::from(self.0.stx_mode)
    }

    /// Owner.
    pub fn uid(&self) -> u32 {
        self.0.stx_uid
    }

    /// Group.
    pub fn gid(&self) -> u32 {
        self.0.stx_gid
    }

    /// The device it is, for a device node, encoded as `st_rdev`.
    pub fn rdev(&self) -> u64 {
        rustix::fs::makedev(self.0.stx_rdev_major, self.0.stx_rdev_minor)
    }

    /// Modification time: seconds and nanoseconds since the epoch.
    pub fn mtime(&self) -> (i64, u32) {
        (self.0.stx_mtime.tv_sec, self.0.stx_mtime.tv_nsec)
    }

    /// Status change time: seconds and nanoseconds since the epoch.
    pub fn ctime(&self) -> (i64, u32) {
        (self.0.stx_ctime.tv_sec, self.0.stx_ctime.tv_nsec)
    }
}

fn statx(dir: impl AsFd, name: impl rustix::path::Arg, flags: AtFlags) -> io::Result<Meta> {
    Ok(Meta(rustix::fs::statx(
        dir,
        name,
        flags,
        StatxFlags::BASIC_STATS,
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// The walk's stamps are compared with `std`'s: every field must read the same.
    #[test]
    fn reads_what_std_reads() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"hello").unwrap();
        std::os::unix::fs::symlink("f", dir.path().join("l")).unwrap();
        let std = std::fs::symlink_metadata(&p).unwrap();
        let fd = std::fs::File::open(dir.path()).unwrap();
        for m in [
            Meta::lstat(&p).unwrap(),
            Meta::stat(&dir.path().join("l")).unwrap(),
            Meta::at(&fd, Path::new("f")).unwrap(),
            Meta::of_fd(std::fs::File::open(&p).unwrap()).unwrap(),
        ] {
            assert!(m.is_file() && !m.is_dir() && !m.is_symlink());
            assert_eq!((m.dev(), m.ino(), m.nlink()), (std.dev(), std.ino(), 1));
            assert_eq!(
                (m.len(), m.blocks(), m.mode()),
                (5, std.blocks(), std.mode())
            );
            assert_eq!(
                (m.uid(), m.gid(), m.rdev()),
                (std.uid(), std.gid(), std.rdev())
            );
            assert_eq!(m.mtime(), (std.mtime(), std.mtime_nsec() as u32));
            assert_eq!(m.ctime(), (std.ctime(), std.ctime_nsec() as u32));
        }
        let l = Meta::at(&fd, Path::new("l")).unwrap();
        assert!(l.is_symlink());
        let d = Meta::of_fd(&fd).unwrap();
        assert!(d.is_dir());
    }
}
