//! The control connection of the sender, re-dialed when it drops: a new one starts with
//! Start and repeats the request in progress (the receiver answers repeats from its
//! cache, so nothing is applied twice).

use std::time::Duration;

use super::dial::{backoff, gave_up};
use crate::error::{Error, Result};
use crate::progress::Counters;
use crate::protocol::{Control, Item, Replica};
use crate::session::{is_tick, Channel};
use crate::transport::{Conn, Role, TransportError};

/// What [`Link::poll`] found.
pub(super) enum Polled {
    /// A message.
    Msg(Control),
    /// Nothing in time.
    Nothing,
    /// The connection dropped and a new one (opened with Start again) replaced it: say
    /// again what the new one must know.
    Reconnected,
}

/// The control connection, re-dialed when it drops: a new one starts with Start and
/// repeats the request in progress (the receiver answers repeats from its cache).
pub(super) struct Link<'a> {
    dial: &'a (dyn Fn(Role) -> Result<Conn> + Sync),
    start: Control,
    chan: Channel,
    retries: u32,
    counters: &'a Counters,
    /// Where the receiver's `Items` go (printed for `-v`/`-i`).
    on_items: Option<&'a (dyn Fn(Vec<Item>) + Sync)>,
    /// Files the receiver said arrived whole (`Control::Arrived`), not yet taken.
    arrived: Vec<u64>,
    /// A chain fan-out: what the receiver said became of the receivers after it.
    pub(super) replicas: Vec<Replica>,
}

impl<'a> Link<'a> {
    pub(super) fn open(
        dial: &'a (dyn Fn(Role) -> Result<Conn> + Sync),
        start: Control,
        retries: u32,
        counters: &'a Counters,
    ) -> Result<Link<'a>> {
        let first = || {
            dial(Role::Control).and_then(|c| {
                let mut chan = Channel::new(c);
                chan.write(&start).map(|()| chan)
            })
        };
        let mut chan = first();
        // A listener under a flood may drop us before the handshake ends (exit 8 or 5 on
        // the first try); retry those, not a refusal of the ticket or nobody listening.
        for attempt in 1..=retries {
            match chan {
                Err(Error::Transport(TransportError::Handshake(_) | TransportError::Io(_))) => {
                    std::thread::sleep(backoff(attempt));
                    chan = first();
                }
                _ => break,
            }
        }
        let chan = chan?;
        Ok(Link {
            dial,
            start,
            chan,
            retries,
            counters,
            on_items: None,
            arrived: Vec::new(),
            replicas: Vec::new(),
        })
    }

    /// Hands the receiver's `Items` to `f` (they may precede any answer).
    pub(super) fn on_items(&mut self, f: &'a (dyn Fn(Vec<Item>) + Sync)) {
        self.on_items = Some(f);
    }

    /// Files the receiver said arrived whole since the last call: they will never be
    /// asked for again.
    pub(super) fn take_arrived(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.arrived)
    }

    /// The next message that is not `Items` (those go to `on_items`) or `Arrived` (kept for
    /// `take_arrived`).
    fn read_answer(&mut self) -> Result<Control> {
        loop {
            match self.chan.read(None)? {
                Control::Items(items) => {
                    if let Some(f) = self.on_items {
                        f(items);
                    }
                }
                Control::Arrived(ids) => self.arrived.extend(ids),
                Control::Replicas(r) => self.replicas = r,
                other => return Ok(other),
            }
        }
    }

    /// Re-dials after a failure, with backoff.
    pub(super) fn reconnect(&mut self, why: &Error) -> Result<()> {
        let mut last = None;
        for attempt in 0..self.retries {
            std::thread::sleep(backoff(attempt));
            match (self.dial)(Role::Control).and_then(|c| {
                let mut chan = Channel::new(c);
                chan.write(&self.start).map(|()| chan)
            }) {
                Ok(c) => {
                    crate::progress::warn(&format!("control stream reconnected ({why})"));
                    Counters::add(&self.counters.reconnects, 1);
                    self.chan = c;
                    return Ok(());
                }
                // Something else answers at the receiver's address now (it was restarted,
                // or its port was reused): our receiver is gone, which is a lost connection,
                // not a wrong ticket. Retrying will not help.
                Err(e @ Error::Transport(TransportError::AuthRejected))
                | Err(e @ Error::Transport(TransportError::PeerUnauthenticated)) => {
                    return Err(gave_up(why, Some(e)))
                }
                Err(e) => last = Some(e),
            }
        }
        // Report the loss (a network failure), with why re-dialing did not help.
        Err(gave_up(why, last))
    }

    /// Sends `msg` and reads the answer, reconnecting and repeating as needed.
    pub(super) fn request(&mut self, msg: &Control) -> Result<Control> {
        let mut attempts = 0;
        loop {
            let r = self.chan.write(msg).and_then(|()| self.read_answer());
            match r {
                Ok(reply) => return Ok(reply),
                Err(e @ Error::Transport(_)) if attempts < self.retries => {
                    attempts += 1;
                    self.reconnect(&e)?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends `msg`, which has no answer, reconnecting as needed.
    pub(super) fn tell(&mut self, msg: &Control) -> Result<()> {
        let mut attempts = 0;
        loop {
            match self.chan.write(msg) {
                Ok(()) => return Ok(()),
                Err(e @ Error::Transport(_)) if attempts < self.retries => {
                    attempts += 1;
                    self.reconnect(&e)?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits up to `timeout` for the next message.
    pub(super) fn poll(&mut self, timeout: Duration) -> Result<Polled> {
        match self.chan.read(Some(timeout)) {
            Ok(m) => Ok(Polled::Msg(m)),
            Err(e) if is_tick(&e) => Ok(Polled::Nothing),
            Err(e @ Error::Transport(_)) => {
                self.reconnect(&e)?;
                Ok(Polled::Reconnected)
            }
            Err(e) => Err(e),
        }
    }

    /// After a stream failed: did the receiver send an Error explaining why?
    pub(super) fn remote_reason(&mut self) -> Option<Error> {
        match self.chan.read(Some(Duration::from_secs(2))) {
            Ok(Control::Error { code, message }) => Some(Error::Remote {
                side: "receiver",
                message,
                code,
            }),
            _ => None,
        }
    }

    pub(super) fn tell_error(&mut self, e: &Error) {
        let _ = self.chan.write(&Control::Error {
            code: e.exit_code(),
            message: e.to_string(),
        });
    }

    pub(super) fn close(&mut self) {
        let _ = self.chan.shutdown_write();
    }
}
