//! `copy SRC... DST`: which paths are local and which `host:path`, and so whether it is a
//! local copy, a push, a pull or a copy between two far hosts (rsync's rules). `probe`
//! reads its arguments the same way.

use std::path::PathBuf;

use super::{
    parse_location, split_command, transfer_config, Command, Location, RemoteCopy, SpecError,
    SshOptions, NETWORK_COMPRESSION,
};
use crate::cli::{RemoteArgs, TransferArgs};
use crate::codec::Compression;
use crate::error::{Error, Result};
use crate::protocol::Accept;

/// `copy`: local when every path is local, otherwise a remote copy (rsync's rules for
/// `host:path`; all sources on one host).
pub(super) fn copy_command(
    mut paths: Vec<PathBuf>,
    t: &TransferArgs,
    accept: Accept,
    r: &RemoteArgs,
) -> Result<Command> {
    let dst = paths
        .pop()
        .ok_or_else(|| Error::Usage("copy needs SRC... DST".into()))?;
    let usage = |e: SpecError| Error::Usage(e.0);
    let dest = parse_location(dst.as_os_str()).map_err(usage)?;
    let srcs = paths
        .iter()
        .map(|p| parse_location(p.as_os_str()))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(usage)?;
    let mut local = Vec::new();
    let mut remote = Vec::new();
    for s in srcs {
        match s {
            Location::Local(p) => local.push(p),
            Location::Remote(r) => remote.push(r),
        }
    }
    if !local.is_empty() && !remote.is_empty() {
        return Err(Error::Usage(
            "copy: the sources must be all local or all on one host".into(),
        ));
    }
    if let Some(first) = remote.first() {
        if remote.iter().any(|x| !x.same_login(first)) {
            return Err(Error::Usage(
                "copy: remote sources must all be on one host (and user)".into(),
            ));
        }
    }
    let plan = match (remote.is_empty(), dest) {
        (true, Location::Local(dst)) => {
            if r.via_ssh || r.no_encrypt || r.remote_haul.is_some() {
                return Err(Error::Usage(
                    "--via-ssh, --no-encrypt and --remote-haul apply only when a path is \
                     host:path"
                        .into(),
                ));
            }
            return Ok(Command::Copy {
                sources: local,
                dest: dst,
                accept,
                transfer: transfer_config(t, false, Compression::None)?,
            });
        }
        (true, Location::Remote(dest)) => RemoteCopy::Push {
            sources: local,
            dest,
        },
        (false, Location::Local(dest)) => RemoteCopy::Pull {
            sources: remote,
            dest,
        },
        (false, Location::Remote(dest)) => RemoteCopy::Between {
            sources: remote,
            dest,
        },
    };
    Ok(Command::Remote {
        plan,
        transfer: transfer_config(t, !r.no_encrypt, NETWORK_COMPRESSION)?,
        ssh: ssh_options(r)?,
        accept,
    })
}

pub(super) fn ssh_options(r: &RemoteArgs) -> Result<SshOptions> {
    let rsh = split_command(r.rsh.as_deref().unwrap_or("ssh")).map_err(|e| Error::Usage(e.0))?;
    let remote_haul = r.remote_haul.clone().unwrap_or_else(|| "haul".into());
    if remote_haul.is_empty() || remote_haul.contains('\0') {
        return Err(Error::Usage("--remote-haul needs a path".into()));
    }
    Ok(SshOptions {
        rsh,
        remote_haul,
        via_ssh: r.via_ssh,
        advertise: r.remote_advertise,
    })
}
