//! A fan-out destination after the first that cannot be started (a directory the far
//! user may not write, a host ssh cannot reach) is a failed replica from the start, as
//! one dropped mid-run is: it is reported (`replica HOST:DST failed (…); the chain goes
//! on without it`), `--json` lists it failed with its code, the copy exits with that code
//! and every other destination completes, in every form that fans out: a push, a local
//! first destination, a pull, remote to remote and a stream. Through the real binary and
//! the test sshd (the far user is root: the directory it may not write is immutable,
//! `chattr +i`). And the same for `haul send --to T1 --to T2 --to T3`, files and
//! streams, whose first, middle or last receiver is gone, refuses to relay or may not
//! write its destination. No timing is asserted; every wait is bounded against hangs.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::fanout_ssh::{copy_cmd, dirs, far};
use support::sshd::Sshd;
use support::*;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A directory that not even root may write in (immutable); made writable again when
/// dropped, so that the temporary directory can be removed.
struct Locked(PathBuf);

impl Locked {
    /// `None` (after saying so) when this file system has no immutable flag.
    fn new(test: &str, path: PathBuf) -> Option<Locked> {
        std::fs::create_dir(&path).unwrap();
        let ok = Command::new("chattr")
            .arg("+i")
            .arg(&path)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            assert!(
                std::env::var_os("CI").is_none(),
                "{test}: chattr +i failed under CI"
            );
            println!("SKIPPED: {test}: chattr +i does not work here");
            return None;
        }
        Some(Locked(path))
    }

    /// A destination under it, which the far end cannot make.
    fn dest(&self) -> String {
        format!("127.0.0.1:{}/", self.0.join("dir").display())
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

/// `haul copy` through `sshd`: `args`, then `--also` for each of `also`.
fn copy(sshd: &Sshd, args: &[&str], also: &[String]) -> Outcome {
    Running::spawn("copy", copy_cmd(sshd, args, also)).wait()
}

/// A destination on a host ssh cannot reach (nothing listens on the sshd's port there).
fn unreachable(d: &Path) -> String {
    format!("127.0.0.2:{}/", d.display())
}

/// What `--json` says of the replica `host` (`"ok":true`, or `"ok":false,…exit_code`).
fn replica<'a>(json: &'a str, host: &str) -> &'a str {
    let key = format!("{{\"host\":\"{}\",", host.trim_end_matches('/'));
    let key_slash = format!("{{\"host\":\"{host}\",");
    let at = json
        .find(&key)
        .or_else(|| json.find(&key_slash))
        .unwrap_or_else(|| panic!("--json does not list {host}: {json}"));
    let rest = &json[at..];
    &rest[..rest.find('}').unwrap_or(rest.len())]
}

/// The copy exited `code`, named `failed` in its error and its `--json`, and listed
/// every one of `ok` complete.
fn assert_dropped(out: &Outcome, sshd: &Sshd, failed: &str, code: i32, ok: &[&str]) {
    let all = format!("{}\n--- sshd log ---\n{}", out.describe(), sshd.log());
    assert_eq!(out.code(), Some(code), "{all}");
    let name = failed.trim_end_matches('/');
    assert!(
        out.stderr.contains(&format!("replica {name}")) && out.stderr.contains("failed"),
        "the error names {name}\n{all}"
    );
    let json = text(&out.stdout);
    let said = replica(&json, failed);
    assert!(
        said.contains("\"ok\":false") && said.contains(&format!("\"exit_code\":{code}")),
        "{said}\n{all}"
    );
    for h in ok {
        assert!(replica(&json, h).contains("\"ok\":true"), "{h}\n{all}");
    }
    assert_eq!(
        json.matches("\"ok\":").count(),
        ok.len() + 1,
        "every replica once\n{all}"
    );
}

fn assert_complete(src: &Path, ds: &[&PathBuf]) {
    for d in ds {
        assert_trees_equal(src, &d.join("tree"));
        assert_no_part_files(d);
    }
}

#[test]
fn a_further_destination_that_cannot_start_is_dropped_in_a_push() {
    let test = "a_further_destination_that_cannot_start_is_dropped_in_a_push";
    let Some(sshd) = Sshd::start(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "tree", &TreeOptions::small());
    let src_s = src.to_str().unwrap();
    let Some(locked) = Locked::new(test, tmp.path().join("locked")) else {
        return;
    };

    // The first case: the second destination may not be written (exit 4).
    let d = dirs(tmp.path(), "a", 1);
    let out = copy(&sshd, &[src_s, &far(&d[0])], &[locked.dest()]);
    assert_dropped(&out, &sshd, &locked.dest(), 4, &[&far(&d[0])]);
    assert_complete(&src, &[&d[0]]);

    // An unreachable third host (exit 5), and an unreachable middle one.
    let d = dirs(tmp.path(), "b", 3);
    let gone = unreachable(&d[2]);
    let out = copy(&sshd, &[src_s, &far(&d[0])], &[far(&d[1]), gone.clone()]);
    assert_dropped(&out, &sshd, &gone, 5, &[&far(&d[0]), &far(&d[1])]);
    assert_complete(&src, &[&d[0], &d[1]]);
    let d = dirs(tmp.path(), "c", 3);
    let gone = unreachable(&d[1]);
    let out = copy(&sshd, &[src_s, &far(&d[0])], &[gone.clone(), far(&d[2])]);
    assert_dropped(&out, &sshd, &gone, 5, &[&far(&d[0]), &far(&d[2])]);
    assert_complete(&src, &[&d[0], &d[2]]);

    // A first destination that may not be written, the next one takes over.
    let d = dirs(tmp.path(), "d", 1);
    let locked_first = locked.dest();
    let out = copy(&sshd, &[src_s, &locked_first], &[far(&d[0])]);
    assert_dropped(&out, &sshd, &locked_first, 4, &[&far(&d[0])]);
    assert_complete(&src, &[&d[0]]);

    // A local first destination, a far one that may not be written.
    let d = dirs(tmp.path(), "e", 2);
    let first = format!("{}/", d[0].display());
    let out = copy(&sshd, &[src_s, &first], &[locked.dest(), far(&d[1])]);
    assert_dropped(&out, &sshd, &locked.dest(), 4, &[&first, &far(&d[1])]);
    assert_complete(&src, &[&d[0], &d[1]]);
}

#[test]
fn a_further_destination_that_cannot_start_is_dropped_in_a_pull_and_remote_to_remote() {
    let test = "a_further_destination_that_cannot_start_is_dropped_in_a_pull_and_remote_to_remote";
    let Some(sshd) = Sshd::start(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "tree", &TreeOptions::small());
    let from = format!("127.0.0.1:{}", src.display());
    let Some(locked) = Locked::new(test, tmp.path().join("locked")) else {
        return;
    };

    // A pull: the local first receiver, then one that may not be written, then another.
    let d = dirs(tmp.path(), "pull", 2);
    let first = format!("{}/", d[0].display());
    let out = copy(&sshd, &[&from, &first], &[locked.dest(), far(&d[1])]);
    assert_dropped(&out, &sshd, &locked.dest(), 4, &[&first, &far(&d[1])]);
    assert_complete(&src, &[&d[0], &d[1]]);
    // Its only further destination unreachable: the local one completes.
    let d = dirs(tmp.path(), "pull-only", 2);
    let first = format!("{}/", d[0].display());
    let gone = unreachable(&d[1]);
    let out = copy(&sshd, &[&from, &first], std::slice::from_ref(&gone));
    assert_dropped(&out, &sshd, &gone, 5, &[&first]);
    assert_complete(&src, &[&d[0]]);

    // Remote to remote: an unreachable middle host, and a last that may not be written.
    let d = dirs(tmp.path(), "between", 3);
    let gone = unreachable(&d[1]);
    let out = copy(&sshd, &[&from, &far(&d[0])], &[gone.clone(), far(&d[2])]);
    assert_dropped(&out, &sshd, &gone, 5, &[&far(&d[0]), &far(&d[2])]);
    assert_complete(&src, &[&d[0], &d[2]]);
    let d = dirs(tmp.path(), "between-last", 1);
    let out = copy(&sshd, &[&from, &far(&d[0])], &[locked.dest()]);
    assert_dropped(&out, &sshd, &locked.dest(), 4, &[&far(&d[0])]);
    assert_complete(&src, &[&d[0]]);

    // No destination can be started: the run fails as for one, with the first's error.
    let d = dirs(tmp.path(), "none", 1);
    let out = copy(&sshd, &[&from, &unreachable(&d[0])], &[locked.dest()]);
    assert_eq!(out.code(), Some(5), "{}", out.describe());
    assert!(out.stderr.contains("ssh failed"), "{}", out.describe());
}

#[test]
fn a_further_stream_destination_that_cannot_start_is_dropped() {
    let test = "a_further_stream_destination_that_cannot_start_is_dropped";
    let Some(sshd) = Sshd::start(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("src.bin");
    write_random_file(&file, 2 * MIB + 1, 71);
    let want = std::fs::read(&file).unwrap();
    let from = format!("cat '{}'", file.display());
    let Some(locked) = Locked::new(test, tmp.path().join("locked")) else {
        return;
    };
    let d = dirs(tmp.path(), "s", 3);
    let out_at = |d: &Path| format!("127.0.0.1:{}", d.join("out").display());
    // The middle one may not be written.
    let locked_out = format!("127.0.0.1:{}", locked.0.join("out").display());
    let out = copy(
        &sshd,
        &["--from-command", &from, &out_at(&d[0])],
        &[locked_out.clone(), out_at(&d[1])],
    );
    assert_dropped(
        &out,
        &sshd,
        &locked_out,
        4,
        &[&out_at(&d[0]), &out_at(&d[1])],
    );
    for d in &d[..2] {
        assert!(std::fs::read(d.join("out")).unwrap() == want, "{d:?}");
    }
    // The last one is on a host ssh cannot reach.
    let gone = format!("127.0.0.2:{}", d[2].join("out").display());
    let out = copy(
        &sshd,
        &["--from-command", &from, &out_at(&d[2])],
        &[out_at(&d[1]), gone.clone()],
    );
    assert_dropped(&out, &sshd, &gone, 5, &[&out_at(&d[2]), &out_at(&d[1])]);
    assert!(std::fs::read(d[2].join("out")).unwrap() == want);
}

/// How a receiver of a `send --to` chain fails at the start, and the code it fails with.
#[derive(Clone, Copy, Debug)]
enum Bad {
    /// Nobody listens at its ticket's address any more.
    Gone,
    /// Started without `--relay`, though it is not the last.
    NoRelay,
    /// Its destination may not be written (files), its consumer fails at once (streams).
    Locked,
}

impl Bad {
    fn code(self) -> i32 {
        match self {
            Bad::Gone => 5,
            Bad::NoRelay => 2,
            Bad::Locked => 4,
        }
    }
}

/// A receiver into `dir` (`stream`: into `dir/out`), spoilt as `bad` says (a directory
/// is locked once its ticket is printed).
fn ticket_recv(
    test: &str,
    dir: &Path,
    stream: bool,
    bad: Option<Bad>,
) -> Option<(Recv, Option<Locked>)> {
    let mut cmd = Command::new(haul_bin());
    cmd.args(["recv", "-q", "--listen", "127.0.0.1:0"]);
    if !matches!(bad, Some(Bad::NoRelay)) {
        cmd.arg("--relay");
    }
    std::fs::create_dir(dir).unwrap();
    match (stream, bad) {
        // Not a file in a locked directory: its temporary file is made before the
        // ticket is printed, so only its end would fail.
        (true, Some(Bad::Locked)) => cmd.args(["--to-command", "exit 3"]),
        (true, _) => cmd.arg("--stream").arg(dir.join("out")),
        (false, _) => cmd.arg(dir),
    };
    let mut proc = Running::spawn("recv", cmd);
    let line = proc.first_line().expect("recv printed no ticket");
    let ticket = String::from_utf8(line).unwrap().trim().to_string();
    let recv = Recv { proc, ticket };
    let locked = match bad {
        Some(Bad::Locked) if !stream => {
            // recv made its directory: lock it as it is.
            let ok = Command::new("chattr")
                .arg("+i")
                .arg(dir)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                println!("SKIPPED: {test}: chattr +i does not work here");
                return None;
            }
            Some(Locked(dir.to_path_buf()))
        }
        _ => None,
    };
    Some((recv, locked))
}

/// `send` to three receivers, the one at `at` spoilt as `bad`: the sender exits with its
/// code, `--json` lists it failed and the two others complete; files and streams.
#[test]
fn a_send_to_tickets_drops_a_receiver_that_fails_at_the_start_first_middle_or_last() {
    let test = "a_send_to_tickets_drops_a_receiver_that_fails_at_the_start_first_middle_or_last";
    let tmp = tempfile::tempdir().unwrap();
    let src = build_tree(tmp.path(), "tree", &TreeOptions::small());
    write_random_file(&src.join("big"), 2 * MIB + 5, 72);
    let want = std::fs::read(src.join("big")).unwrap();
    // The last receiver relays nothing: one without --relay there is not spoilt.
    let cases = [
        (0, Bad::NoRelay),
        (0, Bad::Locked),
        (1, Bad::Gone),
        (1, Bad::NoRelay),
        (1, Bad::Locked),
        (2, Bad::Gone),
        (2, Bad::Locked),
    ];
    for stream in [false, true] {
        for (n, (at, bad)) in cases.iter().copied().enumerate() {
            let what = format!("stream {stream}, receiver {} of 3 {bad:?}", at + 1);
            let dirs: Vec<PathBuf> = (0..3)
                .map(|i| tmp.path().join(format!("t{stream}-{n}-{i}")))
                .collect();
            let mut recvs = Vec::new();
            let mut locks = Vec::new();
            for (i, d) in dirs.iter().enumerate() {
                let spoilt = (i == at).then_some(bad);
                let Some((r, lock)) = ticket_recv(test, d, stream, spoilt) else {
                    return;
                };
                locks.extend(lock);
                recvs.push(r);
            }
            let tickets: Vec<String> = recvs.iter().map(|r| r.ticket.clone()).collect();
            let mut ends: Vec<Option<Recv>> = recvs.into_iter().map(Some).collect();
            if let Bad::Gone = bad {
                ends[at].take().map(Recv::kill);
            }
            let mut cmd = Command::new(haul_bin());
            cmd.arg("send")
                .args(["--json", "-q", "--block-size", BLOCK_SIZE_ARG]);
            match stream {
                true => cmd.args([
                    "--from-command",
                    &format!("cat '{}'", src.join("big").display()),
                ]),
                false => cmd.arg(&src),
            };
            for t in &tickets {
                cmd.args(["--to", t]);
            }
            let sent = Running::spawn("send", cmd).wait();
            // The spoilt one may wait for a sender that has gone on without it.
            let outs: Vec<Option<Outcome>> = ends
                .into_iter()
                .enumerate()
                .map(|(i, r)| r.map(|r| if i == at { r.kill() } else { r.wait() }))
                .collect();
            drop(locks);
            let all = outs
                .iter()
                .flatten()
                .fold(format!("{what}\n{}", sent.describe()), |a, o| {
                    a + "\n" + &o.describe()
                });
            assert_eq!(sent.code(), Some(bad.code()), "{all}");
            let json = text(&sent.stdout);
            let states: Vec<bool> = json
                .split("{\"host\":")
                .skip(1)
                .map(|r| r.contains("\"ok\":true"))
                .collect();
            let expect: Vec<bool> = (0..3).map(|i| i != at).collect();
            assert_eq!(states, expect, "{all}");
            assert!(
                json.contains(&format!("\"exit_code\":{}", bad.code())),
                "{all}"
            );
            for (i, d) in dirs.iter().enumerate().filter(|(i, _)| *i != at) {
                assert_eq!(outs[i].as_ref().and_then(Outcome::code), Some(0), "{all}");
                match stream {
                    true => assert!(
                        std::fs::read(d.join("out")).unwrap() == want,
                        "{d:?} {what}"
                    ),
                    false => assert_complete(&src, &[d]),
                }
            }
        }
    }
}
