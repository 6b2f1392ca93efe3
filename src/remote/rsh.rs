//! The remote shell: the command that reaches a far host (`-e`, `HAUL_RSH`, default
//! `ssh`), with ssh's connection sharing set up so that tunnels opened later ride on the
//! first session without asking for a password again; quoting for the far shell; and the
//! far side's stderr shown line by line with the host name.
//!
//! Not here: what runs on the far host (`farend`), or the data connections (`route`).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread::JoinHandle;

use crate::progress::escape;

/// The remote shell command (`-e`, `HAUL_RSH`, default `ssh`) and, for ssh, the private
/// directory of its connection-sharing socket.
pub struct Rsh {
    pub(super) words: Vec<String>,
    mux_dir: Option<PathBuf>,
}

impl Rsh {
    /// `words` as split from `-e`; connection sharing is set up when `share` and the program
    /// is ssh.
    pub fn new(words: Vec<String>, share: bool) -> Rsh {
        let is_ssh = share
            && words
                .first()
                .and_then(|w| Path::new(w).file_name())
                .is_some_and(|n| n == "ssh");
        let mux_dir = if is_ssh { private_dir().ok() } else { None };
        Rsh { words, mux_dir }
    }

    /// The command with its own arguments and ours, ready for the destination.
    pub(super) fn command(&self) -> Command {
        let mut cmd = Command::new(&self.words[0]);
        cmd.args(&self.words[1..]);
        if let Some(d) = &self.mux_dir {
            // After the user's words: for ssh the first value of an option wins, so a
            // user's own ControlMaster settings are kept.
            cmd.arg("-o").arg("ControlMaster=auto");
            cmd.arg("-o").arg(format!("ControlPath={}/%C", d.display()));
            cmd.arg("-o").arg("ControlPersist=no");
        }
        cmd
    }

    /// Whether tunnels (`-W`) can be opened with this command.
    pub fn can_tunnel(&self) -> bool {
        self.mux_dir.is_some()
    }
}

impl Drop for Rsh {
    fn drop(&mut self) {
        if let Some(d) = &self.mux_dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// A fresh directory only we can enter, under the temporary directory.
fn private_dir() -> io::Result<PathBuf> {
    let base = std::env::temp_dir();
    for _ in 0..16 {
        let mut r = [0u8; 8];
        getrandom::fill(&mut r).map_err(|e| io::Error::other(e.to_string()))?;
        let hex: String = r.iter().map(|b| format!("{b:02x}")).collect();
        let d = base.join(format!("haul-ssh-{hex}"));
        match std::fs::DirBuilder::new().mode(0o700).create(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("no free temporary name"))
}

/// Longest piece of a far line shown as one line of ours: a far end that writes without
/// newlines (a command's binary output on stderr, say) is shown in pieces, not held whole.
const FAR_LINE: u64 = 64 << 10;

/// Copies `err` to our stderr line by line, each prefixed with `haul: HOST: ` (see
/// [`relay`]).
pub(super) fn spawn_prefixer<R: Read + Send + 'static>(
    err: R,
    host: String,
) -> Option<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("haul-far-err".into())
        .spawn(move || relay(err, &host, &mut io::stderr()))
        .ok()
}

/// Copies `err` to `out` as lines `haul: HOST: TEXT`: a far haul's own `haul: ` prefix
/// dropped, control characters escaped as in every message of ours (a far host or its
/// command cannot drive this terminal), a line longer than [`FAR_LINE`] cut into pieces.
fn relay(err: impl Read, host: &str, out: &mut impl Write) {
    let mut reader = BufReader::new(err);
    let host = escape(host);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader).take(FAR_LINE).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end();
        let text = text.strip_prefix("haul: ").unwrap_or(text);
        if !text.is_empty() {
            // Nowhere to report a failed write to stderr; the far end's next lines may fit.
            let _ = writeln!(out, "haul: {host}: {}", escape(text));
        }
    }
}

/// Quotes `s` for a POSIX shell: one single-quoted word.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn far_lines_are_escaped_and_cut() {
        // Before: printed as they came, the escape sequence (a terminal title) and the bell
        // reached our terminal, and a line without an end was held whole.
        let mut input = b"haul: plain\n\x1b]0;owned\x07 bell\r\n\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 2 * FAR_LINE as usize + 5));
        let mut out = Vec::new();
        relay(&input[..], "db\x1b1", &mut out);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "haul: db\\#0331: plain");
        assert_eq!(lines[1], "haul: db\\#0331: \\#033]0;owned\\#007 bell");
        let x = |n: usize| format!("haul: db\\#0331: {}", "x".repeat(n));
        assert_eq!(
            lines[2..],
            [x(FAR_LINE as usize), x(FAR_LINE as usize), x(5)]
        );
        assert!(!text.contains(['\x1b', '\x07', '\r']));
    }

    #[test]
    fn ssh_gets_connection_sharing_others_do_not() {
        let r = Rsh::new(vec!["ssh".into(), "-p".into(), "2222".into()], true);
        assert!(r.can_tunnel());
        let args: Vec<String> = r
            .command()
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(&args[..2], ["-p", "2222"]);
        assert!(args.iter().any(|a| a == "ControlMaster=auto"));
        let dir = r.mux_dir.clone().unwrap();
        assert!(dir.is_dir());
        drop(r);
        assert!(!dir.exists());
        let r = Rsh::new(vec!["/usr/bin/rsh".into()], true);
        assert!(!r.can_tunnel());
        assert_eq!(r.command().get_args().count(), 0);
    }

    #[test]
    fn quoting_for_sh() {
        assert_eq!(sh_quote("plain"), "'plain'");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
    }
}
