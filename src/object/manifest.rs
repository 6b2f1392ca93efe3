//! The manifest object beside a tree in a bucket (`PREFIX/.haul-manifest`): every entry's
//! metadata that an object store cannot hold (mode, owner, nanosecond mtime, symlinks,
//! hardlinks, empty directories) and, for each file, its size, BLAKE3 and object key.
//!
//! Sans-IO: bytes in, a checked [`Manifest`] out, and back. A manifest read from a bucket
//! is as hostile as a peer's bytes: every path is parsed into a [`SafeRelPath`], parents
//! come before children, a hardlink names a file listed before it, keys stay beneath the
//! prefix. Encoding: the line `haul-manifest 1` then postcard (its integers are varints,
//! fixed by postcard's 1.x wire format).

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::protocol::SafeRelPath;

/// The manifest's name beneath its prefix.
pub const MANIFEST_NAME: &str = ".haul-manifest";
/// The first bytes of every manifest (the format's version is its last digit).
const MAGIC: &[u8] = b"haul-manifest 1\n";
/// Largest manifest read (a million entries take about 100 MiB).
pub const MAX_MANIFEST: u64 = 256 << 20;
/// Where objects whose path cannot be a key (not UTF-8, control characters, a name with
/// white space at either end, too long, or named like haul's own objects) are kept, by the
/// BLAKE3 of their path.
const HASHED_KEYS: &str = ".haul-objects/";
/// Longest path kept as its own key. S3 allows 1024 bytes with the prefix, but servers
/// on a file system keep less: MinIO 255 per name, s3s-fs the base64 of the whole key in
/// one file name (about 130 bytes); a longer path's object goes under `HASHED_KEYS`.
const MAX_PLAIN_KEY: usize = 100;
/// Longest symlink target.
const MAX_TARGET: usize = 4096;

/// One entry of the tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Path beneath the prefix, `/`-separated; empty for the prefix's own directory.
    pub path: Vec<u8>,
    /// Permission bits, setuid, setgid and sticky included.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification time, seconds since the epoch.
    pub mtime: i64,
    /// Its nanoseconds.
    pub mtime_nsec: u32,
    /// What it is.
    pub kind: Kind,
}

/// What an entry is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file, held as the object `key` (beneath the prefix).
    File {
        /// Its length.
        size: u64,
        /// BLAKE3 of its content.
        blake3: [u8; 32],
        /// Its object's key beneath the prefix.
        key: String,
    },
    /// A symbolic link.
    Symlink {
        /// Its target, as stored.
        target: Vec<u8>,
    },
    /// Another name of the file listed before at `to`.
    Hardlink {
        /// That file's path.
        to: Vec<u8>,
    },
}

/// A checked manifest.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Parents before children.
    pub entries: Vec<Entry>,
}

/// Why a manifest's bytes were refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ManifestError {
    /// Not a manifest, or one of a later version.
    #[error("not a haul manifest (or one of a later version)")]
    Magic,
    /// Postcard could not decode it.
    #[error("cannot be decoded: {0}")]
    Decode(String),
    /// An entry breaks a rule; which, and where.
    #[error("entry {index}: {why}")]
    Entry {
        /// Its position.
        index: usize,
        /// The rule.
        why: &'static str,
    },
}

/// The object key that holds the file at `path` (beneath the prefix).
pub fn key_for(path: &[u8]) -> String {
    let plain = std::str::from_utf8(path).ok().filter(|s| {
        s.len() <= MAX_PLAIN_KEY
            && !s.chars().any(char::is_control)
            && !s.split('/').any(|c| {
                // Listings lose a name's outer white space (XML parsers trim it).
                let trimmed = c.trim() != c;
                trimmed || c.starts_with(".haul-")
            })
    });
    match plain {
        Some(s) => s.to_string(),
        None => format!("{HASHED_KEYS}{}", blake3::hash(path).to_hex()),
    }
}

impl Manifest {
    /// The manifest's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        // Vec's writer cannot fail; an empty body would be refused by `decode`.
        out.extend(postcard::to_stdvec(self).unwrap_or_default());
        out
    }

    /// Parses and checks a manifest's bytes.
    pub fn decode(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        let body = bytes.strip_prefix(MAGIC).ok_or(ManifestError::Magic)?;
        let m: Manifest =
            postcard::from_bytes(body).map_err(|e| ManifestError::Decode(e.to_string()))?;
        m.check()?;
        Ok(m)
    }

    /// Checks every rule the module's comment names.
    fn check(&self) -> Result<(), ManifestError> {
        let mut dirs: HashSet<&[u8]> = HashSet::from([&b""[..]]);
        let mut files: HashSet<&[u8]> = HashSet::new();
        let mut seen: HashSet<&[u8]> = HashSet::new();
        for (index, e) in self.entries.iter().enumerate() {
            let bad = |why| Err(ManifestError::Entry { index, why });
            let Ok(p) = SafeRelPath::parse(&e.path) else {
                return bad("a path with an empty, '.', '..' or over-long part, or absolute");
            };
            if !seen.insert(&e.path) {
                return bad("listed twice");
            }
            if p.is_root() && e.kind != Kind::Dir {
                return bad("the prefix itself is not a directory");
            }
            let parent = p
                .split_last()
                .map(|(d, _)| d.as_bytes().to_vec())
                .unwrap_or_default();
            if !p.is_root() && !dirs.contains(&parent[..]) {
                return bad("its directory is not listed before it");
            }
            match &e.kind {
                Kind::Dir => {
                    dirs.insert(&e.path);
                }
                Kind::File { key, .. } => {
                    if !key_is_safe(key) {
                        return bad("a key outside the prefix");
                    }
                    files.insert(&e.path);
                }
                Kind::Symlink { target } => {
                    if target.is_empty() || target.len() > MAX_TARGET || target.contains(&0) {
                        return bad("a symlink target empty, over 4096 bytes or with NUL");
                    }
                }
                Kind::Hardlink { to } => {
                    if !files.contains(&to[..]) {
                        return bad("a hardlink to no file listed before it");
                    }
                }
            }
        }
        Ok(())
    }

    /// The file entries by path: what a re-run compares with.
    pub fn files(&self) -> HashMap<&[u8], (u64, &[u8; 32], &str)> {
        self.entries
            .iter()
            .filter_map(|e| match &e.kind {
                Kind::File { size, blake3, key } => Some((&e.path[..], (*size, blake3, &key[..]))),
                _ => None,
            })
            .collect()
    }

    /// `self` with what `names` (top-level entries of a new upload; `""` for everything)
    /// held replaced by `new`.
    pub fn merged(self, names: &[Vec<u8>], new: Vec<Entry>) -> Manifest {
        let under = |path: &[u8]| {
            names.iter().any(|n| {
                n.is_empty()
                    || path == &n[..]
                    || (path.starts_with(n) && path.get(n.len()) == Some(&b'/'))
            })
        };
        let kept: Vec<Entry> = self
            .entries
            .into_iter()
            .filter(|e| !under(&e.path))
            .collect();
        let kept_files: HashSet<Vec<u8>> = kept
            .iter()
            .filter(|e| matches!(e.kind, Kind::File { .. }))
            .map(|e| e.path.clone())
            .collect();
        // A kept hardlink whose file was replaced has lost its content: it goes too.
        let mut entries: Vec<Entry> = kept
            .into_iter()
            .filter(|e| !matches!(&e.kind, Kind::Hardlink { to } if !kept_files.contains(to)))
            .collect();
        let root_new = new.iter().any(|e| e.path.is_empty());
        if root_new {
            entries.retain(|e| !e.path.is_empty());
        }
        let (root, rest): (Vec<Entry>, Vec<Entry>) =
            new.into_iter().partition(|e| e.path.is_empty());
        let mut out = root;
        out.extend(entries);
        out.extend(rest);
        Manifest { entries: out }
    }
}

/// Whether `key` (beneath the prefix) stays beneath it and is a plain object name.
fn key_is_safe(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= crate::config::MAX_KEY / 2
        && !key.starts_with('/')
        && !key.chars().any(char::is_control)
        && key != MANIFEST_NAME
        && key
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, kind: Kind) -> Entry {
        Entry {
            path: path.as_bytes().to_vec(),
            mode: 0o644,
            uid: 0,
            gid: 0,
            mtime: -5,
            mtime_nsec: 999_999_999,
            kind,
        }
    }

    fn file(path: &str) -> Entry {
        let key = key_for(path.as_bytes());
        entry(
            path,
            Kind::File {
                size: 3,
                blake3: [7; 32],
                key,
            },
        )
    }

    #[test]
    fn a_manifest_comes_back_as_it_was_encoded() {
        let m = Manifest {
            entries: vec![
                entry("", Kind::Dir),
                entry("d", Kind::Dir),
                file("d/f"),
                entry(
                    "d/h",
                    Kind::Hardlink {
                        to: b"d/f".to_vec(),
                    },
                ),
                entry(
                    "l",
                    Kind::Symlink {
                        target: b"../x".to_vec(),
                    },
                ),
            ],
        };
        assert_eq!(Manifest::decode(&m.encode()), Ok(m));
    }

    #[test]
    fn hostile_manifests_are_refused_with_the_rule_they_break() {
        let refused =
            |entries: Vec<Entry>| Manifest::decode(&Manifest { entries }.encode()).is_err();
        assert!(refused(vec![file("../x")]));
        assert!(refused(vec![file("/etc/passwd")]));
        assert!(refused(vec![file("d/f")]), "parent not listed");
        assert!(refused(vec![file("f"), file("f")]));
        assert!(refused(vec![entry(
            "h",
            Kind::Hardlink {
                to: b"nowhere".to_vec()
            }
        )]));
        assert!(refused(vec![entry(
            "f",
            Kind::File {
                size: 1,
                blake3: [0; 32],
                key: "../../other".into()
            }
        )]));
        assert!(refused(vec![entry(
            "f",
            Kind::File {
                size: 1,
                blake3: [0; 32],
                key: MANIFEST_NAME.into()
            }
        )]));
        assert!(refused(vec![entry(
            "l",
            Kind::Symlink {
                target: b"a\0b".to_vec()
            }
        )]));
        assert_eq!(Manifest::decode(b"not one"), Err(ManifestError::Magic));
        assert!(matches!(
            Manifest::decode(b"haul-manifest 1\n\xff\xff\xff"),
            Err(ManifestError::Decode(_))
        ));
    }

    #[test]
    fn names_that_cannot_be_keys_get_hashed_keys() {
        assert_eq!(key_for(b"a/b c.txt"), "a/b c.txt");
        for odd in [
            &b"a/\xff"[..],
            b"new\nline",
            b".haul-manifest",
            b"d/.haul-x",
            // A listing trims it: the re-run of e2e_s3's hostile tree re-sent this one.
            b"names/trailing space ",
        ] {
            let k = key_for(odd);
            assert!(k.starts_with(HASHED_KEYS) && key_is_safe(&k), "{k}");
        }
    }

    #[test]
    fn a_merge_replaces_what_the_new_upload_names_and_keeps_the_rest() {
        let old = Manifest {
            entries: vec![
                entry("a", Kind::Dir),
                file("a/x"),
                file("b"),
                entry(
                    "c",
                    Kind::Hardlink {
                        to: b"a/x".to_vec(),
                    },
                ),
            ],
        };
        let m = old.merged(&[b"a".to_vec()], vec![entry("a", Kind::Dir), file("a/y")]);
        let paths: Vec<&[u8]> = m.entries.iter().map(|e| &e.path[..]).collect();
        assert_eq!(paths, vec![&b"b"[..], b"a", b"a/y"]);
        assert!(m.check().is_ok());
        let all = m.merged(&[Vec::new()], vec![entry("", Kind::Dir), file("z")]);
        assert_eq!(all.entries.len(), 2);
    }
}
