//! [`TlsStream`]: a TLS 1.3 connection over a TCP socket, driven through rustls's unbuffered
//! API during the handshakes and through haul's own record layer (`record`) after them,
//! with buffers this module owns.
//!
//! **Why not rustls's `StreamOwned`.** Its reads come 4 KiB at a time through rustls's own
//! buffer, which it shrinks and regrows (zero-filling it) whenever it empties, and every byte
//! is copied once more from our socket buffer into it. Here the socket is read many records
//! at a time, into one buffer of up to [`INCOMING_SIZE`] or straight into the caller's.
//!
//! **Two record layers.** The handshakes (TLS's and the secret one, `auth`) run on rustls's.
//! Once the peer is authenticated ([`TlsStream::established`]) the connection's traffic
//! secrets move from rustls to this crate's TLS 1.3 record layer (`record`, through rustls's
//! kernel-TLS interface): it seals each record in place in our outgoing buffer (or, for a
//! data unit the caller gives up, `write_in_place`, in the caller's buffer), and a read
//! with room for [`DIRECT_READ`] bytes takes the ciphertext into the caller's buffer and
//! decrypts each record down to where its plaintext belongs; smaller reads open records in
//! the incoming buffer and copy them out. rustls 0.23 copies every record twice more.
//!
//! **Calling order.** `new`, then [`TlsStream::handshake`] (under the deadline given to `new`,
//! which bounds every socket read and write until [`TlsStream::established`]), then any mix of
//! `read` and `write`. Plaintext a caller's buffer cannot take waits here for the next read;
//! ciphertext the socket did not take waits for the next write or flush.
//!
//! **Ends.** A read returns 0 only after the peer's close_notify; a TCP end without it fails
//! with `UnexpectedEof` (a cut, not an end). [`TlsStream::shutdown_write`] sends ours. A TLS
//! error (a forged or garbled record, an alert) fails the call with `InvalidData` wrapping
//! the `rustls::Error`, after a best-effort attempt to send the peer the alert that says
//! why (rustls's during the handshakes, `record::alert_for`'s after).
//!
//! Key updates: ours before the keys' limit, the peer's while its records are read (rustls's
//! state machine during the handshakes, `record` after).
//!
//! Not here: configuration and certificate pinning (`tls`), the secret handshake (`auth`).

use std::io::{self, Read};
use std::net::{Shutdown, TcpStream};
use std::time::Instant;

use rustls::unbuffered::{ConnectionState, UnbufferedStatus};
use rustls::{AlertDescription, SupportedCipherSuite};

use super::record::{alert_for, Gapped, Opened, Records, OVERHEAD};
use super::tls_machine::Machine;
use super::tls_wire::{encoded, encrypted, eof, recv, Incoming, Wire};

/// Ciphertext buffer once the connection is authenticated: many records per `read(2)`.
pub(super) const INCOMING_SIZE: usize = 256 * 1024;
/// Ciphertext buffer of a connection still in its handshakes: unauthenticated peers get this
/// much at first (a TLS record is at most ~16.7 KiB)…
const HANDSHAKE_INCOMING: usize = 32 * 1024;
/// …and at most this much (rustls joins handshake messages of up to 64 KiB in the buffer).
const HANDSHAKE_INCOMING_LIMIT: usize = 96 * 1024;
/// A read this large (or larger) takes ciphertext straight into the caller's buffer.
const DIRECT_READ: usize = 32 * 1024;
/// Plaintext encrypted per write call (four full records), then written in one system call.
pub(super) const WRITE_CHUNK: usize = 64 * 1024;
/// Room for the records' headers and tags around `WRITE_CHUNK` bytes of plaintext.
const OUTGOING_SIZE: usize = WRITE_CHUNK + 1024;

/// A TLS connection over a TCP socket; `Read + Write + Send`.
pub(super) struct TlsStream<M> {
    /// rustls, until the connection is established…
    conn: Option<M>,
    /// …then our record layer.
    records: Option<Records>,
    suite: Option<SupportedCipherSuite>,
    inc: Incoming,
    wire: Wire,
    /// The TLS error that ended this connection: every later call fails with it, without
    /// handing rustls the failed input again.
    broken: Option<rustls::Error>,
    /// Headers and trailers of the records `write_in_place` seals (kept for their room).
    gapped: Gapped,
}

/// What a run of the state machine ended with.
enum Outcome {
    /// The goal is reached.
    Done,
    /// rustls needs more ciphertext from the socket.
    Blocked,
    /// The peer sent close_notify (nothing more will be read).
    PeerClosed,
}

/// What a run of the state machine is for.
#[derive(Clone, Copy)]
enum Goal<'a> {
    /// Finish the TLS handshake.
    Handshake,
    /// Plaintext for the caller.
    Read,
    /// Encrypt these bytes into the outgoing buffer.
    Encrypt(&'a [u8]),
    /// Queue our close_notify.
    CloseNotify,
}

impl<M: Machine> TlsStream<M> {
    /// A stream over a connected socket, before the handshake; `deadline` bounds every
    /// socket read and write until [`TlsStream::established`].
    pub(super) fn new(conn: M, sock: TcpStream, deadline: Option<Instant>) -> TlsStream<M> {
        TlsStream {
            conn: Some(conn),
            records: None,
            suite: None,
            inc: Incoming {
                buf: vec![0; HANDSHAKE_INCOMING],
                start: 0,
                end: 0,
                limit: HANDSHAKE_INCOMING_LIMIT,
            },
            wire: Wire {
                sock,
                deadline,
                out: vec![0; 4096],
                used: 0,
                sent: 0,
                left: Vec::new(),
                left_pos: 0,
                peer_closed: false,
                we_closed: false,
            },
            broken: None,
            gapped: Gapped::default(),
        }
    }

    /// Runs the TLS handshake to its end. A TLS failure is `InvalidData` wrapping the
    /// `rustls::Error`; a peer that closes is `UnexpectedEof`.
    pub(super) fn handshake(&mut self) -> io::Result<()> {
        loop {
            match self.advance(Goal::Handshake, &mut [], &mut 0)? {
                Outcome::Done => return Ok(()),
                Outcome::Blocked => self.fill()?,
                Outcome::PeerClosed => return Err(eof("closed during the TLS handshake")),
            }
        }
    }

    /// The handshakes are over and the peer is authenticated: ends the deadline (clearing
    /// the socket timeouts it set), gives reads their full-size buffer and moves the traffic
    /// secrets from rustls to our record layer (ciphertext already read is opened by it, with
    /// the sequence numbers rustls had reached).
    pub(super) fn established(&mut self) -> io::Result<()> {
        self.wire.flush_out()?;
        let conn = self
            .conn
            .take()
            .ok_or_else(|| io::Error::other("TLS connection established twice"))?;
        let suite = conn.negotiated_cipher_suite();
        let limit = suite
            .and_then(|s| s.tls13())
            .map_or(1 << 23, |s| s.common.confidentiality_limit);
        let (secrets, rekey) = conn.into_kernel().map_err(tls_error)?;
        self.records = Some(Records::new(secrets.tx, secrets.rx, rekey, limit).map_err(tls_error)?);
        self.suite = suite;
        self.wire.deadline = None;
        self.wire.sock.set_read_timeout(None)?;
        self.wire.sock.set_write_timeout(None)?;
        self.inc.limit = INCOMING_SIZE;
        self.inc.grow_to(INCOMING_SIZE);
        self.wire
            .out
            .resize(OUTGOING_SIZE.max(self.wire.out.len()), 0);
        Ok(())
    }

    /// The socket underneath (for timeouts, shutdown and addresses).
    pub(super) fn tcp(&self) -> &TcpStream {
        &self.wire.sock
    }

    /// The cipher suite negotiated (once established).
    #[cfg(test)]
    pub(super) fn suite(&self) -> Option<SupportedCipherSuite> {
        self.suite
    }

    /// Our record layer (for tests that look inside).
    #[cfg(test)]
    pub(super) fn records(&mut self) -> Option<&mut Records> {
        self.records.as_mut()
    }

    /// Sends close_notify after everything written so far, then shuts down the socket's
    /// write side.
    pub(super) fn shutdown_write(&mut self) -> io::Result<()> {
        self.wire.flush_out()?;
        if !self.wire.we_closed {
            if self.records.is_some() {
                self.seal_own(|r, out| r.seal_alert(AlertDescription::CloseNotify, out))?;
            } else {
                self.advance_blocked_is_error(Goal::CloseNotify)?;
            }
            self.wire.we_closed = true;
            self.wire.flush_out()?;
        }
        self.wire.sock.shutdown(Shutdown::Write)
    }

    /// Queues a key update that asks the peer for one too (as rustls's
    /// `refresh_traffic_keys`); established connections only.
    #[cfg(test)]
    pub(super) fn refresh_keys(&mut self) -> io::Result<()> {
        self.seal_own(|r, out| r.seal_key_update(out))
    }

    /// Lets our record layer seal into the outgoing buffer (made room for first).
    fn seal_own(
        &mut self,
        f: impl FnOnce(&mut Records, &mut [u8]) -> Result<usize, rustls::Error>,
    ) -> io::Result<()> {
        self.seal_own_sized(2 * OVERHEAD, f)
    }

    fn seal_own_sized(
        &mut self,
        room: usize,
        f: impl FnOnce(&mut Records, &mut [u8]) -> Result<usize, rustls::Error>,
    ) -> io::Result<()> {
        if let Some(e) = &self.broken {
            return Err(tls_error(e.clone()));
        }
        if self.wire.we_closed {
            return Err(closed());
        }
        let Some(records) = self.records.as_mut() else {
            return Err(closed());
        };
        let out = self.wire.room(room)?;
        let n = f(records, out).map_err(tls_error)?;
        self.wire.used += n;
        Ok(())
    }

    /// Reads plaintext through our record layer (see `read`). Whole records already in the
    /// incoming buffer are opened there and copied out. Otherwise, with room for
    /// [`DIRECT_READ`] bytes in `dst` after the part of a record buffered, the ciphertext is
    /// read straight into `dst` and each record decrypted down to where its plaintext
    /// belongs (no copy but that part's).
    fn read_own(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        let mut filled = 0;
        loop {
            if let Some(e) = &self.broken {
                return Err(tls_error(e.clone()));
            }
            while filled < dst.len() {
                let Some(records) = self.records.as_mut() else {
                    return Err(closed());
                };
                let start = self.inc.start;
                match records.open(self.inc.unread()) {
                    Ok(Opened::Partial) => break,
                    Ok(Opened::Data { len, at, n }) => {
                        let plain = &self.inc.buf[start + at..start + at + n];
                        self.wire.deliver(plain, dst, &mut filled);
                        self.inc.consume(len);
                    }
                    Ok(Opened::Nothing { len }) => self.inc.consume(len),
                    Ok(Opened::Closed { len }) => {
                        self.inc.consume(len);
                        self.wire.peer_closed = true;
                        return Ok(filled);
                    }
                    Err(e) => return self.refused(e, filled),
                }
            }
            if filled > 0 {
                return Ok(filled);
            }
            if dst.len() >= self.inc.end - self.inc.start + DIRECT_READ {
                let n = self.read_direct(dst)?;
                if n > 0 || self.wire.peer_closed {
                    return Ok(n);
                }
            } else {
                self.fill()?;
            }
        }
    }

    /// The buffered part of a record and one socket read into `dst`, whose whole records
    /// are opened there (plaintext moved down over headers and tags as it is decrypted); a
    /// record's first part, read without its end, goes back to the incoming buffer.
    fn read_direct(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        let part = self.inc.end - self.inc.start;
        dst[..part].copy_from_slice(self.inc.unread());
        // A failed read (a timeout) leaves the part where it was.
        let got = part + recv(&self.wire, &mut dst[part..])?;
        self.inc.consume(part);
        let (mut r, mut w) = (0, 0);
        loop {
            let Some(records) = self.records.as_mut() else {
                return Err(closed());
            };
            match records.open_to(&mut dst[..got], r, w) {
                Ok(Opened::Partial) => break,
                Ok(Opened::Data { len, n, .. }) => {
                    r += len;
                    w += n;
                }
                Ok(Opened::Nothing { len }) => r += len,
                Ok(Opened::Closed { .. }) => {
                    self.wire.peer_closed = true;
                    return Ok(w);
                }
                Err(e) => return self.refused(e, w),
            }
        }
        let rest = &dst[r..got];
        self.inc.grow_to(rest.len());
        self.inc.buf[..rest.len()].copy_from_slice(rest);
        self.inc.start = 0;
        self.inc.end = rest.len();
        Ok(w)
    }

    /// A record our layer refused: nothing read after it is used, the peer gets the alert
    /// that says why, and the connection stays failed. Plaintext already delivered by this
    /// call goes out first; the failure is then the next call's.
    fn refused(&mut self, e: rustls::Error, filled: usize) -> io::Result<usize> {
        self.inc.consume(self.inc.end - self.inc.start);
        let alert = alert_for(&e);
        if self
            .seal_own_sized(OVERHEAD, |r, out| r.seal_alert(alert, out))
            .is_ok()
        {
            let _ = self.wire.flush_out();
        }
        self.broken = Some(e.clone());
        if filled > 0 {
            return Ok(filled);
        }
        Err(tls_error(e))
    }

    /// Runs the state machine for a goal that needs nothing from the socket.
    fn advance_blocked_is_error(&mut self, goal: Goal<'_>) -> io::Result<()> {
        match self.advance(goal, &mut [], &mut 0)? {
            Outcome::Done => Ok(()),
            Outcome::Blocked | Outcome::PeerClosed => Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the TLS connection cannot send (handshake not finished)",
            )),
        }
    }

    /// Runs rustls over the buffered ciphertext until `goal` is reached or it needs more
    /// from the socket. Plaintext it decrypts goes to `dst[*filled..]`, what does not fit
    /// to `wire.left`.
    fn advance(
        &mut self,
        goal: Goal<'_>,
        dst: &mut [u8],
        filled: &mut usize,
    ) -> io::Result<Outcome> {
        loop {
            if let Some(e) = &self.broken {
                return Err(tls_error(e.clone()));
            }
            let Some(conn) = self.conn.as_mut() else {
                return Err(closed());
            };
            let UnbufferedStatus { mut discard, state } = conn.process(self.inc.unread());
            let state = match state {
                Ok(s) => s,
                Err(e) => {
                    self.inc.consume(discard);
                    self.broken = Some(e.clone());
                    self.send_alert();
                    return Err(tls_error(e));
                }
            };
            // Every arm's result waits until the discard is applied: rustls must never see
            // the same bytes twice, even when this call fails.
            let step: io::Result<Option<Outcome>> = match state {
                ConnectionState::ReadTraffic(mut records) => {
                    let mut failed = None;
                    while let Some(record) = records.next_record() {
                        match record {
                            Ok(r) => {
                                discard += r.discard;
                                self.wire.deliver(r.payload, dst, filled);
                            }
                            Err(e) => {
                                failed = Some(e);
                                break;
                            }
                        }
                    }
                    let full = matches!(goal, Goal::Read) && *filled == dst.len();
                    match failed {
                        Some(e) => {
                            self.broken = Some(e.clone());
                            Err(tls_error(e))
                        }
                        None => Ok(full.then_some(Outcome::Done)),
                    }
                }
                ConnectionState::EncodeTlsData(mut data) => self
                    .wire
                    .put(|out| encoded(data.encode(out)))
                    .map(|()| None),
                ConnectionState::TransmitTlsData(data) => self.wire.flush_out().map(|()| {
                    data.done();
                    None
                }),
                ConnectionState::BlockedHandshake => Ok(Some(Outcome::Blocked)),
                ConnectionState::PeerClosed => {
                    self.wire.peer_closed = true;
                    match goal {
                        Goal::Read | Goal::Handshake => Ok(Some(Outcome::PeerClosed)),
                        // Writing stays possible after the peer's close_notify; the state is
                        // edge-triggered, so the next run goes on to `WriteTraffic`.
                        _ => Ok(None),
                    }
                }
                // Both sides sent close_notify: nothing more can be read or written.
                ConnectionState::Closed => {
                    self.wire.peer_closed = true;
                    match goal {
                        Goal::Read | Goal::Handshake => Ok(Some(Outcome::PeerClosed)),
                        _ => Err(io::Error::new(
                            io::ErrorKind::BrokenPipe,
                            "the TLS connection is closed",
                        )),
                    }
                }
                ConnectionState::WriteTraffic(mut w) => match goal {
                    Goal::Read if *filled > 0 => Ok(Some(Outcome::Done)),
                    Goal::Read => Ok(Some(Outcome::Blocked)),
                    // Checked below, once `w` no longer borrows the connection.
                    Goal::Handshake => Ok(Some(Outcome::Done)),
                    Goal::Encrypt(data) => self
                        .wire
                        .put(|out| encrypted(w.encrypt(data, out)))
                        .map(|()| Some(Outcome::Done)),
                    Goal::CloseNotify => self
                        .wire
                        .put(|out| encrypted(w.queue_close_notify(out)))
                        .map(|()| Some(Outcome::Done)),
                },
                _ => Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "unexpected TLS state (early data?)",
                )),
            };
            self.inc.consume(discard);
            match step? {
                // The server may send before the client's Finished arrives: not done yet.
                Some(Outcome::Done)
                    if matches!(goal, Goal::Handshake)
                        && self.conn.as_ref().is_some_and(|c| c.is_handshaking()) =>
                {
                    return Ok(Outcome::Blocked)
                }
                Some(outcome) => return Ok(outcome),
                None => {}
            }
        }
    }

    /// Reads more ciphertext from the socket. A TCP end fails with `UnexpectedEof`: a clean
    /// end (close_notify) is seen by the state machine before this is called.
    fn fill(&mut self) -> io::Result<()> {
        let room = self.inc.make_room()?;
        self.inc.end += recv(&self.wire, room)?;
        Ok(())
    }

    /// After a TLS error: sends the alert rustls queued for the peer, if it can. Only what
    /// rustls has queued is taken (it hands that out before it looks at input again): the
    /// input that failed must not be processed twice.
    fn send_alert(&mut self) {
        while let Some(conn) = self.conn.as_mut().filter(|c| c.wants_write()) {
            let UnbufferedStatus { discard, state } = conn.process(self.inc.unread());
            let taken = match state {
                Ok(ConnectionState::EncodeTlsData(mut data)) => {
                    self.wire.put(|out| encoded(data.encode(out))).is_ok()
                }
                _ => false,
            };
            self.inc.consume(discard);
            if !taken {
                break;
            }
        }
        let _ = self.wire.flush_out();
    }
}

impl<M: Machine> Read for TlsStream<M> {
    fn read(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        if dst.is_empty() {
            return Ok(0);
        }
        if self.wire.left_pos < self.wire.left.len() {
            return Ok(self.wire.take_left(dst));
        }
        if self.wire.peer_closed {
            return Ok(0);
        }
        if self.records.is_some() {
            return self.read_own(dst);
        }
        let mut filled = 0;
        loop {
            let outcome = match self.advance(Goal::Read, dst, &mut filled) {
                Ok(o) => o,
                // Bytes decrypted before the failure go out first; the failure stays (a
                // broken stream, or output still pending) and is the next call's.
                Err(_) if filled > 0 => return Ok(filled),
                Err(e) => return Err(e),
            };
            match outcome {
                Outcome::Done | Outcome::PeerClosed => return Ok(filled),
                Outcome::Blocked if filled > 0 => return Ok(filled),
                Outcome::Blocked => self.fill()?,
            }
        }
    }
}

/// A TLS error as the I/O error `deadline::handshake_error` and the listener recognise.
fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the TLS connection is closed")
}

#[path = "tls_stream_write.rs"]
mod write;

#[cfg(test)]
#[path = "tls_stream_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "tls_interop_tests.rs"]
mod interop_tests;
