//! Pipe-mode fan-out helpers: receivers of a chain (`recv --relay`, into a file or on
//! stdout), the sender of a file through `--from-command`, the JSON's `stream_blake3`, and
//! the namespaces a test needs.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::netbed::Lan;
use super::*;

/// Whether this machine can run the namespace test; prints why not (or panics under CI).
/// Each test that needs one has its own (name, subnet): tests run at once.
pub fn lan_or_skip(test: &str, (name, subnet): (&'static str, &'static str)) -> Option<Lan> {
    match Lan::up(name, subnet, 4, None) {
        Some(lan) => Some(lan),
        None if std::env::var_os("CI").is_some() => {
            panic!("{test}: needs root and `ip netns` (CI runs it as root)")
        }
        None => {
            println!("SKIPPED: {test}: needs root and `ip netns`");
            eprintln!("SKIPPED: {test}: needs root and `ip netns`");
            None
        }
    }
}

/// `haul ARGS`, in namespace `ns` when given.
pub fn haul_in(ns: Option<&str>) -> Command {
    match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, haul_bin()]);
            c
        }
        None => Command::new(haul_bin()),
    }
}

/// `haul recv --stream FILE --json` listening on `listen`; its ticket read.
pub fn recv_stream(ns: Option<&str>, listen: &str, file: &Path) -> Recv {
    let mut cmd = haul_in(ns);
    cmd.args(["recv", "--relay", "-q", "--json", "--stream"])
        .arg(file)
        .args(["--listen", listen]);
    let mut proc = Running::spawn("recv", cmd);
    let line = proc.first_line().expect("recv printed no ticket");
    let ticket = String::from_utf8(line).unwrap().trim().to_string();
    Recv { proc, ticket }
}

/// `haul recv - --json` (the stream on stdout, the ticket in `ticket_file`).
pub fn recv_stdout(ticket_file: &Path) -> Recv {
    let mut cmd = haul_in(None);
    cmd.args([
        "recv",
        "-",
        "--relay",
        "-q",
        "--json",
        "--listen",
        "127.0.0.1:0",
    ])
    .arg("--ticket-file")
    .arg(ticket_file);
    let proc = Running::spawn("recv -", cmd);
    let until = Instant::now() + Duration::from_secs(30);
    let ticket = loop {
        let t = std::fs::read_to_string(ticket_file).unwrap_or_default();
        if t.ends_with('\n') {
            break t.trim().to_string();
        }
        assert!(!proc.has_exited(), "recv - exited without a ticket");
        assert!(Instant::now() < until, "recv - wrote no ticket");
        std::thread::sleep(Duration::from_millis(20));
    };
    Recv { proc, ticket }
}

/// `haul send --from-command 'cat SRC' --to T... --json ARGS`.
pub fn spawn_send(ns: Option<&str>, src: &Path, tickets: &[&str], args: &[&str]) -> Running {
    let mut cmd = haul_in(ns);
    cmd.args(["send", "--from-command"])
        .arg(format!("cat '{}'", src.display()));
    for t in tickets {
        cmd.args(["--to", t]);
    }
    cmd.args(["--json", "-q", "--block-size", BLOCK_SIZE_ARG])
        .args(args);
    Running::spawn("send", cmd)
}

/// The `stream_blake3` of a `--json` line in `text`.
pub fn stream_blake3(text: &str) -> String {
    let at = text
        .find("\"stream_blake3\":\"")
        .unwrap_or_else(|| panic!("no stream_blake3 in {text}"));
    text[at + 17..at + 17 + 64].to_string()
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Bytes written so far into a `--stream FILE`'s temporary in `dir`.
pub fn temp_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".haul-tmp"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}
