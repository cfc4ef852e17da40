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

pub mod metrics;
mod stream;
mod upkeep;
mod wire;

use std::sync::Arc;

use sqlx::PgPool;
use tokio::task::JoinHandle;

use crate::settings::EventSettings;
use metrics::EventMetrics;
pub use wire::{Event, EventData, OrderData, SkuData, TYPES, parse_id, wire_id};

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
    ) -> Result<Self, redis::RedisError> {
        let mut tasks = vec![
            tokio::spawn(upkeep::sequencer(pool.clone(), metrics.clone())),
            tokio::spawn(upkeep::purge(pool.clone(), settings.retention)),
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
