//! A stream chain whose hop-to-hop connections are cut (`ss -K` in the last receiver's
//! namespace: the connections from the middle receiver, control and data) while both
//! are alive: the middle receiver dials the last one again, as a sender does, and every
//! receiver completes with the same bytes. Before, the middle receiver left the last one
//! out at the first broken connection (the sender exited 5: "replica … failed: connection
//! to peer lost: Software caused connection abort"). No timing is asserted; every wait is
//! bounded against hangs.

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use support::fanout_pipe::*;
use support::*;

#[test]
fn a_cut_between_two_receivers_of_a_chain_is_dialed_again_and_all_complete() {
    let test = "a_cut_between_two_receivers_of_a_chain_is_dialed_again_and_all_complete";
    let Some(lan) = lan_or_skip(test, ("hfanc", "198.19.55")) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src.bin");
    write_random_file(&src, 64 * MIB, 36);
    let want = std::fs::read(&src).unwrap();
    let dirs: Vec<PathBuf> = (1..=2).map(|i| tmp.path().join(format!("d{i}"))).collect();
    for d in &dirs {
        std::fs::create_dir(d).unwrap();
    }
    let recvs: Vec<Recv> = (0..2)
        .map(|i| {
            let listen = format!("{}:0", lan.ip(i + 2));
            recv_stream(Some(&lan.ns(i + 2)), &listen, &dirs[i].join("out"))
        })
        .collect();
    let tickets: Vec<&str> = recvs.iter().map(|r| r.ticket.as_str()).collect();
    let sender = spawn_send(Some(&lan.ns(1)), &src, &tickets, &["--limit", "16M"]);
    let mut cuts = 0;
    for at in [8 * MIB, 24 * MIB] {
        let until = Instant::now() + Duration::from_secs(120);
        // A sender that ended already (it gave the last receiver up) fails below.
        while temp_bytes(&dirs[1]) < at && !sender.has_exited() {
            assert!(Instant::now() < until, "the last receiver got no more data");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Every established connection of the last receiver: all come from the middle one.
        let out = Command::new("ip")
            .args(["netns", "exec", &lan.ns(3), "ss", "-HK", "-t"])
            .args(["state", "established"])
            .output()
            .unwrap();
        assert!(out.status.success(), "ss -K");
        cuts += String::from_utf8_lossy(&out.stdout).lines().count();
    }
    let sent = sender.wait();
    let got: Vec<Outcome> = recvs.into_iter().map(Recv::wait).collect();
    let all = format!(
        "{}\n{}\n{}",
        sent.describe(),
        got[0].describe(),
        got[1].describe()
    );
    assert!(cuts > 0, "the cuts found no connection\n{all}");
    assert_eq!(sent.code(), Some(0), "{all}");
    for g in &got {
        assert_eq!(g.code(), Some(0), "{all}");
    }
    assert_eq!(
        text(&sent.stdout).matches("\"ok\":true").count(),
        2,
        "{all}"
    );
    for d in &dirs {
        assert!(
            std::fs::read(d.join("out")).unwrap() == want,
            "{d:?}/out differs\n{all}"
        );
    }
    assert!(
        got[0].stderr.contains("dialing it again"),
        "the middle receiver said nothing of the cut\n{all}"
    );
}
