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
    /// `--delete-excluded`: the receiver's `--delete` is not told the rules, so it removes
    /// what they exclude too.
    pub delete_excluded: bool,
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
            (Some(list), _) => list.listed(source, rel),
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

/// `--files-from`'s paths, made relative and clean, grouped by their base: the part of a
/// listed path before a `/./` (rsync's `-R` marker), which is walked but not sent
/// (`from/./dir/sub` arrives as `dir/sub`). Paths without one have the empty base.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileList {
    /// Each base in the order first listed, with the paths below it.
    groups: Vec<(Vec<u8>, BTreeSet<Vec<u8>>)>,
    /// `-r` given: a listed directory is sent with everything below it. Without it, as
    /// rsync's `--files-from` (which turns off the `-r` in `-a`), only the directory.
    recursive: bool,
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

/// A path's components joined again, `.` and empty ones dropped, `..` resolved without
/// rising above its start.
fn clean(path: &[u8]) -> Vec<u8> {
    let mut parts: Vec<&[u8]> = Vec::new();
    for c in path.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    parts.join(&b'/')
}

impl FileList {
    /// Parses a list as rsync reads one: a path per line (`\n`, or NUL with `nul`), blank
    /// lines and lines starting with `#` or `;` ignored, leading `/` and `.` removed, `..`
    /// resolved without rising above the source directory (or the base, after a `/./`).
    /// `recursive`: `-r` was given.
    pub fn parse(text: &[u8], nul: bool, recursive: bool) -> FileList {
        let sep = if nul { 0 } else { b'\n' };
        let mut list = FileList {
            groups: Vec::new(),
            recursive,
        };
        for line in text.split(|&b| b == sep) {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() || line.starts_with(b"#") || line.starts_with(b";") {
                continue;
            }
            let (base, path) = match line.windows(3).position(|w| w == b"/./") {
                Some(i) => (clean(&line[..i]), clean(&line[i + 3..])),
                None => (Vec::new(), clean(line)),
            };
            match list.groups.iter_mut().find(|(b, _)| *b == base) {
                Some((_, paths)) => {
                    paths.insert(path);
                }
                None => list.groups.push((base, BTreeSet::from([path]))),
            }
        }
        list
    }

    /// The bases, in the order first listed (one, empty, for a list without `/./`): each
    /// is walked as a source of its own whose contents go into the destination root.
    pub fn bases(&self) -> impl Iterator<Item = &[u8]> {
        self.groups.iter().map(|(b, _)| b.as_slice())
    }

    /// Whether base number `group` is a path given before a `/./` (not the source itself).
    pub fn is_base(&self, group: usize) -> bool {
        self.groups.get(group).is_some_and(|(b, _)| !b.is_empty())
    }

    /// The listed paths below base number `group`, in byte order.
    pub fn paths(&self, group: usize) -> impl Iterator<Item = &[u8]> {
        self.groups
            .get(group)
            .into_iter()
            .flat_map(|(_, p)| p.iter().map(|p| p.as_slice()))
    }

    /// How `rel` (relative to base number `group`) stands to the list.
    pub fn listed(&self, group: usize, rel: &[u8]) -> Listed {
        let Some((_, paths)) = self.groups.get(group) else {
            return Listed::No;
        };
        let all = self.recursive && paths.contains(&b""[..]);
        if all || paths.contains(rel) {
            return Listed::Yes;
        }
        if rel.is_empty() {
            return Listed::Parent;
        }
        let ancestor_listed = (0..rel.len())
            .filter(|&i| rel[i] == b'/')
            .any(|i| paths.contains(&rel[..i]));
        if self.recursive && ancestor_listed {
            return Listed::Yes;
        }
        let mut prefix = rel.to_vec();
        prefix.push(b'/');
        match paths.range(prefix.clone()..).next() {
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

/// rsync's `unsafe_symlink` (3.4 and later): whether a symlink at `rel` (its path in the
/// transfer) with this `target` points outside the transfer: absolute, empty, climbing
/// with `..` above the root, or with a `..` after any other part (`dir/..`, `./..`,
/// `a/../b`: where `dir` may itself be a link, the walk cannot tell where it leads).
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
    let mut other = false;
    for c in target.split(|&b| b == b'/') {
        match c {
            b"" => {}
            b".." => {
                depth -= 1;
                if other || depth < 0 {
                    return true;
                }
            }
            b"." => other = true,
            _ => {
                other = true;
                depth += 1;
            }
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
        assert!(unsafe_symlink(b"y/../../../x", b"d/a"));
        // A `..` after another part, as rsync 3.4 and later count it.
        assert!(unsafe_symlink(b"dir/..", b"from"));
        assert!(unsafe_symlink(b"y/../x", b"a"));
        assert!(unsafe_symlink(b"./../x", b"d/a"));
        assert!(!unsafe_symlink(b"..//../x", b"d/e/a"));
        assert!(!unsafe_symlink(b".././y", b"d/a"));
        assert!(!unsafe_symlink(b"dir/./y", b"a"));
    }

    #[test]
    fn file_list_parses_like_rsync() {
        let l = FileList::parse(
            b"# c\n;c\n\n/etc/a.conf\r\n./b/\n../c/./d\nx/../y\n",
            false,
            true,
        );
        let bases: Vec<_> = l.bases().map(|b| String::from_utf8_lossy(b)).collect();
        assert_eq!(bases, ["", "c"]);
        let got: Vec<_> = l.paths(0).map(|p| String::from_utf8_lossy(p)).collect();
        assert_eq!(got, ["b", "etc/a.conf", "y"]);
        let got: Vec<_> = l.paths(1).map(|p| String::from_utf8_lossy(p)).collect();
        assert_eq!(got, ["d"]);
        let l = FileList::parse(b"a\0b c\0", true, true);
        assert_eq!(l.paths(0).count(), 2);
    }

    #[test]
    fn listed_parents_and_children() {
        let l = FileList::parse(b"etc/a.conf\nvar/lib\n", false, true);
        assert_eq!(l.listed(0, b""), Listed::Parent);
        assert_eq!(l.listed(0, b"etc"), Listed::Parent);
        assert_eq!(l.listed(0, b"etc/a.conf"), Listed::Yes);
        assert_eq!(l.listed(0, b"etc/b.conf"), Listed::No);
        assert_eq!(l.listed(0, b"var/lib/x/y"), Listed::Yes);
        assert_eq!(l.listed(0, b"var/li"), Listed::No);
        assert_eq!(l.listed(0, b"usr"), Listed::No);
        let all = FileList::parse(b".\n", false, true);
        assert_eq!(all.listed(0, b"usr"), Listed::Yes);
    }

    #[test]
    fn without_r_a_listed_directory_is_sent_without_its_contents() {
        let l = FileList::parse(b"var/lib\n.\n", false, false);
        assert_eq!(l.listed(0, b""), Listed::Yes);
        assert_eq!(l.listed(0, b"var"), Listed::Parent);
        assert_eq!(l.listed(0, b"var/lib"), Listed::Yes);
        assert_eq!(l.listed(0, b"var/lib/x"), Listed::No);
        assert_eq!(l.listed(0, b"usr"), Listed::No);
    }
}
