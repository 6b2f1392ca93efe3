//! The dialing side: reach a listener from its ticket, run TLS (pinned to the ticket's
//! fingerprint) when encrypting, then the secret handshake; or wrap a connection carried by
//! a helper process ([`connect_tunnel`], the handshake is in `tunnel`).
//!
//! Nothing is remembered between calls: every connection tries the ticket's addresses afresh
//! unless the caller names the one that worked ([`connect_addr`]).
//!
//! Not here: retries, or choosing between encrypted and plain (the caller decides).

use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::process::Child;
use std::time::{Duration, Instant};

use rustls::client::UnbufferedClientConnection;

use super::auth;
use super::conn::Io;
use super::deadline::{handshake_error, DeadlineTcp};
use super::ticket::{random32, Ticket};
use super::tls;
use super::tls_stream::TlsStream;
use super::tunnel;
use super::{Conn, Role, TransportError};

/// How long one TCP connect may take before the next address is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long TLS plus the secret handshake may take once TCP is connected.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Dials the ticket's addresses in order (3 s connect timeout each; the first that connects
/// and authenticates wins), runs TLS 1.3 with the certificate pinned by the ticket's
/// fingerprint when `encrypt`, then proves the secret. TCP_NODELAY is on, and BBR where
/// the kernel offers it (`congestion`).
///
/// When no address works, the error is the first handshake failure if any address answered
/// (that is the informative one), otherwise `Connect` listing every address.
pub fn connect(ticket: &Ticket, role: Role, encrypt: bool) -> Result<Conn, TransportError> {
    let mut answered: Option<TransportError> = None;
    let mut last_connect_error = None;
    for &addr in &ticket.addrs {
        match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
            Ok(sock) => match establish(sock, ticket, role, encrypt) {
                Ok(conn) => return Ok(conn),
                // Another host may hold this address on the dialer's network: try the rest.
                Err(e) => {
                    answered.get_or_insert(e);
                }
            },
            Err(e) => last_connect_error = Some(e),
        }
    }
    if let Some(e) = answered {
        return Err(e);
    }
    let addrs = ticket
        .addrs
        .iter()
        .map(SocketAddr::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    match last_connect_error {
        Some(source) => Err(TransportError::Connect { addrs, source }),
        None => Err(TransportError::BadTicket("it lists no addresses".into())),
    }
}

/// Like [`connect`], but to one known address (after a first `connect` found one that works).
pub fn connect_addr(
    addr: SocketAddr,
    ticket: &Ticket,
    role: Role,
    encrypt: bool,
) -> Result<Conn, TransportError> {
    let sock = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(|source| {
        TransportError::Connect {
            addrs: addr.to_string(),
            source,
        }
    })?;
    establish(sock, ticket, role, encrypt)
}

/// Authenticates a connection carried by `child` (which holds the other end of `sock` as
/// its stdin and stdout) to the listener of `ticket`, as the dialer of `role`. `desc` names
/// the route in messages. The helper is reaped when the connection is dropped, and killed
/// at once if the handshake fails.
pub fn connect_tunnel(
    sock: UnixStream,
    child: Child,
    desc: String,
    ticket: &Ticket,
    role: Role,
) -> Result<Conn, TransportError> {
    let (tunnel, link) = tunnel::open(sock, child, desc, ticket, role)?;
    Ok(Conn::new(Io::Tunnel(Box::new(tunnel)), link, true))
}

fn establish(
    sock: TcpStream,
    ticket: &Ticket,
    role: Role,
    encrypt: bool,
) -> Result<Conn, TransportError> {
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    sock.set_nodelay(true).map_err(TransportError::Io)?;
    super::congestion::prefer(&sock);
    let key = ticket.secret.conn_key();
    let nonce_c = random32().map_err(TransportError::Io)?;
    if !encrypt {
        let mut io = DeadlineTcp {
            sock: &sock,
            deadline,
        };
        let link = auth::dial(&mut io, key, role, nonce_c)?;
        sock.set_read_timeout(None).map_err(TransportError::Io)?;
        sock.set_write_timeout(None).map_err(TransportError::Io)?;
        return Ok(Conn::new(Io::Plain(sock), link, true));
    }
    let config = tls::client_config(ticket.fingerprint)?;
    let conn = UnbufferedClientConnection::new(config, tls::server_name()?)
        .map_err(|e| TransportError::Tls(format!("TLS setup failed: {e}")))?;
    let mut stream = TlsStream::new(conn, sock, Some(deadline));
    match stream.handshake() {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err(TransportError::Handshake(
                "the peer closed the connection during the TLS handshake".into(),
            ))
        }
        Err(e) => return Err(handshake_error(e)),
    }
    let link = auth::dial(&mut stream, key, role, nonce_c)?;
    stream.established().map_err(TransportError::Io)?;
    Ok(Conn::new(Io::Tls(Box::new(stream)), link, true))
}
