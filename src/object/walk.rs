//! The local side of an upload: each source walked through directory descriptors
//! (`resolve`: no symlink followed on the way, none below), as manifest entries parents
//! first, with the files to send and where to open them again.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::manifest::{key_for, Entry, Kind};
use crate::error::{Error, Result};

/// Most entries one upload takes (a manifest of this many is about 100 MiB).
const MAX_ENTRIES: usize = 1_000_000;

/// A file to send: where to open it and what the walk saw.
pub struct Pending {
    /// The directory the walk started from (the source, or the parent of a named source).
    pub base: Arc<OwnedFd>,
    /// The file beneath `base`.
    pub rel: Vec<u8>,
    /// Its index in the entries.
    pub index: usize,
    /// Its size at the walk.
    pub size: u64,
    /// Its inode at the walk: a file replaced since is refused.
    pub ino: u64,
    /// The source as given, for messages.
    pub shown: PathBuf,
}

/// What the walk of every source found.
#[derive(Default)]
pub struct Walked {
    /// The entries, parents first (files' hashes still zero, filled as they are sent).
    pub entries: Vec<Entry>,
    /// The regular files, one per inode.
    pub files: Vec<Pending>,
    /// Each source's top-level name in the manifest (`""` for a `dir/`'s contents).
    pub names: Vec<Vec<u8>>,
}

/// Walks `source` (`dir/`: its contents under `""`; else itself, under `name`).
pub fn walk(
    source: &Path,
    name: Option<&[u8]>,
    out: &mut Walked,
    links: &mut HashMap<(u64, u64), Vec<u8>>,
) -> Result<()> {
    let contents = name.is_none();
    let src_err = |e: std::io::Error| Error::Source {
        path: source.to_path_buf(),
        source: e,
    };
    let (base_path, first): (&Path, &[u8]) = if contents {
        (source, b"")
    } else {
        let n = source.file_name().ok_or_else(|| {
            Error::Usage(format!("{}: name a file or directory", source.display()))
        })?;
        (
            source
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new(".")),
            n.as_bytes(),
        )
    };
    let base = rustix::fs::open(
        base_path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| src_err(e.into()))?;
    let base = Arc::new(base);
    let top = name.unwrap_or_default().to_vec();
    out.names.push(top.clone());
    // (path beneath base, path in the manifest)
    let mut stack: Vec<(Vec<u8>, Vec<u8>)> = vec![(first.to_vec(), top)];
    while let Some((rel, path)) = stack.pop() {
        if out.entries.len() >= MAX_ENTRIES {
            return Err(Error::Usage(format!(
                "{}: more than {MAX_ENTRIES} entries in one upload",
                source.display()
            )));
        }
        let st = stat_beneath(&base, &rel).map_err(|e| Error::Source {
            path: source.join(OsStr::from_bytes(&rel)),
            source: e,
        })?;
        let (mtime, mtime_nsec) = (st.st_mtime, st.st_mtime_nsec as u32);
        let meta = |kind| Entry {
            path: path.clone(),
            mode: st.st_mode & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
            mtime,
            mtime_nsec,
            kind,
        };
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {
                out.entries.push(meta(Kind::Dir));
                let dir = crate::resolve::open(
                    base.as_fd(),
                    &rel,
                    OFlags::RDONLY | OFlags::DIRECTORY,
                    Mode::empty(),
                )
                .map_err(|e| Error::Source {
                    path: source.join(OsStr::from_bytes(&rel)),
                    source: e.into(),
                })?;
                let mut names = Vec::new();
                let mut d = rustix::fs::Dir::read_from(&dir).map_err(|e| src_err(e.into()))?;
                while let Some(ent) = d.read() {
                    let ent = ent.map_err(|e| src_err(e.into()))?;
                    let n = ent.file_name().to_bytes();
                    if n != b"." && n != b".." {
                        names.push(n.to_vec());
                    }
                }
                // Popped in name order.
                names.sort_unstable_by(|a, b| b.cmp(a));
                for n in names {
                    stack.push((join(&rel, &n), join(&path, &n)));
                }
            }
            FileType::RegularFile => {
                let id = (st.st_dev, st.st_ino);
                if st.st_nlink > 1 {
                    if let Some(to) = links.get(&id) {
                        out.entries.push(meta(Kind::Hardlink { to: to.clone() }));
                        continue;
                    }
                    links.insert(id, path.clone());
                }
                let key = key_for(&path);
                let size = st.st_size as u64;
                out.files.push(Pending {
                    base: base.clone(),
                    rel: rel.clone(),
                    index: out.entries.len(),
                    size,
                    ino: st.st_ino,
                    shown: source.join(OsStr::from_bytes(
                        rel.strip_prefix(first)
                            .unwrap_or(&rel)
                            .strip_prefix(b"/")
                            .unwrap_or_default(),
                    )),
                });
                out.entries.push(meta(Kind::File {
                    size,
                    blake3: [0; 32],
                    key,
                }));
            }
            FileType::Symlink => {
                let target = rustix::fs::readlinkat(
                    &parent_fd(&base, &rel).map_err(src_err)?,
                    last(&rel),
                    Vec::new(),
                )
                .map_err(|e| src_err(e.into()))?;
                out.entries.push(meta(Kind::Symlink {
                    target: target.into_bytes(),
                }));
            }
            _ => {
                return Err(Error::Usage(format!(
                    "{}: a FIFO, socket or device cannot go to an object store",
                    source.join(OsStr::from_bytes(&rel)).display()
                )))
            }
        }
    }
    Ok(())
}

/// `lstat` of `rel` beneath `base`: its directory opened without following a symlink,
/// then the last name not followed.
fn stat_beneath(base: &OwnedFd, rel: &[u8]) -> std::io::Result<rustix::fs::Stat> {
    if rel.is_empty() {
        return Ok(rustix::fs::fstat(base)?);
    }
    let dir = parent_fd(base, rel)?;
    Ok(rustix::fs::statat(
        &dir,
        last(rel),
        AtFlags::SYMLINK_NOFOLLOW,
    )?)
}

/// The directory that holds `rel` beneath `base`.
fn parent_fd(base: &OwnedFd, rel: &[u8]) -> std::io::Result<OwnedFd> {
    let parent = match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => &rel[..i],
        None => b"",
    };
    Ok(crate::resolve::open(
        base.as_fd(),
        parent,
        OFlags::PATH | OFlags::DIRECTORY,
        Mode::empty(),
    )?)
}

/// The last name of `rel`.
fn last(rel: &[u8]) -> &OsStr {
    let i = rel.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
    OsStr::from_bytes(&rel[i..])
}

/// `a/b` from `a` and `b` (either alone when the other is empty).
pub fn join(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut v = a.to_vec();
    if !v.is_empty() && !b.is_empty() {
        v.push(b'/');
    }
    v.extend_from_slice(b);
    v
}
