//! The invariant check after a run, against the database: for every SKU and every sale
//! generation the run put on sale (a PUT starts a new generation),
//!
//! - no oversell: units ordered never exceed the units put on sale, stock never below 0;
//! - stock + sold == initial: units put on sale − units remaining == units in the orders;
//! - no user above the cap (the cap counts across generations, like the origin's);
//! - every 201 has exactly one order row, and every order of those generations was answered 201.
//!
//! [`check_redis_lua`] checks the same for the redis-lua baseline (`serve/redis_lua.rs`), whose
//! remaining stock and per-user counts live in Redis: units in `lua_orders` == initial − the
//! stock Redis holds == the units Redis counts per user, no oversell, no user above the cap, no
//! (user, key) with two orders, and the 201s and the orders match one for one.

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
    /// No books to check: the target answers canned 201s (the ceiling).
    pub(crate) canned: bool,
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
    check_answered(&pool, OrdersTable::Origin, order_ids, &mut inv).await?;
    Ok(inv)
}

/// Where a target keeps its orders.
#[derive(Debug, Clone, Copy)]
enum OrdersTable {
    /// The origin's `orders`.
    Origin,
    /// The redis-lua baseline's `lua_orders`.
    RedisLua,
}

impl OrdersTable {
    fn name(self) -> &'static str {
        match self {
            Self::Origin => "orders",
            Self::RedisLua => "lua_orders",
        }
    }

    /// Where its orders are, in a violation.
    fn place(self) -> &'static str {
        match self {
            Self::Origin => "the database",
            Self::RedisLua => "lua_orders",
        }
    }
}

/// Every 201 has exactly one order row in `table`, and every one of the `inv.orders_total`
/// orders checked was answered 201; records `inv.orders_found_for_201s`.
async fn check_answered(
    pool: &sqlx::PgPool,
    table: OrdersTable,
    order_ids: &[String],
    inv: &mut Invariants,
) -> anyhow::Result<()> {
    let name = table.name();
    let query = format!("SELECT COUNT(*) FROM {name} WHERE order_id::text = ANY($1)");
    let found: i64 = sqlx::query_scalar(&query)
        .bind(order_ids)
        .fetch_one(pool)
        .await?;
    inv.orders_found_for_201s = found;
    if i64::try_from(order_ids.len()).unwrap_or(-1) != found {
        inv.violations.push(format!(
            "{} distinct 201 order ids, {found} found in {name}",
            order_ids.len()
        ));
    }
    if inv.orders_total != found {
        inv.violations.push(format!(
            "{} orders in {} but {found} were answered 201",
            inv.orders_total,
            table.place()
        ));
    }
    Ok(())
}

/// The redis-lua baseline's Redis hash of a sale: `stock` (units left) and `max` (the per-user
/// cap) — written by its server (`serve/redis_lua.rs`), read by [`check_redis_lua`].
pub(crate) fn sale_key(sku: &str) -> String {
    format!("lua:{sku}:sale")
}

/// The redis-lua baseline's Redis hash of the units each user bought of a sale.
pub(crate) fn users_key(sku: &str) -> String {
    format!("lua:{sku}:users")
}

/// Checks the redis-lua baseline's books for one `sku` the run put on sale with `initial` units
/// and a per-user `cap`, given the order ids answered 201 (see the module docs).
pub(crate) async fn check_redis_lua(
    database_url: &str,
    redis_url: &str,
    sku: &str,
    initial: i64,
    cap: i64,
    order_ids: &[String],
) -> anyhow::Result<Invariants> {
    let pool = connect(database_url).await?;
    let mut redis = redis::Client::open(redis_url)?
        .get_multiplexed_async_connection()
        .await
        .context("connecting to the redis-lua node for the invariant check")?;
    let remaining: Option<i64> = redis::cmd("HGET")
        .arg(sale_key(sku))
        .arg("stock")
        .query_async(&mut redis)
        .await?;
    let per_user: Vec<i64> = redis::cmd("HVALS")
        .arg(users_key(sku))
        .query_async(&mut redis)
        .await?;
    let mut inv = Invariants {
        initial,
        cap,
        distinct_201_orders: order_ids.len(),
        ..Invariants::default()
    };
    let on_sale: Option<i64> =
        sqlx::query_scalar("SELECT initial_stock FROM lua_skus WHERE sku = $1")
            .bind(sku)
            .fetch_optional(&pool)
            .await?;
    if on_sale != Some(initial) {
        inv.violations.push(format!(
            "{sku}: lua_skus holds {on_sale:?} on sale, not the {initial} the run put on sale"
        ));
    }
    let Some(remaining) = remaining else {
        inv.violations
            .push(format!("{sku}: Redis holds no stock for the sale"));
        return Ok(inv);
    };
    inv.remaining = remaining;
    let (units, orders, max_user, duplicates): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT COALESCE(SUM(units), 0)::BIGINT, COALESCE(SUM(orders), 0)::BIGINT,
                COALESCE(MAX(units), 0)::BIGINT, COALESCE(SUM(orders - keys), 0)::BIGINT
         FROM (SELECT SUM(qty) AS units, COUNT(*) AS orders,
                      COUNT(DISTINCT idempotency_key) AS keys
               FROM lua_orders WHERE sku = $1 GROUP BY user_id) per_user",
    )
    .bind(sku)
    .fetch_one(&pool)
    .await?;
    inv.units_in_orders = units;
    inv.orders_total = orders;
    inv.max_units_per_user = max_user;
    if remaining < 0 {
        inv.violations.push(format!("{sku}: stock {remaining} < 0"));
    }
    if initial - remaining != units {
        inv.violations.push(format!(
            "{sku}: sold {} (initial − Redis stock) != units in orders {units}",
            initial - remaining
        ));
    }
    if units > initial {
        inv.violations.push(format!(
            "{sku}: oversell: {units} units ordered of {initial}"
        ));
    }
    let counted: i64 = per_user.iter().sum();
    if counted != units {
        inv.violations.push(format!(
            "{sku}: Redis counts {counted} units bought per user, orders hold {units}"
        ));
    }
    if max_user > cap {
        inv.violations.push(format!(
            "{sku}: a user holds {max_user} units, above the cap {cap}"
        ));
    }
    if duplicates > 0 {
        inv.violations.push(format!(
            "{sku}: {duplicates} order(s) repeat a (user, Idempotency-Key) that already bought"
        ));
    }
    check_answered(&pool, OrdersTable::RedisLua, order_ids, &mut inv).await?;
    Ok(inv)
}
