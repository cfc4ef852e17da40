//! The `UserGate` object's SQLite: its schema, the snapshot of rows `crate::gate` decides over,
//! and the writes of the effects it returns (one user's rows: no `.await`, so each call is
//! atomic for the user).

use serde::Deserialize;
use serde::de::DeserializeOwned;
use worker::{SqlStorage, SqlStorageValue};

use crate::gate::{Effects, RecordChange, Snapshot};
use crate::idempotency::{Record, State as RecordState};
use crate::protocol::BeginRequest;

use super::super::http::now_ms;
use super::super::spent;

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS gcra (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    tat_us INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS idempotency (
    key TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('in_flight', 'done')),
    status INTEGER,
    body TEXT,
    updated_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS idempotency_by_age ON idempotency (updated_ms);
CREATE TABLE IF NOT EXISTS units_bought (
    sku TEXT PRIMARY KEY,
    units INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS gcra_buckets (
    name TEXT PRIMARY KEY,
    tat_us INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS units_counted_at (
    sku TEXT PRIMARY KEY,
    counted_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS returned_orders (
    order_id TEXT PRIMARY KEY,
    updated_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS doubtful_keys (
    key TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    proof TEXT,
    updated_ms INTEGER NOT NULL
);
";

#[derive(Deserialize)]
pub(super) struct TatRow {
    pub(super) tat_us: i64,
}

#[derive(Deserialize)]
pub(super) struct RecordRow {
    pub(super) fingerprint: String,
    pub(super) attempt: i64,
    pub(super) state: String,
    pub(super) status: Option<i64>,
    pub(super) body: Option<String>,
    pub(super) updated_ms: i64,
}

#[derive(Deserialize)]
pub(super) struct UnitsRow {
    pub(super) units: i64,
}

#[derive(Deserialize)]
pub(super) struct CountedRow {
    pub(super) counted_ms: i64,
}

#[derive(Deserialize)]
pub(super) struct CounterRow {
    pub(super) value: i64,
}

pub(super) fn first<T: DeserializeOwned>(
    sql: &SqlStorage,
    query: &str,
    bindings: Vec<SqlStorageValue>,
) -> worker::Result<Option<T>> {
    Ok(sql
        .exec(query, bindings)?
        .to_array::<T>()?
        .into_iter()
        .next())
}

#[derive(Deserialize)]
pub(super) struct DoubtRow {
    pub(super) fingerprint: String,
    pub(super) attempt: i64,
    pub(super) proof: Option<String>,
    pub(super) updated_ms: i64,
}

/// The record of `key`, if any: its `idempotency` row, or its `doubtful_keys` row (a key in
/// doubt: a table of its own, so objects created before it keep their `idempotency` schema).
pub(super) fn read_record(sql: &SqlStorage, key: &str) -> worker::Result<Option<Record>> {
    if let Some(d) = first::<DoubtRow>(
        sql,
        "SELECT fingerprint, attempt, proof, updated_ms FROM doubtful_keys WHERE key = ?",
        vec![key.into()],
    )? {
        return Ok(Some(Record {
            fingerprint: d.fingerprint,
            attempt: d.attempt,
            state: RecordState::InDoubt { proof: d.proof },
            updated_ms: d.updated_ms,
        }));
    }
    let row: Option<RecordRow> = first(
        sql,
        "SELECT fingerprint, attempt, state, status, body, updated_ms FROM idempotency WHERE key = ?",
        vec![key.into()],
    )?;
    Ok(row.map(|r| {
        let state = match (
            r.state.as_str(),
            r.status.and_then(|s| u16::try_from(s).ok()),
            r.body,
        ) {
            ("done", Some(status), Some(body)) => RecordState::Done { status, body },
            _ => RecordState::InFlight,
        };
        Record {
            fingerprint: r.fingerprint,
            attempt: r.attempt,
            state,
            updated_ms: r.updated_ms,
        }
    }))
}

/// The rows `begin` decides over, for `input`'s key and SKU.
pub(super) fn snapshot(sql: &SqlStorage, input: &BeginRequest) -> worker::Result<Snapshot> {
    Ok(Snapshot {
        tat_us: first::<TatRow>(sql, "SELECT tat_us FROM gcra WHERE id = 1", vec![])?
            .map(|r| r.tat_us),
        record: read_record(sql, &input.key)?,
        bought: bought(sql, &input.sku)?,
        counted_ms: first::<CountedRow>(
            sql,
            "SELECT counted_ms FROM units_counted_at WHERE sku = ?",
            vec![input.sku.as_str().into()],
        )?
        .map(|r| r.counted_ms),
        proof_spent: match &input.proof {
            Some(proof) => spent::is_spent(sql, proof)?,
            None => false,
        },
    })
}

/// The units of `sku` this user bought through the edge.
pub(super) fn bought(sql: &SqlStorage, sku: &str) -> worker::Result<i64> {
    Ok(first::<UnitsRow>(
        sql,
        "SELECT units FROM units_bought WHERE sku = ?",
        vec![sku.into()],
    )?
    .map_or(0, |r| r.units))
}

/// A number this object never handed out before: the attempt of a claimed key.
pub(super) fn next_attempt(sql: &SqlStorage) -> worker::Result<i64> {
    sql.exec(
        "INSERT INTO counters (name, value) VALUES ('attempt', 1) ON CONFLICT (name) DO UPDATE SET value = value + 1",
        None,
    )?;
    Ok(first::<CounterRow>(
        sql,
        "SELECT value FROM counters WHERE name = 'attempt'",
        vec![],
    )?
    .map_or(1, |r| r.value))
}

/// Writes what `begin` or `finish` decided for `key` of `sku`.
pub(super) fn apply(
    sql: &SqlStorage,
    key: &str,
    sku: &str,
    effects: Effects,
) -> worker::Result<()> {
    if let Some(proof) = &effects.spend {
        spent::record(sql, proof, now_ms())?;
    }
    if let Some(tat) = effects.new_tat_us {
        sql.exec(
            "INSERT INTO gcra (id, tat_us) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET tat_us = excluded.tat_us",
            vec![SqlStorageValue::try_from_i64(tat)?],
        )?;
    }
    if !matches!(effects.record, RecordChange::Keep) {
        // A key is in one table at most: a new record replaces a doubt, and the reverse.
        sql.exec("DELETE FROM doubtful_keys WHERE key = ?", vec![key.into()])?;
    }
    match effects.record {
        RecordChange::Keep => {}
        RecordChange::Delete => {
            sql.exec("DELETE FROM idempotency WHERE key = ?", vec![key.into()])?;
        }
        RecordChange::Put(Record {
            fingerprint,
            attempt,
            state: RecordState::InDoubt { proof },
            updated_ms,
        }) => {
            sql.exec("DELETE FROM idempotency WHERE key = ?", vec![key.into()])?;
            sql.exec(
                "INSERT INTO doubtful_keys (key, fingerprint, attempt, proof, updated_ms) VALUES (?, ?, ?, ?, ?)",
                vec![
                    key.into(),
                    fingerprint.into(),
                    attempt.into(),
                    proof.into(),
                    updated_ms.into(),
                ],
            )?;
        }
        RecordChange::Put(record) => {
            let (state, status, body) = match record.state {
                RecordState::Done { status, body } => ("done", Some(i64::from(status)), Some(body)),
                RecordState::InFlight | RecordState::InDoubt { .. } => ("in_flight", None, None),
            };
            sql.exec(
                "INSERT OR REPLACE INTO idempotency (key, fingerprint, attempt, state, status, body, updated_ms) \
                 VALUES (?, ?, ?, ?, ?, ?, ?)",
                vec![
                    key.into(),
                    record.fingerprint.into(),
                    record.attempt.into(),
                    state.into(),
                    status.into(),
                    body.into(),
                    record.updated_ms.into(),
                ],
            )?;
        }
    }
    if effects.bought_delta != 0 {
        sql.exec(
            "INSERT INTO units_bought (sku, units) VALUES (?, ?) ON CONFLICT (sku) DO UPDATE SET units = units + excluded.units",
            vec![sku.into(), effects.bought_delta.into()],
        )?;
    }
    if effects.count_confirmed {
        sql.exec(
            "INSERT INTO units_counted_at (sku, counted_ms) VALUES (?, ?) ON CONFLICT (sku) DO UPDATE SET counted_ms = excluded.counted_ms",
            vec![sku.into(), now_ms().into()],
        )?;
    }
    Ok(())
}
