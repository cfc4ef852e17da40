//! Typed configuration, read once from the environment at startup (before anything is served).
//!
//! One source: every variable is declared exactly once, as a clap argument — its name
//! (`env = …`), its type and parser (`values`), its default (`default_value…`) and its meaning
//! (the doc comment): the whole declaration in `declared`, its groups in `sections`. `env` reads
//! the variables through those declarations; `checks` holds the cross-field checks
//! [`Settings::from_lookup`] runs, which assembles the checked [`Settings`] here; [`SettingsError`]
//! (`error`) says what is wrong; docs/configuration.md's table is generated
//! from the same declarations (a test fails when it drifts; `UPDATE_DOCS=1 cargo test -p origin
//! --lib settings` rewrites it). Secrets are wrapped so they never print.

mod checks;
mod declared;
mod env;
mod error;
mod sections;
#[cfg(test)]
mod tests;
mod values;
pub mod webhook;

use std::net::SocketAddr;
use std::time::Duration;

use secrecy::SecretString;
use shared::{BearerTokens, SecretRing};

use webhook::WebhookSecrets;

use checks::{check_breaker, check_http, check_redis_tls, database, listener_tls, redis_urls};
use declared::{Environment, ReconcileEnvironment};

pub use env::{SECRET_FILES, configuration_table};
pub use error::SettingsError;
pub use sections::{
    BreakerSettings, DatabaseTls, DatabaseTlsSettings, HttpSettings, ListenerTls,
    ListenerTlsSettings, LogSettings, PurchaseSettings, RedisTlsSettings,
};

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
    /// `TLS_LISTEN_ADDR`, `TLS_CERT_FILE`, `TLS_KEY_FILE`, `TLS_CLIENT_CA_FILE`,
    /// `TLS_RELOAD_INTERVAL_MS`; `None`: no HTTPS listener.
    pub listener_tls: Option<ListenerTls>,
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

impl LogSettings {
    /// Reads the logging variables from the process environment.
    pub fn from_env() -> Result<Self, SettingsError> {
        env::parse(&|name: &str| std::env::var(name).ok())
    }
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
        let listener_tls = listener_tls(raw.listener_tls, raw.listen_addr)?;
        Ok(Self {
            database_url,
            database_tls,
            redis_urls,
            redis_tls: raw.redis_tls,
            redlock_breaker: raw.redlock_breaker,
            redlock_quorum_loss_grace: raw.redlock_quorum_loss_grace,
            listen_addr: raw.listen_addr,
            listener_tls,
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
