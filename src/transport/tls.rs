//! TLS 1.3 setup: the listener's throwaway certificate, both configs, certificate pinning by
//! fingerprint. The data path over them is `tls_stream`.
//!
//! Trust comes only from the ticket: the dialer accepts exactly the certificate whose BLAKE3
//! (over its DER) is the ticket's fingerprint, and still checks that the server signed the
//! handshake with that certificate's key. No CA, no names, no expiry: the certificate lives as
//! long as one `haul recv`.
//!
//! Every config is built on the *ring* provider explicitly (the crate enables no default
//! provider), TLS 1.3 only, AES-128-GCM first: it is the fastest suite on hardware AES and
//! strong enough for a transfer's lifetime.
//!
//! Not here: the secret-based authentication (see `handshake`), dialing and accepting.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, ServerConfig, SignatureScheme,
};

use super::TransportError;

/// The server name the dialer asks for; nobody checks it (the fingerprint is the identity).
pub(super) const SERVER_NAME: &str = "haul.invalid";

/// The listener's certificate and TLS configuration.
pub(super) struct ServerIdentity {
    /// rustls configuration carrying the certificate.
    pub config: Arc<ServerConfig>,
    /// BLAKE3 of the certificate's DER: what the ticket pins.
    pub fingerprint: [u8; 32],
}

fn provider() -> Arc<CryptoProvider> {
    let mut p = rustls::crypto::ring::default_provider();
    // Keep TLS 1.3 suites only, AES-128-GCM first (the client's order decides).
    p.cipher_suites.retain(|s| s.tls13().is_some());
    p.cipher_suites.sort_by_key(|s| match s.suite() {
        rustls::CipherSuite::TLS13_AES_128_GCM_SHA256 => 0,
        rustls::CipherSuite::TLS13_AES_256_GCM_SHA384 => 1,
        _ => 2,
    });
    Arc::new(p)
}

fn tls_err(what: &str, e: impl std::fmt::Display) -> TransportError {
    TransportError::Tls(format!("{what}: {e}"))
}

/// A fresh self-signed ECDSA P-256 certificate and the server config around it.
pub(super) fn server_identity() -> Result<ServerIdentity, TransportError> {
    let ck = rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_string()])
        .map_err(|e| tls_err("cannot create a certificate", e))?;
    let cert: CertificateDer<'static> = ck.cert.der().clone();
    let fingerprint = *blake3::hash(cert.as_ref()).as_bytes();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()));
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| tls_err("TLS setup failed", e))?
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .map_err(|e| tls_err("TLS setup failed", e))?;
    // Every connection is a fresh handshake; resumption tickets would only cost a round of
    // writes after the handshake.
    config.send_tls13_tickets = 0;
    // Once authenticated, records are ours (`record`): rustls hands over the secrets.
    config.enable_secret_extraction = true;
    Ok(ServerIdentity {
        config: Arc::new(config),
        fingerprint,
    })
}

/// A client config that trusts exactly the certificate with this fingerprint.
pub(super) fn client_config(fingerprint: [u8; 32]) -> Result<Arc<ClientConfig>, TransportError> {
    client_config_with(fingerprint, provider())
}

/// A client that offers only `suite` (tests: each suite our record layer runs).
#[cfg(test)]
pub(super) fn client_config_only(
    fingerprint: [u8; 32],
    suite: rustls::CipherSuite,
) -> Result<Arc<ClientConfig>, TransportError> {
    let mut p = (*provider()).clone();
    p.cipher_suites.retain(|s| s.suite() == suite);
    client_config_with(fingerprint, Arc::new(p))
}

fn client_config_with(
    fingerprint: [u8; 32],
    provider: Arc<CryptoProvider>,
) -> Result<Arc<ClientConfig>, TransportError> {
    let verifier = PinnedCert {
        fingerprint,
        algorithms: provider.signature_verification_algorithms,
    };
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| tls_err("TLS setup failed", e))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.resumption = rustls::client::Resumption::disabled();
    config.enable_sni = false;
    config.enable_secret_extraction = true;
    Ok(Arc::new(config))
}

/// The fixed server name as rustls wants it.
pub(super) fn server_name() -> Result<ServerName<'static>, TransportError> {
    ServerName::try_from(SERVER_NAME).map_err(|e| tls_err("bad server name", e))
}

/// Accepts only the end-entity certificate whose BLAKE3 is `fingerprint`.
#[derive(Debug)]
struct PinnedCert {
    fingerprint: [u8; 32],
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinnedCert {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if blake3::hash(end_entity.as_ref()).as_bytes() == &self.fingerprint {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        // Unreachable with a TLS 1.3-only config; refuse rather than trust.
        Err(rustls::Error::General("TLS 1.2 is not supported".into()))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::deadline::handshake_error;
    use std::io;

    #[test]
    fn identity_fingerprint_is_blake3_of_der() {
        let a = server_identity().unwrap();
        let b = server_identity().unwrap();
        assert_ne!(
            a.fingerprint, b.fingerprint,
            "each listener gets a fresh cert"
        );
        assert!(client_config(a.fingerprint).is_ok());
    }

    #[test]
    fn pinned_verifier_checks_fingerprint() {
        let cert = rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_string()]).unwrap();
        let der = cert.cert.der().clone();
        let v = PinnedCert {
            fingerprint: *blake3::hash(der.as_ref()).as_bytes(),
            algorithms: provider().signature_verification_algorithms,
        };
        let name = server_name().unwrap();
        assert!(v
            .verify_server_cert(&der, &[], &name, &[], UnixTime::now())
            .is_ok());
        let other = PinnedCert {
            fingerprint: [0; 32],
            ..v
        };
        let err = other
            .verify_server_cert(&der, &[], &name, &[], UnixTime::now())
            .unwrap_err();
        let mapped = handshake_error(io::Error::new(io::ErrorKind::InvalidData, err));
        assert!(mapped.to_string().contains("does not match the ticket"));
    }

    #[test]
    fn provider_is_tls13_aes128_first() {
        let p = provider();
        assert!(p.cipher_suites.iter().all(|s| s.tls13().is_some()));
        assert_eq!(
            p.cipher_suites[0].suite(),
            rustls::CipherSuite::TLS13_AES_128_GCM_SHA256
        );
    }
}
