//! The cross-field checks of the settings, run once at startup after [`super::env`] has parsed
//! each variable: what no single declaration can say (a URL against a TLS mode, one timeout
//! against another, a list's entries).

use std::time::Duration;

use secrecy::SecretString;

use std::net::SocketAddr;

use super::{
    BreakerSettings, DatabaseTls, DatabaseTlsSettings, HttpSettings, ListenerTls,
    ListenerTlsSettings, RedisTlsSettings, SettingsError,
};

impl DatabaseTlsSettings {
    /// Checks the settings against the `sslmode` of `database_url`: with `DATABASE_TLS` set, a
    /// URL asking for less (`disable`, `allow`, `prefer`, or `require` under `verify-full`) is
    /// refused, and `DATABASE_CA_FILE` needs `DATABASE_TLS=verify-full`.
    fn check(&self, database_url: &str) -> Result<(), SettingsError> {
        if self.ca_file.is_some() && self.mode != Some(DatabaseTls::VerifyFull) {
            return Err(SettingsError::Invalid {
                name: "DATABASE_CA_FILE",
                reason: "is only used with DATABASE_TLS=verify-full".into(),
            });
        }
        let Some(mode) = self.mode else {
            return Ok(());
        };
        let url_mode = url_sslmode(database_url);
        let enough = matches!(
            (mode, url_mode.as_deref()),
            (_, None)
                | (DatabaseTls::VerifyFull, Some("verify-full"))
                | (
                    DatabaseTls::Require,
                    Some("require" | "verify-ca" | "verify-full")
                )
        );
        if enough {
            return Ok(());
        }
        Err(SettingsError::PlaintextRefused {
            name: "DATABASE_URL",
            reason: format!(
                "its sslmode={} is weaker than DATABASE_TLS={}",
                url_mode.unwrap_or_default(),
                match mode {
                    DatabaseTls::Require => "require",
                    DatabaseTls::VerifyFull => "verify-full",
                }
            ),
        })
    }
}

/// `DATABASE_URL` (required) with its TLS settings, checked against each other.
pub(super) fn database(
    url: Option<String>,
    tls: DatabaseTlsSettings,
) -> Result<(SecretString, DatabaseTlsSettings), SettingsError> {
    let url = url.ok_or(SettingsError::Missing("DATABASE_URL"))?;
    tls.check(&url)?;
    Ok((SecretString::from(url), tls))
}

/// The `sslmode` (or `ssl-mode`) query parameter of a Postgres URL, lowercased.
fn url_sslmode(url: &str) -> Option<String> {
    let (_, query) = url.split_once('?')?;
    let query = query.split('#').next().unwrap_or_default();
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        matches!(key, "sslmode" | "ssl-mode").then(|| value.to_ascii_lowercase())
    })
}

/// `REDIS_URLS` (required), split on commas and trimmed; each a `redis://` or `rediss://` URL.
pub(super) fn redis_urls(raw: Option<&str>) -> Result<Vec<String>, SettingsError> {
    let urls: Vec<String> = raw
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    if urls.is_empty() {
        return Err(SettingsError::Missing("REDIS_URLS"));
    }
    if !urls
        .iter()
        .all(|url| url.starts_with("redis://") || url.starts_with("rediss://"))
    {
        return Err(SettingsError::Invalid {
            name: "REDIS_URLS",
            reason: "each URL must start with redis:// or rediss://".into(),
        });
    }
    Ok(urls)
}

pub(super) fn check_breaker(breaker: &BreakerSettings) -> Result<(), SettingsError> {
    let invalid = |name, reason: &str| {
        Err(SettingsError::Invalid {
            name,
            reason: reason.into(),
        })
    };
    if breaker.failure_threshold == 0 {
        return invalid("REDLOCK_BREAKER_FAILURES", "must be at least 1");
    }
    if breaker.base_backoff.is_zero() || breaker.base_backoff > breaker.max_backoff {
        return invalid(
            "REDLOCK_BREAKER_BACKOFF_MS",
            "must be at least 1 and at most REDLOCK_BREAKER_MAX_BACKOFF_MS",
        );
    }
    if breaker.max_backoff > Duration::from_secs(3600) {
        return invalid("REDLOCK_BREAKER_MAX_BACKOFF_MS", "must be at most one hour");
    }
    Ok(())
}

pub(super) fn check_http(http: &HttpSettings) -> Result<(), SettingsError> {
    for (name, value) in [
        ("HTTP_HEADER_READ_TIMEOUT_MS", http.header_read_timeout),
        ("HTTP_BODY_READ_TIMEOUT_MS", http.body_read_timeout),
        ("HTTP_KEEPALIVE_TIMEOUT_SECS", http.keepalive_timeout),
    ] {
        if value.is_zero() {
            return Err(SettingsError::Invalid {
                name,
                reason: "must be above 0".into(),
            });
        }
    }
    if http.request_timeout <= http.body_read_timeout {
        return Err(SettingsError::Invalid {
            name: "HTTP_REQUEST_TIMEOUT_MS",
            reason: "must be above HTTP_BODY_READ_TIMEOUT_MS".into(),
        });
    }
    if !(1024..=1024 * 1024).contains(&http.max_header_bytes) {
        return Err(SettingsError::Invalid {
            name: "HTTP_MAX_HEADER_BYTES",
            reason: "must be between 1024 and 1048576".into(),
        });
    }
    Ok(())
}

/// Redis TLS rules: a client certificate comes with its key; once TLS is configured (a TLS file
/// or any `rediss://` URL) every URL must be `rediss://`; certificate checks cannot be turned
/// off (`#insecure`). URLs are named by index, never printed (they may carry passwords).
pub(super) fn check_redis_tls(
    urls: &[String],
    tls: &RedisTlsSettings,
) -> Result<(), SettingsError> {
    if tls.client_cert_file.is_some() != tls.client_key_file.is_some() {
        return Err(SettingsError::Invalid {
            name: "REDIS_CLIENT_CERT_FILE",
            reason: "REDIS_CLIENT_CERT_FILE and REDIS_CLIENT_KEY_FILE go together".into(),
        });
    }
    if let Some(index) = urls.iter().position(|url| url.ends_with("#insecure")) {
        return Err(SettingsError::PlaintextRefused {
            name: "REDIS_URLS",
            reason: format!("URL #{index} turns certificate verification off (#insecure)"),
        });
    }
    let tls_configured = tls.any_file() || urls.iter().any(|url| url.starts_with("rediss://"));
    if let Some(index) = urls.iter().position(|url| url.starts_with("redis://")) {
        if tls_configured {
            return Err(SettingsError::PlaintextRefused {
                name: "REDIS_URLS",
                reason: format!(
                    "URL #{index} is plaintext redis:// while TLS is configured; use rediss:// for every node"
                ),
            });
        }
    }
    Ok(())
}

/// The HTTPS listener: off without a certificate; a certificate needs its key (and the reverse),
/// client CAs need a certificate, and it cannot share the plain listener's address.
pub(super) fn listener_tls(
    raw: ListenerTlsSettings,
    listen_addr: SocketAddr,
) -> Result<Option<ListenerTls>, SettingsError> {
    let invalid = |name, reason: &str| SettingsError::Invalid {
        name,
        reason: reason.into(),
    };
    let (cert_file, key_file) = match (raw.cert_file, raw.key_file) {
        (Some(cert), Some(key)) => (cert, key),
        (None, None) if raw.client_ca_file.is_some() => {
            return Err(invalid(
                "TLS_CLIENT_CA_FILE",
                "needs TLS_CERT_FILE and TLS_KEY_FILE (the HTTPS listener is off without them)",
            ));
        }
        (None, None) => return Ok(None),
        (Some(_), None) | (None, Some(_)) => {
            return Err(invalid(
                "TLS_CERT_FILE",
                "TLS_CERT_FILE and TLS_KEY_FILE go together",
            ));
        }
    };
    let same_port = raw.listen_addr.port() != 0 && raw.listen_addr.port() == listen_addr.port();
    let overlapping = raw.listen_addr.ip() == listen_addr.ip()
        || raw.listen_addr.ip().is_unspecified()
        || listen_addr.ip().is_unspecified();
    if same_port && overlapping {
        return Err(invalid(
            "TLS_LISTEN_ADDR",
            "must differ from LISTEN_ADDR (the plain listener)",
        ));
    }
    Ok(Some(ListenerTls {
        listen_addr: raw.listen_addr,
        cert_file,
        key_file,
        client_ca_file: raw.client_ca_file,
        reload_interval: raw.reload_interval,
    }))
}
