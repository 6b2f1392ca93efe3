//! Compares a source tree with what arrived, byte for byte and stat for stat.
//!
//! Both trees are walked with `lstat` (symlinks are never followed) and matched by relative
//! path as raw bytes. Every difference is collected, then the comparison panics with all of
//! them, each naming the relative path and what differs. The only things not compared are
//! said here, with the reason: directory sizes (a property of the file system, not of the
//! data), atimes and ctimes (reading changes the first; no copier can set the second), and
//! symlink permission bits beyond what `lstat` reports (Linux has none).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsStr;
use std::fs::{self, File, Metadata};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::fs::SeekFrom;

use super::{is_root, MIB};

/// Sparse-aware content hashing works on chunks of this size.
const CHUNK: u64 = 64 * 1024;
/// Most differences listed in one panic message.
const MAX_REPORTED: usize = 60;

/// Asserts that `dst` is an exact copy of `src`, including `src`'s own metadata.
pub fn assert_trees_equal(src: &Path, dst: &Path) {
    Compare::new().assert(src, dst);
}

/// Asserts that `dst`'s contents equal `src`'s contents; the two roots' own metadata is not
/// compared (for `src/` copies, whose root is the pre-existing destination directory).
pub fn assert_contents_equal(src: &Path, dst: &Path) {
    Compare::new().skip_root_metadata().assert(src, dst);
}

/// A configurable tree comparison; [`Compare::new`] checks everything.
#[derive(Debug, Clone)]
pub struct Compare {
    root_metadata: bool,
    owners: bool,
    expect_missing: BTreeSet<Vec<u8>>,
}

impl Default for Compare {
    fn default() -> Self {
        Self::new()
    }
}

impl Compare {
    /// Compares everything; owners only when running as root (only root can set them).
    pub fn new() -> Self {
        Compare {
            root_metadata: true,
            owners: is_root(),
            expect_missing: BTreeSet::new(),
        }
    }

    /// Does not compare the metadata of the two roots themselves (their contents still are).
    pub fn skip_root_metadata(mut self) -> Self {
        self.root_metadata = false;
        self
    }

    /// Compares owners even when not running as root (e.g. when both sides ran as one user).
    pub fn with_owners(mut self, owners: bool) -> Self {
        self.owners = owners;
        self
    }

    /// `rel` exists in the source but must NOT exist at the destination (an unreadable file).
    pub fn expect_missing(mut self, rel: impl AsRef<OsStr>) -> Self {
        self.expect_missing.insert(rel.as_ref().as_bytes().to_vec());
        self
    }

    /// Walks both trees and panics with every difference found.
    pub fn assert(&self, src: &Path, dst: &Path) {
        let diffs = self.differences(src, dst);
        if diffs.is_empty() {
            return;
        }
        let shown: Vec<&str> = diffs
            .iter()
            .take(MAX_REPORTED)
            .map(String::as_str)
            .collect();
        panic!(
            "{} difference(s) between {src:?} and {dst:?}:\n  {}{}",
            diffs.len(),
            shown.join("\n  "),
            if diffs.len() > MAX_REPORTED {
                "\n  ..."
            } else {
                ""
            }
        );
    }

    /// Every difference between the trees, one line each.
    pub fn differences(&self, src: &Path, dst: &Path) -> Vec<String> {
        let src_entries = scan(src);
        let dst_entries = scan(dst);
        let mut diffs = Vec::new();

        for rel in &self.expect_missing {
            if !src_entries.contains_key(rel) {
                diffs.push(format!(
                    "{}: expected missing, but not in the source either",
                    show(rel)
                ));
            }
        }
        for (rel, s) in &src_entries {
            let missing_expected = self.expect_missing.contains(rel);
            match (dst_entries.get(rel), missing_expected) {
                (None, true) => {}
                (None, false) => diffs.push(format!("{}: missing at destination", show(rel))),
                (Some(_), true) => diffs.push(format!(
                    "{}: exists at destination but should not have arrived",
                    show(rel)
                )),
                (Some(d), false) => self.compare_entry(rel, s, d, &mut diffs),
            }
        }
        for (rel, d) in &dst_entries {
            if !src_entries.contains_key(rel) {
                diffs.push(format!(
                    "{}: extra at destination ({})",
                    show(rel),
                    kind(&d.meta)
                ));
            }
        }
        compare_hardlinks(&src_entries, &dst_entries, &mut diffs);
        diffs
    }

    fn compare_entry(&self, rel: &[u8], s: &Entry, d: &Entry, diffs: &mut Vec<String>) {
        let name = show(rel);
        let (sk, dk) = (kind(&s.meta), kind(&d.meta));
        if sk != dk {
            diffs.push(format!(
                "{name}: type differs: source {sk}, destination {dk}"
            ));
            return;
        }
        let is_root = rel.is_empty();
        if !is_root || self.root_metadata {
            compare_metadata(&name, &s.meta, &d.meta, self.owners, diffs);
        }
        let ft = s.meta.file_type();
        if ft.is_symlink() {
            let st = fs::read_link(&s.path).unwrap();
            let dt = fs::read_link(&d.path).unwrap();
            if st != dt {
                diffs.push(format!(
                    "{name}: symlink target differs: source {st:?}, destination {dt:?}"
                ));
            }
        } else if ft.is_file() {
            compare_file(&name, s, d, diffs);
        } else if !ft.is_dir() {
            diffs.push(format!(
                "{name}: unexpected file type {sk} in the source tree"
            ));
        }
    }
}

/// One walked entry: where it is and its `lstat`.
#[derive(Debug)]
struct Entry {
    path: PathBuf,
    meta: Metadata,
}

/// All entries under `root` (and `root` itself, as the empty path), keyed by raw relative path.
fn scan(root: &Path) -> BTreeMap<Vec<u8>, Entry> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(Vec::new(), root.to_path_buf())];
    while let Some((rel, path)) = stack.pop() {
        let meta = fs::symlink_metadata(&path).unwrap_or_else(|e| panic!("lstat {path:?}: {e}"));
        if meta.is_dir() {
            let entries = fs::read_dir(&path).unwrap_or_else(|e| panic!("readdir {path:?}: {e}"));
            for entry in entries {
                let entry = entry.unwrap();
                let mut child_rel = rel.clone();
                if !child_rel.is_empty() {
                    child_rel.push(b'/');
                }
                child_rel.extend_from_slice(entry.file_name().as_bytes());
                stack.push((child_rel, entry.path()));
            }
        }
        out.insert(rel, Entry { path, meta });
    }
    out
}

fn compare_metadata(name: &str, s: &Metadata, d: &Metadata, owners: bool, diffs: &mut Vec<String>) {
    let (sm, dm) = (s.mode() & 0o7777, d.mode() & 0o7777);
    if sm != dm {
        diffs.push(format!(
            "{name}: mode differs: source {sm:04o}, destination {dm:04o}"
        ));
    }
    let st = (s.mtime(), s.mtime_nsec());
    let dt = (d.mtime(), d.mtime_nsec());
    if st != dt {
        diffs.push(format!(
            "{name}: mtime differs: source {}.{:09}, destination {}.{:09}",
            st.0, st.1, dt.0, dt.1
        ));
    }
    if owners && (s.uid(), s.gid()) != (d.uid(), d.gid()) {
        diffs.push(format!(
            "{name}: owner differs: source {}:{}, destination {}:{}",
            s.uid(),
            s.gid(),
            d.uid(),
            d.gid()
        ));
    }
}

fn compare_file(name: &str, s: &Entry, d: &Entry, diffs: &mut Vec<String>) {
    let (ss, ds) = (s.meta.len(), d.meta.len());
    if ss != ds {
        diffs.push(format!(
            "{name}: size differs: source {ss}, destination {ds}"
        ));
        return;
    }
    let sh = content_digest(&s.path, ss).unwrap_or_else(|e| panic!("read {:?}: {e}", s.path));
    let dh = content_digest(&d.path, ds).unwrap_or_else(|e| panic!("read {:?}: {e}", d.path));
    if sh != dh {
        let at = first_difference(&s.path, &d.path, ss);
        diffs.push(format!(
            "{name}: content differs (first differing byte at offset {at})"
        ));
    }
    let (sa, da) = (s.meta.blocks() * 512, d.meta.blocks() * 512);
    if sa < ss / 2 {
        // A sparse source: the copy may allocate a little more (block-granular writes) but
        // must keep the holes. For the 4 GiB tree file this allows ~17 MiB, not gigabytes.
        let limit = (2 * sa + 16 * MIB).min(ss / 2);
        if da > limit {
            diffs.push(format!(
                "{name}: holes not kept: source allocates {sa} bytes, destination {da} \
                 (limit {limit}) of {ss}"
            ));
        }
    }
}

/// Paths that share an inode in the source must share one at the destination, and paths that
/// do not must not.
fn compare_hardlinks(
    src: &BTreeMap<Vec<u8>, Entry>,
    dst: &BTreeMap<Vec<u8>, Entry>,
    diffs: &mut Vec<String>,
) {
    let src_groups = link_groups(src, dst);
    let dst_groups = link_groups(dst, src);
    for (rel, sg) in &src_groups {
        let Some(dg) = dst_groups.get(rel) else {
            continue;
        };
        if sg != dg {
            let list = |g: &Vec<Vec<u8>>| g.iter().map(|r| show(r)).collect::<Vec<_>>().join(", ");
            diffs.push(format!(
                "{}: hardlink structure differs: in the source it shares its inode with [{}], \
                 at the destination with [{}]",
                show(rel),
                list(sg),
                list(dg)
            ));
        }
    }
}

/// For each non-directory path of `tree` that also exists in `other`, the sorted list of the
/// other such paths sharing its inode.
fn link_groups(
    tree: &BTreeMap<Vec<u8>, Entry>,
    other: &BTreeMap<Vec<u8>, Entry>,
) -> HashMap<Vec<u8>, Vec<Vec<u8>>> {
    let mut by_inode: HashMap<(u64, u64), Vec<Vec<u8>>> = HashMap::new();
    for (rel, e) in tree {
        if e.meta.is_dir() || !other.contains_key(rel) {
            continue;
        }
        by_inode
            .entry((e.meta.dev(), e.meta.ino()))
            .or_default()
            .push(rel.clone());
    }
    let mut out = HashMap::new();
    for group in by_inode.values() {
        for rel in group {
            let peers: Vec<Vec<u8>> = group.iter().filter(|r| *r != rel).cloned().collect();
            out.insert(rel.clone(), peers);
        }
    }
    out
}

/// A BLAKE3 digest of a file's logical content that skips holes without reading them.
///
/// The file is viewed as 64 KiB chunks; every chunk that is not all zeros is hashed with its
/// offset. Two files of equal size have equal digests exactly when their bytes are equal,
/// however each stores its zeros (hole, written zeros, or unwritten extent).
fn content_digest(path: &Path, size: u64) -> io::Result<blake3::Hash> {
    let file = File::open(path)?;
    let mut hasher = blake3::Hasher::new();
    hasher.update(&size.to_le_bytes());
    let mut buf = vec![0u8; CHUNK as usize];
    let zeros = vec![0u8; CHUNK as usize];
    let mut pos = 0u64;
    while pos < size {
        let data = match rustix::fs::seek(&file, SeekFrom::Data(pos)) {
            Ok(offset) => offset,
            Err(rustix::io::Errno::NXIO) => break,
            Err(e) => return Err(e.into()),
        };
        let hole = rustix::fs::seek(&file, SeekFrom::Hole(data))?.min(size);
        let mut chunk = data / CHUNK * CHUNK;
        while chunk < hole {
            let len = (size - chunk).min(CHUNK) as usize;
            file.read_exact_at(&mut buf[..len], chunk)?;
            if buf[..len] != zeros[..len] {
                hasher.update(&chunk.to_le_bytes());
                hasher.update(&buf[..len]);
            }
            chunk += CHUNK;
        }
        pos = chunk;
    }
    Ok(hasher.finalize())
}

/// The offset of the first differing byte of two equally long files (for the panic message).
fn first_difference(a: &Path, b: &Path, size: u64) -> u64 {
    let (fa, fb) = (File::open(a).unwrap(), File::open(b).unwrap());
    let (mut ba, mut bb) = (vec![0u8; MIB as usize], vec![0u8; MIB as usize]);
    let mut pos = 0;
    while pos < size {
        let len = (size - pos).min(MIB) as usize;
        fa.read_exact_at(&mut ba[..len], pos).unwrap();
        fb.read_exact_at(&mut bb[..len], pos).unwrap();
        if let Some(i) = ba[..len].iter().zip(&bb[..len]).position(|(x, y)| x != y) {
            return pos + i as u64;
        }
        pos += len as u64;
    }
    size
}

/// A relative path for messages: escaped, and `.` for the root.
pub fn show(rel: &[u8]) -> String {
    if rel.is_empty() {
        return ".".to_string();
    }
    format!("{:?}", OsStr::from_bytes(rel))
}

fn kind(meta: &Metadata) -> &'static str {
    let ft = meta.file_type();
    if ft.is_symlink() {
        "symlink"
    } else if ft.is_dir() {
        "directory"
    } else if ft.is_file() {
        "regular file"
    } else if ft.is_fifo() {
        "fifo"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_block_device() || ft.is_char_device() {
        "device"
    } else {
        "unknown"
    }
}
