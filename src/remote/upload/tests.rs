//! The far script run here with `sh`, a temporary HOME and a shell script standing in for
//! the binary: what it caches, when it runs the cached copy, and what it refuses.

use super::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Output, Stdio};

/// A stand-in "binary": appends a line to `marker` each time it runs.
fn body(marker: &Path) -> Vec<u8> {
    format!("#!/bin/sh\necho ran >> '{}'\n", marker.display()).into_bytes()
}

fn sha(bytes: &[u8]) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref())
}

/// Runs the bootstrap script with `input` on stdin, HOME and TMPDIR in `dir`.
fn run(script: &str, dir: &Path, input: &[u8]) -> Output {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .env("HOME", dir.join("home"))
        .env_remove("XDG_CACHE_HOME")
        .env("TMPDIR", dir.join("tmp"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The script may not read it all (a cached copy runs without an upload).
    let _ = child.stdin.take().unwrap().write_all(input);
    child.wait_with_output().unwrap()
}

fn setup() -> (tempfile::TempDir, Vec<u8>, String) {
    let d = tempfile::tempdir().unwrap();
    for sub in ["home", "tmp"] {
        std::fs::create_dir(d.path().join(sub)).unwrap();
        std::fs::set_permissions(d.path().join(sub), PermissionsExt::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(d.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let b = body(&d.path().join("ran"));
    let h = sha(&b);
    (d, b, h)
}

fn runs(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("ran"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

#[test]
fn script_is_plain_sh() {
    for cache in [false, true] {
        let s = bootstrap_script("/opt/my haul/it's", 1234, "ab12", cache);
        assert!(s.contains("= 'ab12  -' ]"));
        assert!(s.contains(r"h='/opt/my haul/it'\''s'"));
        assert!(s.contains("head -c 1234 "));
        assert!(s.contains(&format!("= '{}' ]", wire::greeting(None))));
        let ok = Command::new("sh").args(["-n", "-c", &s]).status().unwrap();
        assert!(ok.success(), "{s}");
    }
}

/// A damaged upload is refused before it runs: the "binary" is sent with the hash of
/// other bytes.
#[test]
fn damaged_upload_is_not_run() {
    for cache in [false, true] {
        let (d, b, good) = setup();
        let zeros = "0".repeat(64);
        let out = run(
            &bootstrap_script("/nonexistent/haul", b.len() as u64, &zeros, cache),
            d.path(),
            &b,
        );
        assert!(!out.status.success());
        assert_eq!(runs(d.path()), 0, "the damaged upload was run");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("damaged"),
            "{out:?}"
        );
        // The same bytes with their own hash are run.
        let out = run(
            &bootstrap_script("/nonexistent/haul", b.len() as u64, &good, cache),
            d.path(),
            &b,
        );
        assert_eq!(runs(d.path()), 1, "an intact upload was not run: {out:?}");
    }
}

#[test]
fn the_second_run_uses_the_cached_copy() {
    let (d, b, h) = setup();
    let script = bootstrap_script("/nonexistent/haul", b.len() as u64, &h, true);
    let first = run(&script, d.path(), &b);
    assert_eq!(
        stdout(&first),
        format!("{UPLOAD_CACHE_LINE}\n"),
        "{first:?}"
    );
    let base = d.path().join("home/.cache/haul");
    let cached = base.join(&h).join("haul");
    assert_eq!(std::fs::read(&cached).unwrap(), b);
    assert_eq!(
        (mode(&base), mode(&base.join(&h)), mode(&cached)),
        (0o700, 0o700, 0o700)
    );
    // Nothing on stdin this time: the cached copy runs without an upload.
    let second = run(&script, d.path(), b"");
    assert_eq!(stdout(&second), format!("{CACHED_LINE}\n"), "{second:?}");
    assert_eq!(runs(d.path()), 2);
    // Nothing left in the temporary directory.
    assert_eq!(std::fs::read_dir(d.path().join("tmp")).unwrap().count(), 0);
}

#[test]
fn a_tampered_cached_copy_is_replaced_not_run() {
    let (d, b, h) = setup();
    let script = bootstrap_script("/nonexistent/haul", b.len() as u64, &h, true);
    run(&script, d.path(), &b);
    let cached = d.path().join("home/.cache/haul").join(&h).join("haul");
    let evil = d.path().join("evil");
    std::fs::write(&cached, format!("#!/bin/sh\ntouch '{}'\n", evil.display())).unwrap();
    let out = run(&script, d.path(), &b);
    assert!(!evil.exists(), "the tampered copy was run");
    assert_eq!(stdout(&out), format!("{UPLOAD_CACHE_LINE}\n"), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("damaged"),
        "{out:?}"
    );
    assert_eq!(
        std::fs::read(&cached).unwrap(),
        b,
        "replaced with the upload"
    );
    assert_eq!(runs(d.path()), 2);
}

#[test]
fn a_cache_others_can_write_or_a_symlink_is_not_used() {
    let (d, b, h) = setup();
    let script = bootstrap_script("/nonexistent/haul", b.len() as u64, &h, true);
    let cache = d.path().join("home/.cache");
    std::fs::create_dir(&cache).unwrap();
    std::fs::set_permissions(&cache, PermissionsExt::from_mode(0o777)).unwrap();
    let out = run(&script, d.path(), &b);
    assert_eq!(stdout(&out), format!("{UPLOAD_LINE}\n"), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not caching"),
        "{out:?}"
    );
    assert_eq!(runs(d.path()), 1);
    // A symlink where the cache directory would be.
    std::fs::set_permissions(&cache, PermissionsExt::from_mode(0o700)).unwrap();
    assert!(
        !cache.join("haul").exists(),
        "nothing is made in a cache others can write"
    );
    let elsewhere = d.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, cache.join("haul")).unwrap();
    let out = run(&script, d.path(), &b);
    assert_eq!(stdout(&out), format!("{UPLOAD_LINE}\n"), "{out:?}");
    assert!(!elsewhere.join(&h).join("haul").exists());
}

#[test]
fn no_cache_writes_no_cache_and_leaves_nothing() {
    let (d, b, h) = setup();
    let script = bootstrap_script("/nonexistent/haul", b.len() as u64, &h, false);
    let out = run(&script, d.path(), &b);
    assert_eq!(stdout(&out), format!("{UPLOAD_LINE}\n"), "{out:?}");
    assert_eq!(runs(d.path()), 1);
    assert!(!d.path().join("home/.cache").exists());
    assert_eq!(std::fs::read_dir(d.path().join("tmp")).unwrap().count(), 0);
}

#[test]
fn a_new_version_replaces_the_old_ones_cached_copy() {
    let (d, b, h) = setup();
    run(
        &bootstrap_script("/nonexistent/haul", b.len() as u64, &h, true),
        d.path(),
        &b,
    );
    let mut b2 = b.clone();
    b2.extend_from_slice(b"# another version\n");
    let h2 = sha(&b2);
    let out = run(
        &bootstrap_script("/nonexistent/haul", b2.len() as u64, &h2, true),
        d.path(),
        &b2,
    );
    assert_eq!(stdout(&out), format!("{UPLOAD_CACHE_LINE}\n"), "{out:?}");
    let base = d.path().join("home/.cache/haul");
    let left: Vec<_> = std::fs::read_dir(&base)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from(&h2)]);
}
