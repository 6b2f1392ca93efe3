//! Disk full at the destination: a small tmpfs (needs root to mount; the test says so and
//! returns when it cannot mount). Both a large file (caught by fallocate) and many small
//! files (caught by write) must end with exit 4, a one-line hint, and no file under its
//! final name.

use std::path::Path;
use std::process::{Command, Output};

struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            eprintln!("SKIPPED: cannot mount a tmpfs here (not root?)");
            return None;
        }
        Some(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn haul(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_haul"))
        .args(args)
        .output()
        .expect("run haul")
}

fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(n);
    let mut h = blake3::Hasher::new();
    h.update(&seed.to_le_bytes());
    let mut r = h.finalize_xof();
    out.resize(n, 0);
    r.fill(&mut out);
    out
}

fn assert_disk_full(out: &Output, dest: &Path, names: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "stderr: {err}");
    assert!(err.contains("free some space"), "stderr: {err}");
    assert_eq!(
        err.lines().filter(|l| l.contains("error")).count(),
        1,
        "one error line expected: {err}"
    );
    for n in names {
        assert!(
            !dest.join(n).exists(),
            "{n} exists under its final name after a failed transfer"
        );
    }
}

#[test]
fn large_file_on_full_disk() {
    let Some(fs) = Tmpfs::mount("8m") else { return };
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("big"), random_bytes(20 << 20, 1)).unwrap();
    let dest = fs.path().join("d");
    let out = haul(&[
        "copy".as_ref(),
        "-q".as_ref(),
        src.path().join("big").as_os_str(),
        dest.as_os_str(),
    ]);
    assert_disk_full(&out, fs.path(), &["d"]);
}

#[test]
fn many_small_files_on_full_disk() {
    let Some(fs) = Tmpfs::mount("8m") else { return };
    let src = tempfile::tempdir().unwrap();
    let tree = src.path().join("t");
    std::fs::create_dir(&tree).unwrap();
    let mut names = Vec::new();
    for i in 0..200 {
        let n = format!("f{i}");
        std::fs::write(tree.join(&n), random_bytes(100 << 10, i)).unwrap();
        names.push(n);
    }
    let dest = fs.path().join("d");
    let out = haul(&[
        "copy".as_ref(),
        "-q".as_ref(),
        tree.as_os_str(),
        dest.as_os_str(),
    ]);
    let names: Vec<String> = names.iter().map(|n| format!("t/{n}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    // Some files may have completed before the disk filled; the ones that exist under
    // their final name must be complete and correct.
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "stderr: {err}");
    assert!(err.contains("free some space"), "stderr: {err}");
    for (i, n) in refs.iter().enumerate() {
        let p = dest.join(n);
        if p.exists() {
            assert_eq!(
                std::fs::read(&p).unwrap(),
                random_bytes(100 << 10, i as u64),
                "{n}"
            );
        }
    }
}

/// The case: two 12 MiB files into a 20 MB tmpfs fail with exit 4; after the file
/// system grows to 40 MB, the re-run must not send again a file that had arrived whole
/// (under its final name, or still as a partial file: the transfer stopped while it was
/// being finished), nor the journaled part of the other.
#[test]
fn rerun_after_disk_full_skips_what_arrived() {
    let Some(fs) = Tmpfs::mount("20m") else {
        return;
    };
    let src = tempfile::tempdir().unwrap();
    let tree = src.path().join("t");
    std::fs::create_dir(&tree).unwrap();
    let content = |i: usize| random_bytes(12 << 20, 10 + i as u64);
    for (i, n) in ["a", "b"].iter().enumerate() {
        std::fs::write(tree.join(n), content(i)).unwrap();
    }
    let dest = fs.path().join("d");
    let args = [
        "copy".as_ref(),
        "--json".as_ref(),
        tree.as_os_str(),
        dest.as_os_str(),
    ];
    let first = haul(&args);
    assert_disk_full(&first, &dest, &[]);
    // Which files are on the disk whole, under any name.
    let mut whole = 0u64;
    for entry in std::fs::read_dir(dest.join("t")).unwrap() {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        whole += (0..2).filter(|&i| data == content(i)).count() as u64;
    }
    let remounted = Command::new("mount")
        .args(["-o", "remount,size=40m"])
        .arg(fs.path())
        .status()
        .unwrap();
    assert!(remounted.success(), "remount to 40m");
    let again = haul(&args);
    let out = String::from_utf8_lossy(&again.stdout);
    let err = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(0), "stdout: {out}\nstderr: {err}");
    for (i, n) in ["a", "b"].iter().enumerate() {
        let got = std::fs::read(dest.join("t").join(n)).unwrap();
        assert!(got == content(i), "t/{n} differs");
    }
    let field = |key: &str| -> u64 {
        let at = out.find(&format!("\"{key}\":")).expect(key) + key.len() + 3;
        let digits: String = out[at..].chars().take_while(char::is_ascii_digit).collect();
        digits.parse().unwrap()
    };
    assert!(
        field("bytes_skipped") >= whole * (12 << 20),
        "{whole} file(s) had arrived whole and were sent again: {out}"
    );
    assert_eq!(
        field("bytes_read") + field("bytes_skipped"),
        24 << 20,
        "{out}"
    );
}
