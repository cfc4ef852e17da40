//! Reconciliation: re-derives the sale's invariants from the rows themselves and reports every
//! discrepancy. Run by `origin reconcile` (exit code 1 when anything is off) and periodically by
//! the server, which exports the count as `origin_reconcile_discrepancies`.
//!
//! Checks, per SKU and sale generation (a PUT starts a new generation):
//! - units put on sale − units remaining == units in the generation's orders (no oversell, no
//!   lost decrement);
//! - no user holds more units of the generation than `max_per_user`;
//! - each user's `user_units` counter (what the cap is enforced from) equals the units in the
//!   user's orders of the SKU, across generations;
//! - every stored 201 points at an existing order, and every order younger than the idempotency
//!   retention has its stored 201.

use std::fmt;
use std::time::Duration;

use sqlx::PgPool;

use crate::pseudonym::Pseudonyms;
use crate::store::StoreError;

/// One thing that does not add up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Discrepancy {
    /// `initial - remaining != sold` for the SKU's current generation.
    StockMismatch {
        sku: String,
        initial: i64,
        remaining: i64,
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
}

impl fmt::Display for Discrepancy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::StockMismatch {
                sku,
                initial,
                remaining,
                units_in_orders,
            } => write!(
                f,
                "sku {sku}: {initial} on sale - {remaining} remaining = {} but orders hold {units_in_orders} units",
                initial - remaining
            ),
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
            Self::StockMismatch { .. } | Self::OrderWithoutAnswer { .. } => {}
        }
        d
    }
}

/// Runs every check; an empty list means the books balance.
pub async fn reconcile(pool: &PgPool, retention: Duration) -> Result<Vec<Discrepancy>, StoreError> {
    let mut found = Vec::new();
    let stock: Vec<(String, i64, i64, i64)> = sqlx::query_as(
        "SELECT s.sku, s.initial_stock, s.stock, COALESCE(SUM(o.qty), 0)::BIGINT
         FROM skus s LEFT JOIN orders o ON o.sku = s.sku AND o.generation = s.generation
         GROUP BY s.sku, s.initial_stock, s.stock
         HAVING s.initial_stock - s.stock <> COALESCE(SUM(o.qty), 0)
         ORDER BY s.sku",
    )
    .fetch_all(pool)
    .await?;
    found.extend(
        stock
            .into_iter()
            .map(
                |(sku, initial, remaining, units_in_orders)| Discrepancy::StockMismatch {
                    sku,
                    initial,
                    remaining,
                    units_in_orders,
                },
            ),
    );
    let caps: Vec<(String, String, i64, i32)> = sqlx::query_as(
        "SELECT s.sku, o.user_id, SUM(o.qty)::BIGINT, s.max_per_user
         FROM orders o JOIN skus s ON s.sku = o.sku AND o.generation = s.generation
         GROUP BY s.sku, o.user_id, s.max_per_user
         HAVING SUM(o.qty) > s.max_per_user
         ORDER BY s.sku, o.user_id",
    )
    .fetch_all(pool)
    .await?;
    found.extend(
        caps.into_iter()
            .map(|(sku, user, units, cap)| Discrepancy::AboveCap {
                sku,
                user,
                units,
                cap,
            }),
    );
    let counters: Vec<(String, String, i64, i64)> = sqlx::query_as(
        "SELECT COALESCE(c.sku, o.sku), COALESCE(c.user_id, o.user_id),
                COALESCE(c.units, 0), COALESCE(o.units, 0)
         FROM user_units c
         FULL JOIN (SELECT sku, user_id, SUM(qty)::BIGINT AS units FROM orders GROUP BY sku, user_id) o
           ON o.sku = c.sku AND o.user_id = c.user_id
         WHERE COALESCE(c.units, 0) <> COALESCE(o.units, 0)
         ORDER BY 1, 2",
    )
    .fetch_all(pool)
    .await?;
    found.extend(counters.into_iter().map(|(sku, user, counted, in_orders)| {
        Discrepancy::CounterMismatch {
            sku,
            user,
            counted,
            in_orders,
        }
    }));
    let orphans: Vec<(String, String)> = sqlx::query_as(
        "SELECT r.user_id, r.idempotency_key FROM idempotency_records r
         LEFT JOIN orders o ON o.order_id = r.order_id
         WHERE r.status = 201 AND o.order_id IS NULL",
    )
    .fetch_all(pool)
    .await?;
    found.extend(
        orphans
            .into_iter()
            .map(|(user, key)| Discrepancy::AnswerWithoutOrder { user, key }),
    );
    let secs = retention.as_secs_f64();
    let unanswered: Vec<(String,)> = sqlx::query_as(
        "SELECT o.order_id::text FROM orders o
         LEFT JOIN idempotency_records r ON r.order_id = o.order_id
         WHERE r.order_id IS NULL AND o.created_at > now() - make_interval(secs => $1)
         ORDER BY o.created_at",
    )
    .bind(secs)
    .fetch_all(pool)
    .await?;
    found.extend(
        unanswered
            .into_iter()
            .map(|(order_id,)| Discrepancy::OrderWithoutAnswer { order_id }),
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
