//! Object stores as endpoints, with the real binary against a real S3 server (s3s-fs, its
//! buckets directories in a temp dir, signatures checked): a hostile tree up and down
//! identical through the manifest, re-runs that send nothing, a corrupted object caught on
//! download, wrong credentials and a missing bucket as one clear line and a documented
//! exit code, a multipart object and parallel range reads, a single file renamed both
//! ways with credentials from ~/.aws/credentials, a file or directory of a tree alone.

mod support;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use support::s3::{S3Server, ACCESS_KEY, SECRET_KEY};
use support::*;

/// Every file under `dir` with its inode, size and mtime: what a re-run must leave alone.
fn stamps(dir: &Path) -> BTreeMap<PathBuf, (u64, u64, i64, i64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                stack.push(p);
            } else {
                out.insert(p, (m.ino(), m.size(), m.mtime(), m.mtime_nsec()));
            }
        }
    }
    out
}

fn os(s: impl Into<OsString>) -> OsString {
    s.into()
}

/// The files under `dir` whose content is `needle`'s (the object of a source file).
fn objects_holding(dir: &Path, content: &[u8]) -> Vec<PathBuf> {
    stamps(dir)
        .into_keys()
        .filter(|p| fs::read(p).map(|b| b == content).unwrap_or(false))
        .collect()
}

#[test]
fn a_hostile_tree_goes_up_and_comes_down_identical_and_re_runs_send_nothing() {
    let Some(s3) = S3Server::start() else { return };
    let bucket = s3.bucket("trees");
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "src", &TreeOptions::small());
    let up = s3.copy(&[os(with_slash(&src)), os("s3://trees/backup/")]);
    up.assert_code(0);
    assert!(up.stderr.contains("manifest written"), "{}", up.describe());
    assert!(
        bucket.join("backup/.haul-manifest").is_file(),
        "the manifest sits beside the tree"
    );

    let dst = tmp.path().join("dst");
    let down = s3.copy(&[os("s3://trees/backup/"), os(&dst)]);
    down.assert_code(0);
    assert_trees_equal(&src, &dst);
    assert_no_part_files(&dst);

    // Again: every object has its size and BLAKE3 already, and the manifest is the same.
    let before = stamps(&bucket);
    let again = s3.copy(&[os(with_slash(&src)), os("s3://trees/backup/")]);
    again.assert_code(0);
    assert!(
        again.stderr.contains("sent 0 files") && again.stderr.contains("manifest unchanged"),
        "a re-run sends nothing\n{}",
        again.describe()
    );
    assert_eq!(
        stamps(&bucket),
        before,
        "a re-run rewrote objects in the bucket"
    );
    let again = s3.copy(&[os("s3://trees/backup/"), os(&dst)]);
    again.assert_code(0);
    assert!(
        again.stderr.contains("received 0 files"),
        "{}",
        again.describe()
    );
    assert_trees_equal(&src, &dst);

    // One file changed: only it goes up again, and comes down again.
    fs::write(src.join(support::tree::PLAIN_FILE_REL), b"changed").unwrap();
    let one = s3.copy(&[os(with_slash(&src)), os("s3://trees/backup/")]);
    one.assert_code(0);
    assert!(one.stderr.contains("sent 1 file,"), "{}", one.describe());
    let one = s3.copy(&[os("s3://trees/backup/"), os(&dst)]);
    one.assert_code(0);
    assert!(
        one.stderr.contains("received 1 file,"),
        "{}",
        one.describe()
    );
    assert_trees_equal(&src, &dst);
}

#[test]
fn a_corrupted_object_is_caught_on_download_and_its_file_is_not_written() {
    let Some(s3) = S3Server::start() else { return };
    let bucket = s3.bucket("corrupt");
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    let content: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    fs::write(src.join("data.bin"), &content).unwrap();
    fs::write(src.join("other.txt"), b"fine").unwrap();
    s3.copy(&[os(with_slash(&src)), os("s3://corrupt/p/")])
        .assert_code(0);
    let objects = objects_holding(&bucket, &content);
    assert_eq!(objects.len(), 1, "one object holds data.bin: {objects:?}");
    // Same size, one byte flipped: only the BLAKE3 can tell.
    let f = fs::OpenOptions::new()
        .write(true)
        .open(&objects[0])
        .unwrap();
    f.write_all_at(&[content[5000] ^ 0x20], 5000).unwrap();

    let dst = tmp.path().join("dst");
    let out = s3.copy(&[os("s3://corrupt/p/"), os(&dst)]);
    out.assert_code(8);
    let line = out.stderr.trim();
    assert_eq!(line.lines().count(), 1, "one line\n{}", out.describe());
    assert!(
        line.contains("s3://corrupt/p/data.bin")
            && line.contains("BLAKE3")
            && line.contains("not written"),
        "{}",
        out.describe()
    );
    assert!(
        !dst.join("data.bin").exists(),
        "a corrupted object took its name"
    );
    assert_no_part_files(&dst);
}

#[test]
fn wrong_credentials_are_one_clear_line_and_exit_6() {
    let Some(s3) = S3Server::start() else { return };
    s3.bucket("locked");
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("f"), b"x").unwrap();
    let wrong = [
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
        ("AWS_SECRET_ACCESS_KEY", "not-the-secret"),
    ];
    for args in [
        vec![os(tmp.path().join("f")), os("s3://locked/p/")],
        vec![os("s3://locked/p/"), os(tmp.path().join("d"))],
    ] {
        let out = s3.copy_with(&args, &wrong);
        out.assert_code(6);
        let line = out.stderr.trim();
        assert_eq!(line.lines().count(), 1, "{}", out.describe());
        assert!(
            line.contains("s3://locked")
                && line.contains("access denied")
                && line.contains("AWS_SECRET_ACCESS_KEY"),
            "{}",
            out.describe()
        );
        assert!(
            !line.contains("not-the-secret"),
            "the secret is never printed"
        );
    }
}

#[test]
fn a_missing_bucket_is_one_clear_line_exit_4_up_and_3_down() {
    let Some(s3) = S3Server::start() else { return };
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("f"), b"x").unwrap();
    for (args, code) in [
        (vec![os(tmp.path().join("f")), os("s3://nowhere/p/")], 4),
        (vec![os("s3://nowhere/p/"), os(tmp.path().join("d"))], 3),
    ] {
        let out = s3.copy(&args);
        out.assert_code(code);
        let line = out.stderr.trim();
        assert_eq!(line.lines().count(), 1, "{}", out.describe());
        assert!(
            line.contains("s3://nowhere") && line.contains("no such bucket"),
            "{}",
            out.describe()
        );
    }
    assert!(
        !tmp.path().join("d").exists(),
        "nothing made for a missing bucket"
    );
}

#[test]
fn a_large_file_goes_as_parts_and_comes_back_by_ranges_with_credentials_from_a_profile() {
    let Some(s3) = S3Server::start() else { return };
    let bucket = s3.bucket("big");
    let aws = s3.home.path().join(".aws");
    fs::create_dir(&aws).unwrap();
    fs::write(
        aws.join("credentials"),
        format!("[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n[haul]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"),
    )
    .unwrap();
    let profile = [("AWS_PROFILE", "haul")];
    let tmp = tempfile::tempdir().unwrap();
    // 40 MiB + 3: five 8 MiB parts and a short one; a hole in the middle.
    let src = tmp.path().join("big.bin");
    write_random_file(&src, 40 * MIB + 3, 42);
    let f = fs::OpenOptions::new().write(true).open(&src).unwrap();
    f.write_all_at(&vec![0u8; 4 * MIB as usize], 16 * MIB)
        .unwrap();
    // `file` to `s3://b/key`: the object is named key.
    s3.copy_with(
        &[
            os(&src),
            os("s3://big/dumps/today.bin"),
            os("--streams"),
            os("4"),
        ],
        &profile,
    )
    .assert_code(0);
    assert_eq!(
        fs::metadata(bucket.join("dumps/today.bin")).unwrap().len(),
        40 * MIB + 3
    );
    assert_eq!(
        fs::read(bucket.join("dumps/today.bin")).unwrap(),
        fs::read(&src).unwrap()
    );
    // And back under a new name, and into a directory under its own.
    let named = tmp.path().join("restored.bin");
    s3.copy_with(&[os("s3://big/dumps/today.bin"), os(&named)], &profile)
        .assert_code(0);
    assert_contents_equal(&src, &named);
    let into = tmp.path().join("into");
    fs::create_dir(&into).unwrap();
    s3.copy_with(&[os("s3://big/dumps/today.bin"), os(&into)], &profile)
        .assert_code(0);
    assert_contents_equal(&src, &into.join("today.bin"));
    let allocated = fs::metadata(&named).unwrap().blocks() * 512;
    assert!(
        allocated <= 37 * MIB,
        "the 4 MiB of zeros came down as a hole: {allocated} bytes allocated"
    );
    // The default profile's keys are wrong: without AWS_PROFILE the server refuses.
    s3.copy_with(
        &[os("s3://big/dumps/today.bin"), os(tmp.path().join("x"))],
        &[],
    )
    .assert_code(6);
}

#[test]
fn a_file_or_a_directory_inside_an_uploaded_tree_comes_down_alone() {
    let Some(s3) = S3Server::start() else { return };
    s3.bucket("part");
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir_all(src.join("d/e")).unwrap();
    fs::write(src.join("d/f"), b"inside").unwrap();
    s3.copy(&[os(with_slash(&src)), os("s3://part/t/")])
        .assert_code(0);
    // The manifest is at t/, above the key asked for.
    let one = tmp.path().join("one");
    s3.copy(&[os("s3://part/t/d/f"), os(&one)]).assert_code(0);
    assert_eq!(fs::read(&one).unwrap(), b"inside");
    let into = tmp.path().join("into/");
    s3.copy(&[os("s3://part/t/d"), os(&into)]).assert_code(0);
    assert_trees_equal(&src.join("d"), &into.join("d"));
    let out = s3.copy(&[os("s3://part/none/"), os(tmp.path().join("x"))]);
    out.assert_code(3);
    assert!(
        out.stderr.contains("no .haul-manifest"),
        "{}",
        out.describe()
    );
}
