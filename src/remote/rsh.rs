//! The remote shell: the command that reaches a far host (`-e`, `HAUL_RSH`, default
//! `ssh`), with ssh's connection sharing set up so that tunnels opened later ride on the
//! first session without asking for a password again; quoting for the far shell; and the
//! far side's stderr shown line by line with the host name.
//!
//! Not here: what runs on the far host (`farend`), or the data connections (`route`).

use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread::JoinHandle;

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

/// Copies `err` to our stderr line by line, each prefixed with `haul: HOST: `.
pub(super) fn spawn_prefixer<R: Read + Send + 'static>(
    err: R,
    host: String,
) -> Option<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("haul-far-err".into())
        .spawn(move || {
            let mut reader = BufReader::new(err);
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end();
                let text = text.strip_prefix("haul: ").unwrap_or(text);
                if !text.is_empty() {
                    eprintln!("haul: {host}: {text}");
                }
            }
        })
        .ok()
}

/// Quotes `s` for a POSIX shell: one single-quoted word.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
