//! `haul copy SRC... host1:DST --also host2:DST …`: a push whose first far receiver
//! passes everything on to the next (a chain fan-out). Every far end is started over ssh
//! as for a push; the further ones listen on every address (the host before them dials
//! them directly, not through ssh) and their tickets go to the first as the chain.

use super::farend::FarEnd;
use super::rsh::Rsh;
use super::wire::Request;
use super::FarOptions;
use crate::config::RemotePath;
use crate::error::{Error, Result};
use crate::protocol::{Chain, Hop};

/// How messages and `--json` name a destination of a fan-out: `host:path`.
pub fn label(at: &RemotePath) -> String {
    format!("{}:{}", at.host, String::from_utf8_lossy(&at.path))
}

/// Starts a receiving far end at each of `also`; returns them and the chain for the first
/// receiver. `single_file`: the sources are one non-directory, which a fan-out does not
/// rename (each destination would decide its own name).
pub(super) fn start(
    rsh: &Rsh,
    also: &[RemotePath],
    single_file: bool,
    dry_run: bool,
    keep_cache: bool,
    f: &FarOptions<'_>,
) -> Result<(Vec<FarEnd>, Option<Chain>)> {
    if also.is_empty() {
        return Ok((Vec::new(), None));
    }
    let mut fars = Vec::new();
    let mut hops = Vec::new();
    for at in also {
        let mut far = FarEnd::start(rsh, at, f.ssh, f.quiet)?;
        far.send(&Request::Receive {
            dest: at.path_or_home(),
            single_file,
            advertise: f.ssh.advertise,
            everywhere: true,
            accept: f.accept.clone(),
            dry_run,
            keep_cache,
        })?;
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
    let chain = Chain {
        hops,
        encrypt: f.encrypt,
    };
    Ok((fars, Some(chain)))
}
