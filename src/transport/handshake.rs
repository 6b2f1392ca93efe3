//! The connection-authentication handshake as pure state machines over byte arrays.
//!
//! Every connection, TLS or plain, starts with this exchange. It proves that both ends hold
//! the ticket's secret `K` without sending it: each side MACs the other's fresh nonce with
//! keyed BLAKE3 (`MAC(x) = blake3::keyed_hash(K, x)`).
//!
//! ```text
//! dialer   → listener  "HAUL" | version u16 LE | role u8 | nonce_c [32]          (39 bytes)
//! listener → dialer    "HAUL" | version u16 LE | status u8                        (7 bytes)
//!                      then, only when status = 0: nonce_s [32] | proof_s [32]    (64 bytes)
//!                      proof_s = MAC("haul-server" | nonce_c | nonce_s)
//! dialer   → listener  proof_c = MAC("haul-client" | nonce_s | nonce_c | role)    (32 bytes)
//! listener → dialer    verdict u8: 0 accepted, 1 rejected (then the listener closes)
//! ```
//!
//! Versioning rule, fixed for every future version: the first 6 bytes the dialer sends
//! (magic, version) and the first 7 bytes the listener sends (magic, version, status) keep
//! this layout, so two different versions can always tell each other apart. A listener that
//! sees another version answers status 1 with its own version and stops there.
//!
//! After it, both sides hold a *link key* for this connection alone,
//! `derive_key("haul 2026 link key", K | nonce_c | nonce_s | role)`, which keys the tags and
//! MACs of every frame that follows (`protocol::seal`): the handshake authenticates only the
//! start of the stream, the link key everything after it.
//!
//! The dialer checks `proof_s` before it reveals `proof_c`, so a listener that does not know
//! `K` learns nothing it could replay. The two labels have equal length and every field is
//! fixed-size, so one side's proof can never be mistaken for the other's.
//!
//! Calling order, dialer: [`Dialer::start`] → [`DialerAwaitPrefix::handle_server_prefix`] →
//! [`DialerAwaitRest::handle_server_rest`] → [`DialerAwaitVerdict::handle_verdict`].
//! Listener: [`Listener::new`] → [`Listener::handle_client_prefix`] →
//! [`ListenerAwaitRest::handle_client_rest`] → [`ListenerAwaitProof::handle_client_proof`].
//! Each step consumes the previous state.
//!
//! Not here: sockets, timeouts, random numbers (nonces are passed in), TLS.

use super::Role;

/// Magic at the start of both hellos.
pub const MAGIC: [u8; 4] = *b"HAUL";
/// Length of the dialer's version prefix (magic, version).
pub const CLIENT_PREFIX_LEN: usize = 6;
/// Length of the rest of the dialer's hello (role, nonce_c).
pub const CLIENT_REST_LEN: usize = 33;
/// Length of the whole dialer hello.
pub const CLIENT_HELLO_LEN: usize = CLIENT_PREFIX_LEN + CLIENT_REST_LEN;
/// Length of the listener's prefix (magic, version, status).
pub const SERVER_PREFIX_LEN: usize = 7;
/// Length of the rest of the listener's hello (nonce_s, proof_s).
pub const SERVER_REST_LEN: usize = 64;
/// Length of a nonce, a proof and the key.
pub const LEN32: usize = 32;

const STATUS_OK: u8 = 0;
const STATUS_VERSION_MISMATCH: u8 = 1;
const VERDICT_ACCEPTED: u8 = 0;
const VERDICT_REJECTED: u8 = 1;
const SERVER_LABEL: &[u8; 11] = b"haul-server";
const CLIENT_LABEL: &[u8; 11] = b"haul-client";

/// Why a handshake failed, as precisely as the bytes allow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandshakeError {
    /// The peer's first bytes are not "HAUL": it is not a haul peer.
    BadMagic,
    /// The peer speaks another protocol version.
    VersionMismatch {
        /// The version the peer announced.
        theirs: u16,
    },
    /// The dialer announced a role byte we don't know.
    UnknownRole(u8),
    /// The listener sent a status byte we don't know.
    UnknownStatus(u8),
    /// The listener's proof is wrong: it does not know the secret.
    BadServerProof,
    /// The dialer's proof is wrong: it does not know the secret.
    BadClientProof,
    /// The listener rejected our proof.
    Rejected,
    /// The listener sent a verdict byte we don't know.
    UnknownVerdict(u8),
}

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeError::BadMagic => write!(f, "not a haul peer (bad magic)"),
            HandshakeError::VersionMismatch { theirs } => {
                write!(f, "peer speaks protocol version {theirs}")
            }
            HandshakeError::UnknownRole(b) => write!(f, "unknown stream role {b}"),
            HandshakeError::UnknownStatus(b) => write!(f, "unknown hello status {b}"),
            HandshakeError::BadServerProof => write!(f, "the listener's proof is wrong"),
            HandshakeError::BadClientProof => write!(f, "wrong secret (bad client proof)"),
            HandshakeError::Rejected => write!(f, "the listener rejected our proof"),
            HandshakeError::UnknownVerdict(b) => write!(f, "unknown verdict byte {b}"),
        }
    }
}

fn role_byte(role: Role) -> u8 {
    match role {
        Role::Control => 0,
        Role::Data => 1,
        Role::Probe => 2,
        Role::ProbeData => 3,
    }
}

fn role_from_byte(b: u8) -> Result<Role, HandshakeError> {
    match b {
        0 => Ok(Role::Control),
        1 => Ok(Role::Data),
        2 => Ok(Role::Probe),
        3 => Ok(Role::ProbeData),
        other => Err(HandshakeError::UnknownRole(other)),
    }
}

fn server_proof(key: &[u8; 32], nonce_c: &[u8; 32], nonce_s: &[u8; 32]) -> blake3::Hash {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(SERVER_LABEL).update(nonce_c).update(nonce_s);
    h.finalize()
}

fn client_proof(
    key: &[u8; 32],
    nonce_s: &[u8; 32],
    nonce_c: &[u8; 32],
    role: Role,
) -> blake3::Hash {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(CLIENT_LABEL)
        .update(nonce_s)
        .update(nonce_c)
        .update(&[role_byte(role)]);
    h.finalize()
}

/// The key of everything after the handshake on this connection: fresh (both nonces), bound
/// to the secret and to the role.
fn link_key(key: &[u8; 32], nonce_c: &[u8; 32], nonce_s: &[u8; 32], role: Role) -> [u8; 32] {
    let mut material = [0u8; 32 * 3 + 1];
    material[..32].copy_from_slice(key);
    material[32..64].copy_from_slice(nonce_c);
    material[64..96].copy_from_slice(nonce_s);
    material[96] = role_byte(role);
    blake3::derive_key("haul 2026 link key", &material)
}

/// Compares a received proof with the expected one in constant time
/// (`blake3::Hash`'s equality is constant-time).
fn proof_matches(expected: blake3::Hash, received: &[u8; 32]) -> bool {
    expected == blake3::Hash::from_bytes(*received)
}

fn check_magic_version(bytes: &[u8]) -> Result<u16, HandshakeError> {
    if bytes.get(..4) != Some(&MAGIC[..]) {
        return Err(HandshakeError::BadMagic);
    }
    match bytes.get(4..6) {
        Some(&[lo, hi]) => Ok(u16::from_le_bytes([lo, hi])),
        _ => Err(HandshakeError::BadMagic),
    }
}

fn split32(bytes: &[u8; 64]) -> ([u8; 32], [u8; 32]) {
    let mut a = [0u8; 32];
    let mut b = [0u8; 32];
    a.copy_from_slice(&bytes[..32]);
    b.copy_from_slice(&bytes[32..]);
    (a, b)
}

/// Dialer side, before anything was sent.
pub struct Dialer;

impl Dialer {
    /// Starts a handshake: returns the state and the hello to send (all 39 bytes at once).
    pub fn start(
        version: u16,
        key: [u8; 32],
        role: Role,
        nonce_c: [u8; 32],
    ) -> (DialerAwaitPrefix, [u8; CLIENT_HELLO_LEN]) {
        let mut hello = [0u8; CLIENT_HELLO_LEN];
        hello[..4].copy_from_slice(&MAGIC);
        hello[4..6].copy_from_slice(&version.to_le_bytes());
        hello[6] = role_byte(role);
        hello[7..].copy_from_slice(&nonce_c);
        let state = DialerAwaitPrefix {
            version,
            key,
            role,
            nonce_c,
        };
        (state, hello)
    }
}

/// Dialer side, waiting for the listener's 7-byte prefix.
pub struct DialerAwaitPrefix {
    version: u16,
    key: [u8; 32],
    role: Role,
    nonce_c: [u8; 32],
}

impl DialerAwaitPrefix {
    /// Checks magic, version and status. A mismatch is `VersionMismatch` with the peer's version.
    pub fn handle_server_prefix(
        self,
        prefix: &[u8; SERVER_PREFIX_LEN],
    ) -> Result<DialerAwaitRest, HandshakeError> {
        let theirs = check_magic_version(prefix)?;
        match prefix[6] {
            STATUS_OK if theirs == self.version => Ok(DialerAwaitRest { inner: self }),
            STATUS_OK | STATUS_VERSION_MISMATCH => Err(HandshakeError::VersionMismatch { theirs }),
            other => Err(HandshakeError::UnknownStatus(other)),
        }
    }
}

/// Dialer side, waiting for the listener's nonce and proof.
pub struct DialerAwaitRest {
    inner: DialerAwaitPrefix,
}

impl DialerAwaitRest {
    /// Verifies `proof_s`; on success returns the state and `proof_c` to send.
    pub fn handle_server_rest(
        self,
        rest: &[u8; SERVER_REST_LEN],
    ) -> Result<(DialerAwaitVerdict, [u8; LEN32]), HandshakeError> {
        let s = self.inner;
        let (nonce_s, proof_s) = split32(rest);
        if !proof_matches(server_proof(&s.key, &s.nonce_c, &nonce_s), &proof_s) {
            return Err(HandshakeError::BadServerProof);
        }
        let proof_c = client_proof(&s.key, &nonce_s, &s.nonce_c, s.role);
        let link = link_key(&s.key, &s.nonce_c, &nonce_s, s.role);
        Ok((DialerAwaitVerdict { link }, *proof_c.as_bytes()))
    }
}

/// Dialer side, waiting for the one-byte verdict.
pub struct DialerAwaitVerdict {
    link: [u8; 32],
}

impl DialerAwaitVerdict {
    /// The connection's link key when the listener accepted us.
    pub fn handle_verdict(self, verdict: u8) -> Result<[u8; 32], HandshakeError> {
        match verdict {
            VERDICT_ACCEPTED => Ok(self.link),
            VERDICT_REJECTED => Err(HandshakeError::Rejected),
            other => Err(HandshakeError::UnknownVerdict(other)),
        }
    }
}

/// Listener side, before anything was received.
pub struct Listener {
    version: u16,
    key: [u8; 32],
    nonce_s: [u8; 32],
}

/// What the listener does after reading the dialer's 6-byte prefix.
pub enum PrefixOutcome {
    /// Same version: read the rest of the hello next.
    Continue(ListenerAwaitRest),
    /// Another version: send `reply`, then close. `theirs` is the dialer's version.
    VersionMismatch {
        /// The 7 bytes to send before closing.
        reply: [u8; SERVER_PREFIX_LEN],
        /// The dialer's version.
        theirs: u16,
    },
}

impl Listener {
    /// A listener handshake with our `version`, the secret `key` and a fresh `nonce_s`.
    pub fn new(version: u16, key: [u8; 32], nonce_s: [u8; 32]) -> Listener {
        Listener {
            version,
            key,
            nonce_s,
        }
    }

    /// Checks magic and version. Bad magic is an error with nothing to send.
    pub fn handle_client_prefix(
        self,
        prefix: &[u8; CLIENT_PREFIX_LEN],
    ) -> Result<PrefixOutcome, HandshakeError> {
        let theirs = check_magic_version(prefix)?;
        if theirs != self.version {
            let mut reply = [0u8; SERVER_PREFIX_LEN];
            reply[..4].copy_from_slice(&MAGIC);
            reply[4..6].copy_from_slice(&self.version.to_le_bytes());
            reply[6] = STATUS_VERSION_MISMATCH;
            return Ok(PrefixOutcome::VersionMismatch { reply, theirs });
        }
        Ok(PrefixOutcome::Continue(ListenerAwaitRest { inner: self }))
    }
}

/// Listener side, waiting for the role and nonce.
pub struct ListenerAwaitRest {
    inner: Listener,
}

impl ListenerAwaitRest {
    /// Parses role and `nonce_c`; returns the state and the 71 bytes to send
    /// (prefix with status 0, `nonce_s`, `proof_s`).
    pub fn handle_client_rest(
        self,
        rest: &[u8; CLIENT_REST_LEN],
    ) -> Result<
        (
            ListenerAwaitProof,
            [u8; SERVER_PREFIX_LEN + SERVER_REST_LEN],
        ),
        HandshakeError,
    > {
        let s = self.inner;
        let role = role_from_byte(rest[0])?;
        let mut nonce_c = [0u8; 32];
        nonce_c.copy_from_slice(&rest[1..]);
        let proof_s = server_proof(&s.key, &nonce_c, &s.nonce_s);
        let mut reply = [0u8; SERVER_PREFIX_LEN + SERVER_REST_LEN];
        reply[..4].copy_from_slice(&MAGIC);
        reply[4..6].copy_from_slice(&s.version.to_le_bytes());
        reply[6] = STATUS_OK;
        reply[7..39].copy_from_slice(&s.nonce_s);
        reply[39..].copy_from_slice(proof_s.as_bytes());
        let expected = client_proof(&s.key, &s.nonce_s, &nonce_c, role);
        let link = link_key(&s.key, &nonce_c, &s.nonce_s, role);
        Ok((
            ListenerAwaitProof {
                role,
                expected,
                link,
            },
            reply,
        ))
    }
}

/// Listener side, waiting for `proof_c`.
pub struct ListenerAwaitProof {
    role: Role,
    expected: blake3::Hash,
    link: [u8; 32],
}

/// The listener's decision on `proof_c`.
pub struct Verdict {
    /// The byte to send to the dialer.
    pub reply: u8,
    /// The dialer's role when accepted; why not otherwise.
    pub outcome: Result<Role, HandshakeError>,
    /// The connection's link key (all zeros when rejected).
    pub link: [u8; 32],
}

impl ListenerAwaitProof {
    /// Checks `proof_c` in constant time.
    pub fn handle_client_proof(self, proof_c: &[u8; LEN32]) -> Verdict {
        if proof_matches(self.expected, proof_c) {
            Verdict {
                reply: VERDICT_ACCEPTED,
                outcome: Ok(self.role),
                link: self.link,
            }
        } else {
            Verdict {
                reply: VERDICT_REJECTED,
                outcome: Err(HandshakeError::BadClientProof),
                link: [0; 32],
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: u16 = 1;
    const K: [u8; 32] = [7; 32];
    const NC: [u8; 32] = [1; 32];
    const NS: [u8; 32] = [2; 32];

    fn same_version(out: Result<PrefixOutcome, HandshakeError>) -> ListenerAwaitRest {
        match out {
            Ok(PrefixOutcome::Continue(l)) => l,
            _ => panic!("expected the same version"),
        }
    }

    type DialerOutcome = Result<[u8; 32], HandshakeError>;

    /// Runs both sides in memory; returns the listener's outcome (`None` when the dialer
    /// gave up before sending its proof) and the dialer's.
    fn run(
        dialer_key: [u8; 32],
        listener_key: [u8; 32],
        role: Role,
    ) -> (Option<Result<Role, HandshakeError>>, DialerOutcome) {
        let (d, hello) = Dialer::start(V, dialer_key, role, NC);
        let l = Listener::new(V, listener_key, NS);
        let prefix: [u8; CLIENT_PREFIX_LEN] = hello[..6].try_into().unwrap();
        let rest: [u8; CLIENT_REST_LEN] = hello[6..].try_into().unwrap();
        let l = same_version(l.handle_client_prefix(&prefix));
        let (l, reply) = l.handle_client_rest(&rest).unwrap();
        let d = d
            .handle_server_prefix(reply[..7].try_into().unwrap())
            .unwrap();
        let (d, proof_c) = match d.handle_server_rest(reply[7..].try_into().unwrap()) {
            Ok(x) => x,
            Err(e) => return (None, Err(e)),
        };
        let verdict = l.handle_client_proof(&proof_c);
        let dialer = d.handle_verdict(verdict.reply);
        if let Ok(link) = dialer {
            assert_eq!(link, verdict.link, "both sides derive the same link key");
        }
        (Some(verdict.outcome), dialer)
    }

    #[test]
    fn same_key_accepts_with_role() {
        let data = link_key(&K, &NC, &NS, Role::Data);
        let control = link_key(&K, &NC, &NS, Role::Control);
        assert_eq!(run(K, K, Role::Data), (Some(Ok(Role::Data)), Ok(data)));
        assert_eq!(
            run(K, K, Role::Control),
            (Some(Ok(Role::Control)), Ok(control))
        );
        for role in [Role::Probe, Role::ProbeData] {
            let key = link_key(&K, &NC, &NS, role);
            assert_eq!(run(K, K, role), (Some(Ok(role)), Ok(key)));
            assert!(key != data && key != control);
        }
        // Fresh per connection and per role, and never the secret itself.
        assert_ne!(data, control);
        assert_ne!(data, link_key(&K, &NC, &[3; 32], Role::Data));
        assert_ne!(data, K);
    }

    #[test]
    fn dialer_detects_listener_without_the_key() {
        let (listener, dialer) = run([9; 32], K, Role::Data);
        assert_eq!(listener, None, "the dialer must not reveal a proof");
        assert_eq!(dialer, Err(HandshakeError::BadServerProof));
    }

    #[test]
    fn listener_rejects_forged_client_proof() {
        let (_, hello) = Dialer::start(V, K, Role::Data, NC);
        let l = same_version(
            Listener::new(V, K, NS).handle_client_prefix(hello[..6].try_into().unwrap()),
        );
        let (l, reply) = l
            .handle_client_rest(hello[6..].try_into().unwrap())
            .unwrap();
        // Replaying the server's own proof must not work as a client proof.
        let v = l.handle_client_proof(reply[39..].try_into().unwrap());
        assert_eq!(v.reply, VERDICT_REJECTED);
        assert_eq!(v.outcome, Err(HandshakeError::BadClientProof));
        assert_eq!(
            DialerAwaitVerdict { link: [0; 32] }.handle_verdict(v.reply),
            Err(HandshakeError::Rejected)
        );
    }

    #[test]
    fn role_is_bound_into_the_client_proof() {
        let (d, hello) = Dialer::start(V, K, Role::Control, NC);
        let mut tampered = hello;
        tampered[6] = role_byte(Role::Data);
        let l = same_version(
            Listener::new(V, K, NS).handle_client_prefix(tampered[..6].try_into().unwrap()),
        );
        let (l, reply) = l
            .handle_client_rest(tampered[6..].try_into().unwrap())
            .unwrap();
        let d = d
            .handle_server_prefix(reply[..7].try_into().unwrap())
            .unwrap();
        let (_, proof_c) = d
            .handle_server_rest(reply[7..].try_into().unwrap())
            .unwrap();
        assert!(l.handle_client_proof(&proof_c).outcome.is_err());
    }

    #[test]
    fn version_mismatch_both_directions() {
        let (_, hello) = Dialer::start(2, K, Role::Data, NC);
        let out = Listener::new(V, K, NS)
            .handle_client_prefix(hello[..6].try_into().unwrap())
            .unwrap();
        let reply = match out {
            PrefixOutcome::VersionMismatch { reply, theirs } => {
                assert_eq!(theirs, 2);
                reply
            }
            PrefixOutcome::Continue(_) => panic!("must refuse"),
        };
        let (d, _) = Dialer::start(2, K, Role::Data, NC);
        assert_eq!(
            d.handle_server_prefix(&reply).err(),
            Some(HandshakeError::VersionMismatch { theirs: 1 })
        );
        // Status 0 with another version is a mismatch too.
        let (d, _) = Dialer::start(V, K, Role::Data, NC);
        let odd = *b"HAUL\x05\x00\x00";
        assert_eq!(
            d.handle_server_prefix(&odd).err(),
            Some(HandshakeError::VersionMismatch { theirs: 5 })
        );
    }

    #[test]
    fn garbage_is_refused() {
        let l = Listener::new(V, K, NS);
        assert_eq!(
            l.handle_client_prefix(b"GET / ").err(),
            Some(HandshakeError::BadMagic)
        );
        let mut hello = Dialer::start(V, K, Role::Data, NC).1;
        hello[6] = 9;
        let l = same_version(
            Listener::new(V, K, NS).handle_client_prefix(hello[..6].try_into().unwrap()),
        );
        assert_eq!(
            l.handle_client_rest(hello[6..].try_into().unwrap()).err(),
            Some(HandshakeError::UnknownRole(9))
        );
        let (d, _) = Dialer::start(V, K, Role::Data, NC);
        assert_eq!(
            d.handle_server_prefix(b"HAUL\x01\x00\x07").err(),
            Some(HandshakeError::UnknownStatus(7))
        );
        assert_eq!(
            DialerAwaitVerdict { link: [0; 32] }.handle_verdict(200),
            Err(HandshakeError::UnknownVerdict(200))
        );
    }

    #[test]
    fn hello_layout_is_fixed() {
        let (_, hello) = Dialer::start(0x0201, K, Role::Data, NC);
        assert_eq!(&hello[..4], b"HAUL");
        assert_eq!(&hello[4..6], &[0x01, 0x02]);
        assert_eq!(hello[6], 1);
        assert_eq!(&hello[7..], &NC);
    }
}
