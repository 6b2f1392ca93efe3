//! What a data stream tells the adaptive codec about its connection around each write.

use std::time::Duration;

use crate::codec::tune::LinkSample;
use crate::codec::Encoder;
use crate::transport::{Chrono, Conn};

/// A data connection's chrono counters before a unit's write, for [`link_sample`] after
/// it; `None` when the codec is fixed or the kernel does not count.
pub(crate) fn before_write(enc: &Encoder, conn: &Conn) -> Option<Chrono> {
    if !enc.adapts() {
        return None;
    }
    conn.delivery().and_then(|d| d.chrono)
}

/// TCP's delivery sample of a data connection after a unit's write, with the time the
/// write was limited by the receiver's window since `before` (zero when either count is
/// missing), for the adaptive codec (`codec::tune`); `None` when the codec is fixed or the
/// connection has none. A write that re-dialed compares two connections' counters:
/// [`Chrono::since`] then gives zero or a time the tuner caps at the write's own.
pub(crate) fn link_sample(
    enc: &Encoder,
    conn: &Conn,
    before: Option<Chrono>,
) -> Option<LinkSample> {
    if !enc.adapts() {
        return None;
    }
    conn.delivery().map(|d| LinkSample {
        rate: d.rate as f64,
        app_limited: d.app_limited,
        rwnd: match (d.chrono, before) {
            (Some(now), Some(then)) => now.since(&then).rwnd_limited,
            _ => Duration::ZERO,
        },
    })
}
