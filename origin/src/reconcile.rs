//! Reconciliation: re-derives the sale's invariants from the rows themselves and reports every
//! discrepancy. Run by `origin reconcile` (exit code 1 when anything is off) and periodically by
//! the server, which exports the count as `origin_reconcile_discrepancies`.
//!
//! Checks, per SKU and sale generation (a PUT starts a new generation; replaced ones keep their
//! books in `sku_generations`):
//! - units put on sale − units remaining − units written off (refunds without restock) == units
//!   in the generation's held, confirmed and paid orders == the generation's `units_out` counter
//!   (no oversell, no lost decrement, no lost or doubled return);
//! - no user holds more units (held, confirmed, paid) of the generation than `max_per_user`;
//! - each user's `user_units` counter (what the cap is enforced from) equals the units in the
//!   user's held, confirmed and paid orders of the SKU, across generations;
//! - every stored 201 points at an existing order, and every order younger than the idempotency
//!   retention has its stored 201;
//! - every payment event that acted on an order (`applied`, `refund_due`, `already_refunded`)
//!   names an existing order, and no event stays `pending` (a delivery that failed half-way)
//!   longer than [`STUCK_EVENT_AFTER`] — Stripe retries a failed delivery for three days, a
//!   retry decides it, so one still pending after that was never retried.
//! - `refund_due` orders (a payment that came after its hold expired, with no unit left): listed
//!   until refunded;
//! - every paid order has its payment record (`order_payments`);
//! - no hold is more than a minute past its `expires_at` (a stuck expiry timer);
//! - every order's events tell its story (issue 34): its last event (in feed order) carries its
//!   state and its count of events, and its sequence numbers run without a gap from 1 — or from
//!   where the retention purge stopped; no committed event waits minutes for its commit number
//!   (the sequencer runs); no event older than an hour is left unsent to an enabled webhook
//!   endpoint outside its retry schedule (never fanned out, or due long ago and not being sent).
//!
//! The queries themselves live in the store layer (`store::books`); this module turns their rows
//! into the report.

use std::fmt;
use std::time::Duration;

use sqlx::PgPool;

use crate::pseudonym::Pseudonyms;
use crate::store::{StoreError, books};

/// How old an event may be before reconciliation expects it delivered or in its retry
/// schedule.
pub const EVENT_DELIVERY_AFTER: Duration = Duration::from_secs(3600);
/// How long a committed event may wait for its commit number.
pub const EVENT_NUMBERING_AFTER: Duration = Duration::from_secs(300);
/// How long past due a delivery nobody sends may be.
pub const DELIVERY_OVERDUE: Duration = Duration::from_secs(600);

/// A payment event still `pending` this long after it arrived is reported (Stripe retries a
/// failed delivery for up to three days).
pub const STUCK_EVENT_AFTER: Duration = Duration::from_secs(4 * 24 * 3600);

/// One thing that does not add up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Discrepancy {
    /// `initial - remaining - written off != taken` for a generation of the SKU (`None`: the
    /// current one).
    StockMismatch {
        sku: String,
        earlier_generation: Option<i64>,
        initial: i64,
        remaining: i64,
        written_off: i64,
        units_in_orders: i64,
    },
    /// A user holds more units of the current generation than the cap.
    AboveCap {
        sku: String,
        user: String,
        units: i64,
        cap: i32,
    },
    /// A user's `user_units` counter disagrees with the units in the user's orders of the SKU.
    CounterMismatch {
        sku: String,
        user: String,
        counted: i64,
        in_orders: i64,
    },
    /// A stored 201 whose order does not exist.
    AnswerWithoutOrder { user: String, key: String },
    /// An order (younger than the retention) without its stored 201.
    OrderWithoutAnswer { order_id: String },
    /// A payment event recorded as having acted on an order that does not exist.
    EventWithoutOrder {
        event_id: String,
        event_type: String,
        result: String,
        order_id: Option<String>,
    },
    /// A payment event whose delivery never finished and was never retried.
    StuckEvent { event_id: String },
    /// A payment arrived after the hold expired and no unit could be taken: refund it.
    RefundDue { order_id: String, sku: String },
    /// A paid order without its payment record.
    PaidWithoutPayment { order_id: String, sku: String },
    /// A hold more than a minute past its `expires_at`.
    StuckHold { order_id: String, sku: String },
    /// Committed transactions whose events wait for their commit number (no sequencer runs).
    EventsNotNumbered { transactions: i64, oldest_secs: i64 },
    /// Events older than an hour the webhook dispatcher never fanned out.
    EventsNotDispatched { events: i64, oldest_secs: i64 },
    /// A delivery to an enabled endpoint outside its retry schedule (nobody sends it).
    StuckDelivery {
        endpoint_id: String,
        event_id: String,
        age_secs: i64,
    },
    /// An order whose kept events disagree with it (see the module docs).
    OrderEvents {
        order_id: String,
        status: String,
        event_seq: i32,
        kept: i64,
        first: Option<i32>,
        highest: Option<i32>,
        last_sequence: Option<i32>,
        last_status: Option<String>,
    },
}

impl fmt::Display for Discrepancy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::StockMismatch {
                sku,
                earlier_generation,
                initial,
                remaining,
                written_off,
                units_in_orders,
            } => {
                write!(f, "sku {sku}")?;
                if let Some(g) = earlier_generation {
                    write!(f, " (replaced generation {g})")?;
                }
                write!(f, ": {initial} on sale - {remaining} remaining")?;
                if *written_off != 0 {
                    write!(f, " - {written_off} written off")?;
                }
                write!(
                    f,
                    " = {} but orders hold {units_in_orders} units",
                    initial - remaining - written_off
                )
            }
            Self::AboveCap {
                sku,
                user,
                units,
                cap,
            } => write!(
                f,
                "sku {sku}: a user holds {units} units above the cap {cap} (user {user})"
            ),
            Self::CounterMismatch {
                sku,
                user,
                counted,
                in_orders,
            } => write!(
                f,
                "sku {sku}: the per-user counter says {counted} units but the user's orders hold {in_orders} (user {user})"
            ),
            Self::AnswerWithoutOrder { user, key } => {
                write!(f, "stored 201 without an order (user {user}, key {key})")
            }
            Self::OrderWithoutAnswer { order_id } => {
                write!(f, "order {order_id} has no stored 201")
            }
            Self::EventWithoutOrder {
                event_id,
                event_type,
                result,
                order_id,
            } => write!(
                f,
                "payment event {event_id} ({event_type}) is recorded {result} but its order {} does not exist",
                order_id.as_deref().unwrap_or("(none)")
            ),
            Self::StuckEvent { event_id } => write!(
                f,
                "payment event {event_id} is still pending: its delivery never finished and was not retried"
            ),
            Self::RefundDue { order_id, sku } => write!(
                f,
                "sku {sku}: order {order_id} is refund_due (paid after its hold expired; refund it)"
            ),
            Self::PaidWithoutPayment { order_id, sku } => {
                write!(
                    f,
                    "sku {sku}: order {order_id} is paid without a payment record"
                )
            }
            Self::StuckHold { order_id, sku } => write!(
                f,
                "sku {sku}: hold {order_id} is more than 60 s past its expires_at (stuck expiry)"
            ),
            Self::EventsNotNumbered {
                transactions,
                oldest_secs,
            } => write!(
                f,
                "{transactions} committed transactions' events wait for their commit number (the oldest for {oldest_secs} s): is an origin running?"
            ),
            Self::EventsNotDispatched {
                events,
                oldest_secs,
            } => write!(
                f,
                "{events} events older than an hour were never fanned out to the webhook endpoints (the oldest {oldest_secs} s old)"
            ),
            Self::StuckDelivery {
                endpoint_id,
                event_id,
                age_secs,
            } => write!(
                f,
                "webhook endpoint {endpoint_id}: event {event_id} ({age_secs} s old) is undelivered and out of its retry schedule"
            ),
            Self::OrderEvents {
                order_id,
                status,
                event_seq,
                kept,
                first,
                highest,
                last_sequence,
                last_status,
            } => {
                let n = |v: &Option<i32>| v.map_or("-".to_owned(), |v| v.to_string());
                write!(
                    f,
                    "order {order_id} is {status} after {event_seq} events, but its events kept \
                     ({kept}, sequence {} to {}) end with sequence {} ({})",
                    n(first),
                    n(highest),
                    n(last_sequence),
                    last_status.as_deref().unwrap_or("-"),
                )
            }
        }
    }
}

impl Discrepancy {
    /// The same report with user ids and keys replaced by their pseudonyms, for logs.
    pub fn redacted(&self, pseudonyms: &Pseudonyms) -> Self {
        let mut d = self.clone();
        match &mut d {
            Self::AboveCap { user, .. } | Self::CounterMismatch { user, .. } => {
                *user = pseudonyms.user(user).to_string();
            }
            Self::AnswerWithoutOrder { user, key } => {
                *key = pseudonyms.key(user, key).to_string();
                *user = pseudonyms.user(user).to_string();
            }
            Self::StockMismatch { .. }
            | Self::OrderWithoutAnswer { .. }
            | Self::EventWithoutOrder { .. }
            | Self::StuckEvent { .. }
            | Self::RefundDue { .. }
            | Self::PaidWithoutPayment { .. }
            | Self::StuckHold { .. }
            | Self::EventsNotNumbered { .. }
            | Self::EventsNotDispatched { .. }
            | Self::StuckDelivery { .. }
            | Self::OrderEvents { .. } => {}
        }
        d
    }
}

/// Runs every check; an empty list means the books balance.
pub async fn reconcile(pool: &PgPool, retention: Duration) -> Result<Vec<Discrepancy>, StoreError> {
    let mut found = Vec::new();
    found.extend(books::stock_mismatches(pool).await?.into_iter().map(|r| {
        Discrepancy::StockMismatch {
            sku: r.sku,
            earlier_generation: (!r.current).then_some(r.generation),
            initial: r.initial_stock,
            remaining: r.stock,
            written_off: r.written_off,
            units_in_orders: r.units_in_orders,
        }
    }));
    found.extend(
        books::above_cap(pool)
            .await?
            .into_iter()
            .map(|r| Discrepancy::AboveCap {
                sku: r.sku,
                user: r.user_id,
                units: r.units,
                cap: r.max_per_user,
            }),
    );
    found.extend(books::counter_mismatches(pool).await?.into_iter().map(|r| {
        Discrepancy::CounterMismatch {
            sku: r.sku,
            user: r.user_id,
            counted: r.counted,
            in_orders: r.in_orders,
        }
    }));
    found.extend(
        books::answers_without_order(pool)
            .await?
            .into_iter()
            .map(|r| Discrepancy::AnswerWithoutOrder {
                user: r.user_id,
                key: r.idempotency_key,
            }),
    );
    found.extend(
        books::orders_without_answer(pool, retention)
            .await?
            .into_iter()
            .map(|order_id| Discrepancy::OrderWithoutAnswer { order_id }),
    );
    found.extend(
        books::events_without_order(pool)
            .await?
            .into_iter()
            .map(|r| Discrepancy::EventWithoutOrder {
                event_id: r.event_id,
                event_type: r.event_type,
                result: r.result,
                order_id: r.order_id,
            }),
    );
    found.extend(
        books::stuck_events(pool, STUCK_EVENT_AFTER)
            .await?
            .into_iter()
            .map(|event_id| Discrepancy::StuckEvent { event_id }),
    );
    found.extend(
        books::refund_due(pool)
            .await?
            .into_iter()
            .map(|r| Discrepancy::RefundDue {
                order_id: r.order_id,
                sku: r.sku,
            }),
    );
    found.extend(
        books::paid_without_payment(pool)
            .await?
            .into_iter()
            .map(|r| Discrepancy::PaidWithoutPayment {
                order_id: r.order_id,
                sku: r.sku,
            }),
    );
    found.extend(
        books::stuck_holds(pool, crate::orders::expiry::OVERDUE)
            .await?
            .into_iter()
            .map(|r| Discrepancy::StuckHold {
                order_id: r.order_id,
                sku: r.sku,
            }),
    );
    let (transactions, oldest_secs) = books::unnumbered(pool, EVENT_NUMBERING_AFTER).await?;
    if transactions > 0 {
        found.push(Discrepancy::EventsNotNumbered {
            transactions,
            oldest_secs,
        });
    }
    let (events, oldest_secs) = books::undispatched(pool, EVENT_DELIVERY_AFTER).await?;
    if events > 0 {
        found.push(Discrepancy::EventsNotDispatched {
            events,
            oldest_secs,
        });
    }
    found.extend(
        books::stuck_deliveries(pool, EVENT_DELIVERY_AFTER, DELIVERY_OVERDUE)
            .await?
            .into_iter()
            .map(|r| Discrepancy::StuckDelivery {
                endpoint_id: r.endpoint_id,
                event_id: crate::events::wire_id(r.event_id),
                age_secs: r.age_secs,
            }),
    );
    found.extend(
        books::order_event_mismatches(pool)
            .await?
            .into_iter()
            .map(|r| Discrepancy::OrderEvents {
                order_id: r.order_id,
                status: r.status,
                event_seq: r.event_seq,
                kept: r.kept,
                first: r.first,
                highest: r.highest,
                last_sequence: r.last_sequence,
                last_status: r.last_status,
            }),
    );
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_reports_name_users_and_keys_only_by_pseudonym() {
        let p = Pseudonyms::new(b"test-log-hash-key");
        let found = [
            Discrepancy::AboveCap {
                sku: "S".into(),
                user: "alice@example.com".into(),
                units: 3,
                cap: 2,
            },
            Discrepancy::AnswerWithoutOrder {
                user: "alice@example.com".into(),
                key: "key-123".into(),
            },
        ];
        for d in &found {
            let shown = d.redacted(&p).to_string();
            assert!(
                !shown.contains("alice") && !shown.contains("key-123"),
                "{shown}"
            );
            assert!(
                shown.contains(&p.user("alice@example.com").to_string()),
                "{shown}"
            );
        }
        assert!(
            found[1]
                .redacted(&p)
                .to_string()
                .contains(&p.key("alice@example.com", "key-123").to_string())
        );
    }
}
