//! `--json` on every exit code of README's table that a test can provoke: each run prints
//! exactly one JSON object on stdout, and it ends with that run's `exit_code` (with an
//! `error` when not 0), whatever path ended the run: a bad command line (clap's or ours), a
//! missing source, an unwritable destination, a receiver gone, a wrong secret, a partial
//! run (23), files that kept changing (24), `plan --check` (25), a signal (143). The
//! counters of a partial run add up: what was read is what was written.

mod support;

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use haul::transport::{Secret, Ticket};
use support::pipe_harness::json_field;
use support::*;

/// The one object `out` printed on stdout (after the ticket line of a receiver): panics
/// unless stdout holds exactly one line that is a JSON object ending with its exit code.
fn one_object(out: &Outcome, skip_first: bool) -> String {
    let text = String::from_utf8_lossy(match skip_first {
        true => out.stdout_after_first_line(),
        false => &out.stdout,
    })
    .into_owned();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "not one line of JSON\n{}", out.describe());
    let line = lines[0];
    assert!(
        line.starts_with('{') && line.ends_with('}'),
        "not a JSON object: {line}\n{}",
        out.describe()
    );
    let code = out.code().map_or(-1, |c| c);
    assert!(
        line.ends_with(&format!("\"exit_code\":{code}}}")),
        "the object does not end with exit_code {code}: {line}\n{}",
        out.describe()
    );
    assert_eq!(
        line.contains("\"error\":"),
        code != 0,
        "an error iff the exit code is not 0: {line}"
    );
    line.to_string()
}

fn field(json: &str, key: &str) -> u64 {
    json_field(json, key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number {key} in {json}"))
}

fn haul(args: &[&str]) -> Outcome {
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
    Haul::new().run(&args)
}

#[test]
fn every_exit_code_prints_one_object_with_it() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("a"), b"hello").unwrap();
    let s = src.to_str().unwrap();

    // 0
    let out = copy(&[&src], &tmp.path().join("d0"), &["--json"]);
    out.assert_code(0);
    let j = one_object(&out, false);
    assert_eq!(field(&j, "files"), 1, "{j}");

    // 2: an option clap does not know (before: clap's text only), and one we refuse.
    let d2 = tmp.path().join("d2");
    let d2 = d2.to_str().unwrap();
    let out = haul(&["copy", "--json", "--no-such-option", s, d2]);
    out.assert_code(2);
    one_object(&out, false);
    let out = haul(&["copy", "--json", "--streams", "0", s, d2]);
    out.assert_code(2);
    one_object(&out, false);

    // 3: a missing source.
    let out = haul(&["copy", "--json", "/nonexistent/haul-json", d2]);
    out.assert_code(3);
    one_object(&out, false);

    // 4: a destination beneath a regular file.
    let out = copy(&[&src], &src.join("a").join("sub"), &["--json"]);
    out.assert_code(4);
    one_object(&out, false);
}

#[test]
fn network_and_authentication_failures_print_one_object() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("f");
    fs::write(&file, b"x").unwrap();
    let dest = tmp.path().join("dest");
    let recv = recv(&dest, &["--json"]);
    let ticket = recv.ticket.clone();

    // 6: the right address, the wrong secret.
    let mut t = Ticket::parse(&ticket).unwrap();
    let mut bytes = *t.secret.as_bytes();
    bytes[0] ^= 1;
    t.secret = Secret::from_bytes(bytes);
    let out = send(&[&file], &t.encode(), &["--json"]);
    out.assert_code(6);
    one_object(&out, false);

    // 143: the receiver stopped by SIGTERM while it waits.
    let pid = recv.proc.pid();
    // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    let stopped = recv.wait();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        stopped.status.signal(),
        Some(libc::SIGTERM),
        "{}",
        stopped.describe()
    );
    let text = String::from_utf8_lossy(stopped.stdout_after_first_line()).into_owned();
    assert_eq!(
        text.trim_end(),
        r#"{"error":"stopped by SIGTERM","exit_code":143}"#,
        "{}",
        stopped.describe()
    );

    // 5: nobody listens there any more.
    let out = send(&[&file], &ticket, &["--json", "--retries", "0"]);
    out.assert_code(5);
    one_object(&out, false);
}

#[test]
fn a_partial_run_prints_its_summary_with_exit_23_and_counters_that_add_up() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("a"), b"ab").unwrap();
    fs::write(src.join("b"), b"cd").unwrap();
    std::os::unix::fs::symlink("nowhere", src.join("dangling")).unwrap();
    let dest = tmp.path().join("dest");
    let out = copy(&[&with_slash(&src)], &dest, &["--json", "-L"]);
    out.assert_code(23);
    let j = one_object(&out, false);
    assert_eq!(field(&j, "failed_files"), 1, "{j}");
    assert_eq!(field(&j, "files"), 2, "{j}");
    assert_eq!(
        field(&j, "bytes_read"),
        field(&j, "bytes_written"),
        "what was read is what was written: {j}"
    );
    assert_eq!(field(&j, "bytes_written"), 4, "{j}");
}

#[test]
fn both_ends_of_a_network_run_agree_on_a_source_entry_the_walk_could_not_read() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("a"), b"ab").unwrap();
    std::os::unix::fs::symlink("nowhere", src.join("dangling")).unwrap();
    let dest = tmp.path().join("dest");
    let (sent, received) = transfer(&[&with_slash(&src)], &dest, &["--json", "-L"], &["--json"]);
    // Before: the sender exited 23 with failed_files 1, the receiver 0 with failed_files 0
    // (the walk's failure never reached it: it has no manifest entry).
    for (side, out, skip_ticket) in [("sender", &sent, false), ("receiver", &received, true)] {
        out.assert_code(23);
        let j = one_object(out, skip_ticket);
        assert_eq!(field(&j, "failed_files"), 1, "{side}: {j}");
        assert_eq!(field(&j, "files"), 1, "{side}: {j}");
    }
    assert_eq!(fs::read(dest.join("a")).unwrap(), b"ab");
}

#[test]
fn files_that_keep_changing_print_the_summary_with_exit_24() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    let hot = src.join("hot");
    write_random_file(&hot, 64 * MIB, 3);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (hot, stop) = (hot.clone(), stop.clone());
        thread::spawn(move || {
            let f = OpenOptions::new().write(true).open(&hot).unwrap();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                f.write_all_at(&n.to_le_bytes(), (n * 4096) % (64 * MIB))
                    .unwrap();
                n += 1;
                thread::sleep(Duration::from_micros(200));
            }
        })
    };
    let out = copy(&[&with_slash(&src)], &tmp.path().join("dest"), &["--json"]);
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    out.assert_code(24);
    let j = one_object(&out, false);
    assert_eq!(field(&j, "changed_files"), 1, "{j}");
}

#[test]
fn plan_and_its_check_print_one_object_with_the_exit_code() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    for i in 0..4 {
        fs::write(src.join(format!("f{i}")), b"data").unwrap();
    }
    let plan = tmp.path().join("plan");
    let dst = tmp.path().join("dst");
    let (s, p, d) = (
        src.to_str().unwrap(),
        plan.to_str().unwrap(),
        dst.to_str().unwrap(),
    );
    let out = haul(&["plan", "--json", s, "--shards", "2", "--out", p]);
    out.assert_code(0);
    one_object(&out, false);
    // 25: nothing arrived.
    fs::create_dir(&dst).unwrap();
    let out = haul(&["plan", "--json", "--check", p, d]);
    out.assert_code(25);
    one_object(&out, false);
    assert!(Path::new(p).exists());
}
