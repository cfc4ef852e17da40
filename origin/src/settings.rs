//! Typed configuration, read once from the environment at startup (before anything is served).
//!
//! One source: every variable is declared exactly once, as a clap argument below — its name
//! (`env = …`), its type and parser, its default (`default_value…`) and its meaning (the doc
//! comment). `env` reads the variables through those declarations; `checks` holds the
//! cross-field checks [`Settings::from_lookup`] runs; docs/configuration.md's table is generated
//! from the same declarations (a test fails when it drifts; `UPDATE_DOCS=1 cargo test -p origin
//! --lib settings` rewrites it). Secrets are wrapped so they never print.

mod checks;
mod env;
#[cfg(test)]
mod tests;
pub mod webhook;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Args};
use secrecy::SecretString;
use shared::{BearerTokens, SecretRing, SecretsError};

use webhook::WebhookSecrets;

use checks::{check_breaker, check_http, check_redis_tls, database, redis_urls};

pub use env::configuration_table;

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

/// The whole origin configuration, checked. What each variable means and its default:
/// docs/configuration.md (generated from the declarations in this module).
#[derive(Debug, Clone)]
pub struct Settings {
    /// `DATABASE_URL`.
    pub database_url: SecretString,
    /// `DATABASE_TLS`, `DATABASE_CA_FILE`.
    pub database_tls: DatabaseTlsSettings,
    /// `REDIS_URLS`, split and trimmed: one URL per independent Redlock node.
    pub redis_urls: Vec<String>,
    /// `REDIS_CA_FILE`, `REDIS_CLIENT_CERT_FILE`, `REDIS_CLIENT_KEY_FILE`.
    pub redis_tls: RedisTlsSettings,
    /// `REDLOCK_BREAKER_*`.
    pub redlock_breaker: BreakerSettings,
    /// `REDLOCK_QUORUM_LOSS_GRACE_MS`.
    pub redlock_quorum_loss_grace: Duration,
    /// `LISTEN_ADDR`.
    pub listen_addr: SocketAddr,
    /// `EDGE_SHARED_SECRETS` or `EDGE_SHARED_SECRET`.
    pub edge_secrets: SecretRing,
    /// `ACCEPT_SIGNATURE_V1`.
    pub accept_signature_v1: bool,
    /// `ADMIN_TOKENS` or `ADMIN_TOKEN`.
    pub admin_tokens: BearerTokens,
    /// `PAYMENT_WEBHOOK_SECRETS`; unset: `POST /v1/payments/stripe` answers 404.
    pub payment_webhook_secrets: Option<WebhookSecrets>,
    /// `PAYMENT_WEBHOOK_MAX_CONCURRENCY`, its default applied.
    pub payment_webhook_max_concurrency: u32,
    /// `REDIS_KEY_PREFIX`.
    pub redis_key_prefix: String,
    /// `RUN_MIGRATIONS`.
    pub run_migrations: bool,
    /// `DB_MAX_CONNECTIONS` (at least 1).
    pub db_max_connections: u32,
    /// `DB_ACQUIRE_TIMEOUT_MS`.
    pub db_acquire_timeout: Duration,
    /// `DB_READ_MAX_CONNECTIONS`, its default applied.
    pub db_read_max_connections: u32,
    /// `IDEMPOTENCY_RETENTION_HOURS`.
    pub idempotency_retention: Duration,
    /// `RECONCILE_INTERVAL_SECS` (zero = off).
    pub reconcile_interval: Duration,
    /// `LOG_HASH_KEY`; unset: a random key per process.
    pub log_hash_key: Option<SecretString>,
    /// Purchase pipeline tunables.
    pub purchase: PurchaseSettings,
    /// Connection and request limits of the HTTP server.
    pub http: HttpSettings,
}

/// The variables as declared (raw: secrets and lists not yet checked). Field order is the
/// order of docs/configuration.md's table.
#[derive(Args)]
struct Environment {
    /// Postgres connection string
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
    #[command(flatten)]
    database_tls: DatabaseTlsSettings,
    /// comma-separated `redis://` or `rediss://` (TLS) URLs, one per independent Redlock node
    /// (1, 3, 5 …)
    #[arg(long, env = "REDIS_URLS")]
    redis_urls: Option<String>,
    #[command(flatten)]
    redis_tls: RedisTlsSettings,
    #[command(flatten)]
    redlock_breaker: BreakerSettings,
    /// once fewer than a quorum of Redis nodes have been unable to vote (breakers open, or
    /// sitting out the restart guard) for this long, purchases answer 503 at once instead of
    /// retrying until `REQUEST_DEADLINE_MS`; shorter losses are ridden out (0–3600000)
    #[arg(long, env = "REDLOCK_QUORUM_LOSS_GRACE_MS", default_value = "1000", value_parser = env::millis)]
    redlock_quorum_loss_grace: Duration,
    /// HTTP listen address (`:0` picks a free port; the address is logged)
    #[arg(long, env = "LISTEN_ADDR", default_value = "127.0.0.1:8080", value_parser = env::trimmed::<SocketAddr>)]
    listen_addr: SocketAddr,
    /// `kid:secret,kid:secret` (key ids 1..32 of `[A-Za-z0-9._-]`, secrets ≥ 16 chars without
    /// `,`): the keys of the edge's request signatures — a v2 signature is checked with the key
    /// its `kid` names, a v1 signature against every key. Several keys during a rotation
    #[arg(long, env = "EDGE_SHARED_SECRETS")]
    edge_shared_secrets: Option<String>,
    /// one secret (≥ 16 chars), key id `default`. Setting both forms, or neither, stops startup
    #[arg(long, env = "EDGE_SHARED_SECRET")]
    edge_shared_secret: Option<String>,
    /// `false` refuses v1 signatures (401) once every edge signs v2 (`docs/signing.md`)
    #[arg(long, env = "ACCEPT_SIGNATURE_V1", default_value = "true", action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    accept_signature_v1: bool,
    /// `token,token` (each ≥ 16 chars, without `,`): every listed bearer token is accepted by
    /// the admin API
    #[arg(long, env = "ADMIN_TOKENS")]
    admin_tokens: Option<String>,
    /// one bearer token (≥ 16 chars)
    #[arg(long, env = "ADMIN_TOKEN")]
    admin_token: Option<String>,
    #[command(flatten)]
    payment_webhook: webhook::WebhookEnvironment,
    /// apply `origin/migrations` at startup; `false` when migrations run separately
    #[arg(long, env = "RUN_MIGRATIONS", default_value = "true", action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    run_migrations: bool,
    /// namespace of this deployment's Redis keys: `<prefix>:lock:sku:<SKU>`,
    /// `<prefix>:fence:sku:<SKU>`, and the holds' delayed queue `<prefix>:holds:due` on the
    /// first `REDIS_URLS` node (see [security.md](security.md#redis-keys))
    #[arg(long, env = "REDIS_KEY_PREFIX", default_value = "flashgate")]
    redis_key_prefix: String,
    /// size of each of the process's two Postgres pools: the requests' (reads, admin API,
    /// payment webhooks, health) and the deciders' (purchase batches and order transitions, on
    /// their own thread: [architecture.md](architecture.md)); a process opens at most twice this
    /// many connections, lazily
    #[arg(long, env = "DB_MAX_CONNECTIONS", default_value = "16", value_parser = env::trimmed::<u32>)]
    db_max_connections: u32,
    /// waiting longer for a connection answers 503
    #[arg(long, env = "DB_ACQUIRE_TIMEOUT_MS", default_value = "2000", value_parser = env::millis)]
    db_acquire_timeout: Duration,
    /// pool connections that public reads (`GET /v1/skus/{sku}`) may hold at once, at least 1
    /// and below `DB_MAX_CONNECTIONS`; the rest stay for purchases and the admin API; a read
    /// that waits `DB_ACQUIRE_TIMEOUT_MS` for one answers 503
    #[arg(long, env = "DB_READ_MAX_CONNECTIONS", value_parser = env::trimmed::<u32>)]
    db_read_max_connections: Option<u32>,
    #[command(flatten)]
    retention: Retention,
    /// how often the server reconciles the books (0 = never); see
    /// [operations.md](operations.md#running-a-sale)
    #[arg(long, env = "RECONCILE_INTERVAL_SECS", default_value = "60", value_parser = env::secs)]
    reconcile_interval: Duration,
    #[command(flatten)]
    purchase: PurchaseSettings,
    #[command(flatten)]
    http: HttpSettings,
    #[command(flatten)]
    logging: LogSettings,
}

/// What `origin reconcile` reads: the database and the retention, nothing else.
#[derive(Debug, Clone)]
pub struct ReconcileSettings {
    /// `DATABASE_URL`.
    pub database_url: SecretString,
    /// `DATABASE_TLS`, `DATABASE_CA_FILE`.
    pub database_tls: DatabaseTlsSettings,
    /// `IDEMPOTENCY_RETENTION_HOURS`: which orders must still have their stored answer.
    pub idempotency_retention: Duration,
}

#[derive(Args)]
struct ReconcileEnvironment {
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
    #[command(flatten)]
    database_tls: DatabaseTlsSettings,
    #[command(flatten)]
    retention: Retention,
}

impl ReconcileSettings {
    /// Reads the variables `origin reconcile` needs from the process environment.
    pub fn from_env() -> Result<Self, SettingsError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads them through `get`, with the same declarations and checks as [`Settings`].
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let raw: ReconcileEnvironment = env::parse(&get)?;
        let (database_url, database_tls) = database(raw.database_url, raw.database_tls)?;
        Ok(Self {
            database_url,
            database_tls,
            idempotency_retention: raw.retention.check()?,
        })
    }
}

#[derive(Args)]
struct Retention {
    /// how long stored outcomes replay (minimum 24; also read by `origin reconcile`, which
    /// refuses an invalid value); a key that bought an order answers 422 after it
    #[arg(long, env = "IDEMPOTENCY_RETENTION_HOURS", default_value = "24", value_parser = env::trimmed::<u64>)]
    idempotency_retention_hours: u64,
}

impl Retention {
    fn check(self) -> Result<Duration, SettingsError> {
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
    /// Reads the logging variables from the process environment.
    pub fn from_env() -> Result<Self, SettingsError> {
        env::parse(&|name: &str| std::env::var(name).ok())
    }

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
    #[arg(id = "http_max_connections", long = "http-max-connections", env = "HTTP_MAX_CONNECTIONS", default_value = "4096", value_parser = env::trimmed::<usize>)]
    pub max_connections: usize,
    /// a request head must arrive whole within this (from accept, or from its first byte on a
    /// kept-alive connection), else the connection is closed without an answer (slow clients)
    #[arg(long, env = "HTTP_HEADER_READ_TIMEOUT_MS", default_value = "10000", value_parser = env::millis)]
    pub header_read_timeout: Duration,
    /// a body must arrive whole within this after its head, else 408 `request_timeout`
    #[arg(long, env = "HTTP_BODY_READ_TIMEOUT_MS", default_value = "10000", value_parser = env::millis)]
    pub body_read_timeout: Duration,
    /// a request not answered by then answers 503 `unavailable` (a hung dependency); must
    /// exceed `HTTP_BODY_READ_TIMEOUT_MS`
    #[arg(long, env = "HTTP_REQUEST_TIMEOUT_MS", default_value = "30000", value_parser = env::millis)]
    pub request_timeout: Duration,
    /// idle keep-alive connections are closed after this; longer than Cloudflare's 900 s proxy
    /// idle timeout so the edge never reuses a connection the origin just closed
    #[arg(long, env = "HTTP_KEEPALIVE_TIMEOUT_SECS", default_value = "960", value_parser = env::secs)]
    pub keepalive_timeout: Duration,
    /// header fields (names + values) above this answer 431 `headers_too_large`; the parser's
    /// own cap is twice this
    #[arg(long, env = "HTTP_MAX_HEADER_BYTES", default_value = "16384", value_parser = env::trimmed::<usize>)]
    pub max_header_bytes: usize,
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
    #[arg(long, env = "REDLOCK_BREAKER_FAILURES", default_value = "3", value_parser = env::trimmed::<u32>)]
    pub failure_threshold: u32,
    /// first back-off of an open breaker; doubles with each failed probe (jittered)
    #[arg(long, env = "REDLOCK_BREAKER_BACKOFF_MS", default_value = "100", value_parser = env::millis)]
    pub base_backoff: Duration,
    /// longest back-off, i.e. the longest a node that came back waits for readmission
    #[arg(long, env = "REDLOCK_BREAKER_MAX_BACKOFF_MS", default_value = "2000", value_parser = env::millis)]
    pub max_backoff: Duration,
}

/// Tunables of the per-SKU purchase pipeline.
#[derive(Debug, Clone, Args)]
pub struct PurchaseSettings {
    /// most purchases decided per transaction (1–1000; 1 disables batching)
    #[arg(long, env = "BATCH_MAX", default_value = "500", value_parser = env::trimmed::<usize>)]
    pub batch_max: usize,
    /// queued purchases per SKU per process before shedding
    #[arg(long, env = "QUEUE_CAPACITY", default_value = "4096", value_parser = env::trimmed::<usize>)]
    pub queue_capacity: usize,
    /// a purchase not decided by then answers 503
    #[arg(long, env = "REQUEST_DEADLINE_MS", default_value = "3000", value_parser = env::millis)]
    pub request_deadline: Duration,
    /// Redlock lease of a SKU (also the restart-guard window of a node that came back empty)
    #[arg(long, env = "LOCK_TTL_MS", default_value = "2000", value_parser = env::millis)]
    pub lock_ttl: Duration,
    /// a batch starts only with this much lease validity left
    #[arg(long, env = "COMMIT_BUDGET_MS", default_value = "250", value_parser = env::millis)]
    pub commit_budget: Duration,
    /// a holder with purchases still queued gives the SKU lock up after this long, for fairness
    /// across processes; 0: after every batch
    #[arg(long, env = "LOCK_MAX_HOLD_MS", default_value = "0", value_parser = env::millis)]
    pub lock_max_hold: Duration,
    /// `false`: no combiner, one lock + one transaction per request (the benchmark baseline)
    #[arg(long, env = "SINGLE_FLIGHT", default_value = "true", action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    pub single_flight: bool,
}

impl Settings {
    /// Reads the settings from the process environment.
    pub fn from_env() -> Result<Self, SettingsError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the settings through `get` (tests pass a map); an empty value counts as unset.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let raw: Environment = env::parse(&get)?;
        let secrets_error = |list, single| {
            move |source| SettingsError::Secrets {
                list,
                single,
                source,
            }
        };
        let edge_secrets = SecretRing::from_config(
            raw.edge_shared_secrets.as_deref(),
            raw.edge_shared_secret.as_deref(),
            MIN_SECRET_LEN,
        )
        .map_err(secrets_error("EDGE_SHARED_SECRETS", "EDGE_SHARED_SECRET"))?;
        let admin_tokens = BearerTokens::from_config(
            raw.admin_tokens.as_deref(),
            raw.admin_token.as_deref(),
            MIN_SECRET_LEN,
        )
        .map_err(secrets_error("ADMIN_TOKENS", "ADMIN_TOKEN"))?;
        let redis_urls = redis_urls(raw.redis_urls.as_deref())?;
        check_redis_tls(&redis_urls, &raw.redis_tls)?;
        check_breaker(&raw.redlock_breaker)?;
        if raw.redlock_quorum_loss_grace > Duration::from_secs(3600) {
            return Err(SettingsError::Invalid {
                name: "REDLOCK_QUORUM_LOSS_GRACE_MS",
                reason: "must be at most one hour".into(),
            });
        }
        let idempotency_retention = raw.retention.check()?;
        let mut purchase = raw.purchase;
        purchase.batch_max = purchase.batch_max.clamp(1, 1000);
        purchase.queue_capacity = purchase.queue_capacity.max(1);
        if purchase.commit_budget >= purchase.lock_ttl {
            return Err(SettingsError::Invalid {
                name: "COMMIT_BUDGET_MS",
                reason: "must be below LOCK_TTL_MS".into(),
            });
        }
        let mut http = raw.http;
        http.max_connections = http.max_connections.clamp(1, 1_000_000);
        check_http(&http)?;
        let db_max_connections = raw.db_max_connections.max(1);
        let db_read_max_connections = raw
            .db_read_max_connections
            .unwrap_or((db_max_connections / 4).max(1));
        if db_read_max_connections == 0
            || (db_max_connections > 1 && db_read_max_connections >= db_max_connections)
        {
            return Err(SettingsError::Invalid {
                name: "DB_READ_MAX_CONNECTIONS",
                reason: "must be at least 1 and below DB_MAX_CONNECTIONS".into(),
            });
        }
        let (payment_webhook_secrets, payment_webhook_max_concurrency) =
            raw.payment_webhook.check(db_max_connections)?;
        let (database_url, database_tls) = database(raw.database_url, raw.database_tls)?;
        Ok(Self {
            database_url,
            database_tls,
            redis_urls,
            redis_tls: raw.redis_tls,
            redlock_breaker: raw.redlock_breaker,
            redlock_quorum_loss_grace: raw.redlock_quorum_loss_grace,
            listen_addr: raw.listen_addr,
            edge_secrets,
            accept_signature_v1: raw.accept_signature_v1,
            admin_tokens,
            payment_webhook_secrets,
            payment_webhook_max_concurrency,
            redis_key_prefix: raw.redis_key_prefix,
            run_migrations: raw.run_migrations,
            db_max_connections,
            db_acquire_timeout: raw.db_acquire_timeout,
            db_read_max_connections,
            idempotency_retention,
            reconcile_interval: raw.reconcile_interval,
            log_hash_key: raw.logging.log_hash_key()?,
            purchase,
            http,
        })
    }
}
