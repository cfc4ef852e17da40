//! The HTTPS listener's TLS: the rustls configuration built from `TLS_CERT_FILE`, `TLS_KEY_FILE`
//! and `TLS_CLIENT_CA_FILE`, and its reload. It sits before the request path: the accept loop
//! (`server`) takes [`ServerTls::acceptor`] for each new connection on the HTTPS listener, and
//! `conn::handshake` runs the handshake under the connection's header deadline; then the
//! connection is served exactly like a plain one.
//!
//! Reload without dropping connections: the current configuration is an `Arc` swapped under a
//! lock, and each handshake takes the one current when it starts, so open connections keep the
//! certificate they were made with and new ones get the new one. [`watch`] checks the files on
//! SIGHUP and every `TLS_RELOAD_INTERVAL_MS`; a change is loaded only when the whole set is
//! usable (the key is the certificate's, the CA file holds a usable CA), so a rotation caught
//! half-written (the certificate replaced, its key not yet) keeps the old configuration, says so
//! in the log and `origin_tls_reloads_total{result="failed"}`, and is loaded at the next check.
//!
//! With `TLS_CLIENT_CA_FILE` every client must present a certificate chained to one of its CAs
//! (rustls' `WebPkiClientVerifier`); a client without one fails the handshake and never reaches
//! the router. Only HTTP/1.1 is offered (ALPN `http/1.1`), as on the plain listener.

use std::path::Path;
use std::sync::{Arc, RwLock};

use rustls::RootCertStore;
use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use secrecy::{ExposeSecret, SecretBox};
use sha2::{Digest, Sha256};
use tokio_rustls::TlsAcceptor;

use crate::metrics::Metrics;
use crate::settings::ListenerTls;
use crate::tls::{TlsError, certificates, private_key, read_file};

/// The HTTPS listener's current TLS configuration, and the files it comes from.
pub(crate) struct ServerTls {
    files: ListenerTls,
    current: RwLock<Loaded>,
    metrics: Arc<Metrics>,
}

/// One loaded configuration, with the digest of the files it was built from (the files hold a
/// private key: only their digest is kept to notice a change).
struct Loaded {
    config: Arc<ServerConfig>,
    digest: [u8; 32],
    /// The digest of the last files refused, so that files left broken are refused (logged,
    /// counted) once, not at every check.
    refused: Option<[u8; 32]>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("ServerTls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

/// What a check of the files found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reload {
    /// The files are as loaded: nothing to do.
    Unchanged,
    /// A new configuration serves new connections.
    Loaded,
    /// The files are the ones refused last time; the previous configuration still serves.
    StillRefused,
}

impl ServerTls {
    /// Reads the files and builds the configuration; any problem stops startup, naming the
    /// setting.
    pub(crate) fn load(files: ListenerTls, metrics: Arc<Metrics>) -> Result<Self, TlsError> {
        let material = Material::read(&files)?;
        let loaded = Loaded {
            config: material.config()?,
            digest: material.digest(),
            refused: None,
        };
        drop(material);
        Ok(Self {
            files,
            current: RwLock::new(loaded),
            metrics,
        })
    }

    /// The acceptor for a new connection: the configuration current now.
    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        let current = self.current.read().unwrap_or_else(|p| p.into_inner());
        TlsAcceptor::from(current.config.clone())
    }

    /// Reads the files again; loads them when they changed and are usable. On an error the
    /// current configuration stays.
    pub(crate) fn reload(&self) -> Result<Reload, TlsError> {
        let material = match Material::read(&self.files) {
            Ok(material) => material,
            Err(e) => {
                // Unreadable files (removed mid-rotation) have no digest: counted at each check.
                self.metrics.count_tls_reload("failed");
                return Err(e);
            }
        };
        let digest = material.digest();
        {
            let current = self.current.read().unwrap_or_else(|p| p.into_inner());
            if digest == current.digest {
                return Ok(Reload::Unchanged);
            }
            if current.refused == Some(digest) {
                return Ok(Reload::StillRefused);
            }
        }
        let built = material.config();
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        match built {
            Ok(config) => {
                *current = Loaded {
                    config,
                    digest,
                    refused: None,
                };
                self.metrics.count_tls_reload("loaded");
                Ok(Reload::Loaded)
            }
            Err(e) => {
                current.refused = Some(digest);
                self.metrics.count_tls_reload("failed");
                Err(e)
            }
        }
    }
}

/// Checks the files on SIGHUP and every `reload_interval` (never when it is zero) for as long as
/// it runs; the server aborts it when it stops.
pub(crate) async fn watch(tls: Arc<ServerTls>) {
    let interval = tls.files.reload_interval;
    #[cfg(unix)]
    let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(signal) => Some(signal),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP: TLS files are reloaded on change only");
            None
        }
    };
    let mut ticks = (!interval.is_zero()).then(|| {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks
    });
    loop {
        #[cfg(unix)]
        let hangup_received = async {
            match hangup.as_mut() {
                Some(signal) => signal.recv().await,
                None => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let hangup_received = std::future::pending::<Option<()>>();
        let tick = async {
            match ticks.as_mut() {
                Some(ticks) => ticks.tick().await,
                None => std::future::pending().await,
            }
        };
        let cause = tokio::select! {
            _ = hangup_received => "SIGHUP",
            _ = tick => "change",
        };
        // File reads and the key check: off the async workers.
        let checked = tls.clone();
        let result = match tokio::task::spawn_blocking(move || checked.reload()).await {
            Ok(result) => result,
            Err(e) => {
                tracing::error!(error = %e, "TLS reload check failed");
                continue;
            }
        };
        match result {
            Ok(Reload::Loaded) => tracing::info!(
                cause,
                cert_file = %tls.files.cert_file.display(),
                "TLS certificate reloaded: new connections get it, open ones keep theirs"
            ),
            Ok(Reload::Unchanged) if cause == "SIGHUP" => {
                tracing::info!("SIGHUP: the TLS files are unchanged")
            }
            Ok(Reload::StillRefused) if cause == "SIGHUP" => tracing::warn!(
                "SIGHUP: the TLS files are still the ones refused before: the listener keeps serving the previous certificate"
            ),
            Ok(Reload::Unchanged | Reload::StillRefused) => {}
            Err(e) => tracing::error!(
                cause,
                error = %e,
                detail = ?e,
                "TLS files not reloaded: the listener keeps serving the previous certificate"
            ),
        }
    }
}

/// The files' contents, read once per load or check.
struct Material<'a> {
    files: &'a ListenerTls,
    cert: Vec<u8>,
    key: SecretBox<Vec<u8>>,
    client_ca: Option<(&'a Path, Vec<u8>)>,
}

impl<'a> Material<'a> {
    fn read(files: &'a ListenerTls) -> Result<Self, TlsError> {
        Ok(Self {
            files,
            cert: read_file("TLS_CERT_FILE", &files.cert_file)?,
            key: SecretBox::new(Box::new(read_file("TLS_KEY_FILE", &files.key_file)?)),
            client_ca: files
                .client_ca_file
                .as_deref()
                .map(|path| read_file("TLS_CLIENT_CA_FILE", path).map(|pem| (path, pem)))
                .transpose()?,
        })
    }

    /// A digest of the three files together, to notice a change.
    fn digest(&self) -> [u8; 32] {
        let mut hash = Sha256::new();
        let ca = self.client_ca.as_ref().map_or(&[][..], |(_, pem)| pem);
        for part in [&self.cert[..], self.key.expose_secret(), ca] {
            hash.update((part.len() as u64).to_be_bytes());
            hash.update(part);
        }
        hash.finalize().into()
    }

    /// The server configuration these files make.
    fn config(&self) -> Result<Arc<ServerConfig>, TlsError> {
        let chain = certificates("TLS_CERT_FILE", &self.files.cert_file, &self.cert)?;
        let key = private_key(
            "TLS_KEY_FILE",
            &self.files.key_file,
            self.key.expose_secret(),
        )?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|source| TlsError::Refused {
                setting: "TLS_CERT_FILE",
                source,
            })?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some((path, pem)) => {
                let mut roots = RootCertStore::empty();
                for ca in certificates("TLS_CLIENT_CA_FILE", path, pem)? {
                    roots.add(ca).map_err(|source| TlsError::Refused {
                        setting: "TLS_CLIENT_CA_FILE",
                        source,
                    })?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(|e| TlsError::Refused {
                            setting: "TLS_CLIENT_CA_FILE",
                            source: rustls::Error::General(e.to_string()),
                        })?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        // Also checks that the key is the certificate's.
        let mut config =
            builder
                .with_single_cert(chain, key)
                .map_err(|source| TlsError::Refused {
                    setting: "TLS_KEY_FILE",
                    source,
                })?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn files(dir: &Path) -> ListenerTls {
        ListenerTls {
            listen_addr: "127.0.0.1:0".parse().expect("addr"),
            cert_file: dir.join("cert.pem"),
            key_file: dir.join("key.pem"),
            client_ca_file: None,
            reload_interval: Duration::ZERO,
        }
    }

    fn self_signed() -> (String, String) {
        let cert =
            rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("certificate");
        (cert.cert.pem(), cert.signing_key.serialize_pem())
    }

    #[test]
    fn a_key_that_is_not_the_certificates_is_refused_and_the_old_config_stays() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = files(dir.path());
        let (cert, key) = self_signed();
        std::fs::write(&files.cert_file, &cert).expect("write");
        std::fs::write(&files.key_file, &key).expect("write");
        let (metrics, _) = Metrics::new();
        let tls = ServerTls::load(files.clone(), Arc::new(metrics)).expect("loads");
        assert_eq!(tls.reload().expect("same files"), Reload::Unchanged);

        // Half a rotation: a new certificate beside the old key.
        let (other_cert, other_key) = self_signed();
        std::fs::write(&files.cert_file, &other_cert).expect("write");
        let before = Arc::as_ptr(&tls.current.read().expect("lock").config);
        let error = tls.reload().expect_err("mismatched key");
        assert!(error.to_string().contains("TLS_KEY_FILE"), "{error}");
        assert_eq!(
            before,
            Arc::as_ptr(&tls.current.read().expect("lock").config),
            "the previous configuration stays"
        );
        // The rest of the rotation.
        std::fs::write(&files.key_file, &other_key).expect("write");
        assert_eq!(tls.reload().expect("whole rotation"), Reload::Loaded);
        assert_ne!(
            before,
            Arc::as_ptr(&tls.current.read().expect("lock").config)
        );
    }

    #[test]
    fn startup_errors_name_the_setting_and_never_show_the_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = files(dir.path());
        let (metrics, _) = Metrics::new();
        let metrics = Arc::new(metrics);
        let error = ServerTls::load(files.clone(), metrics.clone()).expect_err("no files");
        assert!(error.to_string().contains("TLS_CERT_FILE"), "{error}");

        let (cert, key) = self_signed();
        std::fs::write(&files.cert_file, &key).expect("a key where the certificate goes");
        std::fs::write(&files.key_file, &key).expect("write");
        let error = ServerTls::load(files.clone(), metrics.clone()).expect_err("no certificate");
        assert!(
            matches!(
                error,
                TlsError::NoPem {
                    setting: "TLS_CERT_FILE",
                    ..
                }
            ),
            "{error:?}"
        );
        std::fs::write(&files.cert_file, &cert).expect("write");
        std::fs::write(&files.key_file, &cert).expect("a certificate where the key goes");
        let error = ServerTls::load(files.clone(), metrics.clone()).expect_err("no key");
        assert!(
            matches!(
                error,
                TlsError::NoPem {
                    setting: "TLS_KEY_FILE",
                    ..
                }
            ),
            "{error:?}"
        );

        std::fs::write(&files.key_file, &key).expect("write");
        let with_ca = ListenerTls {
            client_ca_file: Some(dir.path().join("ca.pem")),
            ..files
        };
        std::fs::write(dir.path().join("ca.pem"), "not a CA").expect("write");
        let error = ServerTls::load(with_ca, metrics).expect_err("no CA");
        assert!(error.to_string().contains("TLS_CLIENT_CA_FILE"), "{error}");
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
    }
}
