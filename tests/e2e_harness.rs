//! Tests of the test support itself, without the haul binary: the tree comparison must accept
//! a faithful copy (made with `cp -a`, the reference copier) and must catch each kind of
//! difference the transfer tests rely on it to catch. Without these, a comparison that
//! silently skipped something would let every transfer test pass.

mod support;

use std::ffi::OsStr;
use std::fs::{self, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{lchown, symlink, FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use support::tree::{set_mtime, FOREIGN_UID, PLAIN_FILE_REL};
use support::*;

/// A small tree and a faithful `cp -a` copy of it, in one temporary directory.
struct Pair {
    _tmp: tempfile::TempDir,
    src: PathBuf,
    dst: PathBuf,
}

fn pair() -> Pair {
    let tmp = tempfile::tempdir().unwrap();
    let opts = TreeOptions {
        small_files: 10,
        ..TreeOptions::small()
    };
    let src = build_tree(tmp.path(), "src", &opts);
    let dst = tmp.path().join("dst");
    let status = Command::new("cp")
        .args(["-a", "--sparse=always"])
        .arg(&src)
        .arg(&dst)
        .status()
        .expect("run cp");
    assert!(status.success(), "cp -a failed");
    Pair {
        _tmp: tmp,
        src,
        dst,
    }
}

/// Asserts that the comparison reports a difference at `rel` (`""` for the root) containing
/// `what`.
fn assert_caught(p: &Pair, rel: &str, what: &str) {
    let diffs = Compare::new().differences(&p.src, &p.dst);
    let name = support::compare::show(rel.as_bytes());
    assert!(
        diffs
            .iter()
            .any(|d| d.starts_with(&name) && d.contains(what)),
        "expected a difference `{what}` at {name}, got {diffs:#?}"
    );
}

/// Restores `path`'s mtime from the same path in the source, so only the intended change
/// remains.
fn keep_mtime(p: &Pair, rel: &str) {
    let meta = fs::symlink_metadata(p.src.join(rel)).unwrap();
    set_mtime(&p.dst.join(rel), meta.mtime(), meta.mtime_nsec());
}

#[test]
fn a_faithful_copy_compares_equal() {
    let p = pair();
    assert_trees_equal(&p.src, &p.dst);
    assert_no_part_files(&p.dst);
}

#[test]
fn the_tree_has_what_the_contract_lists() {
    let p = pair();
    let meta = |rel: &str| fs::symlink_metadata(p.src.join(rel)).unwrap();
    assert_eq!(meta("blocks/block-minus-1.bin").len(), MIB - 1);
    assert_eq!(meta("blocks/block.bin").len(), MIB);
    assert_eq!(meta("blocks/block-plus-1.bin").len(), MIB + 1);
    assert!(meta("a/b/c/d").is_dir());
    assert_eq!(fs::read_dir(p.src.join("empty-dir")).unwrap().count(), 0);
    assert_eq!(meta("empty-file").len(), 0);
    assert_eq!(meta("modes/readonly-0444").mode() & 0o7777, 0o444);
    assert_eq!(meta("modes/private-dir-0700").mode() & 0o7777, 0o700);
    assert_eq!(meta("hardlinks/one.bin").nlink(), 3);
    assert!(meta("links/dangling").file_type().is_symlink());
    assert_eq!(
        fs::read_link(p.src.join("links/odd-target"))
            .unwrap()
            .as_os_str()
            .as_bytes(),
        b"odd \xff\ntarget"
    );
    let long = p.src.join("names").join(OsStr::from_bytes(&[b'L'; 255]));
    assert!(long.is_file());
    assert!(p
        .src
        .join("names")
        .join(OsStr::from_bytes(b"new\nline"))
        .is_file());
    assert_ne!(
        meta("a/b").mtime_nsec(),
        0,
        "directories get nanosecond mtimes"
    );
    assert_eq!(meta("timestamps/before-1970").mtime(), -315_619_200);
    if is_root() {
        assert_eq!(meta("owned/file").uid(), FOREIGN_UID);
        assert_eq!(meta("owned/setuid-4755").mode() & 0o7777, 0o4755);
    }
}

#[test]
fn catches_changed_content_at_the_same_size() {
    let p = pair();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(p.dst.join("blocks/block.bin"))
        .unwrap();
    let old = {
        let mut b = [0u8];
        f.read_exact_at(&mut b, 500_000).unwrap();
        b[0]
    };
    f.write_all_at(&[old ^ 1], 500_000).unwrap();
    keep_mtime(&p, "blocks/block.bin");
    assert_caught(
        &p,
        "blocks/block.bin",
        "content differs (first differing byte at offset 500000)",
    );
}

#[test]
fn catches_data_written_into_a_hole() {
    let p = pair();
    let rel = "sparse/small-sparse.bin";
    let f = OpenOptions::new()
        .write(true)
        .open(p.dst.join(rel))
        .unwrap();
    f.write_all_at(b"x", 30 * MIB).unwrap();
    keep_mtime(&p, rel);
    assert_caught(&p, rel, "content differs");
}

#[test]
fn catches_a_changed_size() {
    let p = pair();
    let f = OpenOptions::new()
        .append(true)
        .open(p.dst.join("empty-file"))
        .unwrap();
    f.write_all_at(b"!", 0).unwrap();
    keep_mtime(&p, "empty-file");
    assert_caught(&p, "empty-file", "size differs");
}

#[test]
fn catches_a_filled_hole_but_not_as_a_content_change() {
    let p = pair();
    let rel = "sparse/small-sparse.bin";
    let status = Command::new("cp")
        .args(["-a", "--sparse=never"])
        .arg(p.src.join(rel))
        .arg(p.dst.join(rel))
        .status()
        .unwrap();
    assert!(status.success());
    assert_caught(&p, rel, "holes not kept");
    let diffs = Compare::new().differences(&p.src, &p.dst);
    assert!(
        !diffs.iter().any(|d| d.contains("content differs")),
        "zeros stored differently are still equal content: {diffs:#?}"
    );
}

#[test]
fn catches_mode_and_mtimes_of_files_dirs_and_symlinks() {
    let p = pair();
    fs::set_permissions(
        p.dst.join("modes/exec-0755.sh"),
        fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    keep_mtime(&p, "modes/exec-0755.sh");
    let m = fs::symlink_metadata(p.dst.join(PLAIN_FILE_REL)).unwrap();
    set_mtime(
        &p.dst.join(PLAIN_FILE_REL),
        m.mtime(),
        (m.mtime_nsec() + 1) % 1_000_000_000,
    );
    set_mtime(&p.dst.join("a/b"), 1_000_000_000, 0);
    set_mtime(&p.dst.join("links/dangling"), 1_000_000_000, 0);
    assert_caught(
        &p,
        "modes/exec-0755.sh",
        "mode differs: source 0755, destination 0700",
    );
    assert_caught(&p, PLAIN_FILE_REL, "mtime differs");
    assert_caught(&p, "a/b", "mtime differs");
    assert_caught(&p, "links/dangling", "mtime differs");
}

#[test]
fn catches_a_changed_symlink_target() {
    let p = pair();
    let link = p.dst.join("links/relative");
    fs::remove_file(&link).unwrap();
    symlink("../a/b/c/other.txt", &link).unwrap();
    keep_mtime(&p, "links/relative");
    keep_mtime(&p, "links");
    assert_caught(&p, "links/relative", "symlink target differs");
}

#[test]
fn catches_missing_extra_and_retyped_entries() {
    let p = pair();
    let odd = Path::new("names").join(OsStr::from_bytes(b"new\nline"));
    fs::remove_file(p.dst.join(&odd)).unwrap();
    fs::write(p.dst.join("a/.haul-00ff.part"), b"partial").unwrap();
    fs::remove_dir(p.dst.join("empty-dir")).unwrap();
    fs::write(p.dst.join("empty-dir"), b"").unwrap();
    let diffs = Compare::new().differences(&p.src, &p.dst);
    let has = |s: &str| diffs.iter().any(|d| d.contains(s));
    assert!(
        has(r#""names/new\nline": missing at destination"#),
        "{diffs:#?}"
    );
    assert!(
        has(r#""a/.haul-00ff.part": extra at destination"#),
        "{diffs:#?}"
    );
    assert!(has(r#""empty-dir": type differs"#), "{diffs:#?}");
    assert_eq!(part_files(&p.dst), vec![p.dst.join("a/.haul-00ff.part")]);
    let leftover = std::panic::catch_unwind(|| assert_no_part_files(&p.dst));
    assert!(
        leftover.is_err(),
        "assert_no_part_files missed a .part file"
    );
}

#[test]
fn catches_a_broken_hardlink() {
    let p = pair();
    let two = p.dst.join("hardlinks/two.bin");
    let tmp = p.dst.join("hardlinks/tmp");
    let status = Command::new("cp")
        .arg("-a")
        .arg(&two)
        .arg(&tmp)
        .status()
        .unwrap();
    assert!(status.success());
    fs::rename(&tmp, &two).unwrap();
    keep_mtime(&p, "hardlinks");
    assert_caught(&p, "hardlinks/two.bin", "hardlink structure differs");
}

#[test]
fn catches_a_changed_owner_when_root() {
    if !is_root() {
        eprintln!("SKIPPED catches_a_changed_owner_when_root: not root");
        return;
    }
    let p = pair();
    lchown(p.dst.join("owned/link"), Some(0), Some(0)).unwrap();
    assert_caught(&p, "owned/link", "owner differs");
}

#[test]
fn root_metadata_is_compared_unless_skipped_and_missing_can_be_expected() {
    let p = pair();
    set_mtime(&p.dst, 1_000_000_000, 5);
    assert_caught(&p, "", "mtime differs");
    assert_contents_equal(&p.src, &p.dst);

    fs::remove_file(p.dst.join(PLAIN_FILE_REL)).unwrap();
    keep_mtime(&p, "a/b/c");
    let expecting = Compare::new()
        .skip_root_metadata()
        .expect_missing(PLAIN_FILE_REL);
    expecting.assert(&p.src, &p.dst);
    let wrongly_present = Compare::new()
        .skip_root_metadata()
        .expect_missing("blocks/block.bin")
        .differences(&p.src, &p.dst);
    assert!(
        wrongly_present
            .iter()
            .any(|d| d.contains("should not have arrived")),
        "{wrongly_present:#?}"
    );
}

#[test]
fn part_names_are_recognised() {
    assert!(is_part_name(b".haul-0123abcdef.part"));
    assert!(!is_part_name(b".haul-.part"));
    assert!(!is_part_name(b"haul-00.part"));
    assert!(!is_part_name(b".haul-xyz.part"));
    assert!(!is_part_name(b".haul-00.partial"));
}
