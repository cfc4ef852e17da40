//! The outbox's upkeep, in every origin process, off the request path: the sequencer, which
//! gives committed transactions their commit number (what makes their events readable, in
//! order: `store::events::number`), the webhook dispatcher, which fans the feed out to the
//! endpoints (`store::webhooks::dispatch`), the endpoints' gauges, and the retention purge
//! (`EVENT_RETENTION_DAYS`). Every process runs them all; the sequencer's and the dispatcher's
//! row locks let one pass of each at a time run, the purge is idempotent.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;

use super::metrics::{EndpointLabels, EventMetrics, TypeLabels};
use crate::store::events as store;
use crate::store::webhooks;

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

/// Most events one dispatcher pass fans out.
const DISPATCH_MAX: i64 = 2_000;
/// How often the endpoints' gauges are read from the database.
const STATS_EVERY: Duration = Duration::from_secs(2);

/// Fans the feed out to the webhook endpoints, forever; deliveries are due `first_delay` after
/// (the first delay of `WEBHOOK_RETRY_SCHEDULE`, normally 0).
pub(crate) async fn dispatcher(pool: PgPool, first_delay: Duration) {
    loop {
        match webhooks::dispatch(&pool, DISPATCH_MAX, first_delay).await {
            Ok(Some((events, _))) if events > 0 => {}
            Ok(_) => tokio::time::sleep(IDLE).await,
            Err(e) => {
                tracing::warn!(error = %e, "webhook dispatch failed");
                tokio::time::sleep(AFTER_ERROR).await;
            }
        }
    }
}

/// Sets the endpoints' gauges (pending, oldest pending, enabled) every [`STATS_EVERY`].
pub(crate) async fn endpoint_stats(pool: PgPool, metrics: Arc<EventMetrics>) {
    let mut every = tokio::time::interval(STATS_EVERY);
    let mut shown: Vec<String> = Vec::new();
    loop {
        every.tick().await;
        let stats = match webhooks::stats(&pool).await {
            Ok(stats) => stats,
            Err(e) => {
                tracing::debug!(error = %e, "reading the webhook endpoints' numbers failed");
                continue;
            }
        };
        let now: Vec<String> = stats.iter().map(|s| s.id.to_string()).collect();
        for gone in shown.iter().filter(|id| !now.contains(id)) {
            let labels = EndpointLabels {
                endpoint: gone.clone(),
            };
            metrics.pending.remove(&labels);
            metrics.oldest_pending.remove(&labels);
            metrics.enabled.remove(&labels);
        }
        for s in &stats {
            let labels = EndpointLabels {
                endpoint: s.id.to_string(),
            };
            metrics.pending.get_or_create(&labels).set(s.pending);
            metrics
                .oldest_pending
                .get_or_create(&labels)
                .set(s.oldest_secs as i64);
            metrics
                .enabled
                .get_or_create(&labels)
                .set(i64::from(s.enabled));
        }
        shown = now;
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
