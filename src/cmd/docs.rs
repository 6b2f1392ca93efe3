//! `haul completions SHELL` and `haul man`: the shell completion scripts and the manual
//! page, generated from the command-line definition (`cli::command`) so that they never
//! drift from `--help`. One page holds every command (`man haul`), rather than one page
//! per command, so that one redirect installs it.

use std::io::Write;

use clap_complete::Shell;
use clap_mangen::Man;

use crate::error::{Error, Result};

/// Writes the completion script for `shell` to `out`. A reader that stopped early
/// (`| head -1`) is no failure.
pub fn completions(shell: Shell, out: &mut dyn Write) -> Result<()> {
    let mut cmd = crate::cli::command();
    // Into memory first: clap_complete panics when its writer fails.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "haul", &mut script);
    write_all(out, &script)
}

/// Writes the manual page (roff) to `out`: the usual sections for `haul` and its global
/// options, then one section per visible command with its synopsis, description and
/// own options. A reader that stopped early is no failure.
pub fn man(out: &mut dyn Write) -> Result<()> {
    let mut page = Vec::new();
    render(&mut page).map_err(|e| Error::io("rendering the manual page", e))?;
    write_all(out, &page)
}

/// Writes `bytes` to stdout (`out`); a closed pipe ends the output quietly, as `ls | head`.
fn write_all(out: &mut dyn Write, bytes: &[u8]) -> Result<()> {
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Error::io("writing to stdout", e))
        }
        _ => Ok(()),
    }
}

fn render(out: &mut dyn Write) -> std::io::Result<()> {
    let cmd = crate::cli::command();
    let page = Man::new(cmd.clone());
    let mut roff = Vec::new();
    page.render_title(&mut roff)?;
    page.render_name_section(&mut roff)?;
    page.render_synopsis_section(&mut roff)?;
    page.render_description_section(&mut roff)?;
    page.render_options_section(&mut roff)?;
    let mut subs: Vec<_> = cmd.get_subcommands().filter(|s| !s.is_hide_set()).collect();
    subs.sort_by_key(|s| s.get_display_order());
    for sub in subs {
        // The global options are listed once, above; each command shows its own.
        let own = sub
            .clone()
            .mut_args(|a| if a.is_global_set() { a.hide(true) } else { a });
        let sub_page = Man::new(own);
        writeln!(roff, ".SH \"HAUL {}\"", sub.get_name().to_uppercase())?;
        // clap_mangen's synopsis lists every option without its argument (`[--buffer]`);
        // the usage line names what each takes, as --help shows it.
        writeln!(roff, ".PP")?;
        writeln!(roff, "{}", synopsis(sub))?;
        let mut body = Vec::new();
        sub_page.render_description_section(&mut body)?;
        sub_page.render_options_section(&mut body)?;
        // Each part opens with its own `.SH`; inside a command's section, a paragraph.
        for line in String::from_utf8_lossy(&body).lines() {
            match line.starts_with(".SH ") {
                true => writeln!(roff, ".PP")?,
                false => writeln!(roff, "{line}")?,
            }
        }
    }
    write_exit_status(&mut roff)?;
    roff.extend_from_slice(ENVIRONMENT.as_bytes());
    roff.extend_from_slice(EXAMPLES.as_bytes());
    page.render_version_section(&mut roff)?;
    // Every part repeats the page's two-line preamble (the `\*(Aq` string); once is enough.
    let text = String::from_utf8_lossy(&roff);
    let mut lines = text.lines();
    let preamble: Vec<&str> = lines.by_ref().take(2).collect();
    for line in &preamble {
        writeln!(out, "{line}")?;
    }
    for line in lines.filter(|l| !preamble.contains(l)) {
        writeln!(out, "{}", ascii(line))?;
    }
    out.flush()
}

/// A command's usage line in roff: `.B "haul copy"` then its arguments, e.g.
/// `[OPTIONS] SRC... DST`.
fn synopsis(sub: &clap::Command) -> String {
    let usage = sub
        .clone()
        .bin_name(format!("haul {}", sub.get_name()))
        .render_usage();
    let usage = usage.to_string();
    let usage = usage.trim().trim_start_matches("Usage:").trim();
    let rest = usage
        .strip_prefix(&format!("haul {}", sub.get_name()))
        .unwrap_or(usage)
        .trim();
    format!(
        ".B \"haul {}\"\n{}",
        sub.get_name(),
        rest.replace('\\', "\\e").replace('-', "\\-")
    )
}

/// The EXIT STATUS section: the codes of `error::exit`, as README's table lists them.
fn write_exit_status(roff: &mut Vec<u8>) -> std::io::Result<()> {
    writeln!(roff, ".SH \"EXIT STATUS\"")?;
    for (code, meaning) in crate::error::exit::MEANINGS {
        writeln!(roff, ".TP\n.B {code}\n{}", meaning.replace('-', "\\-"))?;
    }
    writeln!(
        roff,
        ".PP\nA copy between hosts exits with the code of the side that failed, far end \
         included. SIGINT, SIGTERM and SIGHUP: haul dies of the signal (a shell shows 130, \
         143, 129)."
    )
}

/// The ENVIRONMENT section.
const ENVIRONMENT: &str = r#".SH ENVIRONMENT
.TP
.B HAUL_TICKET
The ticket for \fBhaul send\fR when no \fB\-\-to\fR or \fB\-\-ticket\-file\fR is given
(unlike a command line, other users cannot read it).
.TP
.B HAUL_RSH
The remote shell command of \fBhaul copy\fR and \fBhaul probe\fR between hosts, as
\fB\-e\fR/\fB\-\-rsh\fR (default: ssh).
.TP
.B XDG_RUNTIME_DIR
Where a running transfer keeps the socket \fBhaul limit\fR talks to (else /tmp/haul\-UID;
root: /run/haul).
.TP
.B XDG_STATE_HOME
Where haul keeps the key of its resume records, in haul/ (default ~/.local/state;
root: /var/lib/haul).
.TP
.B NO_COLOR
When set, \fB\-\-help\fR is printed without colour.
"#;

/// The EXAMPLES section: the everyday forms, as README's quick start shows them.
const EXAMPLES: &str = r#".SH EXAMPLES
.TP
.B haul copy \-avP /data/ db2:/data/
Copy the contents of /data to db2 over ssh, as rsync \-a would; a re-run resumes.
.TP
.B haul recv /data
On the receiving host: prints a ticket, then waits.
.TP
.B haul send /data/ \-\-to TICKET
On the sending host: sends to the waiting receiver.
.TP
.B pg_basebackup \-D \- \-Ft | haul send \- \-\-ticket\-file t
Send one stream; \fBhaul recv \- > base.tar\fR or \fB\-\-stream FILE\fR receives it.
.TP
.B haul copy src/ db2:dst/ \-\-also db3:dst/
A chain fan-out: read once, written to db2 and db3.
.TP
.B haul limit 50M
Lower the bandwidth of the running transfer to 50 MiB/s.
.TP
.B haul man | man \-l \-
Read this page without installing it.
"#;

/// `line` with every character outside ASCII written as groff's `\[uXXXX]`: troff reads
/// bytes, and without `preconv` (which `man` runs but a plain `groff` does not) the
/// help texts' dashes, arrows and ellipses would come out as garbage.
fn ascii(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    for c in line.chars() {
        match c.is_ascii() {
            true => out.push(c),
            false => out.push_str(&format!("\\[u{:04X}]", u32::from(c))),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_ascii() {
        assert_eq!(ascii("a … b → c"), "a \\[u2026] b \\[u2192] c");
        let mut page = Vec::new();
        render(&mut page).unwrap();
        assert!(page.is_ascii());
    }
}
