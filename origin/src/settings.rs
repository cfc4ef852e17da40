//! Typed configuration, read once from the environment at startup. Every variable is documented
//! in docs/configuration.md's table; secrets are wrapped so they never print.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use secrecy::SecretString;
use shared::{BearerTokens, SecretRing, SecretsError};

/// Why the environment does not describe a runnable origin.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("environment variable {0} is required")]
    Missing(&'static str),
    #[error("environment variable {name} is invalid: {reason}")]
    Invalid { name: &'static str, reason: String },
    /// TLS is configured, yet this variable would connect in plaintext (or without checking
    /// the server's certificate).
    #[error("environment variable {name} is refused: {reason}")]
    PlaintextRefused { name: &'static str, reason: String },
    #[error("{list} / {single}: {source}")]
    Secrets {
        list: &'static str,
        single: &'static str,
        source: SecretsError,
    },
}

/// Shortest accepted edge secret or admin token (shared with the edge).
pub use shared::secrets::MIN_SECRET_LEN;

/// The whole origin configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `DATABASE_URL`: Postgres connection string.
    pub database_url: SecretString,
    /// `DATABASE_TLS` / `DATABASE_CA_FILE`: TLS required for Postgres, and how verified.
    pub database_tls: DatabaseTlsSettings,
    /// `REDIS_URLS`: comma-separated `redis://` or `rediss://` URLs, one per independent
    /// Redlock node.
    pub redis_urls: Vec<String>,
    /// `REDIS_CA_FILE`, `REDIS_CLIENT_CERT_FILE`, `REDIS_CLIENT_KEY_FILE`: TLS material for
    /// `rediss://` nodes.
    pub redis_tls: RedisTlsSettings,
    /// `REDLOCK_BREAKER_*`: the per-node circuit breaker of the lock.
    pub redlock_breaker: BreakerSettings,
    /// `REDLOCK_QUORUM_LOSS_GRACE_MS` (default 1000, at most one hour): once fewer than a
    /// quorum of Redis nodes have been unable to vote for this long, purchases needing the lock
    /// answer 503 at once instead of retrying until their deadline.
    pub redlock_quorum_loss_grace: Duration,
    /// `LISTEN_ADDR`: where the HTTP server binds (default `127.0.0.1:8080`; port 0 = any).
    pub listen_addr: SocketAddr,
    /// `EDGE_SHARED_SECRETS` (`kid:secret,…`, first = current) or `EDGE_SHARED_SECRET` (one
    /// secret, key id `default`): the keys edge signatures are verified with.
    pub edge_secrets: SecretRing,
    /// `ACCEPT_SIGNATURE_V1` (default `true`): whether v1 signatures (no key id, ambiguous user/key
    /// boundary) are still accepted; `false` once every edge signs v2.
    pub accept_signature_v1: bool,
    /// `ADMIN_TOKENS` (`token,…`) or `ADMIN_TOKEN`: the bearer tokens of the admin API.
    pub admin_tokens: BearerTokens,
    /// `REDIS_KEY_PREFIX` (default `flashgate`): namespace of every Redis key of this deployment.
    pub redis_key_prefix: String,
    /// `RUN_MIGRATIONS` (default `true`): apply `origin/migrations` at startup.
    pub run_migrations: bool,
    /// `DB_MAX_CONNECTIONS` (default 16).
    pub db_max_connections: u32,
    /// `DB_ACQUIRE_TIMEOUT_MS` (default 2000): waiting longer for a connection answers 503.
    pub db_acquire_timeout: Duration,
    /// `DB_READ_MAX_CONNECTIONS` (default a quarter of `DB_MAX_CONNECTIONS`, at least 1; below
    /// it): how many pool connections public reads (`GET /v1/skus/{sku}`) may hold at once; the
    /// rest stay for purchases and the admin API.
    pub db_read_max_connections: u32,
    /// `IDEMPOTENCY_RETENTION_HOURS` (default 24, minimum 24): how long stored outcomes replay.
    pub idempotency_retention: Duration,
    /// `RECONCILE_INTERVAL_SECS` (default 60, 0 = off): how often the server reconciles.
    pub reconcile_interval: Duration,
    /// `LOG_HASH_KEY` (optional, at least 16 characters): key of the pseudonyms that stand for
    /// user ids and idempotency keys in logs. Unset: a random key per process (pseudonyms then
    /// differ between processes and restarts). Give every origin the same one to follow a shopper
    /// across replicas.
    pub log_hash_key: Option<SecretString>,
    /// Purchase pipeline tunables.
    pub purchase: PurchaseSettings,
    /// Connection and request limits of the HTTP server.
    pub http: HttpSettings,
}

/// Limits of the HTTP server: what one client may hold and for how long (see `server`).
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// `HTTP_MAX_CONNECTIONS` (default 4096): open connections served at once. At the cap the
    /// origin closes idle keep-alive connections to make room; otherwise new connections wait in
    /// the listen backlog. Keep `ulimit -n` above it.
    pub max_connections: usize,
    /// `HTTP_HEADER_READ_TIMEOUT_MS` (default 10000): a request head must arrive whole within
    /// this time (from the connection's accept, or from its first byte on a kept-alive
    /// connection); otherwise the connection is closed without an answer.
    pub header_read_timeout: Duration,
    /// `HTTP_BODY_READ_TIMEOUT_MS` (default 10000): a request body must arrive whole within this
    /// time after its head; otherwise 408 `request_timeout`.
    pub body_read_timeout: Duration,
    /// `HTTP_REQUEST_TIMEOUT_MS` (default 30000): a request not answered within this time
    /// answers 503 `unavailable` (a dependency hung); must exceed the body read timeout.
    pub request_timeout: Duration,
    /// `HTTP_KEEPALIVE_TIMEOUT_SECS` (default 960): an idle keep-alive connection is closed after
    /// this long — longer than Cloudflare's 900 s proxy idle timeout, so the edge never reuses a
    /// connection the origin has just closed.
    pub keepalive_timeout: Duration,
    /// `HTTP_MAX_HEADER_BYTES` (default 16384): request header fields (names + values) above
    /// this answer 431 `headers_too_large`. A head above twice this, or with more than 100
    /// fields, is refused by the HTTP parser itself with a bare 431 (no body).
    pub max_header_bytes: usize,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            max_connections: 4096,
            header_read_timeout: Duration::from_millis(10_000),
            body_read_timeout: Duration::from_millis(10_000),
            request_timeout: Duration::from_millis(30_000),
            keepalive_timeout: Duration::from_secs(960),
            max_header_bytes: 16 * 1024,
        }
    }
}

/// TLS to Postgres, beyond what `DATABASE_URL` says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DatabaseTlsSettings {
    /// `DATABASE_TLS`: unset = `DATABASE_URL` decides (sqlx's default `sslmode` is `prefer`).
    pub mode: Option<DatabaseTls>,
    /// `DATABASE_CA_FILE`: PEM bundle the server's certificate must chain to (`sslrootcert`);
    /// only with `DATABASE_TLS=verify-full`.
    pub ca_file: Option<PathBuf>,
}

/// `DATABASE_TLS`: how much TLS Postgres connections must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatabaseTls {
    /// Encrypted, server certificate not checked (`sslmode=require`).
    Require,
    /// Encrypted, certificate chained to a trusted CA and naming the host
    /// (`sslmode=verify-full`).
    VerifyFull,
}

impl DatabaseTlsSettings {
    /// Reads `DATABASE_TLS` and `DATABASE_CA_FILE` through `get`, and checks them against the
    /// `sslmode` of `database_url`: with `DATABASE_TLS` set, a URL asking for less
    /// (`disable`, `allow`, `prefer`, or `require` under `verify-full`) is refused.
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
        database_url: &str,
    ) -> Result<Self, SettingsError> {
        let mode = match get("DATABASE_TLS").filter(|v| !v.is_empty()).as_deref() {
            None => None,
            Some("require") => Some(DatabaseTls::Require),
            Some("verify-full") => Some(DatabaseTls::VerifyFull),
            Some(other) => {
                return Err(SettingsError::Invalid {
                    name: "DATABASE_TLS",
                    reason: format!("expected require or verify-full, got {other:?}"),
                });
            }
        };
        let ca_file = get("DATABASE_CA_FILE")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        if ca_file.is_some() && mode != Some(DatabaseTls::VerifyFull) {
            return Err(SettingsError::Invalid {
                name: "DATABASE_CA_FILE",
                reason: "is only used with DATABASE_TLS=verify-full".into(),
            });
        }
        if let Some(mode) = mode {
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
            if !enough {
                return Err(SettingsError::PlaintextRefused {
                    name: "DATABASE_URL",
                    reason: format!(
                        "its sslmode={} is weaker than DATABASE_TLS={}",
                        url_mode.unwrap_or_default(),
                        match mode {
                            DatabaseTls::Require => "require",
                            DatabaseTls::VerifyFull => "verify-full",
                        }
                    ),
                });
            }
        }
        Ok(Self { mode, ca_file })
    }
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

/// TLS material for `rediss://` nodes (files read at startup by [`crate::tls::RedisTls`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedisTlsSettings {
    /// `REDIS_CA_FILE`: PEM bundle the nodes' certificates must chain to (default: the
    /// system's roots).
    pub ca_file: Option<PathBuf>,
    /// `REDIS_CLIENT_CERT_FILE`: PEM client certificate chain, for mutual TLS.
    pub client_cert_file: Option<PathBuf>,
    /// `REDIS_CLIENT_KEY_FILE`: PEM private key of the client certificate.
    pub client_key_file: Option<PathBuf>,
}

impl RedisTlsSettings {
    /// Whether any TLS file is configured.
    pub fn any_file(&self) -> bool {
        self.ca_file.is_some() || self.client_cert_file.is_some() || self.client_key_file.is_some()
    }
}

/// The Redlock per-node circuit breaker (see `origin::redlock`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakerSettings {
    /// `REDLOCK_BREAKER_FAILURES` (default 3): consecutive failures that open a node's breaker.
    pub failure_threshold: u32,
    /// `REDLOCK_BREAKER_BACKOFF_MS` (default 100): first back-off of an open breaker.
    pub base_backoff: Duration,
    /// `REDLOCK_BREAKER_MAX_BACKOFF_MS` (default 2000): longest back-off.
    pub max_backoff: Duration,
}

/// Tunables of the per-SKU purchase pipeline.
#[derive(Debug, Clone)]
pub struct PurchaseSettings {
    /// `BATCH_MAX` (default 500): most purchases decided in one transaction. 1 disables batching.
    pub batch_max: usize,
    /// `QUEUE_CAPACITY` (default 4096): queued purchases per SKU per process before shedding.
    pub queue_capacity: usize,
    /// `REQUEST_DEADLINE_MS` (default 3000): a purchase not decided by then answers 503.
    pub request_deadline: Duration,
    /// `LOCK_TTL_MS` (default 2000): Redlock lease length for a SKU.
    pub lock_ttl: Duration,
    /// `COMMIT_BUDGET_MS` (default 250): never start a commit with less lease validity left.
    pub commit_budget: Duration,
    /// `LOCK_MAX_HOLD_MS` (default 0): after this long a holder releases the SKU lock so other
    /// processes get their turn, even with requests still queued. 0: after every batch.
    pub lock_max_hold: Duration,
    /// `SINGLE_FLIGHT` (default `true`): `false` turns off the combiner (one lock and one
    /// transaction per request) — the benchmark's baseline.
    pub single_flight: bool,
}

impl Default for PurchaseSettings {
    fn default() -> Self {
        Self {
            batch_max: 500,
            queue_capacity: 4096,
            request_deadline: Duration::from_millis(3000),
            lock_ttl: Duration::from_millis(2000),
            commit_budget: Duration::from_millis(250),
            lock_max_hold: Duration::ZERO,
            single_flight: true,
        }
    }
}

impl Settings {
    /// Reads the settings from the process environment.
    pub fn from_env() -> Result<Self, SettingsError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the settings through `get` (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let required = |name: &'static str| -> Result<String, SettingsError> {
            get(name)
                .filter(|v| !v.is_empty())
                .ok_or(SettingsError::Missing(name))
        };
        let secrets_error = |list, single| {
            move |source| SettingsError::Secrets {
                list,
                single,
                source,
            }
        };
        let edge_secrets = SecretRing::from_config(
            get("EDGE_SHARED_SECRETS").as_deref(),
            get("EDGE_SHARED_SECRET").as_deref(),
            MIN_SECRET_LEN,
        )
        .map_err(secrets_error("EDGE_SHARED_SECRETS", "EDGE_SHARED_SECRET"))?;
        let admin_tokens = BearerTokens::from_config(
            get("ADMIN_TOKENS").as_deref(),
            get("ADMIN_TOKEN").as_deref(),
            MIN_SECRET_LEN,
        )
        .map_err(secrets_error("ADMIN_TOKENS", "ADMIN_TOKEN"))?;
        let parsed = |name: &'static str, default: &str| -> Result<String, SettingsError> {
            Ok(get(name)
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| default.to_owned()))
        };
        fn num<T: FromStr>(name: &'static str, raw: String) -> Result<T, SettingsError>
        where
            T::Err: std::fmt::Display,
        {
            raw.trim()
                .parse()
                .map_err(|e: T::Err| SettingsError::Invalid {
                    name,
                    reason: e.to_string(),
                })
        }
        let millis = |name: &'static str, default: &str| -> Result<Duration, SettingsError> {
            Ok(Duration::from_millis(num(name, parsed(name, default)?)?))
        };

        let redis_urls: Vec<String> = required("REDIS_URLS")?
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        if redis_urls.is_empty() {
            return Err(SettingsError::Missing("REDIS_URLS"));
        }
        for url in &redis_urls {
            if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
                return Err(SettingsError::Invalid {
                    name: "REDIS_URLS",
                    reason: "each URL must start with redis:// or rediss://".into(),
                });
            }
        }
        let path = |name: &'static str| get(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        let redis_tls = RedisTlsSettings {
            ca_file: path("REDIS_CA_FILE"),
            client_cert_file: path("REDIS_CLIENT_CERT_FILE"),
            client_key_file: path("REDIS_CLIENT_KEY_FILE"),
        };
        check_redis_tls(&redis_urls, &redis_tls)?;
        let redlock_breaker = BreakerSettings {
            failure_threshold: num(
                "REDLOCK_BREAKER_FAILURES",
                parsed("REDLOCK_BREAKER_FAILURES", "3")?,
            )?,
            base_backoff: millis("REDLOCK_BREAKER_BACKOFF_MS", "100")?,
            max_backoff: millis("REDLOCK_BREAKER_MAX_BACKOFF_MS", "2000")?,
        };
        if redlock_breaker.failure_threshold == 0 {
            return Err(SettingsError::Invalid {
                name: "REDLOCK_BREAKER_FAILURES",
                reason: "must be at least 1".into(),
            });
        }
        if redlock_breaker.base_backoff.is_zero()
            || redlock_breaker.base_backoff > redlock_breaker.max_backoff
        {
            return Err(SettingsError::Invalid {
                name: "REDLOCK_BREAKER_BACKOFF_MS",
                reason: "must be at least 1 and at most REDLOCK_BREAKER_MAX_BACKOFF_MS".into(),
            });
        }
        if redlock_breaker.max_backoff > Duration::from_secs(3600) {
            return Err(SettingsError::Invalid {
                name: "REDLOCK_BREAKER_MAX_BACKOFF_MS",
                reason: "must be at most one hour".into(),
            });
        }
        let redlock_quorum_loss_grace = millis("REDLOCK_QUORUM_LOSS_GRACE_MS", "1000")?;
        if redlock_quorum_loss_grace > Duration::from_secs(3600) {
            return Err(SettingsError::Invalid {
                name: "REDLOCK_QUORUM_LOSS_GRACE_MS",
                reason: "must be at most one hour".into(),
            });
        }
        let idempotency_retention = idempotency_retention(&get)?;
        let boolean = |name: &'static str, default: &str| -> Result<bool, SettingsError> {
            match parsed(name, default)?.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" => Ok(true),
                "false" | "0" | "no" => Ok(false),
                other => Err(SettingsError::Invalid {
                    name,
                    reason: format!("expected true or false, got {other:?}"),
                }),
            }
        };
        let run_migrations = boolean("RUN_MIGRATIONS", "true")?;
        let single_flight = boolean("SINGLE_FLIGHT", "true")?;
        let accept_signature_v1 = boolean("ACCEPT_SIGNATURE_V1", "true")?;
        let purchase = PurchaseSettings {
            batch_max: num::<usize>("BATCH_MAX", parsed("BATCH_MAX", "500")?)?.clamp(1, 1000),
            queue_capacity: num::<usize>("QUEUE_CAPACITY", parsed("QUEUE_CAPACITY", "4096")?)?
                .max(1),
            request_deadline: millis("REQUEST_DEADLINE_MS", "3000")?,
            lock_ttl: millis("LOCK_TTL_MS", "2000")?,
            commit_budget: millis("COMMIT_BUDGET_MS", "250")?,
            lock_max_hold: millis("LOCK_MAX_HOLD_MS", "0")?,
            single_flight,
        };
        let http = HttpSettings {
            max_connections: num::<usize>(
                "HTTP_MAX_CONNECTIONS",
                parsed("HTTP_MAX_CONNECTIONS", "4096")?,
            )?
            .clamp(1, 1_000_000),
            header_read_timeout: millis("HTTP_HEADER_READ_TIMEOUT_MS", "10000")?,
            body_read_timeout: millis("HTTP_BODY_READ_TIMEOUT_MS", "10000")?,
            request_timeout: millis("HTTP_REQUEST_TIMEOUT_MS", "30000")?,
            keepalive_timeout: Duration::from_secs(num(
                "HTTP_KEEPALIVE_TIMEOUT_SECS",
                parsed("HTTP_KEEPALIVE_TIMEOUT_SECS", "960")?,
            )?),
            max_header_bytes: num::<usize>(
                "HTTP_MAX_HEADER_BYTES",
                parsed("HTTP_MAX_HEADER_BYTES", "16384")?,
            )?,
        };
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
        if purchase.commit_budget >= purchase.lock_ttl {
            return Err(SettingsError::Invalid {
                name: "COMMIT_BUDGET_MS",
                reason: "must be below LOCK_TTL_MS".into(),
            });
        }
        let db_max_connections =
            num::<u32>("DB_MAX_CONNECTIONS", parsed("DB_MAX_CONNECTIONS", "16")?)?.max(1);
        let db_read_max_connections = num::<u32>(
            "DB_READ_MAX_CONNECTIONS",
            parsed(
                "DB_READ_MAX_CONNECTIONS",
                &(db_max_connections / 4).max(1).to_string(),
            )?,
        )?;
        if db_read_max_connections == 0
            || (db_max_connections > 1 && db_read_max_connections >= db_max_connections)
        {
            return Err(SettingsError::Invalid {
                name: "DB_READ_MAX_CONNECTIONS",
                reason: "must be at least 1 and below DB_MAX_CONNECTIONS".into(),
            });
        }
        let database_url = required("DATABASE_URL")?;
        let database_tls = DatabaseTlsSettings::from_lookup(&get, &database_url)?;
        Ok(Self {
            database_url: SecretString::from(database_url),
            database_tls,
            redis_urls,
            redis_tls,
            redlock_breaker,
            redlock_quorum_loss_grace,
            listen_addr: num("LISTEN_ADDR", parsed("LISTEN_ADDR", "127.0.0.1:8080")?)?,
            edge_secrets,
            accept_signature_v1,
            admin_tokens,
            redis_key_prefix: parsed("REDIS_KEY_PREFIX", "flashgate")?,
            run_migrations,
            db_max_connections,
            db_acquire_timeout: millis("DB_ACQUIRE_TIMEOUT_MS", "2000")?,
            db_read_max_connections,
            idempotency_retention,
            reconcile_interval: Duration::from_secs(num(
                "RECONCILE_INTERVAL_SECS",
                parsed("RECONCILE_INTERVAL_SECS", "60")?,
            )?),
            log_hash_key: match get("LOG_HASH_KEY").filter(|v| !v.is_empty()) {
                None => None,
                Some(v) if v.len() < 16 => {
                    return Err(SettingsError::Invalid {
                        name: "LOG_HASH_KEY",
                        reason: "must be at least 16 characters".into(),
                    });
                }
                Some(v) => Some(SecretString::from(v)),
            },
            purchase,
            http,
        })
    }
}

/// `IDEMPOTENCY_RETENTION_HOURS` (default 24, at least 24) read through `get`: the one parse of
/// it, used by [`Settings::from_lookup`] and by `origin reconcile` (which needs no other setting).
pub fn idempotency_retention(
    get: impl Fn(&str) -> Option<String>,
) -> Result<Duration, SettingsError> {
    const NAME: &str = "IDEMPOTENCY_RETENTION_HOURS";
    let invalid = |reason: String| SettingsError::Invalid { name: NAME, reason };
    let hours: u64 = match get(NAME).filter(|v| !v.is_empty()) {
        None => 24,
        Some(raw) => raw.trim().parse().map_err(|e| invalid(format!("{e}")))?,
    };
    if hours < 24 {
        return Err(invalid("must be at least 24".into()));
    }
    hours
        .checked_mul(3600)
        .map(Duration::from_secs)
        .ok_or_else(|| invalid("too large".into()))
}

/// Redis TLS rules: a client certificate comes with its key; once TLS is configured (a TLS file
/// or any `rediss://` URL) every URL must be `rediss://`; certificate checks cannot be turned
/// off (`#insecure`). URLs are named by index, never printed (they may carry passwords).
fn check_redis_tls(urls: &[String], tls: &RedisTlsSettings) -> Result<(), SettingsError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    const BASE: [(&str, &str); 4] = [
        ("DATABASE_URL", "postgres://postgres@127.0.0.1/flashgate"),
        (
            "REDIS_URLS",
            "redis://127.0.0.1:6379, redis://127.0.0.1:6380",
        ),
        ("EDGE_SHARED_SECRET", "0123456789abcdef0123"),
        ("ADMIN_TOKEN", "admin-token-0123456789"),
    ];

    #[test]
    fn defaults_apply() {
        let s = Settings::from_lookup(env(&BASE)).expect("valid");
        assert_eq!(
            s.redis_urls,
            ["redis://127.0.0.1:6379", "redis://127.0.0.1:6380"]
        );
        assert_eq!(s.listen_addr.to_string(), "127.0.0.1:8080");
        assert!(s.run_migrations);
        assert_eq!(s.purchase.batch_max, 500);
        assert_eq!(s.http.max_connections, 4096);
        assert_eq!(s.http.header_read_timeout, Duration::from_secs(10));
        assert_eq!(s.http.keepalive_timeout, Duration::from_secs(960));
        assert_eq!(s.http.max_header_bytes, 16 * 1024);
    }

    #[test]
    fn http_limits_are_checked() {
        let with = |k: &'static str, v: &'static str| {
            let mut e = BASE.to_vec();
            e.push((k, v));
            Settings::from_lookup(env(&e))
        };
        let err = with("HTTP_REQUEST_TIMEOUT_MS", "5000").expect_err("below body timeout");
        assert!(err.to_string().contains("HTTP_REQUEST_TIMEOUT_MS"), "{err}");
        let err = with("HTTP_HEADER_READ_TIMEOUT_MS", "0").expect_err("zero");
        assert!(
            err.to_string().contains("HTTP_HEADER_READ_TIMEOUT_MS"),
            "{err}"
        );
        let err = with("HTTP_MAX_HEADER_BYTES", "100").expect_err("too small");
        assert!(err.to_string().contains("HTTP_MAX_HEADER_BYTES"), "{err}");
        let s = with("HTTP_MAX_CONNECTIONS", "0").expect("clamped");
        assert_eq!(s.http.max_connections, 1);
    }

    #[test]
    fn public_reads_get_a_share_of_the_database_pool() {
        let s = with(&[]).expect("defaults");
        assert_eq!((s.db_max_connections, s.db_read_max_connections), (16, 4));
        let s = with(&[("DB_MAX_CONNECTIONS", "2")]).expect("small pool");
        assert_eq!(s.db_read_max_connections, 1);
        let s = with(&[("DB_MAX_CONNECTIONS", "1")]).expect("one connection");
        assert_eq!(s.db_read_max_connections, 1);
        let s = with(&[("DB_READ_MAX_CONNECTIONS", "15")]).expect("below the pool");
        assert_eq!(s.db_read_max_connections, 15);
        for bad in ["0", "16", "17", "x"] {
            let err = with(&[("DB_READ_MAX_CONNECTIONS", bad)]).expect_err(bad);
            assert!(err.to_string().contains("DB_READ_MAX_CONNECTIONS"), "{err}");
        }
    }

    #[test]
    fn missing_and_invalid_values_are_named() {
        let err = Settings::from_lookup(env(&BASE[1..])).expect_err("no db url");
        assert!(err.to_string().contains("DATABASE_URL"), "{err}");
        let mut bad = BASE.to_vec();
        bad.push(("LISTEN_ADDR", "nope"));
        let err = Settings::from_lookup(env(&bad)).expect_err("bad addr");
        assert!(err.to_string().contains("LISTEN_ADDR"), "{err}");
        let mut short = BASE.to_vec();
        short[2] = ("EDGE_SHARED_SECRET", "short");
        assert!(Settings::from_lookup(env(&short)).is_err());
    }

    fn refused(result: Result<Settings, SettingsError>, name: &str) {
        match result {
            Err(SettingsError::PlaintextRefused { name: n, .. }) if n == name => {}
            other => panic!("expected {name} refused, got {other:?}"),
        }
    }

    #[test]
    fn redis_tls_refuses_plaintext_and_disabled_verification() {
        let tls = with(&[
            ("REDIS_URLS", "rediss://a:6379,rediss://:pw@b:6379"),
            ("REDIS_CA_FILE", "/etc/ca.pem"),
        ])
        .expect("all rediss");
        assert_eq!(tls.redis_tls.ca_file, Some(PathBuf::from("/etc/ca.pem")));
        // A CA file, yet one node is plaintext.
        refused(with(&[("REDIS_CA_FILE", "/etc/ca.pem")]), "REDIS_URLS");
        // Mixed schemes.
        let mixed = with(&[("REDIS_URLS", "rediss://a:6379,redis://:hunter2@b:6379")]);
        let Err(error) = mixed else {
            panic!("mixed schemes accepted")
        };
        assert!(
            matches!(error, SettingsError::PlaintextRefused { .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("#1"), "{error}");
        assert!(!error.to_string().contains("hunter2"), "{error}");
        refused(
            with(&[("REDIS_URLS", "rediss://a:6379/#insecure")]),
            "REDIS_URLS",
        );
        // A client certificate without its key.
        let half = with(&[
            ("REDIS_URLS", "rediss://a:6379"),
            ("REDIS_CLIENT_CERT_FILE", "/etc/client.pem"),
        ]);
        assert!(
            matches!(half, Err(SettingsError::Invalid { .. })),
            "{half:?}"
        );
        // No TLS anywhere: plaintext is the operator's choice.
        assert!(with(&[]).expect("plaintext").redis_tls == RedisTlsSettings::default());
    }

    #[test]
    fn database_tls_refuses_weaker_sslmodes() {
        let url = |u: &'static str| ("DATABASE_URL", u);
        let s = with(&[
            ("DATABASE_TLS", "verify-full"),
            ("DATABASE_CA_FILE", "/ca.pem"),
        ])
        .expect("no sslmode in the URL: DATABASE_TLS applies");
        assert_eq!(s.database_tls.mode, Some(DatabaseTls::VerifyFull));
        with(&[
            url("postgres://h/db?sslmode=verify-full"),
            ("DATABASE_TLS", "verify-full"),
        ])
        .expect("same mode");
        with(&[
            url("postgres://h/db?application_name=x&sslmode=verify-ca"),
            ("DATABASE_TLS", "require"),
        ])
        .expect("stronger than required");
        for weak in [
            "postgres://h/db?sslmode=disable",
            "postgres://h/db?sslmode=prefer",
            "postgres://h/db?ssl-mode=allow",
            "postgres://h/db?sslmode=require",
        ] {
            refused(
                with(&[url(weak), ("DATABASE_TLS", "verify-full")]),
                "DATABASE_URL",
            );
        }
        refused(
            with(&[
                url("postgres://h/db?sslmode=DISABLE"),
                ("DATABASE_TLS", "require"),
            ]),
            "DATABASE_URL",
        );
        // Unset: the URL decides, even sslmode=disable.
        with(&[url("postgres://h/db?sslmode=disable")]).expect("no TLS configured");
        // A CA without verification would be a false sense of security.
        assert!(matches!(
            with(&[("DATABASE_CA_FILE", "/ca.pem")]),
            Err(SettingsError::Invalid {
                name: "DATABASE_CA_FILE",
                ..
            })
        ));
        assert!(matches!(
            with(&[("DATABASE_TLS", "on")]),
            Err(SettingsError::Invalid {
                name: "DATABASE_TLS",
                ..
            })
        ));
    }

    #[test]
    fn idempotency_retention_is_parsed_in_one_place_and_checked() {
        let day = Duration::from_secs(24 * 3600);
        assert_eq!(with(&[]).expect("default").idempotency_retention, day);
        let two_days = idempotency_retention(env(&[("IDEMPOTENCY_RETENTION_HOURS", " 48 ")]));
        assert_eq!(two_days.expect("48 h"), 2 * day);
        for bad in ["12", "0", "-1", "a day", "18446744073709551615"] {
            let err =
                idempotency_retention(env(&[("IDEMPOTENCY_RETENTION_HOURS", bad)])).expect_err(bad);
            assert!(
                matches!(
                    err,
                    SettingsError::Invalid {
                        name: "IDEMPOTENCY_RETENTION_HOURS",
                        ..
                    }
                ),
                "{bad}: {err}"
            );
            let err = with(&[("IDEMPOTENCY_RETENTION_HOURS", bad)]).expect_err(bad);
            assert!(
                err.to_string().contains("IDEMPOTENCY_RETENTION_HOURS"),
                "{err}"
            );
        }
    }

    #[test]
    fn breaker_settings_default_and_validate() {
        let s = with(&[]).expect("defaults");
        assert_eq!(
            s.redlock_breaker,
            BreakerSettings {
                failure_threshold: 3,
                base_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(2),
            }
        );
        for bad in [
            ("REDLOCK_BREAKER_FAILURES", "0"),
            ("REDLOCK_BREAKER_BACKOFF_MS", "0"),
            ("REDLOCK_BREAKER_BACKOFF_MS", "5000"),
            ("REDLOCK_BREAKER_MAX_BACKOFF_MS", "x"),
        ] {
            let err = with(&[bad]).expect_err("invalid breaker setting");
            assert!(err.to_string().contains(bad.0), "{err}");
        }
    }

    #[test]
    fn quorum_loss_grace_defaults_to_a_second_and_is_bounded() {
        let s = with(&[]).expect("defaults");
        assert_eq!(s.redlock_quorum_loss_grace, Duration::from_secs(1));
        let s = with(&[("REDLOCK_QUORUM_LOSS_GRACE_MS", "0")]).expect("0 = at once");
        assert_eq!(s.redlock_quorum_loss_grace, Duration::ZERO);
        for bad in ["x", "-1", "3600001"] {
            let err = with(&[("REDLOCK_QUORUM_LOSS_GRACE_MS", bad)]).expect_err(bad);
            assert!(
                err.to_string().contains("REDLOCK_QUORUM_LOSS_GRACE_MS"),
                "{err}"
            );
        }
    }

    fn with(changes: &[(&'static str, &'static str)]) -> Result<Settings, SettingsError> {
        let mut pairs: Vec<(&str, &str)> = BASE
            .iter()
            .copied()
            .filter(|(k, _)| !changes.iter().any(|(c, _)| c == k))
            .collect();
        pairs.extend(changes.iter().filter(|(_, v)| !v.is_empty()));
        Settings::from_lookup(env(&pairs))
    }

    #[test]
    fn secrets_take_the_list_or_the_single_form() {
        // The single forms: one secret under the key id `default`, one admin token.
        let s = Settings::from_lookup(env(&BASE)).expect("valid");
        assert_eq!(s.edge_secrets.current().0.as_str(), "default");
        assert!(s.admin_tokens.accepts("admin-token-0123456789"));
        assert!(s.accept_signature_v1);

        let s = with(&[
            ("EDGE_SHARED_SECRET", ""),
            (
                "EDGE_SHARED_SECRETS",
                "k2:new-secret-0123456789,k1:old-secret-0123456789",
            ),
            ("ADMIN_TOKEN", ""),
            ("ADMIN_TOKENS", "new-admin-token-0123,old-admin-token-0123"),
            ("ACCEPT_SIGNATURE_V1", "false"),
        ])
        .expect("valid");
        assert_eq!(
            s.edge_secrets
                .kids()
                .map(|k| k.as_str())
                .collect::<Vec<_>>(),
            ["k2", "k1"]
        );
        assert!(s.admin_tokens.accepts("old-admin-token-0123"));
        assert!(!s.accept_signature_v1);
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("new-secret") && !shown.contains("admin-token"),
            "{shown}"
        );

        for (changes, name) in [
            (
                &[("EDGE_SHARED_SECRETS", "k2:new-secret-0123456789")][..],
                "EDGE_SHARED_SECRETS",
            ),
            (&[("EDGE_SHARED_SECRET", "")][..], "EDGE_SHARED_SECRETS"),
            (
                &[
                    ("EDGE_SHARED_SECRET", ""),
                    ("EDGE_SHARED_SECRETS", "k2:too-short"),
                ][..],
                "EDGE_SHARED_SECRETS",
            ),
            (
                &[("ADMIN_TOKENS", "another-admin-token-0123")][..],
                "ADMIN_TOKENS",
            ),
            (&[("ADMIN_TOKEN", "")][..], "ADMIN_TOKENS"),
            (
                &[("ACCEPT_SIGNATURE_V1", "maybe")][..],
                "ACCEPT_SIGNATURE_V1",
            ),
        ] {
            let err = with(changes).expect_err(name);
            assert!(err.to_string().contains(name), "{err}");
            assert!(!err.to_string().contains("secret-0123"), "{err}");
        }
    }
}
