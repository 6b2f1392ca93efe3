//! Transport: connected, authenticated byte streams between the two ends of a transfer.
//!
//! **Participants.** The *listener* (the side started over ssh, or `haul recv`) binds an
//! ephemeral port, creates a throwaway certificate and a random secret, and prints a
//! [`Ticket`]. The *dialer* holds the ticket and opens one control connection and N data
//! connections ([`connect`], [`connect_addr`]); the listener's accept loop
//! ([`Listener::spawn_acceptor`]) hands each authenticated one over with its [`Role`].
//!
//! **Goals.** Every connection is TLS 1.3 pinned to the ticket's certificate fingerprint (or
//! plain TCP when the dialer chooses not to encrypt), and on both kinds the dialer must prove
//! it knows the secret before a single byte reaches the caller (see [`handshake`]). Garbage,
//! scanners, stale tickets and silent sockets are refused one by one without disturbing the
//! transfer: handshakes are capped per source address, a newcomer evicts the oldest silent
//! one, and refusals are logged a few lines per 10 s, then counted. Data streams run at
//! GB/s: a TLS read takes up to 256 KiB of ciphertext per system call, which rustls
//! decrypts in place (`tls_stream`); TCP_NODELAY on, BBR where the kernel offers it
//! (`congestion`), socket buffers left to kernel autotuning.
//!
//! **Non-goals.** Framing, retries and resume live above this module; so does the policy of
//! whether plain connections are acceptable ([`Accepted::encrypted`] says which it was). No
//! certificate authorities, names or expiry: the ticket is the only root of trust.
//!
//! Layout: `congestion` (the algorithm per connection), `handshake` (sans-IO state machines), `auth` (drives them over a stream),
//! `admit` (which handshakes may run at once; the refusal log), `deadline`
//! (deadline-bounded handshake I/O and what its errors mean), `ticket`, `tls` (configs,
//! pinning), `tls_stream` (the TLS data path on rustls's unbuffered API) and `tls_wire`
//! (its buffers), `conn`, `listen`, `dial`, `tunnel` (connections carried by a
//! helper process such as `ssh -W`), `lane` (a local copy's in-process data stream), `sys`
//! (the only `unsafe`: getifaddrs and poll).

use std::fmt;

mod admit;
mod auth;
pub mod congestion;
mod conn;
mod deadline;
mod dial;
mod gate;
pub mod handshake;
pub mod lane;
mod listen;
pub mod record;
mod sys;
mod ticket;
mod tls;
mod tls_machine;
mod tls_stream;
mod tls_wire;
mod tunnel;

pub use conn::Conn;
pub use dial::{connect, connect_addr, connect_tunnel};
pub use gate::{Gate, Pay};
pub use listen::{Accepted, AcceptorHandle, Listener};
pub use sys::{Chrono, Delivery};
pub use ticket::{Secret, Ticket, MAX_TICKET_ADDRS};
pub use tunnel::Tunnel;

/// The version in every connection's hello; peers with another version are refused with
/// [`TransportError::PeerIncompatible`]. 2: every frame tagged with the link key, control
/// messages MACed, unit hashes over the segment table. 3: `Control::Keepalive` (pipe mode)
/// and `Control::Protect` (filter rules for `--delete`) change the control message enum.
/// 4: manifest entries carry extended attributes, items the `a` and `x` columns.
/// 5: a stream block's unit hash covers its BLAKE3 chaining value (`codec::tree`), not
/// its bytes, and stream blocks are a power of two. Also `Control::Chain` and
/// `Control::Replicas` (chain fan-out), and
/// `Control::Arrived` (files whose bytes all arrived: the sender forgets them).
/// 6: `Control::StreamStart` carries a chain (pipe-mode fan-out).
/// 7: a probe of a waiting receiver: roles [`Role::Probe`] and [`Role::ProbeData`],
/// `Control::Probe`, `Control::ProbeReady` and `Control::Probed`; and a relay sends
/// `Control::Replicas` as soon as a hop after it fails, not only before `Done` (a
/// version-6 relay took it mid-transfer for a broken hop).
/// 8: a file-mode receiver says `Control::Keepalive` while busy on an answer (a version-7
/// sender took it for the answer).
/// 9: connections prove a key derived from the ticket's secret (a hop ticket holds only
/// that key); `Chain` carries the sender's nonce (also to the last hop, without hops),
/// every receiver of a chain sends `Control::Proof` before `Done`, and a `Replica` carries
/// the hop's proof.
/// 10: an `Entry` carries `checksum` (`--checksum`: the sender's keyed hash of a regular
/// file's content, which the receiver compares with its own file's).
/// 11: `Finish` counts the entries the sender's walk could not read (`unlisted`), and a
/// `Summary` carries what the receiver resumed (`resumed_files`, `resumed_bytes`).
/// 12: a file-mode sender says `Control::Keepalive` while it works between requests (a
/// version-11 receiver took it for a protocol violation).
/// 13: a `Summary` carries `transferred_size` (the lengths of the files written, holes
/// included: `--stats`' "Total transferred file size"); `SyncOptions` in `Start` carries
/// rsync's transfer rules (`Rules`: `-u`, `--existing`, `--ignore-existing`, `--size-only`).
pub const PROTOCOL_VERSION: u16 = 13;

/// Which kind of connection this is within one transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The one control stream: manifest, needs/have, summary.
    Control,
    /// One of the data streams carrying blocks.
    Data,
    /// A probe's control stream (`haul probe --to TICKET`): asks a waiting receiver to
    /// measure, never to receive; kept apart from a transfer's control stream.
    Probe,
    /// One of a probe's streams: bytes to count, nothing else (`haul probe`).
    ProbeData,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Control => "control",
            Role::Data => "data",
            Role::Probe => "probe",
            Role::ProbeData => "probe data",
        })
    }
}

pub use crate::error::TransportError;

#[cfg(test)]
mod tests;
