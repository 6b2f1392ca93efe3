//! TLS 1.3's record layer (RFC 8446 §5) on the traffic secrets rustls negotiated: what
//! `tls_stream` runs once a connection is authenticated.
//!
//! **Why our own.** rustls 0.23 copies every record twice more than the protocol needs: each
//! plaintext record into a vector of its own before encrypting it and the ciphertext out of
//! that vector into the caller's buffer, and each decrypted record into a vector of its own
//! before handing it out (its unreleased 0.24 removes the first). On a 4 GiB transfer that
//! is ~0.4 CPU s a side on a machine where both ends share two cores. rustls's kernel-TLS
//! interface (`dangerous_into_kernel_connection`) hands out the traffic keys and derives the
//! next ones on a key update, exactly what the kernel's TLS offload needs; this module is the
//! user-space equivalent of that offload: the same record format, nonces and additional data
//! as rustls's record layer and the kernel's, with *ring*'s AEADs (the provider rustls uses
//! here), so a peer running rustls's own record layer reads it (tested against one). The
//! handshake, certificates and key schedule stay rustls's.
//!
//! **What it does.** Seals plaintext into records of at most 16 KiB, either copied into the
//! outgoing buffer and encrypted there, or encrypted where it lies in a buffer the caller
//! gives up (a data unit: [`Records::seal_gapped`], no copy), and opens records in place in
//! the incoming buffer. Handles the post-handshake messages TLS 1.3 allows: key updates both
//! ways (ours before the suite's confidentiality limit, the peer's whenever it sends one,
//! answered when it asks), alerts (close_notify is the end, any other one an error), and a
//! server's session tickets (ignored: resumption is off). Anything else is an error with the
//! alert TLS prescribes.
//!
//! Not here: the socket and the buffers (`tls_wire`), driving the handshake (`tls_stream`).

use std::io::IoSlice;

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use rustls::kernel::KernelConnection;
use rustls::{AlertDescription, ConnectionTrafficSecrets, Error, InvalidMessage, PeerMisbehaved};

/// The most plaintext one record carries (RFC 8446 §5.1).
pub const MAX_PLAINTEXT: usize = 16 * 1024;
/// Header, content type byte and tag: what a record adds to its plaintext.
pub const OVERHEAD: usize = HEADER + 1 + TAG;
const HEADER: usize = 5;
const TAG: usize = 16;
/// The longest record a peer may send (RFC 8446 §5.2: 2^14 + 256 after the header).
pub const MAX_RECORD: usize = HEADER + MAX_PLAINTEXT + 256;

const APPLICATION_DATA: u8 = 23;
const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;
const KEY_UPDATE: u8 = 24;
const NEW_SESSION_TICKET: u8 = 4;

/// The next traffic secrets after a key update: rustls's kernel connection, either side.
pub trait Rekey: Send {
    fn next_tx(&mut self) -> Result<ConnectionTrafficSecrets, Error>;
    fn next_rx(&mut self) -> Result<ConnectionTrafficSecrets, Error>;
}

impl<Side> Rekey for KernelConnection<Side>
where
    KernelConnection<Side>: Send,
{
    fn next_tx(&mut self) -> Result<ConnectionTrafficSecrets, Error> {
        self.update_tx_secret().map(|(_, s)| s)
    }
    fn next_rx(&mut self) -> Result<ConnectionTrafficSecrets, Error> {
        self.update_rx_secret().map(|(_, s)| s)
    }
}

/// One direction's key, IV and record sequence number.
struct Keys {
    key: LessSafeKey,
    iv: [u8; 12],
    seq: u64,
}

impl Keys {
    fn new(seq: u64, secrets: ConnectionTrafficSecrets) -> Result<Keys, Error> {
        let (alg, key, iv) = match &secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&aead::AES_128_GCM, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&aead::AES_256_GCM, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (&aead::CHACHA20_POLY1305, key, iv)
            }
            _ => return Err(Error::General("unsupported TLS cipher suite".into())),
        };
        let key = UnboundKey::new(alg, key.as_ref())
            .map_err(|_| Error::General("bad TLS traffic key".into()))?;
        let iv: [u8; 12] = iv
            .as_ref()
            .try_into()
            .map_err(|_| Error::General("bad TLS traffic IV".into()))?;
        Ok(Keys {
            key: LessSafeKey::new(key),
            iv,
            seq,
        })
    }

    /// The per-record nonce (RFC 8446 §5.3): the IV XOR the sequence number; then counts it.
    fn next_nonce(&mut self) -> Result<Nonce, Error> {
        let mut n = self.iv;
        for (b, s) in n[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *b ^= s;
        }
        self.seq = self.seq.checked_add(1).ok_or(Error::EncryptError)?;
        Ok(Nonce::assume_unique_for_key(n))
    }
}

/// What [`Records::open`] found at the front of the incoming bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Opened {
    /// Not a whole record yet: read more.
    Partial,
    /// A record of `len` bytes whose plaintext is `at..at + n` of the same buffer.
    Data { len: usize, at: usize, n: usize },
    /// A record of `len` bytes with nothing for the caller (a key update, a ticket).
    Nothing { len: usize },
    /// The peer's close_notify, in a record of `len` bytes.
    Closed { len: usize },
}

/// A caller's buffer sealed in place as records ([`Records::seal_gapped`]): each record's
/// ciphertext stays in the buffer, its header and trailer (the encrypted content type and
/// the tag) are kept here, so one gathering write sends them without copying the buffer.
#[derive(Default)]
pub struct Gapped {
    /// A key update that was due, sealed whole: it goes first.
    prefix: Vec<u8>,
    /// Per record sealed in the buffer (each [`MAX_PLAINTEXT`] long, from its start): the
    /// header that goes before it and the trailer that goes after it.
    heads: Vec<[u8; HEADER]>,
    tails: Vec<[u8; 1 + TAG]>,
    /// The buffer's last piece, sealed whole here: no byte follows it in the buffer to hold
    /// its content type while it is encrypted.
    last: Vec<u8>,
}

impl Gapped {
    /// The records in the order they go on the wire, as slices of `data` (the buffer
    /// [`Records::seal_gapped`] sealed) and of this.
    pub fn slices<'a>(&'a self, data: &'a [u8]) -> Vec<IoSlice<'a>> {
        let mut v = Vec::with_capacity(3 * self.heads.len() + 2);
        if !self.prefix.is_empty() {
            v.push(IoSlice::new(&self.prefix));
        }
        for ((head, tail), body) in self
            .heads
            .iter()
            .zip(&self.tails)
            .zip(data.chunks(MAX_PLAINTEXT))
        {
            v.push(IoSlice::new(head));
            v.push(IoSlice::new(body));
            v.push(IoSlice::new(tail));
        }
        if !self.last.is_empty() {
            v.push(IoSlice::new(&self.last));
        }
        v
    }
}

/// Both directions of an authenticated connection.
pub struct Records {
    tx: Keys,
    rx: Keys,
    rekey: Box<dyn Rekey>,
    /// Our keys are updated when their sequence number reaches this (each key's).
    tx_limit: u64,
    /// The peer asked for our keys to change: the next records we seal start with ours.
    owe_update: bool,
}

impl Records {
    /// The record layer on rustls's extracted secrets; `limit` is the suite's
    /// confidentiality limit (records per key).
    pub fn new(
        tx: (u64, ConnectionTrafficSecrets),
        rx: (u64, ConnectionTrafficSecrets),
        rekey: Box<dyn Rekey>,
        limit: u64,
    ) -> Result<Records, Error> {
        Ok(Records {
            tx: Keys::new(tx.0, tx.1)?,
            rx: Keys::new(rx.0, rx.1)?,
            rekey,
            // Half the limit: far from it, as rustls keeps itself.
            tx_limit: (limit / 2).max(1),
            owe_update: false,
        })
    }

    /// Updates our keys after this many more records (tests use it to rekey often).
    pub fn rekey_after(&mut self, records: u64) {
        self.tx_limit = self.tx.seq + records;
    }

    /// Room `seal` needs in the output for `n` bytes of plaintext (a key update included).
    pub fn sealed_len(n: usize) -> usize {
        n + n.div_ceil(MAX_PLAINTEXT).max(1) * OVERHEAD + OVERHEAD + 5
    }

    /// Encrypts `data` as application-data records into `out` (at least
    /// [`Records::sealed_len`] long); the bytes written.
    pub fn seal(&mut self, data: &[u8], out: &mut [u8]) -> Result<usize, Error> {
        let mut at = self.update_if_due(out, false)?;
        for piece in data.chunks(MAX_PLAINTEXT) {
            at += self.seal_one(APPLICATION_DATA, piece, &mut out[at..])?;
        }
        Ok(at)
    }

    /// Seals `data` as application-data records in place, without copying it (see
    /// [`Gapped`]): each record's content type is written for a moment over the first byte
    /// of the next record's plaintext, encrypted with it and moved to the trailer, and that
    /// byte put back. Only the last piece (at most [`MAX_PLAINTEXT`]) is copied. On success
    /// `data` holds ciphertext; a failure leaves it as it was.
    pub fn seal_gapped(&mut self, data: &mut [u8], g: &mut Gapped) -> Result<(), Error> {
        g.prefix.clear();
        g.heads.clear();
        g.tails.clear();
        g.last.clear();
        if data.is_empty() {
            return Ok(());
        }
        let records = data.len().div_ceil(MAX_PLAINTEXT);
        // Every nonce this call takes must exist before the buffer changes (a key update
        // may take one): then nothing below can fail after the first record is sealed.
        if self.tx.seq.checked_add(records as u64 + 1).is_none() {
            return Err(Error::EncryptError);
        }
        g.prefix.resize(OVERHEAD + 5, 0);
        let n = self.update_if_due(&mut g.prefix, false)?;
        g.prefix.truncate(n);
        let split = (records - 1) * MAX_PLAINTEXT;
        let len = MAX_PLAINTEXT + 1 + TAG;
        let header = [APPLICATION_DATA, 3, 3, (len >> 8) as u8, len as u8];
        for start in (0..split).step_by(MAX_PLAINTEXT) {
            let end = start + MAX_PLAINTEXT;
            let kept = data[end];
            data[end] = APPLICATION_DATA;
            let nonce = self.tx.next_nonce()?;
            let sealed = self.tx.key.seal_in_place_separate_tag(
                nonce,
                Aad::from(header),
                &mut data[start..=end],
            );
            let mut tail = [data[end]; 1 + TAG];
            data[end] = kept;
            // ring refuses only inputs longer than GCM's limit (~64 GiB), never 16 KiB.
            let tag = sealed.map_err(|_| Error::EncryptError)?;
            tail[1..].copy_from_slice(tag.as_ref());
            g.heads.push(header);
            g.tails.push(tail);
        }
        let piece = &data[split..];
        g.last.resize(piece.len() + OVERHEAD, 0);
        let n = self.seal_one(APPLICATION_DATA, piece, &mut g.last)?;
        g.last.truncate(n);
        Ok(())
    }

    /// Encrypts an alert (close_notify is `CloseNotify` at warning level, any other fatal).
    pub fn seal_alert(&mut self, desc: AlertDescription, out: &mut [u8]) -> Result<usize, Error> {
        let level = if desc == AlertDescription::CloseNotify {
            1
        } else {
            2
        };
        self.seal_one(ALERT, &[level, u8::from(desc)], out)
    }

    /// Sends a key update now, asking the peer to update its keys too (as rustls's
    /// `refresh_traffic_keys`).
    pub fn seal_key_update(&mut self, out: &mut [u8]) -> Result<usize, Error> {
        self.update_keys(out, true)
    }

    /// Our key update when the keys are near their limit or the peer asked for one.
    fn update_if_due(&mut self, out: &mut [u8], ask: bool) -> Result<usize, Error> {
        if self.owe_update || self.tx.seq >= self.tx_limit {
            self.update_keys(out, ask)
        } else {
            Ok(0)
        }
    }

    /// A KeyUpdate message under the old keys, then the new ones (RFC 8446 §4.6.3).
    fn update_keys(&mut self, out: &mut [u8], ask: bool) -> Result<usize, Error> {
        let n = self.seal_one(HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, u8::from(ask)], out)?;
        self.tx = Keys::new(0, self.rekey.next_tx()?)?;
        self.owe_update = false;
        Ok(n)
    }

    fn seal_one(&mut self, kind: u8, body: &[u8], out: &mut [u8]) -> Result<usize, Error> {
        let len = body.len() + 1 + TAG;
        let total = HEADER + len;
        if out.len() < total {
            return Err(Error::General("TLS output buffer too small".into()));
        }
        let header = [APPLICATION_DATA, 3, 3, (len >> 8) as u8, len as u8];
        out[..HEADER].copy_from_slice(&header);
        let inner = &mut out[HEADER..HEADER + body.len() + 1];
        inner[..body.len()].copy_from_slice(body);
        inner[body.len()] = kind;
        let nonce = self.tx.next_nonce()?;
        let tag = self
            .tx
            .key
            .seal_in_place_separate_tag(nonce, Aad::from(header), inner)
            .map_err(|_| Error::EncryptError)?;
        out[total - TAG..total].copy_from_slice(tag.as_ref());
        Ok(total)
    }

    /// Opens the record at the front of `buf` in place. A bad record is an error whose
    /// alert [`alert_for`] names.
    pub fn open(&mut self, buf: &mut [u8]) -> Result<Opened, Error> {
        self.open_to(buf, 0, HEADER)
    }

    /// Opens the record at `buf[at..]` with its plaintext decrypted to `buf[to..]`, where
    /// `to` is at most `at + 5` (the decryption moves it down over what came before, in the
    /// same pass: no copy). `Opened::Data`'s `at` is then `to`.
    pub fn open_to(&mut self, buf: &mut [u8], at: usize, to: usize) -> Result<Opened, Error> {
        let rec = &buf[at.min(buf.len())..];
        if rec.len() < HEADER {
            return Ok(Opened::Partial);
        }
        let header: [u8; HEADER] = [rec[0], rec[1], rec[2], rec[3], rec[4]];
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if header[0] != APPLICATION_DATA {
            return Err(Error::InvalidMessage(InvalidMessage::InvalidContentType));
        }
        if HEADER + len > MAX_RECORD {
            return Err(Error::InvalidMessage(InvalidMessage::MessageTooLarge));
        }
        if len < 1 + TAG {
            return Err(Error::DecryptError);
        }
        if rec.len() < HEADER + len {
            return Ok(Opened::Partial);
        }
        let total = HEADER + len;
        if to > at + HEADER {
            return Err(Error::General("record opened above itself".into()));
        }
        let nonce = self.rx.next_nonce()?;
        let plain = self
            .rx
            .key
            .open_within(
                nonce,
                Aad::from(header),
                &mut buf[to..at + total],
                at + HEADER - to..,
            )
            .map_err(|_| Error::DecryptError)?;
        // The content type is the last byte that is not padding.
        let Some(end) = plain.iter().rposition(|&b| b != 0) else {
            return Err(Error::PeerMisbehaved(
                PeerMisbehaved::IllegalTlsInnerPlaintext,
            ));
        };
        if end > MAX_PLAINTEXT {
            return Err(Error::PeerSentOversizedRecord);
        }
        let kind = plain[end];
        match kind {
            APPLICATION_DATA => Ok(Opened::Data {
                len: total,
                at: to,
                n: end,
            }),
            ALERT => match &plain[..end] {
                [_, 0] => Ok(Opened::Closed { len: total }),
                [_, desc] => Err(Error::AlertReceived(AlertDescription::from(*desc))),
                _ => Err(Error::InvalidMessage(InvalidMessage::TrailingData("alert"))),
            },
            HANDSHAKE => {
                self.handshake_messages(&plain[..end])?;
                Ok(Opened::Nothing { len: total })
            }
            _ => Err(Error::InvalidMessage(InvalidMessage::InvalidContentType)),
        }
    }

    /// The handshake messages a record after the handshake may hold: key updates and (to a
    /// client) session tickets; each whole within the record.
    fn handshake_messages(&mut self, mut msgs: &[u8]) -> Result<(), Error> {
        if msgs.is_empty() {
            return Err(Error::InvalidMessage(InvalidMessage::MissingData(
                "handshake",
            )));
        }
        while !msgs.is_empty() {
            let [kind, a, b, c, ..] = *msgs else {
                return Err(Error::InvalidMessage(InvalidMessage::MessageTooShort));
            };
            let len = usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c);
            let Some(body) = msgs.get(4..4 + len) else {
                // A message split across records: none the peers here send.
                return Err(Error::InvalidMessage(InvalidMessage::MessageTooShort));
            };
            match (kind, body) {
                (KEY_UPDATE, [asked @ (0 | 1)]) => {
                    // A key change ends the record (RFC 8446 §5.1).
                    if msgs.len() != 4 + len {
                        return Err(Error::PeerMisbehaved(
                            PeerMisbehaved::KeyEpochWithPendingFragment,
                        ));
                    }
                    self.rx = Keys::new(0, self.rekey.next_rx()?)?;
                    self.owe_update |= *asked == 1;
                }
                (KEY_UPDATE, _) => {
                    return Err(Error::InvalidMessage(InvalidMessage::InvalidKeyUpdate))
                }
                // Resumption is off: a ticket is dropped unread.
                (NEW_SESSION_TICKET, _) => {}
                _ => {
                    return Err(Error::InappropriateHandshakeMessage {
                        expect_types: vec![rustls::HandshakeType::KeyUpdate],
                        got_type: rustls::HandshakeType::from(kind),
                    })
                }
            }
            msgs = &msgs[4 + len..];
        }
        Ok(())
    }
}

/// The alert that tells the peer why its record was refused.
pub fn alert_for(e: &Error) -> AlertDescription {
    match e {
        Error::DecryptError => AlertDescription::BadRecordMac,
        Error::PeerSentOversizedRecord | Error::InvalidMessage(InvalidMessage::MessageTooLarge) => {
            AlertDescription::RecordOverflow
        }
        Error::InvalidMessage(InvalidMessage::InvalidKeyUpdate)
        | Error::InvalidMessage(InvalidMessage::MessageTooShort)
        | Error::InvalidMessage(InvalidMessage::TrailingData(_)) => AlertDescription::DecodeError,
        _ => AlertDescription::UnexpectedMessage,
    }
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
