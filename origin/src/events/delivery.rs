//! Webhook delivery, in every origin process, off the request path: claim due deliveries
//! (`store::webhooks::claim`: at most `WEBHOOK_MAX_IN_FLIGHT` in flight per endpoint across the
//! processes, one order's events one at a time and in order), POST each signed event
//! (`super::signing`) with the `WEBHOOK_TIMEOUT_MS` timeout and no redirect followed, and record
//! what the endpoint answered (`store::webhooks::record`):
//!
//! - 2xx: delivered (the delivery is deleted).
//! - 410: the endpoint is gone — disabled (`gone`); its deliveries wait for it to be enabled.
//! - 429 or 503 with `Retry-After`: deferred by that delay, capped by the schedule's next step,
//!   without spending an attempt — while the whole schedule's span from the first attempt
//!   allows it.
//! - anything else (another status, a redirect, a timeout, no connection): an attempt spent,
//!   retried after the next delay of `WEBHOOK_RETRY_SCHEDULE` (±10 % jitter); after the last one
//!   the endpoint is disabled (`failing`), counted and alerted on.
//!
//! A process that dies mid-delivery spends no attempt: its claim lapses (after twice
//! `WEBHOOK_TIMEOUT_MS`: the request's time, and as long again to record its outcome) and
//! another process sends the delivery again — at least once; receivers deduplicate on
//! `webhook-id`.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use secrecy::ExposeSecret;
use sqlx::PgPool;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;
use uuid::Uuid;

use super::client::{SendError, WebhookClient};
use super::metrics::{DeliveryLabels, DisabledLabels, EndpointLabels, EventMetrics};
use super::signing;
use super::wire::Event;
use crate::settings::WebhookSettings;
use crate::store::events::{self as events_store, EventRow};
use crate::store::webhooks::{self as store, Claimed, DeliveryKey, Outcome};

/// How long the claimer waits for a slot to free up or new deliveries to be due.
const IDLE: Duration = Duration::from_millis(50);
/// The least time between two claims that found work: slots freed meanwhile are claimed
/// together, in one transaction.
const CLAIM_EVERY: Duration = Duration::from_millis(10);
/// How long acknowledgements wait for others, to be recorded together in one statement.
const ACK_LINGER: Duration = Duration::from_millis(5);
/// Most acknowledgements recorded in one statement.
const ACK_MAX: usize = 1000;
/// How long it rests after a database error.
const AFTER_ERROR: Duration = Duration::from_secs(1);
/// The deliveries' `User-Agent`.
const USER_AGENT: &str = concat!("Flashgate-Webhooks/", env!("CARGO_PKG_VERSION"));
/// How often a process writes a failing endpoint's `last_error` at most (its row is locked by
/// every claim: a write per failure would make it a hot row).
const NOTE_EVERY: Duration = Duration::from_millis(100);
/// Most characters of an error kept on the endpoint (its `last_error`).
const ERROR_CHARS: usize = 300;

/// The sender of one process.
pub(crate) struct Deliverer {
    pool: PgPool,
    client: WebhookClient,
    settings: WebhookSettings,
    metrics: Arc<EventMetrics>,
    /// Woken when a delivery finished (a slot is free).
    done: Arc<Notify>,
    /// Acknowledged deliveries, recorded together by [`record_acks`].
    acks: mpsc::UnboundedSender<(DeliveryKey, Uuid)>,
    acks_rx: std::sync::Mutex<Option<mpsc::UnboundedReceiver<(DeliveryKey, Uuid)>>>,
    /// When this process last wrote each endpoint's `last_error` (see [`NOTE_EVERY`]).
    noted: std::sync::Mutex<std::collections::HashMap<Uuid, std::time::Instant>>,
}

/// What one attempt ended with, before it is recorded.
#[derive(Debug)]
enum Answer {
    Acknowledged,
    Gone,
    /// 429/503 with a `Retry-After` of this long.
    RetryAfter(Duration, String),
    Failed {
        result: &'static str,
        error: String,
    },
}

impl Deliverer {
    /// The sender, with its HTTP client (`super::client`: no redirects, `settings.timeout` for
    /// the whole exchange).
    pub(crate) fn new(
        pool: PgPool,
        settings: WebhookSettings,
        metrics: Arc<EventMetrics>,
    ) -> Result<Self, rustls::Error> {
        let (acks, acks_rx) = mpsc::unbounded_channel();
        Ok(Self {
            pool,
            client: WebhookClient::new(settings.timeout)?,
            settings,
            metrics,
            done: Arc::new(Notify::new()),
            acks,
            acks_rx: std::sync::Mutex::new(Some(acks_rx)),
            noted: std::sync::Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// Claims and sends forever. Dropping the task aborts the sends in flight: their claims
    /// lapse and another process sends them.
    pub(crate) async fn run(self) {
        let this = Arc::new(self);
        let mut sending = JoinSet::new();
        let acks = this
            .acks_rx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(acks) = acks {
            sending.spawn(record_acks(this.pool.clone(), acks, this.done.clone()));
        }
        // The request's time, and as long again to record the outcome.
        let ttl = this.settings.timeout * 2;
        let max = i32::try_from(this.settings.max_in_flight).unwrap_or(i32::MAX);
        loop {
            while sending.try_join_next().is_some() {}
            let token = Uuid::new_v4();
            let claimed = match store::claim(&this.pool, token, ttl, max).await {
                Ok(claimed) => claimed,
                Err(e) => {
                    tracing::warn!(error = %e, "webhook claim failed");
                    tokio::time::sleep(AFTER_ERROR).await;
                    continue;
                }
            };
            if claimed.is_empty() {
                let _ = tokio::time::timeout(IDLE, this.done.notified()).await;
                continue;
            }
            let positions: Vec<_> = claimed.iter().map(|c| c.key.position).collect();
            let rows = match events_store::at_positions(&this.pool, &positions).await {
                Ok(rows) => rows,
                Err(e) => {
                    // The claims lapse and are taken again.
                    tracing::warn!(error = %e, "reading claimed events failed");
                    tokio::time::sleep(AFTER_ERROR).await;
                    continue;
                }
            };
            for claim in claimed {
                let row = rows
                    .binary_search_by_key(&claim.key.position, |r| r.position)
                    .ok()
                    .map(|i| rows[i].clone());
                let this = this.clone();
                sending.spawn(async move {
                    this.deliver(claim, row, token).await;
                    this.done.notify_one();
                });
            }
            tokio::time::sleep(CLAIM_EVERY).await;
        }
    }

    /// Sends one claimed delivery and records what became of it.
    async fn deliver(&self, claim: Claimed, row: Option<EventRow>, token: Uuid) {
        let endpoint = claim.key.endpoint_id.to_string();
        let outcome = match &row {
            // Purged meanwhile (older than the retention): nothing left to send.
            None => Outcome::Delivered,
            Some(row) => {
                let answer = self.post(&claim, row).await;
                self.decide(&claim, row, answer, &endpoint)
            }
        };
        let recorded = match outcome {
            // Recorded with others, in one statement.
            Outcome::Delivered => {
                let _ = self.acks.send((claim.key, token));
                return;
            }
            outcome => {
                let note = self.note(claim.key.endpoint_id);
                store::record(&self.pool, claim.key, token, &outcome, note).await
            }
        };
        if let Err(e) = recorded {
            // The claim lapses and the delivery is sent again: at least once.
            tracing::warn!(error = %e, endpoint = %endpoint, "recording a webhook delivery failed");
        }
    }

    /// Whether to write this failure on the endpoint's row: at most every [`NOTE_EVERY`] per
    /// endpoint and process.
    fn note(&self, endpoint: Uuid) -> bool {
        let mut noted = self.noted.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        match noted.get(&endpoint) {
            Some(at) if now.duration_since(*at) < NOTE_EVERY => false,
            _ => {
                noted.insert(endpoint, now);
                true
            }
        }
    }

    /// POSTs the event to the endpoint, signed now.
    async fn post(&self, claim: &Claimed, row: &EventRow) -> Answer {
        let event = Event::render(row);
        let body = event.to_json();
        let timestamp = Utc::now().timestamp();
        let keys = std::iter::once(claim.secret.expose_secret())
            .chain(claim.previous_secret.as_ref().map(|k| k.expose_secret()));
        let signature = signing::header(keys, &event.id, timestamp, body.as_bytes());
        let mut headers = http::HeaderMap::new();
        let header = |v: &str| http::HeaderValue::from_str(v).ok();
        for (name, value) in [
            ("content-type", header("application/json")),
            ("user-agent", header(USER_AGENT)),
            ("webhook-id", header(&event.id)),
            ("webhook-timestamp", header(&timestamp.to_string())),
            ("webhook-signature", header(&signature)),
        ] {
            if let Some(value) = value {
                headers.insert(name, value);
            }
        }
        let (status, answer) = match self.client.post(&claim.url, headers, body).await {
            Ok(answer) => answer,
            Err(e @ SendError::Timeout(_)) => {
                return Answer::Failed {
                    result: "timeout",
                    error: e.to_string(),
                };
            }
            Err(e @ SendError::Unreachable(_)) => {
                return Answer::Failed {
                    result: "unreachable",
                    error: truncated(&e.to_string()),
                };
            }
        };
        if status.is_success() {
            return Answer::Acknowledged;
        }
        if status == http::StatusCode::GONE {
            return Answer::Gone;
        }
        let error = format!("answered {status}");
        if matches!(status.as_u16(), 429 | 503) {
            if let Some(after) = answer
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(retry_after)
            {
                return Answer::RetryAfter(after, error);
            }
        }
        if status.is_redirection() {
            return Answer::Failed {
                result: "failed",
                error: format!("{error} (redirects are not followed)"),
            };
        }
        Answer::Failed {
            result: "failed",
            error,
        }
    }

    /// What an answer means for the delivery (see the module docs), counted.
    fn decide(&self, claim: &Claimed, row: &EventRow, answer: Answer, endpoint: &str) -> Outcome {
        let count = |result: &'static str| {
            self.metrics
                .deliveries
                .get_or_create(&DeliveryLabels {
                    endpoint: endpoint.to_owned(),
                    result,
                })
                .inc();
        };
        let schedule = &self.settings.schedule;
        let now = Utc::now();
        // The schedule's whole span from the first attempt (with the jitter's 10 %): deferrals do
        // not stretch a delivery past it.
        let span: Duration = schedule.iter().sum::<Duration>().mul_f64(1.1);
        let deadline =
            claim.first_attempt_at + chrono::Duration::from_std(span).unwrap_or_default();
        let spent = usize::try_from(claim.attempts).unwrap_or(usize::MAX);
        let disable = |reason: &'static str, error: String| {
            self.metrics
                .disabled
                .get_or_create(&DisabledLabels { reason })
                .inc();
            tracing::warn!(endpoint = %endpoint, reason, error = %error, "webhook endpoint disabled");
            Outcome::Disable { reason, error }
        };
        match answer {
            Answer::Acknowledged => {
                count("delivered");
                let lag = (now - row.at).num_milliseconds().max(0) as f64 / 1000.0;
                self.metrics
                    .delivery_lag
                    .get_or_create(&EndpointLabels {
                        endpoint: endpoint.to_owned(),
                    })
                    .observe(lag);
                Outcome::Delivered
            }
            Answer::Gone => {
                count("gone");
                disable("gone", "answered 410 Gone".to_owned())
            }
            Answer::RetryAfter(after, error) => {
                count("deferred");
                // Capped by the delay the next attempt would have had.
                let cap = schedule
                    .get(spent + 1)
                    .or(schedule.last())
                    .copied()
                    .unwrap_or_default();
                let next_at = now + chrono::Duration::from_std(after.min(cap)).unwrap_or_default();
                if next_at > deadline {
                    disable(
                        "failing",
                        format!("{error}; still deferred after the whole retry schedule"),
                    )
                } else {
                    Outcome::Retry {
                        next_at,
                        spent: false,
                        error,
                    }
                }
            }
            Answer::Failed { result, error } => {
                count(result);
                let spent = spent + 1;
                match schedule.get(spent) {
                    Some(delay) => Outcome::Retry {
                        next_at: now
                            + chrono::Duration::from_std(jittered(*delay)).unwrap_or_default(),
                        spent: true,
                        error,
                    },
                    None => disable(
                        "failing",
                        format!("{error}; still failing after {spent} attempts"),
                    ),
                }
            }
        }
    }
}

/// Records acknowledged deliveries in batches: the first waits [`ACK_LINGER`] for others (at
/// most [`ACK_MAX`] per statement). A failed statement is logged: those claims lapse and the
/// deliveries are sent again (at least once). Wakes the claimer once recorded (an order's next
/// event may now go).
async fn record_acks(
    pool: PgPool,
    mut acks: mpsc::UnboundedReceiver<(DeliveryKey, Uuid)>,
    done: Arc<Notify>,
) {
    while let Some(first) = acks.recv().await {
        tokio::time::sleep(ACK_LINGER).await;
        let mut batch = vec![first];
        while batch.len() < ACK_MAX {
            match acks.try_recv() {
                Ok(ack) => batch.push(ack),
                Err(_) => break,
            }
        }
        if let Err(e) = store::acknowledge(&pool, &batch).await {
            tracing::warn!(error = %e, deliveries = batch.len(), "recording acknowledged webhook deliveries failed");
        }
        done.notify_one();
    }
}

/// `delay` ±10 % (none for 0), so that retries of many deliveries spread out.
fn jittered(delay: Duration) -> Duration {
    if delay.is_zero() {
        return delay;
    }
    delay.mul_f64(0.9 + 0.2 * rand::random::<f64>())
}

/// A `Retry-After` value: delta-seconds, or an HTTP date (RFC 9110 §10.2.3).
fn retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at: DateTime<Utc> = DateTime::parse_from_rfc2822(value).ok()?.into();
    Some((at - Utc::now()).to_std().unwrap_or_default())
}

fn truncated(s: &str) -> String {
    s.chars().take(ERROR_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        assert_eq!(retry_after(" 120 "), Some(Duration::from_secs(120)));
        let later = (Utc::now() + chrono::Duration::seconds(90)).to_rfc2822();
        let d = retry_after(&later).expect("a date");
        assert!((85..=90).contains(&d.as_secs()), "{d:?}");
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("soon"), None);
    }

    #[test]
    fn jitter_stays_within_ten_percent() {
        for _ in 0..1000 {
            let d = jittered(Duration::from_secs(100));
            assert!(
                d >= Duration::from_secs(90) && d <= Duration::from_secs(110),
                "{d:?}"
            );
        }
        assert_eq!(jittered(Duration::ZERO), Duration::ZERO);
    }
}
