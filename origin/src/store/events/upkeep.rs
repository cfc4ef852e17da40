//! The outbox's own maintenance writes, off every request path: the sequencer's pass
//! ([`number`]), the stream appender's turn ([`try_lock_stream`]) and the retention purge
//! ([`purge`]). Called from `crate::events`' background tasks.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::Position;
use crate::store::StoreError;

/// Numbers the committed transactions waiting in `event_xacts` (at most `max` of them, in
/// transaction id order) above every commit numbered before — one pass of the sequencer, in one
/// transaction holding `event_sequencer`'s row lock. `None` when another pass holds it (another
/// process is numbering); else what was numbered. A transaction that commits during the pass
/// waits for the next one, and so gets a larger number.
pub async fn number(pool: &PgPool, max: i64) -> Result<Option<Vec<Numbered>>, StoreError> {
    let mut tx = pool.begin().await?;
    let Some(last) = sqlx::query_scalar!("SELECT n FROM event_sequencer FOR UPDATE SKIP LOCKED")
        .fetch_optional(&mut *tx)
        .await?
    else {
        return Ok(None);
    };
    // A new statement, so a new snapshot taken with the lock held: it sees every earlier pass's
    // numbers and every transaction committed before it.
    let numbered = sqlx::query_as!(
        Numbered,
        r#"WITH fresh AS (
               DELETE FROM event_xacts x
               WHERE x.xid IN (SELECT xid FROM event_xacts ORDER BY xid LIMIT $2)
               RETURNING x.xid
           ), numbered AS (
               INSERT INTO event_commits (xid, n)
               SELECT xid, $1 + row_number() OVER (ORDER BY xid) FROM fresh
               RETURNING xid, n
           ), moved AS (
               UPDATE event_sequencer SET n = (SELECT max(n) FROM numbered)
               WHERE EXISTS (SELECT 1 FROM numbered)
           )
           SELECT e.type AS event_type, COUNT(*) AS "events!",
                  EXTRACT(EPOCH FROM clock_timestamp() - min(e.at))::float8 AS "lag!"
           FROM numbered x JOIN events e ON e.xid = x.xid
           GROUP BY x.n, e.type"#,
        last,
        max,
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Some(numbered))
}

/// What one pass of [`number`] numbered: per commit and type, how many events and how long
/// since the commit's first change.
#[derive(Debug, Clone)]
pub struct Numbered {
    pub event_type: String,
    pub events: i64,
    /// Seconds from the change to its number.
    pub lag: f64,
}

/// The advisory lock of the stream appender (any number; one per database).
const STREAM_LOCK: i64 = 0x466c_6173_6847_7374;

/// One process's turn at appending to the event stream: a transaction holding the appender's
/// transaction-level advisory lock, released by [`Turn::release`] (or by the connection's end,
/// when the process dies).
#[derive(Debug)]
pub struct Turn {
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
}

impl Turn {
    pub async fn release(self) -> Result<(), StoreError> {
        self.tx.commit().await?;
        Ok(())
    }
}

/// The appender's turn, unless another process has it.
pub async fn try_lock_stream(pool: &PgPool) -> Result<Option<Turn>, StoreError> {
    let mut tx = pool.begin().await?;
    let got = sqlx::query_scalar!(
        r#"SELECT pg_try_advisory_xact_lock($1) AS "got!""#,
        STREAM_LOCK
    )
    .fetch_one(&mut *tx)
    .await?;
    if got {
        Ok(Some(Turn { tx }))
    } else {
        tx.rollback().await?;
        Ok(None)
    }
}

/// How many events the retention purge removes per transaction.
const PURGE_CHUNK: i64 = 5000;

/// Deletes the events made before `before`, oldest position first — the prefix of the feed up to
/// the first event made at or after it — moving the horizon past them in the same transactions;
/// how many. Their commit numbers go with them once a commit has no event left.
pub async fn purge(pool: &PgPool, before: DateTime<Utc>) -> Result<u64, StoreError> {
    // The first kept position: everything below it goes. Only numbered events are purged (an
    // event not numbered yet is newer than everything numbered).
    let keep = sqlx::query!(
        r#"SELECT c.n, e.seq FROM event_commits c JOIN events e ON e.xid = c.xid
           WHERE e.at >= $1 ORDER BY c.n, e.seq LIMIT 1"#,
        before,
    )
    .fetch_optional(pool)
    .await?;
    let keep = match keep {
        Some(k) => Position::from_columns(k.n, k.seq)?,
        None => Position {
            commit: i64::MAX as u64,
            seq: 0,
        },
    };
    let mut purged = 0;
    loop {
        let done = sqlx::query_scalar!(
            r#"WITH doomed AS (
                   SELECT c.n, e.xid, e.seq, e.at FROM event_commits c JOIN events e ON e.xid = c.xid
                   WHERE c.n < $1 OR (c.n = $1 AND e.seq < $2)
                   ORDER BY c.n, e.seq LIMIT $3
               ), gone AS (
                   DELETE FROM events e USING doomed d WHERE e.xid = d.xid AND e.seq = d.seq
                   RETURNING d.n, e.seq, e.at
               ), last AS (
                   SELECT n, seq FROM gone ORDER BY n DESC, seq DESC LIMIT 1
               ), moved AS (
                   UPDATE event_horizon h SET n = last.n, seq = last.seq,
                          purged_before = GREATEST(h.purged_before, (SELECT max(at) FROM gone))
                   FROM last
               ), undelivered AS (
                   -- Their deliveries too: a purged event cannot be sent any more.
                   DELETE FROM webhook_deliveries w USING gone g WHERE w.n = g.n AND w.seq = g.seq
               ), emptied AS (
                   -- Commits before the last one touched have no event left.
                   DELETE FROM event_commits c WHERE c.n < (SELECT n FROM last)
               )
               SELECT COUNT(*) AS "n!" FROM gone"#,
            keep.commit_i64(),
            keep.seq_i64(),
            PURGE_CHUNK,
        )
        .fetch_one(pool)
        .await?;
        purged += u64::try_from(done).unwrap_or(0);
        if done < PURGE_CHUNK {
            return Ok(purged);
        }
    }
}
