//! Large files are written with `O_DIRECT` where the file system takes it (the aligned
//! body of each unit; the unaligned end of a file buffered): files of every size around
//! the 4096-byte alignment and the 4 MiB unit arrive byte-identical, by local copy and
//! over the network, and with `--keep-cache` (the buffered path) too.

mod support;

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
