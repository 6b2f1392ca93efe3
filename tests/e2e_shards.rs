//! Shards for a scheduler, end to end with the real binary: `haul plan` splits the hostile
//! tree into 8 shards, each moved by its own `haul copy --shard` (and `send --shard`), the
//! result compared stat for stat with the source; `haul plan --check` confirms the plan
//! arrived and names what is missing when a shard's files are taken away.

mod support;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use support::*;

/// Runs haul with `args` (paths or words).
fn haul(args: &[&dyn AsRef<OsStr>]) -> Outcome {
    let args: Vec<&OsStr> = args.iter().map(|a| a.as_ref()).collect();
    Haul::new().run(&args)
}

/// `haul plan SRCS --shards N --out DIR`, which must succeed.
fn plan(srcs: &[&Path], shards: u32, out: &Path) -> Outcome {
    let mut cmd = Haul::new().command("plan");
    cmd.args(srcs)
        .arg("--shards")
        .arg(shards.to_string())
        .arg("--out")
        .arg(out)
        .arg("--json");
    let o = process::Running::spawn("plan", cmd).wait();
    o.assert_code(0);
    o
}

fn shard_file(dir: &Path, i: u32) -> PathBuf {
    dir.join(format!("shard-{i}"))
}

/// The `f` records of a shard file: their paths inside source 0.
fn listed_files(shard: &Path) -> Vec<Vec<u8>> {
    let text = fs::read(shard).unwrap();
    let mut out = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        if let Some(rest) = line.strip_prefix(b"f ") {
            let path = rest.splitn(3, |&b| b == b' ').nth(2).unwrap();
            out.push(unescape(path));
        }
    }
    out
}

/// The shard format's `\#ooo` escapes, decoded.
fn unescape(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            let v = std::str::from_utf8(&b[i + 2..i + 5]).unwrap();
            out.push(u8::from_str_radix(v, 8).unwrap());
            i += 5;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

#[test]
fn eight_shards_of_the_hostile_tree_arrive_whole_and_check_names_what_is_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "src", &TreeOptions::small());
    let shards = tmp.path().join("shards");
    let dst = tmp.path().join("dst");
    let out = plan(&[&src], 8, &shards);
    let json = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        json.contains("\"shards\":8") && json.contains("peak_rss_bytes"),
        "{json}"
    );
    // A second plan into the same directory would mix two plans' shards.
    let again = Haul::new()
        .command("plan")
        .arg(&src)
        .args(["--shards", "2", "--out"])
        .arg(&shards)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));

    for i in 0..8 {
        haul(&[&"copy", &"--shard", &shard_file(&shards, i), &dst]).assert_code(0);
    }
    assert_trees_equal(&src, &dst.join("src"));
    assert_no_part_files(&dst);
    let check = haul(&[&"plan", &"--check", &shards, &dst]);
    check.assert_code(0);

    // A task retried after success moves nothing.
    let rerun = haul(&[
        &"copy",
        &"--shard",
        &shard_file(&shards, 3),
        &dst,
        &"--json",
    ]);
    rerun.assert_code(0);
    let json = String::from_utf8_lossy(&rerun.stdout).into_owned();
    assert!(json.contains("\"files\":0,"), "{json}");

    // Take shard 5's files away: the check fails and names them.
    let gone = listed_files(&shard_file(&shards, 5));
    assert!(!gone.is_empty());
    for f in &gone {
        fs::remove_file(dst.join("src").join(OsStr::from_bytes(f))).unwrap();
    }
    let check = haul(&[&"plan", &"--check", &shards, &dst]);
    check.assert_code(25);
    assert!(
        check.stderr.contains(&format!("{} entries", gone.len()))
            && check.stderr.contains("shard 5: ")
            && check.stderr.contains("(missing)"),
        "{}",
        check.describe()
    );
    assert_eq!(
        check.stderr.trim().lines().count(),
        1,
        "{}",
        check.describe()
    );

    // Running that shard again completes the tree.
    haul(&[&"copy", &"--shard", &shard_file(&shards, 5), &dst]).assert_code(0);
    assert_trees_equal(&src, &dst.join("src"));
    haul(&[&"plan", &"--check", &shards, &dst]).assert_code(0);
}

#[test]
fn shards_land_as_copy_would_lay_out_several_sources() {
    let tmp = tempfile::tempdir().unwrap();
    let a = build_tree(tmp.path(), "a", &TreeOptions::small());
    let b = tmp.path().join("b");
    fs::create_dir_all(b.join("sub")).unwrap();
    fs::write(b.join("sub/only-in-b"), b"b").unwrap();
    let one = tmp.path().join("one-file");
    fs::write(&one, b"one").unwrap();
    let (a_slash, b_slash) = (with_slash(&a), with_slash(&b));
    let shards = tmp.path().join("shards");
    plan(&[&a_slash, &b_slash, &one], 3, &shards);
    // Run from another directory: the shard holds absolute sources.
    let dst = tmp.path().join("dst");
    for i in 0..3 {
        let mut cmd = Haul::new().command("copy");
        cmd.arg("--shard")
            .arg(shard_file(&shards, i))
            .arg(&dst)
            .current_dir("/");
        process::Running::spawn("copy", cmd).wait().assert_code(0);
    }
    let reference = tmp.path().join("reference");
    Haul::new()
        .copy(&[&a_slash, &b_slash, &one], &reference, &[])
        .assert_code(0);
    assert_trees_equal(&reference, &dst);
    haul(&[&"plan", &"--check", &shards, &dst]).assert_code(0);
}

#[test]
fn send_shard_to_a_receiver() {
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "src", &TreeOptions::small());
    let shards = tmp.path().join("shards");
    plan(&[&src], 2, &shards);
    let dst = tmp.path().join("dst");
    for i in 0..2 {
        let recv = Haul::new().recv(&dst, &[]);
        let ticket = recv.ticket.clone();
        let mut cmd = Haul::new().command("send");
        cmd.arg("--shard")
            .arg(shard_file(&shards, i))
            .arg("--to")
            .arg(&ticket);
        process::Running::spawn("send", cmd).wait().assert_code(0);
        recv.wait().assert_code(0);
    }
    assert_trees_equal(&src, &dst.join("src"));
    haul(&[&"plan", &"--check", &shards, &dst]).assert_code(0);
}

#[test]
fn shards_refuse_delete_and_filters() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), b"x").unwrap();
    let shards = tmp.path().join("shards");
    plan(&[&src], 1, &shards);
    let dst = tmp.path().join("dst");
    let f = shard_file(&shards, 0);
    let o = haul(&[&"copy", &"--shard", &f, &dst, &"--delete"]);
    o.assert_code(2);
    assert!(o.stderr.contains("--delete"), "{}", o.describe());
    haul(&[&"copy", &"--shard", &f, &dst, &"--exclude", &"f"]).assert_code(2);
    // A damaged shard file is refused before anything moves.
    let mut bytes = fs::read(&f).unwrap();
    let n = bytes.len();
    bytes[n - 70] ^= 1;
    fs::write(&f, &bytes).unwrap();
    let o = haul(&[&"copy", &"--shard", &f, &dst]);
    o.assert_code(2);
    assert!(!dst.exists());
}

/// Replaces a shard file's `end` line with the BLAKE3 of what is now above it.
fn reseal(body: &[u8]) -> Vec<u8> {
    let mut out = body.to_vec();
    out.extend_from_slice(format!("end {}\n", blake3::hash(body).to_hex()).as_bytes());
    out
}

#[test]
fn a_shard_whose_header_differs_from_shard_0_is_refused_not_a_panic() {
    // Issue 37 finding 9: shard 1 with an extra `source` line and a record for source 1,
    // its unkeyed checksum recomputed, made `plan --check` index past shard 0's sources
    // (exit 101).
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir_all(&src).unwrap();
    for n in ["a", "b", "c", "d"] {
        fs::write(src.join(n), n).unwrap();
    }
    let shards = tmp.path().join("shards");
    plan(&[&src], 2, &shards);
    let f = shard_file(&shards, 1);
    let text = String::from_utf8(fs::read(&f).unwrap()).unwrap();
    let mut body = String::new();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.pop(); // the `end` line
    for line in lines {
        match line.strip_prefix("entries ") {
            Some(rest) => {
                let (n, bytes) = rest.split_once(' ').unwrap();
                body.push_str("source /elsewhere/\n");
                let n: u64 = n.parse().unwrap();
                body.push_str(&format!("entries {} {bytes}\n", n + 1));
            }
            None => {
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    body.push_str("f 0 1 planted\n");
    fs::write(&f, reseal(body.as_bytes())).unwrap();
    let dst = tmp.path().join("dst");
    Haul::new().copy(&[&src], &dst, &[]).assert_code(0);
    let o = haul(&[&"plan", &"--check", &shards, &dst]);
    o.assert_code(2);
    assert!(
        o.stderr.contains("shard-1") && o.stderr.contains("sources"),
        "{}",
        o.describe()
    );
}
