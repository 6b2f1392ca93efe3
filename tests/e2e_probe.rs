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
    // The predicted time is the bytes over the rate plus each file's cost.
    assert!(field(&text, "file_seconds") > 0.0, "{text}");
    let predicted =
        field(&text, "bytes") / field(&text, "predicted_rate") + 3.0 * field(&text, "file_seconds");
    assert!((field(&text, "predicted_seconds") - predicted).abs() < 0.1 + predicted / 100.0);
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
    // The sources are read here: a far one is a usage error.
    let out = Command::new(haul_bin())
        .args(["probe", "db2:/x", "/tmp"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
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
