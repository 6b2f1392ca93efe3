//! Control messages (protocol v4): `Control::decode` on arbitrary payload bytes — the
//! parser behind the control MAC — and, for whatever decodes, a round trip through the
//! real wire path: `Control::encode` with a `Sealer`, read back by a `FrameReader` with
//! the matching `Opener`, decoded to the same message.
#![no_main]

use haul::protocol::{
    known_name, Control, FrameKind, FrameReader, Opener, SafeRelPath, Sealer, MAX_XATTRS,
    MAX_XATTR_TOTAL, MAX_XATTR_VALUE,
};
use libfuzzer_sys::fuzz_target;

const LINK: [u8; 32] = [0x63; 32];

fuzz_target!(|data: &[u8]| {
    let Ok(msg) = Control::decode(data) else {
        return;
    };
    let _ = msg.name();
    if let Control::Entries(entries) = &msg {
        for e in entries {
            let _ = SafeRelPath::parse(&e.path);
            // Extended attributes decode only within their bounds and namespaces.
            if let Some(xs) = &e.xattrs {
                assert!(xs.list().len() <= MAX_XATTRS && xs.bytes() <= MAX_XATTR_TOTAL);
                for x in xs.list() {
                    assert!(known_name(&x.name) && x.value.len() <= MAX_XATTR_VALUE);
                }
            }
        }
    }
    // Sealed twice on one connection, so the second frame's tag and MAC use seq 1.
    let mut sealer = Sealer::new(LINK, false);
    let mut out = Vec::new();
    if msg.encode(&mut sealer, &mut out).is_ok() {
        let one = out.len();
        msg.encode(&mut sealer, &mut out)
            .expect("encodes the second time");
        assert_eq!(out.len(), 2 * one);
        let mut reader = FrameReader::new(Opener::new(LINK, true));
        let mut r = &out[..];
        for _ in 0..2 {
            let f = reader
                .read_frame(&mut r)
                .expect("own frame reads")
                .expect("own frame is whole");
            assert_eq!(f.kind, FrameKind::Control);
            let again = Control::decode(f.payload).expect("own encoding decodes");
            assert_eq!(again, msg);
        }
        assert!(reader.read_frame(&mut r).expect("clean end").is_none());
        // The same bytes on a connection with the other direction (a reflection) fail.
        let mut reflected = FrameReader::new(Opener::new(LINK, false));
        assert!(reflected.read_frame(&mut &out[..]).is_err());
    }
});
