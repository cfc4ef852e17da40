//! The batch's decisions, in arrival order and in memory, from what `super::read` found: for each
//! attempt its replay, a refusal (key reused or spent, sale closed, unknown SKU, sold out, over
//! the per-user cap) or a new order, with the answer to store — duplicates within the batch
//! decided once, the stock and each user's units counted down as it goes. Nothing is written
//! here: `super::write` writes it all in one statement.

use shared::{ErrorCode, OrderStatus, PurchaseResponse, Sku};
use uuid::Uuid;

use super::read::{BatchReads, LockedSku, Prior};
use super::write::NewRecord;
use crate::decision::{Attempt, Decision, Outcome, StoredAnswer};
use crate::store::StoreError;

/// What [`decide`] decided.
pub(super) struct Decided {
    /// One decision per attempt, in the order given.
    pub(super) decisions: Vec<Decision>,
    /// The orders and stored answers to write.
    pub(super) records: Vec<NewRecord>,
    /// Units left after the batch (0 without a SKU).
    pub(super) stock: i64,
}

/// Decides `attempts` (all for `sku`) in arrival order against the `locked` row (`None`: no such
/// SKU) and the batch's `reads`; a created order is `status` (`held` until `expires_at_text`, or
/// `confirmed`).
pub(super) fn decide(
    sku: &Sku,
    attempts: &[Attempt],
    locked: Option<&LockedSku>,
    reads: BatchReads,
    status: OrderStatus,
    expires_at_text: Option<String>,
) -> Result<Decided, StoreError> {
    let BatchReads {
        prior: mut known,
        mut bought,
    } = reads;

    // `known`: (user, key) -> what decided it, grown with this batch's own decisions so
    // duplicates inside the batch are decided once. `bought`: units per user, grown likewise.

    let mut stock = locked.map_or(0, |r| r.stock);
    // Checked after the replay lookup and before stock and the cap: a closed sale decides nothing.
    let closed = locked.and_then(LockedSku::closed);
    let mut decisions = Vec::with_capacity(attempts.len());
    let mut new_records: Vec<NewRecord> = Vec::new();
    let batch_millis = unix_millis_now();
    for attempt in attempts {
        let qty = i32::try_from(attempt.request.qty.get()).unwrap_or(i32::MAX);
        let id = (
            attempt.user.as_str().to_owned(),
            attempt.key.as_str().to_owned(),
        );
        match known.get(&id) {
            Some(Prior::Answered {
                sku: stored_sku,
                qty: stored_qty,
                answer,
            }) => {
                let same = stored_sku == attempt.request.sku.as_str() && *stored_qty == qty;
                decisions.push(if same {
                    Decision::Replay(answer.clone())
                } else {
                    Decision::KeyReused
                });
                continue;
            }
            Some(Prior::Spent) => {
                decisions.push(Decision::KeySpent);
                continue;
            }
            None => {}
        }
        if let Some(closed) = closed {
            decisions.push(Decision::Closed(closed));
            continue;
        }
        let (answer, outcome, order_id) = match locked {
            None => {
                let (a, o) = refusal(
                    ErrorCode::UnknownSku,
                    format!("there is no sale for sku {sku}"),
                );
                (a, o, None)
            }
            Some(_) if stock < i64::from(qty) => {
                let answer = if stock == 0 {
                    StoredAnswer::sold_out(sku)
                } else {
                    StoredAnswer::refusal(
                        ErrorCode::SoldOut,
                        format!("{sku} has {stock} units left; {qty} requested"),
                    )
                };
                (answer, Outcome::Refused(ErrorCode::SoldOut), None)
            }
            Some(row)
                if bought.get(id.0.as_str()).copied().unwrap_or(0) + i64::from(qty)
                    > i64::from(row.max_per_user) =>
            {
                let already = bought.get(id.0.as_str()).copied().unwrap_or(0);
                let detail = format!(
                    "each user may buy at most {} units of {sku}; you bought {already} and asked for {qty}",
                    row.max_per_user
                );
                let (a, o) = refusal(ErrorCode::PurchaseLimit, detail);
                (a, o, None)
            }
            Some(_) => {
                stock -= i64::from(qty);
                *bought.entry(id.0.clone()).or_default() += i64::from(qty);
                let order_id = new_order_id(batch_millis);
                let body = PurchaseResponse {
                    order_id: order_id.to_string(),
                    sku: sku.to_string(),
                    qty: attempt.request.qty.get(),
                    user: attempt.user.to_string(),
                    remaining: stock,
                    status: Some(status),
                    expires_at: expires_at_text.clone(),
                };
                let body = serde_json::to_string(&body)
                    .map_err(|e| StoreError::Unexpected(sqlx::Error::Encode(Box::new(e))))?;
                (
                    StoredAnswer { status: 201, body },
                    Outcome::Created,
                    Some(order_id),
                )
            }
        };
        new_records.push(NewRecord {
            user: id.0.clone(),
            key: id.1.clone(),
            qty,
            status: i16::try_from(answer.status).unwrap_or(500),
            body: answer.body.clone(),
            order_id,
        });
        known.insert(
            id,
            Prior::Answered {
                sku: sku.to_string(),
                qty,
                answer: answer.clone(),
            },
        );
        decisions.push(Decision::Fresh { answer, outcome });
    }
    Ok(Decided {
        decisions,
        records: new_records,
        stock,
    })
}

/// Milliseconds since the Unix epoch by this process's clock (0 before it).
fn unix_millis_now() -> u64 {
    u64::try_from(shared::Timestamp::now().unix_ms()).unwrap_or(0)
}

/// A new order's id: a UUIDv7 of the batch's millisecond (time-ordered, so a sale's orders go to
/// the right of the primary key), its random bits drawn from the thread's CSPRNG where
/// `Uuid::now_v7` asks the kernel (`getrandom`) once per id. Ids of one millisecond are in no
/// order among themselves; nothing depends on it (locks are taken in id order, whatever it is).
fn new_order_id(millis: u64) -> Uuid {
    uuid::Builder::from_unix_timestamp_millis(millis, &rand::random()).into_uuid()
}

/// A fresh refusal: the answer to store, and its outcome.
fn refusal(code: ErrorCode, detail: String) -> (StoredAnswer, Outcome) {
    (StoredAnswer::refusal(code, detail), Outcome::Refused(code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_ids_are_distinct_version_7_uuids_of_the_batch_millisecond() {
        let millis = 1_796_000_000_123;
        let ids: std::collections::HashSet<Uuid> =
            (0..1000).map(|_| new_order_id(millis)).collect();
        assert_eq!(ids.len(), 1000);
        for id in ids {
            assert_eq!(id.get_version_num(), 7);
            assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
            let (secs, nanos) = id.get_timestamp().expect("a v7 timestamp").to_unix();
            assert_eq!(secs * 1000 + u64::from(nanos) / 1_000_000, millis);
        }
    }
}
