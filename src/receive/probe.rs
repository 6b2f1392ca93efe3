//! A waiting `haul recv DIR` answers probes (`haul probe PATH... --to TICKET`): the
//! prober authenticates with the ticket as a sender does, on a connection of its own role
//! (`Role::Probe`), so it never takes the place of a sender's control connection. The
//! receiver measures DIR (`probe::dest`: an anonymous file, nothing stays), answers
//! `ProbeReady`, counts what the prober's `Role::ProbeData` streams carry
//! (`probe::count`) and answers `Probed`; then it keeps waiting for the sender.
//!
//! What a probe may cost is bounded: probes are answered one at a time on one thread, at
//! most [`MAX_PROBES`] per receiver, each within about 15 s (a 2 s write and its sync, 256
//! small files, [`COUNT_LIMIT`]) and with at most one buffer per declared stream; once a
//! sender has connected, probes are refused (they would slow the transfer and measure it
//! instead of the link). Only peers that passed the handshake get this far: a stranger
//! gets nothing more than before.
//!
//! Not here: the measurements themselves (`probe`), the prober (`send::probe`).

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::error::{exit, Error, Result};
use crate::probe::{count, dest};
use crate::protocol::{Control, MAX_STREAMS};
use crate::session::{lost, Channel};
use crate::transport::{Accepted, Conn, Role};

/// Probes one receiver answers; later ones are refused.
pub const MAX_PROBES: u32 = 3;
/// A probe's control connection must ask within this long.
const ASK_WAIT: Duration = Duration::from_secs(10);
/// From `ProbeReady` to the end of the count, whatever the prober does.
const COUNT_LIMIT: Duration = Duration::from_secs(10);
/// Probe connections waiting for their turn; more are closed at once.
const QUEUED_PROBES: usize = 4;

/// Where probes are measured, and whether to say so.
pub struct ProbeDesk {
    /// The destination directory (the store's root, duplicated).
    pub dir: OwnedFd,
    /// Its path, for messages.
    pub path: PathBuf,
    /// Print nothing but errors.
    pub quiet: bool,
}

/// The connections a listener accepts, as `receive` takes them (each with its role, in
/// the order they arrive), with probes split off and answered on a thread of their own.
pub fn incoming_answering_probes(
    accepted: Receiver<Accepted>,
    desk: ProbeDesk,
) -> Result<Receiver<(Conn, Role)>> {
    let (mut queue, rx) = super::integrity::ConnQueue::new();
    let (probe_tx, probe_rx) = crossbeam_channel::bounded(QUEUED_PROBES);
    let (data_tx, data_rx) = crossbeam_channel::bounded(usize::from(MAX_STREAMS));
    let sender_seen = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&sender_seen);
    std::thread::Builder::new()
        .name("haul-probes".into())
        .spawn(move || answer_probes(&desk, &probe_rx, &data_rx, &seen))
        .map_err(|e| Error::io("starting the probe thread", e))?;
    std::thread::Builder::new()
        .name("haul-incoming".into())
        .spawn(move || {
            for a in accepted {
                match a.role {
                    // When the queue is full the connection is closed at once.
                    Role::Probe => {
                        let _ = probe_tx.try_send(a.conn);
                    }
                    Role::ProbeData => {
                        let _ = data_tx.try_send(a.conn);
                    }
                    Role::Control | Role::Data => {
                        if a.role == Role::Control {
                            sender_seen.store(true, Ordering::Relaxed);
                        }
                        if !queue.offer(a.conn, a.role) {
                            break;
                        }
                    }
                }
            }
        })
        .map_err(|e| Error::io("starting the listener thread", e))?;
    Ok(rx)
}

/// Answers the probes that arrive, one at a time, for as long as connections come.
fn answer_probes(
    desk: &ProbeDesk,
    probes: &Receiver<Conn>,
    streams: &Receiver<Conn>,
    sender_seen: &AtomicBool,
) {
    let mut answered = 0;
    for conn in probes {
        let mut ch = Channel::new(conn);
        let peer = ch.conn().peer_desc();
        let asked = match ch.read(Some(ASK_WAIT)) {
            Ok(Control::Probe { streams }) => streams,
            // Silent, cut, forged or speaking of something else: dropped.
            _ => continue,
        };
        let refusal = if sender_seen.load(Ordering::Relaxed) {
            Some("a sender has connected: the transfer runs; probe before sending".to_string())
        } else if answered >= MAX_PROBES {
            Some(format!(
                "this receiver has answered {MAX_PROBES} probes already; send now, or \
                 start a new `haul recv` to probe again"
            ))
        } else if asked == 0 || asked > MAX_STREAMS {
            Some(format!(
                "a probe asks for 1 to {MAX_STREAMS} streams, not {asked}"
            ))
        } else {
            None
        };
        if let Some(message) = refusal {
            let _ = ch.write(&Control::Error {
                code: exit::USAGE,
                message,
            });
            continue;
        }
        answered += 1;
        match answer(desk, &mut ch, usize::from(asked), streams) {
            Ok(()) if !desk.quiet => eprintln!(
                "haul: answered a probe from {peer} ({answered} of {MAX_PROBES}); still \
                 waiting for the sender"
            ),
            Ok(()) => {}
            Err(e) => {
                crate::progress::warn(&format!("a probe from {peer} failed: {e}"));
                let _ = ch.write(&Control::Error {
                    code: e.exit_code(),
                    message: e.to_string(),
                });
            }
        }
    }
}

/// Measures the destination, then counts `asked` probe streams.
fn answer(
    desk: &ProbeDesk,
    ch: &mut Channel,
    asked: usize,
    streams: &Receiver<Conn>,
) -> Result<()> {
    // Streams left over from an earlier probe are not this one's.
    while streams.try_recv().is_ok() {}
    let m = dest::measure(desk.dir.as_fd()).map_err(|e| Error::destination(&desk.path, e))?;
    ch.write(&Control::ProbeReady {
        write_rate: Some(m.write_rate as u64),
        file_micros: m.per_file.map(whole_micros),
    })?;
    let deadline = Instant::now() + COUNT_LIMIT;
    let counts = count::count_streams(asked, deadline, || {
        streams.recv_deadline(deadline).map_err(|_| {
            lost(io::Error::new(
                io::ErrorKind::TimedOut,
                "the prober's streams did not all arrive",
            ))
        })
    })?;
    let (received, micros) = count::tally(&counts);
    ch.write(&Control::Probed { received, micros })
}

/// A per-file cost in whole microseconds, as the wire carries it: at least 1, since a cost
/// measured below the microsecond is not free (truncated, a 0.4 µs cost was sent as 0 and
/// the prober reported `file_seconds: 0`).
fn whole_micros(seconds: f64) -> u64 {
    (seconds * 1e6).ceil().max(1.0) as u64
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_file_cost_under_a_microsecond_is_sent_as_one_not_zero() {
        assert_eq!(super::whole_micros(0.4e-6), 1);
        assert_eq!(super::whole_micros(1.5e-3), 1500);
        assert_eq!(super::whole_micros(0.0), 1);
    }

    use super::*;
    use std::io::Write;

    const WAIT: Option<Duration> = Some(Duration::from_secs(120));

    fn arrive(tx: &crossbeam_channel::Sender<Accepted>, conn: Conn, role: Role) {
        let peer = "127.0.0.1:9".parse().unwrap();
        tx.send(Accepted {
            conn,
            role,
            peer,
            encrypted: false,
        })
        .unwrap();
    }

    /// Asks for a probe with `streams` streams; the first answer.
    fn ask(tx: &crossbeam_channel::Sender<Accepted>, streams: u16) -> (Channel, Control) {
        let (mine, theirs) = Conn::pair().unwrap();
        arrive(tx, theirs, Role::Probe);
        let mut ch = Channel::new(mine);
        ch.write(&Control::Probe { streams }).unwrap();
        let answer = ch.read(WAIT).unwrap();
        (ch, answer)
    }

    #[test]
    fn a_probe_is_measured_and_counted_and_a_transfer_passes_through() {
        let tmp = tempfile::tempdir().unwrap();
        let desk = ProbeDesk {
            dir: dest::open_dir(tmp.path()).unwrap(),
            path: tmp.path().to_path_buf(),
            quiet: true,
        };
        let (tx, accepted) = crossbeam_channel::unbounded();
        let incoming = incoming_answering_probes(accepted, desk).unwrap();

        // Out of range: refused, and it does not count.
        let (_, answer) = ask(&tx, 0);
        assert!(
            matches!(
                answer,
                Control::Error {
                    code: exit::USAGE,
                    ..
                }
            ),
            "{answer:?}"
        );

        let (mut ch, answer) = ask(&tx, 2);
        assert!(
            matches!(answer, Control::ProbeReady { write_rate: Some(r), .. } if r > 0),
            "{answer:?}"
        );
        for n in [3usize, 5] {
            let (mut mine, theirs) = Conn::pair().unwrap();
            arrive(&tx, theirs, Role::ProbeData);
            mine.write_all(&vec![1u8; n << 16]).unwrap();
            mine.shutdown_write().unwrap();
        }
        match ch.read(WAIT).unwrap() {
            Control::Probed { received, .. } => assert_eq!(received, 8 << 16),
            other => panic!("{other:?}"),
        }
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);

        // A sender's connections reach the transfer; probes after it are refused.
        let (_mine, theirs) = Conn::pair().unwrap();
        arrive(&tx, theirs, Role::Control);
        let (_, role) = incoming.recv_timeout(Duration::from_secs(60)).unwrap();
        assert_eq!(role, Role::Control);
        let (_, answer) = ask(&tx, 2);
        match answer {
            Control::Error { message, .. } => assert!(message.contains("sender"), "{message}"),
            other => panic!("{other:?}"),
        }
    }
}
