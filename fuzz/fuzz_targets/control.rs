//! Control messages: `Control::decode` on arbitrary payloads; whatever decodes must
//! re-encode and decode to the same message.
#![no_main]

use haul::protocol::{decode_frame, Control, SafeRelPath};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(msg) = Control::decode(data) else {
        return;
    };
    let _ = msg.name();
    if let Control::Entries(entries) = &msg {
        for e in entries {
            let _ = SafeRelPath::parse(&e.path);
        }
    }
    let mut out = Vec::new();
    if msg.encode(&mut out).is_ok() {
        let (f, used) = decode_frame(&out)
            .expect("own frame decodes")
            .expect("own frame is whole");
        assert_eq!(used, out.len());
        let again = Control::decode(f.payload).expect("own encoding decodes");
        assert_eq!(again, msg);
    }
});
