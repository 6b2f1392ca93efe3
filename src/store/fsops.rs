//! File-system operations beneath a root directory that never follow a symlink and never
//! leave the root: every path is resolved with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)` from the root's descriptor (name by name before Linux 5.6:
//! `crate::resolve`), and entries are created and renamed relative to their parent's
//! descriptor. Metadata is applied through a descriptor
//! checked to be what was stat'ed or made, never through a name that could be swapped.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use rustix::fs::{self as rfs, Mode, OFlags, Timespec, Timestamps};

use super::xattr;
use crate::protocol::{Entry, SafeRelPath};

/// Opens `path` beneath `root` with `flags`, refusing symlinks anywhere on the way
/// (`openat2`, or name by name on kernels before 5.6: `crate::resolve`).
pub fn open_beneath(root: &OwnedFd, path: &[u8], flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
    Ok(crate::resolve::open(root.as_fd(), path, flags, mode)?)
}

/// Removes the directories `made` (deepest first, `made[0]` the root itself) that this run
/// created for its root, each only if still empty, the root only if its name still names
/// the directory `root` holds; stops at the first that cannot go (best effort: a dry run's
/// tidying, never an error).
pub fn remove_made_dirs(root: &OwnedFd, made: &[std::path::PathBuf]) {
    let Ok(own) = rfs::fstat(root) else {
        return;
    };
    for (i, dir) in made.iter().enumerate() {
        let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
            return;
        };
        let parent = match parent.as_os_str().is_empty() {
            true => std::path::Path::new("."),
            false => parent,
        };
        let Ok(pfd) = rfs::open(
            parent,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            return;
        };
        if i == 0 {
            match rfs::statat(&pfd, name, rfs::AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino) => {}
                _ => return,
            }
        }
        if rfs::unlinkat(&pfd, name, rfs::AtFlags::REMOVEDIR).is_err() {
            return;
        }
    }
}

/// Opens the directory `dir` beneath `root`.
pub fn open_dir(root: &OwnedFd, dir: &SafeRelPath) -> io::Result<OwnedFd> {
    open_beneath(
        root,
        dir.as_bytes(),
        OFlags::RDONLY | OFlags::DIRECTORY,
        Mode::empty(),
    )
}

/// Joins a parent path and a name into the bytes `open_beneath` takes.
pub fn join(parent: &SafeRelPath, name: &[u8]) -> Vec<u8> {
    let mut v = parent.as_bytes().to_vec();
    if !v.is_empty() {
        v.push(b'/');
    }
    v.extend_from_slice(name);
    v
}

/// The name of the in-progress file for final name `name` in the same directory.
/// Deterministic, so a later run can find it (resume).
pub fn partial_name(name: &[u8]) -> Vec<u8> {
    let h = blake3::hash(name);
    format!("{}{}.part", PARTIAL_PREFIX, hex8(h.as_bytes())).into_bytes()
}

/// The name of the resume journal of the partial file for final name `name`.
pub fn journal_name(name: &[u8]) -> Vec<u8> {
    let h = blake3::hash(name);
    format!("{}{}.journal", PARTIAL_PREFIX, hex8(h.as_bytes())).into_bytes()
}

/// The name used to build a symlink, hardlink or special file before renaming it into place.
pub fn temp_name(name: &[u8]) -> Vec<u8> {
    let h = blake3::hash(name);
    format!("{}{}.tmp", PARTIAL_PREFIX, hex8(h.as_bytes())).into_bytes()
}

/// Prefix of every name haul creates before renaming it into place.
pub const PARTIAL_PREFIX: &str = ".haul-";

fn hex8(b: &[u8; 32]) -> String {
    b[..8].iter().map(|x| format!("{x:02x}")).collect()
}

/// Creates directory `name` in `parent` (mode u+rwx so we can fill it; the final mode is
/// applied at the end). An existing directory is fine; an existing non-directory (never
/// followed if a symlink) is replaced. Returns whether it made a new (empty) directory.
pub fn make_dir(parent: &OwnedFd, name: &[u8]) -> io::Result<bool> {
    match rfs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::EXIST) => {
            let st = rfs::statat(parent, name, rfs::AtFlags::SYMLINK_NOFOLLOW)?;
            if rfs::FileType::from_raw_mode(st.st_mode) == rfs::FileType::Directory {
                // Make sure we can write into it even if an earlier run left it 0555 or 000.
                open_dir_owned(parent, name)?;
                return Ok(false);
            }
            rfs::unlinkat(parent, name, rfs::AtFlags::empty())?;
            rfs::mkdirat(parent, name, Mode::from_raw_mode(0o700))?;
            Ok(true)
        }
        Err(e) => Err(e.into()),
    }
}

/// Opens the directory `name` in `parent` (never following a link) for reading, first
/// giving its owner read, write and search (`u+rwx`) where its mode denies them: a
/// directory an earlier run left 0555, or 000 as its source was, is still ours to fill or
/// empty (its own mode is applied again at the end, as rsync does). Returns the descriptor
/// and the mode the directory had. Without read permission it cannot be opened to
/// `fchmod`, so it is reached with `O_PATH`, checked to be ours, changed through
/// `/proc/self/fd` (the inode that descriptor holds, not a name that could be swapped;
/// `fchmod` refuses `O_PATH` descriptors and rustix has no `fchmodat2` with an empty
/// path) and opened again as `.` beneath itself.
pub fn open_dir_owned(parent: &OwnedFd, name: &[u8]) -> io::Result<(OwnedFd, u32)> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rfs::openat(parent, name, flags, Mode::empty()) {
        Ok(fd) => {
            let mode = rfs::fstat(&fd)?.st_mode & 0o7777;
            if mode & 0o700 != 0o700 {
                // Not ours (EPERM): what needs writing in it fails then, and says where.
                let _ = rfs::fchmod(&fd, Mode::from_raw_mode(mode | 0o700));
            }
            Ok((fd, mode))
        }
        Err(rustix::io::Errno::ACCESS) => {
            let path = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let held = rfs::openat(parent, name, path, Mode::empty())?;
            let st = rfs::fstat(&held)?;
            if st.st_uid != rustix::process::geteuid().as_raw() {
                return Err(rustix::io::Errno::ACCESS.into());
            }
            let mode = st.st_mode & 0o7777;
            let link = format!("/proc/self/fd/{}", held.as_raw_fd());
            rfs::chmod(link.as_str(), Mode::from_raw_mode(mode | 0o700))?;
            let fd = rfs::openat(
                &held,
                ".",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            Ok((fd, mode))
        }
        Err(e) => Err(e.into()),
    }
}

/// Renames `from` to `to` within one directory, replacing `to` (unless it is a directory).
pub fn rename_in(dir: &OwnedFd, from: &[u8], to: &[u8]) -> io::Result<()> {
    rfs::renameat(dir, from, dir, to).map_err(io::Error::from)
}

/// Renames `from` to `to` in `dir` only if `from` still names the open `file`: a file
/// someone swapped in under the name meanwhile is refused. (A swap between this check and
/// the rename can still put under `to` a file its owner could have put there anyway —
/// never one haul gave an owner or mode to, which is only ever done on `file`.)
pub fn rename_file_in(dir: &OwnedFd, from: &[u8], to: &[u8], file: &File) -> io::Result<()> {
    let named = rfs::statat(dir, from, rfs::AtFlags::SYMLINK_NOFOLLOW)?;
    let open = rfs::fstat(file)?;
    if (named.st_dev, named.st_ino) != (open.st_dev, open.st_ino) {
        return Err(replaced());
    }
    rename_in(dir, from, to)
}

/// Opens a new anonymous file (`O_TMPFILE`) in the open directory `dir`: it has no
/// name until [`link_anonymous`] gives it one, so a crash leaves nothing behind, and
/// creating it does not lock the directory (which `O_CREAT` and `rename` do, and which
/// thousands of small files in one directory contend for). `"."` resolves nothing.
pub fn open_anonymous(dir: &OwnedFd) -> io::Result<OwnedFd> {
    rfs::openat(
        dir,
        c".",
        OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(io::Error::from)
}

/// How an anonymous file is linked into a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Linker {
    /// `linkat(fd, "", AT_EMPTY_PATH)`: needs CAP_DAC_READ_SEARCH.
    EmptyPath,
    /// `linkat("/proc/self/fd/N", AT_SYMLINK_FOLLOW)`: needs /proc.
    ProcFd,
}

/// Gives anonymous file `file` the name `name` in `dir` (fails with EEXIST if taken).
pub fn link_anonymous(file: &File, dir: &OwnedFd, name: &[u8], how: Linker) -> io::Result<()> {
    match how {
        Linker::EmptyPath => rfs::linkat(file, c"", dir, name, rfs::AtFlags::EMPTY_PATH),
        Linker::ProcFd => rfs::linkat(
            rfs::CWD,
            format!("/proc/self/fd/{}", file.as_raw_fd()),
            dir,
            name,
            rfs::AtFlags::SYMLINK_FOLLOW,
        ),
    }
    .map_err(io::Error::from)
}

/// Waits for writeback of all of `file` already started (by `syncfs`, say) and reports
/// any error writing it back since it was opened (the kernel keeps one per open file).
pub fn wait_writeback(file: &File) -> io::Result<()> {
    // Hand-written because neither rustix nor std wraps sync_file_range.
    // SAFETY: sync_file_range only reads its integer arguments; the descriptor is valid
    // for the duration of the call because `file` is borrowed.
    let r =
        unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WAIT_BEFORE) };
    match r {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Removes `name` from `dir` if present.
pub fn remove_if_present(dir: &OwnedFd, name: &[u8]) -> io::Result<()> {
    match rfs::unlinkat(dir, name, rfs::AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Whether this process may set owners (is root).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn mtime(e: &Entry) -> Timestamps {
    Timestamps {
        last_access: Timespec {
            tv_sec: 0,
            tv_nsec: rfs::UTIME_OMIT,
        },
        last_modification: Timespec {
            tv_sec: e.mtime_sec,
            tv_nsec: e.mtime_nsec.into(),
        },
    }
}

/// Which of an entry's owner and group the store sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owners {
    /// Both (a root receiver).
    Both,
    /// The group alone (`--chown :GROUP` by a user in that group).
    Group,
    /// Neither: files belong to the receiving user.
    Neither,
}

impl Owners {
    /// The `chown` arguments for `e`; `None` when nothing is set.
    fn of(self, e: &Entry) -> Option<(Option<rustix::process::Uid>, Option<rustix::process::Gid>)> {
        let gid = Some(rustix::process::Gid::from_raw(e.gid));
        match self {
            Owners::Both => Some((Some(rustix::process::Uid::from_raw(e.uid)), gid)),
            Owners::Group => Some((None, gid)),
            Owners::Neither => None,
        }
    }
}

/// Applies owner (see [`Owners`]), extended attributes (when sent; in the namespaces `ns`),
/// mode and mtime to an open file or directory. What the attributes did is returned, not
/// failed on: a destination that cannot hold them gets one warning per run
/// (`Store::note_xattrs`).
pub fn apply_meta_fd(
    fd: impl AsFd,
    e: &Entry,
    owners: Owners,
    ns: xattr::Namespaces,
) -> io::Result<xattr::Applied> {
    let fd = fd.as_fd();
    if let Some((uid, gid)) = owners.of(e) {
        // chown first: it clears set-id bits, which chmod then restores, and file
        // capabilities, which the attributes then restore.
        rfs::fchown(fd, uid, gid)?;
    }
    // Before chmod: setting an access ACL sets the group bits, which chmod then makes the
    // sender's again (they agree, both taken from the same file).
    let done = match &e.xattrs {
        Some(want) => xattr::apply(xattr::Target::Fd(fd), want, ns),
        None => xattr::Applied::default(),
    };
    rfs::fchmod(fd, Mode::from_raw_mode(e.mode & 0o7777))?;
    rfs::futimens(fd, &mtime(e))?;
    Ok(done)
}

/// Opens `name` in `dir` never following a symlink nor blocking on a FIFO, with what
/// the descriptor says it is.
fn open_nofollow(dir: &OwnedFd, name: &[u8], flags: OFlags) -> io::Result<(OwnedFd, rfs::Stat)> {
    let fd = rfs::openat(
        dir,
        name,
        flags | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rfs::fstat(&fd)?;
    Ok((fd, st))
}

/// Opens the regular file `name` in `dir` with `flags` — never following a symlink, never
/// blocking on a FIFO — and checks on the descriptor that it is the file `expected`
/// describes (same device and inode): what was checked by name is what gets used.
pub fn open_same_file(
    dir: &OwnedFd,
    name: &[u8],
    flags: OFlags,
    expected: &rfs::Stat,
) -> io::Result<File> {
    let (fd, st) = open_nofollow(dir, name, flags)?;
    if rfs::FileType::from_raw_mode(st.st_mode) != rfs::FileType::RegularFile
        || (st.st_dev, st.st_ino) != (expected.st_dev, expected.st_ino)
    {
        return Err(replaced());
    }
    Ok(File::from(fd))
}

/// Opens `name` in `dir` with `flags` only if it is a regular file of this process's user
/// with one link — a leftover of our own earlier run, not something another user planted
/// — never following a symlink and never blocking on a FIFO.
pub fn open_own_file(dir: &OwnedFd, name: &[u8], flags: OFlags) -> io::Result<File> {
    let (fd, st) = open_nofollow(dir, name, flags)?;
    if rfs::FileType::from_raw_mode(st.st_mode) != rfs::FileType::RegularFile
        || st.st_uid != rustix::process::geteuid().as_raw()
        || st.st_nlink != 1
    {
        return Err(io::Error::other("not a file haul left behind"));
    }
    Ok(File::from(fd))
}

/// Creates `name` in `dir` afresh, mode 0600, opened with `flags`: whatever had the name
/// is removed first (`unlinkat` follows nothing) and the file is created `O_EXCL`, so what
/// is opened is a new file of ours and nothing planted.
pub fn create_new(dir: &OwnedFd, name: &[u8], flags: OFlags) -> io::Result<File> {
    remove_if_present(dir, name)?;
    let fd = rfs::openat(
        dir,
        name,
        flags | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    Ok(File::from(fd))
}

/// The error for a name that no longer refers to what was checked or made.
pub fn replaced() -> io::Error {
    io::Error::other("replaced by someone else while haul was using it")
}

/// Applies owner (when root), mode (not to a symlink) and mtime to the symlink, FIFO or
/// device node `name` in `dir` that this process has just made as `kind`, through a
/// descriptor and never through the name: the name is opened `O_PATH | O_NOFOLLOW` (which
/// follows nothing and opens nothing for I/O, so a device has no side effects) and must be
/// of `kind`, ours, with one link; otherwise someone swapped it and nothing is applied.
///
/// An `O_PATH` descriptor takes no `fchmod` (and `fchmodat2` is Linux 6.6+), so the mode
/// goes through `/proc/self/fd/N`, which names exactly the inode checked and that nobody
/// else can repoint. Creating the node with its final mode instead would not do: the
/// umask is process-wide, and `chown` as root clears the set-id bits afterwards.
pub fn apply_meta_made(
    dir: &OwnedFd,
    name: &[u8],
    e: &Entry,
    (owners, ns): (Owners, xattr::Namespaces),
    kind: rfs::FileType,
) -> io::Result<xattr::Applied> {
    let fd = rfs::openat(
        dir,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rfs::fstat(&fd)?;
    if rfs::FileType::from_raw_mode(st.st_mode) != kind
        || st.st_uid != rustix::process::geteuid().as_raw()
        || st.st_nlink != 1
    {
        return Err(replaced());
    }
    if let Some((uid, gid)) = owners.of(e) {
        // chown first: it clears set-id bits, which chmod then restores.
        rfs::chownat(&fd, c"", uid, gid, rfs::AtFlags::EMPTY_PATH)?;
    }
    let done = match &e.xattrs {
        Some(want) => xattr::apply(xattr::Target::Path(fd.as_fd()), want, ns),
        None => xattr::Applied::default(),
    };
    let proc = format!("/proc/self/fd/{}", fd.as_raw_fd());
    if kind != rfs::FileType::Symlink {
        rfs::chmodat(
            rfs::CWD,
            proc.as_str(),
            Mode::from_raw_mode(e.mode & 0o7777),
            rfs::AtFlags::empty(),
        )?;
    }
    match rfs::utimensat(&fd, c"", &mtime(e), rfs::AtFlags::EMPTY_PATH) {
        // Kernels before 5.8 take no AT_EMPTY_PATH here.
        Err(rustix::io::Errno::INVAL) => {
            rfs::utimensat(rfs::CWD, proc.as_str(), &mtime(e), rfs::AtFlags::empty())
        }
        other => other,
    }?;
    Ok(done)
}

/// Durably flushes a directory (entries created or renamed in it).
pub fn sync_dir(root: &OwnedFd, dir: &SafeRelPath) -> io::Result<()> {
    let fd = open_dir(root, dir)?;
    rfs::fsync(&fd).map_err(io::Error::from)
}

/// A named point in the middle of a check-then-act sequence where a unit test may change
/// the file system (to make a race deterministic). Outside unit tests it does nothing and
/// compiles to nothing.
#[cfg(test)]
pub fn race_point(point: &str) {
    RACE.with(|r| {
        if let Some(f) = r.borrow_mut().as_mut() {
            f(point)
        }
    })
}

/// See the test build's `race_point`.
#[cfg(not(test))]
#[inline(always)]
pub fn race_point(_point: &str) {}

/// What a unit test does at a race point.
#[cfg(test)]
pub type RaceHook = Box<dyn FnMut(&str)>;

#[cfg(test)]
thread_local! {
    /// What a unit test does at each [`race_point`] on its own thread.
    pub static RACE: std::cell::RefCell<Option<RaceHook>> = const { std::cell::RefCell::new(None) };
}
