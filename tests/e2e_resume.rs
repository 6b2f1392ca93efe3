//! Resume, skip and delta, end to end with the real binary: a transfer killed half-way
//! continues where it stopped; an unchanged tree sends nothing; a file with a few
//! rewritten pages sends only those; a torn journal is recovered from; files that keep
//! changing are reported with exit 24; --delete mirrors. A local copy killed half-way
//! resumes too.

mod support;

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use support::{
    assert_no_part_files, assert_trees_equal, copy, recv, write_random_file, Haul, Outcome, Rng,
    Running,
};

const MIB: u64 = 1 << 20;
/// The resume tests move this much (the issue asks for 2 GB).
const RESUME_LEN: u64 = 2048 * MIB;

/// A number field of the `--json` summary on stdout.
fn json_field(out: &Outcome, field: &str) -> u64 {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON summary in stdout\n{}", out.describe()));
    let key = format!("\"{field}\":");
    let at = line
        .find(&key)
        .unwrap_or_else(|| panic!("no {field} in {line}"))
        + key.len();
    line[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("{field} is not a number in {line}"))
}

fn journal_files(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().ends_with(".journal"))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until the journal in `dir` records at least `bytes` (16-byte records of one
/// block each), or a process exits first (false).
fn wait_for_journal(dir: &Path, bytes: u64, block: u64, procs: &[&Running]) -> bool {
    let want = 48 + 16 * bytes.div_ceil(block);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if journal_files(dir)
            .iter()
            .any(|j| fs::metadata(j).map(|m| m.len() >= want).unwrap_or(false))
        {
            return true;
        }
        if procs.iter().any(|p| p.has_exited()) {
            return false;
        }
        assert!(
            Instant::now() < deadline,
            "journal never reached {bytes} bytes"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

struct Big {
    _tmp: tempfile::TempDir,
    src: PathBuf,
    dest: PathBuf,
}

fn big_source() -> Big {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    write_random_file(&src.join("big.bin"), RESUME_LEN, 7);
    let dest = tmp.path().join("dest");
    Big {
        _tmp: tmp,
        src,
        dest,
    }
}

/// Kills one side at about half of a 2 GB transfer, re-runs, and checks the result is
/// identical and the second run put at most 55% of the data on the wire.
fn kill_half_way_then_resume(kill_sender: bool) {
    let b = big_source();
    let args = ["--streams", "2", "--block-size", "4M"];
    let r = recv(&b.dest, &[]);
    let sender = Haul::new().spawn_send(&[&support::with_slash(&b.src)], &r.ticket, &args);
    let half = wait_for_journal(&b.dest, RESUME_LEN / 2, 4 * MIB, &[&sender, &r.proc]);
    let (killed, other) = if kill_sender {
        (sender.kill(), r.wait())
    } else {
        (r.kill(), sender.wait())
    };
    assert!(
        half,
        "the transfer ended before half-way\n{}\n{}",
        killed.describe(),
        other.describe()
    );
    other.assert_code(5);
    assert!(
        !b.dest.join("big.bin").exists(),
        "partial data under the final name"
    );

    let r = recv(&b.dest, &["--json"]);
    let sent = Haul::new().send(
        &[&support::with_slash(&b.src)],
        &r.ticket,
        &[&args[..], &["--json"]].concat(),
    );
    let received = r.wait();
    sent.assert_code(0);
    received.assert_code(0);
    assert_trees_equal(&b.src, &b.dest);
    assert_no_part_files(&b.dest);
    assert!(journal_files(&b.dest).is_empty(), "journal left behind");
    let wire = json_field(&sent, "bytes_wire");
    assert!(
        wire <= RESUME_LEN * 55 / 100,
        "second run sent {wire} bytes of {RESUME_LEN}\n{}",
        sent.describe()
    );
    assert!(json_field(&sent, "bytes_skipped") >= RESUME_LEN * 45 / 100);
}

#[test]
fn sender_killed_half_way_resumes() {
    kill_half_way_then_resume(true);
}

#[test]
fn receiver_killed_half_way_resumes() {
    kill_half_way_then_resume(false);
}

/// A local copy (its data handed over in memory) killed at about half-way resumes like a
/// transfer: nothing under the final name, and the second run reads at most 55% again.
/// `--limit` only keeps the copy slow enough to be caught half-way.
#[test]
fn copy_killed_half_way_resumes() {
    let b = big_source();
    let args = ["--streams", "2", "--block-size", "4M"];
    let mut cmd = Haul::new().command("copy");
    cmd.arg(support::with_slash(&b.src))
        .arg(&b.dest)
        .args(args)
        .args(["--limit", "256M"]);
    let copying = Running::spawn("copy", cmd);
    let half = wait_for_journal(&b.dest, RESUME_LEN / 2, 4 * MIB, &[&copying]);
    let killed = copying.kill();
    assert!(
        half,
        "the copy ended before half-way\n{}",
        killed.describe()
    );
    assert!(
        !b.dest.join("big.bin").exists(),
        "partial data under the final name"
    );
    let out = copy(
        &[&support::with_slash(&b.src)],
        &b.dest,
        &[&args[..], &["--json"]].concat(),
    );
    out.assert_code(0);
    assert_trees_equal(&b.src, &b.dest);
    assert_no_part_files(&b.dest);
    assert!(journal_files(&b.dest).is_empty(), "journal left behind");
    let read = json_field(&out, "bytes_read");
    assert!(
        read <= RESUME_LEN * 55 / 100,
        "second run read {read} bytes of {RESUME_LEN}\n{}",
        out.describe()
    );
}

#[test]
fn torn_journal_is_recovered_from() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    let len = 256 * MIB;
    write_random_file(&src.join("f"), len, 11);
    let dest = tmp.path().join("dest");
    let r = recv(&dest, &[]);
    let sender = Haul::new().spawn_send(
        &[&support::with_slash(&src)],
        &r.ticket,
        &["--streams", "1", "--block-size", "1M"],
    );
    let got = wait_for_journal(&dest, len / 3, MIB, &[&sender, &r.proc]);
    let _ = sender.kill();
    let _ = r.wait();
    assert!(got, "transfer ended before a third");
    // Tear the journal mid-record, and scribble over one earlier record.
    let j = journal_files(&dest).pop().expect("a journal");
    let jlen = fs::metadata(&j).unwrap().len();
    let f = OpenOptions::new().write(true).open(&j).unwrap();
    f.set_len(jlen - 7).unwrap();
    f.write_all_at(&[0xff; 5], 48 + 16 * 3 + 2).unwrap();
    drop(f);
    let r = recv(&dest, &["--json"]);
    let sent = Haul::new().send(
        &[&support::with_slash(&src)],
        &r.ticket,
        &["--block-size", "1M", "--json"],
    );
    r.wait().assert_code(0);
    sent.assert_code(0);
    assert_trees_equal(&src, &dest);
}

/// Rewrites 1% of the 8 KiB pages of `path`, chosen at random.
fn rewrite_pages(path: &Path, seed: u64) -> u64 {
    let f = OpenOptions::new().write(true).open(path).unwrap();
    let pages = f.metadata().unwrap().len() / 8192;
    let mut rng = Rng::new(seed);
    let mut page = vec![0u8; 8192];
    for _ in 0..pages / 100 {
        let p = rng.next_u64() % pages;
        rng.fill(&mut page);
        f.write_all_at(&page, p * 8192).unwrap();
    }
    pages / 100
}

#[test]
fn delta_sends_only_changed_pages() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    let len = 1024 * MIB;
    let file = src.join("db.img");
    write_random_file(&file, len, 21);
    let dest = tmp.path().join("dest");
    copy(&[&support::with_slash(&src)], &dest, &[]).assert_code(0);

    rewrite_pages(&file, 5);
    let r = recv(&dest, &["--json"]);
    let sent = Haul::new().send(&[&support::with_slash(&src)], &r.ticket, &["--json"]);
    r.wait().assert_code(0);
    sent.assert_code(0);
    assert_trees_equal(&src, &dest);
    let wire = json_field(&sent, "bytes_wire");
    assert!(
        wire <= len * 3 / 100,
        "delta sent {wire} of {len}\n{}",
        sent.describe()
    );
    assert_eq!(
        json_field(&sent, "bytes_read"),
        len,
        "the sender reads the whole file"
    );

    // Truncated, then extended: both come out identical.
    File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(len / 2 + 12345)
        .unwrap();
    copy(&[&support::with_slash(&src)], &dest, &[]).assert_code(0);
    assert_trees_equal(&src, &dest);
    let f = OpenOptions::new().append(true).open(&file).unwrap();
    let mut tail = vec![0u8; 3 * MIB as usize + 17];
    Rng::new(3).fill(&mut tail);
    f.write_all_at(&tail, len / 2 + 12345).unwrap();
    drop(f);
    let out = copy(
        &[&support::with_slash(&src)],
        &dest,
        &["--json", "--inplace"],
    );
    out.assert_code(0);
    assert_trees_equal(&src, &dest);
    assert!(
        json_field(&out, "bytes_wire") < 5 * MIB,
        "{}",
        out.describe()
    );
}

#[test]
fn unchanged_tree_sends_no_file_data() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    for d in 0..10 {
        let dir = src.join(format!("d{d}"));
        fs::create_dir_all(&dir).unwrap();
        for i in 0..1000 {
            fs::write(
                dir.join(format!("f{i}")),
                format!("{d}/{i}").repeat(i % 7 + 1),
            )
            .unwrap();
        }
    }
    let dest = tmp.path().join("dest");
    copy(&[&support::with_slash(&src)], &dest, &[]).assert_code(0);
    let r = recv(&dest, &["--json"]);
    let sent = Haul::new().send(&[&support::with_slash(&src)], &r.ticket, &["--json"]);
    let received = r.wait();
    sent.assert_code(0);
    received.assert_code(0);
    assert_eq!(json_field(&sent, "bytes_wire"), 0, "{}", sent.describe());
    assert_eq!(json_field(&sent, "bytes_read"), 0);
    assert_eq!(json_field(&sent, "files_unchanged"), 10_000);
    assert_eq!(json_field(&received, "files"), 0);
    assert_trees_equal(&src, &dest);

    // --checksum compares every file's content hash: none differs, so none is sent.
    let out = copy(
        &[&support::with_slash(&src)],
        &dest,
        &["--json", "--checksum"],
    );
    out.assert_code(0);
    assert_eq!(json_field(&out, "files"), 0, "{}", out.describe());
    assert_eq!(json_field(&out, "files_unchanged"), 10_000);
    assert_trees_equal(&src, &dest);
}

#[test]
fn checksum_finds_a_change_that_kept_size_and_mtime() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    let file = src.join("f");
    write_random_file(&file, 20 * MIB, 1);
    let dest = tmp.path().join("dest");
    copy(&[&support::with_slash(&src)], &dest, &[]).assert_code(0);
    // Same size and mtime, different bytes: the quick check cannot see it.
    let mtime = fs::metadata(dest.join("f")).unwrap().modified().unwrap();
    let f = OpenOptions::new().write(true).open(dest.join("f")).unwrap();
    f.write_all_at(b"tampered", 5 * MIB).unwrap();
    f.set_modified(mtime).unwrap();
    drop(f);
    let quick = copy(&[&support::with_slash(&src)], &dest, &["--json"]);
    quick.assert_code(0);
    assert_eq!(json_field(&quick, "files_unchanged"), 1);
    let out = copy(
        &[&support::with_slash(&src)],
        &dest,
        &["--json", "--checksum"],
    );
    out.assert_code(0);
    assert_trees_equal(&src, &dest);
    let wire = json_field(&out, "bytes_wire");
    assert!(wire > 0 && wire < MIB, "{}", out.describe());
}

#[test]
fn file_that_keeps_changing_is_reported_with_exit_24() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    write_random_file(&src.join("steady"), 3 * MIB, 2);
    let hot = src.join("hot");
    write_random_file(&hot, 64 * MIB, 3);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (hot, stop) = (hot.clone(), stop.clone());
        thread::spawn(move || {
            let f = OpenOptions::new().write(true).open(&hot).unwrap();
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                f.write_all_at(&n.to_le_bytes(), (n * 4096) % (64 * MIB))
                    .unwrap();
                n += 1;
                thread::sleep(Duration::from_micros(200));
            }
        })
    };
    let dest = tmp.path().join("dest");
    let out = copy(&[&support::with_slash(&src)], &dest, &[]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    out.assert_code(24);
    assert!(out.stderr.contains("kept changing"), "{}", out.describe());
    assert!(
        !dest.join("hot").exists(),
        "an inconsistent copy was published"
    );
    assert_eq!(
        fs::read(dest.join("steady")).unwrap(),
        fs::read(src.join("steady")).unwrap()
    );
    assert_no_part_files(&dest);
}

#[test]
fn delete_removes_extraneous_entries_inside_the_sent_tree_only() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("tree");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("keep"), b"k").unwrap();
    fs::write(src.join("sub/keep"), b"k").unwrap();
    let dest = tmp.path().join("dest");
    copy(&[&src], &dest, &[]).assert_code(0);
    // Extraneous entries inside the sent tree, and one beside it.
    fs::write(dest.join("tree/gone"), b"x").unwrap();
    fs::create_dir_all(dest.join("tree/sub/olddir/deeper")).unwrap();
    fs::write(dest.join("tree/sub/olddir/deeper/f"), b"x").unwrap();
    std::os::unix::fs::symlink(tmp.path(), dest.join("tree/sub/link-out")).unwrap();
    fs::write(dest.join("beside"), b"not part of the transfer").unwrap();
    let out = copy(&[&src], &dest, &["--delete", "--json"]);
    out.assert_code(0);
    assert_eq!(json_field(&out, "deleted"), 5, "{}", out.describe());
    assert_trees_equal(&src, &dest.join("tree"));
    assert!(
        dest.join("beside").exists(),
        "--delete went outside the sent tree"
    );
    assert!(
        tmp.path().join("tree/keep").exists(),
        "a symlink was followed"
    );
}
