//! The outbox's reads and its few writes of its own — the bottom of the event feed
//! (`GET /v1/events`), of the webhook dispatcher and of the stream appender (`crate::events`).
//! The event rows themselves are written by the statements that make each change, next to them:
//! the purchase batch (`batch/write.rs`), an order transition (`orders.rs`, `OrderTx::apply`), the
//! live-hold payments (`payments.rs`), a restock (`catalogue.rs`, with [`sku_crossing`] here).
//!
//! A [`Position`] is (commit number, seq). The commit number is given after the commit, to the
//! whole transaction, by the sequencer ([`number`]: one pass at a time across every process,
//! each numbering the committed transactions above everything numbered before), so an event that
//! commits late gets a larger position than everything already readable: a cursor never skips
//! one (migration `order_events`, docs/architecture.md "The event feed"). Readers see numbered
//! events only. [`page`] reads under one REPEATABLE READ snapshot, so the horizon, the page and
//! the frontier it reports agree.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::StoreError;

mod upkeep;

pub use upkeep::{Numbered, Turn, number, purge, try_lock_stream};

/// An event's place in the feed, its cursor and its stream entry ID: `<commit>-<seq>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Position {
    /// The commit number of the transaction that wrote the event.
    pub commit: u64,
    /// Its number within the events sequence (increasing within a transaction).
    pub seq: u64,
}

impl Position {
    /// The commit number as a bigint column (positions come from the database, so it fits).
    pub fn commit_i64(self) -> i64 {
        i64::try_from(self.commit).unwrap_or(i64::MAX)
    }

    /// The sequence number as a bigint column.
    pub fn seq_i64(self) -> i64 {
        i64::try_from(self.seq).unwrap_or(i64::MAX)
    }

    /// A position from its columns as read.
    pub(crate) fn from_columns(commit: i64, seq: i64) -> Result<Self, StoreError> {
        match (u64::try_from(commit), u64::try_from(seq)) {
            (Ok(commit), Ok(seq)) => Ok(Self { commit, seq }),
            _ => Err(decode(format!("position {commit}-{seq}"))),
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.commit, self.seq)
    }
}

/// A cursor that is not `<u64>-<u64>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a position is two decimal numbers joined by '-', as in an event's `position`")]
pub struct PositionError;

impl FromStr for Position {
    type Err = PositionError;

    fn from_str(s: &str) -> Result<Self, PositionError> {
        let (commit, seq) = s.split_once('-').ok_or(PositionError)?;
        let digits = |p: &str| {
            (!p.is_empty() && p.len() <= 20 && p.bytes().all(|b| b.is_ascii_digit()))
                .then(|| p.parse::<u64>().ok())
                .flatten()
        };
        match (digits(commit), digits(seq)) {
            (Some(commit), Some(seq)) if commit <= i64::MAX as u64 && seq <= i64::MAX as u64 => {
                Ok(Self { commit, seq })
            }
            _ => Err(PositionError),
        }
    }
}

fn decode(what: String) -> StoreError {
    StoreError::Unexpected(sqlx::Error::Decode(
        format!("unexpected event {what}").into(),
    ))
}

/// A new event id: a UUIDv7 of this instant, its random bits from the thread's CSPRNG (as the
/// batch's order ids).
pub fn new_event_id() -> Uuid {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    uuid::Builder::from_unix_timestamp_millis(millis, &rand::random()).into_uuid()
}

/// An order event's order, as `GET /v1/orders/{id}` showed it after the change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderFacts {
    pub order_id: Uuid,
    /// 1 for the order's first event, +1 for each later one.
    pub sequence: i32,
    pub status: String,
    pub sku: String,
    pub qty: i32,
    pub user_id: String,
    pub expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// What an event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    Order(OrderFacts),
    /// A SKU and the stock it reached.
    Sku {
        sku: String,
        stock: i64,
    },
}

/// One stored event, with what its rendering needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRow {
    pub position: Position,
    pub id: Uuid,
    pub event_type: String,
    /// When the change was made (the order's `updated_at` after it).
    pub at: DateTime<Utc>,
    pub subject: Subject,
}

/// The columns every event read returns (`SELECT` of [`event_columns!`]).
struct RawEvent {
    n: i64,
    seq: i64,
    id: Uuid,
    event_type: String,
    at: DateTime<Utc>,
    order_id: Option<Uuid>,
    sequence: Option<i32>,
    status: Option<String>,
    order_sku: Option<String>,
    qty: Option<i32>,
    user_id: Option<String>,
    expires_at: Option<DateTime<Utc>>,
    created_at: Option<DateTime<Utc>>,
    sku: Option<String>,
    stock: Option<i64>,
}

impl TryFrom<RawEvent> for EventRow {
    type Error = StoreError;

    fn try_from(r: RawEvent) -> Result<Self, StoreError> {
        let subject = match (r.order_id, r.sku, r.stock) {
            (Some(order_id), _, _) => Subject::Order(OrderFacts {
                order_id,
                sequence: r
                    .sequence
                    .ok_or_else(|| decode("without sequence".into()))?,
                status: r.status.ok_or_else(|| decode("without status".into()))?,
                // The order is permanent (orders are never deleted), so the join finds it.
                sku: r
                    .order_sku
                    .ok_or_else(|| decode("of a missing order".into()))?,
                qty: r.qty.unwrap_or(0),
                user_id: r.user_id.unwrap_or_default(),
                expires_at: r.expires_at,
                created_at: r.created_at.unwrap_or(r.at),
            }),
            (None, Some(sku), Some(stock)) => Subject::Sku { sku, stock },
            _ => return Err(decode("without a subject".into())),
        };
        Ok(Self {
            position: Position::from_columns(r.n, r.seq)?,
            id: r.id,
            event_type: r.event_type,
            at: r.at,
            subject,
        })
    }
}

fn rows(raw: Vec<RawEvent>) -> Result<Vec<EventRow>, StoreError> {
    raw.into_iter().map(EventRow::try_from).collect()
}

/// One page of the feed.
#[derive(Debug)]
pub struct Page {
    pub events: Vec<EventRow>,
    /// Where the next page starts: the last event returned, or — when nothing of the requested
    /// types is left — the newest event any reader can see yet, so a filtered cursor moves on.
    pub next: Position,
    pub has_more: bool,
}

/// Why a page cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    /// The cursor is below what the retention purge removed: events after it are gone.
    #[error("the cursor {after} is older than the oldest event kept (after {horizon})")]
    CursorExpired { after: Position, horizon: Position },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for PageError {
    fn from(e: sqlx::Error) -> Self {
        Self::Store(e.into())
    }
}

/// The feed after `after` (absent: from the oldest event kept), oldest first: at most `limit`
/// numbered events of `types` (absent: every type), read under one snapshot.
pub async fn page(
    pool: &PgPool,
    after: Option<Position>,
    limit: u32,
    types: Option<&[String]>,
) -> Result<Page, PageError> {
    let mut tx = pool
        .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .await?;
    let horizon = horizon_in(&mut tx).await?;
    let from = match after {
        Some(after) if after < horizon => {
            return Err(PageError::CursorExpired { after, horizon });
        }
        Some(after) => after,
        None => horizon,
    };
    let limit = i64::from(limit.max(1));
    // The commits after the cursor's in number order, each one's events in seq order (the
    // events' primary key): an index walk, however long the feed.
    let found = rows(
        sqlx::query_as!(
            RawEvent,
            r#"SELECT c.n, e.seq, e.id, e.type AS event_type, e.at,
                      e.order_id, e.sequence, e.status, o.sku AS "order_sku?", o.qty AS "qty?",
                      o.user_id AS "user_id?", o.expires_at, o.created_at AS "created_at?",
                      e.sku, e.stock
               FROM event_commits c
               JOIN events e ON e.xid = c.xid
               LEFT JOIN orders o ON o.order_id = e.order_id
               WHERE c.n >= $1 AND (c.n > $1 OR e.seq > $2)
                 AND ($3::text[] IS NULL OR e.type = ANY($3))
               ORDER BY c.n, e.seq
               LIMIT $4"#,
            from.commit_i64(),
            from.seq_i64(),
            types,
            limit + 1,
        )
        .fetch_all(&mut *tx)
        .await?,
    )?;
    let has_more = found.len() as i64 > limit;
    let mut events = found;
    events.truncate(limit as usize);
    let last = events.last().map(|e| e.position);
    let next = if has_more {
        last.unwrap_or(from)
    } else {
        // Nothing more of these types yet: move the cursor to the newest numbered event, so
        // that a filtered consumer's cursor does not age out while other types flow.
        let top = frontier(&mut tx).await?;
        [Some(from), last, top]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(from)
    };
    tx.commit().await?;
    Ok(Page {
        events,
        next,
        has_more,
    })
}

/// The newest numbered event, if any.
async fn frontier(tx: &mut sqlx::PgConnection) -> Result<Option<Position>, StoreError> {
    let top = sqlx::query!(
        "SELECT c.n, e.seq FROM event_commits c JOIN events e ON e.xid = c.xid
         ORDER BY c.n DESC, e.seq DESC LIMIT 1",
    )
    .fetch_optional(&mut *tx)
    .await?;
    top.map(|t| Position::from_columns(t.n, t.seq)).transpose()
}

/// The newest event readable now (the position a new webhook endpoint starts after), or the
/// horizon when there is none.
pub async fn visible_top(pool: &PgPool) -> Result<Position, StoreError> {
    let mut conn = pool.acquire().await?;
    match frontier(&mut conn).await? {
        Some(top) => Ok(top),
        None => horizon_in(&mut conn).await,
    }
}

/// The position at and below which every event was purged.
pub async fn horizon(pool: &PgPool) -> Result<Position, StoreError> {
    let mut conn = pool.acquire().await?;
    horizon_in(&mut conn).await
}

async fn horizon_in(conn: &mut sqlx::PgConnection) -> Result<Position, StoreError> {
    let row = sqlx::query!("SELECT n, seq FROM event_horizon")
        .fetch_one(&mut *conn)
        .await?;
    Position::from_columns(row.n, row.seq)
}

/// The event `id`, once it is numbered, while it is kept.
pub async fn by_id(pool: &PgPool, id: Uuid) -> Result<Option<EventRow>, StoreError> {
    sqlx::query_as!(
        RawEvent,
        r#"SELECT c.n, e.seq, e.id, e.type AS event_type, e.at,
                  e.order_id, e.sequence, e.status, o.sku AS "order_sku?", o.qty AS "qty?",
                  o.user_id AS "user_id?", o.expires_at, o.created_at AS "created_at?",
                  e.sku, e.stock
           FROM events e
           JOIN event_commits c ON c.xid = e.xid
           LEFT JOIN orders o ON o.order_id = e.order_id
           WHERE e.id = $1"#,
        id,
    )
    .fetch_optional(pool)
    .await?
    .map(EventRow::try_from)
    .transpose()
}

/// The kept events at `positions`, in position order.
pub async fn at_positions(
    pool: &PgPool,
    positions: &[Position],
) -> Result<Vec<EventRow>, StoreError> {
    let commits: Vec<i64> = positions.iter().map(|p| p.commit_i64()).collect();
    let seqs: Vec<i64> = positions.iter().map(|p| p.seq_i64()).collect();
    rows(
        sqlx::query_as!(
            RawEvent,
            r#"SELECT c.n, e.seq, e.id, e.type AS event_type, e.at,
                      e.order_id, e.sequence, e.status, o.sku AS "order_sku?", o.qty AS "qty?",
                      o.user_id AS "user_id?", o.expires_at, o.created_at AS "created_at?",
                      e.sku, e.stock
               FROM UNNEST($1::bigint[], $2::bigint[]) AS p(n, seq)
               JOIN event_commits c ON c.n = p.n
               JOIN events e ON e.xid = c.xid AND e.seq = p.seq
               LEFT JOIN orders o ON o.order_id = e.order_id
               ORDER BY c.n, e.seq"#,
            &commits,
            &seqs,
        )
        .fetch_all(pool)
        .await?,
    )
}

/// The SKU event of a change of `sku`'s stock from `before` to `after`, written in `tx` when the
/// change crosses zero: `sku.sold_out` when it reached 0, `sku.back_on_sale` when it left 0.
pub(crate) async fn sku_crossing(
    tx: &mut sqlx::PgConnection,
    sku: &str,
    before: i64,
    after: i64,
) -> Result<(), StoreError> {
    let event_type = match (before > 0, after > 0) {
        (true, false) => "sku.sold_out",
        (false, true) => "sku.back_on_sale",
        _ => return Ok(()),
    };
    sqlx::query!(
        "INSERT INTO events (id, type, at, sku, stock) VALUES ($1, $2, clock_timestamp(), $3, $4)",
        new_event_id(),
        event_type,
        sku,
        after,
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}
