//! What the walk takes of what it finds, with rsync's spellings: filter rules
//! (`protocol::Filter`), `--files-from`, `-L`/`--copy-unsafe-links` and `-x`. Pure data and
//! decisions on names; the walk does the looking.
//!
//! Not here: reading the `-from` files (`config` does, so a pull carries the lists to the
//! far end), and the matching of rules (`protocol::filter`, which the receiver shares).

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::protocol::Filter;

/// The walk's choices.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selection {
    /// `--exclude`/`--include` rules, in command-line order.
    pub filter: Filter,
    /// `--files-from`: only these paths (relative to the one source directory), their
    /// parent directories, and everything below a listed directory.
    pub files_from: Option<FileList>,
    /// What to do with a symlink.
    pub links: Links,
    /// `-x`: do not descend into a directory on another file system than its source.
    pub one_file_system: bool,
    /// `-q`: no warning for symlinks that lead outside the source.
    pub quiet: bool,
    /// `--shard FILE`: only the entries this shard of a plan lists, and the directories
    /// on the way to them. Never crosses the wire (a shard is walked where it was read).
    #[serde(skip)]
    pub shard: Option<Arc<ShardList>>,
    /// `--no-xattrs`: send no extended attributes (the receiver leaves its own alone).
    pub no_xattrs: bool,
}

/// Which symlinks the walk follows (sending what they point to) instead of sending them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Links {
    /// Send every symlink as a symlink.
    #[default]
    Keep,
    /// `--copy-unsafe-links`: follow those pointing outside the transfer (rsync's rule).
    CopyUnsafe,
    /// `-L`: follow all.
    CopyAll,
}

impl Selection {
    /// Whether the walk should follow the symlink at `rel` (its transfer path) to `target`.
    pub fn follows(&self, rel: &[u8], target: &[u8]) -> bool {
        match self.links {
            Links::Keep => false,
            Links::CopyAll => true,
            Links::CopyUnsafe => unsafe_symlink(target, rel),
        }
    }

    /// How the entry at `rel` (its transfer path; `base`: where the path inside source
    /// number `source` starts) stands to `--files-from` or `--shard`.
    pub fn listed(&self, source: usize, rel: &[u8], base: usize) -> Listed {
        match (&self.files_from, &self.shard) {
            (Some(list), _) => list.listed(rel),
            (None, Some(shard)) => shard.listed(source, rel.get(base..).unwrap_or_default()),
            (None, None) => Listed::Yes,
        }
    }

    /// Whether it leaves anything out or follows links (which only a walk of files can do):
    /// anything but the default and `--no-xattrs`.
    pub fn selects(&self) -> bool {
        let plain = Selection {
            no_xattrs: self.no_xattrs,
            ..Selection::default()
        };
        *self != plain
    }

    /// Refuses a `--files-from` walk of anything but one source.
    pub fn check(&self, sources: usize) -> Result<()> {
        if self.files_from.is_some() && sources != 1 {
            return Err(Error::Usage(
                "--files-from takes one source directory (the listed paths are relative to it)"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// `--files-from`'s paths, made relative and clean.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileList {
    paths: BTreeSet<Vec<u8>>,
}

/// How a path stands to a [`FileList`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listed {
    /// Listed, or below a listed directory: sent with everything below it.
    Yes,
    /// A parent directory of a listed path: sent (rsync's implied directory), but of its
    /// contents only what leads to listed paths.
    Parent,
    /// Not sent.
    No,
}

impl FileList {
    /// Parses a list as rsync reads one: a path per line (`\n`, or NUL with `nul`), blank
    /// lines and lines starting with `#` or `;` ignored, leading `/` and `.` removed, `..`
    /// resolved without rising above the source directory.
    pub fn parse(text: &[u8], nul: bool) -> FileList {
        let sep = if nul { 0 } else { b'\n' };
        let mut paths = BTreeSet::new();
        for line in text.split(|&b| b == sep) {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() || line.starts_with(b"#") || line.starts_with(b";") {
                continue;
            }
            let mut parts: Vec<&[u8]> = Vec::new();
            for c in line.split(|&b| b == b'/') {
                match c {
                    b"" | b"." => {}
                    b".." => {
                        parts.pop();
                    }
                    c => parts.push(c),
                }
            }
            paths.insert(parts.join(&b'/'));
        }
        FileList { paths }
    }

    /// The listed paths, in byte order.
    pub fn paths(&self) -> impl Iterator<Item = &[u8]> {
        self.paths.iter().map(|p| p.as_slice())
    }

    /// How `rel` (relative to the source directory) stands to the list.
    pub fn listed(&self, rel: &[u8]) -> Listed {
        if rel.is_empty() {
            return if self.paths.contains(&b""[..]) {
                Listed::Yes
            } else {
                Listed::Parent
            };
        }
        if self.paths.contains(&b""[..]) || self.paths.contains(rel) {
            return Listed::Yes;
        }
        let ancestor_listed = (0..rel.len())
            .filter(|&i| rel[i] == b'/')
            .any(|i| self.paths.contains(&rel[..i]));
        if ancestor_listed {
            return Listed::Yes;
        }
        let mut prefix = rel.to_vec();
        prefix.push(b'/');
        match self.paths.range(prefix.clone()..).next() {
            Some(p) if p.starts_with(&prefix) => Listed::Parent,
            _ => Listed::No,
        }
    }
}

/// What one shard of a plan lists (`plan::shard`), as the walk asks it: per source,
/// the paths inside it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardList {
    sources: Vec<BTreeSet<Vec<u8>>>,
}

impl ShardList {
    /// The list of `paths`, each `(source index, path inside it)`, in a plan of
    /// `sources` sources.
    pub fn new(sources: usize, paths: impl Iterator<Item = (usize, Vec<u8>)>) -> ShardList {
        let mut sets = vec![BTreeSet::new(); sources];
        for (source, path) in paths {
            if let Some(set) = sets.get_mut(source) {
                set.insert(path);
            }
        }
        ShardList { sources: sets }
    }

    /// How the entry at `inside` (its path inside source `source`; empty: the source
    /// itself) stands to this shard: listed (`Yes`: sent, its children only if listed
    /// themselves), on the way to a listed entry (`Parent`), or neither.
    pub fn listed(&self, source: usize, inside: &[u8]) -> Listed {
        let Some(set) = self.sources.get(source) else {
            return Listed::No;
        };
        if set.contains(inside) {
            return Listed::Yes;
        }
        if inside.is_empty() {
            return if set.is_empty() {
                Listed::No
            } else {
                Listed::Parent
            };
        }
        let mut prefix = inside.to_vec();
        prefix.push(b'/');
        match set.range(prefix.clone()..).next() {
            Some(p) if p.starts_with(&prefix) => Listed::Parent,
            _ => Listed::No,
        }
    }

    /// The listed paths of source `source`.
    pub fn paths(&self, source: usize) -> impl Iterator<Item = &[u8]> {
        self.sources
            .get(source)
            .into_iter()
            .flatten()
            .map(|p| p.as_slice())
    }
}

/// rsync's `unsafe_symlink`: whether a symlink at `rel` (its path in the transfer) with
/// this `target` points outside the transfer: absolute, empty, or climbing with `..`
/// above the root.
pub fn unsafe_symlink(target: &[u8], rel: &[u8]) -> bool {
    if target.is_empty() || target.starts_with(b"/") {
        return true;
    }
    // The link's depth: the components of its directory.
    let mut depth: i64 = 0;
    let dir = match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => &rel[..i],
        None => &b""[..],
    };
    for c in dir.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => depth = 0,
            _ => depth += 1,
        }
    }
    for c in target.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            _ => depth += 1,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_links_as_rsync_counts_them() {
        assert!(unsafe_symlink(b"/mnt/wal", b"data/pg_wal"));
        assert!(unsafe_symlink(b"", b"a"));
        assert!(!unsafe_symlink(b"x", b"a"));
        assert!(unsafe_symlink(b"../x", b"a"));
        assert!(!unsafe_symlink(b"../x", b"d/a"));
        assert!(unsafe_symlink(b"../../x", b"d/a"));
        assert!(!unsafe_symlink(b"y/../../x", b"d/a"));
        assert!(unsafe_symlink(b"y/../../../x", b"d/a"));
        assert!(!unsafe_symlink(b"y/../x", b"a"));
    }

    #[test]
    fn file_list_parses_like_rsync() {
        let l = FileList::parse(b"# c\n;c\n\n/etc/a.conf\r\n./b/\n../c/./d\nx/../y\n", false);
        let got: Vec<_> = l.paths().map(|p| String::from_utf8_lossy(p)).collect();
        assert_eq!(got, ["b", "c/d", "etc/a.conf", "y"]);
        let l = FileList::parse(b"a\0b c\0", true);
        assert_eq!(l.paths().count(), 2);
    }

    #[test]
    fn listed_parents_and_children() {
        let l = FileList::parse(b"etc/a.conf\nvar/lib\n", false);
        assert_eq!(l.listed(b""), Listed::Parent);
        assert_eq!(l.listed(b"etc"), Listed::Parent);
        assert_eq!(l.listed(b"etc/a.conf"), Listed::Yes);
        assert_eq!(l.listed(b"etc/b.conf"), Listed::No);
        assert_eq!(l.listed(b"var/lib/x/y"), Listed::Yes);
        assert_eq!(l.listed(b"var/li"), Listed::No);
        assert_eq!(l.listed(b"usr"), Listed::No);
        let all = FileList::parse(b".\n", false);
        assert_eq!(all.listed(b"usr"), Listed::Yes);
    }
}
