//! `haul copy SRC... host1:DST --also host2:DST …`: a push whose first far receiver
//! passes everything on to the next (a chain fan-out). Every far end is started over ssh
//! as for a push; the further ones listen on every address (the host before them dials
//! them directly, not through ssh) and their tickets go to the first as the chain. One
//! source file is stored under one name everywhere: every DST an existing directory, or
//! every DST naming the same file name (each hop stores what the first passes on, under
//! the name the sender gave it).

use super::farend::FarEnd;
use super::rsh::Rsh;
use super::wire::Request;
use crate::config::{RemotePath, SshOptions};
use crate::error::{Error, Result};
use crate::protocol::{Chain, Hop};

/// How messages and `--json` name a destination of a fan-out: `host:path`.
pub fn label(at: &RemotePath) -> String {
    format!("{}:{}", at.host, String::from_utf8_lossy(&at.path))
}

/// Starts a receiving far end at each of `also`, told `receive(at)`; returns them, the
/// chain for the first receiver and each one's answer to a single file (the name it
/// would store it under, if not the source's).
pub(super) fn start(
    rsh: &Rsh,
    also: &[RemotePath],
    ssh: &SshOptions,
    quiet: bool,
    encrypt: bool,
    receive: impl Fn(&RemotePath) -> Request,
) -> Result<(Vec<FarEnd>, Option<Chain>, Vec<Rename>)> {
    if also.is_empty() {
        return Ok((Vec::new(), None, Vec::new()));
    }
    let mut fars = Vec::new();
    let mut hops = Vec::new();
    let mut renames = Vec::new();
    for at in also {
        let mut far = FarEnd::start(rsh, at, ssh, quiet)?;
        far.send(&receive(at))?;
        let ready = far.ready("setting up a further receiver")?;
        let ticket = ready.ticket.ok_or_else(|| Error::Host {
            host: far.host.clone(),
            message: "unexpected answer from the far end (no ticket)".into(),
            code: crate::error::exit::INTEGRITY,
        })?;
        renames.push(ready.rename);
        hops.push(Hop {
            label: label(at),
            ticket,
        });
        fars.push(far);
    }
    let chain = Chain { hops, encrypt };
    Ok((fars, Some(chain), renames))
}

/// The name a destination would store a single file under, when not the source's.
pub(super) type Rename = Option<Vec<u8>>;

/// A single file fans out under one name: `first` is what the first destination would
/// store it as (`None`: the source's name, DST being a directory), `renames` the same for
/// each of `also`.
pub(super) fn same_name(first: &Rename, also: &[RemotePath], renames: &[Rename]) -> Result<()> {
    let shown = |r: &Rename| match r {
        Some(name) => format!("names the file {}", String::from_utf8_lossy(name)),
        None => "is a directory".to_string(),
    };
    match also.iter().zip(renames).find(|(_, r)| *r != first) {
        None => Ok(()),
        Some((at, r)) => Err(Error::Usage(crate::progress::escape(&format!(
            "--also {}: a file fans out under one name: this DST {}, the first {} (give every \
             destination the same file name, or existing directories)",
            label(at),
            shown(r),
            shown(first)
        )))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(host: &str, path: &str) -> RemotePath {
        RemotePath {
            user: None,
            host: host.into(),
            path: path.as_bytes().to_vec(),
        }
    }

    #[test]
    fn one_name_everywhere() {
        let also = [at("b", "/x/new.img"), at("c", "/y/new.img")];
        let new = Some(b"new.img".to_vec());
        assert!(same_name(&new, &also, &[new.clone(), new.clone()]).is_ok());
        assert!(same_name(&None, &also, &[None, None]).is_ok());
        let e = same_name(&new, &also, &[new.clone(), None]).unwrap_err();
        assert!(e.to_string().contains("c:/y/new.img"), "{e}");
        assert!(e.to_string().contains("is a directory"), "{e}");
        let odd = Some(b"a\nb".to_vec());
        let e = same_name(&new, &also, &[odd, new.clone()]).unwrap_err();
        assert!(!e.to_string().contains('\n'), "{e}");
    }
}
