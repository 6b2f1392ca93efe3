//! The listening side: bind, print a ticket, accept and authenticate connections.
//!
//! One thread polls the listening socket (or two, see `bind_with_loopback`), and a socket
//! pair's end that a stop closes, so the stop takes effect at once (100 ms ticks for the log
//! of refusals); each incoming connection gets its own short-lived thread that peeks the first
//! byte (0x16 starts a TLS ClientHello, 'H' the plain haul hello, anything else is refused),
//! runs TLS if asked and then the secret handshake, all under one deadline; the first byte
//! must come sooner. How many handshakes run at once, and which one makes room for a
//! newcomer, is `admit`'s business. Authenticated connections go out on a channel; every
//! failure touches nothing else and is logged, a few lines per 10 s and then a count.
//!
//! Not here: what the connections carry, or deciding whether plain connections are welcome
//! (each `Accepted` says whether it is encrypted; the caller decides).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use rustls::server::UnbufferedServerConnection;
use rustls::ServerConfig;

use super::admit::{Admission, RejectLog, Source, LOG_WINDOW, MAX_PENDING};
use super::auth;
use super::conn::Io;
use super::deadline::{arm_deadline, listener_io, DeadlineTcp};
use super::handshake::MAGIC;
use super::ticket::{random32, Secret, Ticket, MAX_TICKET_ADDRS};
use super::tls;
use super::tls_stream::TlsStream;
use super::{sys, Conn, Role, TransportError};

/// How long a new connection may take to finish TLS and the secret handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a new connection may stay silent: a dialer sends its hello (or ClientHello)
/// right after connecting, so this only drops sockets that say nothing.
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(3);
/// How often the accept loop checks whether it should stop.
const TICK: Duration = Duration::from_millis(100);
/// Handshake threads alive at once, evicted ones that are still ending included; beyond
/// this a newcomer is refused (a backstop: evicted handshakes end within moments).
const MAX_THREADS: usize = 2 * MAX_PENDING;
/// First byte of a TLS record carrying a handshake message (the ClientHello).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// A bound listening socket with its certificate and secret, ready to accept.
pub struct Listener {
    tcp: TcpListener,
    /// A second socket on 127.0.0.1 with the same port (see [`Listener::bind_with_loopback`]).
    loopback: Option<TcpListener>,
    local: SocketAddr,
    config: Arc<ServerConfig>,
    fingerprint: [u8; 32],
    secret: Secret,
    /// Deadline for each connection's handshake (shortened in tests).
    pub(super) handshake_timeout: Duration,
    /// How long the accept loop polls before it looks at its stop flag and the log of
    /// refusals again ([`TICK`]; a test makes it long).
    tick: Duration,
}

/// One authenticated incoming connection.
#[derive(Debug)]
pub struct Accepted {
    /// The stream, past TLS and the secret handshake.
    pub conn: Conn,
    /// What the dialer says this connection is for.
    pub role: Role,
    /// The dialer's address.
    pub peer: SocketAddr,
    /// Whether the stream is TLS.
    pub encrypted: bool,
}

/// Controls a running accept loop; dropping it stops the loop.
pub struct AcceptorHandle {
    stop: Arc<AtomicBool>,
    /// One end of a socket pair whose other end the loop polls too: closing it wakes the
    /// loop at once (`None` where no pair could be made: the loop then sees the stop at
    /// its next tick).
    wake: Option<UnixStream>,
    thread: Option<JoinHandle<()>>,
    local: SocketAddr,
    rejected: Arc<AtomicU64>,
}

/// What every handshake thread shares.
struct Shared {
    config: Arc<ServerConfig>,
    key: [u8; 32],
    timeout: Duration,
    tx: Sender<Accepted>,
    /// Set when the receiver is gone: the loop stops.
    closed: AtomicBool,
    rejected: Arc<AtomicU64>,
    /// The handshakes running now, each with a clone of its socket to evict it by.
    admission: Mutex<Admission<TcpStream>>,
    /// Handshake threads alive (evicted ones included until they end).
    threads: AtomicUsize,
    log: Mutex<RejectLog>,
}

impl Listener {
    /// Binds (`None`: all addresses, dual-stack `[::]` falling back to `0.0.0.0`, ephemeral
    /// port; `Some(addr)` may have port 0) and creates a fresh self-signed certificate and a
    /// fresh secret.
    pub fn bind(addr: Option<SocketAddr>) -> Result<Listener, TransportError> {
        let tcp = match addr {
            Some(a) => TcpListener::bind(a).map_err(|source| TransportError::Bind {
                addr: a.to_string(),
                source,
            })?,
            None => bind_wildcard()?,
        };
        let local = tcp.local_addr().map_err(|source| TransportError::Bind {
            addr: "the listening socket".into(),
            source,
        })?;
        let identity = tls::server_identity()?;
        let secret = Secret::try_random().map_err(TransportError::Io)?;
        Ok(Listener {
            tcp,
            loopback: None,
            local,
            config: identity.config,
            fingerprint: identity.fingerprint,
            secret,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            tick: TICK,
        })
    }

    /// Binds `ip` (ephemeral port) and, unless `ip` is 127.0.0.1, 127.0.0.1 on the same port
    /// too, so that a helper on this host (`ssh -W 127.0.0.1:PORT`) still reaches it. The
    /// ticket lists only `ip`.
    pub fn bind_with_loopback(ip: IpAddr) -> Result<Listener, TransportError> {
        let mut l = Listener::bind(Some(SocketAddr::new(ip, 0)))?;
        let lo = SocketAddr::from((Ipv4Addr::LOCALHOST, l.local.port()));
        if ip != lo.ip() {
            let extra = TcpListener::bind(lo).map_err(|source| TransportError::Bind {
                addr: lo.to_string(),
                source,
            })?;
            l.loopback = Some(extra);
        }
        Ok(l)
    }

    /// The ticket: the bound port with this host's usable addresses (for a wildcard bind,
    /// every non-loopback interface address, IPv4 first, then loopback last; otherwise just
    /// the bound address), the certificate fingerprint and the secret.
    pub fn ticket(&self) -> Ticket {
        let addrs = if self.local.ip().is_unspecified() {
            let v6 = self.local.is_ipv6();
            // A `[::]` socket takes IPv4 too unless the system made it IPv6-only.
            let v4 = !v6 || !socket2::SockRef::from(&self.tcp).only_v6().unwrap_or(true);
            let found = sys::interface_addrs().unwrap_or_default();
            advertised(&found, v4, v6, self.local.port())
        } else {
            vec![self.local]
        };
        Ticket {
            addrs,
            fingerprint: self.fingerprint,
            secret: self.secret.clone(),
        }
    }

    /// The bound address (with the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Spawns the accept loop. Authenticated connections arrive on the returned channel;
    /// a rejected one prints "haul: rejected connection from ADDR: REASON" to stderr, the
    /// first few per 10 s, then "haul: N more connections refused in the last 10 s". The
    /// loop stops when the handle is stopped or dropped, or once it finds the receiver gone.
    pub fn spawn_acceptor(self) -> (AcceptorHandle, Receiver<Accepted>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        let rejected = Arc::new(AtomicU64::new(0));
        let shared = Arc::new(Shared {
            config: self.config,
            key: self.secret.conn_key(),
            timeout: self.handshake_timeout,
            tx,
            closed: AtomicBool::new(false),
            rejected: rejected.clone(),
            admission: Mutex::new(Admission::new()),
            threads: AtomicUsize::new(0),
            log: Mutex::new(RejectLog::new(Instant::now())),
        });
        // Without non-blocking mode a connection reset between poll and accept could block
        // the loop until the next connection; poll still gates accept, so carry on. The
        // loopback socket is only an extra: without non-blocking mode an accept on it
        // could block the main one, so it is dropped instead.
        let _ = self.tcp.set_nonblocking(true);
        let mut tcp = vec![self.tcp];
        tcp.extend(self.loopback.filter(|l| l.set_nonblocking(true).is_ok()));
        let loop_stop = stop.clone();
        let tick = self.tick;
        let (wake, woken) = match UnixStream::pair() {
            Ok((a, b)) => (Some(a), Some(b)),
            Err(_) => (None, None),
        };
        let thread = thread::Builder::new()
            .name("haul-accept".into())
            .spawn(move || accept_loop(&tcp, woken.as_ref(), &loop_stop, &shared, tick))
            // On failure the sender is dropped with the closure, so the receiver reports
            // disconnection at once instead of waiting forever.
            .ok();
        let handle = AcceptorHandle {
            stop,
            wake,
            thread,
            local: self.local,
            rejected,
        };
        (handle, rx)
    }
}

impl AcceptorHandle {
    /// Stops the accept loop and waits for it (woken from its poll at once). Handshakes
    /// already running finish on their own.
    pub fn stop(mut self) {
        self.halt();
    }

    /// The listening address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// How many connections were rejected so far.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Closed: the loop's end reads as hung up, which ends its poll.
        drop(self.wake.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for AcceptorHandle {
    fn drop(&mut self) {
        self.halt();
    }
}

fn bind_wildcard() -> Result<TcpListener, TransportError> {
    use socket2::{Domain, Protocol, Socket, Type};
    let any6 = SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0));
    let dual = (|| -> io::Result<TcpListener> {
        let s = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
        s.set_only_v6(false)?;
        s.bind(&any6.into())?;
        s.listen(1024)?;
        Ok(s.into())
    })();
    match dual {
        Ok(l) => Ok(l),
        Err(_) => {
            TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).map_err(|source| TransportError::Bind {
                addr: "0.0.0.0:0".into(),
                source,
            })
        }
    }
}

/// Picks the ticket's addresses from the interface list: non-loopback IPv4, then IPv6
/// (link-local IPv6 needs the dialer's own interface index, so it is left out), then
/// loopback; no duplicates, at most `MAX_TICKET_ADDRS`.
fn advertised(found: &[sys::IfAddr], v4: bool, v6: bool, port: u16) -> Vec<SocketAddr> {
    let usable = |ip: &IpAddr| match ip {
        IpAddr::V4(a) => v4 && !a.is_unspecified(),
        IpAddr::V6(a) => {
            v6 && !a.is_unspecified()
                && (a.segments()[0] & 0xffc0) != 0xfe80
                && a.to_ipv4_mapped().is_none()
        }
    };
    let mut loopback: Vec<IpAddr> = Vec::new();
    if v4 {
        loopback.push(Ipv4Addr::LOCALHOST.into());
    }
    if v6 {
        loopback.push(Ipv6Addr::LOCALHOST.into());
    }
    let mut ips: Vec<IpAddr> = Vec::new();
    let outward = found.iter().filter(|a| !a.loopback && !a.ip.is_loopback());
    let (fours, sixes): (Vec<_>, Vec<_>) = outward.map(|a| a.ip).partition(IpAddr::is_ipv4);
    for ip in fours.into_iter().chain(sixes) {
        if usable(&ip) && !ips.contains(&ip) && ips.len() + loopback.len() < MAX_TICKET_ADDRS {
            ips.push(ip);
        }
    }
    ips.extend(loopback);
    ips.into_iter()
        .map(|ip| SocketAddr::new(ip, port))
        .collect()
}

fn accept_loop(
    tcp: &[TcpListener],
    woken: Option<&UnixStream>,
    stop: &AtomicBool,
    shared: &Arc<Shared>,
    tick: Duration,
) {
    while !stop.load(Ordering::Acquire) && !shared.closed.load(Ordering::Acquire) {
        summarise_rejections(shared);
        match sys::wait_acceptable(tcp, woken.map(AsFd::as_fd), tick) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(_) => {
                thread::sleep(TICK);
                continue;
            }
        }
        for t in tcp {
            accept_queued(t, shared);
        }
    }
}

/// Takes everything that is queued on `tcp` before polling again.
fn accept_queued(tcp: &TcpListener, shared: &Arc<Shared>) {
    loop {
        match tcp.accept() {
            Ok((sock, peer)) => start_handshake(sock, peer, shared),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            // Aborted connections, or out of file descriptors: wait a tick, try again.
            Err(_) => {
                thread::sleep(TICK);
                break;
            }
        }
    }
}

/// Ends a handshake's bookkeeping however its thread ends: leaves the admission table
/// (`evicted` tells whether it had been pushed out already) and the thread count.
struct HandshakeGuard {
    shared: Arc<Shared>,
    id: u64,
}

impl HandshakeGuard {
    /// Leaves the table; `false` when this handshake was evicted (already logged).
    fn leave(&self) -> bool {
        self.shared
            .admission
            .lock()
            .map(|mut a| a.remove(self.id))
            .unwrap_or(true)
    }
}

impl Drop for HandshakeGuard {
    fn drop(&mut self) {
        self.leave();
        self.shared.threads.fetch_sub(1, Ordering::AcqRel);
    }
}

fn reject(shared: &Shared, peer: SocketAddr, reason: &str) {
    shared.rejected.fetch_add(1, Ordering::Relaxed);
    let show = shared.log.lock().map(|mut l| l.note()).unwrap_or(true);
    if show {
        eprintln!("haul: rejected connection from {peer}: {reason}");
    }
}

/// Prints how many refusals were not shown once a log window has passed.
fn summarise_rejections(shared: &Shared) {
    let hidden = shared
        .log
        .lock()
        .ok()
        .and_then(|mut l| l.poll_summary(Instant::now()));
    if let Some(n) = hidden {
        eprintln!(
            "haul: {n} more connections refused in the last {} s",
            LOG_WINDOW.as_secs()
        );
    }
}

fn start_handshake(sock: TcpStream, peer: SocketAddr, shared: &Arc<Shared>) {
    if shared.closed.load(Ordering::Acquire) {
        return;
    }
    if shared.threads.load(Ordering::Acquire) >= MAX_THREADS {
        reject(shared, peer, "too many handshakes in progress");
        return;
    }
    let handle = match sock.try_clone() {
        Ok(h) => h,
        Err(e) => return reject(shared, peer, &format!("socket setup: {e}")),
    };
    let Ok(mut table) = shared.admission.lock() else {
        return;
    };
    let admitted = table.admit(Source::of(peer.ip()), Instant::now(), handle);
    drop(table);
    if let Some(old) = admitted.evicted {
        let who = old
            .peer_addr()
            .unwrap_or(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)));
        // Its thread sees end of input, ends, and finds itself gone from the table.
        let _ = old.shutdown(Shutdown::Both);
        reject(shared, who, "evicted: too many handshakes from its address");
    }
    shared.threads.fetch_add(1, Ordering::AcqRel);
    let guard = HandshakeGuard {
        shared: shared.clone(),
        id: admitted.id,
    };
    let spawned = thread::Builder::new()
        .name("haul-handshake".into())
        .spawn(move || {
            let shared = &guard.shared;
            match accept_one(sock, peer, shared, admitted.id) {
                Ok(accepted) => {
                    if shared.tx.send(accepted).is_err() {
                        shared.closed.store(true, Ordering::Release);
                    }
                }
                Err(reason) => {
                    if guard.leave() {
                        reject(shared, peer, &reason);
                    }
                }
            }
        });
    if let Err(e) = spawned {
        // The closure (and its guard) was dropped, so the bookkeeping is already undone.
        reject(shared, peer, &format!("cannot start a thread: {e}"));
    }
}

/// TLS (when the dialer starts with a ClientHello) and the secret handshake, within the
/// deadline. The reason to log on failure.
fn accept_one(
    sock: TcpStream,
    peer: SocketAddr,
    shared: &Shared,
    id: u64,
) -> Result<Accepted, String> {
    let now = Instant::now();
    let deadline = now + shared.timeout;
    let setup = |e: io::Error| format!("socket setup: {e}");
    sock.set_nonblocking(false).map_err(setup)?;
    sock.set_nodelay(true).map_err(setup)?;
    super::congestion::prefer(&sock);
    let first_deadline = deadline.min(now + FIRST_BYTE_TIMEOUT);
    arm_deadline(&sock, Some(first_deadline), true).map_err(setup)?;
    let mut first = [0u8; 1];
    match sock.peek(&mut first) {
        Ok(0) => return Err("closed without sending anything".into()),
        Ok(_) => {}
        Err(e) => return Err(listener_io("waiting for the first byte", e)),
    }
    if first[0] != TLS_HANDSHAKE_RECORD && first[0] != MAGIC[0] {
        return Err("not a haul connection (unexpected first byte)".into());
    }
    if let Ok(mut a) = shared.admission.lock() {
        a.talking(id);
    }
    let nonce_s = random32().map_err(|e| format!("no random nonce: {e}"))?;
    if first[0] != TLS_HANDSHAKE_RECORD {
        let mut io = DeadlineTcp {
            sock: &sock,
            deadline,
        };
        let (role, link) = auth::listen(&mut io, shared.key, nonce_s)?;
        sock.set_read_timeout(None).map_err(setup)?;
        sock.set_write_timeout(None).map_err(setup)?;
        return Ok(Accepted {
            conn: Conn::new(Io::Plain(sock), link, false),
            role,
            peer,
            encrypted: false,
        });
    }
    let conn = UnbufferedServerConnection::new(shared.config.clone())
        .map_err(|e| format!("TLS setup failed: {e}"))?;
    let mut stream = TlsStream::new(conn, sock, Some(deadline));
    match stream.handshake() {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            return Err("closed during the TLS handshake".into())
        }
        Err(e) if e.kind() == io::ErrorKind::InvalidData => return Err(tls_reason(&e)),
        Err(e) => return Err(listener_io("in the TLS handshake", e)),
    }
    let (role, link) = auth::listen(&mut stream, shared.key, nonce_s)?;
    stream.established().map_err(setup)?;
    Ok(Accepted {
        conn: Conn::new(Io::TlsServer(Box::new(stream)), link, false),
        role,
        peer,
        encrypted: true,
    })
}

/// The log reason for a failed TLS handshake, with a hint when the dialer distrusts us.
fn tls_reason(e: &io::Error) -> String {
    let alert = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    match alert {
        Some(rustls::Error::AlertReceived(rustls::AlertDescription::AccessDenied))
        | Some(rustls::Error::AlertReceived(rustls::AlertDescription::BadCertificate)) => {
            "the dialer does not trust our certificate (its ticket is from another run?)".into()
        }
        _ => format!("TLS handshake failed: {e}"),
    }
}

#[cfg(test)]
#[path = "listen_tests.rs"]
mod tests;
