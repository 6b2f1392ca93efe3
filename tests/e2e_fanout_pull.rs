//! Chain fan-out where the sender is a far end, through the real binary and the test sshd:
//! `haul copy host:SRC /local/DST --also host2:DST [--also …]` (the local receiver is the
//! first hop and passes everything on) and `haul copy h1:SRC h2:DST --also h3:DST`; a
//! local first receiver whose file system fills up mid-run (a small tmpfs) is reported
//! while the far replicas complete, for a local source and a far one.
//! No timing is asserted; every wait is bounded against hangs.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::sshd::Sshd;
use support::*;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `haul copy` through `sshd`: `args`, then `--also` for each of `also`.
fn copy_cmd(sshd: &Sshd, args: &[&str], also: &[String]) -> Command {
    let mut cmd = Command::new(haul_bin());
    cmd.args(["copy", "-e", &sshd.rsh(), "--remote-haul", haul_bin()])
        .args(["--json", "-q", "--block-size", BLOCK_SIZE_ARG])
        .args(args);
    for a in also {
        cmd.args(["--also", a]);
    }
    cmd
}

fn far(d: &Path) -> String {
    format!("127.0.0.1:{}/", d.display())
}

fn dirs(parent: &Path, name: &str, n: usize) -> Vec<PathBuf> {
    (1..=n)
        .map(|i| {
            let d = parent.join(format!("{name}{i}"));
            std::fs::create_dir(&d).unwrap();
            d
        })
        .collect()
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
    for d in &ds {
        assert_trees_equal(&src, &d.join("tree"));
        assert_no_part_files(d);
    }
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
