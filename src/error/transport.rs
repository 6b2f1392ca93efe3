//! What can go wrong while reaching or authenticating a peer. Defined here, beside the
//! other typed errors, so that `error` names nothing above it; `transport` re-exports it.

use std::io;

/// Everything that can go wrong while reaching or authenticating a peer.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The ticket text is malformed.
    #[error("invalid ticket: {0} (copy the whole line printed by `haul recv`)")]
    BadTicket(String),
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address we tried.
        addr: String,
        /// The system's reason.
        source: io::Error,
    },
    /// No address of the ticket accepted a TCP connection.
    #[error("cannot connect to {addrs}: {source} (is `haul recv` still running? firewall?)")]
    Connect {
        /// Every address tried, comma-separated.
        addrs: String,
        /// The last address's failure.
        source: io::Error,
    },
    /// TLS failed, including a certificate that does not match the ticket.
    #[error("{0}")]
    Tls(String),
    /// The listener did not accept our proof of the secret.
    #[error("the receiver rejected the ticket's secret (wrong or expired ticket?)")]
    AuthRejected,
    /// The listener could not prove it knows the secret.
    #[error(
        "the receiver does not know the ticket's secret \
         (wrong or stale ticket, or another program listens there?)"
    )]
    PeerUnauthenticated,
    /// The peer speaks another protocol version.
    #[error(
        "the peer speaks protocol version {theirs}, we speak {ours}: \
         use the same haul version on both hosts"
    )]
    PeerIncompatible {
        /// Our `transport::PROTOCOL_VERSION`.
        ours: u16,
        /// The peer's.
        theirs: u16,
    },
    /// The peer sent something that is not a valid handshake, or none in time.
    #[error("handshake failed: {0}")]
    Handshake(String),
    /// The stream failed after the TCP connection was made.
    #[error("{LOST}{}", lost_reason(.0))]
    Io(io::Error),
}

/// How [`TransportError::Io`] starts.
const LOST: &str = "connection to peer lost: ";

/// The reason of a lost connection, said once: an error that already is a lost connection
/// (passed on by a relay or a worker as text) is not prefixed again.
fn lost_reason(e: &io::Error) -> String {
    let s = e.to_string();
    let mut r = s.as_str();
    while let Some(rest) = r.strip_prefix(LOST) {
        r = rest;
    }
    r.to_string()
}

impl TransportError {
    /// The exit-code class: bad ticket 2; cannot bind, connect or stream lost 5; TLS and
    /// secret failures 6; version mismatch 7; malformed handshake 8.
    pub fn exit_code(&self) -> i32 {
        match self {
            TransportError::BadTicket(_) => 2,
            TransportError::Bind { .. }
            | TransportError::Connect { .. }
            | TransportError::Io(_) => 5,
            TransportError::Tls(_)
            | TransportError::AuthRejected
            | TransportError::PeerUnauthenticated => 6,
            TransportError::PeerIncompatible { .. } => 7,
            TransportError::Handshake(_) => 8,
        }
    }
}
