//! Building and running the origin: connect the pool and the lock, run migrations, bind the
//! listener (and the HTTPS one, when configured), serve until the shutdown future resolves.
//! Tests call [`Application::build`] with `LISTEN_ADDR` port 0 and read [`Application::port`]
//! (and [`Application::tls_port`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use secrecy::ExposeSecret;
use tokio::net::TcpListener;

use crate::hold_queue::HoldQueue;
use crate::lease::SkuLocks;
use crate::metrics::Metrics;
use crate::orders::OrderService;
use crate::pseudonym::Pseudonyms;
use crate::purchase::expire::HoldExpiry;
use crate::purchase::knowledge::SaleKnowledge;
use crate::purchase::runtime::Deciders;
use crate::purchase::{Context, PurchaseService};
use crate::routes::{self, AppState, Credentials, SharedState};
use crate::settings::{HttpSettings, Settings};
use crate::tls::{self, RedisTls};
use crate::{server, store, telemetry};
use redlock::{Redlock, RedlockConfig};

/// How often stored idempotency outcomes older than the retention are purged.
const PURGE_EVERY: Duration = Duration::from_secs(600);
/// How long a stopping origin waits for the deciders' pool to close its connections.
const POOL_CLOSE: Duration = Duration::from_secs(5);

/// A built, bound, not yet serving origin.
#[derive(Debug)]
pub struct Application {
    listener: TcpListener,
    /// The HTTPS listener (`TLS_LISTEN_ADDR`) and its reloadable TLS configuration.
    tls: Option<(TcpListener, Arc<server::tls::ServerTls>)>,
    state: AppState,
    http: HttpSettings,
    purge: tokio::task::JoinHandle<()>,
    /// The hold expiry loop (`orders::expiry`).
    expiry: tokio::task::JoinHandle<()>,
    /// The deciders' pool (`purchase::runtime`), closed when the origin stops.
    decide_pool: sqlx::PgPool,
}

impl Application {
    /// Connects, migrates (unless disabled) and binds. Postgres and Redis may be down: the pool
    /// and the lock connect lazily and requests answer 503 until they are back.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        tls::install_crypto_provider();
        let options = store::connect_options(
            settings.database_url.expose_secret(),
            &settings.database_tls,
        )
        .context("invalid DATABASE_URL")?;
        let pool = store::pool_with(
            options,
            settings.db_max_connections,
            settings.db_acquire_timeout,
        );
        Self::build_with_pool(settings, pool).await
    }

    /// Like [`Application::build`] with an existing pool (tests pass `#[sqlx::test]`'s).
    pub async fn build_with_pool(settings: Settings, pool: sqlx::PgPool) -> anyhow::Result<Self> {
        if settings.run_migrations {
            sqlx::migrate!("./migrations")
                .run(&pool)
                .await
                .context("running database migrations")?;
        }
        tls::install_crypto_provider();
        let (metrics, registry) = Metrics::new();
        let metrics = Arc::new(metrics);
        let redis_tls =
            RedisTls::load(&settings.redis_tls).context("loading the Redis TLS files")?;
        let clients = redis_tls
            .clients(&settings.redis_urls)
            .context("configuring the Redis nodes")?;
        let breaker = &settings.redlock_breaker;
        let config = RedlockConfig {
            // One namespace: the lock's keys are `<REDIS_KEY_PREFIX>:lock:sku:<SKU>` and
            // `<REDIS_KEY_PREFIX>:fence:sku:<SKU>` (the combiner passes `sku:<SKU>`); the restart
            // guard's per-node keys keep the lock's own `redlock:node:*`.
            key_prefix: format!("{}:", settings.redis_key_prefix),
            // The longest lease the origin takes, hence the restart guard's window: a node that
            // came back empty sits out one `LOCK_TTL_MS` (as documented), not the library's 10 s.
            max_ttl: settings.purchase.lock_ttl,
            breaker_failure_threshold: breaker.failure_threshold,
            breaker_base_backoff: breaker.base_backoff,
            breaker_max_backoff: breaker.max_backoff,
            quorum_loss_grace: settings.redlock_quorum_loss_grace,
            ..RedlockConfig::default()
        };
        // The combiners' thread, and what they talk to Postgres and Redis with, opened there
        // (`purchase::runtime`): their own pool, and the lock's node connections.
        let deciders = Deciders::start().context("starting the deciders' thread")?;
        let (decide_pool, lock) = {
            let options = (*pool.connect_options()).clone();
            let (max, acquire) = (settings.db_max_connections, settings.db_acquire_timeout);
            let (clients, metrics) = (clients.clone(), metrics.redlock.clone());
            deciders
                .spawn(async move {
                    let lock = Redlock::connect_clients(clients, config, metrics).await;
                    (store::pool_with(options, max, acquire), lock)
                })
                .await
                .context("starting the deciders' thread")?
        };
        let lock = lock
            .context("configuring Redlock from REDIS_URLS")?
            .with_audit(telemetry::LockAudit);
        // The holds' delayed queue lives on the first Redis node (docs/reliability.md).
        let holds = HoldQueue::new(clients.first().cloned(), &settings.redis_key_prefix);
        let locks = SkuLocks::new(lock.clone(), &settings.purchase, metrics.clone());
        let knowledge = Arc::new(SaleKnowledge::new());
        let hold_expiry = HoldExpiry::new(decide_pool.clone(), knowledge.clone(), metrics.clone());
        let purchases = PurchaseService::new(
            Context::new(
                decide_pool.clone(),
                locks.clone(),
                knowledge.clone(),
                metrics.clone(),
                settings.purchase.clone(),
                holds.clone(),
                hold_expiry.clone(),
            ),
            deciders,
        );
        let orders = OrderService::new(
            decide_pool.clone(),
            locks,
            hold_expiry,
            knowledge,
            metrics.clone(),
            holds.clone(),
            settings.purchase.request_deadline,
        );
        let expiry = tokio::spawn(crate::orders::expiry::run(orders.clone(), holds));
        let listener = server::bind(settings.listen_addr)
            .with_context(|| format!("binding LISTEN_ADDR {}", settings.listen_addr))?;
        let tls = match &settings.listener_tls {
            None => None,
            Some(files) => {
                let tls = server::tls::ServerTls::load(files.clone(), metrics.clone())
                    .context("loading the HTTPS listener's TLS files")?;
                let listener = server::bind(files.listen_addr)
                    .with_context(|| format!("binding TLS_LISTEN_ADDR {}", files.listen_addr))?;
                Some((listener, Arc::new(tls)))
            }
        };
        let pseudonyms = match &settings.log_hash_key {
            Some(key) => Pseudonyms::new(key.expose_secret().as_bytes()),
            None => {
                tracing::warn!(
                    "LOG_HASH_KEY is not set: log pseudonyms of users and keys differ between processes"
                );
                Pseudonyms::random()
            }
        };
        let purge = tokio::spawn(maintenance_loop(
            pool.clone(),
            settings.idempotency_retention,
            settings.reconcile_interval,
            metrics.clone(),
            pseudonyms.clone(),
        ));
        // Key ids and counts only (never a secret): what a rotation step has to be checked against.
        tracing::info!(
            edge_key_ids = ?settings.edge_secrets.kids().map(|k| k.as_str()).collect::<Vec<_>>(),
            accept_signature_v1 = settings.accept_signature_v1,
            admin_tokens = settings.admin_tokens.len(),
            payment_webhook_secrets = settings.payment_webhook_secrets.as_ref().map_or(0, |w| w.len()),
            "credentials loaded"
        );
        let payments = settings.payment_webhook_secrets.clone().map(|secrets| {
            crate::payments::PaymentWebhooks::new(
                secrets,
                pool.clone(),
                orders.clone(),
                settings.payment_webhook_max_concurrency,
                settings.db_acquire_timeout,
            )
        });
        let state = AppState::new(SharedState {
            pool,
            purchases,
            orders,
            payments,
            lock,
            metrics,
            registry,
            credentials: Credentials {
                edge_secrets: settings.edge_secrets.clone(),
                accept_signature_v1: settings.accept_signature_v1,
                admin_tokens: settings.admin_tokens.clone(),
            },
            pseudonyms,
            reads: routes::reads::ReadGate::new(
                settings.db_read_max_connections,
                settings.db_acquire_timeout,
            ),
            readiness: Default::default(),
            doc: crate::openapi::ServedDoc::render(&routes::document()),
        });
        Ok(Self {
            listener,
            tls,
            state,
            http: settings.http.clone(),
            purge,
            expiry,
            decide_pool,
        })
    }

    /// The bound port (useful with `LISTEN_ADDR=…:0`).
    pub fn port(&self) -> u16 {
        self.listener.local_addr().map(|a| a.port()).unwrap_or(0)
    }

    /// The HTTPS listener's bound port (useful with `TLS_LISTEN_ADDR=…:0`), when it is on.
    pub fn tls_port(&self) -> Option<u16> {
        let (listener, _) = self.tls.as_ref()?;
        listener.local_addr().ok().map(|a| a.port())
    }

    /// The shared state (tests read metrics and the pool through it).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` resolves, then stops accepting and finishes in-flight requests.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let addr = self.listener.local_addr()?;
        let tls_addr = match &self.tls {
            Some((listener, _)) => Some(listener.local_addr()?),
            None => None,
        };
        tracing::info!(%addr, tls_addr = ?tls_addr, max_connections = self.http.max_connections, "origin listening");
        let metrics = self.state.metrics.clone();
        let app = routes::router(self.state, (&self.http).into());
        let mut listeners = vec![server::Listener {
            tcp: self.listener,
            tls: None,
        }];
        let mut tls_watch = None;
        if let Some((tcp, tls)) = self.tls {
            tls_watch = Some(tokio::spawn(server::tls::watch(tls.clone())));
            listeners.push(server::Listener {
                tcp,
                tls: Some(tls),
            });
        }
        server::serve(listeners, app, &self.http, metrics, shutdown).await;
        if let Some(watch) = tls_watch {
            watch.abort();
        }
        self.purge.abort();
        self.expiry.abort();
        // The deciders' pool is the process's own (the request pool may be a caller's): close
        // its connections rather than leave them to the dropped thread.
        let _ = tokio::time::timeout(POOL_CLOSE, self.decide_pool.close()).await;
        tracing::info!("origin stopped");
        Ok(())
    }
}

/// Background upkeep: purges expired idempotency records and reconciles the books, exporting
/// the number of discrepancies (alerted on).
async fn maintenance_loop(
    pool: sqlx::PgPool,
    retention: Duration,
    reconcile_every: Duration,
    metrics: Arc<Metrics>,
    pseudonyms: Pseudonyms,
) {
    let mut last_purge: Option<tokio::time::Instant> = None;
    let tick = if reconcile_every.is_zero() {
        PURGE_EVERY
    } else {
        reconcile_every.min(PURGE_EVERY)
    };
    let mut every = tokio::time::interval(tick);
    loop {
        every.tick().await;
        if last_purge.is_none_or(|t| t.elapsed() >= PURGE_EVERY) {
            last_purge = Some(tokio::time::Instant::now());
            match store::purge_idempotency(&pool, retention).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(purged = n, "purged expired idempotency records"),
                Err(e) => tracing::warn!(error = %e, "idempotency purge failed"),
            }
        }
        if !reconcile_every.is_zero() {
            match crate::reconcile::reconcile(&pool, retention).await {
                Ok(found) => {
                    for d in &found {
                        tracing::error!(discrepancy = %d.redacted(&pseudonyms), "reconciliation discrepancy");
                    }
                    metrics
                        .reconcile_discrepancies
                        .set(i64::try_from(found.len()).unwrap_or(i64::MAX));
                }
                Err(e) => tracing::warn!(error = %e, "reconciliation could not run"),
            }
        }
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { () = ctrl_c => {}, () = term => {} }
    tracing::info!("shutdown signal received");
}
