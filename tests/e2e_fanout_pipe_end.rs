//! A stream relay whose own consumer fails only at the very end (its file's final rename,
//! its command's exit status once it read the whole stream), after the receivers behind
//! it completed: the sender reported those complete replicas failed too (about 1 run in
//! 25 of `recv --relay --stream lk/1` with `chattr +i lk`), since the relay told its error
//! without what became of the hops after it, and a hop that finished cannot be dialed
//! again. Here the order is made certain: the relay's command exits 1 only once the test
//! saw both receivers after it exit. No timing is asserted; every wait is bounded.

mod support;

use std::path::PathBuf;

use support::fanout_pipe::*;
use support::*;

#[test]
fn a_relay_failing_at_its_end_reports_the_complete_receivers_after_it() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src.bin");
    write_random_file(&src, 2 * MIB, 40);
    let want = std::fs::read(&src).unwrap();
    let flag = tmp.path().join("the-others-exited");
    let outs: Vec<PathBuf> = (2..=3)
        .map(|i| tmp.path().join(format!("out{i}")))
        .collect();
    // The whole stream is read; the failure comes at the end, when the test says.
    let consumer = format!(
        "cat > /dev/null; while [ ! -e '{}' ]; do sleep 0.05; done; exit 1",
        flag.display()
    );
    let mut cmd = haul_in(None);
    cmd.args(["recv", "--relay", "-q", "--json", "--listen", "127.0.0.1:0"])
        .args(["--to-command", &consumer]);
    let mut proc = Running::spawn("recv --to-command", cmd);
    let line = proc.first_line().expect("recv printed no ticket");
    let first = Recv {
        ticket: String::from_utf8(line).unwrap().trim().to_string(),
        proc,
    };
    let second = recv_stream(None, "127.0.0.1:0", &outs[0]);
    let third = recv_stream(None, "127.0.0.1:0", &outs[1]);
    let tickets = [&first.ticket, &second.ticket, &third.ticket].map(|t| t.as_str());
    let sender = spawn_send(None, &src, &tickets, &[]);
    let (second, third) = (second.wait(), third.wait());
    std::fs::write(&flag, b"").unwrap();
    let (sent, first) = (sender.wait(), first.wait());
    let all = format!(
        "{}\n{}\n{}\n{}",
        sent.describe(),
        first.describe(),
        second.describe(),
        third.describe()
    );
    assert_eq!(second.code(), Some(0), "{all}");
    assert_eq!(third.code(), Some(0), "{all}");
    assert_eq!(first.code(), Some(4), "its consumer failed: {all}");
    assert_eq!(sent.code(), Some(4), "the failed replica's code: {all}");
    let json = text(&sent.stdout);
    assert_eq!(json.matches("\"ok\":true").count(), 2, "{json}\n{all}");
    assert_eq!(json.matches("\"ok\":false").count(), 1, "{json}\n{all}");
    for o in &outs {
        assert!(std::fs::read(o).unwrap() == want, "{o:?} differs");
    }
}
