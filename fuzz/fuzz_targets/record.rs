//! TLS 1.3 records (`transport::record`, the record layer haul runs after the handshakes),
//! two ways:
//!
//! 1. The raw input opened as records at fuzzer-chosen positions (`open_to` with the
//!    plaintext moved down, as direct reads do): header checks, length bounds, partial
//!    records; without the keys nothing may open.
//! 2. The input as a list of operations (application data of some length, an alert, a
//!    key update, a key-update interval) that one end seals, optionally one bit flipped,
//!    then the other end opens every record in one buffer, moving each plaintext down over
//!    the headers and tags before it: what was sealed comes back exactly, up to the flipped
//!    bit, after which nothing opens.
#![no_main]

use haul::transport::record::{Opened, Records, Rekey, MAX_PLAINTEXT};
use libfuzzer_sys::fuzz_target;
use rustls::crypto::cipher::{AeadKey, Iv};
use rustls::{AlertDescription, ConnectionTrafficSecrets, Error};

/// Secrets derived the same way at both ends (a stand-in for the TLS key schedule).
struct Chain(u8);

impl Rekey for Chain {
    fn next_tx(&mut self) -> Result<ConnectionTrafficSecrets, Error> {
        self.0 = self.0.wrapping_add(1);
        Ok(secrets(self.0))
    }
    fn next_rx(&mut self) -> Result<ConnectionTrafficSecrets, Error> {
        self.0 = self.0.wrapping_add(1);
        Ok(secrets(self.0))
    }
}

fn secrets(n: u8) -> ConnectionTrafficSecrets {
    ConnectionTrafficSecrets::Aes256Gcm {
        key: AeadKey::from([n; 32]),
        iv: Iv::from([n ^ 0x5a; 12]),
    }
}

fn ends() -> (Records, Records) {
    let a = Records::new((0, secrets(1)), (0, secrets(2)), Box::new(Chain(9)), 1 << 24);
    let b = Records::new((0, secrets(2)), (0, secrets(1)), Box::new(Chain(9)), 1 << 24);
    (a.expect("keys"), b.expect("keys"))
}

/// Opens every record of `buf` in place, each plaintext moved down to the end of the last;
/// the plaintext and whether the peer closed. Stops at the first refusal or partial record.
fn open_all(to: &mut Records, buf: &mut [u8]) -> (Vec<u8>, bool, bool) {
    let (mut r, mut w) = (0, 0);
    loop {
        match to.open_to(buf, r, w) {
            Ok(Opened::Data { len, at, n }) => {
                assert_eq!(at, w);
                r += len;
                w += n;
            }
            Ok(Opened::Nothing { len }) => r += len,
            Ok(Opened::Closed { .. }) => return (buf[..w].to_vec(), true, false),
            Ok(Opened::Partial) => return (buf[..w].to_vec(), false, r < buf.len()),
            Err(_) => return (buf[..w].to_vec(), false, true),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };

    // 1. Noise at chosen positions: never opens.
    let (_, mut b) = ends();
    let mut noise = body.to_vec();
    let at = usize::from(mode) % (noise.len() + 1);
    let to = at.saturating_sub(usize::from(mode >> 4));
    if let Ok(o) = b.open_to(&mut noise, at, to) {
        assert!(
            matches!(o, Opened::Partial),
            "noise opened: {o:?}"
        );
    }

    // 2. Operations `op u8, arg u16 LE`, sealed by one end, opened by the other.
    let (mut a, mut b) = ends();
    let mut wire = Vec::new();
    let mut sent = Vec::new();
    let mut closed = false;
    let mut rest = body;
    while rest.len() >= 3 && !closed {
        let arg = usize::from(u16::from_le_bytes([rest[1], rest[2]]));
        let op = rest[0] % 5;
        rest = &rest[3..];
        let mut out = vec![0u8; Records::sealed_len(arg.min(3 * MAX_PLAINTEXT))];
        let n = match op {
            0 | 1 => {
                let len = arg.min(3 * MAX_PLAINTEXT);
                let piece: Vec<u8> = (0..len).map(|i| (i as u8) ^ rest.len() as u8).collect();
                sent.extend_from_slice(&piece);
                a.seal(&piece, &mut out).expect("seal")
            }
            2 => a.seal_key_update(&mut out).expect("key update"),
            3 => {
                a.rekey_after(1 + arg as u64 % 8);
                0
            }
            _ => {
                closed = true;
                a.seal_alert(AlertDescription::CloseNotify, &mut out)
                    .expect("alert")
            }
        };
        wire.extend_from_slice(&out[..n]);
    }
    let flip = mode & 1 == 1 && !wire.is_empty();
    if flip {
        let bit = (usize::from(mode >> 1) * 131 + body.len()) % (wire.len() * 8);
        wire[bit / 8] ^= 1 << (bit % 8);
    }
    let (got, saw_close, refused) = open_all(&mut b, &mut wire);
    assert!(got.len() <= sent.len());
    assert!(got[..] == sent[..got.len()], "plaintext altered yet opened");
    if !flip {
        assert!(!refused, "an honest record was refused");
        assert_eq!(got.len(), sent.len());
        assert_eq!(saw_close, closed);
    }
});
