//! Sources that land on the same paths (`copy a/ b/ DST` where both hold `x`, one source
//! given twice): which one is sent, by rsync's rule. Where several sources have something
//! at one destination path, a directory wins over anything else, and among equals the
//! first source given; the directories that lose are merged into the winner (their
//! contents are walked by the same rule, their own entries are not sent), anything else
//! that loses is not sent at all (not counted, not linked, not listed). The same source
//! given again (same name, same inode) is walked once.
//!
//! The walk holds, for the directory it lists, that directory's *peers*: the same
//! destination path in the other sources. Each name listed is looked up in them (one
//! `lstat` per peer); where no other source has the directory the list is empty and
//! nothing is looked up, so a transfer whose sources do not overlap pays nothing.
//!
//! Not here: two different sources named alike are refused before the walk
//! (`walk::check_sources`).

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::super::meta::Meta;
use super::super::select::{Links, Listed, Selection};

/// The same destination directory in another source.
#[derive(Clone, Debug)]
pub(super) struct Peer {
    /// The other source's index.
    source: usize,
    /// Where that directory is on this host; for a source that lands under its own name,
    /// the source itself (then `only` is its name).
    path: PathBuf,
    /// For the destination root as a source named `only` sees it: it holds that name alone.
    only: Option<Vec<u8>>,
    /// The other source's file system (for `-x`, past which its walk does not go).
    root_dev: u64,
}

/// What the walk does with one entry that other sources may have too.
pub(super) struct Verdict {
    /// Whether its own entry is sent (else another source's is).
    pub send: bool,
    /// For a directory: its peers, the directories below which its names are looked up.
    pub peers: Vec<Peer>,
}

/// Every source's place at the destination root: its path there, on this host, and its
/// status (`None`: one that cannot be read, whose own walk says why).
type Place = Option<(Vec<u8>, PathBuf, Meta)>;

/// The sources' places at the destination root, and which sources repeat an earlier one.
pub(super) struct Roots {
    places: Vec<Place>,
    repeats: Vec<bool>,
}

impl Roots {
    /// Looks at the sources, each its name at the destination (`None`: its contents go
    /// into the root) and its path; `rel` is a source's own path at the destination given
    /// whether it is a directory. Nothing when there is one source: it overlaps nothing.
    pub fn of<'s>(
        sources: impl ExactSizeIterator<Item = (&'s Option<Vec<u8>>, &'s Path)>,
        rel: impl Fn(usize, bool) -> Vec<u8>,
        select: &Selection,
    ) -> Roots {
        let mut roots = Roots {
            places: Vec::new(),
            repeats: Vec::new(),
        };
        if sources.len() < 2 {
            return roots;
        }
        let mut seen: Vec<(Option<Vec<u8>>, u64, u64)> = Vec::new();
        for (i, (name, path)) in sources.enumerate() {
            let Ok(meta) = root_meta(path, select) else {
                roots.places.push(None);
                roots.repeats.push(false);
                continue;
            };
            let key = (name.clone(), meta.dev(), meta.ino());
            let repeat = seen.contains(&key);
            seen.push(key);
            let place = (rel(i, meta.is_dir()), path.to_path_buf(), meta);
            roots.places.push((!repeat).then_some(place));
            roots.repeats.push(repeat);
        }
        roots
    }

    /// Whether source `i` is an earlier one given again (it is not walked).
    pub fn repeats(&self, i: usize) -> bool {
        self.repeats.get(i).copied().unwrap_or(false)
    }

    /// The peers of the destination root for source `me`: every other source walked.
    pub fn peers(&self, me: usize) -> Vec<Peer> {
        let places = self.places.iter().enumerate().filter(|(j, _)| *j != me);
        let places = places.filter_map(|(j, r)| r.as_ref().map(|r| (j, r)));
        places
            .map(|(source, (rel, path, meta))| Peer {
                source,
                path: path.clone(),
                only: (!rel.is_empty() || !meta.is_dir()).then(|| rel.clone()),
                root_dev: meta.dev(),
            })
            .collect()
    }
}

/// How the walk sees a source's root: a symlink the selection follows as what it leads to.
fn root_meta(path: &Path, select: &Selection) -> std::io::Result<Meta> {
    let meta = Meta::lstat(path)?;
    match meta.is_symlink() && select.links != Links::Keep {
        true => Meta::stat(path).or(Ok(meta)),
        false => Ok(meta),
    }
}

/// The verdict on source `me`'s entry at `rel` (a directory when `is_dir`), which the
/// directory with `peers` lists (`rel` empty: the source's own root, spilling its
/// contents into the destination root).
pub(super) fn decide(
    peers: &[Peer],
    me: usize,
    rel: &[u8],
    is_dir: bool,
    select: &Selection,
) -> Verdict {
    if rel.is_empty() {
        // Another source's contents went into the root first: its root is the root's entry.
        let first = peers.iter().any(|p| p.only.is_none() && p.source < me);
        let peers = peers.to_vec();
        return Verdict {
            send: !first,
            peers,
        };
    }
    let name = rel.rsplit(|&b| b == b'/').next().unwrap_or(rel);
    let mut verdict = Verdict {
        send: true,
        peers: Vec::new(),
    };
    for peer in peers {
        let Some((path, meta)) = lookup(peer, name, rel, select) else {
            continue;
        };
        if select.filter.excluded(rel, meta.is_dir()) {
            continue;
        }
        // --files-from: what the list leaves out of the peer's base is not there.
        let listed = select
            .files_from
            .as_ref()
            .map(|l| l.listed(peer.source, rel));
        if listed == Some(Listed::No) || (listed == Some(Listed::Parent) && !meta.is_dir()) {
            continue;
        }
        let earlier = peer.source < me;
        if !is_dir {
            if earlier || meta.is_dir() {
                verdict.send = false;
                return verdict;
            }
            continue;
        }
        if !meta.is_dir() {
            continue;
        }
        verdict.send &= !earlier;
        if !select.one_file_system || meta.dev() == peer.root_dev {
            verdict.peers.push(Peer {
                source: peer.source,
                path,
                only: None,
                root_dev: peer.root_dev,
            });
        }
    }
    verdict
}

/// What `peer` has under `name`, as its own walk would see it: a symlink the selection
/// follows as what it leads to. `None`: nothing, or nothing it could read.
fn lookup(peer: &Peer, name: &[u8], rel: &[u8], select: &Selection) -> Option<(PathBuf, Meta)> {
    let path = match &peer.only {
        Some(only) if only.as_slice() == name => peer.path.clone(),
        Some(_) => return None,
        None => peer.path.join(std::ffi::OsStr::from_bytes(name)),
    };
    let meta = Meta::lstat(&path).ok()?;
    if !meta.is_symlink() || select.links == Links::Keep {
        return Some((path, meta));
    }
    let target = fs::read_link(&path).ok()?;
    if !select.follows(rel, target.as_os_str().as_bytes()) {
        return Some((path, meta));
    }
    let meta = Meta::stat(&path).ok()?;
    Some((path, meta))
}
