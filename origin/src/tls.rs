//! TLS to the origin's dependencies, and the PEM files of every TLS setting. Redis: `rediss://`
//! URLs verified against `REDIS_CA_FILE` (or the system's roots), with an optional client
//! certificate for mutual TLS; this module reads those files and builds the `redis::Client` of
//! every node. Postgres: `DATABASE_TLS` and `DATABASE_CA_FILE` become the connection's `sslmode`
//! and `sslrootcert` (see [`crate::store::connect_options`]). The settings ([`crate::settings`])
//! have already refused any plaintext URL once TLS is configured; everything uses rustls with the
//! `ring` provider. The origin's own HTTPS listener (`server::tls`) reads its files with the
//! same helpers ([`read_file`], [`certificates`], [`private_key`]): PEM is parsed by
//! `rustls-pki-types`, so a wrong or damaged file fails at startup (or its reload is refused),
//! not at the first connection.

use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use secrecy::{ExposeSecret, SecretBox};

use crate::settings::RedisTlsSettings;

/// Why the TLS material cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file named by a setting cannot be read.
    #[error("cannot read {setting} ({path})")]
    Read {
        setting: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file holds no PEM certificate (or key) where one is required.
    #[error("{setting} ({path}) holds no PEM {what}")]
    NoPem {
        setting: &'static str,
        path: PathBuf,
        what: &'static str,
    },
    /// A PEM block of the file cannot be decoded.
    #[error("{setting} ({path}) holds a damaged PEM block")]
    BadPem {
        setting: &'static str,
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// rustls refused the material (e.g. the key is not the certificate's, or a CA certificate
    /// cannot be used as a trust anchor).
    #[error("{setting} cannot be used")]
    Refused {
        setting: &'static str,
        #[source]
        source: rustls::Error,
    },
    /// The Redis client refused a node's URL or the TLS material (index in `REDIS_URLS`; the
    /// URL itself is never printed, it may carry a password).
    #[error("REDIS_URLS #{index} cannot be used")]
    RedisClient {
        index: usize,
        #[source]
        source: redis::RedisError,
    },
}

/// The TLS material for Redis, read once at startup. Without any, `rediss://` URLs verify
/// against the system's roots.
#[derive(Default)]
pub struct RedisTls {
    /// PEM bundle of the CAs that may sign the nodes' certificates.
    root_cert: Option<Vec<u8>>,
    /// PEM client certificate chain and key (mutual TLS).
    client: Option<(Vec<u8>, SecretBox<Vec<u8>>)>,
}

impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("RedisTls")
            .field("root_cert", &self.root_cert.is_some())
            .field("client_cert", &self.client.is_some())
            .finish()
    }
}

impl RedisTls {
    /// Reads the files named in `settings`.
    pub fn load(settings: &RedisTlsSettings) -> Result<Self, TlsError> {
        // The Redis client takes PEM bytes: they are checked here, passed on as read.
        let root_cert = settings
            .ca_file
            .as_deref()
            .map(|path| {
                let pem = read_file("REDIS_CA_FILE", path)?;
                certificates("REDIS_CA_FILE", path, &pem)?;
                Ok::<_, TlsError>(pem)
            })
            .transpose()?;
        let client = match (&settings.client_cert_file, &settings.client_key_file) {
            (Some(cert), Some(key)) => {
                let cert_pem = read_file("REDIS_CLIENT_CERT_FILE", cert)?;
                certificates("REDIS_CLIENT_CERT_FILE", cert, &cert_pem)?;
                let key_pem = SecretBox::new(Box::new(read_file("REDIS_CLIENT_KEY_FILE", key)?));
                private_key("REDIS_CLIENT_KEY_FILE", key, key_pem.expose_secret())?;
                Some((cert_pem, key_pem))
            }
            // The settings refuse one without the other.
            _ => None,
        };
        Ok(Self { root_cert, client })
    }

    /// The client of node `index`: `rediss://` URLs get the CA bundle and client certificate
    /// (when configured); `redis://` URLs are plaintext (the settings refuse them when TLS is
    /// configured).
    pub fn client(&self, index: usize, url: &str) -> Result<redis::Client, TlsError> {
        let built = if url.starts_with("rediss://")
            && (self.root_cert.is_some() || self.client.is_some())
        {
            let certificates = redis::TlsCertificates {
                client_tls: self
                    .client
                    .as_ref()
                    .map(|(cert, key)| redis::ClientTlsConfig {
                        client_cert: cert.clone(),
                        client_key: key.expose_secret().clone(),
                    }),
                root_cert: self.root_cert.clone(),
            };
            redis::Client::build_with_tls(url, certificates)
        } else {
            redis::Client::open(url)
        };
        built.map_err(|source| TlsError::RedisClient { index, source })
    }

    /// One client per URL, in order.
    pub fn clients(&self, urls: &[String]) -> Result<Vec<redis::Client>, TlsError> {
        urls.iter()
            .enumerate()
            .map(|(index, url)| self.client(index, url))
            .collect()
    }
}

/// Makes `ring` the process's rustls provider (the one both Redis and Postgres connections use),
/// unless one is installed already. Idempotent.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race against another installer is fine: a provider is then installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The bytes of the file a setting names.
pub(crate) fn read_file(setting: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        setting,
        path: path.to_owned(),
        source,
    })
}

/// Every `CERTIFICATE` block of `pem` (other blocks are skipped); at least one.
pub(crate) fn certificates(
    setting: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::BadPem {
            setting,
            path: path.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoPem {
            setting,
            path: path.to_owned(),
            what: "certificate",
        });
    }
    Ok(certs)
}

/// The first private key of `pem` (`PRIVATE KEY`, `RSA PRIVATE KEY` or `EC PRIVATE KEY`).
pub(crate) fn private_key(
    setting: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|source| match source {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoPem {
            setting,
            path: path.to_owned(),
            what: "private key",
        },
        source => TlsError::BadPem {
            setting,
            path: path.to_owned(),
            source,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_without_pem_are_refused_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate").expect("write");
        let settings = RedisTlsSettings {
            ca_file: Some(junk),
            ..RedisTlsSettings::default()
        };
        let error = RedisTls::load(&settings).expect_err("junk CA");
        assert!(error.to_string().contains("REDIS_CA_FILE"), "{error}");

        let missing = RedisTlsSettings {
            ca_file: Some(dir.path().join("nope.pem")),
            ..RedisTlsSettings::default()
        };
        let error = RedisTls::load(&missing).expect_err("missing CA");
        assert!(matches!(error, TlsError::Read { .. }), "{error:?}");
    }

    #[test]
    fn a_bad_url_is_named_by_index_without_its_password() {
        let error = RedisTls::default()
            .client(3, "rediss://:hunter2@[bad")
            .expect_err("bad url");
        let shown = format!("{error} {error:?}");
        assert!(shown.contains("#3"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
