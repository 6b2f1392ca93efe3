//! End-to-end transfers with the real binary: `send`/`recv` over loopback and local `copy`,
//! under each option that changes the data path, and rsync's path semantics.
//!
//! Every test compares what arrived with its source byte for byte and stat for stat
//! (`support::compare`), and checks that no partial file is left behind. The full tree (5,000
//! small files and a 4 GiB sparse file) is moved by the default `send`/`recv` test and the
//! `copy` test; the option variants use the small tree to keep the suite fast.

mod support;

use std::fs;
use std::path::{Path, PathBuf};

use support::tree::{set_mtime, PLAIN_FILE_REL};
use support::*;

/// `--block-size 1M` plus `extra`.
fn with_block_size<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--block-size", BLOCK_SIZE_ARG];
    args.extend_from_slice(extra);
    args
}

/// Sends a tree built with `opts` as `src` (no trailing slash) to a receiver whose directory
/// does not exist yet, and asserts it arrived whole as `DIR/src`.
fn roundtrip(opts: &TreeOptions, send_args: &[&str], recv_args: &[&str]) -> (Outcome, Outcome) {
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "src", opts);
    let dest = tmp.path().join("dest");
    let (sent, received) = transfer(&[&src], &dest, &with_block_size(send_args), recv_args);
    assert_transfer_ok(&sent, &received);
    assert_eq!(
        dir_names(&dest),
        vec![b"src".to_vec()],
        "DIR holds exactly `src`"
    );
    assert_trees_equal(&src, &dest.join("src"));
    assert_no_part_files(&dest);
    (sent, received)
}

#[test]
fn send_recv_full_tree_with_defaults() {
    let (_, received) = roundtrip(&TreeOptions::full(), &[], &[]);
    assert!(
        !received.stderr.trim().is_empty(),
        "recv without --quiet prints a summary on stderr\n{}",
        received.describe()
    );
}

#[test]
fn send_recv_without_encryption() {
    roundtrip(&TreeOptions::small(), &["--no-encrypt"], &[]);
}

#[test]
fn send_recv_compress_none() {
    roundtrip(&TreeOptions::small(), &["--compress", "none"], &[]);
}

#[test]
fn send_recv_compress_lz4() {
    roundtrip(&TreeOptions::small(), &["--compress", "lz4"], &[]);
}

#[test]
fn send_recv_compress_zstd() {
    roundtrip(&TreeOptions::small(), &["--compress", "zstd"], &[]);
}

#[test]
fn send_recv_compress_zstd_level_3() {
    roundtrip(&TreeOptions::small(), &["--compress", "zstd:3"], &[]);
}

#[test]
fn send_recv_one_stream() {
    roundtrip(&TreeOptions::small(), &["--streams", "1"], &[]);
}

#[test]
fn send_recv_eight_streams() {
    roundtrip(&TreeOptions::small(), &["--streams", "8"], &[]);
}

#[test]
fn recv_accepts_and_ignores_streams() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("payload.bin");
    write_random_file(&src, 2 * MIB + 3, 8);
    let dest = tmp.path().join("dest");
    let (sent, received) = transfer(&[&src], &dest, &["--streams", "2"], &["--streams", "3"]);
    assert_transfer_ok(&sent, &received);
    assert_trees_equal(&src, &dest.join("payload.bin"));
}

#[test]
fn quiet_prints_only_the_ticket() {
    let (sent, received) = roundtrip(&TreeOptions::small(), &["--quiet"], &["--quiet"]);
    assert!(
        sent.stderr.is_empty() && sent.stdout.is_empty(),
        "send --quiet printed something\n{}",
        sent.describe()
    );
    assert!(
        received.stderr.is_empty(),
        "recv --quiet printed something on stderr\n{}",
        received.describe()
    );
}

#[test]
fn recv_writes_the_ticket_file_too() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("one.txt");
    fs::write(&src, b"ticket file test\n").unwrap();
    let dest = tmp.path().join("dest");
    let ticket_file = tmp.path().join("ticket");
    let ticket_arg = ticket_file.to_str().unwrap();
    let recv = recv(&dest, &["--ticket-file", ticket_arg]);
    let sent = send(&[&src], &recv.ticket, &[]);
    let ticket = recv.ticket.clone();
    let received = recv.wait();
    assert_transfer_ok(&sent, &received);
    let written = fs::read_to_string(&ticket_file).expect("ticket file exists");
    assert_eq!(
        written.trim(),
        ticket,
        "ticket file and stdout ticket differ"
    );
    assert_trees_equal(&src, &dest.join("one.txt"));
}

#[test]
fn copy_full_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "src", &TreeOptions::full());
    let dst = tmp.path().join("dst");
    let out = copy(&[&src], &dst, &with_block_size(&[]));
    out.assert_code(0);
    assert_eq!(
        dir_names(&dst),
        vec![b"src".to_vec()],
        "DST holds exactly `src`"
    );
    assert_trees_equal(&src, &dst.join("src"));
    assert_no_part_files(&dst);
}

/// A local copy hands each unit over in memory (a lane), not as frames on a socket: the
/// bytes counted "on the wire" are exactly the bytes written (frames would add headers),
/// even with compression asked for (nothing to save in memory).
#[test]
fn copy_hands_units_over_in_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "src", &TreeOptions::small());
    let dst = tmp.path().join("dst");
    let out = copy(
        &[&src],
        &dst,
        &with_block_size(&["--json", "--compress", "zstd"]),
    );
    out.assert_code(0);
    let json = String::from_utf8(out.stdout.clone()).unwrap();
    let field = |k: &str| -> u64 {
        support::pipe_harness::json_field(&json, k)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {k} in {json}"))
    };
    assert!(field("bytes_written") > 0, "{json}");
    assert_eq!(field("bytes_wire"), field("bytes_written"), "{json}");
    assert_trees_equal(&src, &dst.join("src"));
    assert_no_part_files(&dst);
}

// ---- Path semantics (rsync's) ----

/// A small tree with few small files: the path tests are about where things land.
fn tiny_tree(parent: &Path) -> PathBuf {
    let opts = TreeOptions {
        small_files: 20,
        ..TreeOptions::small()
    };
    build_tree(parent, "src", &opts)
}

#[test]
fn send_with_trailing_slash_sends_the_contents() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tiny_tree(tmp.path());
    let dest = tmp.path().join("dest");
    let (sent, received) = transfer(&[&with_slash(&src)], &dest, &with_block_size(&[]), &[]);
    assert_transfer_ok(&sent, &received);
    assert_eq!(
        dir_names(&dest),
        dir_names(&src),
        "DIR holds src's entries, not `src`"
    );
    assert_contents_equal(&src, &dest);
    assert_no_part_files(&dest);
}

#[test]
fn copy_with_trailing_slash_copies_the_contents() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tiny_tree(tmp.path());
    let dst = tmp.path().join("dst");
    copy(&[&with_slash(&src)], &dst, &with_block_size(&[])).assert_code(0);
    assert_eq!(
        dir_names(&dst),
        dir_names(&src),
        "DST holds src's entries, not `src`"
    );
    assert_contents_equal(&src, &dst);
    assert_no_part_files(&dst);
}

#[test]
fn copy_dir_into_existing_dir_lands_inside() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tiny_tree(tmp.path());
    let dst = tmp.path().join("dst");
    fs::create_dir(&dst).unwrap();
    copy(&[&src], &dst, &[]).assert_code(0);
    assert_eq!(dir_names(&dst), vec![b"src".to_vec()]);
    assert_trees_equal(&src, &dst.join("src"));
}

#[test]
fn send_single_file_lands_by_its_name() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tiny_tree(tmp.path());
    let file = src.join("blocks/block-plus-1.bin");
    let dest = tmp.path().join("dest");
    let (sent, received) = transfer(&[&file], &dest, &with_block_size(&[]), &[]);
    assert_transfer_ok(&sent, &received);
    assert_eq!(dir_names(&dest), vec![b"block-plus-1.bin".to_vec()]);
    assert_trees_equal(&file, &dest.join("block-plus-1.bin"));
}

#[test]
fn copy_single_file_to_a_new_name() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tiny_tree(tmp.path());
    let file = src.join("blocks/three-blocks-plus-7.bin");
    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();
    let renamed = out.join("renamed.bin");
    copy(&[&file], &renamed, &with_block_size(&[])).assert_code(0);
    let meta = fs::symlink_metadata(&renamed).expect("DST exists");
    assert!(
        meta.is_file(),
        "DST is the file's new name, not a directory"
    );
    assert_eq!(dir_names(&out), vec![b"renamed.bin".to_vec()]);
    assert_trees_equal(&file, &renamed);
}

#[test]
fn copy_single_file_into_existing_dir_keeps_its_name() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tiny_tree(tmp.path());
    let file = src.join("modes/exec-0755.sh");
    let dst = tmp.path().join("dst");
    fs::create_dir(&dst).unwrap();
    copy(&[&file], &dst, &[]).assert_code(0);
    assert_eq!(dir_names(&dst), vec![b"exec-0755.sh".to_vec()]);
    assert_trees_equal(&file, &dst.join("exec-0755.sh"));
}

#[test]
fn copy_single_file_to_dst_with_trailing_slash_creates_the_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tiny_tree(tmp.path());
    let file = src.join(PLAIN_FILE_REL);
    let dst = tmp.path().join("newdir");
    copy(&[&file], &with_slash(&dst), &[]).assert_code(0);
    assert!(dst.is_dir(), "DST ending in / is created as a directory");
    assert_eq!(dir_names(&dst), vec![b"deep.txt".to_vec()]);
    assert_trees_equal(&file, &dst.join("deep.txt"));
}

/// The sources of the multiple-source tests: a directory (lands as itself), a directory
/// with a trailing slash (its contents land), and a single file.
fn multi_sources(src: &Path) -> Vec<PathBuf> {
    vec![
        src.join("a"),
        with_slash(&src.join("links")),
        src.join("modes/exec-0755.sh"),
    ]
}

fn assert_multi_sources_arrived(src: &Path, dest: &Path) {
    let mut expected = vec![b"a".to_vec(), b"exec-0755.sh".to_vec()];
    expected.extend(dir_names(&src.join("links")));
    expected.sort();
    assert_eq!(dir_names(dest), expected, "top level of DIR");
    assert_trees_equal(&src.join("a"), &dest.join("a"));
    assert_trees_equal(&src.join("modes/exec-0755.sh"), &dest.join("exec-0755.sh"));
    for entry in fs::read_dir(src.join("links")).unwrap() {
        let name = entry.unwrap().file_name();
        assert_trees_equal(&src.join("links").join(&name), &dest.join(&name));
    }
    assert_no_part_files(dest);
}

#[test]
fn send_multiple_sources() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tiny_tree(tmp.path());
    let sources = multi_sources(&src);
    let paths: Vec<&Path> = sources.iter().map(PathBuf::as_path).collect();
    let dest = tmp.path().join("dest");
    let (sent, received) = transfer(&paths, &dest, &[], &[]);
    assert_transfer_ok(&sent, &received);
    assert_multi_sources_arrived(&src, &dest);
}

#[test]
fn copy_multiple_sources() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tiny_tree(tmp.path());
    let sources = multi_sources(&src);
    let paths: Vec<&Path> = sources.iter().map(PathBuf::as_path).collect();
    let dst = tmp.path().join("dst");
    copy(&paths, &dst, &[]).assert_code(0);
    assert_multi_sources_arrived(&src, &dst);
}

/// Directories whose own modes would stop a non-root receiver from reaching their children
/// (no search bit), in a tree with enough directories that the receiver keeps what it owes
/// them at the end on disk (`store/dirlog`: past 1 MiB of records): every mode and mtime
/// arrives, so each child was set before its parent closed.
#[test]
fn a_non_root_receiver_sets_closed_directories_after_their_children() {
    let Some((recv_as, tmp)) = unprivileged_tempdir("a_non_root_receiver_sets_closed_directories")
    else {
        return;
    };
    use std::os::unix::fs::PermissionsExt;
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    for i in 0..8_000u32 {
        let p = src.join(format!("closed-{i:05}"));
        let c = p.join("child");
        fs::create_dir_all(&c).unwrap();
        if i % 500 == 0 {
            fs::write(c.join("f"), format!("file {i}")).unwrap();
        }
        set_mtime(&c, 1_600_000_000 + i64::from(i), 7);
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        set_mtime(&p, 1_500_000_000 + i64::from(i), 3);
    }
    let dest = tmp.path().join("dest");
    fs::create_dir(&dest).unwrap();
    if is_root() {
        rustix::fs::chown(
            &dest,
            Some(rustix::fs::Uid::from_raw(NOBODY)),
            Some(rustix::fs::Gid::from_raw(NOGROUP)),
        )
        .unwrap();
    }
    let recv = recv_as.recv(&dest, &[]);
    let sent = Haul::new().send(&[&src], &recv.ticket, &[]);
    let received = recv.wait();
    sent.assert_code(0);
    received.assert_code(0);
    Compare::new()
        .with_owners(false)
        .assert(&src, &dest.join("src"));
}
