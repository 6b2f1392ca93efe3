//! `haul copy SRC... host1:DST --also host2:DST …`: a push whose first far receiver
//! passes everything on to the next (a chain fan-out). Every far end is started over ssh
//! as for a push; the further ones listen on every address (the host before them dials
//! them directly, not through ssh) and their tickets go to the first as the chain. One
//! source file goes into existing directories only (each destination would otherwise
//! decide its own name for it).

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

/// Starts a receiving far end at each of `also`, told `receive(at)`; returns them and
/// the chain for the first receiver.
pub(super) fn start(
    rsh: &Rsh,
    also: &[RemotePath],
    ssh: &SshOptions,
    quiet: bool,
    encrypt: bool,
    receive: impl Fn(&RemotePath) -> Request,
) -> Result<(Vec<FarEnd>, Option<Chain>)> {
    if also.is_empty() {
        return Ok((Vec::new(), None));
    }
    let mut fars = Vec::new();
    let mut hops = Vec::new();
    for at in also {
        let mut far = FarEnd::start(rsh, at, ssh, quiet)?;
        far.send(&receive(at))?;
        let ready = far.ready("setting up a further receiver")?;
        let ticket = ready.ticket.ok_or_else(|| Error::Host {
            host: far.host.clone(),
            message: "unexpected answer from the far end (no ticket)".into(),
            code: crate::error::exit::INTEGRITY,
        })?;
        if ready.rename.is_some() {
            return Err(Error::Usage(format!(
                "--also {}: a fan-out of one file goes into existing directories (DST/)",
                crate::progress::escape(&label(at))
            )));
        }
        hops.push(Hop {
            label: label(at),
            ticket,
        });
        fars.push(far);
    }
    let chain = Chain { hops, encrypt };
    Ok((fars, Some(chain)))
}
