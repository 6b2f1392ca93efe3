//! Parsing what the user typed: `[user@]host:path` locations (rsync's rules), the
//! `-e/--rsh` command line (split into words the way rsync does), `--listen` addresses.
//!
//! Pure functions on bytes and strings; nothing here runs a command or touches a file.

use std::ffi::OsStr;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use crate::error::{Error, Result};

/// Which way a remote copy goes.
#[derive(Clone, Debug)]
pub enum RemoteCopy {
    /// Local sources to a far destination.
    Push {
        /// Local sources.
        sources: Vec<PathBuf>,
        /// Far destination.
        dest: RemotePath,
        /// Further far destinations (`--also`), each fed by the one before it.
        also: Vec<RemotePath>,
    },
    /// Far sources (all on one host) to a local destination.
    Pull {
        /// Far sources.
        sources: Vec<RemotePath>,
        /// Local destination.
        dest: PathBuf,
        /// Further far destinations (`--also`), the first fed by the local one.
        also: Vec<RemotePath>,
    },
    /// Far sources to a far destination, directly between the two.
    Between {
        /// Far sources (all on one host).
        sources: Vec<RemotePath>,
        /// Far destination.
        dest: RemotePath,
        /// Further far destinations (`--also`), each fed by the one before it.
        also: Vec<RemotePath>,
    },
}

/// Where one command-line path lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A path on this host.
    Local(PathBuf),
    /// A path on another host, reached over ssh.
    Remote(RemotePath),
}

/// `[user@]host:path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemotePath {
    /// The login name, when given.
    pub user: Option<String>,
    /// The host name or address (IPv6 without brackets).
    pub host: String,
    /// The path on that host, as bytes; relative paths are relative to the login
    /// directory, and an empty path means the login directory itself (as with scp).
    pub path: Vec<u8>,
}

impl RemotePath {
    /// What to hand ssh as its destination: `host` or `user@host`.
    pub fn ssh_destination(&self) -> String {
        match &self.user {
            Some(u) => format!("{u}@{}", self.host),
            None => self.host.clone(),
        }
    }

    /// The path to use on the far host (`.` for an empty path).
    pub fn path_or_home(&self) -> Vec<u8> {
        if self.path.is_empty() {
            b".".to_vec()
        } else {
            self.path.clone()
        }
    }

    /// Whether two remote paths are on the same host as the same user (one ssh session
    /// can serve both).
    pub fn same_login(&self, other: &RemotePath) -> bool {
        self.user == other.user && self.host == other.host
    }
}

impl fmt::Display for RemotePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match &self.user {
            Some(u) => write!(f, "{u}@{host}:")?,
            None => write!(f, "{host}:")?,
        }
        f.write_str(&String::from_utf8_lossy(&self.path))
    }
}

/// Why a path argument cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError(pub String);

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// rsync's rule: an argument is remote when it has a `:` before any `/`. So `host:dir`,
/// `user@host:`, `[::1]:/data` and `user@[fe80::1]:x` are remote; `/a:b`, `./a:b` and
/// `a/b:c` are local paths that contain a colon. `host::module` (rsync's daemon syntax) is
/// refused rather than guessed at.
pub fn parse_location(arg: &OsStr) -> Result<Location, SpecError> {
    let bytes = arg.as_bytes();
    let local = || Ok(Location::Local(PathBuf::from(arg)));
    // `[v6]` host, possibly after `user@`.
    let (user_part, rest) = split_user(bytes);
    if rest.first() == Some(&b'[') {
        if let Some(end) = rest.iter().position(|&b| b == b']') {
            if rest.get(end + 1) == Some(&b':') {
                let host = &rest[1..end];
                return remote(arg, user_part, host, &rest[end + 2..]);
            }
        }
    }
    let Some(colon) = bytes.iter().position(|&b| b == b':') else {
        return local();
    };
    if colon == 0 || bytes[..colon].contains(&b'/') {
        return local();
    }
    let (user_part, host) = split_user(&bytes[..colon]);
    let path = &bytes[colon + 1..];
    remote(arg, user_part, host, path)
}

/// Splits `user@rest` at the last `@` before any `:`/`[`; (None, all) when there is none.
fn split_user(b: &[u8]) -> (Option<&[u8]>, &[u8]) {
    let stop = b
        .iter()
        .position(|&c| c == b':' || c == b'[' || c == b'/')
        .unwrap_or(b.len());
    match b[..stop].iter().rposition(|&c| c == b'@') {
        Some(at) => (Some(&b[..at]), &b[at + 1..]),
        None => (None, b),
    }
}

fn remote(
    arg: &OsStr,
    user: Option<&[u8]>,
    host: &[u8],
    path: &[u8],
) -> Result<Location, SpecError> {
    let shown = arg.to_string_lossy();
    if path.first() == Some(&b':') {
        return Err(SpecError(format!(
            "'{shown}': host::module (rsync daemon syntax) is not supported; \
             use host:path, or ./{shown} for a local file"
        )));
    }
    let text = |what: &str, b: &[u8]| -> Result<String, SpecError> {
        let s = std::str::from_utf8(b)
            .map_err(|_| SpecError(format!("'{shown}': the {what} is not valid UTF-8")))?;
        let bad = s.is_empty()
            || s.starts_with('-')
            || s.chars().any(|c| c.is_whitespace() || c.is_control())
            || s.contains(['\'', '"', '\\', '`', '$', ';', '&', '|', '<', '>', '(', ')']);
        if bad {
            return Err(SpecError(format!(
                "'{shown}': '{s}' is not a usable {what} (for a local path with a colon, \
                 write ./{shown})"
            )));
        }
        Ok(s.to_string())
    };
    let host = text("host name", host)?;
    if host.contains('@') || host.contains('[') || host.contains(']') {
        return Err(SpecError(format!(
            "'{shown}': '{host}' is not a usable host name"
        )));
    }
    let user = user.map(|u| text("user name", u)).transpose()?;
    Ok(Location::Remote(RemotePath {
        user,
        host,
        path: path.to_vec(),
    }))
}

/// Splits an `-e/--rsh` value into words as rsync does: whitespace separates words, single
/// quotes keep everything literally, double quotes keep spaces and honour `\"` and `\\`,
/// and a backslash outside quotes escapes the next character.
pub fn split_command(s: &str) -> Result<Vec<String>, SpecError> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => cur.push(x),
                        None => return Err(SpecError(format!("unterminated ' in '{s}'"))),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(x @ ('"' | '\\')) => cur.push(x),
                            Some(x) => {
                                cur.push('\\');
                                cur.push(x);
                            }
                            None => return Err(SpecError(format!("unterminated \" in '{s}'"))),
                        },
                        Some(x) => cur.push(x),
                        None => return Err(SpecError(format!("unterminated \" in '{s}'"))),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(x) => cur.push(x),
                    None => return Err(SpecError(format!("trailing \\ in '{s}'"))),
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    if words.is_empty() {
        return Err(SpecError("the remote shell command (-e) is empty".into()));
    }
    Ok(words)
}

/// `--listen`: ADDR or ADDR:PORT (port 0: any).
pub fn parse_listen(s: &str) -> Result<SocketAddr> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let ip = s.trim_start_matches('[').trim_end_matches(']');
    ip.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, 0))
        .map_err(|_| Error::Usage(format!("invalid --listen '{s}': use ADDR or ADDR:PORT")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_forms() {
        assert_eq!(
            parse_listen("127.0.0.1:9").unwrap(),
            "127.0.0.1:9".parse().unwrap()
        );
        assert_eq!(
            parse_listen("127.0.0.1").unwrap(),
            "127.0.0.1:0".parse().unwrap()
        );
        assert_eq!(parse_listen("::1").unwrap(), "[::1]:0".parse().unwrap());
        assert!(parse_listen("nope").is_err());
    }

    fn loc(s: &str) -> Location {
        parse_location(OsStr::new(s)).unwrap()
    }

    fn rem(user: Option<&str>, host: &str, path: &str) -> Location {
        Location::Remote(RemotePath {
            user: user.map(str::to_string),
            host: host.into(),
            path: path.as_bytes().to_vec(),
        })
    }

    #[test]
    fn host_and_path() {
        assert_eq!(
            loc("db2:/var/lib/mysql"),
            rem(None, "db2", "/var/lib/mysql")
        );
        assert_eq!(loc("admin@db2:/data"), rem(Some("admin"), "db2", "/data"));
        assert_eq!(loc("db2:rel/dir"), rem(None, "db2", "rel/dir"));
        assert_eq!(loc("db2:"), rem(None, "db2", ""));
        assert_eq!(loc("db2:a:b"), rem(None, "db2", "a:b"));
        assert_eq!(loc("10.0.0.7:/x"), rem(None, "10.0.0.7", "/x"));
    }

    #[test]
    fn ipv6_in_brackets() {
        assert_eq!(loc("[::1]:/path"), rem(None, "::1", "/path"));
        assert_eq!(
            loc("root@[fe80::1%eth0]:x"),
            rem(Some("root"), "fe80::1%eth0", "x")
        );
        assert_eq!(loc("[::1]:"), rem(None, "::1", ""));
        // Brackets without a colon after them: a local name.
        assert_eq!(loc("[abc]"), Location::Local("[abc]".into()));
    }

    #[test]
    fn local_paths_with_colons() {
        for s in ["./a:b", "/abs/a:b", "a/b:c", "plain", "dir/", ":lead", "/"] {
            assert_eq!(loc(s), Location::Local(s.into()), "{s}");
        }
    }

    #[test]
    fn refused_forms() {
        for s in [
            "host::module",
            "-oProxyCommand=x:y",
            "user@-bad:x",
            "a b:c",
            "@host:x",
            "ho$t:x",
            "[::1:x",
        ] {
            let r = parse_location(OsStr::new(s));
            assert!(
                r.is_err() || matches!(r, Ok(Location::Local(_))),
                "{s}: {r:?}"
            );
        }
        assert!(parse_location(OsStr::new("host::module")).is_err());
        assert!(parse_location(OsStr::new("-oProxyCommand=x:y")).is_err());
        assert!(parse_location(OsStr::new("@host:x")).is_err());
    }

    #[test]
    fn non_utf8_remote_path_is_kept() {
        let raw = OsStr::from_bytes(b"h:/x\xff");
        let Location::Remote(r) = parse_location(raw).unwrap() else {
            panic!()
        };
        assert_eq!(r.path, b"/x\xff");
        assert_eq!(r.to_string(), "h:/x\u{fffd}");
    }

    #[test]
    fn display_and_destination() {
        let Location::Remote(r) = loc("u@[::1]:/p") else {
            panic!()
        };
        assert_eq!(r.ssh_destination(), "u@::1");
        assert_eq!(r.to_string(), "u@[::1]:/p");
        let Location::Remote(h) = loc("h:") else {
            panic!()
        };
        assert_eq!(h.path_or_home(), b".");
    }

    #[test]
    fn rsh_words() {
        assert_eq!(
            split_command("ssh -p 2222 -i key").unwrap(),
            ["ssh", "-p", "2222", "-i", "key"]
        );
        assert_eq!(
            split_command(r#"ssh -o 'ProxyCommand=nc %h %p' -i "my key" a\ b"#).unwrap(),
            ["ssh", "-o", "ProxyCommand=nc %h %p", "-i", "my key", "a b"]
        );
        assert_eq!(split_command(r#""a\"b" ''"#).unwrap(), ["a\"b", ""]);
        assert!(split_command("  ").is_err());
        assert!(split_command("ssh 'x").is_err());
        assert!(split_command("ssh \"x").is_err());
    }
}
