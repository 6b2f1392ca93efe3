//! Builds the hostile-but-legal source tree that every transfer test moves.
//!
//! The tree holds what real file systems hold and naive copiers get wrong: deep and empty
//! directories, files one byte either side of a block boundary, incompressible and
//! compressible data, sparse files (one past 4 GiB, on request), thousands of small files (on
//! request), names with spaces, newlines, non-UTF-8 bytes and 255 bytes, every kind of
//! symlink, hardlinks across directories, unusual permission bits (setuid, setgid, sticky),
//! nanosecond mtimes (some before 1970, some after 2106) set on files, directories and
//! symlinks after their content exists, and foreign owners when running as root.
//!
//! It deliberately holds nothing the CLI contract does not define: no FIFOs, sockets or
//! device nodes, and no file named like haul's own `.haul-*.part` partial files.
//! All content is generated from fixed seeds, so a failure is reproducible.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{lchown, symlink, FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Timespec, Timestamps, CWD};

use super::{is_root, MIB};

/// Size of the 64 KiB chunks of data written into sparse files.
const SPARSE_CHUNK: u64 = 64 * 1024;
/// Logical size of the big sparse file: past 4 GiB so 32-bit offsets overflow.
pub const BIG_SPARSE_LEN: u64 = (4 << 30) + 12345;
/// Path of the big sparse file inside the tree, when it is built.
pub const BIG_SPARSE_REL: &str = "sparse/big-sparse.bin";
/// A plain regular file that every tree has; failure tests make it unreadable.
pub const PLAIN_FILE_REL: &str = "a/b/c/deep.txt";
/// Owner given to some entries when the tree is built as root.
pub const FOREIGN_UID: u32 = 1234;
/// Group given to some entries when the tree is built as root.
pub const FOREIGN_GID: u32 = 5678;

/// What to put in the tree beyond the always-present hostile core.
#[derive(Debug, Clone)]
pub struct TreeOptions {
    /// The block size the tests pass as `--block-size`; files of block-1, block, block+1 bytes
    /// and 3 blocks + 7 bytes are created.
    pub block_size: u64,
    /// How many small (1 byte to 8 KiB) files to spread over a few directories.
    pub small_files: usize,
    /// Whether to create the 4 GiB + 12345 byte sparse file.
    pub big_sparse: bool,
    /// Whether to give some entries foreign owners (only takes effect when running as root).
    pub foreign_owners: bool,
}

impl TreeOptions {
    /// The whole tree: 5,000 small files and the big sparse file.
    pub fn full() -> Self {
        TreeOptions {
            block_size: MIB,
            small_files: 5000,
            big_sparse: true,
            foreign_owners: true,
        }
    }

    /// The hostile core plus a couple of hundred small files: cheap enough for every variant.
    pub fn small() -> Self {
        TreeOptions {
            block_size: MIB,
            small_files: 200,
            big_sparse: false,
            foreign_owners: true,
        }
    }
}

/// A small, fast, seeded generator (SplitMix64): random enough that zstd cannot shrink it.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose output is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for chunk in &mut chunks {
            chunk.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        let last = self.next_u64().to_le_bytes();
        rest.copy_from_slice(&last[..rest.len()]);
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.fill(&mut v);
        v
    }
}

/// Writes `len` random bytes (from `seed`) to a new file at `path`, 1 MiB at a time.
pub fn write_random_file(path: &Path, len: u64, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut file = File::create(path).unwrap_or_else(|e| panic!("create {path:?}: {e}"));
    let mut buf = vec![0u8; MIB as usize];
    let mut left = len;
    while left > 0 {
        let n = left.min(MIB) as usize;
        rng.fill(&mut buf[..n]);
        file.write_all(&buf[..n])
            .unwrap_or_else(|e| panic!("write {path:?}: {e}"));
        left -= n as u64;
    }
}

/// Builds the test tree as `parent/name` and returns its path.
///
/// Panics when the file system cannot hold what the tests need (for example holes), so a
/// test never passes on a tree that lacks the case it claims to cover.
pub fn build_tree(parent: &Path, name: &str, opts: &TreeOptions) -> PathBuf {
    let root = parent.join(name);
    let mut b = Builder {
        root: root.clone(),
        rng: Rng::new(0x4841_554C), // "HAUL"
    };
    b.dir("");
    b.nested();
    b.block_edges(opts.block_size);
    b.compressible();
    b.sparse(opts.big_sparse);
    b.names();
    b.links();
    b.hardlinks();
    b.modes();
    if opts.small_files > 0 {
        b.small_files(opts.small_files);
    }
    if opts.foreign_owners && is_root() {
        b.foreign_owners();
    }
    b.timestamps();
    set_all_mtimes(&root);
    root
}

/// Gives every entry under `root` (and `root` itself) the owner `uid:gid`, keeping modes.
///
/// `chown` clears setuid/setgid bits, so each non-symlink gets its mode back afterwards;
/// neither call touches mtimes.
pub fn chown_tree(root: &Path, uid: u32, gid: u32) {
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = fs::symlink_metadata(&path).unwrap();
        lchown(&path, Some(uid), Some(gid)).unwrap_or_else(|e| panic!("lchown {path:?}: {e}"));
        if meta.file_type().is_symlink() {
            continue;
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(meta.mode() & 0o7777)).unwrap();
        if meta.is_dir() {
            for entry in fs::read_dir(&path).unwrap() {
                stack.push(entry.unwrap().path());
            }
        }
    }
}

/// Sets the mtime (and atime) of `path` without following a symlink.
pub fn set_mtime(path: &Path, sec: i64, nsec: i64) {
    let ts = Timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    };
    let times = Timestamps {
        last_access: ts,
        last_modification: ts,
    };
    rustix::fs::utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW)
        .unwrap_or_else(|e| panic!("utimensat {path:?}: {e}"));
}

/// Mtimes that a naive copier truncates or overflows, keyed by path relative to the root.
const SPECIAL_MTIMES: &[(&str, i64, i64)] = &[
    ("timestamps/epoch", 0, 0),
    ("timestamps/max-nsec", 1_700_000_000, 999_999_999),
    ("timestamps/before-1970", -315_619_200, 123_456_789),
    ("timestamps/after-2106", 8_589_934_592, 500_000_001),
];

/// Gives every entry a distinct nanosecond mtime, children before their directory.
///
/// Run once everything exists: creating an entry changes its directory's mtime, but setting a
/// child's mtime does not, so the values set here are the ones a copy must reproduce.
fn set_all_mtimes(root: &Path) {
    let mut index = 0i64;
    post_order(root, &mut |path| {
        index += 1;
        let rel = path.strip_prefix(root).unwrap();
        let special = SPECIAL_MTIMES
            .iter()
            .find(|(p, _, _)| Path::new(p) == rel)
            .map(|&(_, s, n)| (s, n));
        let (sec, nsec) = special.unwrap_or((
            1_600_000_000 + index * 37,
            (index * 999_983 + 1) % 1_000_000_000,
        ));
        set_mtime(path, sec, nsec);
    });
}

fn post_order(path: &Path, visit: &mut dyn FnMut(&Path)) {
    let meta = fs::symlink_metadata(path).unwrap();
    if meta.is_dir() {
        let mut children: Vec<PathBuf> = fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        children.sort_by(|a, b| a.as_os_str().as_bytes().cmp(b.as_os_str().as_bytes()));
        for child in &children {
            post_order(child, visit);
        }
    }
    visit(path);
}

struct Builder {
    root: PathBuf,
    rng: Rng,
}

impl Builder {
    fn path(&self, rel: impl AsRef<OsStr>) -> PathBuf {
        let rel = rel.as_ref();
        if rel.is_empty() {
            return self.root.clone();
        }
        self.root.join(rel)
    }

    fn dir(&self, rel: impl AsRef<OsStr>) {
        let path = self.path(rel);
        fs::create_dir_all(&path).unwrap_or_else(|e| panic!("mkdir {path:?}: {e}"));
    }

    fn file(&self, rel: impl AsRef<OsStr>, content: &[u8]) {
        let path = self.path(rel);
        fs::write(&path, content).unwrap_or_else(|e| panic!("write {path:?}: {e}"));
    }

    fn random_file(&mut self, rel: impl AsRef<OsStr>, len: u64) {
        let seed = self.rng.next_u64();
        write_random_file(&self.path(rel), len, seed);
    }

    fn symlink(&self, target: impl AsRef<OsStr>, rel: impl AsRef<OsStr>) {
        let path = self.path(rel);
        symlink(target.as_ref(), &path).unwrap_or_else(|e| panic!("symlink {path:?}: {e}"));
    }

    fn chmod(&self, rel: impl AsRef<OsStr>, mode: u32) {
        let path = self.path(rel);
        fs::set_permissions(&path, fs::Permissions::from_mode(mode))
            .unwrap_or_else(|e| panic!("chmod {path:?}: {e}"));
        let got = fs::symlink_metadata(&path).unwrap().mode() & 0o7777;
        assert_eq!(got, mode, "mode of {path:?} did not stick");
    }

    /// Three and four levels deep, plus an empty directory and an empty file.
    fn nested(&mut self) {
        self.dir("a/b/c/d");
        self.file(PLAIN_FILE_REL, b"three levels down\n");
        self.random_file("a/b/c/d/deepest.bin", 3000);
        self.file("a/top.txt", b"top\n");
        self.dir("empty-dir");
        self.dir("a/b/empty-nested-dir");
        self.file("empty-file", b"");
    }

    /// Incompressible files one byte either side of a block boundary, and one spanning blocks.
    fn block_edges(&mut self, block: u64) {
        self.dir("blocks");
        self.random_file("blocks/block-minus-1.bin", block - 1);
        self.random_file("blocks/block.bin", block);
        self.random_file("blocks/block-plus-1.bin", block + 1);
        self.random_file("blocks/three-blocks-plus-7.bin", 3 * block + 7);
    }

    fn compressible(&mut self) {
        self.dir("compressible");
        let line = b"The quick brown fox jumps over the lazy dog; haul moves it anyway.\n";
        let text: Vec<u8> = line
            .iter()
            .copied()
            .cycle()
            .take(2 * MIB as usize)
            .collect();
        self.file("compressible/lorem.txt", &text);
        // Written zeros, not a hole: a receiver may store it sparse, but must restore it.
        self.file("compressible/zeros.bin", &vec![0u8; MIB as usize]);
        let pattern = self.rng.bytes(4096);
        let repeated: Vec<u8> = pattern
            .iter()
            .copied()
            .cycle()
            .take(2 * MIB as usize)
            .collect();
        self.file("compressible/repeated-4k.bin", &repeated);
        let csv: String = (0..20_000)
            .map(|i| format!("{i},{},{}\n", i * 7 % 1000, i % 3 == 0))
            .collect();
        self.file("compressible/table.csv", csv.as_bytes());
    }

    /// A 64 MiB file with a leading hole, unaligned data and a trailing chunk; and on request
    /// one of 4 GiB + 12345 bytes with data straddling 2 GiB and 4 GiB and ending at EOF.
    fn sparse(&mut self, big: bool) {
        self.dir("sparse");
        self.sparse_file(
            "sparse/small-sparse.bin",
            64 * MIB,
            &[
                (MIB, SPARSE_CHUNK),
                (10 * MIB + 4097, SPARSE_CHUNK),
                (64 * MIB - SPARSE_CHUNK, SPARSE_CHUNK),
            ],
        );
        if big {
            let four_gib = 4u64 << 30;
            self.sparse_file(
                BIG_SPARSE_REL,
                BIG_SPARSE_LEN,
                &[
                    (MIB, SPARSE_CHUNK),
                    ((2u64 << 30) - 1000, SPARSE_CHUNK),
                    (four_gib - 60_000, SPARSE_CHUNK),
                    (BIG_SPARSE_LEN - 5000, 5000),
                ],
            );
        }
    }

    fn sparse_file(&mut self, rel: &str, len: u64, chunks: &[(u64, u64)]) {
        let path = self.path(rel);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        file.set_len(len).unwrap();
        for &(offset, size) in chunks {
            assert!(offset + size <= len, "sparse chunk past EOF in {rel}");
            let data = self.rng.bytes(size as usize);
            file.write_all_at(&data, offset).unwrap();
        }
        let allocated = file.metadata().unwrap().blocks() * 512;
        assert!(
            allocated < len / 2,
            "{path:?}: the file system did not keep holes ({allocated} of {len} bytes allocated)"
        );
    }

    /// Names a shell, a UTF-8 assumption or a line-based protocol would mangle.
    fn names(&mut self) {
        self.dir("names");
        let names: Vec<&[u8]> = vec![
            b"with space",
            b" leading space",
            b"trailing space ",
            b"new\nline",
            b"carriage\rreturn",
            b"tab\there",
            b"non-utf8-\xff\xfe\x80",
            b"latin1-caf\xe9",
            "utf8-日本語-é".as_bytes(),
            b"-dash-first",
            b".hidden",
            b"...",
            b"back\\slash",
            b"quote\"'`$(x)",
            b"glob*?[x]",
            b"CaseName",
            b"casename",
        ];
        for (i, name) in names.iter().enumerate() {
            let rel = Path::new("names").join(OsStr::from_bytes(name));
            let len = self.rng.range(0, 300) + i as u64;
            self.random_file(&rel, len);
        }
        let long = [b'L'; 255];
        self.random_file(Path::new("names").join(OsStr::from_bytes(&long)), 1234);
        let odd_dir = Path::new("names").join(OsStr::from_bytes(b"dir-\xff\n-odd"));
        self.dir(&odd_dir);
        self.random_file(odd_dir.join("inside"), 77);
    }

    /// Relative, absolute, dangling, looping, directory and odd-byte symlinks: never followed.
    fn links(&mut self) {
        self.dir("links");
        self.symlink("../a/b/c/deep.txt", "links/relative");
        self.symlink("/etc/passwd", "links/absolute");
        self.symlink("/nonexistent/haul-e2e/target", "links/absolute-dangling");
        self.symlink("no-such-file", "links/dangling");
        self.symlink("../a", "links/to-dir");
        self.symlink("self-loop", "links/self-loop");
        self.symlink(OsStr::from_bytes(b"odd \xff\ntarget"), "links/odd-target");
        let long_target = "x/".repeat(500) + "end";
        self.symlink(&long_target, "links/long-target");
        self.symlink("../../a/top.txt", "a/b/link-up-two");
    }

    /// A pair in one directory and a third link elsewhere: the destination must share inodes.
    fn hardlinks(&mut self) {
        self.dir("hardlinks");
        self.random_file("hardlinks/one.bin", 20_000);
        fs::hard_link(
            self.path("hardlinks/one.bin"),
            self.path("hardlinks/two.bin"),
        )
        .unwrap();
        fs::hard_link(
            self.path("hardlinks/one.bin"),
            self.path("a/b/third-link.bin"),
        )
        .unwrap();
        self.random_file("hardlinks/pair-a", 10);
        fs::hard_link(self.path("hardlinks/pair-a"), self.path("hardlinks/pair-b")).unwrap();
    }

    fn modes(&mut self) {
        self.dir("modes");
        self.random_file("modes/private-0600", 100);
        self.chmod("modes/private-0600", 0o600);
        self.file("modes/exec-0755.sh", b"#!/bin/sh\necho hi\n");
        self.chmod("modes/exec-0755.sh", 0o755);
        self.file("modes/readonly-0444", b"read only\n");
        self.chmod("modes/readonly-0444", 0o444);
        self.file("modes/setgid-2755", b"setgid\n");
        self.chmod("modes/setgid-2755", 0o2755);
        self.file("modes/odd-0614", b"odd bits\n");
        self.chmod("modes/odd-0614", 0o614);
        self.dir("modes/private-dir-0700");
        self.file("modes/private-dir-0700/inside", b"secret\n");
        self.chmod("modes/private-dir-0700", 0o700);
        self.dir("modes/sticky-dir-1777");
        self.file("modes/sticky-dir-1777/inside", b"shared\n");
        self.chmod("modes/sticky-dir-1777", 0o1777);
    }

    /// `count` files of 1 byte to 8 KiB, spread over five directories.
    fn small_files(&mut self, count: usize) {
        let mut buf = vec![0u8; 8192];
        for d in 0..5 {
            self.dir(format!("many/dir-{d}"));
        }
        for i in 0..count {
            let len = self.rng.range(1, 8192) as usize;
            self.rng.fill(&mut buf[..len]);
            self.file(format!("many/dir-{}/file-{i:05}", i % 5), &buf[..len]);
        }
    }

    /// Owners that only a root receiver can reproduce, including on a symlink and a
    /// setuid file (chown clears setuid, so a receiver must chmod after chown).
    fn foreign_owners(&mut self) {
        self.dir("owned/subdir");
        self.file("owned/file", b"owned by 1234:5678\n");
        self.file("owned/subdir/file", b"owned by 4321:8765\n");
        self.file("owned/setuid-4755", b"setuid\n");
        self.symlink("file", "owned/link");
        let own = |rel: &str, uid: u32, gid: u32| {
            lchown(self.path(rel), Some(uid), Some(gid)).unwrap();
        };
        own("owned/file", FOREIGN_UID, FOREIGN_GID);
        own("owned/link", FOREIGN_UID, FOREIGN_GID);
        own("owned/setuid-4755", FOREIGN_UID, FOREIGN_GID);
        own("owned/subdir", 4321, 8765);
        own("owned/subdir/file", 4321, 8765);
        self.chmod("owned/setuid-4755", 0o4755);
    }

    /// Files whose mtimes are set to the values in [`SPECIAL_MTIMES`].
    fn timestamps(&mut self) {
        self.dir("timestamps");
        for (rel, _, _) in SPECIAL_MTIMES {
            self.file(rel, rel.as_bytes());
        }
    }
}
