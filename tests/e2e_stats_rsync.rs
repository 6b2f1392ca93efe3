//! `--stats` means what rsync's means, with rsync itself as the oracle: a 1 TiB sparse file
//! counts its length in "Total file size" and "Total transferred file size" (not the 4 KiB
//! it occupies, nor the 0 bytes of data sent for it), a hardlinked file counts once per
//! name among the regular files, a symlink its target's length.

mod support;

use std::fs;
use std::process::Command;

use support::*;

/// The number after `label` in `text` (digits and commas), e.g. "Total file size: 1,234".
fn number(text: &str, label: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} in\n{text}"));
    let digits: String = line[label.len()..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(|c| *c != ',')
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number in {line:?}"))
}

/// "reg: N" and "dir: N" of the "Number of files:" line.
fn kind(text: &str, name: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.starts_with("Number of files:"))
        .unwrap_or_else(|| panic!("no file count in\n{text}"));
    let at = line
        .find(&format!("{name}: "))
        .unwrap_or_else(|| panic!("no {name} in {line:?}"));
    number(&line[at..], &format!("{name}: "))
}

#[test]
fn stats_count_lengths_and_every_name_as_rsync_does() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("a"), b"hello").unwrap();
    fs::hard_link(src.join("a"), src.join("sub/a2")).unwrap();
    fs::write(src.join("sub/b"), b"xyz").unwrap();
    std::os::unix::fs::symlink("a", src.join("link")).unwrap();
    let sparse = fs::File::create(src.join("sparse")).unwrap();
    sparse.set_len(1 << 40).unwrap();
    drop(sparse);

    // A dry run: rsync would read the 1 TiB of holes (its counts are those of a real run).
    let rsync = {
        let out = Command::new("rsync")
            .args(["-aH", "--stats", "--dry-run"])
            .arg(with_slash(&src))
            .arg(tmp.path().join("r"))
            .output()
            .unwrap_or_else(|e| panic!("cannot run rsync: {e}"));
        assert!(out.status.success(), "rsync failed: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let compare = |theirs: &str, ours: &str| {
        for label in [
            "Number of files:",
            "Number of regular files transferred:",
            "Total file size:",
            // The sparse file's length, not the 0 bytes of data sent for it.
            "Total transferred file size:",
            "total size is",
        ] {
            assert_eq!(
                number(ours, label),
                number(theirs, label),
                "{label}\n--- haul ---\n{ours}\n--- rsync ---\n{theirs}"
            );
        }
        for name in ["reg", "dir"] {
            assert_eq!(
                kind(ours, name),
                kind(theirs, name),
                "{name}\n{ours}\n{theirs}"
            );
        }
    };

    // Before: "Total file size: 8 bytes" ("total size is 8") and "reg: 3" where rsync
    // says 1,099,511,627,790 and "reg: 4".
    let dry = copy(
        &[&with_slash(&src)],
        &tmp.path().join("h1"),
        &["--stats", "--dry-run"],
    );
    dry.assert_code(0);
    compare(&rsync, &String::from_utf8_lossy(&dry.stdout));

    let wet = copy(&[&with_slash(&src)], &tmp.path().join("h2"), &["--stats"]);
    wet.assert_code(0);
    compare(&rsync, &String::from_utf8_lossy(&wet.stdout));

    // The receiver counts as the sender does (a pull, `haul recv --stats`).
    let (sent, received) = transfer(
        &[&with_slash(&src)],
        &tmp.path().join("h3"),
        &[],
        &["--stats"],
    );
    sent.assert_code(0);
    received.assert_code(0);
    compare(&rsync, &received.stderr);
}
