//! What haul says, through the real binary: a copy on this host counts "1 file" and says
//! nothing of a wire; a stream aimed at a directory is told to name a file; a re-run that
//! continues an earlier one says it resumed (a sender across the network too); a receiver
//! whose sender vanished says that both ends must be run again.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use support::process::PROCESS_TIMEOUT;
use support::*;

#[test]
fn a_copy_on_this_host_says_one_file_and_nothing_of_a_wire() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("f");
    fs::write(&src, vec![7u8; 100_000]).unwrap();
    let out = copy(&[&src], &tmp.path().join("g"), &[]);
    out.assert_code(0);
    // Before: "haul: sent 1 files, 97.66 KiB in 0.0 s (…/s), 97.72 KiB on the wire".
    assert!(
        out.stderr.starts_with("haul: sent 1 file, 97.66 KiB in "),
        "{}",
        out.describe()
    );
    assert!(!out.stderr.contains("wire"), "{}", out.describe());
}

#[test]
fn a_stream_into_a_directory_is_told_to_name_a_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("small");
    fs::create_dir(&dir).unwrap();
    let out = copy(&[Path::new("-")], &with_slash(&dir), &[]);
    out.assert_code(4);
    // Before: "…: is a directory; a stream is written to a file (use haul recv DIR for
    // files)", which a `haul copy` user cannot act on.
    assert!(!out.stderr.contains("haul recv"), "{}", out.describe());
    let named = format!("name it (e.g. {}/stream)", dir.display());
    assert!(out.stderr.contains(&named), "{}", out.describe());
}

fn journals(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().ends_with(".journal"))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits (bounded) until a journal in `dir` records `records` blocks, or `p` exited.
fn wait_for_journal(dir: &Path, records: u64, p: &Running) -> bool {
    let deadline = Instant::now() + PROCESS_TIMEOUT;
    while Instant::now() < deadline {
        let long = |j: &PathBuf| fs::metadata(j).is_ok_and(|m| m.len() >= 48 + 16 * records);
        if journals(dir).iter().any(long) {
            return true;
        }
        if p.has_exited() {
            return false;
        }
        thread::sleep(Duration::from_millis(5));
    }
    panic!("no journal of {records} records in {dir:?} within {PROCESS_TIMEOUT:?}");
}

/// The options of both runs of [`interrupted`].
const ARGS: [&str; 4] = ["--streams", "2", "--block-size", "1M"];

/// `tmp`/src with one file of 32 MiB, and `tmp`/dest where a copy of it was killed once
/// its journal recorded 4 blocks.
fn interrupted(tmp: &Path, seed: u64) -> (PathBuf, PathBuf) {
    let src = tmp.join("src");
    fs::create_dir(&src).unwrap();
    write_random_file(&src.join("big.bin"), 32 * MIB, seed);
    let dest = tmp.join("dest");
    let mut cmd = Haul::new().command("copy");
    cmd.arg(with_slash(&src))
        .arg(&dest)
        .args(ARGS)
        .args(["--limit", "8M"]);
    let copying = Running::spawn("copy", cmd);
    let caught = wait_for_journal(&dest, 4, &copying);
    let killed = copying.kill();
    assert!(caught, "the copy ended early\n{}", killed.describe());
    (src, dest)
}

#[test]
fn a_rerun_that_continues_an_earlier_one_says_it_resumed() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, dest) = interrupted(tmp.path(), 3);
    let out = copy(&[&with_slash(&src)], &dest, &ARGS);
    out.assert_code(0);
    assert_trees_equal(&src, &dest);
    // Before: only "…, 4.00 MiB skipped: already there".
    assert!(
        out.stderr.contains("resumed 1 file of an earlier run ("),
        "{}",
        out.describe()
    );
}

#[test]
fn a_sender_across_the_network_says_it_resumed_as_a_local_copy_does() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, dest) = interrupted(tmp.path(), 4);
    let (sent, received) = transfer(&[&with_slash(&src)], &dest, &ARGS, &[]);
    assert_transfer_ok(&sent, &received);
    assert_trees_equal(&src, &dest);
    // Before: the receiver said "resumed 1 file of an earlier run (…)", the sender only
    // "…, 4.00 MiB skipped: already there": its Summary carried no word of it.
    for (side, out) in [("sender", &sent), ("receiver", &received)] {
        assert!(
            out.stderr.contains("resumed 1 file of an earlier run ("),
            "{side}: {}",
            out.describe()
        );
    }
}

#[test]
fn a_receiver_whose_sender_vanished_says_to_run_both_ends_again() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("big.bin");
    write_random_file(&src, 16 * MIB, 5);
    let dest = tmp.path().join("dest");
    let r = recv(&dest, &["--timeout", "1"]);
    let sender = Haul::new().spawn_send(&[&src], &r.ticket, &["--limit", "2M"]);
    let deadline = Instant::now() + PROCESS_TIMEOUT;
    while part_files(&dest).is_empty() && !sender.has_exited() {
        assert!(Instant::now() < deadline, "no partial file in {dest:?}");
        thread::sleep(Duration::from_millis(5));
    }
    let killed = sender.kill();
    let received = r.wait();
    received.assert_code(5);
    // Before: "…the sender vanished mid-transfer (…) and did not reconnect", no word of
    // what to do.
    assert!(
        received.stderr.contains("re-run both ends"),
        "{}\n{}",
        received.describe(),
        killed.describe()
    );
}
