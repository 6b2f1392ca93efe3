//! The progress display through the real binary: on a terminal (a pty made by util-linux's
//! `script`, 200 columns so no line wraps) a stream's bar moves as bytes go out, in the
//! file line's order, with no "eta 0s" before there is a rate, and leaves no line behind
//! above a warning; a receiver's moves as bytes come in; with `-P` and stderr not a
//! terminal, plain progress lines.

mod support;

use std::fs;
use std::process::Command;

use support::*;

/// Runs `haul ARGS` on a pty of 200 columns; what the terminal received.
fn on_a_terminal(args: &str) -> String {
    let mut cmd = Command::new("script");
    let line = format!("stty cols 200 rows 50; {} {args}", haul_bin());
    cmd.args(["-qfec", &line, "/dev/null"]);
    let out = Running::spawn("script", cmd).wait();
    out.assert_code(0);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every state of the line the bar drew: the text between carriage returns and newlines,
/// escape sequences removed.
fn drawn(tty: &str) -> Vec<String> {
    plain(tty)
        .split(['\r', '\n'])
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// `s` without CSI escape sequences.
fn plain(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\x1b' && it.peek() == Some(&'[') {
            it.next();
            for d in it.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// The screen a terminal shows after `tty` (no wrapping: lines are shorter than it):
/// carriage return, newline, erase line (`ESC[2K`), cursor up and down (`ESC[nA`, `ESC[nB`)
/// and erase below (`ESC[J`); other sequences (colours) are ignored.
fn screen(tty: &str) -> Vec<String> {
    let mut rows: Vec<Vec<char>> = vec![Vec::new()];
    let (mut row, mut col) = (0usize, 0usize);
    let mut it = tty.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '\r' => col = 0,
            '\n' => {
                row += 1;
                col = 0;
                if rows.len() <= row {
                    rows.push(Vec::new());
                }
            }
            '\x1b' if it.peek() == Some(&'[') => {
                it.next();
                let mut arg = String::new();
                let mut end = ' ';
                for d in it.by_ref() {
                    if d.is_ascii_alphabetic() {
                        end = d;
                        break;
                    }
                    arg.push(d);
                }
                let n: usize = arg.parse().unwrap_or(1);
                match (end, arg.as_str()) {
                    ('K', "2") => rows[row].clear(),
                    ('A', _) => row = row.saturating_sub(n),
                    ('B', _) => {
                        row += n;
                        while rows.len() <= row {
                            rows.push(Vec::new());
                        }
                    }
                    ('J', _) => {
                        rows[row].truncate(col);
                        rows.truncate(row + 1);
                    }
                    _ => {}
                }
            }
            c => {
                let r = &mut rows[row];
                while r.len() < col {
                    r.push(' ');
                }
                if col < r.len() {
                    r[col] = c;
                } else {
                    r.push(c);
                }
                col += 1;
            }
        }
    }
    rows.into_iter()
        .map(|r| r.into_iter().collect::<String>().trim_end().to_string())
        .filter(|r| !r.is_empty())
        .collect()
}

#[test]
fn a_streams_progress_moves_as_bytes_go_out() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.bin");
    let tty = on_a_terminal(&format!(
        "copy --from-command 'head -c 8000000 /dev/urandom' --size 8000000 --limit 2M \
         --block-size 4M {}",
        out.display()
    ));
    assert_eq!(fs::metadata(&out).unwrap().len(), 8_000_000);
    let lines: Vec<String> = drawn(&tty)
        .into_iter()
        .filter(|l| l.contains("/7.63 MiB"))
        .collect();
    assert!(!lines.is_empty(), "no progress drawn:\n{tty:?}");
    for l in &lines {
        // Before: "0 B/7.63 MiB 0% 0 B/s eta 0s", percent after the bytes.
        assert!(
            !(l.contains(" 0% ") && l.contains("eta 0s")),
            "an ETA of 0 s at 0%: {l}"
        );
        let at = |s: &str| l.find(s).unwrap_or_else(|| panic!("no {s:?} in {l}"));
        assert!(
            at("% ") < at("/7.63 MiB") && at("/7.63 MiB") < at("/s ") && at("/s ") < at(" eta "),
            "not the file line's order (percent, bytes, rate, elapsed, eta): {l}"
        );
    }
    // Before: bytes counted when whole 4 MiB blocks were acknowledged: 0 B, then 4 MiB.
    assert!(
        lines.iter().any(|l| within_the_first_block(l)),
        "no progress within the first block:\n{lines:#?}"
    );
}

/// Whether a progress line shows bytes within the first 4 MiB block: some KiB, or more
/// than 0 and less than 4 MiB.
fn within_the_first_block(line: &str) -> bool {
    let shown = line.split('/').next().unwrap_or("");
    let shown = shown.rsplit('%').next().unwrap_or("").trim();
    shown.ends_with("KiB") || {
        let mib: f64 = shown.trim_end_matches(" MiB").parse().unwrap_or(0.0);
        shown.ends_with("MiB") && mib > 0.0 && mib < 4.0
    }
}

#[test]
fn a_receivers_progress_moves_as_bytes_come_in() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("big");
    write_random_file(&src, 8 * MIB, 6);
    let (dir, ticket) = (tmp.path().join("dir"), tmp.path().join("ticket"));
    let mut cmd = Command::new("script");
    let line = format!(
        "stty cols 200 rows 50; {} recv {} --listen 127.0.0.1:0 --ticket-file {}",
        haul_bin(),
        dir.display(),
        ticket.display()
    );
    cmd.args(["-qfec", &line, "/dev/null"]);
    let receiving = Running::spawn("script", cmd);
    let deadline = std::time::Instant::now() + support::process::PROCESS_TIMEOUT;
    while !fs::read_to_string(&ticket).is_ok_and(|t| t.ends_with('\n')) {
        assert!(std::time::Instant::now() < deadline, "no ticket written");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut send = Haul::new().command("send");
    send.arg(&src).arg("--ticket-file").arg(&ticket);
    send.args(["--limit", "2M", "--block-size", "4M", "--streams", "1"]);
    Running::spawn("send", send).wait().assert_code(0);
    let out = receiving.wait();
    out.assert_code(0);
    assert_eq!(fs::read(dir.join("big")).unwrap(), fs::read(&src).unwrap());
    let tty = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<String> = drawn(&tty)
        .into_iter()
        .filter(|l| l.contains("/8.00 MiB"))
        .collect();
    assert!(!lines.is_empty(), "no progress drawn:\n{tty:?}");
    // Before: bytes counted when a whole 4 MiB block was written: 0 B, then 4.00 MiB.
    assert!(
        lines.iter().any(|l| within_the_first_block(l)),
        "no progress within the first block:\n{lines:#?}"
    );
}

#[test]
fn a_warning_leaves_no_progress_line_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    write_random_file(&src.join("big"), 4 * MIB, 1);
    std::os::unix::fs::symlink("nowhere", src.join("dangling")).unwrap();
    let dst = tmp.path().join("dst");
    let mut cmd = Command::new("script");
    let line = format!(
        "stty cols 200 rows 50; {} copy -L --limit 4M {}/ {}",
        haul_bin(),
        src.display(),
        dst.display()
    );
    cmd.args(["-qfec", &line, "/dev/null"]);
    let out = Running::spawn("script", cmd).wait();
    let tty = String::from_utf8_lossy(&out.stdout).into_owned();
    let shown = screen(&tty);
    // Before: "… 100% 0 B/0 B 0 B/s 0s eta 0s files 0/0" stayed above the warning.
    assert!(
        shown.iter().all(|l| !l.contains(" eta ")),
        "a progress line is left on the screen:\n{shown:#?}\n{tty:?}"
    );
    assert!(
        shown
            .iter()
            .any(|l| l.starts_with("haul: warning: cannot read")),
        "{shown:#?}"
    );
}

#[test]
fn progress_asked_for_without_a_terminal_is_written_as_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("big");
    write_random_file(&src, 12 * MIB, 2);
    let out = copy(&[&src], &tmp.path().join("a"), &["--limit", "2M", "-P"]);
    out.assert_code(0);
    // Before: nothing (a bar only on a terminal).
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("haul: progress: "))
        .collect();
    assert!(!lines.is_empty(), "{}", out.describe());
    for l in &lines {
        assert!(
            l.contains("% ")
                && l.contains("/12.00 MiB ")
                && l.contains("/s ")
                && l.contains(" eta "),
            "{l}"
        );
    }
    // Not asked for: nothing but the summary.
    let quiet = copy(&[&src], &tmp.path().join("b"), &["--limit", "8M"]);
    quiet.assert_code(0);
    assert!(
        !quiet.stderr.contains("haul: progress"),
        "{}",
        quiet.describe()
    );
}
