//! A unit that takes seconds to cross a slow link is not taken for one lost: across a
//! 4 Mbit/s veth link between two network namespaces a 4 MiB file (one unit, some 8 s on
//! the wire) is sent once. The receiver used to count only finished units as activity, so
//! when `Finish` came while the unit was still arriving (the sender's socket buffers held
//! its last seconds) and nothing had finished for `SETTLE`, it asked for the file again:
//! twice the bytes, and a warning about dropped connections that never dropped.

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use support::*;

#[test]
fn a_unit_still_arriving_at_finish_is_not_sent_again() {
    assert!(
        is_root(),
        "this test needs root (network namespaces, tc); CI runs it as root"
    );
    let lab = support::pipe_harness::Netlab::up("4mbit");
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("data");
    write_random_file(&file, 4 * MIB, 9);
    let ticket = tmp.path().join("ticket");
    let listen = format!("{}:0", lab.ip_b);
    let recv = Command::new("ip")
        .args(["netns", "exec", &lab.b, haul_bin(), "recv", "-q"])
        .args(["--listen", &listen])
        .arg(tmp.path().join("dst"))
        .arg("--ticket-file")
        .arg(&ticket)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for _ in 0..100 {
        if ticket.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = Command::new("ip")
        .args(["netns", "exec", &lab.a, haul_bin(), "send", "--json"])
        .arg(&file)
        .arg("--ticket-file")
        .arg(&ticket)
        .output()
        .unwrap();
    let recv_out = recv.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        recv_out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&recv_out.stderr)
    );
    assert_contents_equal(&file, &tmp.path().join("dst/data"));
    assert!(!stderr.contains("re-sending"), "{stderr}");
    let s = String::from_utf8_lossy(&out.stdout);
    let at = s.find("\"bytes_wire\":").expect("bytes_wire in --json") + 13;
    let wire: u64 = s[at..]
        .split([',', '}'])
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a number");
    assert!(wire < 5 * MIB, "{wire} bytes on the wire for a 4 MiB file");
}
