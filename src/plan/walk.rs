//! Walks the sources and produces manifest entries, parents before children, one at a
//! time: memory holds the names of one directory per level of depth plus a small record
//! per hardlinked inode, never the whole tree.
//!
//! Not here: reading file data (the stream workers do that) and deciding what the
//! receiver needs (it answers per batch).

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::protocol::Entry;

use super::select::{Links, Listed, Selection};

use super::beneath::{Root, Within};
pub use super::extents::{open_source, Stamp};
use super::meta::Meta;

mod at;
mod entry;
mod overlap;
use at::At;
pub use entry::file_again;
use overlap::Peer;

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

    /// The contents of `base` (a relative path; empty: itself) in this source.
    fn below(&self, base: &[u8]) -> Source {
        let path = match base.is_empty() {
            true => self.path.clone(),
            false => self.path.join(std::ffi::OsStr::from_bytes(base)),
        };
        Source {
            path,
            dest_name: None,
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
    /// The length of the file a regular file or hardlink entry names (0 for others):
    /// `--stats`' total file size counts every name, as rsync's does.
    pub len: u64,
}

/// Where a regular file's data is, on this host.
#[derive(Debug, Clone)]
pub struct FileData {
    /// Path on this host (what messages name).
    pub path: PathBuf,
    /// Where it is opened: beneath its source's root, never through a symlink.
    pub at: Within,
    /// File size at walk time.
    pub size: u64,
    /// Data ranges `(start, end)`, sorted, excluding holes.
    pub extents: Vec<(u64, u64)>,
    /// Size, mtime and ctime at walk time: a file whose stamp differs after reading
    /// changed while it was read.
    pub stamp: Stamp,
    /// Its path at the destination (for re-sending it if it changes while read).
    pub dest: Vec<u8>,
    /// (dev, ino) of the directory the walk found it in; `None` for a source named by
    /// itself. A file walked again must be found in the same directory (see
    /// [`file_again`]).
    pub parent: Option<(u64, u64)>,
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
/// land under the same name (`a/x b/x`: one would silently replace the other); the same
/// file or directory given twice under one name is walked once (see `overlap`).
pub fn check_sources(sources: &[Source]) -> Result<()> {
    let mut seen: HashMap<&[u8], &Path> = HashMap::new();
    for s in sources {
        if let Some(name) = &s.dest_name {
            if let Some(first) = seen.insert(name, &s.path) {
                if same_inode(first, &s.path) {
                    continue;
                }
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

/// Whether `a` and `b` name one inode (the same source given twice).
fn same_inode(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (fs::symlink_metadata(a), fs::symlink_metadata(b)) {
        (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
        _ => false,
    }
}

/// Walks `sources` in order, taking what `select` selects, calling `emit` for each entry
/// and `skip` for each unreadable directory. Stops early when `emit` returns false (the
/// transfer ended).
pub fn walk(
    sources: &[Source],
    select: &Selection,
    mut emit: impl FnMut(Walked) -> bool,
    skip: impl FnMut(Skipped),
) -> Result<()> {
    walk_from(sources, select, |_, w| emit(w), skip)
}

/// Where a walked entry comes from: which source, and where the path inside it starts
/// in the entry's path (after the source's name and its `/`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin {
    /// Index into the sources.
    pub source: usize,
    /// Bytes of the entry's path before the path inside the source.
    pub base: usize,
}

/// The path of `source`'s own entry in the transfer (empty: its contents go into the
/// destination root), given whether it is a directory: rsync's rule, and `file/` is
/// the file itself.
pub fn root_rel(source: &Source, is_dir: bool) -> Vec<u8> {
    match &source.dest_name {
        Some(name) => name.clone(),
        None if !is_dir => source
            .path
            .file_name()
            .map_or(Vec::new(), |n| n.as_bytes().to_vec()),
        None => Vec::new(),
    }
}

/// [`walk`], telling `emit` where each entry comes from (the plan of shards needs it).
pub fn walk_from(
    sources: &[Source],
    select: &Selection,
    mut emit: impl FnMut(Origin, Walked) -> bool,
    mut skip: impl FnMut(Skipped),
) -> Result<()> {
    select.check(sources.len())?;
    // --files-from: each base of the list (the part before a `/./`) is a source of its
    // own whose contents go into the destination root.
    let bases: Vec<Source>;
    let sources = match (&select.files_from, sources) {
        (Some(list), [s]) => {
            bases = list.bases().map(|b| s.below(b)).collect();
            &bases[..]
        }
        _ => sources,
    };
    let mut w = Walker {
        next_id: 0,
        inodes: HashMap::new(),
        select,
        root_dev: 0,
        base: 0,
        source: 0,
        ancestors: Vec::new(),
        outside: 0,
        pending: Vec::new(),
        root: None,
        peers: Vec::new(),
    };
    let roots = overlap::Roots::of(
        sources.iter().map(|s| (&s.dest_name, s.path.as_path())),
        |i, is_dir| root_rel(&sources[i], is_dir),
        select,
    );
    for (i, s) in sources.iter().enumerate() {
        if roots.repeats(i) {
            continue;
        }
        w.peers = roots.peers(i);
        let meta = match Meta::lstat(&s.path) {
            Ok(meta) => meta,
            // A base of --files-from that is not there: its paths are missing.
            Err(error) if select.files_from.as_ref().is_some_and(|l| l.is_base(i)) => {
                let path = s.path.clone();
                skip(Skipped { path, error });
                continue;
            }
            Err(e) => {
                return Err(Error::Source {
                    path: s.path.clone(),
                    source: e,
                })
            }
        };
        let rel = root_rel(s, meta.is_dir());
        let base = if rel.is_empty() { 0 } else { rel.len() + 1 };
        (w.base, w.source) = (base, i);
        let root = At {
            path: &s.path,
            dir: None,
        };
        let Some((real, meta)) = w.follow(root, &rel, meta, &mut skip) else {
            continue;
        };
        let path = real.unwrap_or_else(|| s.path.clone());
        if let Some(list) = &select.files_from {
            if !meta.is_dir() {
                return Err(Error::Usage(
                    "--files-from needs a source directory (the listed paths are relative to it)"
                        .into(),
                ));
            }
            missing(&path, list.paths(i), &mut skip);
        }
        if let Some(shard) = &select.shard {
            missing(&path, shard.paths(i), &mut skip);
            let listed = select.listed(i, &rel, base);
            if listed == Listed::No || (listed == Listed::Parent && !meta.is_dir()) {
                continue;
            }
        }
        if select.filter.excluded(&rel, meta.is_dir()) {
            continue;
        }
        // Everything below is opened again beneath this descriptor, taken now and checked
        // to be what the walk stat'ed (a directory that cannot be opened now is tried
        // again at each use, and its walk says why it cannot be read).
        let root = match meta.is_dir() {
            true => Root::held(&path, &meta).or_else(|_| Root::of(&path, &meta)),
            false => Root::of(&path, &meta),
        };
        match root {
            Ok(root) => w.root = Some(Arc::new(root)),
            Err(error) => {
                skip(Skipped { path, error });
                continue;
            }
        }
        w.root_dev = meta.dev();
        let origin = Origin { source: i, base };
        let at = At {
            path: &path,
            dir: None,
        };
        if !w.visit(at, rel, &meta, &mut |x| emit(origin, x), &mut skip) {
            return Ok(());
        }
    }
    if w.outside > OUTSIDE_NAMED && !select.quiet {
        crate::progress::warn(&format!(
            "{} more symlinks point outside the source (sent as links)",
            w.outside - OUTSIDE_NAMED
        ));
    }
    Ok(())
}

/// Reports each of `listed` (paths inside the source at `root`) that is not there.
fn missing<'a>(
    root: &Path,
    listed: impl Iterator<Item = &'a [u8]>,
    skip: &mut impl FnMut(Skipped),
) {
    for p in listed.filter(|p| !p.is_empty()) {
        let listed = root.join(std::ffi::OsStr::from_bytes(p));
        if let Err(error) = fs::symlink_metadata(&listed) {
            skip(Skipped {
                path: listed,
                error,
            });
        }
    }
}

/// Symlinks pointing outside the source named in a warning each; the rest are counted.
const OUTSIDE_NAMED: u64 = 5;

struct Walker<'a> {
    next_id: u64,
    /// (dev, ino) of multiply-linked files already sent → their destination path.
    inodes: HashMap<(u64, u64), Vec<u8>>,
    select: &'a Selection,
    /// The file system of the current source (for -x).
    root_dev: u64,
    /// Bytes of the current source's name and its `/` at the start of each path: what
    /// follows is the path inside the source.
    base: usize,
    /// The index of the current source.
    source: usize,
    /// (dev, ino) of the directories being walked, outermost first: a followed symlink
    /// to one of them would loop.
    ancestors: Vec<(u64, u64)>,
    /// Symlinks seen pointing outside the source.
    outside: u64,
    /// The directories being walked, innermost last, with their entries until sent.
    pending: Vec<Pending>,
    /// What the entries being walked are opened beneath (the source's root, or what a
    /// followed symlink leads to).
    root: Option<Arc<Root>>,
    /// The directory being listed in the other sources that have it too (empty: none has).
    peers: Vec<Peer>,
}

/// A directory being walked. Its entry is sent just before its first descendant, or when
/// its walk ends; but not at all when all it held was a path too long to send (over the
/// 4096 bytes a path may have), so that the destination does not get a chain of empty
/// directories made only for a file that cannot arrive.
struct Pending {
    walked: Option<Walked>,
    too_long: bool,
}

/// Whether `e` says a path is longer than the system takes.
fn is_too_long(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENAMETOOLONG)
}

impl Walker<'_> {
    /// Emits what is `at` (and, for a directory, everything below it). False: stop.
    fn visit(
        &mut self,
        at: At<'_>,
        rel: Vec<u8>,
        meta: &Meta,
        emit: &mut impl FnMut(Walked) -> bool,
        skip: &mut impl FnMut(Skipped),
    ) -> bool {
        // Another source's entry at this path may be the one sent (see `overlap`); what
        // is not sent is not made an entry at all, so no hardlink leads to it.
        let verdict = match self.peers.is_empty() {
            true => None,
            false => Some(overlap::decide(
                &self.peers,
                self.source,
                &rel,
                meta.is_dir(),
                self.select,
            )),
        };
        // --files-from: the root is sent only when listed (`.`), as rsync sends it.
        let unlisted_root = rel.is_empty()
            && (self.select.files_from.as_ref())
                .is_some_and(|l| l.listed(self.source, &rel) != Listed::Yes);
        let send = verdict.as_ref().is_none_or(|v| v.send) && !unlisted_root;
        let walked = match send {
            true => match self.entry(at, rel.clone(), meta, skip) {
                Some(walked) => Some(walked),
                None => return true,
            },
            false => None,
        };
        if !meta.is_dir() || (self.select.one_file_system && meta.dev() != self.root_dev) {
            return walked.is_none_or(|w| self.emit_with_parents(w, emit));
        }
        let key = (meta.dev(), meta.ino());
        if self.ancestors.contains(&key) {
            skip(Skipped {
                path: at.path.to_path_buf(),
                error: io::Error::other("a followed symlink leads back to a directory above it"),
            });
            return walked.is_none_or(|w| self.emit_with_parents(w, emit));
        }
        self.pending.push(Pending {
            walked,
            too_long: false,
        });
        let peers = verdict.map(|v| v.peers).unwrap_or_default();
        let outer_peers = std::mem::replace(&mut self.peers, peers);
        let mut long = false;
        let (dir, names) = match at.open_dir(meta) {
            Ok(dir) => {
                let (names, error) = at::names(&dir);
                if let Some(error) = error {
                    skip(Skipped {
                        path: at.path.to_path_buf(),
                        error,
                    });
                }
                (
                    Some(dir).filter(|_| self.ancestors.len() < at::HELD_DIRS),
                    names,
                )
            }
            Err(error) => {
                long |= is_too_long(&error);
                let path = at.path.to_path_buf();
                skip(Skipped { path, error });
                (None, Vec::new())
            }
        };
        let dir = dir.as_ref().map(|d| d.as_fd());
        self.ancestors.push(key);
        let mut go_on = true;
        for name in names {
            let mut child_rel = rel.clone();
            if !child_rel.is_empty() {
                child_rel.push(b'/');
            }
            child_rel.extend_from_slice(name.as_bytes());
            let path = at.path.join(&name);
            let child = At { path: &path, dir };
            let admitted = self.admit(child, &child_rel, &mut |s: Skipped| {
                long |= is_too_long(&s.error);
                skip(s)
            });
            let Some((real, meta)) = admitted else {
                continue;
            };
            // What a followed symlink leads to is reached by its own path, and opened
            // again beneath itself (a directory) or the directory holding it.
            let (child, outer) = match &real {
                Some(real) => match Root::of(real, &meta) {
                    Ok(root) => (
                        At {
                            path: real,
                            dir: None,
                        },
                        Some(self.root.replace(Arc::new(root))),
                    ),
                    Err(error) => {
                        skip(Skipped { path, error });
                        continue;
                    }
                },
                None => (child, None),
            };
            let went_on = self.visit(child, child_rel, &meta, emit, skip);
            if let Some(outer) = outer {
                self.root = outer;
            }
            if !went_on {
                go_on = false;
                break;
            }
        }
        self.ancestors.pop();
        self.peers = outer_peers;
        if let Some(p) = self.pending.last_mut() {
            p.too_long |= long;
        }
        go_on && self.close_dir(emit)
    }

    /// Ends a directory's walk: sends its entry if no descendant did, unless all it held
    /// was too long a path (then its parent may be in the same case). A source's own
    /// root is always sent.
    fn close_dir(&mut self, emit: &mut impl FnMut(Walked) -> bool) -> bool {
        let Some(Pending { walked, too_long }) = self.pending.pop() else {
            return true;
        };
        let Some(w) = walked else {
            return true;
        };
        if too_long && !w.entry.path.is_empty() {
            if let Some(parent) = self.pending.last_mut() {
                parent.too_long = true;
            }
            return true;
        }
        self.emit_with_parents(w, emit)
    }

    /// Sends the entries of the directories above that are not sent yet, then `w`.
    fn emit_with_parents(&mut self, w: Walked, emit: &mut impl FnMut(Walked) -> bool) -> bool {
        for p in &mut self.pending {
            if let Some(d) = p.walked.take() {
                if !emit(d) {
                    return false;
                }
            }
        }
        emit(w)
    }

    /// Stats a directory's child and decides whether it is sent: `None` when the
    /// selection leaves it out or it cannot be read. With the path of what it leads to
    /// when it is a symlink the selection follows.
    fn admit(
        &mut self,
        at: At<'_>,
        rel: &[u8],
        skip: &mut impl FnMut(Skipped),
    ) -> Option<(Option<PathBuf>, Meta)> {
        let listed = self.select.listed(self.source, rel, self.base);
        if listed == Listed::No {
            return None;
        }
        let meta = match at.stat() {
            Ok(m) => m,
            Err(error) => {
                let path = at.path.to_path_buf();
                skip(Skipped { path, error });
                return None;
            }
        };
        let (real, meta) = self.follow(at, rel, meta, skip)?;
        if (listed == Listed::Parent && !meta.is_dir())
            || self.select.filter.excluded(rel, meta.is_dir())
        {
            return None;
        }
        Some((real, meta))
    }

    /// For a symlink the selection follows (-L, --copy-unsafe-links): the real path of
    /// what it points to and its metadata; a file read later is opened there with the
    /// usual checks. Anything else is returned as it is, without a path.
    fn follow(
        &mut self,
        at: At<'_>,
        rel: &[u8],
        meta: Meta,
        skip: &mut impl FnMut(Skipped),
    ) -> Option<(Option<PathBuf>, Meta)> {
        if !meta.is_symlink() || self.select.links == Links::Keep {
            return Some((None, meta));
        }
        let path = at.path;
        let target = match at.read_link() {
            Ok(t) => t,
            Err(error) => {
                let path = path.to_path_buf();
                skip(Skipped { path, error });
                return None;
            }
        };
        if !self.select.follows(rel, &target) {
            return Some((None, meta));
        }
        match Meta::stat(path).and_then(|m| Ok((fs::canonicalize(path)?, m))) {
            Ok((real, m)) => Some((Some(real), m)),
            Err(e) => {
                skip(Skipped {
                    path: path.to_path_buf(),
                    error: io::Error::new(e.kind(), format!("symlink has no referent ({e})")),
                });
                None
            }
        }
    }
}

#[cfg(test)]
mod tests;
