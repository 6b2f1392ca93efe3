//! The record layer alone, two ends wired back to back (the interop with rustls's own record
//! layer is in `tls_stream_tests`).

use super::*;
use rustls::crypto::cipher::{AeadKey, Iv};

/// Derives "next" secrets deterministically, as a kernel connection would.
struct Chain(u8);

impl Rekey for Chain {
    fn next_tx(&mut self) -> Result<ConnectionTrafficSecrets, Error> {
        self.0 += 1;
        Ok(secrets(self.0))
    }
    fn next_rx(&mut self) -> Result<ConnectionTrafficSecrets, Error> {
        self.0 += 1;
        Ok(secrets(self.0))
    }
}

fn secrets(n: u8) -> ConnectionTrafficSecrets {
    ConnectionTrafficSecrets::Aes256Gcm {
        key: AeadKey::from([n; 32]),
        iv: Iv::from([n ^ 0x55; 12]),
    }
}

/// Two ends: `a` sends with secrets `x`, `b` receives with them (and the other way round).
fn pair() -> (Records, Records) {
    let a = Records::new(
        (0, secrets(1)),
        (0, secrets(2)),
        Box::new(Chain(10)),
        1 << 24,
    );
    let b = Records::new(
        (0, secrets(2)),
        (0, secrets(1)),
        Box::new(Chain(10)),
        1 << 24,
    );
    (a.unwrap(), b.unwrap())
}

/// Seals `data` at `from` and opens every record at `to`; the plaintext and what else came.
fn carry(from: &mut Records, to: &mut Records, data: &[u8]) -> Result<Vec<u8>, Error> {
    let mut wire = vec![0u8; Records::sealed_len(data.len())];
    let n = from.seal(data, &mut wire)?;
    open_all(to, &mut wire[..n])
}

fn open_all(to: &mut Records, mut wire: &mut [u8]) -> Result<Vec<u8>, Error> {
    let mut got = Vec::new();
    while !wire.is_empty() {
        let len = match to.open(wire)? {
            Opened::Data { len, at, n } => {
                got.extend_from_slice(&wire[at..at + n]);
                len
            }
            Opened::Nothing { len } | Opened::Closed { len } => len,
            Opened::Partial => panic!("partial record"),
        };
        wire = &mut wire[len..];
    }
    Ok(got)
}

#[test]
fn records_round_trip_in_pieces_of_at_most_16_kib() {
    let (mut a, mut b) = pair();
    for len in [
        0,
        1,
        MAX_PLAINTEXT,
        MAX_PLAINTEXT + 1,
        3 * MAX_PLAINTEXT + 7,
    ] {
        let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        let mut wire = vec![0u8; Records::sealed_len(len)];
        let n = a.seal(&data, &mut wire).unwrap();
        assert_eq!(n, len + len.div_ceil(MAX_PLAINTEXT) * OVERHEAD);
        assert_eq!(open_all(&mut b, &mut wire[..n]).unwrap(), data);
    }
}

/// Seals `data` in place at `from` and lays the records out as the socket gets them.
fn gapped_wire(from: &mut Records, data: &mut [u8]) -> Vec<u8> {
    let mut g = Gapped::default();
    from.seal_gapped(data, &mut g).unwrap();
    g.slices(data)
        .iter()
        .flat_map(|s| s.iter().copied())
        .collect()
}

#[test]
fn records_sealed_in_place_are_the_records_seal_makes() {
    for len in [
        1,
        MAX_PLAINTEXT,
        MAX_PLAINTEXT + 1,
        2 * MAX_PLAINTEXT,
        3 * MAX_PLAINTEXT + 7,
        256 * MAX_PLAINTEXT,
    ] {
        let data: Vec<u8> = (0..len).map(|i| (i * 13 + i / 251) as u8).collect();
        // The same keys sealing the same bytes both ways: byte for byte the same records.
        let (mut a, mut b) = pair();
        let (mut c, _) = pair();
        let mut wire = vec![0u8; Records::sealed_len(len)];
        let n = c.seal(&data, &mut wire).unwrap();
        let mut buf = data.clone();
        let gapped = gapped_wire(&mut a, &mut buf);
        assert_eq!(gapped.len(), n, "{len}");
        assert!(gapped == wire[..n], "{len}: not the records seal makes");
        assert_eq!(open_all(&mut b, &mut gapped.clone()).unwrap(), data);
        // The buffer now holds each record's ciphertext (all but the last, copied).
        let in_place = (len - 1) / MAX_PLAINTEXT * MAX_PLAINTEXT;
        assert!(buf[..in_place] != data[..in_place] || in_place == 0);
        assert_eq!(buf[in_place..], data[in_place..]);
    }
    let (mut a, _) = pair();
    assert!(gapped_wire(&mut a, &mut []).is_empty());
}

#[test]
fn a_key_update_due_goes_before_records_sealed_in_place() {
    let (mut a, mut b) = pair();
    a.rekey_after(2);
    let data = vec![3u8; 5 * MAX_PLAINTEXT + 9];
    for _ in 0..3 {
        let mut buf = data.clone();
        let wire = gapped_wire(&mut a, &mut buf);
        assert_eq!(open_all(&mut b, &mut wire.clone()).unwrap(), data);
    }
    // The peer asked for an update: the next call's records start with ours.
    let (mut a, mut b) = pair();
    let mut wire = vec![0u8; 64];
    let n = b.seal_key_update(&mut wire).unwrap();
    assert_eq!(open_all(&mut a, &mut wire[..n]).unwrap(), b"");
    let mut buf = data.clone();
    let wire = gapped_wire(&mut a, &mut buf);
    assert_eq!(wire.len(), OVERHEAD + 5 + data.len() + 6 * OVERHEAD);
    assert_eq!(open_all(&mut b, &mut wire.clone()).unwrap(), data);
    assert!(!a.owe_update);
}

#[test]
fn sealing_in_place_that_cannot_finish_leaves_the_buffer_as_it_was() {
    let (mut a, _) = pair();
    a.tx.seq = u64::MAX - 3;
    let data = vec![1u8; 4 * MAX_PLAINTEXT];
    let mut buf = data.clone();
    let mut g = Gapped::default();
    assert_eq!(a.seal_gapped(&mut buf, &mut g), Err(Error::EncryptError));
    assert_eq!(buf, data);
}

#[test]
fn a_partial_record_waits_and_a_forged_one_fails() {
    let (mut a, mut b) = pair();
    let mut wire = vec![0u8; Records::sealed_len(100)];
    let n = a.seal(&[7; 100], &mut wire).unwrap();
    for cut in [0, 4, 5, n - 1] {
        assert_eq!(b.open(&mut wire[..cut].to_vec()).unwrap(), Opened::Partial);
    }
    let mut forged = wire[..n].to_vec();
    forged[20] ^= 1;
    assert_eq!(b.open(&mut forged), Err(Error::DecryptError));
    // A replayed record fails too: the sequence number moved on.
    let (mut a, mut b) = pair();
    let n = a.seal(b"once", &mut wire).unwrap();
    let copy = wire[..n].to_vec();
    assert_eq!(open_all(&mut b, &mut wire[..n]).unwrap(), b"once");
    assert_eq!(
        open_all(&mut b, &mut copy.clone()),
        Err(Error::DecryptError)
    );
}

#[test]
fn headers_that_cannot_be_a_tls13_record_are_refused_unread() {
    let (_, mut b) = pair();
    // A handshake record after the handshake, an oversized length, a length under a tag.
    for h in [[22, 3, 3, 0, 40], [23, 3, 3, 0x41, 0x20], [23, 3, 3, 0, 16]] {
        assert!(b.open(&mut h.to_vec()).is_err(), "{h:?}");
    }
}

#[test]
fn key_updates_change_the_keys_both_ways_and_are_answered_when_asked() {
    let (mut a, mut b) = pair();
    a.rekey_after(3);
    let data = vec![9u8; 10 * MAX_PLAINTEXT];
    // a updates its keys every 3 records; b follows each update.
    assert_eq!(carry(&mut a, &mut b, &data).unwrap(), data);
    assert_eq!(carry(&mut a, &mut b, &data).unwrap(), data);
    // a asks b to update: b's next records start with its own update, which a follows.
    let mut wire = vec![0u8; 64];
    let n = a.seal_key_update(&mut wire).unwrap();
    assert_eq!(open_all(&mut b, &mut wire[..n]).unwrap(), b"");
    assert!(b.owe_update);
    let mut wire = vec![0u8; Records::sealed_len(5)];
    let n = b.seal(b"hello", &mut wire).unwrap();
    assert_eq!(n, 2 * OVERHEAD + 5 + 5, "an update, then the data");
    assert_eq!(open_all(&mut a, &mut wire[..n]).unwrap(), b"hello");
    assert!(!b.owe_update);
}

#[test]
fn alerts_end_or_fail_the_connection() {
    let (mut a, mut b) = pair();
    let mut wire = vec![0u8; 64];
    let n = a
        .seal_alert(AlertDescription::CloseNotify, &mut wire)
        .unwrap();
    assert_eq!(b.open(&mut wire[..n]).unwrap(), Opened::Closed { len: n });
    let n = a
        .seal_alert(AlertDescription::BadRecordMac, &mut wire)
        .unwrap();
    assert_eq!(
        b.open(&mut wire[..n]),
        Err(Error::AlertReceived(AlertDescription::BadRecordMac))
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Any length, any bytes: sealed in place, the peer opens exactly them.
    #[test]
    fn any_buffer_sealed_in_place_opens_to_itself(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..70_000)) {
        let (mut a, mut b) = pair();
        let mut buf = data.clone();
        let wire = gapped_wire(&mut a, &mut buf);
        proptest::prop_assert_eq!(open_all(&mut b, &mut wire.clone()).unwrap(), data);
    }

    /// Bytes that did not come from the peer's keys never open as anything: an error or a
    /// wait for more, never a panic.
    #[test]
    fn noise_never_opens(mut bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..20_000), typed in proptest::prelude::any::<bool>()) {
        let (_, mut b) = pair();
        if typed && bytes.len() >= 5 {
            bytes[0] = APPLICATION_DATA;
        }
        match b.open(&mut bytes) {
            Ok(Opened::Partial) | Err(_) => {}
            Ok(other) => proptest::prop_assert!(false, "opened noise: {other:?}"),
        }
    }

    /// One bit flipped anywhere in a sealed record: refused, or (a longer length) waited
    /// for; never opened.
    #[test]
    fn a_flipped_bit_is_never_opened(len in 1usize..40_000, bit in proptest::prelude::any::<usize>()) {
        let (mut a, mut b) = pair();
        let data = vec![0x5a; len];
        let mut wire = vec![0u8; Records::sealed_len(len)];
        let n = a.seal(&data, &mut wire).unwrap();
        let first = (len.min(MAX_PLAINTEXT) + OVERHEAD).min(n);
        let at = bit % (first * 8);
        wire[at / 8] ^= 1 << (at % 8);
        match b.open(&mut wire[..n]) {
            Ok(Opened::Partial) | Err(_) => {}
            Ok(other) => proptest::prop_assert!(false, "opened a forged record: {other:?}"),
        }
    }
}
