//! The sold-out fast path: once a SKU is sold out, answer `409 sold_out` without the lock or the
//! database.
//!
//! A process learns a SKU is sold out from its own batch (stock reached 0) and then marks it in
//! Redis on every node; other processes read the mark (a quorum of nodes must hold it, so one
//! node that missed a restock's delete cannot keep a restocked SKU shut) at most once per
//! [`LOCAL_TTL`] per SKU — and again ([`SoldOutMarks::check_fresh`]) when a combiner got the
//! SKU's lease only after another process had held it. A restock through the admin API deletes
//! the marks.
//!
//! A sold-out answer from the mark is never stored. To keep idempotent retries of purchases that
//! DID succeed correct, the mark carries the set of (user, key) pairs holding a stored 201 for the
//! SKU, loaded once per process when it learns the mark; those attempts take the normal path and
//! get their replay.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use redis::aio::ConnectionManager;
use shared::{IdempotencyKey, Sku, UserId};
use sqlx::PgPool;
use tokio::sync::OnceCell;

/// How long a process trusts its own knowledge of a mark before asking Redis again.
pub const LOCAL_TTL: Duration = Duration::from_millis(1000);
/// Most SKUs remembered locally before stale entries are dropped.
const MAX_LOCAL_MARKS: usize = 10_000;
/// Per-node timeout of a mark read or write.
const NODE_TIMEOUT: Duration = Duration::from_millis(100);
/// Marks expire in Redis after a day; a sale that is still sold out is re-marked on its next batch.
const MARK_TTL_SECS: u64 = 86_400;

/// (user, key) pairs with a stored 201 for a sold-out SKU.
pub type Buyers = HashSet<(String, String)>;

#[derive(Debug, Clone)]
struct LocalMark {
    checked_at: Instant,
    buyers: Option<Arc<Buyers>>,
}

/// One lazily (re)connected Redis node.
#[derive(Debug)]
struct Node {
    client: redis::Client,
    conn: OnceCell<ConnectionManager>,
}

impl Node {
    async fn conn(&self) -> Option<ConnectionManager> {
        let connect = || async {
            tokio::time::timeout(
                NODE_TIMEOUT * 5,
                ConnectionManager::new(self.client.clone()),
            )
            .await
            .ok()?
            .ok()
        };
        // A failed connect leaves the cell empty, so the next call tries again.
        let init = self
            .conn
            .get_or_try_init(|| async { connect().await.ok_or(()) })
            .await;
        init.ok().cloned()
    }
}

/// Sold-out marks of this process, backed by Redis.
#[derive(Debug)]
pub struct SoldOutMarks {
    nodes: Vec<Node>,
    prefix: String,
    local: Mutex<HashMap<Sku, LocalMark>>,
}

impl SoldOutMarks {
    pub fn new(urls: &[String], prefix: &str) -> Result<Self, redis::RedisError> {
        let clients = urls
            .iter()
            .map(|u| redis::Client::open(u.as_str()))
            .collect::<Result<_, redis::RedisError>>()?;
        Ok(Self::from_clients(clients, prefix))
    }

    /// Over already built clients (e.g. TLS ones), one per node.
    pub fn from_clients(clients: Vec<redis::Client>, prefix: &str) -> Self {
        let nodes = clients
            .into_iter()
            .map(|client| Node {
                client,
                conn: OnceCell::new(),
            })
            .collect();
        Self {
            nodes,
            prefix: prefix.to_owned(),
            local: Mutex::new(HashMap::new()),
        }
    }

    fn key(&self, sku: &Sku) -> String {
        format!("{}:soldout:{}", self.prefix, sku)
    }

    fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// What this process knows without any I/O: `Some(buyers)` if the SKU is marked sold out and
    /// the knowledge is fresh, `None` if it is not marked or must be re-checked.
    pub fn cached(&self, sku: &Sku) -> Option<Arc<Buyers>> {
        let local = self.local.lock().unwrap_or_else(|p| p.into_inner());
        local
            .get(sku)
            .filter(|m| m.checked_at.elapsed() < LOCAL_TTL)
            .and_then(|m| m.buyers.clone())
    }

    /// Whether `user`'s attempt with `key` may be answered `sold_out` from this mark.
    pub fn answers(buyers: &Buyers, user: &UserId, key: &IdempotencyKey) -> bool {
        !buyers.contains(&(user.as_str().to_owned(), key.as_str().to_owned()))
    }

    /// Checks Redis (when local knowledge is stale) and returns the mark's buyers if sold out.
    /// Loads the buyers from the database once, when this process first learns of the mark.
    pub async fn check(&self, sku: &Sku, pool: &PgPool) -> Option<Arc<Buyers>> {
        self.check_with(sku, pool, true).await
    }

    /// Like [`check`](Self::check), but reads Redis even when this process's knowledge is
    /// fresh: for a combiner that just waited for another process's lease, during which the SKU
    /// may have sold out.
    pub async fn check_fresh(&self, sku: &Sku, pool: &PgPool) -> Option<Arc<Buyers>> {
        self.check_with(sku, pool, false).await
    }

    async fn check_with(&self, sku: &Sku, pool: &PgPool, trust_local: bool) -> Option<Arc<Buyers>> {
        let known = {
            let local = self.local.lock().unwrap_or_else(|p| p.into_inner());
            local.get(sku).cloned()
        };
        if let Some(mark) = &known {
            // A known mark is trusted for LOCAL_TTL either way: only a restock clears it.
            if mark.checked_at.elapsed() < LOCAL_TTL && (trust_local || mark.buyers.is_some()) {
                return mark.buyers.clone();
            }
        }
        let key = self.key(sku);
        let votes = join_all(self.nodes.iter().map(|n| async {
            let mut conn = n.conn().await?;
            let got: Option<Option<String>> = tokio::time::timeout(
                NODE_TIMEOUT,
                redis::cmd("GET").arg(&key).query_async(&mut conn),
            )
            .await
            .ok()?
            .ok();
            got
        }))
        .await;
        let marked = votes.iter().filter(|v| matches!(v, Some(Some(_)))).count() >= self.quorum();
        let buyers = if !marked {
            None
        } else if let Some(existing) = known.and_then(|m| m.buyers) {
            Some(existing)
        } else {
            Some(Arc::new(load_buyers(pool, sku).await?))
        };
        self.remember(sku, buyers.clone());
        buyers
    }

    /// Marks `sku` sold out here and on every reachable node.
    pub async fn mark(&self, sku: &Sku, pool: &PgPool) {
        let key = self.key(sku);
        join_all(self.nodes.iter().map(|n| async {
            if let Some(mut conn) = n.conn().await {
                let mut set = redis::cmd("SET");
                set.arg(&key).arg("1").arg("EX").arg(MARK_TTL_SECS);
                if let Ok(Err(e)) =
                    tokio::time::timeout(NODE_TIMEOUT, set.query_async::<()>(&mut conn)).await
                {
                    tracing::warn!(error = %e, "could not write sold-out mark");
                }
            }
        }))
        .await;
        if let Some(buyers) = load_buyers(pool, sku).await {
            self.remember(sku, Some(Arc::new(buyers)));
        }
        tracing::info!(sku = %sku, "sku sold out; fast path on");
    }

    /// Clears the mark here and on every reachable node (a restock).
    pub async fn clear(&self, sku: &Sku) {
        self.local
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(sku);
        let key = self.key(sku);
        join_all(self.nodes.iter().map(|n| async {
            if let Some(mut conn) = n.conn().await {
                let mut del = redis::cmd("DEL");
                del.arg(&key);
                if let Ok(Err(e)) =
                    tokio::time::timeout(NODE_TIMEOUT, del.query_async::<()>(&mut conn)).await
                {
                    tracing::warn!(error = %e, "could not clear sold-out mark");
                }
            }
        }))
        .await;
    }

    fn remember(&self, sku: &Sku, buyers: Option<Arc<Buyers>>) {
        let mut local = self.local.lock().unwrap_or_else(|p| p.into_inner());
        if local.len() >= MAX_LOCAL_MARKS {
            // Bounded memory under many distinct SKUs: forget what is stale anyway.
            local.retain(|_, m| m.checked_at.elapsed() < LOCAL_TTL);
        }
        local.insert(
            sku.clone(),
            LocalMark {
                checked_at: Instant::now(),
                buyers,
            },
        );
    }
}

async fn load_buyers(pool: &PgPool, sku: &Sku) -> Option<Buyers> {
    let rows: Result<Vec<(String, String)>, sqlx::Error> = sqlx::query_as(
        "SELECT user_id, idempotency_key FROM idempotency_records WHERE sku = $1 AND status = 201",
    )
    .bind(sku.as_str())
    .fetch_all(pool)
    .await;
    match rows {
        Ok(rows) => Some(rows.into_iter().collect()),
        Err(e) => {
            tracing::warn!(error = %e, "could not load buyers of a sold-out sku; fast path stays off");
            None
        }
    }
}
