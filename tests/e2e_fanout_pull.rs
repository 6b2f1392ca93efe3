//! Chain fan-out where the sender is a far end, through the real binary and the test sshd:
//! `haul copy host:SRC /local/DST --also host2:DST [--also …]` (the local receiver is the
//! first hop and passes everything on) and `haul copy h1:SRC h2:DST --also h3:DST`; a
//! local first receiver whose file system fills up mid-run (a small tmpfs) is reported
//! while the far replicas complete, for a local source and a far one.
//! No timing is asserted; every wait is bounded against hangs.

mod support;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use support::fanout_ssh::{copy_cmd, dirs, far};
use support::sshd::Sshd;
use support::*;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn pull_and_remote_to_remote_also_to_further_destinations() {
    let test = "pull_and_remote_to_remote_also_to_further_destinations";
    let Some(sshd) = Sshd::start(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "tree", &TreeOptions::small());
    write_random_file(&src.join("big"), 5 * MIB + 3, 41);
    let from = format!("127.0.0.1:{}", src.display());
    for n in [2, 3] {
        let ds = dirs(tmp.path(), &format!("pull{n}-"), n);
        let first = format!("{}/", ds[0].display());
        let also: Vec<String> = ds[1..].iter().map(|d| far(d)).collect();
        let out = Running::spawn("copy", copy_cmd(&sshd, &[&from, &first], &also)).wait();
        let all = format!("{}\n--- sshd log ---\n{}", out.describe(), sshd.log());
        assert_eq!(out.code(), Some(0), "{all}");
        let json = text(&out.stdout);
        assert_eq!(json.matches("\"ok\":true").count(), n, "{json}");
        assert!(json.contains(&format!("{{\"host\":\"{first}\"")), "{json}");
        for d in &ds {
            assert_trees_equal(&src, &d.join("tree"));
            assert_no_part_files(d);
        }
    }

    // One file, a new name everywhere.
    let ds = dirs(tmp.path(), "one", 3);
    let file = format!("127.0.0.1:{}", src.join("big").display());
    let named = |d: &Path| format!("127.0.0.1:{}", d.join("new.img").display());
    let first = ds[0].join("new.img");
    let also = vec![named(&ds[1]), named(&ds[2])];
    let out = Running::spawn(
        "copy",
        copy_cmd(&sshd, &[&file, first.to_str().unwrap()], &also),
    )
    .wait();
    assert_eq!(out.code(), Some(0), "{}", out.describe());
    let want = std::fs::read(src.join("big")).unwrap();
    for d in &ds {
        assert!(std::fs::read(d.join("new.img")).unwrap() == want, "{d:?}");
    }

    // Remote to remote: the far sender tells the far first receiver the chain.
    let ds = dirs(tmp.path(), "between", 3);
    let also: Vec<String> = ds[1..].iter().map(|d| far(d)).collect();
    let out = Running::spawn("copy", copy_cmd(&sshd, &[&from, &far(&ds[0])], &also)).wait();
    let all = format!("{}\n--- sshd log ---\n{}", out.describe(), sshd.log());
    assert_eq!(out.code(), Some(0), "{all}");
    // The same `--json` report as a push's: the far sender's counts, every replica.
    let json = text(&out.stdout);
    assert_eq!(json.matches("\"ok\":true").count(), 3, "{all}");
    assert!(
        json.starts_with("{\"files\":") && !json.contains("\"files\":0,"),
        "{all}"
    );
    assert!(json.contains("\"bytes_written\":"), "{all}");
    for d in &ds {
        assert_trees_equal(&src, &d.join("tree"));
        assert_no_part_files(d);
    }
}

/// Blocks of the partial files under `dir`: how much data reached that receiver.
fn arrived(dir: &Path) -> u64 {
    part_files(dir)
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.blocks() * 512))
        .sum()
}

/// `from` (a far source) to `first` and the far `also` (64 MiB at 16 MB/s), the far end
/// receiving into `also[kill]` SIGKILLed once 8 MiB reached it: every other replica
/// completes identical, the copy exits 5 naming the killed one, and the same command
/// again completes it by resume.
fn kill_a_further_hop_and_rerun(sshd: &Sshd, src: &Path, from: &str, ds: &[PathBuf], first: &str) {
    let also: Vec<String> = ds[1..].iter().map(|d| far(d)).collect();
    let killed = &ds[1];
    let args = [from, first];
    let mut cmd = copy_cmd(sshd, &args, &also);
    cmd.args(["--limit", "16M"]);
    let copy = Running::spawn("copy", cmd);
    let until = Instant::now() + Duration::from_secs(120);
    while arrived(killed) < 8 * MIB {
        assert!(Instant::now() < until, "{killed:?} never got data");
        assert!(!copy.has_exited(), "the copy ended before the kill");
        std::thread::sleep(Duration::from_millis(20));
    }
    support::sshd::kill_far_end_in(killed);
    let out = copy.wait();
    let all = format!("{}\n--- sshd log ---\n{}", out.describe(), sshd.log());
    assert_eq!(out.code(), Some(5), "a vanished host: {all}");
    let failed = far(killed);
    assert!(
        out.stderr.contains(&format!("replica {failed} failed")),
        "the error names {failed}\n{all}"
    );
    let json = text(&out.stdout);
    assert_eq!(json.matches("\"ok\":false").count(), 1, "{all}");
    for d in ds.iter().filter(|d| *d != killed) {
        assert_trees_equal(src, &d.join("tree"));
        assert_no_part_files(d);
    }

    let out = Running::spawn("copy again", copy_cmd(sshd, &args, &also)).wait();
    let all = format!("{}\n--- sshd log ---\n{}", out.describe(), sshd.log());
    assert_eq!(out.code(), Some(0), "{all}");
    for d in ds {
        assert_trees_equal(src, &d.join("tree"));
        assert_no_part_files(d);
    }
}

/// A pull to three replicas (the local first, two far) and remote to remote to three,
/// the middle one killed mid-run. Regression: the hop after a killed one was sometimes
/// lost too under load (it closed the connection the hop before the killed one dialed
/// it with).
#[test]
fn a_further_hop_killed_mid_run_is_reported_and_the_others_complete() {
    let test = "a_further_hop_killed_mid_run_is_reported_and_the_others_complete";
    let Some(sshd) = Sshd::start(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "tree", &TreeOptions::small());
    write_random_file(&src.join("big"), 64 * MIB, 61);
    let from = format!("127.0.0.1:{}", src.display());
    let ds = dirs(tmp.path(), "pull", 3);
    let first = format!("{}/", ds[0].display());
    kill_a_further_hop_and_rerun(&sshd, &src, &from, &ds, &first);
    let ds = dirs(tmp.path(), "between", 3);
    kill_a_further_hop_and_rerun(&sshd, &src, &from, &ds, &far(&ds[0]));
}

/// A small tmpfs (needs root to mount; SKIPPED otherwise, a failure under CI).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(test: &str, size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            assert!(
                std::env::var_os("CI").is_none(),
                "{test}: cannot mount a tmpfs under CI"
            );
            println!("SKIPPED: {test}: cannot mount a tmpfs here (not root?)");
            return None;
        }
        Some(Tmpfs { dir })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

#[test]
fn a_local_first_receiver_whose_disk_fills_up_is_reported_and_the_chain_goes_on() {
    let test = "a_local_first_receiver_whose_disk_fills_up_is_reported_and_the_chain_goes_on";
    let Some(sshd) = Sshd::start(test) else {
        return;
    };
    let Some(small) = Tmpfs::mount(test, "8m") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    // 24 files of 1 MiB: the first ones fit, the disk fills up in the middle of the run.
    let src = tmp.path().join("tree");
    std::fs::create_dir(&src).unwrap();
    for i in 0..24 {
        write_random_file(&src.join(format!("f{i:02}")), MIB, 50 + i);
    }
    let far_src = format!("127.0.0.1:{}", src.display());
    for (name, from) in [("push", src.to_str().unwrap()), ("pull", &far_src)] {
        let local = small.dir.path().join(name);
        let ds = dirs(tmp.path(), name, 2);
        let also: Vec<String> = ds.iter().map(|d| far(d)).collect();
        let first = format!("{}/", local.display());
        let out = Running::spawn("copy", copy_cmd(&sshd, &[from, &first], &also)).wait();
        let all = format!(
            "{name}: {}\n--- sshd log ---\n{}",
            out.describe(),
            sshd.log()
        );
        assert_eq!(out.code(), Some(4), "disk full: {all}");
        let line = format!("haul: error: replica {first} failed");
        assert!(out.stderr.contains(&line), "{all}");
        assert!(out.stderr.contains("free some space"), "{all}");
        let json = text(&out.stdout);
        assert_eq!(json.matches("\"ok\":true").count(), 2, "{json}");
        assert_eq!(json.matches("\"ok\":false").count(), 1, "{json}");
        for d in &ds {
            assert_trees_equal(&src, &d.join("tree"));
            assert_no_part_files(d);
        }
        let _ = std::fs::remove_dir_all(&local);
    }
}

/// A file even root cannot read, bind-mounted over `at`: a write-only sysfs attribute
/// (opening it for reading fails with EACCES whatever the caller's privileges); unmounted
/// when dropped. None (after SKIPPED) where there is none or mounting fails.
struct Unreadable {
    at: PathBuf,
}

impl Unreadable {
    fn mount(test: &str, at: &Path) -> Option<Unreadable> {
        let candidates = [
            "/sys/bus/pci/rescan",
            "/sys/class/zram-control/hot_remove",
            "/sys/kernel/mm/ksm/run",
        ];
        let write_only = candidates
            .iter()
            .map(Path::new)
            .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.mode() & 0o777 == 0o200));
        std::fs::write(at, b"").unwrap();
        let ok = write_only.is_some_and(|from| {
            Command::new("mount")
                .arg("--bind")
                .arg(from)
                .arg(at)
                .status()
                .is_ok_and(|s| s.success())
        });
        if !ok {
            assert!(
                std::env::var_os("CI").is_none(),
                "{test}: cannot bind-mount a write-only sysfs file under CI"
            );
            println!("SKIPPED: {test}: no write-only sysfs file to mount (not root?)");
            return None;
        }
        Some(Unreadable { at: at.to_owned() })
    }
}

impl Drop for Unreadable {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.at).status();
    }
}

/// A far sender that skipped a file it could not read still reports every replica:
/// in a pull whose local first receiver fills its disk, the far replica is complete
/// (before, the sender's partial error came without replicas and the far one was
/// reported as having said nothing); remote to remote, the run exits 23 and `--json`
/// gives the far sender's counts and both replicas.
#[test]
fn a_far_sender_that_skipped_an_unreadable_file_still_reports_every_replica() {
    let test = "a_far_sender_that_skipped_an_unreadable_file_still_reports_every_replica";
    let Some(sshd) = Sshd::start(test) else {
        return;
    };
    let Some(small) = Tmpfs::mount(test, "8m") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("tree");
    std::fs::create_dir(&src).unwrap();
    for i in 0..24 {
        write_random_file(&src.join(format!("f{i:02}")), MIB, 70 + i);
    }
    let Some(_bad) = Unreadable::mount(test, &src.join("unreadable")) else {
        return;
    };
    let from = format!("127.0.0.1:{}", src.display());
    let same = || Compare::new().expect_missing("unreadable");

    // Pull: the local replica fails (disk full), the far one completes.
    let ds = dirs(tmp.path(), "pull", 1);
    let first = format!("{}/", small.dir.path().join("pull").display());
    let also = vec![far(&ds[0])];
    let out = Running::spawn("copy", copy_cmd(&sshd, &[&from, &first], &also)).wait();
    let all = format!("{}\n--- sshd log ---\n{}", out.describe(), sshd.log());
    assert_eq!(out.code(), Some(4), "disk full: {all}");
    assert!(out.stderr.contains("unreadable"), "{all}");
    let json = text(&out.stdout);
    assert_eq!(json.matches("\"ok\":true").count(), 1, "{all}");
    assert_eq!(json.matches("\"ok\":false").count(), 1, "{all}");
    assert!(
        json.contains(&format!("{{\"host\":\"{first}\",\"ok\":false")),
        "{all}"
    );
    same().assert(&src, &ds[0].join("tree"));

    // Remote to remote to two: both complete but for the unreadable file (exit 23), and
    // `--json` reports the far sender's run.
    let ds = dirs(tmp.path(), "between", 2);
    let out = Running::spawn(
        "copy",
        copy_cmd(&sshd, &[&from, &far(&ds[0])], &[far(&ds[1])]),
    )
    .wait();
    let all = format!("{}\n--- sshd log ---\n{}", out.describe(), sshd.log());
    assert_eq!(out.code(), Some(23), "{all}");
    let json = text(&out.stdout);
    assert_eq!(json.matches("\"ok\":true").count(), 2, "{all}");
    assert!(json.contains("\"files\":24,"), "{all}");
    assert!(json.contains("\"failed_files\":1,"), "{all}");
    for d in &ds {
        same().assert(&src, &d.join("tree"));
    }
}
