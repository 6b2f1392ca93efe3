//! Large files are written with `O_DIRECT` where the file system takes it (the aligned
//! body of each unit; the unaligned end of a file buffered): files of every size around
//! the 4096-byte alignment and the 4 MiB unit arrive byte-identical, by local copy and
//! over the network, and with `--keep-cache` (the buffered path) too.

mod support;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use support::*;

/// Sizes around the alignment (4096) and the default unit (4 MiB).
const SIZES: [u64; 10] = [
    0,
    1,
    4095,
    4096,
    4097,
    4 * MIB - 1,
    4 * MIB,
    4 * MIB + 1,
    9 * MIB + 123,
    13 * MIB + 4096 * 3,
];

/// A source tree with one file of each size, under the target directory (a real disk:
/// a temp dir may be a tmpfs, which older kernels refuse `O_DIRECT` on).
fn source(tmp: &Path) -> PathBuf {
    let src = tmp.join("src");
    std::fs::create_dir(&src).unwrap();
    for (i, size) in SIZES.iter().enumerate() {
        write_random_file(&src.join(format!("f{size}")), *size, 40 + i as u64);
    }
    src
}

#[test]
fn files_around_the_alignment_copy_byte_identical_through_the_direct_path() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let src = source(tmp.path());
    for (n, args) in [
        &[][..],
        &["--block-size", "1M"],
        &["--streams", "1", "--compress", "none"],
        &["--keep-cache"],
    ]
    .iter()
    .enumerate()
    {
        let dst = tmp.path().join(format!("dst{n}"));
        copy(&[&src], &dst, args).assert_code(0);
        assert_contents_equal(&src, &dst.join("src"));
        assert_no_part_files(&dst);
    }
}

#[test]
fn files_around_the_alignment_arrive_byte_identical_over_the_network() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let src = source(tmp.path());
    let dst = tmp.path().join("dst");
    std::fs::create_dir(&dst).unwrap();
    let (sent, received) = transfer(&[&src], &dst, &[], &[]);
    assert_transfer_ok(&sent, &received);
    assert_contents_equal(&src, &dst.join("src"));
}

/// Where the file system refuses direct I/O (`fcntl(F_SETFL, O_DIRECT)` fails with
/// `EINVAL`, as on one without `direct_IO`; imitated by a seccomp filter), the sender's cold
/// reads and the receiver's large-file writes fall back to buffered I/O and every size
/// still arrives byte-identical.
#[test]
fn files_copy_byte_identical_where_direct_io_is_refused() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let src = source(tmp.path());
    for (n, extra) in [&[][..], &["--streams", "1", "--compress", "none"]]
        .iter()
        .enumerate()
    {
        let dst = tmp.path().join(format!("refused{n}"));
        evict(&src);
        let mut args = vec![OsStr::new("copy"), src.as_os_str(), dst.as_os_str()];
        args.extend(extra.iter().map(OsStr::new));
        let filter = seccomp::failing_setfl(libc::O_DIRECT, libc::EINVAL);
        Running::spawn("copy", seccomp::haul_filtered(&args, filter))
            .wait()
            .assert_code(0);
        assert_contents_equal(&src, &dst.join("src"));
        assert_no_part_files(&dst);
    }
}

/// Drops `dir`'s files from the page cache (written back first), so the sender finds their
/// blocks cold and reads them with `O_DIRECT`.
fn evict(dir: &Path) {
    use std::os::fd::AsRawFd;
    for e in std::fs::read_dir(dir).unwrap() {
        let f = std::fs::File::open(e.unwrap().path()).unwrap();
        f.sync_all().unwrap();
        // SAFETY: advice on a descriptor this function owns; no memory is passed.
        let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(r, 0, "posix_fadvise");
    }
}

/// Sizes of small files (read whole, in packs) around the page size, up to a quarter of
/// the default block.
const SMALL: [u64; 9] = [
    1,
    100,
    4095,
    4096,
    4097,
    8192,
    100 * 1024,
    100 * 1024 + 1,
    MIB - 1,
];

/// A directory of three small files of each size in [`SMALL`], evicted from the cache.
fn small_source(tmp: &Path) -> PathBuf {
    let src = tmp.join("small");
    std::fs::create_dir(&src).unwrap();
    for (i, size) in SMALL.iter().enumerate() {
        for k in 0..3 {
            let seed = 100 + 3 * i as u64 + k;
            write_random_file(&src.join(format!("s{size}-{k}")), *size, seed);
        }
    }
    evict(&src);
    src
}

/// Pages of `dir`'s files in the page cache.
fn cached_files(dir: &Path) -> Vec<(PathBuf, f64)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let f = std::fs::File::open(&p).unwrap();
            let len = f.metadata().unwrap().len();
            (p, haul::pagecache::cached_share(&f, 0, len))
        })
        .filter(|(_, share)| *share > 0.0)
        .collect()
}

/// Small files found cold are read with `O_DIRECT` too (one read of their whole pages,
/// the last one short), so not a page of them enters the cache. The drop that follows a
/// buffered read is made to fail (`fadvise` refused by a seccomp filter): before, the
/// packed files were read buffered and stayed cached then.
#[test]
fn cold_small_files_are_read_without_the_page_cache() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let src = small_source(tmp.path());
    for (n, extra) in [&[][..], &["--streams", "1"]].iter().enumerate() {
        evict(&src);
        let dst = tmp.path().join(format!("dst{n}"));
        let mut args = vec![OsStr::new("copy"), src.as_os_str(), dst.as_os_str()];
        args.extend(extra.iter().map(OsStr::new));
        let filter = seccomp::failing_call(libc::SYS_fadvise64, libc::EPERM);
        Running::spawn("copy", seccomp::haul_filtered(&args, filter))
            .wait()
            .assert_code(0);
        // Before the comparison, which reads them.
        assert_eq!(cached_files(&src), vec![], "source pages left in the cache");
        assert_contents_equal(&src, &dst.join("small"));
        assert_no_part_files(&dst);
    }
}

/// Cold small files of every size around the page arrive byte-identical over the network
/// (read directly), and so they do where direct I/O is refused (read buffered).
#[test]
fn cold_small_files_arrive_byte_identical_read_directly_or_not() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let src = small_source(tmp.path());
    let dst = tmp.path().join("dst");
    std::fs::create_dir(&dst).unwrap();
    let (sent, received) = transfer(&[&src], &dst, &["--compress", "none"], &[]);
    assert_transfer_ok(&sent, &received);
    assert_eq!(cached_files(&src), vec![], "source pages left in the cache");
    assert_contents_equal(&src, &dst.join("small"));

    evict(&src);
    let refused = tmp.path().join("refused");
    let args = [OsStr::new("copy"), src.as_os_str(), refused.as_os_str()];
    let filter = seccomp::failing_setfl(libc::O_DIRECT, libc::EINVAL);
    Running::spawn("copy", seccomp::haul_filtered(&args, filter))
        .wait()
        .assert_code(0);
    assert_eq!(cached_files(&src), vec![], "source pages left in the cache");
    assert_contents_equal(&src, &refused.join("small"));
    assert_no_part_files(&refused);
}
