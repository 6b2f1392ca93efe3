//! Tickets: `Ticket::parse` on UTF-8 strings, on lossily converted arbitrary bytes, and
//! on the input wrapped as a well-formed `haul1-` base32 body with a valid checksum (so the
//! body decoder behind the checksum is reached). A parsed ticket must re-encode to a
//! ticket that parses to the same fields (a hop ticket to a hop ticket).
#![no_main]

use haul::transport::Ticket;
use libfuzzer_sys::fuzz_target;

fn check(s: &str) {
    if let Ok(t) = Ticket::parse(s) {
        let again = Ticket::parse(&t.encode()).expect("own encoding parses");
        assert_eq!(again.fingerprint, t.fingerprint);
        assert_eq!(again.secret.as_bytes(), t.secret.as_bytes());
        assert_eq!(again.addrs, t.addrs);
        // A hop ticket stays one (it connects as its ticket, and cannot vouch).
        assert_eq!(again.secret.conn_key(), t.secret.conn_key());
        assert_eq!(again.secret.outcome_key(), t.secret.outcome_key());
    }
}

fuzz_target!(|data: &[u8]| {
    match std::str::from_utf8(data) {
        Ok(s) => check(s),
        Err(_) => check(&String::from_utf8_lossy(data)),
    }
    // The input as the binary body, with the 4-byte BLAKE3 check the format uses
    // (see src/transport/ticket.rs): reaches the field decoder behind the checksum.
    let mut bin = data.to_vec();
    let check_bytes = blake3::hash(&bin);
    bin.extend_from_slice(&check_bytes.as_bytes()[..4]);
    let text = format!(
        "haul1-{}",
        data_encoding::BASE32_NOPAD
            .encode(&bin)
            .to_ascii_lowercase()
    );
    check(&text);
});
