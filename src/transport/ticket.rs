//! The ticket: everything a dialer needs to reach and trust a listener, as one line of text.
//!
//! Text form: `haul1-` followed by lowercase, unpadded base32 of this binary layout
//! (all integers little-endian):
//!
//! ```text
//! format u8 (1, or 2: a hop ticket) | fingerprint [32] | secret [32] | count u8 (1..=32) |
//!   count × ( kind u8 (4 or 6) | ip [4 or 16] | port u16 ) | check [4]
//! ```
//!
//! `check` is the first 4 bytes of BLAKE3 over everything before it, so a character lost or
//! changed while copying is reported as a bad ticket instead of a confusing TLS failure.
//! Base32 keeps the line free of shell metacharacters and safe to double-click-select.
//!
//! A *hop ticket* (format 2, [`Ticket::for_hop`]) is what a chain fan-out's sender gives
//! the receivers before a hop: it reaches and authenticates that hop as the hop's own
//! ticket does (connections prove [`Secret::conn_key`], which both derive to the same), but
//! holds no [`Secret::outcome_key`], so a relay cannot vouch for the hop it dials.
//!
//! Not here: which addresses go into a ticket (the listener decides), or connecting.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use super::TransportError;

/// Text prefix of every ticket.
const PREFIX: &str = "haul1-";
/// Binary layout version inside the base32 text.
const FORMAT: u8 = 1;
/// The same layout, the secret field holding a connection key only (a hop ticket).
const FORMAT_HOP: u8 = 2;
/// Most addresses a ticket can carry; `encode` keeps the first ones.
pub const MAX_TICKET_ADDRS: usize = 32;
/// Longer input is refused before decoding (a full ticket is well under 1 KiB).
const MAX_TEXT_LEN: usize = 4096;
const CHECK_LEN: usize = 4;
const KIND_V4: u8 = 4;
const KIND_V6: u8 = 6;

/// 32 random bytes shared through the ticket; proves a connection belongs to this transfer.
///
/// `Debug` never prints the bytes. The secret a receiver made (a *root* secret) yields
/// every key; a hop ticket's holds only the connection key derived from one.
#[derive(Clone)]
pub struct Secret {
    bytes: [u8; 32],
    /// Only the connection key (from a hop ticket).
    hop: bool,
}

impl Secret {
    /// A fresh secret from the operating system's random source.
    ///
    /// # Panics
    /// If the OS random source fails (see [`Secret::try_random`] to handle that instead):
    /// a weak secret would be worse than no transfer.
    pub fn random() -> Secret {
        match Secret::try_random() {
            Ok(s) => s,
            Err(e) => panic!("cannot read the OS random source: {e}"),
        }
    }

    /// A fresh secret from the operating system's random source, or why there is none.
    pub fn try_random() -> io::Result<Secret> {
        random32().map(Secret::from_bytes)
    }

    /// A root secret with the given bytes (from a decoded ticket, or in tests).
    pub fn from_bytes(bytes: [u8; 32]) -> Secret {
        Secret { bytes, hop: false }
    }

    /// The raw bytes (as the ticket carries them).
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.bytes
    }

    /// What every connection proves (the handshake's key) and every other connection key
    /// comes from; the same for a ticket and the hop ticket made of it.
    pub fn conn_key(&self) -> [u8; 32] {
        match self.hop {
            true => self.bytes,
            false => blake3::derive_key("haul 2026 connection key", &self.bytes),
        }
    }

    /// Key for keyed-BLAKE3 of data blocks, so a block hash cannot be forged by anyone who
    /// lacks the ticket, even on an unencrypted stream.
    pub fn block_key(&self) -> [u8; 32] {
        blake3::derive_key("haul 2026 block hash key", &self.conn_key())
    }

    /// Key of a receiver's proof of its own outcome in a chain fan-out (`protocol::vouch`):
    /// known to the receiver and to whoever holds its ticket, never to a relay (which gets
    /// a hop ticket); None for a hop ticket's secret.
    pub fn outcome_key(&self) -> Option<[u8; 32]> {
        (!self.hop).then(|| blake3::derive_key("haul 2026 outcome key", &self.bytes))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// 32 bytes from the OS random source.
pub(super) fn random32() -> io::Result<[u8; 32]> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| io::Error::other(e.to_string()))?;
    Ok(b)
}

/// What a dialer needs to reach and trust a listener.
#[derive(Clone, Debug)]
pub struct Ticket {
    /// Addresses to try, in order.
    pub addrs: Vec<SocketAddr>,
    /// BLAKE3 of the listener's certificate (DER).
    pub fingerprint: [u8; 32],
    /// The shared secret.
    pub secret: Secret,
}

impl Ticket {
    /// The hop ticket of this one: the same addresses and certificate, and only the
    /// connection key (see the module docs).
    pub fn for_hop(&self) -> Ticket {
        Ticket {
            secret: Secret {
                bytes: self.secret.conn_key(),
                hop: true,
            },
            ..self.clone()
        }
    }

    /// One line, copy-pastable, no spaces or shell metacharacters: `haul1-` + lowercase
    /// unpadded base32 of the binary layout in the module docs. Carries at most
    /// [`MAX_TICKET_ADDRS`] addresses (the first ones).
    pub fn encode(&self) -> String {
        let mut bin = Vec::with_capacity(128);
        bin.push(match self.secret.hop {
            true => FORMAT_HOP,
            false => FORMAT,
        });
        bin.extend_from_slice(&self.fingerprint);
        bin.extend_from_slice(self.secret.as_bytes());
        let addrs = &self.addrs[..self.addrs.len().min(MAX_TICKET_ADDRS)];
        // Lossless: MAX_TICKET_ADDRS fits a byte.
        bin.push(addrs.len() as u8);
        for a in addrs {
            match a.ip() {
                IpAddr::V4(ip) => {
                    bin.push(KIND_V4);
                    bin.extend_from_slice(&ip.octets());
                }
                IpAddr::V6(ip) => {
                    bin.push(KIND_V6);
                    bin.extend_from_slice(&ip.octets());
                }
            }
            bin.extend_from_slice(&a.port().to_le_bytes());
        }
        let check = blake3::hash(&bin);
        bin.extend_from_slice(&check.as_bytes()[..CHECK_LEN]);
        let mut text = String::with_capacity(PREFIX.len() + bin.len() * 8 / 5 + 1);
        text.push_str(PREFIX);
        text.push_str(
            &data_encoding::BASE32_NOPAD
                .encode(&bin)
                .to_ascii_lowercase(),
        );
        text
    }

    /// Parses a ticket; surrounding whitespace is ignored and case does not matter.
    /// Any malformed input is `TransportError::BadTicket`.
    pub fn parse(s: &str) -> Result<Ticket, TransportError> {
        let s = s.trim();
        if s.len() > MAX_TEXT_LEN {
            return Err(bad("it is far too long"));
        }
        let body = match s.get(..PREFIX.len()) {
            Some(p) if p.eq_ignore_ascii_case(PREFIX) => &s[PREFIX.len()..],
            _ => return Err(bad("it does not start with \"haul1-\"")),
        };
        let bin = data_encoding::BASE32_NOPAD_NOCASE
            .decode(body.as_bytes())
            .map_err(|_| bad("it is not valid base32 (a character was lost or changed?)"))?;
        let Some(split) = bin.len().checked_sub(CHECK_LEN) else {
            return Err(bad("it is truncated"));
        };
        let (bin, check) = bin.split_at(split);
        if blake3::hash(bin).as_bytes()[..CHECK_LEN] != *check {
            return Err(bad(
                "its checksum does not match (truncated, or a character was changed?)",
            ));
        }
        decode_body(bin)
    }
}

impl FromStr for Ticket {
    type Err = TransportError;

    fn from_str(s: &str) -> Result<Ticket, TransportError> {
        Ticket::parse(s)
    }
}

fn bad(why: &str) -> TransportError {
    TransportError::BadTicket(why.to_string())
}

/// A cursor over checked bytes; every take is bounds-checked.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], TransportError> {
        if self.0.len() < n {
            return Err(bad("it is truncated"));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn take_array<const N: usize>(&mut self) -> Result<[u8; N], TransportError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn take_u8(&mut self) -> Result<u8, TransportError> {
        Ok(self.take_array::<1>()?[0])
    }
}

fn decode_body(bin: &[u8]) -> Result<Ticket, TransportError> {
    let mut c = Cursor(bin);
    let format = c.take_u8()?;
    if format != FORMAT && format != FORMAT_HOP {
        return Err(TransportError::BadTicket(format!(
            "unsupported ticket format {format} (made by a newer haul?)"
        )));
    }
    let fingerprint = c.take_array::<32>()?;
    let secret = Secret {
        bytes: c.take_array::<32>()?,
        hop: format == FORMAT_HOP,
    };
    let count = usize::from(c.take_u8()?);
    if count == 0 || count > MAX_TICKET_ADDRS {
        return Err(TransportError::BadTicket(format!(
            "it lists {count} addresses (1 to {MAX_TICKET_ADDRS} allowed)"
        )));
    }
    let mut addrs = Vec::with_capacity(count);
    for _ in 0..count {
        let ip = match c.take_u8()? {
            KIND_V4 => IpAddr::V4(Ipv4Addr::from(c.take_array::<4>()?)),
            KIND_V6 => IpAddr::V6(Ipv6Addr::from(c.take_array::<16>()?)),
            other => {
                return Err(TransportError::BadTicket(format!(
                    "unknown address kind {other}"
                )))
            }
        };
        let port = u16::from_le_bytes(c.take_array::<2>()?);
        addrs.push(SocketAddr::new(ip, port));
    }
    if !c.0.is_empty() {
        return Err(bad("it has trailing bytes"));
    }
    Ok(Ticket {
        addrs,
        fingerprint,
        secret,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Ticket {
        Ticket {
            addrs: vec![
                "198.18.0.1:40000".parse().unwrap(),
                "[2001:db8::7]:40000".parse().unwrap(),
                "127.0.0.1:40000".parse().unwrap(),
            ],
            fingerprint: [0xab; 32],
            secret: Secret::random(),
        }
    }

    fn assert_bad(s: &str) {
        match Ticket::parse(s) {
            Err(TransportError::BadTicket(_)) => {}
            other => panic!("{s:?} parsed as {other:?}"),
        }
    }

    #[test]
    fn round_trip() {
        let t = sample();
        let text = t.encode();
        assert!(text.starts_with("haul1-"));
        assert!(text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
        let back = Ticket::parse(&format!("  {text}\n")).unwrap();
        assert_eq!(back.addrs, t.addrs);
        assert_eq!(back.fingerprint, t.fingerprint);
        assert_eq!(back.secret.as_bytes(), t.secret.as_bytes());
        // Case-insensitive, so a ticket retyped in capitals still works.
        let upper = Ticket::parse(&text.to_ascii_uppercase()).unwrap();
        assert_eq!(upper.addrs, t.addrs);
        assert_eq!(text.parse::<Ticket>().unwrap().fingerprint, t.fingerprint);
    }

    #[test]
    fn encode_caps_address_count() {
        let mut t = sample();
        t.addrs = (0..40u16)
            .map(|p| SocketAddr::from(([10, 0, 0, 1], p)))
            .collect();
        let back = Ticket::parse(&t.encode()).unwrap();
        assert_eq!(back.addrs, t.addrs[..MAX_TICKET_ADDRS]);
    }

    #[test]
    fn garbage_is_bad_ticket() {
        let text = sample().encode();
        assert_bad("");
        assert_bad("   ");
        assert_bad("haul1-");
        assert_bad("haul1");
        assert_bad("haul2-aaaa");
        assert_bad(&text.replacen("haul1-", "haul2-", 1));
        assert_bad(&text[6..]);
        assert_bad("haul1-0189!!");
        assert_bad("haul1-éé");
        assert_bad(&"haul1-".repeat(1000));
        for cut in 1..text.len() - 6 {
            assert_bad(&text[..text.len() - cut]);
        }
        // One changed character anywhere after the prefix is caught.
        for i in 6..text.len() {
            let mut b = text.clone().into_bytes();
            b[i] = if b[i] == b'a' { b'b' } else { b'a' };
            assert_bad(&String::from_utf8(b).unwrap());
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut seed = *blake3::hash(b"ticket fuzz").as_bytes();
        for round in 0..2000u32 {
            seed = *blake3::hash(&seed).as_bytes();
            let len = usize::from(seed[0]) % 200;
            let mut bin = vec![0u8; len];
            blake3::Hasher::new()
                .update(&seed)
                .finalize_xof()
                .fill(&mut bin);
            if round % 2 == 0 {
                // Valid base32 of random bytes, with and without a correct checksum.
                if round % 4 == 0 && !bin.is_empty() {
                    bin[0] = FORMAT;
                    let c = blake3::hash(&bin);
                    bin.extend_from_slice(&c.as_bytes()[..CHECK_LEN]);
                }
                let text = format!("haul1-{}", data_encoding::BASE32_NOPAD.encode(&bin));
                let _ = Ticket::parse(&text);
            } else {
                let _ = Ticket::parse(&String::from_utf8_lossy(&bin));
            }
        }
    }

    #[test]
    fn checked_but_malformed_bodies_are_rejected() {
        let encode = |bin: &[u8]| {
            let mut v = bin.to_vec();
            v.extend_from_slice(&blake3::hash(bin).as_bytes()[..CHECK_LEN]);
            format!("haul1-{}", data_encoding::BASE32_NOPAD.encode(&v))
        };
        let mut body = vec![FORMAT];
        body.extend_from_slice(&[0; 64]);
        assert_bad(&encode(&body)); // no count
        body.push(0);
        assert_bad(&encode(&body)); // zero addresses
        *body.last_mut().unwrap() = 1;
        body.extend_from_slice(&[5, 1, 2, 3, 4, 0, 1]);
        assert_bad(&encode(&body)); // unknown kind
        body[66] = KIND_V4;
        assert!(Ticket::parse(&encode(&body)).is_ok());
        body.push(0);
        assert_bad(&encode(&body)); // trailing byte
        body.pop();
        body[65] = 2;
        assert_bad(&encode(&body)); // count larger than the list
    }

    #[test]
    fn secret_debug_hides_bytes_and_block_key_is_derived() {
        let s = Secret::from_bytes([0x42; 32]);
        assert_eq!(format!("{s:?}"), "Secret(..)");
        let t = Ticket {
            secret: s.clone(),
            ..sample()
        };
        assert!(!format!("{t:?}").contains("66, 66"));
        assert_eq!(
            s.block_key(),
            blake3::derive_key("haul 2026 block hash key", &s.conn_key())
        );
        assert_ne!(s.block_key(), *s.as_bytes());
        assert_ne!(s.conn_key(), *s.as_bytes());
    }

    #[test]
    fn a_hop_ticket_connects_as_its_ticket_but_cannot_vouch() {
        let t = sample();
        let hop = Ticket::parse(&t.for_hop().encode()).unwrap();
        assert_eq!(hop.addrs, t.addrs);
        assert_eq!(hop.fingerprint, t.fingerprint);
        assert_eq!(hop.secret.conn_key(), t.secret.conn_key());
        assert_eq!(hop.secret.block_key(), t.secret.block_key());
        assert!(t.secret.outcome_key().is_some());
        assert_eq!(hop.secret.outcome_key(), None);
        // Its bytes are not the ticket's secret, and no key of theirs is the outcome key.
        assert_ne!(hop.secret.as_bytes(), t.secret.as_bytes());
        let as_root = Secret::from_bytes(*hop.secret.as_bytes());
        assert_ne!(as_root.outcome_key(), t.secret.outcome_key());
        assert_eq!(hop.for_hop().secret.as_bytes(), hop.secret.as_bytes());
    }
}
