//! Shard files (`haul plan`'s output, read by `copy --shard` and `plan --check`):
//! `shard::decode` on arbitrary bytes, and on the input wrapped as a well-formed file
//! (the magic line first, a valid `end` checksum last), so the parser behind the checksum
//! is reached. A decoded file must re-encode to the same bytes' meaning: it decodes again
//! to the same header and records.
#![no_main]

use haul::plan::shard::{decode, encode, MAGIC};
use libfuzzer_sys::fuzz_target;

fn check(data: &[u8]) {
    if let Ok(f) = decode(data) {
        let again = decode(&encode(&f.header, &f.records)).expect("own encoding decodes");
        assert_eq!(again, f);
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    let mut body = format!("{MAGIC}\n").into_bytes();
    body.extend_from_slice(data);
    if !body.ends_with(b"\n") {
        body.push(b'\n');
    }
    let sum = blake3::hash(&body);
    body.extend_from_slice(format!("end {}\n", sum.to_hex()).as_bytes());
    check(&body);
});
