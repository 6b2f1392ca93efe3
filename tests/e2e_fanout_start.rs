//! Chain fan-out when the first receiver is not there at all, and what the user sees
//! after the sender goes on without its first receiver, through the real binary: a ticket
//! whose receiver has gone (its port closed) is a failed replica from the start and the
//! chain starts at the next (files and streams; with no receiver left the run fails as
//! for one); `copy --also` whose first host cannot be reached over ssh does the same; and
//! after the first receiver is SIGKILLed mid-transfer, `-i` goes on with the lines of the
//! receiver the sender went on with (its deletions at the end, each once); and `--also`
//! on a copy form that does not fan out (a stream from a host or on this host, a local
//! further destination) is refused, naming those that do.
//! No timing is asserted; every wait is bounded against hangs.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use support::*;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A receiver's ticket whose receiver is gone (nobody listens on its port any more).
fn dead_ticket(dir: &Path, args: &[&str]) -> String {
    let r = recv(
        dir,
        &[&["--relay", "--listen", "127.0.0.1:0"][..], args].concat(),
    );
    let ticket = r.ticket.clone();
    r.kill();
    ticket
}

/// The label (first address) of a ticket made on loopback: as `haul` names it.
fn label_of_dead(stderr: &str) -> bool {
    stderr.contains("replica 127.0.0.1:") && stderr.contains("the chain goes on without it")
}

/// `haul send ARGS --to T...`.
fn send_to(args: &[&str], tickets: &[&str]) -> Outcome {
    let mut cmd = Command::new(haul_bin());
    cmd.arg("send").args(args);
    for t in tickets {
        cmd.args(["--to", t]);
    }
    Running::spawn("send", cmd).wait()
}

#[test]
fn an_unreachable_first_receiver_is_reported_and_the_others_complete() {
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "tree", &TreeOptions::small());
    write_random_file(&src.join("big"), 3 * MIB + 7, 31);
    let dsts: Vec<PathBuf> = (1..=3)
        .map(|i| tmp.path().join(format!("dst{i}")))
        .collect();
    let dead = dead_ticket(&dsts[0], &[]);
    let recvs: Vec<Recv> = dsts[1..]
        .iter()
        .map(|d| recv(d, &["--relay", "--listen", "127.0.0.1:0"]))
        .collect();
    let mut tickets = vec![dead.as_str()];
    tickets.extend(recvs.iter().map(|r| r.ticket.as_str()));
    let src_s = src.to_str().unwrap();
    let sent = send_to(
        &[src_s, "--json", "-i", "--block-size", BLOCK_SIZE_ARG],
        &tickets,
    );
    let outs: Vec<Outcome> = recvs.into_iter().map(Recv::wait).collect();
    let all = outs
        .iter()
        .fold(sent.describe(), |a, o| a + "\n" + &o.describe());
    assert_eq!(sent.code(), Some(5), "as for a vanished host: {all}");
    assert!(label_of_dead(&sent.stderr), "{all}");
    assert!(
        sent.stderr.contains("haul: error: replica 127.0.0.1:"),
        "the end names it: {all}"
    );
    let out = text(&sent.stdout);
    let json = &out;
    assert_eq!(json.matches("\"ok\":true").count(), 2, "{json}");
    assert_eq!(json.matches("\"ok\":false").count(), 1, "{json}");
    // The receiver the chain started at sends its -i lines (on stderr with --json).
    assert!(sent.stderr.contains("<f+++++++++ tree/big"), "{all}");
    for o in &outs {
        assert_eq!(o.code(), Some(0), "{all}");
    }
    for d in &dsts[1..] {
        assert_trees_equal(&src, &d.join("tree"));
        assert_no_part_files(d);
    }

    // No receiver reachable: the run fails as for one receiver.
    let dead2 = dead_ticket(&tmp.path().join("gone2"), &[]);
    let sent = send_to(&[src_s], &[&dead, &dead2]);
    assert_eq!(sent.code(), Some(5), "{}", sent.describe());
    assert!(
        sent.stderr.contains("cannot connect"),
        "{}",
        sent.describe()
    );
}

#[test]
fn an_unreachable_first_stream_receiver_is_reported_and_the_others_complete() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src.bin");
    write_random_file(&src, 5 * MIB + 3, 32);
    let want = std::fs::read(&src).unwrap();
    let outs: Vec<PathBuf> = (1..=3)
        .map(|i| tmp.path().join(format!("out{i}")))
        .collect();
    let dead = dead_ticket(&tmp.path().join("unused"), &[]);
    let stream_recv = |out: &Path| {
        let mut cmd = Command::new(haul_bin());
        cmd.args(["recv", "--relay", "-q", "--stream"])
            .arg(out)
            .args(["--listen", "127.0.0.1:0"]);
        let mut proc = Running::spawn("recv", cmd);
        let line = proc.first_line().expect("recv printed no ticket");
        let ticket = String::from_utf8(line).unwrap().trim().to_string();
        Recv { proc, ticket }
    };
    let recvs: Vec<Recv> = outs[1..].iter().map(|o| stream_recv(o)).collect();
    let mut tickets = vec![dead.as_str()];
    tickets.extend(recvs.iter().map(|r| r.ticket.as_str()));
    let from = format!("cat '{}'", src.display());
    let sent = send_to(
        &[
            "--from-command",
            &from,
            "--json",
            "-q",
            "--block-size",
            BLOCK_SIZE_ARG,
        ],
        &tickets,
    );
    let got: Vec<Outcome> = recvs.into_iter().map(Recv::wait).collect();
    let all = got
        .iter()
        .fold(sent.describe(), |a, o| a + "\n" + &o.describe());
    assert_eq!(sent.code(), Some(5), "{all}");
    assert!(label_of_dead(&sent.stderr), "{all}");
    let json = text(&sent.stdout);
    assert_eq!(json.matches("\"ok\":true").count(), 2, "{json}");
    for (o, g) in outs[1..].iter().zip(&got) {
        assert_eq!(g.code(), Some(0), "{all}");
        assert!(std::fs::read(o).unwrap() == want, "{o:?} differs");
    }
}

/// `haul copy` through the test sshd whose first destination is on a host ssh cannot
/// reach (127.0.0.2: nothing listens on the sshd's port there); `from` the source
/// arguments.
fn copy_unreachable_first(sshd: &support::sshd::Sshd, from: &[&str], dsts: &[String]) -> Outcome {
    let mut cmd = Command::new(haul_bin());
    cmd.args(["copy", "-e", &sshd.rsh(), "--remote-haul", haul_bin()])
        .args(["--json", "-q", "--block-size", BLOCK_SIZE_ARG])
        .args(from)
        .arg(&dsts[0]);
    for d in &dsts[1..] {
        cmd.args(["--also", d]);
    }
    Running::spawn("copy", cmd).wait()
}

#[test]
fn copy_also_starts_at_the_next_destination_when_the_first_host_is_unreachable() {
    let test = "copy_also_starts_at_the_next_destination_when_the_first_host_is_unreachable";
    let Some(sshd) = support::sshd::Sshd::start(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "tree", &TreeOptions::small());
    let dirs: Vec<PathBuf> = (1..=3).map(|i| tmp.path().join(format!("d{i}"))).collect();
    for d in &dirs {
        std::fs::create_dir(d).unwrap();
    }
    let mut dsts = vec![format!("127.0.0.2:{}/", dirs[0].display())];
    dsts.extend(
        dirs[1..]
            .iter()
            .map(|d| format!("127.0.0.1:{}/", d.display())),
    );
    let out = copy_unreachable_first(&sshd, &[src.to_str().unwrap()], &dsts);
    let all = format!("{}\n--- sshd log ---\n{}", out.describe(), sshd.log());
    assert_eq!(out.code(), Some(5), "{all}");
    let failed = dsts[0].trim_end_matches('/');
    assert!(
        out.stderr.contains(&format!("replica {failed}")) && out.stderr.contains("ssh failed"),
        "the error names {failed}\n{all}"
    );
    let json = text(&out.stdout);
    assert_eq!(json.matches("\"ok\":true").count(), 2, "{json}");
    assert!(
        json.contains(&format!("{{\"host\":\"{}\"", dsts[0])),
        "{json}"
    );
    for d in &dirs[1..] {
        assert_trees_equal(&src, &d.join("tree"));
        assert_no_part_files(d);
    }
    assert!(!dirs[0].join("tree").exists());

    // A stream the same way.
    let file = tmp.path().join("src.bin");
    write_random_file(&file, 2 * MIB + 1, 33);
    let from = format!("cat '{}'", file.display());
    let mut dsts = vec![format!("127.0.0.2:{}", dirs[0].join("out").display())];
    dsts.extend(
        dirs[1..]
            .iter()
            .map(|d| format!("127.0.0.1:{}", d.join("out").display())),
    );
    let out = copy_unreachable_first(&sshd, &["--from-command", &from], &dsts);
    let all = format!("{}\n--- sshd log ---\n{}", out.describe(), sshd.log());
    assert_eq!(out.code(), Some(5), "{all}");
    assert!(
        out.stderr.contains(&format!("replica {}", dsts[0])),
        "{all}"
    );
    let json = text(&out.stdout);
    assert_eq!(json.matches("\"ok\":true").count(), 2, "{json}");
    let want = std::fs::read(&file).unwrap();
    for d in &dirs[1..] {
        assert!(std::fs::read(d.join("out")).unwrap() == want, "{d:?}");
    }

    // Remote to remote the same way (it failed the whole run): the far sender starts the
    // chain at the next destination, with one further (no chain left after it) or two.
    let from = format!("127.0.0.1:{}", src.display());
    for n in [2, 3] {
        let ds: Vec<PathBuf> = (1..=n)
            .map(|i| tmp.path().join(format!("between{n}-{i}")))
            .collect();
        for d in &ds {
            std::fs::create_dir(d).unwrap();
        }
        let mut dsts = vec![format!("127.0.0.2:{}/", ds[0].display())];
        dsts.extend(
            ds[1..]
                .iter()
                .map(|d| format!("127.0.0.1:{}/", d.display())),
        );
        let out = copy_unreachable_first(&sshd, &[&from], &dsts);
        let all = format!("{}\n--- sshd log ---\n{}", out.describe(), sshd.log());
        assert_eq!(out.code(), Some(5), "{all}");
        assert!(
            out.stderr.contains(&format!("replica {}", dsts[0]))
                && out.stderr.contains("ssh failed"),
            "the error names {}\n{all}",
            dsts[0]
        );
        let json = text(&out.stdout);
        assert_eq!(json.matches("\"ok\":true").count(), n - 1, "{all}");
        assert!(
            json.contains(&format!("{{\"host\":\"{}\",\"ok\":false", dsts[0])),
            "{all}"
        );
        for d in &ds[1..] {
            assert_trees_equal(&src, &d.join("tree"));
            assert_no_part_files(d);
        }
        assert!(!ds[0].join("tree").exists());
    }
}

/// Blocks of the partial files under `dir`: how much data reached that receiver.
fn arrived(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    part_files(dir)
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.blocks() * 512))
        .sum()
}

#[test]
fn itemized_lines_go_on_after_the_first_receiver_dies() {
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "tree", &TreeOptions::small());
    write_random_file(&src.join("big"), 64 * MIB, 34);
    let dsts: Vec<PathBuf> = (1..=3)
        .map(|i| tmp.path().join(format!("dst{i}")))
        .collect();
    // Something to delete on every replica: deletions are listed at the end, by the
    // receiver the sender then talks to.
    for d in &dsts {
        std::fs::create_dir_all(d.join("tree")).unwrap();
        for n in ["extra-a", "extra-b"] {
            std::fs::write(d.join("tree").join(n), b"gone soon").unwrap();
        }
    }
    let recvs: Vec<Recv> = dsts
        .iter()
        .map(|d| recv(d, &["--relay", "--listen", "127.0.0.1:0"]))
        .collect();
    let mut cmd = Command::new(haul_bin());
    cmd.arg("send")
        .arg(&src)
        .args(["-i", "--delete", "--limit", "24M"])
        .args(["--block-size", BLOCK_SIZE_ARG]);
    for r in &recvs {
        cmd.args(["--to", &r.ticket]);
    }
    let sender = Running::spawn("send", cmd);
    let until = Instant::now() + Duration::from_secs(120);
    while arrived(&dsts[0]) < 8 * MIB {
        assert!(Instant::now() < until, "the first receiver never got data");
        assert!(!sender.has_exited(), "the sender ended before the kill");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut recvs: Vec<Option<Recv>> = recvs.into_iter().map(Some).collect();
    let killed = recvs[0].take().unwrap().kill();
    let sent = sender.wait();
    let others: Vec<Outcome> = recvs.into_iter().flatten().map(Recv::wait).collect();
    let all = others.iter().fold(
        format!("{}\n{}", sent.describe(), killed.describe()),
        |a, o| a + "\n" + &o.describe(),
    );
    assert_eq!(sent.code(), Some(5), "{all}");
    for o in &others {
        assert_eq!(o.code(), Some(0), "{all}");
    }
    let out = text(&sent.stdout);
    for n in ["extra-a", "extra-b"] {
        let line = format!("*deleting   tree/{n}");
        assert_eq!(out.matches(&line).count(), 1, "{line} once\n{all}");
    }
    // Listed by the first receiver before it died: each file once.
    assert_eq!(out.matches("<f+++++++++ tree/big").count(), 1, "{all}");
    for d in &dsts[1..] {
        assert_trees_equal(&src, &d.join("tree"));
        assert_no_part_files(d);
    }
}

/// The copy forms `--also` does not extend are refused before anything starts (exit 2),
/// each message naming the forms that fan out.
#[test]
fn also_with_a_form_that_does_not_fan_out_names_the_ones_that_do() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("f");
    std::fs::write(&src, b"x").unwrap();
    let src = src.to_str().unwrap();
    let local = tmp.path().join("dst");
    let local = local.to_str().unwrap();
    let cases: [(&[&str], &str); 3] = [
        (
            &[src, "nowhere.invalid:/d", "--also", local],
            "not on this host",
        ),
        (
            &["nowhere.invalid:/s", "-", "--also", "b.invalid:/d"],
            "a stream from a host",
        ),
        (
            &["-", local, "--also", "b.invalid:/d"],
            "a stream on this host",
        ),
    ];
    for (args, form) in cases {
        let mut cmd = Command::new(haul_bin());
        cmd.arg("copy").args(args);
        let out = Running::spawn("copy", cmd).wait();
        assert_eq!(out.code(), Some(2), "{args:?}\n{}", out.describe());
        let forms = "SRC local or on one host, DST local or host:DST";
        assert!(
            out.stderr.contains(form) && out.stderr.contains(forms),
            "{args:?}\n{}",
            out.describe()
        );
        assert_eq!(
            out.stderr.lines().count(),
            1,
            "one line\n{}",
            out.describe()
        );
    }
    assert!(!Path::new(local).exists(), "nothing was written");
}

/// `haul copy SRC /local/DST --also host2:DST --also host3:DST`: the local destination is
/// the first hop (its receiver passes everything on to the far ones); every replica
/// identical, each named in `--json`; a single file under one new name everywhere.
#[test]
fn copy_to_a_local_destination_also_to_far_ones() {
    let test = "copy_to_a_local_destination_also_to_far_ones";
    let Some(sshd) = support::sshd::Sshd::start(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "tree", &TreeOptions::small());
    write_random_file(&src.join("big"), 5 * MIB + 3, 35);
    let dirs: Vec<PathBuf> = (1..=3).map(|i| tmp.path().join(format!("d{i}"))).collect();
    for d in &dirs {
        std::fs::create_dir(d).unwrap();
    }
    let copy = |args: &[&str], first: &str, also: &[String]| {
        let mut cmd = Command::new(haul_bin());
        cmd.args(["copy", "-e", &sshd.rsh(), "--remote-haul", haul_bin()])
            .args(["--json", "-q", "--block-size", BLOCK_SIZE_ARG])
            .args(args)
            .arg(first);
        for a in also {
            cmd.args(["--also", a]);
        }
        Running::spawn("copy", cmd).wait()
    };
    let far = |d: &Path, name: &str| format!("127.0.0.1:{}", d.join(name).display());
    let first = format!("{}/", dirs[0].display());
    let out = copy(
        &[src.to_str().unwrap()],
        &first,
        &[far(&dirs[1], ""), far(&dirs[2], "")],
    );
    let all = format!("{}\n--- sshd log ---\n{}", out.describe(), sshd.log());
    assert_eq!(out.code(), Some(0), "{all}");
    let json = text(&out.stdout);
    assert_eq!(json.matches("\"ok\":true").count(), 3, "{json}");
    assert!(json.contains(&format!("{{\"host\":\"{first}\"")), "{json}");
    for d in &dirs {
        assert_trees_equal(&src, &d.join("tree"));
        assert_no_part_files(d);
    }

    // One file, a new name everywhere.
    let file = src.join("big");
    let out = copy(
        &[file.to_str().unwrap()],
        dirs[0].join("new.img").to_str().unwrap(),
        &[far(&dirs[1], "new.img"), far(&dirs[2], "new.img")],
    );
    let all = format!("{}\n--- sshd log ---\n{}", out.describe(), sshd.log());
    assert_eq!(out.code(), Some(0), "{all}");
    let want = std::fs::read(&file).unwrap();
    for d in &dirs {
        assert!(std::fs::read(d.join("new.img")).unwrap() == want, "{d:?}");
    }
}
