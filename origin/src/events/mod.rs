//! Order events leaving Flashgate — beside the purchase path, never on it. The purchase batch,
//! the order transitions and the live-hold payments write their event rows in their own
//! transactions (the store's outbox, `store::events` and the statements next to each change);
//! everything here reads the committed rows afterwards:
//!
//! - `wire`: [`Event`], the one JSON shape of an event — the feed's items (`routes::events`),
//!   the webhook bodies and the stream's entries.
//! - `upkeep`: the sequencer that numbers committed transactions (what makes their events
//!   readable, in commit order) and the retention purge — background tasks of every process,
//!   owned by [`EventTasks`].
//! - `stream`: the appender of the Redis stream (`EVENTS_STREAM_URL`), a task of every process.
//! - Webhooks: `endpoints` (the admin API's operations), the dispatcher in `upkeep` (the feed
//!   fanned out to the endpoints, one pass at a time across processes), `delivery` (every
//!   process claims due deliveries and POSTs them, signed by `signing`).

mod client;
mod delivery;
pub mod endpoints;
pub mod metrics;
mod signing;
mod stream;
mod upkeep;
mod wire;

use std::sync::Arc;

use sqlx::PgPool;
use tokio::task::JoinHandle;

use crate::settings::EventSettings;
use metrics::EventMetrics;
pub use wire::{Event, EventData, OrderData, SkuData, TYPES, parse_id, wire_id};

/// Why the events' tasks cannot start (a configuration the settings could not check).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("EVENTS_STREAM_URL: {0}")]
    Stream(#[from] redis::RedisError),
    #[error("the webhooks' HTTP client: {0}")]
    Client(#[from] rustls::Error),
}

/// The events' background tasks of this process (the sequencer, the purge); dropping it stops
/// them.
#[derive(Debug)]
pub struct EventTasks {
    tasks: Vec<JoinHandle<()>>,
}

impl EventTasks {
    /// Starts the tasks on `pool` (the request pool: a few short statements at a time);
    /// `stream` is the client of `EVENTS_STREAM_URL`'s Redis, when there is one.
    pub fn start(
        pool: PgPool,
        settings: &EventSettings,
        stream: Option<redis::Client>,
        metrics: Arc<EventMetrics>,
    ) -> Result<Self, StartError> {
        let webhooks = &settings.webhooks;
        let first_delay = webhooks.schedule.first().copied().unwrap_or_default();
        let deliverer = delivery::Deliverer::new(pool.clone(), webhooks.clone(), metrics.clone())?;
        let mut tasks = vec![
            tokio::spawn(upkeep::sequencer(pool.clone(), metrics.clone())),
            tokio::spawn(upkeep::purge(pool.clone(), settings.retention)),
            tokio::spawn(upkeep::dispatcher(pool.clone(), first_delay)),
            tokio::spawn(upkeep::endpoint_stats(pool.clone(), metrics.clone())),
            tokio::spawn(deliverer.run()),
        ];
        if let (Some(client), Some(stream)) = (stream, &settings.stream) {
            let appender = stream::Appender::new(pool, client, stream, metrics)?;
            tasks.push(tokio::spawn(appender.run()));
        }
        Ok(Self { tasks })
    }
}

impl Drop for EventTasks {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
