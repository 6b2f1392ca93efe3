//! The bandwidth cap through the real binary: `--limit` holds a transfer to its rate (on
//! loopback and across a veth link between two network namespaces), `haul limit` changes
//! it while it runs, and no other user can reach the control socket.
//! Only bounds that slowness cannot break are asserted (a rate at most the cap; a lifted
//! cap finishing long before the capped time: 160 s against a 100 s bound).

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// A receiver into a temp dir and a sender of `file` with `args`, started; returns the
/// sender's process.
fn start(
    tmp: &std::path::Path,
    file: &std::path::Path,
    args: &[&str],
) -> (Recv, std::process::Child) {
    let recv = recv(&tmp.join("dst"), &[]);
    let child = Command::new(haul_bin())
        .args(["send", "--json", "--to", &recv.ticket])
        .arg(file)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (recv, child)
}

fn json_number(out: &[u8], key: &str) -> f64 {
    let s = String::from_utf8_lossy(out);
    let at = s
        .find(&format!("\"{key}\":"))
        .unwrap_or_else(|| panic!("no {key} in {s}"));
    let rest = &s[at + key.len() + 3..];
    let end = rest.find([',', '}']).unwrap();
    rest[..end].parse().unwrap()
}

#[test]
fn a_limit_holds_the_rate() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("data");
    write_random_file(&file, 12 * MIB, 1);
    let (recv, child) = start(tmp.path(), &file, &["--limit", "4M"]);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    recv.wait().assert_code(0);
    let wire = json_number(&out.stdout, "bytes_wire");
    let secs = json_number(&out.stdout, "seconds");
    // At most the cap, plus the bucket's first 50 ms and rounding: never much faster.
    let rate = wire / secs;
    assert!(
        rate <= 4.0 * MIB as f64 * 1.1,
        "{rate} B/s under a 4 MiB/s cap"
    );
}

#[test]
fn a_capped_copy_on_this_host_arrives_whole_and_no_faster_than_the_cap() {
    // Under a cap a local copy moves smaller units (a quarter second at the cap: 1 MiB
    // here); a file of many units, a file smaller than one and small files packed
    // together must all arrive whole.
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    write_random_file(&src.join("big"), 9 * MIB + 12_345, 2);
    write_random_file(&src.join("mid"), MIB / 2 + 7, 3);
    for i in 0..40u64 {
        write_random_file(&src.join(format!("s{i}")), 997 * i, 4 + i);
    }
    let dst = tmp.path().join("dst");
    let out = Command::new(haul_bin())
        .args(["copy", "--json", "--limit", "4M"])
        .arg(format!("{}/", src.display()))
        .arg(&dst)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_contents_equal(&src, &dst);
    let bytes = json_number(&out.stdout, "bytes_written");
    let secs = json_number(&out.stdout, "seconds");
    assert!(bytes >= 9.5 * MIB as f64, "{bytes} bytes written");
    let rate = bytes / secs;
    assert!(
        rate <= 4.0 * MIB as f64 * 1.1,
        "{rate} B/s under a 4 MiB/s cap"
    );
}

#[test]
fn a_limit_holds_across_a_network_link() {
    assert!(
        is_root(),
        "this test needs root (network namespaces, tc); CI runs it as root"
    );
    let lab = support::pipe_harness::Netlab::up("1gbit");
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("data");
    write_random_file(&file, 24 * MIB, 4);
    let (out, recv) = lab.send_file(tmp.path(), &file, &["--limit", "8M"]);
    out.assert_code(0);
    recv.assert_code(0);
    assert_contents_equal(&file, &tmp.path().join("dst/data"));
    // The link carries 1 Gbit/s; the cap, not the link, sets the pace. Only the bound
    // that slowness cannot break is asserted; the benchmark measures the ±5%.
    let rate = json_number(&out.stdout, "bytes_wire") / json_number(&out.stdout, "seconds");
    assert!(
        rate <= 8.0 * MIB as f64 * 1.1,
        "{rate} B/s under an 8 MiB/s cap"
    );
}

#[test]
fn haul_limit_changes_a_running_transfer() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("data");
    write_random_file(&file, 40 * MIB, 2);
    let started = Instant::now();
    // 160 s at this cap; lifted after a second, it takes as long as the machine needs
    // to move 40 MiB once (a second or two here; a machine 50 times slower still passes).
    let (recv, child) = start(tmp.path(), &file, &["--limit", "256K"]);
    let pid = child.id().to_string();
    std::thread::sleep(Duration::from_secs(1));
    let mut told = None;
    for _ in 0..50 {
        let o = Command::new(haul_bin())
            .args(["limit", "off", "--pid", &pid])
            .output()
            .unwrap();
        if o.status.success() {
            told = Some(o);
            break;
        }
        // The socket may not be there yet on a loaded machine.
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(told.is_some(), "haul limit never reached pid {pid}");
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    recv.wait().assert_code(0);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(100),
        "the cap was not lifted: {took:?}"
    );
}

#[test]
fn another_user_cannot_reach_the_control_socket() {
    if !is_root() {
        panic!("needs root (to run a client as another user)");
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("data");
    write_random_file(&file, 12 * MIB, 3);
    let (recv, child) = start(tmp.path(), &file, &["--limit", "2M"]);
    let pid = child.id();
    let sock = format!("/run/haul/limit-{pid}.sock");
    for _ in 0..50 {
        if std::path::Path::new(&sock).exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // haul limit as nobody does not see root's transfers at all.
    let o = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            haul_bin(),
        ])
        .args(["limit", "off", "--pid", &pid.to_string()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    // Nor can it connect to the socket by its path.
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "python3", "-c"])
        .arg(format!(
            "import socket; s=socket.socket(socket.AF_UNIX); s.connect('{sock}'); s.sendall(b'off\\n'); print(s.recv(64))"
        ))
        .output()
        .unwrap();
    assert!(!o.status.success(), "nobody reached {sock}: {o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Permission denied"),
        "{o:?}"
    );
    // The cap still holds: 12 MiB at 2 MiB/s.
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    recv.wait().assert_code(0);
    let rate = json_number(&out.stdout, "bytes_wire") / json_number(&out.stdout, "seconds");
    assert!(rate <= 2.0 * MIB as f64 * 1.1, "{rate} B/s");
}
