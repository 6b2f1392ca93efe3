//! Deadline-bounded TCP I/O for the handshakes, and what their I/O errors mean.
//!
//! [`arm_deadline`] turns one overall deadline into per-call socket timeouts; [`DeadlineTcp`]
//! applies it to a plain socket and `tls_stream` to the socket under TLS. A deadline
//! that fires surfaces as `WouldBlock` or `TimedOut`, which [`dialer_io`] and
//! [`listener_io`] turn into the dialer's [`TransportError`] or the listener's log reason;
//! [`handshake_error`] also recognises the rustls errors a TLS stream wraps in `io::Error`.
//!
//! Both `auth` (the secret handshake) and `tls_stream` (with its buffers, `tls_wire`) build on
//! this module, and it uses neither of them. Not here: TLS configuration, the handshake messages.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use rustls::CertificateError;

use super::TransportError;

/// Sets the socket's read (or write) timeout to what is left until `deadline`; fails with
/// `TimedOut` once it has passed. Does nothing without a deadline.
pub(super) fn arm_deadline(
    sock: &TcpStream,
    deadline: Option<Instant>,
    read: bool,
) -> io::Result<()> {
    let Some(deadline) = deadline else {
        return Ok(());
    };
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "handshake deadline passed",
        ));
    }
    if read {
        sock.set_read_timeout(Some(left))
    } else {
        sock.set_write_timeout(Some(left))
    }
}

/// A borrowed TCP socket whose every read and write must finish before `deadline`.
pub(super) struct DeadlineTcp<'a> {
    /// The socket.
    pub sock: &'a TcpStream,
    /// When the whole handshake must be over.
    pub deadline: Instant,
}

impl Read for DeadlineTcp<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        arm_deadline(self.sock, Some(self.deadline), true)?;
        let mut s = self.sock;
        s.read(buf)
    }
}

impl Write for DeadlineTcp<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        arm_deadline(self.sock, Some(self.deadline), false)?;
        let mut s = self.sock;
        s.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Turns an I/O error from a TLS handshake into the error the user should see.
pub(super) fn handshake_error(e: io::Error) -> TransportError {
    let tls = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match tls {
        Some(rustls::Error::InvalidCertificate(
            CertificateError::ApplicationVerificationFailure,
        )) => TransportError::Tls(
            "the receiver's certificate does not match the ticket (wrong or stale ticket?)".into(),
        ),
        Some(other) => TransportError::Tls(format!("TLS handshake failed: {other}")),
        None => dialer_io(e),
    }
}

/// A dialer-side I/O error that is not a TLS error.
pub(super) fn dialer_io(e: io::Error) -> TransportError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => TransportError::Handshake(
            "the peer did not complete the handshake in time (is this a haul receiver?)".into(),
        ),
        io::ErrorKind::UnexpectedEof => {
            TransportError::Handshake("the peer closed the connection during the handshake".into())
        }
        _ => TransportError::Io(e),
    }
}

/// Why an I/O error happened during the handshake, for the listener's log line.
pub(super) fn listener_io(stage: &str, e: io::Error) -> String {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            format!("handshake deadline passed while {stage}")
        }
        io::ErrorKind::UnexpectedEof => format!("closed by the peer while {stage}"),
        _ => format!("{stage}: {e}"),
    }
}
