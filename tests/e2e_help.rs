//! What `--help`, the completion scripts and the manual page say, through the real binary:
//! the help text has no stray parts (the usage line of `copy`, `-q` per command, no
//! `[env: X=]` for an unset variable, defaults stated), the bash script loads in bash, and
//! the roff page renders with groff and names every command and option.
//!
//! The rendering tests print `SKIPPED` when bash or groff is missing; under CI that is a
//! failure instead.

mod support;

use std::process::{Command, Stdio};

use support::haul_bin;

fn stdout_of(args: &[&str]) -> String {
    let out = Command::new(haul_bin())
        .args(args)
        .env_remove("HAUL_RSH")
        .output()
        .unwrap();
    assert!(out.status.success(), "haul {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Whether `tool` runs here; prints `SKIPPED` (or panics under CI) when it does not.
fn have(tool: &str, test: &str) -> bool {
    let ok = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: {tool} is missing"
        );
        println!("SKIPPED: {test}: {tool} is not installed");
    }
    ok
}

/// The long options a command's `--help` lists, e.g. `--dry-run`: on the lines that
/// name an option (not the wrapped lines of a description).
fn long_options(help: &str) -> Vec<String> {
    help.lines()
        .filter(|l| l.trim_start().starts_with('-') && l.len() - l.trim_start().len() <= 6)
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("--")))
        .map(|w| w.trim_end_matches([',', '.']).to_string())
        .filter(|w| w != "--help" && w != "--version")
        .collect()
}

/// What `--help` says of option `opt` (`--retries`): its line and the wrapped lines of
/// its description after it, joined.
fn option_text(help: &str, opt: &str) -> String {
    let is_option =
        |l: &&str| l.trim_start().starts_with('-') && l.len() - l.trim_start().len() <= 6;
    let mut lines = help
        .lines()
        .skip_while(|l| !(is_option(l) && l.contains(opt)));
    let first = lines.next().unwrap_or_else(|| panic!("no {opt} in {help}"));
    let rest = lines.take_while(|l| !is_option(l) && l.starts_with("       "));
    std::iter::once(first)
        .chain(rest)
        .collect::<Vec<_>>()
        .join(" ")
}

const COMMANDS: [&str; 6] = ["recv", "send", "copy", "limit", "completions", "man"];

#[test]
fn copy_help_has_a_plain_usage_line_and_no_stray_text() {
    let help = stdout_of(&["copy", "--help"]);
    assert!(
        help.contains("Usage: haul copy [OPTIONS] SRC... DST\n"),
        "{help}"
    );
    // Wrapped to the terminal: compare the words.
    let words = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(!words.contains("<SRC... DST>"), "{help}");
    assert!(words.contains("[env: HAUL_RSH]"), "{help}");
    assert!(
        !words.contains("HAUL_RSH="),
        "an unset variable shows no value: {help}"
    );
    let quiet = option_text(&help, "--quiet");
    assert!(!quiet.contains("recv"), "copy's -q is about copy: {quiet}");
    // Every option with a default says it.
    for opt in [
        "--streams",
        "--compress",
        "--block-size",
        "--retries",
        "--buffer",
    ] {
        let text = option_text(&help, opt);
        assert!(text.contains("default"), "{opt} states its default: {text}");
    }
}

#[test]
fn quiet_says_per_command_what_it_keeps() {
    let line = |cmd: &str| {
        let help = stdout_of(&[cmd, "--help"]);
        option_text(&help, "--quiet")
    };
    assert!(line("recv").contains("ticket"), "{}", line("recv"));
    assert!(!line("send").contains("recv"), "{}", line("send"));
    assert!(!line("send").contains("ticket"), "{}", line("send"));
    let timeout = option_text(&stdout_of(&["recv", "--help"]), "--timeout");
    assert!(
        timeout.contains("default 30"),
        "--timeout states its default: {timeout}"
    );
}

#[test]
fn bash_completion_loads_and_knows_the_commands() {
    if !have("bash", "bash_completion_loads_and_knows_the_commands") {
        return;
    }
    let script = stdout_of(&["completions", "bash"]);
    for cmd in COMMANDS {
        assert!(script.contains(cmd), "bash completion lacks {cmd}");
    }
    let out = Command::new("bash")
        .args([
            "-c",
            "source <(\"$0\" completions bash) && complete -p haul",
        ])
        .arg(haul_bin())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("haul"),
        "{out:?}"
    );
    assert!(out.stderr.is_empty(), "{out:?}");
}

#[test]
fn zsh_and_fish_completions_name_every_command() {
    for shell in ["zsh", "fish"] {
        let script = stdout_of(&["completions", shell]);
        for cmd in COMMANDS {
            assert!(script.contains(cmd), "{shell} completion lacks {cmd}");
        }
        assert!(
            script.contains("dry-run"),
            "{shell} completion lacks --dry-run"
        );
    }
    let bad = Command::new(haul_bin())
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
}

#[test]
fn man_page_names_every_command_and_option_and_renders() {
    let page = stdout_of(&["man"]);
    assert!(
        page.contains("\n.TH haul 1 "),
        "{}",
        &page[..200.min(page.len())]
    );
    for cmd in ["recv", "send", "copy", "limit", "completions", "man", "sst"] {
        assert!(
            page.contains(&format!(".SH \"HAUL {}\"", cmd.to_uppercase())),
            "the page has no section for {cmd}"
        );
        // roff escapes `-` as `\-`.
        for opt in long_options(&stdout_of(&[cmd, "--help"])) {
            let roff = opt.replace('-', "\\-");
            assert!(page.contains(&roff), "the page lacks {cmd} {opt}");
        }
    }
    assert!(
        !page.contains("serve"),
        "the hidden far end stays out of the page"
    );
    if !have(
        "groff",
        "man_page_names_every_command_and_option_and_renders",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("haul.1");
    std::fs::write(&file, &page).unwrap();
    // -ww: every warning (a malformed request shows up on stderr); -P -cbou: plain text.
    let out = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-P", "-cbou"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for want in ["NAME", "SYNOPSIS", "HAUL COPY", "dry", "SRC... DST"] {
        assert!(text.contains(want), "rendered page lacks {want}");
    }
}

/// Runs haul with its stdout a pipe whose reading end is already closed (as `| head -1`
/// leaves it once head has exited), killed if it overruns; the exit status and stderr.
fn with_closed_stdout(args: &[&str]) -> (std::process::ExitStatus, String) {
    let (reader, writer) = rustix::pipe::pipe().unwrap();
    drop(reader);
    let mut cmd = Command::new(haul_bin());
    cmd.args(args).stdout(Stdio::from(writer));
    let out = support::Running::spawn_with_stdout("(closed stdout)", cmd).wait();
    (out.status, out.stderr)
}

#[test]
fn a_closed_stdout_ends_help_man_and_completions_quietly() {
    for args in [
        &["completions", "bash"][..],
        &["completions", "zsh"],
        &["man"],
        &["--help"],
        &["recv", "--help"],
        &["copy", "-h"],
        &["--version"],
    ] {
        let (status, err) = with_closed_stdout(args);
        assert_eq!(status.code(), Some(0), "haul {args:?}: {status:?} {err}");
        assert!(err.is_empty(), "haul {args:?} printed: {err}");
    }
}

#[test]
fn h_alone_is_help_and_in_a_cluster_it_is_human_readable() {
    for args in [
        &["-h"][..],
        &["copy", "-h"],
        &["recv", "-h"],
        &["copy", "--help"],
    ] {
        let help = stdout_of(args);
        assert!(help.contains("Usage: haul"), "haul {args:?}: {help}");
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), b"data").unwrap();
    // rsync's habits: -h inside a cluster, or beside other options, is --human-readable.
    for (i, flags) in [
        &["-avhP"][..],
        &["-ah"],
        &["-h", "-a"],
        &["--human-readable"],
    ]
    .iter()
    .enumerate()
    {
        let dst = tmp.path().join(format!("dst{i}"));
        let out = support::copy(&[&support::with_slash(&src)], &dst, flags);
        out.assert_code(0);
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            !said.contains("Usage:"),
            "copy {flags:?} printed help: {said}"
        );
        assert_eq!(
            std::fs::read(dst.join("f")).unwrap(),
            b"data",
            "copy {flags:?}"
        );
    }
}

#[test]
fn copy_help_is_grouped_under_headings_and_wrapped_to_the_terminal() {
    let out = Command::new(haul_bin())
        .args(["copy", "--help"])
        .env("COLUMNS", "80")
        .env_remove("HAUL_RSH")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8(out.stdout).unwrap();
    let mut at = 0;
    // Most used first: what is copied, then what is chosen, kept, how fast, how far.
    for heading in [
        "What:",
        "Filters:",
        "Metadata:",
        "Performance:",
        "Remote:",
        "Output:",
    ] {
        let found = help[at..].find(&format!("\n{heading}\n"));
        let Some(i) = found else {
            panic!("no {heading} after byte {at}: {help}")
        };
        at += i + 1;
    }
    for line in help.lines() {
        assert!(line.chars().count() <= 80, "wider than COLUMNS=80: {line}");
    }
    let limit = stdout_of(&["limit", "--help"]);
    for global in ["--json", "--verbose", "--stats", "--keep-cache", "--quiet"] {
        assert!(
            !limit.contains(global),
            "limit does not take {global}: {limit}"
        );
    }
}

#[test]
fn man_page_has_exit_status_environment_examples_and_named_arguments() {
    let page = stdout_of(&["man"]);
    for section in [".SH \"EXIT STATUS\"", ".SH ENVIRONMENT", ".SH EXAMPLES"] {
        assert!(page.contains(section), "the page lacks {section}");
    }
    // The synopsis named no option's argument: `[--stream] [--to-command] [--buffer]`.
    assert!(
        !page.contains("[\\-\\-buffer]"),
        "a synopsis without argument names"
    );
    for var in ["HAUL_TICKET", "HAUL_RSH", "XDG_RUNTIME_DIR"] {
        assert!(page.contains(var), "ENVIRONMENT lacks {var}");
    }
    // Every exit code of README's table.
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let codes: Vec<&str> = readme
        .lines()
        .skip_while(|l| !l.starts_with("## Exit codes"))
        .filter_map(|l| l.strip_prefix("| "))
        .filter_map(|l| l.split(' ').next())
        .filter(|c| c.parse::<u8>().is_ok())
        .collect();
    assert!(codes.len() >= 12, "{codes:?}");
    for c in codes {
        assert!(page.contains(&format!(".B {c}\n")), "EXIT STATUS lacks {c}");
    }
    if !have(
        "groff",
        "man_page_has_exit_status_environment_examples_and_named_arguments",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("haul.1");
    std::fs::write(&file, &page).unwrap();
    let out = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-P", "-cbou"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "EXIT STATUS",
        "ENVIRONMENT",
        "EXAMPLES",
        "haul recv [OPTIONS]",
        "haul copy [OPTIONS] SRC... DST",
    ] {
        assert!(text.contains(want), "rendered page lacks {want}: {text}");
    }
}
