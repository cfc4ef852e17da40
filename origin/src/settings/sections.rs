//! The groups of variables the origin is configured with, each declared once as clap arguments
//! (name, parser, default, meaning) and flattened into the whole declaration (`super::declared`):
//! logging, the HTTP server's limits, TLS to Postgres and Redis, the Redlock breaker, the
//! purchase pipeline's tunables and the stored answers' retention. Their cross-field checks are
//! `super::checks`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use secrecy::SecretString;

use super::error::SettingsError;
use super::values;

/// Logging: the format and filter are read by `telemetry` (through [`LogSettings::from_env`]),
/// the pseudonym key by the server and by `origin pseudonym`.
#[derive(Args, Clone)]
pub struct LogSettings {
    /// `pretty` for human-readable logs
    #[arg(long, env = "LOG_FORMAT", default_value = "json")]
    pub log_format: String,
    /// secret (≥ 16 chars) keying the pseudonyms of user ids and idempotency keys in logs; give
    /// all replicas the same one
    #[arg(long, env = "LOG_HASH_KEY")]
    log_hash_key: Option<String>,
    /// log filter
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    pub rust_log: String,
}

impl std::fmt::Debug for LogSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogSettings")
            .field("log_format", &self.log_format)
            .field(
                "log_hash_key",
                &self.log_hash_key.as_ref().map(|_| "[REDACTED]"),
            )
            .field("rust_log", &self.rust_log)
            .finish()
    }
}

impl LogSettings {
    /// `LOG_HASH_KEY`, checked (at least 16 characters); `None` when unset.
    pub fn log_hash_key(&self) -> Result<Option<SecretString>, SettingsError> {
        match &self.log_hash_key {
            None => Ok(None),
            Some(v) if v.len() < 16 => Err(SettingsError::Invalid {
                name: "LOG_HASH_KEY",
                reason: "must be at least 16 characters".into(),
            }),
            Some(v) => Ok(Some(SecretString::from(v.as_str()))),
        }
    }
}

/// Limits of the HTTP server: what one client may hold and for how long (see `server`).
#[derive(Debug, Clone, Args)]
pub struct HttpSettings {
    /// connections served at once; at the cap the oldest connection that has not completed a
    /// request and sends nothing (or trickles a head) is dropped to make room, failing that the
    /// longest-idle keep-alive connection is closed, otherwise new connections wait in the
    /// listen backlog (keep `ulimit -n` above it)
    #[arg(id = "http_max_connections", long = "http-max-connections", env = "HTTP_MAX_CONNECTIONS", default_value = "4096", value_parser = values::trimmed::<usize>)]
    pub max_connections: usize,
    /// a request head must arrive whole within this (from accept, or from its first byte on a
    /// kept-alive connection), else the connection is closed without an answer (slow clients)
    #[arg(long, env = "HTTP_HEADER_READ_TIMEOUT_MS", default_value = "10000", value_parser = values::millis)]
    pub header_read_timeout: Duration,
    /// a body must arrive whole within this after its head, else 408 `request_timeout`
    #[arg(long, env = "HTTP_BODY_READ_TIMEOUT_MS", default_value = "10000", value_parser = values::millis)]
    pub body_read_timeout: Duration,
    /// a request not answered by then answers 503 `unavailable` (a hung dependency); must
    /// exceed `HTTP_BODY_READ_TIMEOUT_MS`
    #[arg(long, env = "HTTP_REQUEST_TIMEOUT_MS", default_value = "30000", value_parser = values::millis)]
    pub request_timeout: Duration,
    /// idle keep-alive connections are closed after this; longer than Cloudflare's 900 s proxy
    /// idle timeout so the edge never reuses a connection the origin just closed
    #[arg(long, env = "HTTP_KEEPALIVE_TIMEOUT_SECS", default_value = "960", value_parser = values::secs)]
    pub keepalive_timeout: Duration,
    /// header fields (names + values) above this answer 431 `headers_too_large`; the parser's
    /// own cap is twice this
    #[arg(long, env = "HTTP_MAX_HEADER_BYTES", default_value = "16384", value_parser = values::trimmed::<usize>)]
    pub max_header_bytes: usize,
}

/// The origin's own TLS listener, for the edge's hop across the internet (`server::tls`;
/// [operations.md](operations.md#the-hop-from-the-edge-to-the-origin)).
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct ListenerTlsSettings {
    /// address of the HTTPS listener, served beside `LISTEN_ADDR` (same routes, same limits,
    /// one `HTTP_MAX_CONNECTIONS` for both) when `TLS_CERT_FILE` and `TLS_KEY_FILE` are set
    #[arg(id = "tls_listen_addr", long = "tls-listen-addr", env = "TLS_LISTEN_ADDR", default_value = "0.0.0.0:8443", value_parser = values::trimmed::<SocketAddr>)]
    pub listen_addr: SocketAddr,
    /// PEM certificate chain (leaf first) of the HTTPS listener, with `TLS_KEY_FILE`; both are
    /// read again on SIGHUP and when they change, and new connections get the new certificate
    /// (open ones keep theirs). See [security.md](security.md#tls)
    #[arg(id = "tls_cert_file", long = "tls-cert-file", env = "TLS_CERT_FILE")]
    pub cert_file: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of `TLS_CERT_FILE`
    #[arg(id = "tls_key_file", long = "tls-key-file", env = "TLS_KEY_FILE")]
    pub key_file: Option<PathBuf>,
    /// PEM bundle of the CAs a client certificate must chain to: the HTTPS listener then refuses
    /// every client without one (mutual TLS; Cloudflare's Authenticated Origin Pulls CA, or
    /// your own). Reloaded with the certificate
    #[arg(
        id = "tls_client_ca_file",
        long = "tls-client-ca-file",
        env = "TLS_CLIENT_CA_FILE"
    )]
    pub client_ca_file: Option<PathBuf>,
    /// how often the TLS files are checked for a change (0: only on SIGHUP)
    #[arg(id = "tls_reload_interval", long = "tls-reload-interval", env = "TLS_RELOAD_INTERVAL_MS", default_value = "10000", value_parser = values::millis)]
    pub reload_interval: Duration,
}

/// The HTTPS listener, checked: a certificate and its key, and optionally the client CAs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerTls {
    /// `TLS_LISTEN_ADDR`.
    pub listen_addr: SocketAddr,
    /// `TLS_CERT_FILE`.
    pub cert_file: PathBuf,
    /// `TLS_KEY_FILE`.
    pub key_file: PathBuf,
    /// `TLS_CLIENT_CA_FILE`: clients must present a certificate chained to one of these.
    pub client_ca_file: Option<PathBuf>,
    /// `TLS_RELOAD_INTERVAL_MS`; zero: only on SIGHUP.
    pub reload_interval: Duration,
}

/// TLS to Postgres, beyond what `DATABASE_URL` says.
#[derive(Debug, Clone, Default, PartialEq, Eq, Args)]
pub struct DatabaseTlsSettings {
    /// `require` or `verify-full`: Postgres connections must use TLS (`verify-full` also checks
    /// the certificate and host name); unset, `DATABASE_URL`'s `sslmode` decides. See
    /// [security.md](security.md#tls)
    #[arg(
        id = "database_tls",
        long = "database-tls",
        env = "DATABASE_TLS",
        value_enum
    )]
    pub mode: Option<DatabaseTls>,
    /// PEM CA bundle the server certificate must chain to (`sslrootcert`); only with
    /// `DATABASE_TLS=verify-full`
    #[arg(
        id = "database_ca_file",
        long = "database-ca-file",
        env = "DATABASE_CA_FILE"
    )]
    pub ca_file: Option<PathBuf>,
}

/// `DATABASE_TLS`: how much TLS Postgres connections must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DatabaseTls {
    /// Encrypted, server certificate not checked (`sslmode=require`).
    Require,
    /// Encrypted, certificate chained to a trusted CA and naming the host
    /// (`sslmode=verify-full`).
    VerifyFull,
}

/// TLS material for `rediss://` nodes (files read at startup by [`crate::tls::RedisTls`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Args)]
pub struct RedisTlsSettings {
    /// PEM CA bundle the `rediss://` nodes' certificates must chain to
    #[arg(id = "redis_ca_file", long = "redis-ca-file", env = "REDIS_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate chain for mutual TLS (with `REDIS_CLIENT_KEY_FILE`)
    #[arg(long, env = "REDIS_CLIENT_CERT_FILE")]
    pub client_cert_file: Option<PathBuf>,
    /// PEM private key of the client certificate (with `REDIS_CLIENT_CERT_FILE`)
    #[arg(long, env = "REDIS_CLIENT_KEY_FILE")]
    pub client_key_file: Option<PathBuf>,
}

impl RedisTlsSettings {
    /// Whether any TLS file is configured.
    pub fn any_file(&self) -> bool {
        self.ca_file.is_some() || self.client_cert_file.is_some() || self.client_key_file.is_some()
    }
}

/// The Redlock per-node circuit breaker (see `origin::redlock`).
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct BreakerSettings {
    /// consecutive failures (errors, timeouts) after which a Redis node's circuit breaker opens
    #[arg(long, env = "REDLOCK_BREAKER_FAILURES", default_value = "3", value_parser = values::trimmed::<u32>)]
    pub failure_threshold: u32,
    /// first back-off of an open breaker; doubles with each failed probe (jittered)
    #[arg(long, env = "REDLOCK_BREAKER_BACKOFF_MS", default_value = "100", value_parser = values::millis)]
    pub base_backoff: Duration,
    /// longest back-off, i.e. the longest a node that came back waits for readmission
    #[arg(long, env = "REDLOCK_BREAKER_MAX_BACKOFF_MS", default_value = "2000", value_parser = values::millis)]
    pub max_backoff: Duration,
}

/// Tunables of the per-SKU purchase pipeline.
#[derive(Debug, Clone, Args)]
pub struct PurchaseSettings {
    /// most purchases decided per transaction (1–1000; 1 disables batching)
    #[arg(long, env = "BATCH_MAX", default_value = "500", value_parser = values::trimmed::<usize>)]
    pub batch_max: usize,
    /// queued purchases per SKU per process before shedding
    #[arg(long, env = "QUEUE_CAPACITY", default_value = "4096", value_parser = values::trimmed::<usize>)]
    pub queue_capacity: usize,
    /// a purchase not decided by then answers 503
    #[arg(long, env = "REQUEST_DEADLINE_MS", default_value = "3000", value_parser = values::millis)]
    pub request_deadline: Duration,
    /// Redlock lease of a SKU (also the restart-guard window of a node that came back empty)
    #[arg(long, env = "LOCK_TTL_MS", default_value = "2000", value_parser = values::millis)]
    pub lock_ttl: Duration,
    /// a batch starts only with this much lease validity left
    #[arg(long, env = "COMMIT_BUDGET_MS", default_value = "250", value_parser = values::millis)]
    pub commit_budget: Duration,
    /// a holder with purchases still queued gives the SKU lock up after this long, for fairness
    /// across processes; 0: after every batch
    #[arg(long, env = "LOCK_MAX_HOLD_MS", default_value = "0", value_parser = values::millis)]
    pub lock_max_hold: Duration,
}

#[derive(Args)]
pub(super) struct Retention {
    /// how long stored outcomes replay (minimum 24; also read by `origin reconcile`, which
    /// refuses an invalid value); a key that bought an order answers 422 after it
    #[arg(long, env = "IDEMPOTENCY_RETENTION_HOURS", default_value = "24", value_parser = values::trimmed::<u64>)]
    idempotency_retention_hours: u64,
}

impl Retention {
    pub(super) fn check(self) -> Result<Duration, SettingsError> {
        let invalid = |reason: &str| SettingsError::Invalid {
            name: "IDEMPOTENCY_RETENTION_HOURS",
            reason: reason.into(),
        };
        if self.idempotency_retention_hours < 24 {
            return Err(invalid("must be at least 24"));
        }
        self.idempotency_retention_hours
            .checked_mul(3600)
            .map(Duration::from_secs)
            .ok_or_else(|| invalid("too large"))
    }
}
