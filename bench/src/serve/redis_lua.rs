//! `bench serve-redis-lua`: the second baseline — the design most open-source flash-sale
//! systems use, built as well as we would build it, so that the origin is compared with what a
//! user would pick instead of it.
//!
//! `POST /v1/purchases` (edge signature checked as at the origin, [`super::edge`]):
//! 1. One Lua script on ONE Redis node decides atomically ([`BUY`]): a replayed (user, key) is
//!    recognised by its marker; otherwise, if stock ≥ qty and the user's units + qty ≤ the cap,
//!    it decrements the stock, increments the user's units and sets the (user, key) marker. All
//!    requests share one multiplexed (pipelined) Redis connection per process.
//! 2. A bought unit's order and its stored answer go into Postgres in one statement (its own
//!    transaction: one round trip, one commit) that takes no SKU row lock: `lua_orders` and
//!    `lua_idempotency` have no foreign key to the SKU.
//! 3. If that write fails, a compensating script ([`GIVE_BACK`]) returns the unit, the user's
//!    count and the marker, and the shopper gets 503 with `Retry-After` (or, when the (user, key)
//!    already has a stored answer, that answer).
//!
//! Answers follow the origin's contract: `201` `{order_id, sku, qty, user, remaining}`; a replay
//! of a stored 201 with `Idempotent-Replayed: true` (a different request under the same key is
//! 422 `idempotency_key_reused`; a key still being written is 409 `idempotency_in_flight`); 409
//! `sold_out` / `purchase_limit` and 404 `unknown_sku` as problem+json, decided in Redis and not
//! stored (a retry is decided again: stock only comes back through a compensation); 503
//! `unavailable` with `Retry-After` when Redis or Postgres fails. `PUT /v1/admin/skus/{sku}`
//! (admin bearer token) puts a sale on: a row in `lua_skus` (the books' initial stock) and the
//! stock and cap in Redis, clearing the users' counts. The design's known weakness is kept, not
//! hidden: a process that dies between the decrement and the commit loses the unit (undersold;
//! the bench's books then fail).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use clap::Args;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use shared::headers::IDEMPOTENT_REPLAYED;
use shared::wire::BodyError;
use shared::{
    BearerTokens, ErrorCode, PurchaseRequest, PurchaseResponse, SecretRing, Sku, SkuUpsert,
    SkuView, UserId,
};

use super::edge::{self, Signed};
use super::problem;
use crate::books::{sale_key, users_key};

/// Decides one purchase atomically. KEYS: the sale hash (`stock`, `max`), the users' units hash,
/// the (user, key) marker. ARGV: user, qty, marker TTL in seconds. Returns `{outcome, stock}`:
/// 0 bought (stock after it), 1 sold out, 2 above the cap, 3 the key was used before, 4 no sale.
pub(crate) const BUY: &str = r"
if redis.call('EXISTS', KEYS[3]) == 1 then return {3, 0} end
local sale = redis.call('HMGET', KEYS[1], 'stock', 'max')
if not sale[1] then return {4, 0} end
local stock = tonumber(sale[1])
local qty = tonumber(ARGV[2])
if stock < qty then return {1, stock} end
local held = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if held + qty > tonumber(sale[2]) then return {2, stock} end
redis.call('HINCRBY', KEYS[2], ARGV[1], qty)
redis.call('SET', KEYS[3], '1', 'EX', ARGV[3])
return {0, redis.call('HINCRBY', KEYS[1], 'stock', -qty)}
";

/// Undoes a [`BUY`] whose order could not be written (same KEYS; ARGV: user, qty). A sale that
/// is gone (Redis restarted) is left alone rather than re-created without its cap.
pub(crate) const GIVE_BACK: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'stock', ARGV[2])
  redis.call('HINCRBY', KEYS[2], ARGV[1], -tonumber(ARGV[2]))
end
redis.call('DEL', KEYS[3])
return 1
";

/// How long Redis remembers that a (user, key) bought (its answer stays in Postgres).
const MARKER_TTL_SECS: u64 = 24 * 3600;
/// Upper bound on one Redis call (a purchase whose call timed out after it ran leaves a unit
/// without an order: the books would show it).
const REDIS_TIMEOUT: Duration = Duration::from_secs(5);

/// The schema, created at start-up (idempotent; serialised across processes by an advisory lock).
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS lua_skus (
    sku            TEXT PRIMARY KEY,
    name           TEXT NOT NULL,
    price_cents    BIGINT NOT NULL,
    initial_stock  BIGINT NOT NULL,
    max_per_user   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS lua_orders (
    order_id         UUID PRIMARY KEY,
    sku              TEXT NOT NULL,
    user_id          TEXT NOT NULL,
    qty              INTEGER NOT NULL,
    idempotency_key  TEXT NOT NULL,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS lua_idempotency (
    user_id          TEXT NOT NULL,
    idempotency_key  TEXT NOT NULL,
    sku              TEXT NOT NULL,
    qty              INTEGER NOT NULL,
    status           SMALLINT NOT NULL,
    body             TEXT NOT NULL,
    order_id         UUID NOT NULL REFERENCES lua_orders (order_id),
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, idempotency_key)
);
";

/// The order and its stored answer, in one statement (one transaction, no SKU row touched).
const RECORD: &str = "
WITH o AS (
    INSERT INTO lua_orders (order_id, sku, user_id, qty, idempotency_key)
    VALUES ($1::uuid, $2, $3, $4, $5)
)
INSERT INTO lua_idempotency (user_id, idempotency_key, sku, qty, status, body, order_id)
VALUES ($3, $5, $2, $4, 201, $6, $1::uuid)";

/// The Redis marker of a (user, key) that bought; the user's length keeps `a:b`+`c` apart from
/// `a`+`b:c`.
fn marker_key(user: &str, key: &str) -> String {
    format!("lua:idem:{}:{user}:{key}", user.len())
}

/// `bench serve-redis-lua` options.
#[derive(Args, Debug, Clone)]
pub(crate) struct RedisLuaArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8091")]
    pub(crate) listen: SocketAddr,
    /// Postgres database for `lua_skus`, `lua_orders`, `lua_idempotency` (created if missing).
    #[arg(long)]
    pub(crate) database_url: String,
    /// The one Redis node holding stock and per-user counts.
    #[arg(long)]
    pub(crate) redis_url: String,
    /// Postgres connections of this process (the origin's `DB_MAX_CONNECTIONS` default).
    #[arg(long, default_value_t = 16)]
    pub(crate) db_pool: u32,
    /// The edge's signing secret (key id `default`), as the origin's `EDGE_SHARED_SECRET`.
    #[arg(long, env = "EDGE_SHARED_SECRET", hide_env_values = true)]
    pub(crate) edge_secret: String,
    /// Bearer token of `PUT /v1/admin/skus/{sku}`, as the origin's `ADMIN_TOKEN`.
    #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true)]
    pub(crate) admin_token: String,
}

#[derive(Debug)]
struct App {
    ring: SecretRing,
    admin: BearerTokens,
    redis: ConnectionManager,
    db: sqlx::PgPool,
    buy: redis::Script,
    give_back: redis::Script,
}

/// Why a purchase or a PUT could not be answered as asked.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Refused(#[from] edge::Refused),
    #[error(transparent)]
    Body(#[from] BodyError),
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("postgres: {0}")]
    Db(#[from] sqlx::Error),
    #[error("the purchase script answered {0}")]
    Script(i64),
    #[error("encoding the answer: {0}")]
    Encode(#[from] serde_json::Error),
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        match self {
            Self::Refused(refused) => refused.into_response(),
            Self::Body(e) => problem(ErrorCode::InvalidRequest, e.to_string()),
            Self::Redis(_) | Self::Db(_) => {
                eprintln!("redis-lua: {self}");
                problem(ErrorCode::Unavailable, "a dependency is unavailable; retry")
            }
            Self::Script(_) | Self::Encode(_) => {
                eprintln!("redis-lua: {self}");
                problem(ErrorCode::Internal, "internal error")
            }
        }
    }
}

/// Connects to Redis and Postgres, creates the schema, and serves until Ctrl-C.
pub(crate) async fn run(args: RedisLuaArgs) -> anyhow::Result<()> {
    let router = router(&args).await?;
    super::serve(args.listen, router).await
}

/// Connects to Redis and Postgres, creates the schema, loads the scripts; the routes.
pub(crate) async fn router(args: &RedisLuaArgs) -> anyhow::Result<Router> {
    let ring = SecretRing::from_config(None, Some(&args.edge_secret), 16)
        .map_err(|e| anyhow::anyhow!("--edge-secret: {e}"))?;
    let admin = BearerTokens::from_config(None, Some(&args.admin_token), 16)
        .map_err(|e| anyhow::anyhow!("--admin-token: {e}"))?;
    let client = redis::Client::open(args.redis_url.as_str()).context("--redis-url")?;
    let redis = ConnectionManager::new_with_config(
        client,
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(REDIS_TIMEOUT)),
    )
    .await
    .context("connecting to Redis")?;
    let db = sqlx::postgres::PgPoolOptions::new()
        .max_connections(args.db_pool.max(1))
        .acquire_timeout(Duration::from_secs(2))
        .connect(&args.database_url)
        .await
        .context("connecting to Postgres")?;
    create_schema(&db).await?;
    let app = App {
        ring,
        admin,
        redis,
        db,
        buy: redis::Script::new(BUY),
        give_back: redis::Script::new(GIVE_BACK),
    };
    // Loaded now so that the first purchases skip the NOSCRIPT round trip.
    let mut con = app.redis.clone();
    app.buy.load_async(&mut con).await?;
    app.give_back.load_async(&mut con).await?;
    Ok(Router::new()
        .route("/v1/purchases", post(purchase))
        .route("/v1/admin/skus/{sku}", put(put_sku))
        .route("/healthz", get(super::ok))
        .route("/readyz", get(super::ok))
        .with_state(Arc::new(app)))
}

async fn create_schema(db: &sqlx::PgPool) -> anyhow::Result<()> {
    let mut tx = db.begin().await?;
    // Two processes starting at once would race on CREATE TABLE IF NOT EXISTS.
    sqlx::query("SELECT pg_advisory_xact_lock(7318008)")
        .execute(&mut *tx)
        .await?;
    sqlx::raw_sql(SCHEMA).execute(&mut *tx).await?;
    tx.commit().await?;
    Ok(())
}

async fn purchase(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    decide(&app, &headers, &body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// The keys one purchase touches.
struct Keys {
    sale: String,
    users: String,
    marker: String,
}

async fn decide(app: &App, headers: &HeaderMap, body: &[u8]) -> Result<Response, Failure> {
    let Signed { user, key } = edge::verify(
        headers,
        &app.ring,
        "/v1/purchases",
        body,
        shared::Timestamp::now().unix_secs(),
    )?;
    let request = PurchaseRequest::from_json(body)?;
    let sku = request.sku.as_str();
    let qty = request.qty.get();
    let keys = Keys {
        sale: sale_key(sku),
        users: users_key(sku),
        marker: marker_key(user.as_str(), key.as_str()),
    };
    let mut con = app.redis.clone();
    let (outcome, stock): (i64, i64) = app
        .buy
        .key(&keys.sale)
        .key(&keys.users)
        .key(&keys.marker)
        .arg(user.as_str())
        .arg(qty)
        .arg(MARKER_TTL_SECS)
        .invoke_async(&mut con)
        .await?;
    match outcome {
        0 => record(app, &keys, &user, key.as_str(), &request, stock).await,
        1 => Ok(problem(
            ErrorCode::SoldOut,
            format!("{stock} unit(s) left, {qty} asked for"),
        )),
        2 => Ok(problem(
            ErrorCode::PurchaseLimit,
            "this purchase would take you above the per-user limit",
        )),
        3 => replay(app, &user, key.as_str(), &request).await,
        4 => Ok(problem(ErrorCode::UnknownSku, format!("no sale for {sku}"))),
        other => Err(Failure::Script(other)),
    }
}

/// Writes the order and its answer; on failure gives the unit back (see the module docs).
async fn record(
    app: &App,
    keys: &Keys,
    user: &UserId,
    key: &str,
    request: &PurchaseRequest,
    remaining: i64,
) -> Result<Response, Failure> {
    let order_id = uuid::Uuid::new_v4().to_string();
    let answer = PurchaseResponse {
        order_id,
        sku: request.sku.as_str().to_owned(),
        qty: request.qty.get(),
        user: user.as_str().to_owned(),
        remaining,
        status: Some(shared::OrderStatus::Confirmed),
        expires_at: None,
    };
    let body = serde_json::to_string(&answer)?;
    let written = sqlx::query(RECORD)
        .bind(&answer.order_id)
        .bind(&answer.sku)
        .bind(user.as_str())
        .bind(i32::try_from(answer.qty).unwrap_or(i32::MAX))
        .bind(key)
        .bind(&body)
        .execute(&app.db)
        .await;
    let Err(e) = written else {
        return Ok(super::created(body));
    };
    let mut con = app.redis.clone();
    let given_back: Result<i64, _> = app
        .give_back
        .key(&keys.sale)
        .key(&keys.users)
        .key(&keys.marker)
        .arg(user.as_str())
        .arg(answer.qty)
        .invoke_async(&mut con)
        .await;
    if let Err(g) = given_back {
        eprintln!(
            "redis-lua: could not give back {} unit(s) of {}: {g}",
            answer.qty, answer.sku
        );
    }
    let duplicate = e
        .as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| c == "23505");
    if duplicate {
        // The key bought before (its marker expired or Redis restarted): answer as then.
        return replay(app, user, key, request).await;
    }
    Err(Failure::Db(e))
}

/// The stored answer of a (user, key) that bought before, or why there is none.
async fn replay(
    app: &App,
    user: &UserId,
    key: &str,
    request: &PurchaseRequest,
) -> Result<Response, Failure> {
    let stored: Option<(String, i32, String)> = sqlx::query_as(
        "SELECT sku, qty, body FROM lua_idempotency WHERE user_id = $1 AND idempotency_key = $2",
    )
    .bind(user.as_str())
    .bind(key)
    .fetch_optional(&app.db)
    .await?;
    Ok(match stored {
        None => problem(
            ErrorCode::IdempotencyInFlight,
            "a request with this Idempotency-Key is still being decided",
        ),
        Some((sku, qty, _))
            if sku != request.sku.as_str() || i64::from(qty) != i64::from(request.qty.get()) =>
        {
            problem(
                ErrorCode::IdempotencyKeyReused,
                "this Idempotency-Key was used with a different request",
            )
        }
        Some((_, _, body)) => {
            let mut res = super::created(body);
            res.headers_mut()
                .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
            res
        }
    })
}

/// `PUT /v1/admin/skus/{sku}`: puts a sale on (see the module docs).
async fn put_sku(
    State(app): State<Arc<App>>,
    Path(sku): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if !presented.is_some_and(|p| app.admin.accepts(p)) {
        return problem(
            ErrorCode::Unauthorized,
            "a valid admin bearer token is required",
        );
    }
    let parsed = Sku::parse(&sku)
        .map_err(BodyError::from)
        .and_then(|sku| Ok((sku, SkuUpsert::from_json(&body)?)));
    let (sku, sale) = match parsed {
        Ok(p) => p,
        Err(e) => return Failure::Body(e).into_response(),
    };
    match put_sale(&app, &sku, &sale).await {
        Ok(()) => {
            let view = SkuView {
                sku: sku.as_str().to_owned(),
                name: sale.name,
                price_cents: sale.price_cents,
                stock: sale.stock,
                held: 0,
                max_per_user: sale.max_per_user,
                starts_at: None,
                ends_at: None,
                paused: false,
                waiting_room: None,
                proof_of_work: None,
                network_limits: None,
            };
            let body = serde_json::to_string(&view).unwrap_or_default();
            let mut res = (StatusCode::OK, body).into_response();
            res.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            res
        }
        Err(e) => e.into_response(),
    }
}

async fn put_sale(app: &App, sku: &Sku, sale: &SkuUpsert) -> Result<(), Failure> {
    sqlx::query(
        "INSERT INTO lua_skus (sku, name, price_cents, initial_stock, max_per_user)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (sku) DO UPDATE SET name = EXCLUDED.name, price_cents = EXCLUDED.price_cents,
             initial_stock = EXCLUDED.initial_stock, max_per_user = EXCLUDED.max_per_user",
    )
    .bind(sku.as_str())
    .bind(&sale.name)
    .bind(sale.price_cents)
    .bind(sale.stock)
    .bind(sale.max_per_user)
    .execute(&app.db)
    .await?;
    let mut con = app.redis.clone();
    redis::pipe()
        .atomic()
        .del(users_key(sku.as_str()))
        .hset_multiple(
            sale_key(sku.as_str()),
            &[("stock", sale.stock), ("max", i64::from(sale.max_per_user))],
        )
        .query_async::<()>(&mut con)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{ADMIN_TOKEN, Cluster, EDGE_SECRET, Server};
    use shared::signing::{self, SignedParts};

    /// Status, `Idempotent-Replayed`, `Retry-After` and JSON body of one purchase.
    type Answer = (u16, Option<String>, Option<String>, serde_json::Value);

    async fn buy(base: &str, sku: &str, user: &str, key: &str, qty: u32) -> Answer {
        let body = format!(r#"{{"sku":"{sku}","qty":{qty}}}"#);
        let parts = SignedParts {
            method: "POST",
            path: "/v1/purchases",
            user,
            idempotency_key: key,
            body: body.as_bytes(),
        };
        let ring = SecretRing::single(EDGE_SECRET);
        let res = reqwest::Client::new()
            .post(format!("{base}/v1/purchases"))
            .header("flashgate-user", user)
            .header("idempotency-key", key)
            .header(
                "flashgate-signature",
                signing::sign(&ring, shared::Timestamp::now().unix_secs(), &parts),
            )
            .body(body)
            .send()
            .await
            .expect("an answer");
        let header = |name: &str| {
            res.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let (replayed, retry_after) = (header("idempotent-replayed"), header("retry-after"));
        let status = res.status().as_u16();
        let json = res.json().await.expect("a JSON body");
        (status, replayed, retry_after, json)
    }

    #[tokio::test]
    async fn the_redis_lua_baseline_keeps_the_contract_and_its_books_balance() {
        let postgres = std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        // One Redis node and a fresh database; the server runs in this process.
        let cluster = Cluster::start(Server::RedisLua { db_pool: 4 }, &postgres, 0)
            .await
            .expect("redis-server and a database");
        let args = RedisLuaArgs {
            listen: "127.0.0.1:0".parse().expect("addr"),
            database_url: cluster.database_url.clone(),
            redis_url: cluster.redis_urls[0].clone(),
            db_pool: 4,
            edge_secret: EDGE_SECRET.into(),
            admin_token: ADMIN_TOKEN.into(),
        };
        let listener = super::super::bind(args.listen).expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let routes = router(&args).await.expect("connected");
        let server = tokio::spawn(super::super::serve_on(listener, routes));
        let sale =
            serde_json::json!({"name": "Lua", "price_cents": 1, "stock": 3, "max_per_user": 2});
        let put = |token: &'static str| {
            reqwest::Client::new()
                .put(format!("{base}/v1/admin/skus/LUA-1"))
                .bearer_auth(token)
                .json(&sale)
                .send()
        };
        assert_eq!(
            put("not-the-admin-token").await.expect("answer").status(),
            401
        );
        assert_eq!(put(ADMIN_TOKEN).await.expect("answer").status(), 200);

        let (status, replayed, _, first) = buy(&base, "LUA-1", "a", "k1", 1).await;
        assert_eq!((status, replayed), (201, None), "{first}");
        assert_eq!(
            (first["remaining"].as_i64(), first["user"].as_str()),
            (Some(2), Some("a"))
        );
        let (status, replayed, _, again) = buy(&base, "LUA-1", "a", "k1", 1).await;
        assert_eq!((status, replayed.as_deref()), (201, Some("true")));
        assert_eq!(again, first, "a replay answers as the first time");
        let (status, _, _, reused) = buy(&base, "LUA-1", "a", "k1", 2).await;
        assert_eq!(
            (status, reused["code"].as_str()),
            (422, Some("idempotency_key_reused"))
        );
        let (status, _, _, capped) = buy(&base, "LUA-1", "a", "k2", 2).await;
        assert_eq!(
            (status, capped["code"].as_str()),
            (409, Some("purchase_limit"))
        );

        // Postgres refuses the order: the unit, the user's count and the key are given back.
        let db = sqlx::PgPool::connect(&cluster.database_url)
            .await
            .expect("db");
        sqlx::query("ALTER TABLE lua_orders ADD CONSTRAINT refuse_all CHECK (qty < 0) NOT VALID")
            .execute(&db)
            .await
            .expect("constraint");
        let (status, _, retry_after, refused) = buy(&base, "LUA-1", "b", "k3", 2).await;
        assert_eq!(
            (status, refused["code"].as_str()),
            (503, Some("unavailable"))
        );
        assert_eq!(retry_after.as_deref(), Some("1"));
        sqlx::query("ALTER TABLE lua_orders DROP CONSTRAINT refuse_all")
            .execute(&db)
            .await
            .expect("drop constraint");
        let (status, _, _, last) = buy(&base, "LUA-1", "b", "k3", 2).await;
        assert_eq!(
            (status, last["remaining"].as_i64()),
            (201, Some(0)),
            "{last}"
        );
        let (status, _, _, sold_out) = buy(&base, "LUA-1", "c", "k4", 1).await;
        assert_eq!((status, sold_out["code"].as_str()), (409, Some("sold_out")));
        let (status, _, _, unknown) = buy(&base, "NO-SALE", "c", "k5", 1).await;
        assert_eq!(
            (status, unknown["code"].as_str()),
            (404, Some("unknown_sku"))
        );

        let ids: Vec<String> = [&first, &last]
            .iter()
            .map(|a| a["order_id"].as_str().expect("order id").to_owned())
            .collect();
        let redis_url = &cluster.redis_urls[0];
        let books =
            crate::books::check_redis_lua(&cluster.database_url, redis_url, "LUA-1", 3, 2, &ids)
                .await
                .expect("books");
        assert!(books.ok(), "{:?}", books.violations);
        assert_eq!((books.units_in_orders, books.remaining), (3, 0));
        // The check can fail: a 201 the books do not know of, or a cap the orders exceed.
        let unknown_201 = [ids.clone(), vec![uuid::Uuid::new_v4().to_string()]].concat();
        for (cap, answered) in [(2, unknown_201.as_slice()), (1, ids.as_slice())] {
            let books = crate::books::check_redis_lua(
                &cluster.database_url,
                redis_url,
                "LUA-1",
                3,
                cap,
                answered,
            )
            .await
            .expect("books");
            assert!(!books.ok(), "cap {cap}, {} ids", answered.len());
        }
        server.abort();
        db.close().await;
        cluster.stop(true).await;
    }

    #[test]
    fn markers_of_different_user_key_pairs_never_collide() {
        assert_ne!(marker_key("a:b", "c"), marker_key("a", "b:c"));
        assert_eq!(marker_key("u", "k"), "lua:idem:1:u:k");
    }
}
