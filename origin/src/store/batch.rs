//! The purchase-batch transaction: the final guard of the whole system, reached from the per-SKU
//! combiner (`purchase::combiner`) once it holds the SKU's lease. See [`decide_batch`] and the
//! store's module docs for what it guarantees; every statement of it is checked at compile time
//! against the migrations (`sqlx::query!`, data in `origin/.sqlx/`).
//!
//! In the order a batch runs: `BEGIN`; `read` locks the SKU's row and reads what the batch
//! needs, in one statement; `decide` decides each attempt in memory; `write` writes every
//! order, counter and stored answer in one statement; `COMMIT` — unless the lease may be gone by
//! then. What goes in and out is the purchase path's vocabulary (`crate::decision`), the batch's
//! [`BatchMode`] and [`BatchResult`].

mod decide;
mod read;
mod write;

use std::time::Instant;

use chrono::{DateTime, Utc};
use shared::{OrderStatus, Sku};
use sqlx::PgPool;
use uuid::Uuid;

use super::StoreError;
use crate::decision::{Attempt, Decision};
use decide::{Decided, decide};
use read::{LockedSku, open_batch, peek_sku};
use write::{Written, write};

/// Decides `attempts` (all for `sku`) in arrival order in one transaction; see the module docs.
/// `fence` is the Redlock fencing token of the caller's lease (`None` without a lock) and
/// `commit_by` the instant after which the lease may be gone: past it, the transaction rolls back
/// instead of committing ([`StoreError::LeaseExpired`]). `mode` says whether the batch may sell.
///
/// Four round trips whatever the batch's size: `BEGIN`, one statement that locks the SKU's row
/// and reads what the batch needs ([`open_batch`]), one that writes everything, `COMMIT`.
pub async fn decide_batch(
    pool: &PgPool,
    sku: &Sku,
    attempts: &[Attempt],
    fence: Option<u64>,
    commit_by: Option<Instant>,
    mode: BatchMode,
) -> Result<BatchResult, StoreError> {
    let mut tx = pool.begin().await?;
    // Array parameters are borrowed, not copied: `as &[&str]` tells `query!` the Rust type of a
    // `text[]` parameter (its check knows only `&[String]`); the SQL's `::text[]` fixes the type.
    let users: Vec<&str> = attempts.iter().map(|a| a.user.as_str()).collect();
    let keys: Vec<&str> = attempts.iter().map(|a| a.key.as_str()).collect();

    let (locked, reads) = match mode {
        BatchMode::Sell => open_batch(&mut tx, sku, &users, &keys).await?,
        BatchMode::UnknownSkuOnly => {
            // Not the row lock first: an existing row is not decided here, and may be locked by
            // the lease holder's batch. Only a SKU created since this read is waited for.
            match peek_sku(&mut tx, sku).await? {
                Some(row) => return Err(StoreError::SkuExists(row.sale_state())),
                None => open_batch(&mut tx, sku, &users, &keys).await?,
            }
        }
    };
    if let (Some(row), BatchMode::UnknownSkuOnly) = (&locked, mode) {
        return Err(StoreError::SkuExists(row.sale_state()));
    }
    let fence = fence.map(|f| i64::try_from(f).unwrap_or(i64::MAX));
    if let (Some(row), Some(presented)) = (&locked, fence) {
        if presented < row.fence {
            return Err(StoreError::StaleFence {
                presented,
                current: row.fence,
            });
        }
    }
    let expires_at = locked.as_ref().and_then(LockedSku::hold_expiry);
    let (status, expires_at_text) = match expires_at {
        Some(at) => (
            OrderStatus::Held,
            Some(at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        ),
        None => (OrderStatus::Confirmed, None),
    };
    let Decided {
        decisions,
        records,
        stock,
    } = decide(
        sku,
        attempts,
        locked.as_ref(),
        reads,
        status,
        expires_at_text,
    )?;
    let Written {
        units_sold,
        order_ids,
    } = write(
        &mut tx,
        sku,
        locked.as_ref(),
        fence,
        &records,
        status,
        expires_at,
    )
    .await?;
    super::commit_within(tx, commit_by).await?;
    Ok(BatchResult {
        decisions,
        remaining: locked.as_ref().map(|_| stock),
        generation: locked.as_ref().map(|r| r.generation),
        returns: locked.as_ref().map(|r| r.returns),
        units_sold,
        holds: if expires_at.is_some() {
            order_ids
        } else {
            Vec::new()
        },
        expires_at,
    })
}

/// The result of one committed batch transaction.
#[derive(Debug)]
pub struct BatchResult {
    /// One decision per attempt, in the order given.
    pub decisions: Vec<Decision>,
    /// Units left after the batch; `None` when the SKU does not exist.
    pub remaining: Option<i64>,
    /// The sale generation the batch decided in; `None` when the SKU does not exist.
    pub generation: Option<i64>,
    /// The SKU's return epoch the batch decided in (bumped by every return of units).
    pub returns: Option<i64>,
    /// Units sold by this batch.
    pub units_sold: i64,
    /// The orders this batch created as holds (a SKU with `hold_secs`), and when they expire.
    pub holds: Vec<Uuid>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// Which batches [`decide_batch`] may decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchMode {
    /// Whatever the SKU's state: the caller holds the SKU's lease (or, in tests, no lock at all).
    Sell,
    /// Only if the SKU does not exist — every attempt is then `404 unknown_sku` or a replay —
    /// without the SKU's lease and without waiting for its row; if it exists, nothing is decided
    /// ([`StoreError::SkuExists`]) and the caller takes the lease.
    UnknownSkuOnly,
}
