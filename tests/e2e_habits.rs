//! What a user with rsync habits runs into in the first hour, through the real binary:
//! refusals that come before anything is sent, at the start rather than when a sender
//! connects, and a `--json` object on failure too; and destinations rsync copes with: a
//! directory an earlier run left mode 000, a directory where the source now has a file,
//! `--delete` when part of the source cannot be read.

mod support;

use std::process::Command;

use support::process::TICKET_PREFIX;
use support::tree::chown_tree;
use support::*;

fn run(args: &[&str]) -> std::process::Output {
    Command::new(haul_bin()).args(args).output().unwrap()
}

#[test]
fn two_sources_with_one_name_are_refused_before_anything_is_sent() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    std::fs::write(a.join("x"), b"1").unwrap();
    std::fs::write(b.join("x"), b"2").unwrap();
    let dst = tmp.path().join("dst");
    let out = run(&[
        "copy",
        a.join("x").to_str().unwrap(),
        b.join("x").to_str().unwrap(),
        dst.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("would both arrive as x"), "{err}");
    assert!(!dst.exists(), "nothing may be created");
}

#[test]
fn recv_fails_at_start_on_a_file_or_an_unwritable_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let out = run(&["recv", file.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not a directory") && err.contains("--stream"),
        "{err}"
    );
    // No ticket: the only stdout line is the JSON object saying why, with the code.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains(TICKET_PREFIX), "{stdout}");
    assert!(
        stdout.starts_with("{\"error\":\"cannot write destination ")
            && stdout.trim_end().ends_with(",\"exit_code\":4}"),
        "{stdout}"
    );
    if is_root() {
        // A directory its user cannot write: refused before a ticket is printed.
        let ro = tmp.path().join("ro");
        std::fs::create_dir(&ro).unwrap();
        let out = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                haul_bin(),
                "recv",
            ])
            .arg(&ro)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(4), "{out:?}");
        assert!(out.stdout.is_empty(), "{out:?}");
    }
}

#[test]
fn json_reports_a_bad_command_line_too() {
    let out = run(&["send", "/nonexistent-x", "--to", "haul1-garbage", "--json"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("{\"error\":") && stdout.contains("\"exit_code\":2}"),
        "{stdout}"
    );
}

/// Makes `depth` nested directories of 200-byte names under `root` (with `fd`-relative
/// calls: their paths pass the 4096 bytes a path may have), and a file `f` in the deepest.
fn deep_chain(root: &std::path::Path, depth: usize) {
    use rustix::fs::{mkdirat, openat, Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW;
    let mut dir = openat(rustix::fs::CWD, root, flags, Mode::empty()).unwrap();
    for i in 0..depth {
        let name = format!("d{i:02}{}", "x".repeat(197));
        mkdirat(&dir, name.as_str(), Mode::from_raw_mode(0o755)).unwrap();
        dir = openat(&dir, name.as_str(), flags, Mode::empty()).unwrap();
    }
    let f = openat(
        &dir,
        "f",
        OFlags::WRONLY | OFlags::CREATE,
        Mode::from_raw_mode(0o644),
    );
    rustix::io::write(f.unwrap(), b"deep").unwrap();
}

/// The case: a path over 4096 bytes cannot be sent. The rest arrives, the run exits
/// 23 as rsync does, every line names the path shortened, and none of the directories that
/// held only that path is created at the destination.
#[test]
fn a_path_over_4096_bytes_fails_in_one_short_line_and_leaves_no_empty_dirs() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("short"), b"here").unwrap();
    std::fs::create_dir(src.join("empty")).unwrap();
    deep_chain(&src, 22);
    let dst = tmp.path().join("dst");
    let out = run(&["copy", src.to_str().unwrap(), dst.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(23), "{err}");
    assert_eq!(std::fs::read(dst.join("src/short")).unwrap(), b"here");
    assert!(
        dst.join("src/empty").is_dir(),
        "an empty source directory still arrives"
    );
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines.iter().all(|l| l.len() < 400),
        "a line too long to read: {err}"
    );
    let errors = lines
        .iter()
        .filter(|l| l.starts_with("haul: error:"))
        .count();
    assert_eq!(errors, 1, "{err}");
    assert!(err.contains('…') && err.contains("too long"), "{err}");
    let made: Vec<_> = std::fs::read_dir(dst.join("src"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        !made.iter().any(|n| n.to_string_lossy().starts_with("d00")),
        "directories made only for the long path: {made:?}"
    );
}

/// `--delete` with part of the source unreadable deletes nothing, as rsync does ("IO error
/// encountered -- skipping file deletion"): what the sender could not list is missing from
/// its manifest, and its copy at the destination only looks extraneous. Before, the files
/// of `locked/` at the destination were deleted. Both runs go through send and recv (a
/// local copy); as root, haul runs as `nobody` so that mode 000 stops it.
#[test]
fn delete_deletes_nothing_when_part_of_the_source_could_not_be_read() {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;
    let Some((haul, tmp)) = unprivileged_tempdir("delete_deletes_nothing_when_part") else {
        return;
    };
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    for d in [&src, &dst] {
        fs::create_dir_all(d.join("keep")).unwrap();
        fs::create_dir_all(d.join("locked")).unwrap();
        fs::write(d.join("keep/a"), b"a").unwrap();
        fs::write(d.join("locked/b"), b"b").unwrap();
    }
    fs::write(dst.join("locked/precious"), b"only here").unwrap();
    fs::write(dst.join("extra"), b"extraneous").unwrap();
    if is_root() {
        chown_tree(&src, NOBODY, NOGROUP);
        chown_tree(&dst, NOBODY, NOGROUP);
    }
    fs::set_permissions(src.join("locked"), fs::Permissions::from_mode(0o000)).unwrap();

    let out = haul.copy(&[&with_slash(&src)], &dst, &["--delete"]);
    out.assert_code(23);
    for kept in ["locked/b", "locked/precious", "extra", "keep/a"] {
        assert!(
            dst.join(kept).exists(),
            "{kept} was deleted\n{}",
            out.describe()
        );
    }
    assert!(
        out.stderr.contains("--delete deletes nothing"),
        "no warning that nothing is deleted\n{}",
        out.describe()
    );

    // All of it readable again (the copy of `locked/` took its mode 000 with it: made
    // searchable too), the next run deletes what the source lacks.
    for d in [&src, &dst] {
        fs::set_permissions(d.join("locked"), fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = haul.copy(&[&with_slash(&src)], &dst, &["--delete"]);
    out.assert_code(0);
    assert!(!dst.join("extra").exists() && !dst.join("locked/precious").exists());
    assert_eq!(fs::read(dst.join("locked/b")).unwrap(), b"b");
}

/// A destination directory of mode 000 that belongs to the receiving user (an earlier run
/// gave it its source's mode) is filled and emptied again, as rsync does: made u+rwx for
/// the run, its source's mode applied at the end. Before, haul failed with exit 4: "cannot
/// write destination …/d: Permission denied".
#[test]
fn a_destination_directory_left_000_is_filled_and_emptied_again() {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;
    let Some((haul, tmp)) = unprivileged_tempdir("a_destination_directory_left_000") else {
        return;
    };
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    fs::create_dir_all(src.join("d")).unwrap();
    fs::write(src.join("d/f"), b"new").unwrap();
    fs::create_dir_all(dst.join("d/sub")).unwrap();
    fs::write(dst.join("d/extra"), b"x").unwrap();
    fs::write(dst.join("d/sub/y"), b"y").unwrap();
    if is_root() {
        chown_tree(&src, NOBODY, NOGROUP);
        chown_tree(&dst, NOBODY, NOGROUP);
    }
    for d in ["d/sub", "d"] {
        fs::set_permissions(dst.join(d), fs::Permissions::from_mode(0o000)).unwrap();
    }

    let out = haul.copy(&[&with_slash(&src)], &dst, &["--delete"]);
    out.assert_code(0);
    let mode = fs::metadata(dst.join("d")).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o755, "{}", out.describe());
    assert_eq!(fs::read(dst.join("d/f")).unwrap(), b"new");
    assert!(!dst.join("d/extra").exists() && !dst.join("d/sub").exists());
}

/// A directory at the destination where the source now has a file, a symlink or a
/// hardlink is cleared as rsync clears it: an empty one always, one with content only
/// with `--delete` (without, the run fails naming it and leaves no temporary name).
/// Before, every case failed with "Is a directory" and left a `.haul-…` name behind.
#[test]
fn a_directory_in_the_way_of_a_file_is_replaced_as_rsync_does() {
    use std::fs;
    let tmp = tempfile::tempdir().unwrap();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("file"), b"file").unwrap();
    std::os::unix::fs::symlink("target", src.join("link")).unwrap();
    fs::hard_link(src.join("file"), src.join("hard")).unwrap();
    let leftovers = |d: &std::path::Path| -> Vec<String> {
        fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".haul-"))
            .collect()
    };

    // Empty directories in the way: removed without --delete.
    for name in ["file", "link", "hard"] {
        fs::create_dir_all(dst.join(name)).unwrap();
    }
    let out = copy(&[&with_slash(&src)], &dst, &[]);
    out.assert_code(0);
    assert_eq!(fs::read(dst.join("hard")).unwrap(), b"file");
    assert_eq!(
        fs::read_link(dst.join("link")).unwrap().as_os_str(),
        "target"
    );

    // With content: refused without --delete, replaced with it.
    fs::remove_dir_all(&dst).unwrap();
    for name in ["file", "link", "hard"] {
        fs::create_dir_all(dst.join(name).join("sub")).unwrap();
        fs::write(dst.join(name).join("sub/old"), b"old").unwrap();
    }
    let out = copy(&[&with_slash(&src)], &dst, &[]);
    assert_ne!(out.code(), Some(0), "{}", out.describe());
    assert!(
        out.stderr.contains("--delete replaces it"),
        "{}",
        out.describe()
    );
    assert_eq!(leftovers(&dst), Vec::<String>::new());
    let out = copy(&[&with_slash(&src)], &dst, &["--delete"]);
    out.assert_code(0);
    assert_eq!(fs::read(dst.join("file")).unwrap(), b"file");
    assert_eq!(fs::read(dst.join("hard")).unwrap(), b"file");
    assert_eq!(
        fs::read_link(dst.join("link")).unwrap().as_os_str(),
        "target"
    );
    assert_eq!(leftovers(&dst), Vec::<String>::new());
}

/// Runs haul with its stdout a terminal (a pty, as `zstd -d` and `gzip -d` see one),
/// killed if it overruns; the exit status, what reached the terminal, and stderr.
fn on_a_terminal(args: &[&std::ffi::OsStr]) -> (std::process::ExitStatus, Vec<u8>, String) {
    use std::os::fd::FromRawFd;
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two descriptors into the two ints and reads nothing else
    // (null name, termios and window size).
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened for us and are owned by nothing else.
    let (master, slave) = unsafe {
        (
            std::fs::File::from_raw_fd(master),
            std::fs::File::from_raw_fd(slave),
        )
    };
    let mut cmd = Command::new(haul_bin());
    cmd.args(args)
        .stdout(slave)
        .stdin(std::process::Stdio::null());
    let proc = Running::spawn_with_stdout("(tty)", cmd);
    // Once haul and the pty's last other holder are gone, reading ends (EIO or EOF).
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = std::io::Read::read_to_end(&mut &master, &mut all);
        all
    });
    let out = proc.wait();
    (out.status, reader.join().unwrap(), out.stderr)
}

#[test]
fn a_stream_is_not_written_to_a_terminal_unless_forced() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("data.bin");
    std::fs::write(&file, b"\x00\x01binary\xff").unwrap();
    let f = file.as_os_str();
    let dash = std::ffi::OsStr::new("-");
    let (status, shown, err) = on_a_terminal(&["copy".as_ref(), f, dash]);
    assert_eq!(status.code(), Some(2), "copy FILE - to a terminal: {err}");
    assert!(err.contains("terminal") && err.contains("--force"), "{err}");
    assert!(!shown.windows(6).any(|w| w == b"binary"), "{shown:?}");
    // A receiver refuses before it prints a ticket (--timeout: before the fix it waited).
    let (status, _, err) =
        on_a_terminal(&["recv".as_ref(), dash, "--timeout".as_ref(), "1".as_ref()]);
    assert_eq!(status.code(), Some(2), "recv - to a terminal: {err}");
    assert!(!err.contains(support::process::TICKET_PREFIX), "{err}");
    // --force insists.
    let (status, shown, err) = on_a_terminal(&["copy".as_ref(), "--force".as_ref(), f, dash]);
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(shown.windows(6).any(|w| w == b"binary"), "{shown:?}");
}

#[test]
fn plan_check_of_a_far_destination_is_refused_and_says_where_to_run_it() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), b"data").unwrap();
    let plan = tmp.path().join("plan");
    let made = Haul::new().run(&[
        "plan".as_ref(),
        src.as_os_str(),
        "--shards".as_ref(),
        "2".as_ref(),
        "--out".as_ref(),
        plan.as_os_str(),
    ]);
    made.assert_code(0);
    // Before: db1:shd was read as a local path and every entry reported missing (25).
    let check = Haul::new().run(&[
        "plan".as_ref(),
        "--check".as_ref(),
        plan.as_os_str(),
        "db1:shd".as_ref(),
    ]);
    check.assert_code(2);
    assert!(
        check.stderr.contains("db1") && check.stderr.contains("there"),
        "{}",
        check.stderr
    );
}

#[test]
fn rsync_options_haul_lacks_get_their_own_advice_not_a_lookalike() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::write(&a, b"1").unwrap();
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    // clap used to suggest --size, --links, --remote-haul, --files-from.
    for (args, want, lookalike) in [
        (
            &["copy", "--max-size=1M", a, b][..],
            "rsync's --max-size: not supported yet (issue 39)",
            "--size'",
        ),
        (
            &["copy", "--link-dest=/x", a, b],
            "rsync's --link-dest: not supported yet",
            "--links",
        ),
        (
            &["copy", "--remove-source-files", a, b],
            "exited 0",
            "--remote-haul",
        ),
        (
            &["copy", "--filter=- *.tmp", a, b],
            "--exclude",
            "--files-from",
        ),
        (
            &["copy", "-avO", a, b],
            "rsync's -O: not supported yet",
            "tip",
        ),
        (
            &["copy", "--rsync-path=/opt/haul", a, b],
            "use --remote-haul",
            "tip",
        ),
        (
            &["probe", "--delete", a, b],
            "--delete does not apply to `haul probe`",
            "tip",
        ),
    ] {
        let out = run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains(lookalike), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
    }
    assert!(!std::path::Path::new(b).exists());
}

#[test]
fn options_that_do_not_apply_are_refused_and_a_zero_limit_is_no_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    std::fs::write(&a, b"1").unwrap();
    let b = tmp.path().join("b");
    // Before: accepted and ignored.
    for opt in [&["--size", "5"][..], &["--buffer", "8M"]] {
        let out = support::copy(&[&a], &b, opt);
        out.assert_code(2);
        assert!(out.stderr.contains("applies to a stream"), "{}", out.stderr);
    }
    assert!(!b.exists());
    // rsync: --bwlimit=0 is no limit (before: "invalid rate '0'").
    for (i, opt) in ["--bwlimit=0", "--limit=0"].iter().enumerate() {
        let dst = tmp.path().join(format!("b{i}"));
        support::copy(&[&a], &dst, &[opt]).assert_code(0);
        assert_eq!(std::fs::read(&dst).unwrap(), b"1");
    }
}

#[test]
fn a_bad_command_line_is_told_haul_error_as_every_other_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::write(&a, b"1").unwrap();
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    // Before: "error: rsync's --size-only: not supported yet (issue 39)…", where every
    // other message of haul begins "haul: error: ".
    for args in [
        &["copy", "--max-size=1M", a, b][..],
        &["copy", "-avO", a, b],
        &["probe", "--delete", a, b],
        &["copy", "--no-such-option", a, b],
        &["copy", "--limit", "fast", a, b],
    ] {
        let out = run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with("haul: error: "), "{args:?}: {err}");
        assert!(!err.contains("haul: haul:"), "{args:?}: {err}");
    }
}
