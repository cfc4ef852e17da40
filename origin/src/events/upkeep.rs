//! The outbox's upkeep, in every origin process, off the request path: the sequencer, which
//! gives committed transactions their commit number (what makes their events readable, in
//! order: `store::events::number`), and the retention purge (`EVENT_RETENTION_DAYS`). Several
//! processes run both; the sequencer's row lock lets one pass at a time number, the purge is
//! idempotent.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;

use super::metrics::{EventMetrics, TypeLabels};
use crate::store::events as store;

/// Most transactions one sequencer pass numbers.
const PASS_MAX: i64 = 10_000;
/// How long the sequencer rests when it found nothing to number (or another process is on it).
pub(crate) const IDLE: Duration = Duration::from_millis(25);
/// How long it rests after a database error.
const AFTER_ERROR: Duration = Duration::from_secs(1);
/// How often the retention purge runs.
const PURGE_EVERY: Duration = Duration::from_secs(600);

/// Numbers committed events, forever.
pub(crate) async fn sequencer(pool: PgPool, metrics: Arc<EventMetrics>) {
    loop {
        match store::number(&pool, PASS_MAX).await {
            Ok(Some(numbered)) if !numbered.is_empty() => {
                for n in &numbered {
                    metrics
                        .events
                        .get_or_create(&TypeLabels {
                            r#type: n.event_type.clone(),
                        })
                        .inc_by(u64::try_from(n.events).unwrap_or(0));
                    metrics.feed_lag.observe(n.lag.max(0.0));
                }
                // More may be waiting: go on at once.
            }
            Ok(_) => tokio::time::sleep(IDLE).await,
            Err(e) => {
                tracing::warn!(error = %e, "event sequencer pass failed");
                tokio::time::sleep(AFTER_ERROR).await;
            }
        }
    }
}

/// Purges the events older than `retention`, every [`PURGE_EVERY`].
pub(crate) async fn purge(pool: PgPool, retention: Duration) {
    let mut every = tokio::time::interval(PURGE_EVERY);
    loop {
        every.tick().await;
        let Ok(retention) = chrono::Duration::from_std(retention) else {
            return;
        };
        match store::purge(&pool, chrono::Utc::now() - retention).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(purged = n, "purged events older than the retention"),
            Err(e) => tracing::warn!(error = %e, "event purge failed"),
        }
    }
}
