//! Drives the `handshake` state machines over any `Read + Write` (a TLS stream, a TCP
//! socket with a deadline, or an in-memory pipe in tests).
//!
//! This layer only moves the fixed-size messages and turns failures into the error the dialer
//! reports or the reason the listener logs. It holds no protocol logic of its own.
//!
//! Not here: sockets, TLS setup, choosing nonces (they are passed in), what an I/O error
//! means (see `deadline`).

use std::io::{self, Read, Write};

use super::deadline::{handshake_error, listener_io};
use super::handshake::{
    self, HandshakeError, PrefixOutcome, CLIENT_PREFIX_LEN, CLIENT_REST_LEN, LEN32,
    SERVER_PREFIX_LEN, SERVER_REST_LEN,
};
use super::{Role, TransportError, PROTOCOL_VERSION};

/// Most bytes the listener reads, after refusing another version, while waiting for the
/// dialer to close (closing with unread bytes would reset the connection and could destroy
/// our reply before the dialer reads it).
const DRAIN_LIMIT: usize = 64 * 1024;

/// Runs the dialer side; the connection's link key once the listener accepted us.
pub(super) fn dial<S: Read + Write>(
    io: &mut S,
    key: [u8; 32],
    role: Role,
    nonce_c: [u8; 32],
) -> Result<[u8; 32], TransportError> {
    let (state, hello) = handshake::Dialer::start(PROTOCOL_VERSION, key, role, nonce_c);
    send(io, &hello).map_err(handshake_error)?;
    let mut prefix = [0u8; SERVER_PREFIX_LEN];
    io.read_exact(&mut prefix).map_err(handshake_error)?;
    let state = state.handle_server_prefix(&prefix).map_err(dialer_error)?;
    let mut rest = [0u8; SERVER_REST_LEN];
    io.read_exact(&mut rest).map_err(handshake_error)?;
    let (state, proof_c) = state.handle_server_rest(&rest).map_err(dialer_error)?;
    send(io, &proof_c).map_err(handshake_error)?;
    let mut verdict = [0u8; 1];
    match io.read_exact(&mut verdict) {
        Ok(()) => {}
        // The listener closes instead of answering when it rejects us hard.
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            return Err(TransportError::AuthRejected)
        }
        Err(e) => return Err(handshake_error(e)),
    }
    state.handle_verdict(verdict[0]).map_err(dialer_error)
}

/// Runs the listener side; the dialer's role and the connection's link key when it proved
/// the secret, otherwise the reason to log.
pub(super) fn listen<S: Read + Write>(
    io: &mut S,
    key: [u8; 32],
    nonce_s: [u8; 32],
) -> Result<(Role, [u8; 32]), String> {
    let mut prefix = [0u8; CLIENT_PREFIX_LEN];
    io.read_exact(&mut prefix)
        .map_err(|e| listener_io("waiting for the hello", e))?;
    let state = match handshake::Listener::new(PROTOCOL_VERSION, key, nonce_s)
        .handle_client_prefix(&prefix)
    {
        Ok(PrefixOutcome::Continue(state)) => state,
        Ok(PrefixOutcome::VersionMismatch { reply, theirs }) => {
            // Best effort: the reason logged is the mismatch whatever happens here.
            if send(io, &reply).is_ok() {
                drain(io);
            }
            return Err(format!(
                "it speaks protocol version {theirs}, we speak {PROTOCOL_VERSION}"
            ));
        }
        Err(e) => return Err(listener_reason(e)),
    };
    let mut rest = [0u8; CLIENT_REST_LEN];
    io.read_exact(&mut rest)
        .map_err(|e| listener_io("reading the hello", e))?;
    let (state, reply) = state.handle_client_rest(&rest).map_err(listener_reason)?;
    send(io, &reply).map_err(|e| listener_io("sending our hello", e))?;
    let mut proof_c = [0u8; LEN32];
    io.read_exact(&mut proof_c).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => {
            "it closed before proving the secret (its ticket has another secret?)".to_string()
        }
        _ => listener_io("waiting for the proof", e),
    })?;
    let verdict = state.handle_client_proof(&proof_c);
    // Send the verdict even on rejection, so the dialer can say why it failed.
    let sent = send(io, &[verdict.reply]);
    let role = verdict.outcome.map_err(listener_reason)?;
    sent.map_err(|e| listener_io("sending the verdict", e))?;
    Ok((role, verdict.link))
}

fn send<S: Write>(io: &mut S, bytes: &[u8]) -> io::Result<()> {
    io.write_all(bytes)?;
    io.flush()
}

/// Reads and discards until the dialer closes, an error, the deadline or `DRAIN_LIMIT`.
fn drain<S: Read>(io: &mut S) {
    let mut scratch = [0u8; 4096];
    let mut total = 0;
    while total < DRAIN_LIMIT {
        match io.read(&mut scratch) {
            Ok(0) | Err(_) => return,
            Ok(n) => total += n,
        }
    }
}

fn dialer_error(e: HandshakeError) -> TransportError {
    match e {
        HandshakeError::VersionMismatch { theirs } => TransportError::PeerIncompatible {
            ours: PROTOCOL_VERSION,
            theirs,
        },
        HandshakeError::BadServerProof => TransportError::PeerUnauthenticated,
        HandshakeError::Rejected | HandshakeError::BadClientProof => TransportError::AuthRejected,
        HandshakeError::BadMagic => {
            TransportError::Handshake("the peer is not a haul receiver (unexpected reply)".into())
        }
        other => TransportError::Handshake(other.to_string()),
    }
}

fn listener_reason(e: HandshakeError) -> String {
    match e {
        HandshakeError::BadMagic => "not a haul connection (unexpected first bytes)".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;
    use std::thread;

    type Listened = Result<(Role, [u8; 32]), String>;

    fn pair_run(
        dial_key: [u8; 32],
        listen_key: [u8; 32],
    ) -> (Result<[u8; 32], TransportError>, Listened) {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let l = thread::spawn(move || listen(&mut b, listen_key, [5; 32]));
        let d = dial(&mut a, dial_key, Role::Control, [6; 32]);
        drop(a);
        (d, l.join().unwrap())
    }

    #[test]
    fn drives_both_sides_over_a_pipe() {
        let (d, l) = pair_run([1; 32], [1; 32]);
        let (role, link) = l.unwrap();
        assert_eq!(role, Role::Control);
        assert_eq!(d.unwrap(), link);
    }

    #[test]
    fn wrong_key_fails_on_both_sides() {
        let (d, l) = pair_run([1; 32], [2; 32]);
        assert!(
            matches!(d, Err(TransportError::PeerUnauthenticated)),
            "{d:?}"
        );
        assert!(l.unwrap_err().contains("before proving"));
    }

    #[test]
    fn listener_answers_other_version_and_dialer_reports_it() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let l = thread::spawn(move || listen(&mut b, [1; 32], [5; 32]));
        // A future dialer: version 9, and a longer hello than ours.
        let mut hello = b"HAUL\x09\x00".to_vec();
        hello.extend_from_slice(&[0u8; 100]);
        a.write_all(&hello).unwrap();
        let mut reply = [0u8; SERVER_PREFIX_LEN];
        a.read_exact(&mut reply).unwrap();
        assert_eq!(
            &reply[..],
            &[b"HAUL" as &[u8], &PROTOCOL_VERSION.to_le_bytes(), &[1]].concat()
        );
        drop(a);
        assert!(l.join().unwrap().unwrap_err().contains("version 9"));

        let (mut a, mut b) = UnixStream::pair().unwrap();
        let fake = thread::spawn(move || {
            let mut hello = [0u8; 39];
            b.read_exact(&mut hello).unwrap();
            b.write_all(b"HAUL\x09\x00\x01").unwrap();
        });
        let d = dial(&mut a, [1; 32], Role::Data, [6; 32]);
        fake.join().unwrap();
        assert!(matches!(
            d,
            Err(TransportError::PeerIncompatible {
                ours: PROTOCOL_VERSION,
                theirs: 9
            })
        ));
    }

    #[test]
    fn garbage_and_silence_are_reasons_not_panics() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        a.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        assert!(listen(&mut b, [1; 32], [5; 32])
            .unwrap_err()
            .contains("not a haul"));
        drop(a);
        let (a, mut b) = UnixStream::pair().unwrap();
        drop(a);
        assert!(listen(&mut b, [1; 32], [5; 32])
            .unwrap_err()
            .contains("closed"));
        // A dialer talking to something that closes at once.
        let (mut a, b) = UnixStream::pair().unwrap();
        drop(b);
        assert!(dial(&mut a, [1; 32], Role::Data, [6; 32]).is_err());
    }
}
