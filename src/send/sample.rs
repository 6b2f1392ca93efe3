//! What a data stream tells the adaptive codec about its connection after each write.

use crate::codec::tune::LinkSample;
use crate::codec::Encoder;
use crate::transport::Conn;

/// TCP's delivery sample of a data connection after a unit's write, for the adaptive
/// codec (`codec::tune`); `None` when the codec is fixed or the connection has none.
pub(crate) fn link_sample(enc: &Encoder, conn: &Conn) -> Option<LinkSample> {
    if !enc.adapts() {
        return None;
    }
    conn.delivery().map(|d| LinkSample {
        rate: d.rate as f64,
        app_limited: d.app_limited,
    })
}
