//! Reading the Durable Objects' SQLite rows as plain values, without serde (each serde row type
//! costs the Worker its own deserializer: a smaller upload).

use worker::{SqlStorage, SqlStorageValue};

/// The rows of `query` as plain values.
pub(crate) fn raw_rows(
    sql: &SqlStorage,
    query: &str,
    bindings: Vec<SqlStorageValue>,
) -> worker::Result<Vec<Vec<SqlStorageValue>>> {
    sql.exec(query, bindings)?.raw().collect()
}

/// An integer column (SQLite may hand back a float for an integer expression).
pub(crate) fn int(v: Option<&SqlStorageValue>) -> Option<i64> {
    match v {
        Some(SqlStorageValue::Integer(n)) => Some(*n),
        Some(SqlStorageValue::Float(f)) => Some(*f as i64),
        _ => None,
    }
}

/// A text column ("" when it is not text).
pub(crate) fn text(v: Option<&SqlStorageValue>) -> String {
    match v {
        Some(SqlStorageValue::String(s)) => s.clone(),
        _ => String::new(),
    }
}
