//! `haul probe h1:SRC... h2:DST` (remote to remote), started the way a remote-to-remote
//! copy starts (`remote::between`): one ssh session to each host. The far end at h1
//! walks and samples the sources and measures the codecs there (`ProbeSource`, not
//! listening); then the far end at h2 measures the destination (`Probe`, listening on
//! every address) and answers with its ticket, which `Go` hands to h1; h1 dials h2
//! directly with `--streams` probe connections and writes incompressible blocks for a
//! few seconds, which h2 counts: the network between them, in the direction the data
//! would flow. The two measurements run one after the other, so two far ends on one
//! host do not slow each other's. As for the copy, h1 must reach h2 directly (no route
//! through this host).

use std::time::Duration;

use super::farend::FarEnd;
use super::probe::{finish, probed};
use super::probe_source::{measured, FarSource};
use super::rsh::Rsh;
use super::unexpected;
use super::wire::Request;
use crate::config::{RemotePath, SshOptions};
use crate::error::{exit, Error, Result};
use crate::probe::FarMeasure;

/// The far source sends for `count::SEND_TIME` once it has the ticket; this is how long
/// this side waits for it to finish (dialing included) before giving up.
const SEND_WAIT: Duration = Duration::from_secs(60);

/// Measures the sources at their host, the destination at its host, and the network from
/// the one to the other.
pub fn measure(
    sources: &[RemotePath],
    dest: &RemotePath,
    streams: usize,
    ssh: &SshOptions,
    quiet: bool,
) -> Result<(FarSource, FarMeasure)> {
    let Some(at) = sources.first() else {
        return Err(Error::Usage("probe needs a source".into()));
    };
    // No shared ssh connection: two sessions to one host would race for it.
    let rsh = Rsh::new(ssh.rsh.clone(), false);
    // Both sessions start at once: their set-up is most of the latency.
    let (source, receiver) = std::thread::scope(|s| {
        let a = s.spawn(|| FarEnd::start(&rsh, at, ssh, quiet));
        let b = FarEnd::start(&rsh, dest, ssh, quiet);
        let a = a
            .join()
            .unwrap_or_else(|_| Err(Error::io("ssh", std::io::Error::other("panicked"))));
        (a, b)
    });
    let (mut source, mut receiver) = (source?, receiver?);
    source.send(&Request::ProbeSource {
        paths: sources.iter().map(|s| s.path.clone()).collect(),
        // Lossless: validated to be at most MAX_STREAMS.
        streams: streams as u16,
        advertise: None,
        listen: false,
    })?;
    let (src, codecs) = measured(&mut source)?;
    source.ready("measuring the sources")?;
    receiver.send(&Request::Probe {
        dest: dest.path.clone(),
        streams: streams as u16,
        advertise: ssh.advertise,
        everywhere: true,
    })?;
    let ready = receiver.ready("measuring the destination")?;
    let Some(ticket) = ready.ticket else {
        return Err(unexpected(&receiver, "no ticket"));
    };
    source.send(&Request::Go {
        rename: None,
        ticket: Some(ticket),
        encrypt: true,
        chain: None,
        label: String::new(),
    })?;
    match source.finish(Some(SEND_WAIT)) {
        Some(d) if d.code == exit::OK => {}
        Some(d) => {
            let mut e = source.done_error(&d);
            if d.code == exit::NETWORK {
                if let Error::Host { message, .. } = &mut e {
                    message.push_str(&format!(
                        " ({} must reach {} directly, as for a remote-to-remote copy)",
                        source.host, receiver.host
                    ));
                }
            }
            return Err(e);
        }
        None => {
            return Err(Error::Host {
                host: source.host.clone(),
                message: "the far end ended without confirming (see above)".into(),
                code: exit::NETWORK,
            })
        }
    }
    let far = probed(&mut receiver)?;
    let far = finish(receiver, far)?;
    Ok((
        FarSource {
            src,
            codecs,
            network_rate: far.network_rate,
        },
        far,
    ))
}
