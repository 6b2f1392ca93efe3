//! The validated configuration: built once from the command line, passed down by
//! reference. Every user mistake that parsing alone cannot catch is caught here.
//!
//! Pure data: what the user asked for, with the defaults filled in. Nothing here knows how
//! a transfer runs; `cmd` and `remote` read it and hand each part its own options. It
//! imports only plain data types from below (compression, sync options and limits, the
//! ticket). `location` parses `[user@]host:path` and `-e` words.

mod accept;
mod fanout;
mod location;
mod object;
mod pipe;
mod probe;
mod select;
mod shard;
mod size;
mod sst;
mod transfer;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::{Cli, CommandArgs, RemoteArgs, TransferArgs};
use crate::codec::Compression;
use crate::error::{Error, Result};
use crate::protocol::{Accept, Listing};

pub use fanout::TicketFrom;
pub use location::{
    parse_listen, parse_location, split_command, Location, RemoteCopy, RemotePath, SpecError,
};
pub use object::{object_copy, ObjectCopy, ObjectPlan, ObjectUrl, MAX_KEY};
pub use pipe::{Pipe, PipeCopy, DEFAULT_PIPE_BUFFER, MAX_PIPE_BUFFER};
pub use probe::{Probe, ProbeDest};
pub use shard::{read_shard_file, PlanJob};
pub use size::{parse_limit, parse_rate, parse_size};
pub use sst::{listen_address, sst_options, Defaults, Sst, SstJob, SstOptions, SstRole};
pub use transfer::{default_streams, Transfer, DEFAULT_RETRIES, DEFAULT_STALL, LOCAL_STREAMS};

use crate::receive::pipe::PipeTo;
use crate::send::pipe::PipeFrom;
use transfer::transfer_config;

/// Compression when the data crosses a network (send, copy between hosts): `auto`, each
/// stream choosing none, lz4 or a zstd level per unit from what it measures
/// (`codec::tune`; docs/design.md). A local copy does not compress.
pub const NETWORK_COMPRESSION: Compression = Compression::Auto;

/// How long `recv` waits for a vanished sender to come back.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How to reach and start far ends.
#[derive(Clone, Debug)]
pub struct SshOptions {
    /// The remote shell command, split into words (`-e`, `HAUL_RSH`; default `ssh`).
    pub rsh: Vec<String>,
    /// The haul program on far hosts (`--remote-haul`; default `haul`, found on PATH).
    pub remote_haul: String,
    /// Carry the streams through ssh even when a direct connection would work.
    pub via_ssh: bool,
    /// Far ends advertise this address instead of their own (NAT; tests).
    pub advertise: Option<IpAddr>,
    /// A zero-install upload may use the far user's cache (not `--no-cache`).
    pub cache: bool,
}

/// What to run.
#[derive(Debug)]
pub enum Command {
    /// Receive one transfer.
    Recv {
        /// Destination root.
        dir: PathBuf,
        /// Where to listen (None: all addresses, any port).
        listen: Option<SocketAddr>,
        /// Where to also write the ticket.
        ticket_file: Option<PathBuf>,
        /// How long to wait for a vanished sender.
        timeout: Option<Duration>,
        /// `--relay`: pass the transfer on to the receivers a chain fan-out names.
        relay: bool,
        /// What to keep of the sender's metadata.
        accept: Accept,
    },
    /// Receive one stream.
    RecvPipe {
        /// Where it goes.
        to: PipeTo,
        /// Where to listen (None: all addresses, any port).
        listen: Option<SocketAddr>,
        /// Where to also write the ticket.
        ticket_file: Option<PathBuf>,
        /// How long to wait for a vanished sender.
        timeout: Option<Duration>,
        /// `--relay`: pass the stream on to the receivers a chain fan-out names.
        relay: bool,
        /// Most stream bytes held here.
        window: u64,
    },
    /// Send one stream to a ticket.
    SendPipe {
        /// Where it comes from.
        from: PipeFrom,
        /// Where to.
        ticket: TicketFrom,
        /// A chain fan-out: the receivers after the first, in order.
        chain: Vec<TicketFrom>,
        /// How.
        transfer: Transfer,
        /// Its buffer and size.
        pipe: Pipe,
    },
    /// Copy one stream, here or between hosts.
    CopyPipe {
        /// Which way.
        plan: PipeCopy,
        /// How.
        transfer: Transfer,
        /// Its buffer and size.
        pipe: Pipe,
        /// How to start a far end.
        ssh: SshOptions,
    },
    /// Send to a ticket.
    Send {
        /// What to send, as given (`dir/` sends the contents).
        paths: Vec<PathBuf>,
        /// Where to.
        ticket: TicketFrom,
        /// A chain fan-out: the receivers after the first, in order.
        chain: Vec<TicketFrom>,
        /// How.
        transfer: Transfer,
    },
    /// Local copy.
    Copy {
        /// What to copy, as given.
        sources: Vec<PathBuf>,
        /// The destination, as given (rsync's layout rules are applied when it runs).
        dest: PathBuf,
        /// How.
        transfer: Transfer,
        /// What the destination keeps of the sources' metadata.
        accept: Accept,
        /// A chain fan-out (`--also`): far destinations the local one passes everything
        /// on to, and how to start them (None without).
        also: Option<(Vec<RemotePath>, SshOptions)>,
    },
    /// Copy to or from an object store (`s3://`).
    Object(ObjectCopy),
    /// Copy where the source or the destination is on another host.
    Remote {
        /// Which way.
        plan: RemoteCopy,
        /// How.
        transfer: Transfer,
        /// How to start the far ends.
        ssh: SshOptions,
        /// What the receiving side keeps of the sender's metadata.
        accept: Accept,
    },
    /// `haul plan`: write shard files, or check that they arrived.
    Plan(PlanJob),
    /// Change a running transfer's cap.
    Limit {
        /// The new cap (`None`: off).
        rate: Option<u64>,
        /// Which transfer.
        pid: Option<u32>,
    },
    /// Print a shell completion script.
    Completions(clap_complete::Shell),
    /// Print the manual page.
    Man,
    /// Galera's state transfer, one end (`haul sst`).
    Sst(Sst),
    /// Measure what would bound a copy (a far destination is reached as `copy` would).
    Probe(Probe, SshOptions),
    /// The far end of a remote copy (hidden).
    Serve {
        /// Only print the versions.
        probe: bool,
        /// Greet with the executable's own hash.
        uploaded: bool,
    },
}

/// The whole validated configuration.
#[derive(Debug)]
pub struct Config {
    /// What to run.
    pub command: Command,
    /// No progress bar, no summary.
    pub quiet: bool,
    /// Print the summary as JSON on stdout.
    pub json: bool,
    /// `-v`, `-i`: what to list per entry (`outgoing` is set where the direction is known).
    pub listing: Listing,
    /// `--stats`: rsync-like totals at the end.
    pub stats: bool,
    /// `--keep-cache`: leave what is read and written in the page cache.
    pub keep_cache: bool,
    /// `-P`, `--progress`: show progress even where stderr is not a terminal (lines).
    pub progress: bool,
}

impl Config {
    /// Validates the parsed command line.
    pub fn from_cli(cli: Cli) -> Result<Config> {
        let (cli, shard) = shard::take(cli)?;
        let mut command = match cli.command {
            CommandArgs::Recv {
                dir,
                stream,
                to_command,
                buffer,
                listen,
                ticket_file,
                timeout,
                relay,
                streams: _,
                accept,
                no_xattrs,
                force,
            } => {
                let listen = listen.as_deref().map(parse_listen).transpose()?;
                let timeout = timeout.map(Duration::from_secs);
                let target = pipe::recv_target(dir, stream, to_command)?;
                pipe::check_force(target.0.as_ref(), force)?;
                match target {
                    (Some(to), _) => Command::RecvPipe {
                        to,
                        listen,
                        ticket_file,
                        timeout,
                        relay,
                        // The sender's block size is not known yet: it checks the pair.
                        window: pipe::parse_buffer(buffer.as_deref(), 0)?,
                    },
                    (None, dir) => {
                        if buffer.is_some() {
                            return Err(Error::Usage(
                                "--buffer applies to streams (recv -, --stream, --to-command)"
                                    .into(),
                            ));
                        }
                        Command::Recv {
                            accept: accept::accept_config(&accept, no_xattrs)?,
                            dir,
                            listen,
                            ticket_file,
                            timeout,
                            relay,
                        }
                    }
                }
            }
            CommandArgs::Send {
                paths,
                from_command,
                to,
                ticket_file,
                transfer,
                no_encrypt,
            } => {
                let (ticket, chain) = fanout::tickets(to, ticket_file)?;
                let t = transfer_config(
                    &transfer,
                    !no_encrypt,
                    NETWORK_COMPRESSION,
                    default_streams(),
                )?;
                match pipe::send_source(&paths, from_command)? {
                    Some(from) => {
                        let ticket_on_stdin = std::iter::once(&ticket)
                            .chain(&chain)
                            .any(|t| matches!(t, TicketFrom::Stdin));
                        if ticket_on_stdin && from == PipeFrom::Stdin {
                            return Err(Error::Usage(
                                "standard input carries the stream: give the ticket with \
                                 --ticket-file or HAUL_TICKET, not --to -"
                                    .into(),
                            ));
                        }
                        Command::SendPipe {
                            from,
                            ticket,
                            chain,
                            pipe: stream_options(&transfer, &t)?,
                            transfer: t,
                        }
                    }
                    None => Command::Send {
                        paths: file_options(&transfer).map(|()| paths)?,
                        ticket,
                        chain,
                        transfer: t,
                    },
                }
            }
            CommandArgs::Copy {
                paths,
                transfer,
                object,
                from_command,
                to_command,
                remote,
                ..
            } if paths.iter().any(|p| ObjectUrl::is_one(p.as_os_str())) => {
                object::refuse_options(&transfer, (&from_command, &to_command), &remote, cli.json)?;
                let streams = transfer.streams.unwrap_or_else(default_streams);
                // `--timeout SECS` (0: never), else the silence bound every wait has.
                let silence = transfer.timeout.map_or(Some(DEFAULT_TIMEOUT), |s| {
                    (s > 0).then(|| Duration::from_secs(s))
                });
                let o = object_copy(&paths, object.s3_endpoint, streams, silence)?;
                Command::Object(o.ok_or_else(|| Error::Usage("copy needs SRC... DST".into()))?)
            }
            CommandArgs::Copy {
                paths,
                from_command,
                to_command,
                force,
                transfer,
                accept,
                remote,
                object: _,
            } => match pipe::copy_pipe(&paths, from_command, to_command)? {
                Some(mut plan) => {
                    let to = match &plan {
                        PipeCopy::Local { to, .. } | PipeCopy::Pull { to, .. } => Some(to),
                        PipeCopy::Push { .. } => None,
                    };
                    pipe::check_force(to, force)?;
                    match &mut plan {
                        PipeCopy::Push { also, dest, .. } => {
                            *also = fanout::also(&remote.also)?;
                            fanout::stream_also(dest, also)?;
                        }
                        PipeCopy::Pull { .. } => {
                            fanout::no_chain("a stream from a host", &remote.also)?
                        }
                        PipeCopy::Local { .. } => {
                            fanout::no_chain("a stream on this host", &remote.also)?
                        }
                    }
                    let local = matches!(plan, PipeCopy::Local { .. });
                    let t = if local {
                        transfer_config(&transfer, false, Compression::None, default_streams())?
                    } else {
                        transfer_config(
                            &transfer,
                            !remote.no_encrypt,
                            NETWORK_COMPRESSION,
                            default_streams(),
                        )?
                    };
                    Command::CopyPipe {
                        plan,
                        pipe: stream_options(&transfer, &t)?,
                        transfer: t,
                        ssh: ssh_options(&remote)?,
                    }
                }
                None if paths.len() < 2 => {
                    return Err(Error::Usage("copy needs SRC... DST".into()))
                }
                None => {
                    pipe::check_force(None, force)?;
                    file_options(&transfer)?;
                    let a = accept::accept_config(&accept, transfer.filter.no_xattrs)?;
                    copy_command(paths, &transfer, a, &remote)?
                }
            },
            CommandArgs::Plan(p) => Command::Plan(shard::plan_job(p)?),
            CommandArgs::Serve { probe, uploaded } => Command::Serve { probe, uploaded },
            CommandArgs::Completions { shell } => Command::Completions(shell),
            CommandArgs::Man => Command::Man,
            CommandArgs::Sst(a) => Command::Sst(match a.install_script {
                Some(dir) => Sst::InstallScript(dir),
                None => Sst::Run(sst::sst_job(&a.args)?),
            }),
            CommandArgs::Probe {
                paths,
                streams,
                to,
                ticket_file,
                remote,
            } => Command::Probe(
                probe::probe(&paths, streams, probe::ticket(to, ticket_file)?)?,
                ssh_options(&remote)?,
            ),
            CommandArgs::Limit { rate, pid } => Command::Limit {
                rate: match rate.as_str() {
                    "off" => None,
                    r => parse_limit(r, 1)?,
                },
                pid,
            },
        };
        attach_shard(&mut command, shard)?;
        Ok(Config {
            command,
            quiet: cli.quiet,
            json: cli.json,
            listing: Listing {
                verbose: cli.verbose > 0,
                itemize: cli.itemize_changes > 0,
                outgoing: false,
                stderr: cli.json,
            },
            stats: cli.stats,
            keep_cache: cli.keep_cache,
            progress: cli.rsync.p_upper > 0 || cli.rsync.progress > 0,
        })
    }
}

/// `copy`: local when every path is local, otherwise a remote copy (rsync's rules for
/// `host:path`; all sources on one host).
fn copy_command(
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
            let far = !r.also.is_empty();
            if r.via_ssh || (!far && (r.no_encrypt || r.no_cache || r.remote_haul.is_some())) {
                return Err(Error::Usage(
                    "--via-ssh, --no-encrypt, --no-cache and --remote-haul apply only when a \
                     path is host:path (--via-ssh: the first)"
                        .into(),
                ));
            }
            // With --also the local destination passes everything on over the network.
            let (transfer, also) = match far {
                false => (
                    transfer::local_units(
                        transfer_config(t, false, Compression::None, LOCAL_STREAMS)?,
                        t.block_size.is_some(),
                    ),
                    None,
                ),
                true => (
                    transfer_config(t, !r.no_encrypt, NETWORK_COMPRESSION, default_streams())?,
                    Some((fanout::also(&r.also)?, ssh_options(r)?)),
                ),
            };
            return Ok(Command::Copy {
                sources: local,
                dest: dst,
                accept,
                transfer,
                also,
            });
        }
        (true, Location::Remote(dest)) => RemoteCopy::Push {
            sources: local,
            dest,
            also: fanout::also(&r.also)?,
        },
        (false, Location::Local(dest)) => RemoteCopy::Pull {
            sources: remote,
            dest,
            also: fanout::also(&r.also)?,
        },
        (false, Location::Remote(dest)) => RemoteCopy::Between {
            sources: remote,
            dest,
            also: fanout::also(&r.also)?,
        },
    };
    Ok(Command::Remote {
        plan,
        transfer: transfer_config(t, !r.no_encrypt, NETWORK_COMPRESSION, default_streams())?,
        ssh: ssh_options(r)?,
        accept,
    })
}

/// Gives the walk of `command` the shard's list (`--shard`) and the plan's symlink rule.
fn attach_shard(command: &mut Command, shard: Option<shard::Shard>) -> Result<()> {
    let Some(shard) = shard else {
        return Ok(());
    };
    let transfer = match command {
        Command::Copy { transfer, .. }
        | Command::Send { transfer, .. }
        | Command::Remote {
            plan: RemoteCopy::Push { .. },
            transfer,
            ..
        } => transfer,
        _ => {
            return Err(Error::Usage(
                "--shard copies to a local or host:DST directory".into(),
            ))
        }
    };
    transfer.select.shard = Some(std::sync::Arc::new(shard.list));
    transfer.select.links = shard.links;
    Ok(())
}

fn ssh_options(r: &RemoteArgs) -> Result<SshOptions> {
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
        cache: !r.no_cache,
    })
}

/// Refuses a stream's options for a transfer of files, which would ignore them.
fn file_options(a: &TransferArgs) -> Result<()> {
    let given = [
        (a.size.is_some(), "--size"),
        (a.buffer.is_some(), "--buffer"),
    ];
    match given.iter().find(|(g, _)| *g) {
        Some((_, name)) => Err(Error::Usage(format!(
            "{name} applies to a stream (`-`, --from-command, --to-command), not to files"
        ))),
        None => Ok(()),
    }
}

/// A stream's options: its buffer (checked against the block size) and expected size.
fn stream_options(a: &TransferArgs, t: &Transfer) -> Result<Pipe> {
    if a.timeout.is_some() {
        return Err(Error::Usage(
            "--timeout applies to files; a stream's sender gives up on a receiver silent \
             for 30 s"
                .into(),
        ));
    }
    let s = &a.sync;
    if s.checksum || s.inplace || s.delete || s.delete_excluded || s.dry_run {
        return Err(Error::Usage(
            "--checksum, --inplace, --delete(-excluded) and --dry-run apply to files, not to a \
             stream"
                .into(),
        ));
    }
    if s.update || s.existing || s.ignore_existing || s.size_only {
        return Err(Error::Usage(
            "-u, --existing, --ignore-existing and --size-only apply to files, not to a stream"
                .into(),
        ));
    }
    if t.select.selects() {
        return Err(Error::Usage(
            "filters, --files-from, -L and -x apply to files, not to a stream".into(),
        ));
    }
    pipe::pipe_options(a.size.as_deref(), a.buffer.as_deref(), t.block_size)
}

#[cfg(test)]
mod tests;
