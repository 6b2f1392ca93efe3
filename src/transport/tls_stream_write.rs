//! The writing side of [`TlsStream`]: `Write` (plaintext copied into the outgoing buffer and
//! sealed there) and [`TlsStream::write_in_place`] (a buffer the caller gives up sealed where
//! it lies and sent with gathering writes: no copy of the bulk of a data unit).

use std::io::{self, IoSlice, Write};

use super::super::gate::{write_all_gated, Gate};
use super::super::record::Records;
use super::{closed, tls_error, Goal, Machine, TlsStream, WRITE_CHUNK};

/// Below this, a buffer is copied and sealed like any write: a record or two gain nothing
/// from being sealed in place, and one `send` beats a gathering write of a few pieces.
const IN_PLACE_MIN: usize = 32 * 1024;

impl<M: Machine> TlsStream<M> {
    /// Sends `head` (copied) and then `data` sealed in place: on success `data` holds
    /// ciphertext (the caller must not send it again); on failure nothing of `data` was sent
    /// and it is as it was. A socket error after sealing began shows on the next write or
    /// flush, as with `write` (the unsent rest is kept here, no longer in `data`).
    pub(crate) fn write_in_place(
        &mut self,
        head: &[u8],
        data: &mut [u8],
        gate: Option<&Gate<'_>>,
    ) -> io::Result<()> {
        if let Some(e) = &self.broken {
            return Err(tls_error(e.clone()));
        }
        if self.records.is_none() || data.len() < IN_PLACE_MIN || self.wire.we_closed {
            return match gate {
                None => self.write_all(head).and_then(|()| self.write_all(data)),
                Some(g) => write_all_gated(self, &[head, data], g),
            };
        }
        // Ciphertext a failed write left behind goes first; its error is this call's.
        self.wire.flush_out()?;
        if !head.is_empty() {
            self.seal_own_sized(Records::sealed_len(head.len()), |r, out| r.seal(head, out))?;
        }
        let Some(records) = self.records.as_mut() else {
            return Err(closed());
        };
        if let Err(e) = records.seal_gapped(data, &mut self.gapped) {
            // Nothing more can be sealed (the head may be queued without its body).
            self.broken = Some(e.clone());
            return Err(tls_error(e));
        }
        self.wire.send_gapped(&self.gapped.slices(data), gate);
        Ok(())
    }

    /// Encrypts up to [`WRITE_CHUNK`] bytes of `bufs` and sends them; the count taken.
    fn write_bufs(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        // Ciphertext a failed write left behind goes first; its error is this call's.
        self.wire.flush_out()?;
        let mut taken = 0;
        for b in bufs {
            let part = &b[..b.len().min(WRITE_CHUNK - taken)];
            if part.is_empty() {
            } else if self.records.is_some() {
                self.seal_own_sized(Records::sealed_len(part.len()), |r, out| r.seal(part, out))?;
                taken += part.len();
            } else {
                self.advance_blocked_is_error(Goal::Encrypt(part))?;
                taken += part.len();
            }
            if taken == WRITE_CHUNK {
                break;
            }
        }
        // The bytes are ours now (as with any buffered writer): a socket error shows on the
        // next write or flush, which retries what is left.
        let _ = self.wire.flush_out();
        Ok(taken)
    }
}

impl<M: Machine> Write for TlsStream<M> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.write_bufs(&[IoSlice::new(data)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.write_bufs(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.wire.flush_out()
    }
}
