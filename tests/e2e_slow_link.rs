//! A unit that takes seconds to cross a slow link is not taken for one lost: across a
//! 4 Mbit/s veth link between two network namespaces a 4 MiB file (one unit, some 8 s on
//! the wire) is sent once. The receiver used to count only finished units as activity, so
//! when `Finish` came while the unit was still arriving (the sender's socket buffers held
//! its last seconds) and nothing had finished for `SETTLE`, it asked for the file again:
//! twice the bytes, and a warning about dropped connections that never dropped.

mod support;

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
    let (send, recv) = lab.send_file(tmp.path(), &file, &[]);
    send.assert_code(0);
    recv.assert_code(0);
    assert_contents_equal(&file, &tmp.path().join("dst/data"));
    assert!(!send.stderr.contains("re-sending"), "{}", send.stderr);
    let report = String::from_utf8_lossy(&send.stdout);
    let wire = support::pipe_harness::json_u64(&send, &report, "bytes_wire");
    assert!(wire < 5 * MIB, "{wire} bytes on the wire for a 4 MiB file");
}
