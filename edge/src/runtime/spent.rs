//! The spent proofs of work of the objects that serialize a shopper's requests — their
//! `UserGate` (purchases) and their room shard (joins) — in each object's own SQLite: a proof is
//! bound to its shopper, so its every use meets that shopper's object, at any location, and no
//! object of its own is needed (the spent set is sharded with the shoppers). A record is kept
//! until [`crate::proof::SPENT_KEPT_PAST_EXPIRY_MS`] after its proof expires (on this object's
//! clock): past any skew with the worker's clock, which checks the expiry, the proof no longer
//! verifies anyway.

use worker::{SqlStorage, SqlStorageValue};

use super::sql::raw_rows;
use crate::proof::Spend;

/// The table, created with each object's schema.
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS spent_proofs (
    id TEXT PRIMARY KEY,
    expires_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS spent_proofs_by_expiry ON spent_proofs (expires_ms);
";

/// Whether `spend` was recorded before.
pub(crate) fn is_spent(sql: &SqlStorage, spend: &Spend) -> worker::Result<bool> {
    Ok(!raw_rows(
        sql,
        "SELECT 1 FROM spent_proofs WHERE id = ?",
        vec![spend.id.as_str().into()],
    )?
    .is_empty())
}

/// Records `spend`, and forgets the records whose proofs expired long enough before `now_ms`
/// ([`crate::proof::spent_forget_before`]).
pub(crate) fn record(sql: &SqlStorage, spend: &Spend, now_ms: i64) -> worker::Result<()> {
    sql.exec(
        "DELETE FROM spent_proofs WHERE expires_ms < ?",
        vec![SqlStorageValue::try_from_i64(
            crate::proof::spent_forget_before(now_ms),
        )?],
    )?;
    sql.exec(
        "INSERT OR IGNORE INTO spent_proofs (id, expires_ms) VALUES (?, ?)",
        vec![
            spend.id.as_str().into(),
            SqlStorageValue::try_from_i64(spend.expires_ms)?,
        ],
    )?;
    Ok(())
}
