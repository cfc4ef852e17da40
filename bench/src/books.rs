//! The invariant check after a run, against the database: for every SKU and every sale
//! generation the run put on sale (a PUT starts a new generation),
//!
//! - no oversell: units ordered never exceed the units put on sale, stock never below 0;
//! - stock + sold == initial: units put on sale − units remaining == units in the orders;
//! - no user above the cap (the cap counts across generations, like the origin's);
//! - every 201 has exactly one order row, and every order of those generations was answered 201.

use anyhow::Context;

/// One generation of a SKU's sale, as the run put it on sale.
#[derive(Debug, Clone)]
pub(crate) struct Generation {
    /// The `skus.generation` number.
    pub(crate) number: i64,
    /// Units put on sale by the PUT that started it.
    pub(crate) initial: i64,
    /// Units left when the next generation replaced it (`None` for the current generation:
    /// read from the database).
    pub(crate) closed_with: Option<i64>,
}

/// What the run put on sale for one SKU.
#[derive(Debug, Clone)]
pub(crate) struct SkuBooks {
    pub(crate) sku: String,
    pub(crate) cap: i64,
    /// Oldest first; the last one is the current generation.
    pub(crate) generations: Vec<Generation>,
}

/// What the database says after the run (sums over every SKU and generation checked).
#[derive(Debug, Default)]
pub(crate) struct Invariants {
    pub(crate) initial: i64,
    pub(crate) remaining: i64,
    pub(crate) units_in_orders: i64,
    pub(crate) max_units_per_user: i64,
    pub(crate) cap: i64,
    pub(crate) distinct_201_orders: usize,
    pub(crate) orders_found_for_201s: i64,
    pub(crate) orders_total: i64,
    pub(crate) violations: Vec<String>,
}

impl Invariants {
    pub(crate) fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

/// The current generation of `sku` (right after the run's PUT, it is the run's generation).
pub(crate) async fn current_generation(database_url: &str, sku: &str) -> anyhow::Result<i64> {
    let pool = connect(database_url).await?;
    Ok(
        sqlx::query_scalar("SELECT generation FROM skus WHERE sku = $1")
            .bind(sku)
            .fetch_one(&pool)
            .await?,
    )
}

async fn connect(database_url: &str) -> anyhow::Result<sqlx::PgPool> {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(database_url)
        .await
        .context("connecting for the invariant check")
}

/// Checks the books of `skus` against the database, given the order ids answered 201.
pub(crate) async fn check(
    database_url: &str,
    skus: &[SkuBooks],
    order_ids: &[String],
) -> anyhow::Result<Invariants> {
    let pool = connect(database_url).await?;
    let mut inv = Invariants {
        distinct_201_orders: order_ids.len(),
        ..Invariants::default()
    };
    for books in skus {
        let sku = books.sku.as_str();
        let (db_initial, remaining, current): (i64, i64, i64) =
            sqlx::query_as("SELECT initial_stock, stock, generation FROM skus WHERE sku = $1")
                .bind(sku)
                .fetch_one(&pool)
                .await
                .with_context(|| format!("reading sku {sku}"))?;
        let numbers: Vec<i64> = books.generations.iter().map(|g| g.number).collect();
        match books.generations.last() {
            Some(last) if last.number == current && last.initial == db_initial => {}
            _ => inv.violations.push(format!(
                "{sku}: the database is at generation {current} with {db_initial} on sale, not what the run put on sale"
            )),
        }
        inv.remaining += remaining;
        if remaining < 0 {
            inv.violations.push(format!("{sku}: stock {remaining} < 0"));
        }
        for g in &books.generations {
            let (units, orders): (i64, i64) = sqlx::query_as(
                "SELECT COALESCE(SUM(qty), 0)::BIGINT, COUNT(*) FROM orders WHERE sku = $1 AND generation = $2",
            )
            .bind(sku)
            .bind(g.number)
            .fetch_one(&pool)
            .await?;
            let left = if g.number == current {
                remaining
            } else {
                g.closed_with.unwrap_or(0)
            };
            inv.initial += g.initial;
            inv.units_in_orders += units;
            inv.orders_total += orders;
            if g.initial - left != units {
                inv.violations.push(format!(
                    "{sku} generation {}: sold {} != units in orders {units}",
                    g.number,
                    g.initial - left
                ));
            }
            if units > g.initial {
                inv.violations.push(format!(
                    "{sku} generation {}: oversell: {units} units ordered of {}",
                    g.number, g.initial
                ));
            }
        }
        let max_user: i64 = sqlx::query_scalar(
            "SELECT COALESCE(MAX(s), 0)::BIGINT FROM (SELECT SUM(qty) AS s FROM orders WHERE sku = $1 AND generation = ANY($2) GROUP BY user_id) t",
        )
        .bind(sku)
        .bind(&numbers)
        .fetch_one(&pool)
        .await?;
        inv.max_units_per_user = inv.max_units_per_user.max(max_user);
        inv.cap = inv.cap.max(books.cap);
        if max_user > books.cap {
            inv.violations.push(format!(
                "{sku}: a user holds {max_user} units, above the cap {}",
                books.cap
            ));
        }
    }
    let found: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM orders WHERE order_id::text = ANY($1)")
            .bind(order_ids)
            .fetch_one(&pool)
            .await?;
    inv.orders_found_for_201s = found;
    if i64::try_from(order_ids.len()).unwrap_or(-1) != found {
        inv.violations.push(format!(
            "{} distinct 201 order ids, {found} found in orders",
            order_ids.len()
        ));
    }
    if inv.orders_total != found {
        inv.violations.push(format!(
            "{} orders in the database but {found} were answered 201",
            inv.orders_total
        ));
    }
    Ok(inv)
}
