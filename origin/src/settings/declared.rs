//! The whole declaration of the origin's variables ([`Environment`], and `origin reconcile`'s
//! [`ReconcileEnvironment`]): every variable once, in the order of docs/configuration.md's table,
//! raw (secrets and lists not yet checked). `super::env` reads them; `super` checks them into
//! [`Settings`](super::Settings).

use std::net::SocketAddr;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Args};

use super::sections::{
    BreakerSettings, DatabaseTlsSettings, HttpSettings, ListenerTlsSettings, LogSettings,
    PurchaseSettings, RedisTlsSettings, Retention,
};
use super::values;
use super::webhook::WebhookEnvironment;

/// The variables as declared (raw: secrets and lists not yet checked). Field order is the
/// order of docs/configuration.md's table.
#[derive(Args)]
pub(super) struct Environment {
    /// Postgres connection string
    #[arg(long, env = "DATABASE_URL")]
    pub(super) database_url: Option<String>,
    #[command(flatten)]
    pub(super) database_tls: DatabaseTlsSettings,
    /// comma-separated `redis://` or `rediss://` (TLS) URLs, one per independent Redlock node
    /// (1, 3, 5 …)
    #[arg(long, env = "REDIS_URLS")]
    pub(super) redis_urls: Option<String>,
    #[command(flatten)]
    pub(super) redis_tls: RedisTlsSettings,
    #[command(flatten)]
    pub(super) redlock_breaker: BreakerSettings,
    /// once fewer than a quorum of Redis nodes have been unable to vote (breakers open, or
    /// sitting out the restart guard) for this long, purchases answer 503 at once instead of
    /// retrying until `REQUEST_DEADLINE_MS`; shorter losses are ridden out (0–3600000)
    #[arg(long, env = "REDLOCK_QUORUM_LOSS_GRACE_MS", default_value = "1000", value_parser = values::millis)]
    pub(super) redlock_quorum_loss_grace: Duration,
    /// HTTP listen address (`:0` picks a free port; the address is logged)
    #[arg(long, env = "LISTEN_ADDR", default_value = "127.0.0.1:8080", value_parser = values::trimmed::<SocketAddr>)]
    pub(super) listen_addr: SocketAddr,
    #[command(flatten)]
    pub(super) listener_tls: ListenerTlsSettings,
    /// `kid:secret,kid:secret` (key ids 1..32 of `[A-Za-z0-9._-]`, secrets ≥ 16 chars without
    /// `,`): the keys of the edge's request signatures — a v2 signature is checked with the key
    /// its `kid` names, a v1 signature against every key. Several keys during a rotation
    #[arg(long, env = "EDGE_SHARED_SECRETS")]
    pub(super) edge_shared_secrets: Option<String>,
    /// one secret (≥ 16 chars), key id `default`. Setting both forms, or neither, stops startup
    #[arg(long, env = "EDGE_SHARED_SECRET")]
    pub(super) edge_shared_secret: Option<String>,
    /// `false` refuses v1 signatures (401) once every edge signs v2 (`docs/signing.md`)
    #[arg(long, env = "ACCEPT_SIGNATURE_V1", default_value = "true", action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    pub(super) accept_signature_v1: bool,
    /// `token,token` (each ≥ 16 chars, without `,`): every listed bearer token is accepted by
    /// the admin API
    #[arg(long, env = "ADMIN_TOKENS")]
    pub(super) admin_tokens: Option<String>,
    /// one bearer token (≥ 16 chars)
    #[arg(long, env = "ADMIN_TOKEN")]
    pub(super) admin_token: Option<String>,
    #[command(flatten)]
    pub(super) payment_webhook: WebhookEnvironment,
    /// apply `origin/migrations` at startup; `false` when migrations run separately
    #[arg(long, env = "RUN_MIGRATIONS", default_value = "true", action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    pub(super) run_migrations: bool,
    /// namespace of this deployment's Redis keys: `<prefix>:lock:sku:<SKU>`,
    /// `<prefix>:fence:sku:<SKU>`, and the holds' delayed queue `<prefix>:holds:due` on the
    /// first `REDIS_URLS` node (see [security.md](security.md#redis-keys))
    #[arg(long, env = "REDIS_KEY_PREFIX", default_value = "flashgate")]
    pub(super) redis_key_prefix: String,
    /// size of each of the process's two Postgres pools: the requests' (reads, admin API,
    /// payment webhooks, health) and the deciders' (purchase batches and order transitions, on
    /// their own thread: [architecture.md](architecture.md)); a process opens at most twice this
    /// many connections, lazily
    #[arg(long, env = "DB_MAX_CONNECTIONS", default_value = "16", value_parser = values::trimmed::<u32>)]
    pub(super) db_max_connections: u32,
    /// waiting longer for a connection answers 503
    #[arg(long, env = "DB_ACQUIRE_TIMEOUT_MS", default_value = "2000", value_parser = values::millis)]
    pub(super) db_acquire_timeout: Duration,
    /// pool connections that public reads (`GET /v1/skus/{sku}`) may hold at once, at least 1
    /// and below `DB_MAX_CONNECTIONS`; the rest stay for purchases and the admin API; a read
    /// that waits `DB_ACQUIRE_TIMEOUT_MS` for one answers 503
    #[arg(long, env = "DB_READ_MAX_CONNECTIONS", value_parser = values::trimmed::<u32>)]
    pub(super) db_read_max_connections: Option<u32>,
    #[command(flatten)]
    pub(super) retention: Retention,
    /// how often the server reconciles the books (0 = never); see
    /// [operations.md](operations.md#running-a-sale)
    #[arg(long, env = "RECONCILE_INTERVAL_SECS", default_value = "60", value_parser = values::secs)]
    pub(super) reconcile_interval: Duration,
    #[command(flatten)]
    pub(super) purchase: PurchaseSettings,
    #[command(flatten)]
    pub(super) http: HttpSettings,
    #[command(flatten)]
    pub(super) logging: LogSettings,
}

/// What `origin reconcile` declares: the database and the retention.
#[derive(Args)]
pub(super) struct ReconcileEnvironment {
    #[arg(long, env = "DATABASE_URL")]
    pub(super) database_url: Option<String>,
    #[command(flatten)]
    pub(super) database_tls: DatabaseTlsSettings,
    #[command(flatten)]
    pub(super) retention: Retention,
}
