//! `haul probe`: its JSON fields are present and sane, and the destination is left as it
//! was (no file created, nothing left behind), within a bound that only a hang exceeds.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use support::pipe_harness::json_field;
use support::*;

fn names(dir: &Path) -> Vec<Vec<u8>> {
    let mut n = dir_names(dir);
    n.sort();
    n
}

fn field(out: &str, key: &str) -> f64 {
    json_field(out, key)
        .unwrap_or_else(|| panic!("no {key} in {out}"))
        .parse()
        .unwrap_or_else(|_| panic!("{key} is not a number in {out}"))
}

#[test]
fn probe_measures_a_local_copy_and_changes_nothing() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    write_random_file(&src.join("random"), 24 * MIB, 5);
    std::fs::write(src.join("zeros"), vec![0u8; 8 << 20]).unwrap();
    std::fs::write(src.join("small"), b"hello").unwrap();
    let dst = tmp.path().join("dst");
    std::fs::create_dir(&dst).unwrap();
    std::fs::write(dst.join("kept"), b"was here").unwrap();
    let before = names(&dst);

    let started = Instant::now();
    let out = Command::new(haul_bin())
        .args(["probe", "--json", "--streams", "3"])
        .arg(&src)
        .arg(&dst)
        .output()
        .unwrap();
    // A hang-sized bound (the probe aims at about 15 s), not a timing threshold.
    assert!(started.elapsed() < Duration::from_secs(120));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(field(&text, "files"), 3.0);
    assert_eq!(field(&text, "bytes"), (32 * MIB + 5) as f64);
    assert_eq!(json_field(&text, "walk_complete").as_deref(), Some("true"));
    for key in [
        "read_rate",
        "write_rate",
        "predicted_rate",
        "predicted_seconds",
    ] {
        assert!(field(&text, key) > 0.0, "{key} in {text}");
    }
    assert!((0.0..=1.0).contains(&field(&text, "read_cached")), "{text}");
    assert_eq!(json_field(&text, "network_rate").as_deref(), Some("null"));
    assert_eq!(field(&text, "streams"), 3.0);
    // A copy on this host does not compress.
    assert_eq!(
        json_field(&text, "compress").as_deref(),
        Some("none"),
        "{text}"
    );
    let bottleneck = json_field(&text, "bottleneck").unwrap();
    assert!(
        ["read", "write", "disk", "cpu"].contains(&bottleneck.as_str()),
        "{text}"
    );
    for codec in ["none", "lz4", "zstd:1", "zstd:3"] {
        assert!(
            text.contains(&format!("{{\"codec\":\"{codec}\",\"rate\":")),
            "{text}"
        );
    }
    // The predicted time is the slowest stage's: at least each of them, and the rate is
    // the bytes over it.
    assert!(field(&text, "file_seconds") > 0.0, "{text}");
    assert_eq!(field(&text, "small_files"), 1.0, "{text}");
    assert!(field(&text, "small_file_seconds") > 0.0, "{text}");
    let predicted = field(&text, "predicted_seconds");
    for stage in [
        3.0 * field(&text, "file_seconds"),
        field(&text, "walk_seconds"),
    ] {
        assert!(predicted >= stage, "{text}");
    }
    let by_rate = field(&text, "bytes") / field(&text, "predicted_rate");
    assert!(
        (predicted - by_rate).abs() < 0.01 + predicted / 100.0,
        "{text}"
    );
    assert_eq!(names(&dst), before, "the probe changed the destination");
    assert_eq!(std::fs::read(dst.join("kept")).unwrap(), b"was here");

    // A destination that does not exist yet is measured where it would be made, and is
    // not made.
    let new = tmp.path().join("new").join("deeper");
    let out = Command::new(haul_bin())
        .args(["probe", "-q"])
        .arg(&src)
        .arg(&new)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!tmp.path().join("new").exists());
    assert_eq!(names(tmp.path()), [b"dst".to_vec(), b"src".to_vec()]);
}

#[test]
fn probe_refuses_what_it_cannot_measure() {
    let out = Command::new(haul_bin())
        .args(["probe", "/nonexistent-haul-probe-src", "/tmp"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Far and local sources mixed, or far sources to a ticket, are usage errors.
    for args in [&["db2:/x", "/a", "/tmp"][..], &["db2:/x", "--to", "-"]] {
        let out = Command::new(haul_bin())
            .arg("probe")
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}

/// `haul probe host:SRC DST` (a pull) through a real sshd: the far end walks and samples
/// the sources as the far user sees them (a relative path in its own working directory,
/// which does not exist here), measures the codecs on them there, and sends the probe
/// streams from there; the destination is measured here. Nothing changes on either side.
#[test]
fn probe_measures_a_far_source_over_ssh() {
    let Some(sshd) = support::sshd::Sshd::start("probe_measures_a_far_source_over_ssh") else {
        return;
    };
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let far_home = tmp.path().join("far-home");
    let src = far_home.join("only-far");
    std::fs::create_dir_all(&src).unwrap();
    write_random_file(&src.join("random"), 4 * MIB, 11);
    std::fs::write(src.join("zeros"), vec![0u8; 16 << 20]).unwrap();
    for i in 0..5 {
        std::fs::write(
            src.join(format!("small{i}")),
            vec![b'a' + i as u8; 1000 * (i + 1)],
        )
        .unwrap();
    }
    let here = tmp.path().join("here");
    std::fs::create_dir(&here).unwrap();
    let dst = tmp.path().join("dst");
    std::fs::create_dir(&dst).unwrap();
    std::fs::write(dst.join("kept"), b"was here").unwrap();
    let (src_before, dst_before) = (names(&src), names(&dst));
    // The far haul runs in far-home: `only-far` is relative to it, as to a login directory.
    let wrapper = sshd.dir().join("haul-in-far-home");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ncd '{}' || exit 1\nexec '{}' \"$@\"\n",
            far_home.display(),
            haul_bin()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();

    let started = Instant::now();
    let out = Command::new(haul_bin())
        .current_dir(&here)
        .args(["probe", "--json", "--streams", "2", "-e"])
        .arg(sshd.rsh())
        .arg("--remote-haul")
        .arg(&wrapper)
        .arg("127.0.0.1:only-far")
        .arg(&dst)
        .output()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(120), "a hang");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}\nsshd log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        sshd.log()
    );
    eprintln!("probe: {text}");
    // The far tree, walked there.
    assert_eq!(field(&text, "files"), 7.0, "{text}");
    assert_eq!(field(&text, "bytes"), (20 * MIB + 15_000) as f64, "{text}");
    assert_eq!(field(&text, "small_files"), 5.0, "{text}");
    assert_eq!(json_field(&text, "walk_complete").as_deref(), Some("true"));
    for key in [
        "read_rate",
        "write_rate",
        "network_rate",
        "file_seconds",
        "small_file_seconds",
        "predicted_rate",
        "predicted_seconds",
    ] {
        assert!(field(&text, key) > 0.0, "{key} in {text}");
    }
    assert_eq!(field(&text, "streams"), 2.0);
    // The codecs ran on the far sample: the zeros (four fifths of the bytes) shrink.
    let lz4 = text
        .split("{\"codec\":\"lz4\",\"rate\":")
        .nth(1)
        .and_then(|r| r.split("\"ratio\":").nth(1))
        .and_then(|r| r.split('}').next())
        .and_then(|r| r.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no lz4 ratio in {text}"));
    assert!(lz4 > 1.0, "{text}");
    assert!(
        ["none", "lz4", "zstd:1", "zstd:3"]
            .contains(&json_field(&text, "compress").unwrap().as_str()),
        "{text}"
    );
    assert_eq!(names(&src), src_before, "the probe changed the far source");
    assert_eq!(names(&dst), dst_before, "the probe changed the destination");
    assert_eq!(std::fs::read(dst.join("kept")).unwrap(), b"was here");
    assert!(dir_names(&here).is_empty());
}

/// `haul probe SRC host:DST` through a real sshd: the far end measures the durable write
/// rate where the copy would write, the streams carry data to it, and the JSON has a
/// network rate; nothing is left at the far destination.
#[test]
fn probe_measures_a_far_destination_over_ssh() {
    let Some(sshd) = support::sshd::Sshd::start("probe_measures_a_far_destination_over_ssh") else {
        return;
    };
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    write_random_file(&src.join("random"), 16 * MIB, 7);
    let dst = tmp.path().join("far");
    std::fs::create_dir(&dst).unwrap();
    std::fs::write(dst.join("kept"), b"was here").unwrap();
    let before = names(&dst);
    let far = format!("127.0.0.1:{}", dst.join("new").display());
    let started = Instant::now();
    let out = Command::new(haul_bin())
        .args(["probe", "--json", "--streams", "2", "-e"])
        .arg(sshd.rsh())
        .arg("--remote-haul")
        .arg(haul_bin())
        .arg(&src)
        .arg(&far)
        .output()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(120), "a hang");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}\nsshd log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        sshd.log()
    );
    eprintln!("probe: {text}");
    for key in [
        "write_rate",
        "network_rate",
        "predicted_rate",
        "file_seconds",
    ] {
        assert!(field(&text, key) > 0.0, "{key} in {text}");
    }
    assert_eq!(field(&text, "streams"), 2.0);
    // Across a network every codec may be chosen; the choice is one of them.
    let codec = json_field(&text, "compress").unwrap();
    assert!(
        ["none", "lz4", "zstd:1", "zstd:3"].contains(&codec.as_str()),
        "{text}"
    );
    assert_eq!(names(&dst), before, "the probe changed the far destination");
    assert!(!dst.join("new").exists());
}

/// `haul probe h1:SRC h2:DST` (remote to remote) through a real sshd, both hosts this one:
/// the sources are walked and their codecs measured at h1, the destination at h2, and the
/// network by h1's probe streams to h2 (dialed directly, as a remote-to-remote copy's
/// sender does). Nothing changes on either side, nor here.
#[test]
fn probe_measures_remote_to_remote_over_ssh() {
    let Some(sshd) = support::sshd::Sshd::start("probe_measures_remote_to_remote_over_ssh") else {
        return;
    };
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    write_random_file(&src.join("random"), 4 * MIB, 5);
    std::fs::write(src.join("zeros"), vec![0u8; 8 << 20]).unwrap();
    std::fs::write(src.join("small"), vec![b'x'; 3000]).unwrap();
    let dst = tmp.path().join("dst");
    std::fs::create_dir(&dst).unwrap();
    std::fs::write(dst.join("kept"), b"was here").unwrap();
    let here = tmp.path().join("here");
    std::fs::create_dir(&here).unwrap();
    let (src_before, dst_before) = (names(&src), names(&dst));
    let started = Instant::now();
    let out = Command::new(haul_bin())
        .current_dir(&here)
        .args(["probe", "--json", "--streams", "2", "-e"])
        .arg(sshd.rsh())
        .arg("--remote-haul")
        .arg(haul_bin())
        .arg(format!("127.0.0.1:{}", src.display()))
        .arg(format!("127.0.0.1:{}", dst.join("new").display()))
        .output()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(120), "a hang");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}\nsshd log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        sshd.log()
    );
    eprintln!("probe: {text}");
    // The source, walked at h1.
    assert_eq!(field(&text, "files"), 3.0, "{text}");
    assert_eq!(field(&text, "bytes"), (12 * MIB + 3000) as f64, "{text}");
    assert_eq!(field(&text, "small_files"), 1.0, "{text}");
    for key in [
        "read_rate",
        "write_rate",
        "network_rate",
        "file_seconds",
        "predicted_rate",
        "predicted_seconds",
    ] {
        assert!(field(&text, key) > 0.0, "{key} in {text}");
    }
    assert_eq!(field(&text, "streams"), 2.0);
    // The predicted time is the bytes at the predicted rate.
    let (bytes, rate) = (field(&text, "bytes"), field(&text, "predicted_rate"));
    let secs = field(&text, "predicted_seconds");
    assert!((bytes / rate - secs).abs() <= secs * 0.01 + 0.002, "{text}");
    assert!(
        ["none", "lz4", "zstd:1", "zstd:3"]
            .contains(&json_field(&text, "compress").unwrap().as_str()),
        "{text}"
    );
    assert_eq!(names(&src), src_before, "the probe changed the source");
    assert_eq!(names(&dst), dst_before, "the probe changed the destination");
    assert!(!dst.join("new").exists());
    assert!(dir_names(&here).is_empty());
}
