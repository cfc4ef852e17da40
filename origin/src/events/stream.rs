//! The event stream: every event appended once, in feed order, to a Redis stream
//! (`EVENTS_STREAM_URL`, key `EVENTS_STREAM_KEY`) for shops whose services consume with consumer
//! groups (`XREADGROUP`, `XACK`, `XAUTOCLAIM`; docs/operations.md). A background task of every
//! process, off the request path; one appends at a time (a Postgres advisory lock).
//!
//! Each entry's ID is the event's position (`<commit>-<seq>`), and its fields are `id` (the
//! event id), `type` and `event` (the event's JSON, as the feed and the webhooks carry it). The
//! stream itself is the appender's cursor: each pass reads the feed after the stream's
//! `last-generated-id` and appends that page with one Lua script that `XADD`s each entry with its
//! explicit ID — Redis refuses an ID at or below its top, so an append repeated after a crash (or
//! by a second appender) is refused by Redis itself and counted as a duplicate, never added
//! twice. A stream that was lost (a Redis without persistence that restarted) is filled again
//! from the oldest event kept. The stream is trimmed to the feed's retention (`XTRIM MINID`
//! at the feed's horizon).

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use sqlx::PgPool;

use super::metrics::EventMetrics;
use super::wire::Event;
use crate::settings::StreamSettings;
use crate::store::events::{self as store, PageError, Position};

/// Events appended per pass (one script call).
const PAGE: u32 = 500;
/// Longest a Redis command may take.
const OP_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the appender rests when there was nothing to append (or another process appends).
const IDLE: Duration = Duration::from_millis(25);
/// How long it rests after an error (the Redis or the database cannot be had).
const AFTER_ERROR: Duration = Duration::from_millis(500);
/// How often the appender looks whether the retention purge moved the feed's horizon (then it
/// trims the stream to it).
const TRIM_EVERY: Duration = Duration::from_secs(1);

/// Appends `ARGV` (triples of entry ID, event id, type, event JSON — four per entry) to the
/// stream `KEYS[1]`; an ID at or below the stream's top is refused by `XADD` and counted.
/// Returns `{appended, refused}`.
const APPEND: &str = r"
local appended, refused = 0, 0
for i = 1, #ARGV, 4 do
  local ok = redis.pcall('XADD', KEYS[1], ARGV[i], 'id', ARGV[i + 1], 'type', ARGV[i + 2], 'event', ARGV[i + 3])
  if type(ok) == 'table' and ok.err then
    refused = refused + 1
  else
    appended = appended + 1
  end
end
return {appended, refused}
";

/// Why a pass failed (logged and retried).
#[derive(Debug, thiserror::Error)]
enum StreamError {
    #[error("event stream Redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("event stream Redis did not answer within {OP_TIMEOUT:?}")]
    Timeout,
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Page(#[from] PageError),
}

/// The appender of one process.
pub(crate) struct Appender {
    pool: PgPool,
    connection: ConnectionManager,
    key: String,
    append: redis::Script,
    metrics: Arc<EventMetrics>,
}

impl Appender {
    /// The appender to `client`'s Redis (connected lazily, reconnected in the background).
    pub(crate) fn new(
        pool: PgPool,
        client: redis::Client,
        settings: &StreamSettings,
        metrics: Arc<EventMetrics>,
    ) -> Result<Self, redis::RedisError> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(OP_TIMEOUT))
            .set_response_timeout(Some(OP_TIMEOUT))
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(2))
            .set_number_of_retries(1);
        Ok(Self {
            pool,
            connection: ConnectionManager::new_lazy_with_config(client, config)?,
            key: settings.key.clone(),
            append: redis::Script::new(APPEND),
            metrics,
        })
    }

    /// Appends forever.
    pub(crate) async fn run(self) {
        let mut trimmed = Instant::now()
            .checked_sub(TRIM_EVERY)
            .unwrap_or_else(Instant::now);
        let mut trimmed_to = Position::default();
        loop {
            let rest = match self.pass().await {
                Ok(Some(appended)) if appended > 0 => Duration::ZERO,
                Ok(_) => IDLE,
                Err(e) => {
                    self.metrics.stream_errors.inc();
                    tracing::warn!(error = %e, "event stream append failed; retrying");
                    AFTER_ERROR
                }
            };
            if trimmed.elapsed() >= TRIM_EVERY {
                trimmed = Instant::now();
                match self.trim(trimmed_to).await {
                    Ok(horizon) => trimmed_to = horizon,
                    Err(e) => tracing::warn!(error = %e, "event stream trim failed"),
                }
            }
            tokio::time::sleep(rest).await;
        }
    }

    async fn redis<T>(
        &self,
        call: impl AsyncFnOnce(&mut ConnectionManager) -> redis::RedisResult<T>,
    ) -> Result<T, StreamError> {
        let mut connection = self.connection.clone();
        match tokio::time::timeout(OP_TIMEOUT, call(&mut connection)).await {
            Ok(result) => Ok(result?),
            Err(_) => Err(StreamError::Timeout),
        }
    }

    /// The stream's `last-generated-id` (`None`: no stream yet).
    async fn top(&self) -> Result<Option<Position>, StreamError> {
        let key = self.key.clone();
        let exists: bool = self
            .redis(async move |c| redis::cmd("EXISTS").arg(&key).query_async(c).await)
            .await?;
        if !exists {
            return Ok(None);
        }
        let key = self.key.clone();
        let info: redis::Value = self
            .redis(async move |c| {
                redis::cmd("XINFO")
                    .arg("STREAM")
                    .arg(&key)
                    .query_async(c)
                    .await
            })
            .await?;
        Ok(last_generated_id(&info))
    }

    /// One pass, under the appender lock: the page of the feed after the stream's top, appended.
    /// `None` when another process holds the lock; else how many entries were appended.
    async fn pass(&self) -> Result<Option<u64>, StreamError> {
        let Some(lock) = store::try_lock_stream(&self.pool).await? else {
            return Ok(None);
        };
        let top = self.top().await?;
        let page = match store::page(&self.pool, top, PAGE, None).await {
            Err(PageError::CursorExpired { after, horizon }) => {
                // The stream fell behind the retention: what was purged cannot be appended.
                tracing::error!(%after, %horizon, "the event stream is behind the retention: events purged before they were appended");
                self.metrics.stream_errors.inc();
                store::page(&self.pool, None, PAGE, None).await?
            }
            other => other?,
        };
        if page.events.is_empty() {
            lock.release().await?;
            return Ok(Some(0));
        }
        let mut args: Vec<String> = Vec::with_capacity(page.events.len() * 4);
        for row in &page.events {
            let event = Event::render(row);
            args.push(event.position.clone());
            args.push(event.id.clone());
            args.push(event.event_type.clone());
            args.push(event.to_json());
        }
        let key = self.key.clone();
        let script = self.append.clone();
        let (appended, refused): (u64, u64) = self
            .redis(async move |c| script.key(&key).arg(&args).invoke_async(c).await)
            .await?;
        lock.release().await?;
        let now = chrono::Utc::now();
        self.metrics.stream_appended.inc_by(appended);
        for row in &page.events {
            let lag = (now - row.at).num_milliseconds().max(0) as f64 / 1000.0;
            self.metrics.stream_lag.observe(lag);
        }
        if refused > 0 {
            tracing::info!(
                refused,
                "event stream: entries already appended were refused by Redis"
            );
        }
        Ok(Some(appended))
    }

    /// Trims the stream to the feed's retention when the horizon moved past `done`: entries at
    /// or below it go. The horizon trimmed to.
    async fn trim(&self, done: Position) -> Result<Position, StreamError> {
        let horizon = store::horizon(&self.pool).await?;
        if horizon <= done {
            return Ok(done);
        }
        let key = self.key.clone();
        let min = format!("{}-{}", horizon.commit, horizon.seq.saturating_add(1));
        let trimmed: i64 = self
            .redis(async move |c| {
                redis::cmd("XTRIM")
                    .arg(&key)
                    .arg("MINID")
                    .arg(&min)
                    .query_async(c)
                    .await
            })
            .await?;
        if trimmed > 0 {
            tracing::info!(trimmed, "event stream trimmed to the retention");
        }
        Ok(horizon)
    }
}

/// `last-generated-id` of an `XINFO STREAM` answer (RESP2: a flat list of names and values;
/// RESP3: a map).
fn last_generated_id(info: &redis::Value) -> Option<Position> {
    let text = |v: &redis::Value| match v {
        redis::Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        redis::Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let id = match info {
        redis::Value::Array(items) => items
            .chunks(2)
            .find(|kv| text(&kv[0]).as_deref() == Some("last-generated-id"))
            .and_then(|kv| kv.get(1).and_then(text)),
        redis::Value::Map(pairs) => pairs
            .iter()
            .find(|(k, _)| text(k).as_deref() == Some("last-generated-id"))
            .and_then(|(_, v)| text(v)),
        _ => None,
    }?;
    // A stream whose top is 0-0 (created, never appended to) has nothing.
    id.parse()
        .ok()
        .filter(|p: &Position| *p != Position::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_top_is_read_from_both_protocols() {
        let bulk = |s: &str| redis::Value::BulkString(s.as_bytes().to_vec());
        let resp2 = redis::Value::Array(vec![
            bulk("length"),
            redis::Value::Int(3),
            bulk("last-generated-id"),
            bulk("12-345"),
        ]);
        assert_eq!(
            last_generated_id(&resp2),
            Some(Position {
                commit: 12,
                seq: 345
            })
        );
        let resp3 = redis::Value::Map(vec![(bulk("last-generated-id"), bulk("0-0"))]);
        assert_eq!(last_generated_id(&resp3), None);
    }
}
