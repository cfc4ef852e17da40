//! The holds' delayed queue, beside the request path: a Redis sorted set `<REDIS_KEY_PREFIX>:holds:due` on the FIRST node
//! of `REDIS_URLS`, scored by each hold's `expires_at` (unix ms), member `<SKU>/<order id>`.
//!
//! It only drives the timing of expiries; the database is the truth. A purchase batch that
//! created holds adds them (`ZADD NX`, after its commit, off the request path); the expiry mover
//! (`orders::expiry`) pops the due ones atomically (one Lua script: `ZRANGEBYSCORE` by the
//! node's own clock + `ZREM`, so one process gets each entry); a payment or a cancellation
//! removes its entry. Every entry is removed when it is popped, so the set holds at most the
//! live holds. An entry lost with the node, a failed `ZADD`, or a mover that crashed after a pop
//! only delays an expiry: the database sweep finds every hold past due.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use shared::Sku;
use uuid::Uuid;

/// Longest a queue command may take; the queue is best effort.
const OP_TIMEOUT: Duration = Duration::from_millis(500);

/// Pops the entries due by the node's clock (at most `ARGV[1]`), atomically.
const POP_DUE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
if #due > 0 then
  redis.call('ZREM', KEYS[1], unpack(due))
end
return due
";

/// Why a queue command failed (logged, never answered: the sweep covers it).
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("no hold queue node configured")]
    Disabled,
    #[error("hold queue node: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("hold queue node did not answer within {OP_TIMEOUT:?}")]
    Timeout,
}

/// The delayed queue of holds; cheap to clone.
#[derive(Clone)]
pub struct HoldQueue {
    connection: Option<ConnectionManager>,
    key: String,
    pop: redis::Script,
}

impl std::fmt::Debug for HoldQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HoldQueue")
            .field("key", &self.key)
            .field("enabled", &self.connection.is_some())
            .finish()
    }
}

/// A queue entry: which hold, of which SKU.
pub fn member(sku: &str, order_id: Uuid) -> String {
    format!("{sku}/{order_id}")
}

/// The hold an entry names; `None` for anything else (skipped).
pub fn parse_member(member: &str) -> Option<(Sku, Uuid)> {
    let (sku, id) = member.rsplit_once('/')?;
    Some((Sku::parse(sku).ok()?, Uuid::parse_str(id).ok()?))
}

impl HoldQueue {
    /// The queue on `client`'s node (connected lazily, reconnected in the background), under
    /// `prefix`. `None`: no queue; the sweep alone expires holds.
    pub fn new(client: Option<redis::Client>, prefix: &str) -> Self {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(OP_TIMEOUT))
            .set_response_timeout(Some(OP_TIMEOUT))
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_secs(1))
            .set_number_of_retries(2);
        let connection = client.and_then(|c| {
            ConnectionManager::new_lazy_with_config(c, config)
                .map_err(|e| tracing::warn!(error = %e, "hold queue disabled: invalid node"))
                .ok()
        });
        Self {
            connection,
            key: format!("{prefix}:holds:due"),
            pop: redis::Script::new(POP_DUE),
        }
    }

    /// The sorted set's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    async fn run<T>(
        &self,
        call: impl AsyncFnOnce(&mut ConnectionManager) -> redis::RedisResult<T>,
    ) -> Result<T, QueueError> {
        let mut connection = self.connection.clone().ok_or(QueueError::Disabled)?;
        match tokio::time::timeout(OP_TIMEOUT, call(&mut connection)).await {
            Ok(result) => Ok(result?),
            Err(_) => Err(QueueError::Timeout),
        }
    }

    /// Adds `holds` (entry, due at unix ms) unless present (`ZADD NX`).
    pub async fn schedule(&self, holds: &[(String, i64)]) -> Result<(), QueueError> {
        if holds.is_empty() {
            return Ok(());
        }
        let key = self.key.clone();
        let items: Vec<(i64, &str)> = holds.iter().map(|(m, at)| (*at, m.as_str())).collect();
        self.run(async move |c| {
            redis::cmd("ZADD")
                .arg(&key)
                .arg("NX")
                .arg(&items)
                .query_async::<i64>(c)
                .await
        })
        .await?;
        Ok(())
    }

    /// Removes entries (a hold paid, cancelled or expired by the sweep).
    pub async fn remove(&self, members: &[String]) -> Result<(), QueueError> {
        if members.is_empty() {
            return Ok(());
        }
        let key = self.key.clone();
        self.run(async move |c| {
            redis::cmd("ZREM")
                .arg(&key)
                .arg(members)
                .query_async::<i64>(c)
                .await
        })
        .await?;
        Ok(())
    }

    /// Pops at most `limit` entries due by the node's clock; each is popped by one caller only.
    pub async fn pop_due(&self, limit: usize) -> Result<Vec<String>, QueueError> {
        let key = self.key.clone();
        let pop = self.pop.clone();
        self.run(async move |c| {
            pop.key(&key)
                .arg(limit)
                .invoke_async::<Vec<String>>(c)
                .await
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_name_the_sku_and_the_order() {
        let id = Uuid::now_v7();
        let (sku, parsed) = parse_member(&member("SHOE-1.b_x", id)).expect("parses");
        assert_eq!((sku.as_str(), parsed), ("SHOE-1.b_x", id));
        assert!(parse_member("no-slash").is_none());
        assert!(parse_member("bad sku/0190a0a0-0000-7000-8000-000000000000").is_none());
        assert!(parse_member("SKU/not-a-uuid").is_none());
    }
}
