//! Pipe-mode fan-out through the real binary: one stream read once (`haul send
//! --from-command` with several `--to`), each receiver writing it to its own sink and
//! passing it on. Three receivers on loopback (`recv --stream FILE` twice, `recv -`) get
//! byte-identical streams with one `stream_blake3`, and a compressed stream stays
//! compressed on every hop; three receivers in their own network
//! namespaces, the middle one SIGKILLed mid-stream: the chain re-forms around it, the
//! other two complete byte-identical, the sender exits 5 naming the killed host (so too
//! with the first one killed, the sender going on with the second, and with the first
//! two killed in turn, the last completing alone; and a
//! middle receiver whose consumer fails is left out the same way, exit 4; so is one
//! whose link is cut, its connections left open, with 8 streams); `haul
//! copy --from-command CMD h1:FILE --also h2:FILE --also h3:FILE` (and `host:` with
//! `--to-command`) through the test sshd, and the first far receiver killed mid-stream
//! there (the others complete).
//! No timing is asserted; every wait is bounded against hangs.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use support::fanout_pipe::*;
use support::netbed::Lan;
use support::*;

#[test]
fn three_receivers_get_one_stream_byte_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src.bin");
    // Not a multiple of the block: the short last block crosses two hops too.
    write_random_file(&src, 20 * MIB + 12345, 15);
    let want = blake3::hash(&std::fs::read(&src).unwrap())
        .to_hex()
        .to_string();
    let outs: Vec<PathBuf> = (1..=2)
        .map(|i| tmp.path().join(format!("out{i}")))
        .collect();

    let recvs = vec![
        recv_stream(None, "127.0.0.1:0", &outs[0]),
        recv_stream(None, "127.0.0.1:0", &outs[1]),
        recv_stdout(&tmp.path().join("ticket3")),
    ];
    let tickets: Vec<&str> = recvs.iter().map(|r| r.ticket.as_str()).collect();
    let sent = spawn_send(None, &src, &tickets, &[]).wait();
    let got: Vec<Outcome> = recvs.into_iter().map(Recv::wait).collect();
    let all = format!(
        "{}\n{}\n{}\n{}",
        sent.describe(),
        got[0].describe(),
        got[1].describe(),
        got[2].describe()
    );
    assert_eq!(sent.code(), Some(0), "{all}");
    for g in &got {
        assert_eq!(g.code(), Some(0), "{all}");
    }
    let json = text(&sent.stdout);
    assert_eq!(json.matches("\"ok\":true").count(), 3, "{json}");
    assert_eq!(stream_blake3(&json), want);
    for (o, g) in outs.iter().zip(&got) {
        assert!(
            std::fs::read(o).unwrap() == std::fs::read(&src).unwrap(),
            "{o:?} differs"
        );
        assert_eq!(stream_blake3(&text(g.stdout_after_first_line())), want);
    }
    // `recv -`: the stream is its stdout, the JSON its stderr.
    assert!(
        got[2].stdout == std::fs::read(&src).unwrap(),
        "recv - got other bytes"
    );
    assert_eq!(stream_blake3(&got[2].stderr), want);
}

/// `"bytes_wire":N` of a `--json` line in `text`.
fn bytes_wire(text: &str) -> u64 {
    let at = text
        .find("\"bytes_wire\":")
        .unwrap_or_else(|| panic!("no bytes_wire in {text}"));
    let digits: String = text[at + 13..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap()
}

#[test]
fn a_compressed_stream_stays_compressed_on_every_hop() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src.txt");
    // Compressible, and not a multiple of the block.
    let line = b"0001 2026-11-24 replica relay wal segment checkpoint lsn=0/16B3F28\n";
    let mut data = Vec::new();
    while data.len() < 24 * MIB as usize + 777 {
        data.extend_from_slice(line);
    }
    std::fs::write(&src, &data).unwrap();
    let outs: Vec<PathBuf> = (1..=3)
        .map(|i| tmp.path().join(format!("out{i}")))
        .collect();
    let recvs: Vec<Recv> = outs
        .iter()
        .map(|o| recv_stream(None, "127.0.0.1:0", o))
        .collect();
    let tickets: Vec<&str> = recvs.iter().map(|r| r.ticket.as_str()).collect();
    let sent = spawn_send(None, &src, &tickets, &["--compress", "zstd"]).wait();
    let got: Vec<Outcome> = recvs.into_iter().map(Recv::wait).collect();
    let all = got
        .iter()
        .fold(sent.describe(), |a, g| a + "\n" + &g.describe());
    assert_eq!(sent.code(), Some(0), "{all}");
    let len = data.len() as u64;
    for (i, (o, g)) in outs.iter().zip(&got).enumerate() {
        assert_eq!(g.code(), Some(0), "{all}");
        assert!(std::fs::read(o).unwrap() == data, "{o:?} differs");
        // What crossed the link into this hop: the sender's compressed blocks, not the
        // stream (a relay that forwarded raw blocks would carry all `len` bytes).
        let wire = bytes_wire(&text(g.stdout_after_first_line()));
        assert!(
            wire < len / 4,
            "hop {}: {wire} wire bytes for {len}\n{all}",
            i + 1
        );
    }
}

#[test]
fn a_middle_receiver_whose_consumer_fails_is_left_out_and_the_others_complete() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src.bin");
    write_random_file(&src, 24 * MIB, 18);
    let want = std::fs::read(&src).unwrap();
    let outs: Vec<PathBuf> = (1..=2)
        .map(|i| tmp.path().join(format!("out{i}")))
        .collect();
    // The middle one's consumer stops reading after 2 MiB: its failure is its own.
    let mut cmd = haul_in(None);
    cmd.args(["recv", "--relay", "-q", "--json", "--listen", "127.0.0.1:0"])
        .args(["--to-command", "head -c 2097152 > /dev/null"]);
    let mut proc = Running::spawn("recv --to-command", cmd);
    let line = proc.first_line().expect("recv printed no ticket");
    let middle = Recv {
        ticket: String::from_utf8(line).unwrap().trim().to_string(),
        proc,
    };
    let first = recv_stream(None, "127.0.0.1:0", &outs[0]);
    let last = recv_stream(None, "127.0.0.1:0", &outs[1]);
    let tickets = [&first.ticket, &middle.ticket, &last.ticket].map(|t| t.as_str());
    let sent = spawn_send(None, &src, &tickets, &[]).wait();
    let (first, middle, last) = (first.wait(), middle.wait(), last.wait());
    let all = format!(
        "{}\n{}\n{}\n{}",
        sent.describe(),
        first.describe(),
        middle.describe(),
        last.describe()
    );
    assert_eq!(first.code(), Some(0), "{all}");
    assert_eq!(last.code(), Some(0), "{all}");
    assert_eq!(middle.code(), Some(4), "its consumer failed: {all}");
    assert_eq!(sent.code(), Some(4), "the failed replica's code: {all}");
    let json = text(&sent.stdout);
    assert_eq!(json.matches("\"ok\":true").count(), 2, "{json}");
    assert!(json.contains("\"ok\":false"), "{json}");
    assert!(sent.stderr.contains("replica 127.0.0.1:"), "{all}");
    for o in &outs {
        assert!(std::fs::read(o).unwrap() == want, "{o:?} differs");
    }
}

/// A 96 MiB stream from namespace 1 to `recv --stream` in namespaces 2, 3 and 4 (the
/// sender capped at 24 MB/s, so that it flows long enough), the receivers at `kill`
/// SIGKILLed one after another, each once its stream grew 8 MiB past where it stood when
/// the one before died. Returns the sender's outcome, every receiver's, the stream, and
/// the receivers' directories (each writes `out` there).
fn stream_and_kill(
    lan: &Lan,
    tmp: &Path,
    kill: &[usize],
) -> (Outcome, Vec<Outcome>, Vec<u8>, Vec<PathBuf>) {
    let src = tmp.join("src.bin");
    write_random_file(&src, 96 * MIB, 16);
    let want = std::fs::read(&src).unwrap();
    let dirs: Vec<PathBuf> = (1..=3).map(|i| tmp.join(format!("d{i}"))).collect();
    for d in &dirs {
        std::fs::create_dir(d).unwrap();
    }
    let mut recvs: Vec<Option<Recv>> = (0..3)
        .map(|i| {
            let listen = format!("{}:0", lan.ip(i + 2));
            Some(recv_stream(
                Some(&lan.ns(i + 2)),
                &listen,
                &dirs[i].join("out"),
            ))
        })
        .collect();
    let tickets: Vec<String> = recvs.iter().flatten().map(|r| r.ticket.clone()).collect();
    let tickets: Vec<&str> = tickets.iter().map(String::as_str).collect();
    let sender = spawn_send(Some(&lan.ns(1)), &src, &tickets, &["--limit", "24M"]);
    let until = Instant::now() + Duration::from_secs(120);
    let mut stood = [0; 3];
    let mut killed: Vec<Option<Outcome>> = vec![None, None, None];
    for &k in kill {
        while temp_bytes(&dirs[k]) < stood[k] + 8 * MIB {
            assert!(
                Instant::now() < until,
                "receiver {} got no more data",
                k + 1
            );
            assert!(!sender.has_exited(), "the sender ended before the kill");
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = recvs[k].take().unwrap().kill();
        assert_eq!(out.code(), None, "SIGKILLed");
        killed[k] = Some(out);
        for (i, d) in dirs.iter().enumerate() {
            stood[i] = temp_bytes(d);
        }
    }
    let sent = sender.wait();
    let outs = recvs
        .into_iter()
        .zip(killed)
        .map(|(r, k)| r.map_or_else(|| k.unwrap(), Recv::wait))
        .collect();
    (sent, outs, want, dirs)
}

/// After `stream_and_kill`: the receivers at `killed` are named failed (exit 5, a vanished
/// host), the others complete with the stream, byte-identical, and one `stream_blake3`.
fn assert_killed_and_others_complete(
    lan: &Lan,
    killed: &[usize],
    run: &(Outcome, Vec<Outcome>, Vec<u8>, Vec<PathBuf>),
) {
    let (sent, outs, want, dirs) = run;
    let all = outs
        .iter()
        .fold(sent.describe(), |a, o| a + "\n" + &o.describe());
    assert_eq!(sent.code(), Some(5), "{all}");
    let json = text(&sent.stdout);
    let digest = blake3::hash(want).to_hex().to_string();
    assert_eq!(stream_blake3(&json), digest);
    assert_eq!(
        json.matches("\"ok\":true").count(),
        3 - killed.len(),
        "{json}"
    );
    for i in 0..3 {
        if killed.contains(&i) {
            let failed = lan.ip(i + 2);
            assert!(
                sent.stderr.contains(&format!("replica {failed}:")),
                "the error names the failed host {failed}\n{all}"
            );
            assert!(json.contains(&format!("{{\"host\":\"{failed}:")), "{json}");
            assert!(
                !dirs[i].join("out").exists(),
                "the killed receiver's stream never became its file"
            );
            continue;
        }
        assert_eq!(outs[i].code(), Some(0), "{all}");
        let out = std::fs::read(dirs[i].join("out")).unwrap();
        assert!(out == *want, "receiver {} got other bytes", i + 1);
        assert_eq!(
            stream_blake3(&text(outs[i].stdout_after_first_line())),
            digest
        );
    }
}

#[test]
fn a_killed_middle_receiver_is_reported_and_the_others_complete() {
    let test = "a_killed_middle_receiver_is_reported_and_the_others_complete";
    let Some(lan) = lan_or_skip(test, ("hfanp", "198.19.45")) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let run = stream_and_kill(&lan, tmp.path(), &[1]);
    assert_killed_and_others_complete(&lan, &[1], &run);
}

#[test]
fn a_killed_first_receiver_is_reported_and_the_others_complete() {
    let test = "a_killed_first_receiver_is_reported_and_the_others_complete";
    let Some(lan) = lan_or_skip(test, ("hfanf", "198.19.51")) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let run = stream_and_kill(&lan, tmp.path(), &[0]);
    assert_killed_and_others_complete(&lan, &[0], &run);
}

#[test]
fn the_first_two_receivers_killed_in_turn_leave_the_last_complete() {
    let test = "the_first_two_receivers_killed_in_turn_leave_the_last_complete";
    let Some(lan) = lan_or_skip(test, ("hfang", "198.19.53")) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let run = stream_and_kill(&lan, tmp.path(), &[0, 1]);
    assert_killed_and_others_complete(&lan, &[0, 1], &run);
}

/// A network partition rather than a dead process: the middle receiver's link goes down,
/// so its connections to the last receiver stay open but silent. With 8 streams they hold
/// 8 of the last receiver's 12 data connection slots when the first receiver re-forms the
/// chain and dials it; the silent ones must give up their slots to the new connections.
#[test]
fn a_partitioned_middle_receiver_is_reported_and_the_others_complete_with_8_streams() {
    let test = "a_partitioned_middle_receiver_is_reported_and_the_others_complete_with_8_streams";
    let Some(lan) = lan_or_skip(test, ("hfanq", "198.19.47")) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src.bin");
    write_random_file(&src, 96 * MIB, 17);
    let want = std::fs::read(&src).unwrap();
    let dirs: Vec<PathBuf> = (1..=3).map(|i| tmp.path().join(format!("d{i}"))).collect();
    for d in &dirs {
        std::fs::create_dir(d).unwrap();
    }
    let recvs: Vec<Recv> = (0..3)
        .map(|i| {
            let listen = format!("{}:0", lan.ip(i + 2));
            recv_stream(Some(&lan.ns(i + 2)), &listen, &dirs[i].join("out"))
        })
        .collect();
    let tickets: Vec<&str> = recvs.iter().map(|r| r.ticket.as_str()).collect();
    let args = ["--limit", "24M", "--streams", "8"];
    let sender = spawn_send(Some(&lan.ns(1)), &src, &tickets, &args);
    let until = Instant::now() + Duration::from_secs(120);
    while temp_bytes(&dirs[2]) < 8 * MIB {
        assert!(Instant::now() < until, "the last receiver never got data");
        assert!(
            !sender.has_exited(),
            "the sender ended before the partition"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Host 3's switch port down: nothing reaches it, nothing of it closes.
    let down = Command::new("ip")
        .args(["-n", "hfanq-sw"])
        .args(["link", "set", "p3", "down"])
        .status()
        .unwrap();
    assert!(down.success(), "ip link set p3 down");
    let mut recvs = recvs.into_iter();
    let (first, middle, last) = (
        recvs.next().unwrap(),
        recvs.next().unwrap(),
        recvs.next().unwrap(),
    );
    let sent = sender.wait();
    let (first, last) = (first.wait(), last.wait());
    let middle = middle.kill();
    let all = format!(
        "{}\n{}\n{}\n{}",
        sent.describe(),
        first.describe(),
        middle.describe(),
        last.describe()
    );
    assert_eq!(first.code(), Some(0), "{all}");
    assert_eq!(last.code(), Some(0), "{all}");
    assert_eq!(sent.code(), Some(5), "{all}");
    let failed = lan.ip(3);
    assert!(
        sent.stderr.contains(&format!("replica {failed}:")) && sent.stderr.contains("failed"),
        "the error names the failed host {failed}\n{all}"
    );
    let json = text(&sent.stdout);
    assert_eq!(json.matches("\"ok\":true").count(), 2, "{json}");
    for i in [0, 2] {
        let out = std::fs::read(dirs[i].join("out")).unwrap();
        assert!(out == want, "receiver {} got other bytes\n{all}", i + 1);
    }
}

#[test]
fn copy_also_passes_one_stream_to_three_far_files_and_commands() {
    let Some(sshd) =
        support::sshd::Sshd::start("copy_also_passes_one_stream_to_three_far_files_and_commands")
    else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src.bin");
    write_random_file(&src, 6 * MIB + 77, 17);
    let want = std::fs::read(&src).unwrap();
    let digest = blake3::hash(&want).to_hex().to_string();
    let dirs: Vec<PathBuf> = (1..=3).map(|i| tmp.path().join(format!("d{i}"))).collect();
    for d in &dirs {
        std::fs::create_dir(d).unwrap();
    }
    let copy = |dests: Vec<String>, extra: &[&str]| {
        let mut cmd = Command::new(haul_bin());
        cmd.args(["copy", "-e", &sshd.rsh(), "--remote-haul", haul_bin()])
            .args(["--json", "-q", "--block-size", BLOCK_SIZE_ARG])
            .args(["--from-command", &format!("cat '{}'", src.display())])
            .args(extra)
            .arg(&dests[0]);
        for d in &dests[1..] {
            cmd.args(["--also", d]);
        }
        Running::spawn("copy", cmd).wait()
    };

    // host:FILE each.
    let files: Vec<String> = dirs
        .iter()
        .map(|d| format!("127.0.0.1:{}", d.join("out").display()))
        .collect();
    let out = copy(files.clone(), &[]);
    if out.code() != Some(0) {
        eprintln!("--- sshd log ---\n{}", sshd.log());
    }
    out.assert_code(0);
    let json = text(&out.stdout);
    assert_eq!(json.matches("\"ok\":true").count(), 3, "{json}");
    assert!(
        json.contains(&format!("\"host\":\"{}\"", files[2])),
        "{json}"
    );
    assert_eq!(stream_blake3(&json), digest);
    for d in &dirs {
        assert!(std::fs::read(d.join("out")).unwrap() == want, "{d:?}");
    }

    // host: with --to-command: every host runs it (here each into a file of its own).
    let hosts = vec!["127.0.0.1:".to_string(); 3];
    let cmd = format!("cat > \"$(mktemp '{}/c.XXXXXX')\"", tmp.path().display());
    let out = copy(hosts, &["--to-command", &cmd]);
    out.assert_code(0);
    assert_eq!(stream_blake3(&text(&out.stdout)), digest);
    let written: Vec<Vec<u8>> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("c."))
        .map(|e| std::fs::read(e.path()).unwrap())
        .collect();
    assert_eq!(written.len(), 3, "three far commands ran");
    assert!(
        written.iter().all(|w| *w == want),
        "each command got the stream"
    );
}

#[test]
fn copy_also_goes_on_when_the_first_far_stream_receiver_dies() {
    let test = "copy_also_goes_on_when_the_first_far_stream_receiver_dies";
    let Some(sshd) = support::sshd::Sshd::start(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src.bin");
    write_random_file(&src, 64 * MIB, 23);
    let want = std::fs::read(&src).unwrap();
    let dirs: Vec<PathBuf> = (1..=3).map(|i| tmp.path().join(format!("d{i}"))).collect();
    for d in &dirs {
        std::fs::create_dir(d).unwrap();
    }
    let at = |d: &Path| format!("127.0.0.1:{}", d.join("out").display());
    let mut cmd = Command::new(haul_bin());
    cmd.args(["copy", "-e", &sshd.rsh(), "--remote-haul", haul_bin()])
        .args(["--json", "-q", "--limit", "24M"])
        .args(["--block-size", BLOCK_SIZE_ARG])
        .args(["--from-command", &format!("cat '{}'", src.display())])
        .arg(at(&dirs[0]))
        .args(["--also", &at(&dirs[1]), "--also", &at(&dirs[2])]);
    let copy = Running::spawn("copy", cmd);
    let until = Instant::now() + Duration::from_secs(120);
    while temp_bytes(&dirs[0]) < 8 * MIB {
        assert!(Instant::now() < until, "the first destination got no data");
        assert!(!copy.has_exited(), "the copy ended before the kill");
        std::thread::sleep(Duration::from_millis(20));
    }
    support::sshd::kill_far_end_in(&dirs[0]);
    let out = copy.wait();
    let all = format!("{}\n--- sshd log ---\n{}", out.describe(), sshd.log());
    assert_eq!(out.code(), Some(5), "{all}");
    let failed = at(&dirs[0]);
    assert!(
        out.stderr.contains(&format!("replica {failed}")) && out.stderr.contains("failed"),
        "the error names {failed}\n{all}"
    );
    let json = text(&out.stdout);
    assert_eq!(json.matches("\"ok\":true").count(), 2, "{json}");
    let digest = blake3::hash(&want).to_hex().to_string();
    assert_eq!(stream_blake3(&json), digest);
    for d in &dirs[1..] {
        assert!(std::fs::read(d.join("out")).unwrap() == want, "{d:?}");
    }
    assert!(
        !dirs[0].join("out").exists(),
        "the killed receiver's stream never became its file"
    );
}
