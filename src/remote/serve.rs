//! The far end: `haul serve`, started over ssh by a local `haul copy host:…`.
//!
//! It reads its instructions from stdin and answers on stdout (see `wire`): nothing else
//! ever reaches stdout, and errors travel in the final `Done` line (so the local side can
//! show them with the host name and exit with the same code) rather than on stderr.
//! Warnings (unreadable files, rejected connections) go to stderr, which the local side
//! shows prefixed with the host name.
//!
//! A receiver listens; a sender listens (pull) or dials the ticket it is given (remote to
//! remote). End of input on stdin means the local side is gone: the far end stops at once,
//! leaving partial files as any interrupted transfer does.
//!
//! Not here: how the far end was started or uploaded (`session`).

use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::wire::{self, Reply, Request};
use crate::codec::Compression;
use crate::config::{DEFAULT_RETRIES, DEFAULT_TIMEOUT};
use crate::error::{exit, Error, Result};
use crate::plan::layout::{dest_layout, is_single_file};
use crate::plan::walk::{self, Source};
use crate::protocol::{Accept, Listing, Replica};
use crate::receive::{incoming, receive, ReceiveOptions};
use crate::send::{send, ticket_dialer, SendOptions};
use crate::session::lost;
use crate::store::Store;
use crate::transport::{Role, Ticket};

/// How long a listening far end waits for each connection of the local side (which may
/// first wait for a direct connection to time out, then set up ssh tunnels).
mod endpoint;
mod pipe;
mod probe;
mod stdin;

use endpoint::{listen, path_of, AcceptPool, Out};
use stdin::{read_request, watch_stdin};

/// Runs `haul serve`; returns the exit code. `uploaded`: this binary was just copied here
/// by the local side, which wants its hash in the greeting to check the copy.
pub fn run(uploaded: bool) -> i32 {
    let hash = if uploaded {
        match self_hash() {
            Ok(h) => Some(h),
            Err(e) => {
                eprintln!("haul: cannot read own executable: {e}");
                return exit::OTHER;
            }
        }
    } else {
        None
    };
    let out = Out::default();
    out.line(&wire::greeting(hash.as_deref()));
    let mut input = io::BufReader::new(io::stdin());
    let finished = Arc::new(AtomicBool::new(false));
    let result = match read_request(&mut input) {
        Ok(Request::Receive {
            dest,
            single_file,
            advertise,
            everywhere,
            accept,
            dry_run,
            keep_cache,
            relay,
        }) => {
            watch_stdin(input, Arc::clone(&finished));
            let how = (advertise, everywhere, accept, dry_run, (keep_cache, relay));
            serve_receive(&out, &dest, single_file, how)
        }
        Ok(Request::Send {
            paths,
            streams,
            compress,
            block_size,
            sync,
            listen,
            advertise,
            select,
            limit,
            listing,
            keep_cache,
            congestion,
        }) => {
            let opts = compress
                .parse::<Compression>()
                .map_err(Error::Usage)
                .map(|compress| SendOptions {
                    streams: usize::from(streams),
                    compress,
                    block_size,
                    progress: false,
                    sync,
                    retries: DEFAULT_RETRIES,
                    select,
                    limit,
                    listing,
                    keep_cache,
                    chain: None,
                    label: String::new(),
                    stall: Some(crate::config::DEFAULT_STALL),
                    // Also on the connections a pull's far end accepted.
                    congestion,
                });
            match opts {
                Ok(o) => serve_send(&out, input, &finished, &paths, o, listen, advertise),
                Err(e) => Err(e),
            }
        }
        Ok(Request::ReceiveStream {
            dest,
            command,
            window,
            advertise,
            keep_cache,
            everywhere,
            relay,
        }) => {
            watch_stdin(input, Arc::clone(&finished));
            let how = (window, advertise, keep_cache, (everywhere, relay));
            pipe::serve_receive_stream(&out, &dest, command, how).map(Served::bytes)
        }
        Ok(Request::SendStream {
            path,
            command,
            streams,
            compress,
            block_size,
            window,
            advertise,
            limit,
            keep_cache,
            congestion,
        }) => {
            watch_stdin(input, Arc::clone(&finished));
            let req = pipe::SendStream {
                path,
                command,
                streams,
                compress,
                block_size,
                window,
                advertise,
                limit,
                keep_cache,
                congestion,
            };
            pipe::serve_send_stream(&out, req).map(Served::bytes)
        }
        Ok(Request::Probe {
            dest,
            streams,
            advertise,
            everywhere,
        }) => {
            watch_stdin(input, Arc::clone(&finished));
            probe::serve_probe(&out, &dest, streams, advertise, everywhere)
                .map(|()| Served::default())
        }
        Ok(Request::ProbeSource {
            paths,
            streams,
            advertise,
            listen,
        }) => probe::serve_probe_source(&out, input, &finished, &paths, streams, advertise, listen)
            .map(|()| Served::default()),
        Ok(Request::Go { .. }) => Err(Error::Usage("Go before Send".into())),
        // The local side went away before saying anything: nobody to tell.
        Err(None) => return exit::NETWORK,
        Err(Some(e)) => Err(e),
    };
    finished.store(true, Ordering::SeqCst);
    let (code, message, served) = match result {
        Ok(mut served) => match served.partial.take() {
            Some(e) => (e.exit_code(), e.to_string(), served),
            None => (exit::OK, String::new(), served),
        },
        Err(e) => (e.exit_code(), e.to_string(), Served::default()),
    };
    out.line(&wire::encode(&Reply::Done(wire::Done {
        code,
        message,
        files: served.files,
        bytes: served.bytes,
        deleted: served.deleted,
        replicas: served.replicas,
        stats: served.stats,
    })));
    code
}

/// What a far end did, for its `Done`.
#[derive(Default)]
struct Served {
    files: u64,
    bytes: u64,
    deleted: u64,
    /// A fan-out's sender: what became of each receiver.
    replicas: Vec<Replica>,
    stats: wire::Stats,
    /// A sender that skipped files it could not read (or that kept changing): the run
    /// ends with this error, and everything above still holds (replicas included).
    partial: Option<Error>,
}

impl Served {
    /// Only the counts a stream or probe reports.
    fn bytes(bytes: u64) -> Served {
        Served {
            bytes,
            ..Served::default()
        }
    }
}

fn serve_receive(
    out: &Out,
    dest: &[u8],
    single_file: bool,
    (advertise, everywhere, accept, dry_run, (keep_cache, relay)): (
        Option<IpAddr>,
        bool,
        Accept,
        bool,
        (bool, bool),
    ),
) -> Result<Served> {
    let (root, rename) = dest_layout(single_file, &path_of(dest));
    let store = match dry_run {
        true => Store::open_dry(&root)?,
        false => Store::open(&root)?,
    };
    store.set_accept(accept)?;
    store.set_keep_cache(keep_cache);
    let (listener, ticket, port) = listen(advertise, everywhere)?;
    let key = ticket.secret.block_key();
    out.line(&wire::encode(&Reply::Ready {
        ticket: Some(ticket.encode()),
        port: Some(port),
        single_file,
        rename,
    }));
    let (_handle, accepted) = listener.spawn_acceptor();
    let rx = incoming(accepted)?;
    let opts = ReceiveOptions {
        progress: false,
        timeout: DEFAULT_TIMEOUT,
        relay,
        first: None,
        outcome_key: ticket.secret.outcome_key(),
        listing: Listing::default(),
    };
    let report = receive(store, key, rx, opts)?;
    let s = &report.summary;
    let partial = (report.sender_failed > 0).then(|| Error::Partial {
        count: report.sender_failed,
        first: "see the sender's output".into(),
    });
    Ok(Served {
        files: s.files,
        bytes: s.bytes,
        deleted: s.deleted,
        replicas: Vec::new(),
        stats: wire::Stats::of(&report.report(), &report.summary, &report.counters),
        partial,
    })
}

fn serve_send(
    out: &Out,
    mut input: io::BufReader<io::Stdin>,
    finished: &Arc<AtomicBool>,
    paths: &[Vec<u8>],
    opts: SendOptions,
    listen_here: bool,
    advertise: Option<IpAddr>,
) -> Result<Served> {
    let mut sources: Vec<Source> = paths
        .iter()
        .map(|p| Source::from_arg(&path_of(p)))
        .collect();
    walk::check_sources(&sources)?;
    let single_file = is_single_file(&sources);
    let listening = if listen_here {
        Some(listen(advertise, false)?)
    } else {
        None
    };
    out.line(&wire::encode(&Reply::Ready {
        ticket: listening.as_ref().map(|(_, t, _)| t.encode()),
        port: listening.as_ref().map(|(_, _, p)| *p),
        single_file,
        rename: None,
    }));
    let (rename, dial_ticket, encrypt, chain, label) = match read_request(&mut input) {
        Ok(Request::Go {
            rename,
            ticket,
            encrypt,
            chain,
            label,
        }) => (rename, ticket, encrypt, chain, label),
        Ok(_) => {
            return Err(crate::protocol::ProtocolError::Unexpected(
                "expected Go from the local haul".into(),
            )
            .into())
        }
        Err(None) => {
            return Err(lost(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the local haul went away before the start",
            )))
        }
        Err(Some(e)) => return Err(e),
    };
    watch_stdin(input, Arc::clone(finished));
    if let (Some(name), [only]) = (rename, sources.as_mut_slice()) {
        only.dest_name = Some(name);
    }
    // A fan-out: the first receiver passes everything on; when it fails, this sender goes
    // on with the next (through its ticket) and reports it in `replicas`.
    let opts = SendOptions {
        chain,
        label,
        ..opts
    };
    let report = match (listening, dial_ticket) {
        (Some((listener, ticket, _)), _) => {
            let key = ticket.secret.block_key();
            let (_handle, accepted) = listener.spawn_acceptor();
            // A pull's local receiver dials once (`Route::dial_into`).
            let pool = AcceptPool::once(accepted, opts.streams);
            let dial = |role: Role| pool.take(role);
            send(&sources, &opts, key, dial)?
        }
        (None, Some(text)) => {
            let ticket = Ticket::parse(&text)?;
            let dial = ticket_dialer(&ticket, encrypt);
            send(&sources, &opts, ticket.secret.block_key(), dial)?
        }
        (None, None) => {
            return Err(Error::Usage("no ticket to dial".into()));
        }
    };
    // Files it could not read end the run with their error, which does not hide what
    // became of the replicas.
    let s = &report.summary;
    Ok(Served {
        files: s.files,
        bytes: s.bytes,
        deleted: s.deleted,
        replicas: report.replicas.clone(),
        stats: wire::Stats::of(&report.report(), &report.summary, &report.counters),
        partial: report.partial_error(),
    })
}

/// BLAKE3 of this process's executable, hex.
pub fn self_hash() -> io::Result<String> {
    let mut f = std::fs::File::open("/proc/self/exe")?;
    let mut h = blake3::Hasher::new();
    io::copy(&mut f, &mut h)?;
    Ok(h.finalize().to_hex().to_string())
}
