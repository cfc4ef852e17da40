//! `UserGate`: one SQLite-backed Durable Object per shopper (named by the user id), holding that
//! user's GCRA state (the purchase bucket, and the `order` bucket of `crate::orders`), idempotency
//! records, units bought per SKU (with when the origin last confirmed the count), the orders
//! whose cancellation gave units back and the proofs of work its purchases spent (`super::spent`). A purchase attempt is one call, `purchase`: the object
//! runs `begin` (read, decide with [`crate::gate`], write — no `.await` in between, so it is
//! atomic for the user: the rate limit is exact and the key is claimed in flight before anything
//! else can run), then, for a claimed attempt, sends the worker's signed call to the origin with
//! its deadline (other requests of the user are served meanwhile, and a second one with the same
//! key finds it in flight: 409), then `finish` (atomic too) stores or releases the key with the
//! answer, which goes back to the worker. There is no global object: load spreads with the users.
//!
//! Completed records (and returned-order marks) are purged by an alarm once older than
//! `IDEMPOTENCY_RETENTION_SECS` (>= 24 h).

use std::cell::Cell;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use shared::UserId;
use worker::wasm_bindgen::JsValue;
use worker::{
    DurableObject, Env, Error, Method, Request, RequestInit, Response, SqlStorage, SqlStorageValue,
    State, Stub, durable_object,
};

use crate::config::{Settings, defaults};
use crate::forward::{Forwarded, OriginAnswer};
use crate::gate::{self, Effects, RecordChange, Snapshot};
use crate::gcra::Policy;
use crate::idempotency::{Record, State as RecordState};
use crate::protocol::{
    BeginReply, BeginRequest, FinishReply, FinishRequest, LIMIT_PATH, LimitRequest, PURCHASE_PATH,
    PurchaseReply, PurchaseRequest, RETURNED_PATH, RateOutcome, ReturnedReply, ReturnedRequest,
    Verdict,
};

use super::http::now_ms;
use super::origin;
use super::spent;

/// The binding name of the namespace in `wrangler.toml`.
pub(crate) const BINDING: &str = "USER_GATE";

const SCHEMA: &str = "
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
";

#[durable_object(alarm)]
#[allow(unreachable_pub)] // exported to JavaScript by the macro; it must be `pub`
pub struct UserGate {
    state: State,
    env: Env,
    /// Whether `SCHEMA` ran in this instance (a `Cell`: methods take `&self`).
    schema_ready: Cell<bool>,
    /// Whether this instance saw the purge alarm set (by itself or before it): then a stored
    /// record needs no storage call to check it. Cleared when the alarm runs.
    alarm_armed: Cell<bool>,
}

impl std::fmt::Debug for UserGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserGate")
            .field("schema_ready", &self.schema_ready.get())
            .finish_non_exhaustive()
    }
}

impl DurableObject for UserGate {
    fn new(state: State, env: Env) -> Self {
        Self {
            state,
            env,
            schema_ready: Cell::new(false),
            alarm_armed: Cell::new(false),
        }
    }

    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        let path = req.path();
        if req.method() != Method::Post {
            return Response::error("method not allowed", 405);
        }
        match path.as_str() {
            PURCHASE_PATH => {
                let Ok(input) = req.json::<PurchaseRequest>().await else {
                    return Response::error("bad purchase", 400);
                };
                Response::from_json(&self.purchase(input).await?)
            }
            LIMIT_PATH => {
                let Ok(input) = req.json::<LimitRequest>().await else {
                    return Response::error("bad limit", 400);
                };
                Response::from_json(&self.limit(&input)?)
            }
            RETURNED_PATH => {
                let Ok(input) = req.json::<ReturnedRequest>().await else {
                    return Response::error("bad returned", 400);
                };
                let reply = self.returned(&input)?;
                if reply.applied {
                    self.arm_alarm().await;
                }
                Response::from_json(&reply)
            }
            _ => Response::error("not found", 404),
        }
    }

    async fn alarm(&self) -> worker::Result<Response> {
        self.alarm_armed.set(false);
        let sql = self.sql()?;
        let retention_ms = i64::from(self.retention_secs()) * 1_000;
        let now = now_ms();
        let cutoff = gate::purge_cutoff_ms(now, retention_ms);
        sql.exec(
            "DELETE FROM idempotency WHERE updated_ms < ?",
            vec![cutoff.into()],
        )?;
        sql.exec(
            "DELETE FROM returned_orders WHERE updated_ms < ?",
            vec![cutoff.into()],
        )?;
        #[derive(Deserialize)]
        struct Oldest {
            oldest: Option<i64>,
        }
        let oldest = sql
            .exec(
                "SELECT MIN(updated_ms) AS oldest FROM \
                 (SELECT updated_ms FROM idempotency UNION ALL SELECT updated_ms FROM returned_orders)",
                None,
            )?
            .one::<Oldest>()?
            .oldest;
        if let Some(oldest) = oldest {
            let at = gate::next_alarm_ms(oldest, retention_ms);
            self.state
                .storage()
                .set_alarm(at.saturating_sub(now).max(1_000))
                .await?;
            self.alarm_armed.set(true);
        }
        Response::ok("purged")
    }
}

#[derive(Deserialize)]
struct TatRow {
    tat_us: i64,
}

#[derive(Deserialize)]
struct RecordRow {
    fingerprint: String,
    attempt: i64,
    state: String,
    status: Option<i64>,
    body: Option<String>,
    updated_ms: i64,
}

#[derive(Deserialize)]
struct UnitsRow {
    units: i64,
}

#[derive(Deserialize)]
struct CountedRow {
    counted_ms: i64,
}

#[derive(Deserialize)]
struct CounterRow {
    value: i64,
}

fn first<T: DeserializeOwned>(
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

impl UserGate {
    fn sql(&self) -> worker::Result<SqlStorage> {
        let sql = self.state.storage().sql();
        if !self.schema_ready.get() {
            sql.exec(SCHEMA, None)?;
            sql.exec(spent::SCHEMA, None)?;
            self.schema_ready.set(true);
        }
        Ok(sql)
    }

    fn retention_secs(&self) -> u32 {
        Settings::from_lookup(|name| self.env.var(name).ok().map(|v| v.to_string()))
            .map_or(defaults::IDEMPOTENCY_RETENTION_SECS, |s| s.retention_secs)
    }

    fn read_record(sql: &SqlStorage, key: &str) -> worker::Result<Option<Record>> {
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

    /// `purchase`: `begin`; for a claimed attempt, the origin call and `finish` with its answer.
    /// `begin` claims the key (in flight) before the first `.await`, so a concurrent request with
    /// the same key, delivered while the origin call is out, finds it in flight (409); `finish`
    /// runs without an `.await` too, and ignores an attempt that was taken over meanwhile.
    async fn purchase(&self, input: PurchaseRequest) -> worker::Result<PurchaseReply> {
        let (BeginReply { rate, verdict }, _) = self.begin(&input.begin)?;
        let Verdict::Proceed { attempt } = verdict else {
            return Ok(PurchaseReply {
                rate,
                verdict,
                forwarded: None,
            });
        };
        let call = &input.origin;
        let headers: Vec<(&str, String)> = call
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.clone()))
            .collect();
        let answer = origin::send(
            Method::Post,
            &call.url,
            &headers,
            Some(&call.body),
            call.timeout_ms,
        )
        .await;
        let forwarded = match &answer {
            Ok(r) => Forwarded::from_origin(Some(OriginAnswer {
                status: r.status,
                body: &r.body,
                retry_after: r.retry_after.as_deref(),
                replayed: r.replayed,
            })),
            Err(e) => {
                worker::console_warn!("purchase forward: {e}");
                Forwarded::from_origin(None)
            }
        };
        let begin = input.begin;
        let finish = FinishRequest {
            key: begin.key,
            attempt,
            sku: begin.sku,
            qty: begin.qty,
            status: forwarded.status,
            body: forwarded.body.clone(),
        };
        match self.finish(&finish) {
            Ok((_, true)) => self.arm_alarm().await,
            Ok((_, false)) => {}
            // The answer still goes out. The key stays in flight until the timeout; a retry then
            // reaches the origin, which replays its stored outcome.
            Err(e) => worker::console_warn!("user gate finish failed: {e}"),
        }
        Ok(PurchaseReply {
            rate,
            verdict: Verdict::Proceed { attempt },
            forwarded: Some(forwarded),
        })
    }

    /// `begin`, synchronously; returns the reply and whether a completed record was stored.
    fn begin(&self, input: &BeginRequest) -> worker::Result<(BeginReply, bool)> {
        let sql = self.sql()?;
        let policy = Policy::new(&input.rate.name, input.rate.quota, input.rate.window_secs)
            .map_err(|e| Error::RustError(format!("rate policy: {e}")))?;
        let snapshot = Snapshot {
            tat_us: first::<TatRow>(&sql, "SELECT tat_us FROM gcra WHERE id = 1", vec![])?
                .map(|r| r.tat_us),
            record: Self::read_record(&sql, &input.key)?,
            bought: first::<UnitsRow>(
                &sql,
                "SELECT units FROM units_bought WHERE sku = ?",
                vec![input.sku.as_str().into()],
            )?
            .map_or(0, |r| r.units),
            counted_ms: first::<CountedRow>(
                &sql,
                "SELECT counted_ms FROM units_counted_at WHERE sku = ?",
                vec![input.sku.as_str().into()],
            )?
            .map(|r| r.counted_ms),
            proof_spent: match &input.proof {
                Some(proof) => spent::is_spent(&sql, proof)?,
                None => false,
            },
        };
        sql.exec(
            "INSERT INTO counters (name, value) VALUES ('attempt', 1) ON CONFLICT (name) DO UPDATE SET value = value + 1",
            None,
        )?;
        let attempt = first::<CounterRow>(
            &sql,
            "SELECT value FROM counters WHERE name = 'attempt'",
            vec![],
        )?
        .map_or(1, |r| r.value);
        let (reply, effects) = gate::begin(&policy, &snapshot, input, now_ms(), attempt);
        let stored = effects.record.stores_done();
        Self::apply(&sql, &input.key, &input.sku, effects)?;
        Ok((reply, stored))
    }

    /// `limit`, synchronously: one request of the named bucket.
    fn limit(&self, input: &LimitRequest) -> worker::Result<RateOutcome> {
        let sql = self.sql()?;
        let policy = Policy::new(&input.rate.name, input.rate.quota, input.rate.window_secs)
            .map_err(|e| Error::RustError(format!("rate policy: {e}")))?;
        let tat = first::<TatRow>(
            &sql,
            "SELECT tat_us FROM gcra_buckets WHERE name = ?",
            vec![input.rate.name.as_str().into()],
        )?
        .map(|r| r.tat_us);
        let (outcome, new_tat) = gate::limit(&policy, tat, now_ms());
        if let Some(tat) = new_tat {
            sql.exec(
                "INSERT INTO gcra_buckets (name, tat_us) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET tat_us = excluded.tat_us",
                vec![
                    input.rate.name.as_str().into(),
                    SqlStorageValue::try_from_i64(tat)?,
                ],
            )?;
        }
        Ok(outcome)
    }

    /// `returned`, synchronously: the units of a cancelled order leave the user's count, once.
    fn returned(&self, input: &ReturnedRequest) -> worker::Result<ReturnedReply> {
        #[derive(Deserialize)]
        struct Seen {
            #[allow(dead_code)]
            order_id: String,
        }
        let sql = self.sql()?;
        let already = first::<Seen>(
            &sql,
            "SELECT order_id FROM returned_orders WHERE order_id = ?",
            vec![input.order_id.as_str().into()],
        )?
        .is_some();
        let bought = first::<UnitsRow>(
            &sql,
            "SELECT units FROM units_bought WHERE sku = ?",
            vec![input.sku.as_str().into()],
        )?
        .map_or(0, |r| r.units);
        let delta = gate::returned_delta(bought, input.qty, already);
        if already {
            return Ok(ReturnedReply { applied: false });
        }
        sql.exec(
            "INSERT INTO returned_orders (order_id, updated_ms) VALUES (?, ?)",
            vec![input.order_id.as_str().into(), now_ms().into()],
        )?;
        if delta != 0 {
            sql.exec(
                "UPDATE units_bought SET units = units + ? WHERE sku = ?",
                vec![delta.into(), input.sku.as_str().into()],
            )?;
        }
        Ok(ReturnedReply { applied: true })
    }

    /// `finish`, synchronously; returns the reply and whether a completed record was stored.
    fn finish(&self, input: &FinishRequest) -> worker::Result<(FinishReply, bool)> {
        let sql = self.sql()?;
        let record = Self::read_record(&sql, &input.key)?;
        let (reply, effects) = gate::finish(record.as_ref(), input, now_ms());
        let stored = effects.record.stores_done();
        Self::apply(&sql, &input.key, &input.sku, effects)?;
        Ok((reply, stored))
    }

    fn apply(sql: &SqlStorage, key: &str, sku: &str, effects: Effects) -> worker::Result<()> {
        if let Some(proof) = &effects.spend {
            spent::record(sql, proof, now_ms())?;
        }
        if let Some(tat) = effects.new_tat_us {
            sql.exec(
                "INSERT INTO gcra (id, tat_us) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET tat_us = excluded.tat_us",
                vec![SqlStorageValue::try_from_i64(tat)?],
            )?;
        }
        match effects.record {
            RecordChange::Keep => {}
            RecordChange::Delete => {
                sql.exec("DELETE FROM idempotency WHERE key = ?", vec![key.into()])?;
            }
            RecordChange::Put(record) => {
                let (state, status, body) = match record.state {
                    RecordState::InFlight => ("in_flight", None, None),
                    RecordState::Done { status, body } => {
                        ("done", Some(i64::from(status)), Some(body))
                    }
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

    /// Makes sure a purge is scheduled (one alarm at a time; `alarm` re-arms itself).
    async fn arm_alarm(&self) {
        if self.alarm_armed.get() {
            return;
        }
        let storage = self.state.storage();
        let armed = async {
            if storage.get_alarm().await?.is_none() {
                let retention_ms = i64::from(self.retention_secs()) * 1_000;
                let now = now_ms();
                storage
                    .set_alarm(gate::next_alarm_ms(now, retention_ms) - now)
                    .await?;
            }
            Ok::<_, Error>(())
        };
        match armed.await {
            Ok(()) => self.alarm_armed.set(true),
            // Not fatal: the next stored record tries again; records are only kept longer.
            Err(e) => worker::console_warn!("arming the purge alarm failed: {e}"),
        }
    }
}

/// The worker's handle on one user's gate.
#[derive(Debug)]
pub(crate) struct UserGateClient {
    stub: Stub,
}

impl UserGateClient {
    pub(crate) fn for_user(env: &Env, user: &UserId) -> worker::Result<Self> {
        Ok(Self {
            stub: env.durable_object(BINDING)?.get_by_name(user.as_str())?,
        })
    }

    async fn call<T: DeserializeOwned>(&self, path: &str, body: String) -> worker::Result<T> {
        let mut init = RequestInit::new();
        init.with_method(Method::Post)
            .with_body(Some(JsValue::from_str(&body)));
        let request = Request::new_with_init(&format!("https://user-gate.internal{path}"), &init)?;
        let mut response = self.stub.fetch_with_request(request).await?;
        if response.status_code() != 200 {
            return Err(Error::RustError(format!(
                "user gate {path} answered {}",
                response.status_code()
            )));
        }
        response.json::<T>().await
    }

    /// The purchase attempt, in one call: `begin`, and for a claimed attempt the origin call and
    /// `finish` (see [`UserGate`]'s `purchase`).
    pub(crate) async fn purchase(&self, input: &PurchaseRequest) -> worker::Result<PurchaseReply> {
        self.call(PURCHASE_PATH, serde_json::to_string(input)?)
            .await
    }

    pub(crate) async fn limit(&self, input: &LimitRequest) -> worker::Result<RateOutcome> {
        self.call(LIMIT_PATH, serde_json::to_string(input)?).await
    }

    pub(crate) async fn returned(&self, input: &ReturnedRequest) -> worker::Result<ReturnedReply> {
        self.call(RETURNED_PATH, serde_json::to_string(input)?)
            .await
    }
}
