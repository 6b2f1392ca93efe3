//! The buffers under a TLS stream (`tls_stream`): the incoming ciphertext rustls
//! decrypts in place, and the socket with the outgoing ciphertext and the plaintext a read
//! could not take yet.
//!
//! Not here: driving rustls (`tls_stream`); these only hold bytes and move them to and from
//! the socket, under the handshake deadline while there is one.

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use rustls::unbuffered::{EncodeError, EncryptError, InsufficientSizeError};

use super::deadline::arm_deadline;
use super::gate::{prefix, Gate};

/// Compact the incoming buffer when less than this is left at its end, so reads stay large.
const MIN_READ_ROOM: usize = 64 * 1024;
/// The outgoing buffer grows only as far as rustls asks, and never beyond this.
const OUTGOING_LIMIT: usize = 1024 * 1024;

/// The incoming ciphertext: `buf[start..end]` is not yet consumed by rustls.
pub(super) struct Incoming {
    pub(super) buf: Vec<u8>,
    pub(super) start: usize,
    pub(super) end: usize,
    /// How far `buf` may grow.
    pub(super) limit: usize,
}

impl Incoming {
    /// The bytes rustls has not consumed (it decrypts them in place).
    pub(super) fn unread(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.end]
    }

    /// Removes `n` processed bytes from the front.
    pub(super) fn consume(&mut self, n: usize) {
        self.start += n.min(self.end - self.start);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Room to read into: moves unread bytes to the front when the end is near, grows the
    /// buffer up to `limit` when unread bytes fill it, and fails beyond (no valid TLS
    /// message needs more).
    pub(super) fn make_room(&mut self) -> io::Result<&mut [u8]> {
        if self.buf.len() - self.end < MIN_READ_ROOM && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            if self.buf.len() >= self.limit {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("a TLS message longer than {} bytes", self.limit),
                ));
            }
            self.grow_to((self.buf.len() * 2).min(self.limit));
        }
        Ok(&mut self.buf[self.end..])
    }

    pub(super) fn grow_to(&mut self, len: usize) {
        if self.buf.len() < len {
            self.buf.resize(len, 0);
        }
    }
}

/// The socket, the outgoing ciphertext and the plaintext waiting for the next read.
pub(super) struct Wire {
    pub(super) sock: TcpStream,
    pub(super) deadline: Option<Instant>,
    /// `out[sent..used]` is ciphertext not yet on the socket.
    pub(super) out: Vec<u8>,
    pub(super) used: usize,
    pub(super) sent: usize,
    /// `left[left_pos..]`: decrypted bytes the last read's buffer could not take.
    pub(super) left: Vec<u8>,
    pub(super) left_pos: usize,
    /// The peer's close_notify arrived.
    pub(super) peer_closed: bool,
    /// Ours is queued.
    pub(super) we_closed: bool,
}

impl Wire {
    /// Copies a record's plaintext into `dst[*filled..]`, the rest to `left`.
    pub(super) fn deliver(&mut self, payload: &[u8], dst: &mut [u8], filled: &mut usize) {
        let n = payload.len().min(dst.len() - *filled);
        dst[*filled..*filled + n].copy_from_slice(&payload[..n]);
        *filled += n;
        if n < payload.len() {
            if self.left_pos == self.left.len() {
                self.left.clear();
                self.left_pos = 0;
            }
            self.left.extend_from_slice(&payload[n..]);
        }
    }

    /// Hands out plaintext left by an earlier read.
    pub(super) fn take_left(&mut self, dst: &mut [u8]) -> usize {
        let n = dst.len().min(self.left.len() - self.left_pos);
        dst[..n].copy_from_slice(&self.left[self.left_pos..self.left_pos + n]);
        self.left_pos += n;
        if self.left_pos == self.left.len() {
            self.left.clear();
            self.left_pos = 0;
        }
        n
    }

    /// At least `n` bytes of room after `out[..used]` (growing `out` up to
    /// [`OUTGOING_LIMIT`]) for ciphertext the caller then counts into `used`.
    pub(super) fn room(&mut self, n: usize) -> io::Result<&mut [u8]> {
        let want = self.used + n;
        if want > OUTGOING_LIMIT {
            return Err(io::Error::other(format!(
                "TLS wants {n} bytes of output room"
            )));
        }
        if self.out.len() < want {
            self.out.resize(want, 0);
        }
        Ok(&mut self.out[self.used..])
    }

    /// Lets `f` write ciphertext after `out[..used]`; when it reports the room too small
    /// (`Ok(Err(size))`), grows `out` (up to [`OUTGOING_LIMIT`]) and asks again.
    pub(super) fn put(
        &mut self,
        mut f: impl FnMut(&mut [u8]) -> io::Result<Result<usize, InsufficientSizeError>>,
    ) -> io::Result<()> {
        loop {
            match f(&mut self.out[self.used..])? {
                Ok(n) => {
                    self.used += n;
                    return Ok(());
                }
                Err(InsufficientSizeError { required_size }) => {
                    let want = self.used + required_size;
                    if want > OUTGOING_LIMIT {
                        return Err(io::Error::other(format!(
                            "TLS wants {required_size} bytes of output room"
                        )));
                    }
                    self.out.resize(want, 0);
                }
            }
        }
    }

    /// Writes all pending ciphertext to the socket.
    pub(super) fn flush_out(&mut self) -> io::Result<()> {
        while self.sent < self.used {
            arm_deadline(&self.sock, self.deadline, false)?;
            match (&self.sock).write(&self.out[self.sent..self.used]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.sent = 0;
        self.used = 0;
        Ok(())
    }
}

impl Wire {
    /// Writes the ciphertext pending in `out`, then `records` (a buffer sealed in place, see
    /// `record::Gapped`), with gathering writes. What a failed write leaves unsent is copied
    /// into `out` (bounded by the caller's buffer) and goes, or fails, with the next write or
    /// flush, as with any write here: the caller's buffer is free when this returns.
    /// With a `gate`, each piece of at most its slice is paid for before it goes.
    pub(super) fn send_gapped(&mut self, records: &[IoSlice<'_>], gate: Option<&Gate<'_>>) {
        let mut all = Vec::with_capacity(records.len() + 1);
        all.push(IoSlice::new(&self.out[self.sent..self.used]));
        all.extend_from_slice(records);
        let mut bufs = &mut all[..];
        // Bytes paid for and not yet written.
        let mut credit = 0;
        while !bufs.is_empty() {
            if arm_deadline(&self.sock, self.deadline, false).is_err() {
                break;
            }
            let wrote = match gate {
                None => (&self.sock).write_vectored(bufs),
                Some(g) => {
                    if credit == 0 {
                        credit = g.next(bufs.iter().map(|b| b.len()).sum());
                    }
                    (&self.sock).write_vectored(&prefix(bufs, credit))
                }
            };
            match wrote {
                Ok(0) => break,
                Ok(n) => {
                    IoSlice::advance_slices(&mut bufs, n);
                    credit = credit.saturating_sub(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let mut rest = Vec::new();
        for b in bufs.iter() {
            rest.extend_from_slice(b);
        }
        self.sent = 0;
        self.used = rest.len();
        if !rest.is_empty() {
            self.out = rest;
        }
    }
}

/// One read from the socket into `room` (under the handshake deadline while there is one);
/// a TCP end is `UnexpectedEof`.
pub(super) fn recv(wire: &Wire, room: &mut [u8]) -> io::Result<usize> {
    arm_deadline(&wire.sock, wire.deadline, true)?;
    let n = loop {
        match (&wire.sock).read(room) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => break r?,
        }
    };
    if n == 0 {
        return Err(eof(
            "peer closed connection without sending TLS close_notify",
        ));
    }
    Ok(n)
}

pub(super) fn eof(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, what.to_string())
}

/// An encode call's result as [`Wire::put`] wants it.
pub(super) fn encoded(
    r: Result<usize, EncodeError>,
) -> io::Result<Result<usize, InsufficientSizeError>> {
    match r {
        Ok(n) => Ok(Ok(n)),
        Err(EncodeError::InsufficientSize(s)) => Ok(Err(s)),
        Err(e) => Err(io::Error::other(e)),
    }
}

/// An encrypt call's result as [`Wire::put`] wants it.
pub(super) fn encrypted(
    r: Result<usize, EncryptError>,
) -> io::Result<Result<usize, InsufficientSizeError>> {
    match r {
        Ok(n) => Ok(Ok(n)),
        Err(EncryptError::InsufficientSize(s)) => Ok(Err(s)),
        // rustls refuses once the keys reach their limit without a key update.
        Err(e) => Err(io::Error::other(format!("TLS: {e}"))),
    }
}
