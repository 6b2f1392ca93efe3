//! A hostile sender, built from the library's own protocol and transport types, tries to
//! make `haul recv` write outside its destination. Each case runs a real `haul recv`
//! process and checks that it refuses (non-zero exit, no panic) and that nothing outside
//! DIR changed.

mod support;

use std::ffi::OsStr;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use haul::codec::unit_hash;
use haul::protocol::{
    encode_data_header, hashed_parts, set_hash, Codec, Control, Entry, EntryKind, FrameKind,
    Segment, SyncOptions,
};
use haul::session::{sealer, Channel};
use haul::transport::{connect, Role, Ticket, TransportError};
use support::hostile::{self, entry, wait_exit, Listening};

/// `haul recv` into `dir`.
fn start_recv(dir: &Path) -> Listening {
    start_recv_with(dir, &[])
}

/// `haul recv` into `dir` with the receiver's own options `args`.
fn start_recv_with(dir: &Path, args: &[&str]) -> Listening {
    let mut all: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    all.push(dir.as_os_str());
    hostile::start_recv(&all)
}

/// Waits for recv to exit; returns its exit code and stderr.
fn wait(mut r: Listening) -> (i32, String) {
    wait_exit(&mut r.child, "haul recv", Duration::from_secs(30))
}

fn send_msg(c: &mut Channel, m: &Control) {
    // The receiver may already have hung up on us: that is an acceptable refusal.
    let _ = c.write(m);
}

fn read_msg(c: &mut Channel) -> Option<Control> {
    c.read(None).ok()
}

fn file(size: u64) -> EntryKind {
    EntryKind::File {
        size,
        data_bytes: size,
    }
}

/// A data frame (tagged for its connection by `s`) whose unit hash is right for `hashed`,
/// carrying `data`.
fn unit_frame(
    s: &mut haul::protocol::Sealer,
    key: &[u8; 32],
    file: u64,
    offset: u64,
    hashed: &[u8],
    data: &[u8],
) -> Vec<u8> {
    let mut hdr = Vec::new();
    let seg = [Segment {
        file,
        offset,
        len: data.len() as u32,
        keep: false,
    }];
    encode_data_header(&mut hdr, Codec::Raw, data.len() as u32, &seg);
    let hash = unit_hash(key, hashed_parts(&hdr), hashed);
    set_hash(&mut hdr, &hash);
    let mut frame = s.header(FrameKind::Data, hdr.len() + data.len()).to_vec();
    frame.extend_from_slice(&hdr);
    frame.extend_from_slice(data);
    frame
}

/// Sends one data unit with a correct keyed hash.
fn send_unit(ticket: &Ticket, file: u64, offset: u64, data: &[u8]) {
    let Ok(mut d) = connect(ticket, Role::Data, true) else {
        return;
    };
    let mut s = sealer(&d);
    let key = ticket.secret.block_key();
    let _ = d.write_all(&unit_frame(&mut s, &key, file, offset, data, data));
    let _ = d.write_all(&s.header(FrameKind::End, 0));
    let _ = d.flush();
}

/// Opens a control connection to `r` (TLS when `encrypt`), starts a one-stream session
/// and announces `entries`; returns the connection and the receiver's first reply.
fn open_session(r: &Listening, entries: Vec<Entry>, encrypt: bool) -> (Channel, Option<Control>) {
    let conn = connect(&r.ticket, Role::Control, encrypt).expect("control connection");
    let mut c = Channel::new(conn);
    send_msg(
        &mut c,
        &Control::Start {
            streams: 1,
            block_size: 1 << 20,
            options: SyncOptions::default(),
        },
    );
    send_msg(&mut c, &Control::Entries(entries));
    let reply = read_msg(&mut c);
    (c, reply)
}

/// Runs one hostile session: Start, the entries, then data units for the files it
/// says are needed, then Finish. Returns recv's exit code and stderr.
fn hostile(dir: &Path, entries: Vec<Entry>, data: &[(u64, u64, &[u8])]) -> (i32, String) {
    hostile_to(start_recv(dir), entries, data)
}

/// [`hostile`] against the receiver `r`, already started.
fn hostile_to(r: Listening, entries: Vec<Entry>, data: &[(u64, u64, &[u8])]) -> (i32, String) {
    let (mut c, reply) = open_session(&r, entries, true);
    if let Some(Control::Need(_)) = reply {
        let t = r.ticket.clone();
        let data: Vec<(u64, u64, Vec<u8>)> =
            data.iter().map(|(f, o, d)| (*f, *o, d.to_vec())).collect();
        for (f, o, d) in &data {
            send_unit(&t, *f, *o, d);
        }
        if data.is_empty() {
            send_unit(&t, 999, 0, b"x");
        }
        send_msg(
            &mut c,
            &Control::Finish {
                failed: vec![],
                units: data.len().max(1) as u64,
                unlisted: 0,
            },
        );
        let _ = read_msg(&mut c);
    }
    drop(c);
    wait(r)
}

struct Bed {
    _tmp: tempfile::TempDir,
    dest: PathBuf,
    outside: PathBuf,
}

fn bed() -> Bed {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dest = tmp.path().join("dest");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&dest).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("victim"), b"original").unwrap();
    Bed {
        _tmp: tmp,
        dest,
        outside,
    }
}

fn assert_outside_untouched(b: &Bed) {
    let names: Vec<_> = std::fs::read_dir(&b.outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["victim"], "something was created outside DIR");
    assert_eq!(
        std::fs::read(b.outside.join("victim")).unwrap(),
        b"original"
    );
    let parent = b.dest.parent().unwrap();
    let mut top: Vec<_> = std::fs::read_dir(parent)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    top.sort();
    assert_eq!(top, ["dest", "outside"], "something was created beside DIR");
}

#[test]
fn dot_dot_path_is_refused() {
    let b = bed();
    let (code, err) = hostile(
        &b.dest,
        vec![entry(0, b"../evil", file(4))],
        &[(0, 0, b"evil")],
    );
    assert_eq!(code, 8, "{err}");
    assert!(err.contains("unsafe path"), "{err}");
    assert_outside_untouched(&b);
}

#[test]
fn absolute_and_nul_paths_are_refused() {
    for p in [&b"/tmp/evil"[..], b"a/../../evil", b"a\0b", b"a//b"] {
        let b = bed();
        let (code, err) = hostile(&b.dest, vec![entry(0, p, file(4))], &[(0, 0, b"evil")]);
        assert_eq!(code, 8, "{p:?}: {err}");
        assert_outside_untouched(&b);
    }
}

#[test]
fn existing_symlinked_directory_is_not_followed() {
    let b = bed();
    std::os::unix::fs::symlink(&b.outside, b.dest.join("out")).unwrap();
    let (code, err) = hostile(
        &b.dest,
        vec![entry(0, b"out/pwn", file(4))],
        &[(0, 0, b"evil")],
    );
    assert_ne!(code, 0, "{err}");
    assert_outside_untouched(&b);
}

#[test]
fn existing_symlink_at_file_name_is_replaced_not_followed() {
    let b = bed();
    std::os::unix::fs::symlink(b.outside.join("victim"), b.dest.join("f")).unwrap();
    let (code, err) = hostile(&b.dest, vec![entry(0, b"f", file(4))], &[(0, 0, b"new!")]);
    assert_eq!(code, 0, "{err}");
    assert_outside_untouched(&b);
    let meta = std::fs::symlink_metadata(b.dest.join("f")).unwrap();
    assert!(
        meta.is_file(),
        "the symlink should have been replaced by the file"
    );
    assert_eq!(std::fs::read(b.dest.join("f")).unwrap(), b"new!");
}

#[test]
fn symlink_sent_then_used_as_parent_is_refused() {
    let b = bed();
    let target = b.outside.as_os_str().as_encoded_bytes().to_vec();
    let entries = vec![
        entry(0, b"s", EntryKind::Symlink { target }),
        entry(1, b"s/pwn", file(4)),
    ];
    let (code, err) = hostile(&b.dest, entries, &[(1, 0, b"evil")]);
    assert_ne!(code, 0, "{err}");
    assert_outside_untouched(&b);
}

#[test]
fn hardlink_to_outside_is_refused() {
    let b = bed();
    let entries = vec![entry(
        0,
        b"h",
        EntryKind::Hardlink {
            target: b"../outside/victim".to_vec(),
        },
    )];
    let (code, err) = hostile(&b.dest, entries, &[]);
    assert_eq!(code, 8, "{err}");
    assert_outside_untouched(&b);
}

#[test]
fn data_beyond_file_end_or_for_unknown_file_is_refused() {
    let b = bed();
    let (code, err) = hostile(
        &b.dest,
        vec![entry(0, b"f", file(4))],
        &[(0, 2, b"toolong")],
    );
    assert_eq!(code, 8, "{err}");
    let b2 = bed();
    let (code, err) = hostile(&b2.dest, vec![entry(0, b"f", file(4))], &[(77, 0, b"what")]);
    assert_eq!(code, 8, "{err}");
    // Neither left a file under its final name.
    assert!(!b.dest.join("f").exists());
    assert!(!b2.dest.join("f").exists());
}

/// A unit whose bytes do not match its hash costs the sender its data connection; a
/// sender that keeps doing it is refused with the integrity exit code (8) after
/// `MAX_FORGED` (16) such failures.
#[test]
fn tampered_unit_fails_verification() {
    let b = bed();
    let r = start_recv(&b.dest);
    let (mut c, reply) = open_session(&r, vec![entry(0, b"f", file(4))], false);
    assert!(matches!(reply, Some(Control::Need(_))), "{reply:?}");
    let key = r.ticket.secret.block_key();
    let mut sent = 0;
    let reply = loop {
        assert!(sent < 40, "the receiver keeps accepting tampered units");
        if let Ok(mut d) = connect(&r.ticket, Role::Data, false) {
            let mut s = sealer(&d);
            let _ = d.write_all(&unit_frame(&mut s, &key, 0, 0, b"good", b"evil"));
            let _ = d.flush();
            sent += 1;
        }
        match c.read(Some(Duration::from_millis(100))) {
            Ok(m) => break Some(m),
            Err(haul::Error::Transport(TransportError::Io(e)))
                if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break None,
        }
    };
    assert!(sent >= 16, "refused after only {sent} tampered units");
    assert!(
        matches!(&reply, Some(Control::Error { code: 8, message }) if message.contains("failed verification")),
        "{reply:?}"
    );
    drop(c);
    let (code, err) = wait(r);
    assert_eq!(code, 8, "{err}");
    assert!(err.contains("offset 0"), "{err}");
    assert!(!b.dest.join("f").exists());
}

/// A sender whose data never arrives, round after round, is told why the receiver gives up
/// (before, the receiver just exited and the sender saw only a dropped connection).
#[test]
fn a_receiver_giving_up_on_lost_data_tells_the_sender_why() {
    let b = bed();
    let r = start_recv(&b.dest);
    let (mut c, reply) = open_session(&r, vec![entry(0, b"f", file(4))], false);
    assert!(matches!(reply, Some(Control::Need(_))), "{reply:?}");
    let mut reply = None;
    for _ in 0..200 {
        // "Everything I wrote (nothing) has been sent": each round the file is still missing.
        send_msg(
            &mut c,
            &Control::Finish {
                failed: vec![],
                units: 0,
                unlisted: 0,
            },
        );
        match read_msg(&mut c) {
            Some(Control::Need(_)) => {}
            other => {
                reply = other;
                break;
            }
        }
    }
    assert!(
        matches!(&reply, Some(Control::Error { code: 5, message }) if message.contains("giving up")),
        "{reply:?}"
    );
    drop(c);
    let (code, err) = wait(r);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("giving up"), "{err}");
    assert!(!b.dest.join("f").exists());
}

/// The attributes haul copies that `path` has (names only), as this process sees them.
fn xattr_names(path: &Path) -> Vec<String> {
    let mut buf = vec![0u8; 64 << 10];
    let n = rustix::fs::llistxattr(path, &mut buf).expect("listxattr");
    let mut names: Vec<String> = buf[..n]
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .filter(|n| n.starts_with("user.") || n.starts_with("trusted."))
        .collect();
    names.sort();
    names
}

/// Issue 37, finding 10: `--no-xattrs` and `--no-owner` are the receiver's choice, not a
/// request to the sender. A sender that ignores them and sends `trusted.*` (an overlay
/// redirect) and `user.*` attributes gets none applied by `recv --no-xattrs`, and no
/// `trusted.*` by a root `recv --no-owner` (before, both were applied: `--no-xattrs` was
/// not a receiver option, and `--no-owner` dropped only `security.*`).
#[test]
fn a_receiver_refuses_the_attributes_it_was_told_not_to_keep() {
    if !rustix::process::geteuid().is_root() {
        println!("SKIPPED: only root may set trusted.* attributes");
        return;
    }
    let xattrs = haul::protocol::Xattrs::new(vec![
        haul::protocol::Xattr {
            name: b"trusted.overlay.redirect".to_vec(),
            value: b"/etc".to_vec(),
        },
        haul::protocol::Xattr {
            name: b"user.note".to_vec(),
            value: b"x".to_vec(),
        },
    ])
    .unwrap();
    let mut f = entry(0, b"f", file(4));
    f.xattrs = Some(xattrs);
    for (args, want) in [
        (&["--no-xattrs"][..], vec![]),
        (&["--no-owner", "--no-group"], vec!["user.note".to_string()]),
        (
            &[],
            vec!["trusted.overlay.redirect".into(), "user.note".into()],
        ),
    ] {
        let b = bed();
        let r = start_recv_with(&b.dest, args);
        let (code, err) = hostile_to(r, vec![f.clone()], &[(0, 0, b"data")]);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert_eq!(std::fs::read(b.dest.join("f")).unwrap(), b"data");
        let have = xattr_names(&b.dest.join("f"));
        if args.is_empty() && have.is_empty() {
            println!("SKIPPED: this file system keeps no extended attributes");
            return;
        }
        assert_eq!(have, want, "{args:?}");
    }
}
