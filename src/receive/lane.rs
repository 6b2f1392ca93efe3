//! A local copy's data stream on the receiving side: units handed over in-process by the
//! sender's stream (see `transport::lane`) go into the store as they are, counted like
//! data frames, so `Finish` settles the same way.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::codec::VerifiedUnit;
use crate::error::Result;
use crate::protocol::DataHeader;
use crate::store::{Store, WriterCache};
use crate::transport::lane::{LaneReceiver, Received};

/// What a lane's worker shares with the rest of the receiver.
pub(super) struct Shared<'a> {
    /// Where units go.
    pub store: &'a Store,
    /// Set when the transfer ends: stop waiting.
    pub abort: &'a AtomicBool,
    /// Workers busy writing a unit.
    pub busy: &'a AtomicUsize,
    /// How often to look at `abort` while the lane is idle.
    pub tick: Duration,
}

/// Writes the lane's units until the sender's end is gone or the transfer is aborted;
/// `written` is called after each unit.
pub(super) fn run(lane: LaneReceiver, s: Shared<'_>, written: impl Fn()) -> Result<()> {
    let mut cache = WriterCache::default();
    loop {
        let unit = match lane.recv(s.tick) {
            Received::Unit(u) => u,
            Received::Idle if s.abort.load(Ordering::Relaxed) => return Ok(()),
            Received::Idle => continue,
            Received::Closed => return Ok(()),
        };
        let h = DataHeader::parse_parts(unit.head(), unit.bytes())?;
        s.busy.fetch_add(1, Ordering::AcqRel);
        let r = s
            .store
            .write_unit(&VerifiedUnit::in_process(&unit), h.segments(), &mut cache);
        s.busy.fetch_sub(1, Ordering::AcqRel);
        r?;
        lane.recycle(unit);
        written();
    }
}
