//! The receiver's heartbeat: while it works on a request whose answer may take long (a
//! batch whose deltas hash big files, `Finish` with its fsyncs, a relay waiting on its
//! next hop or dialing around a failed one), a second thread says `Keepalive` on the
//! control stream every [`HEARTBEAT`], so that the sender (or the relay before this one),
//! which takes a control stream silent for its bound for a dead one, can tell a busy
//! receiver from a stopped or vanished one (docs/design.md, *Liveness*).
//!
//! Only while the sender waits for an answer: it reads the control stream then, so the
//! heartbeats never pile up unread. Not here: the bounds themselves (the sender's `link`,
//! the relay's `relay`).

use std::time::Duration;

use crossbeam_channel::RecvTimeoutError;

use crate::protocol::Control;
use crate::session::Channel;

/// How often a busy receiver says it is there: well inside the shortest silence bound
/// that waits on it (a relay's 10 s).
pub(super) const HEARTBEAT: Duration = Duration::from_secs(1);

/// How long one heartbeat may take to write: a sender that reads nothing for this long
/// is not waiting for the answer any more (the heartbeats stop; the answer's own write
/// finds out what became of it).
const WRITE_STALL: Duration = Duration::from_secs(10);

/// Runs `work`, saying `Keepalive` on `control` every [`HEARTBEAT`] until it returns.
pub(super) fn busy<T>(control: &mut Channel, work: impl FnOnce() -> T) -> T {
    let _ = control.conn().set_write_timeout(Some(WRITE_STALL));
    let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
    std::thread::scope(|s| {
        let beat = std::thread::Builder::new()
            .name("haul-heartbeat".into())
            .spawn_scoped(s, move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(HEARTBEAT) {
                    if control.write(&Control::Keepalive).is_err() {
                        return;
                    }
                }
            });
        let r = work();
        drop(stop);
        if let Ok(h) = beat {
            let _ = h.join();
        }
        r
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::Conn;

    #[test]
    fn a_long_piece_of_work_is_heard_and_a_short_one_is_not() {
        let (a, b) = Conn::pair().unwrap();
        let (mut receiver, mut sender) = (Channel::new(a), Channel::new(b));
        // The work ends once the other end has heard three heartbeats (each awaited,
        // bounded): no clock is asserted.
        let heard = busy(&mut receiver, || {
            (0..3)
                .map(|_| sender.read(Some(Duration::from_secs(30))))
                .collect::<Vec<_>>()
        });
        for m in heard {
            assert_eq!(m.unwrap(), Control::Keepalive);
        }
        let (a, b) = Conn::pair().unwrap();
        let (mut receiver, mut sender) = (Channel::new(a), Channel::new(b));
        busy(&mut receiver, || ());
        receiver.write(&Control::Need(Vec::new())).unwrap();
        let m = sender.read(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(m, Control::Need(Vec::new()), "nothing before the answer");
    }
}
