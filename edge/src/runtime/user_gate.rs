//! `UserGate`: one SQLite-backed Durable Object per shopper (named by the user id), holding that
//! user's GCRA state (the purchase bucket, and the `order` bucket of `crate::orders`), idempotency
//! records, units bought per SKU (with when the origin last confirmed the count), the orders
//! whose cancellation gave units back and the proofs of work its purchases spent
//! (`super::spent`); its SQL is [`rows`], the worker's handle on it [`UserGateClient`]. This file
//! is the object's calls. A purchase attempt is one call, `purchase`: the object
//! runs `begin` (read, decide with [`crate::gate`], write — no `.await` in between, so it is
//! atomic for the user: the rate limit is exact and the key is claimed in flight before anything
//! else can run), then, for a claimed attempt, sends the worker's signed call to the origin with
//! its deadline (other requests of the user are served meanwhile, and a second one with the same
//! key finds it in flight: 409), then `finish` (atomic too) stores the answer with the key,
//! releases the key or leaves it in doubt, and the answer goes back to the worker. There is no global object: load spreads with the users.
//!
//! Completed records, keys in doubt and returned-order marks are purged by an alarm once older
//! than `IDEMPOTENCY_RETENTION_SECS` (>= 24 h).

mod client;
mod rows;

use std::cell::Cell;

use serde::Deserialize;
use worker::{
    DurableObject, Env, Error, Method, Request, Response, SqlStorage, SqlStorageValue, State,
    durable_object,
};

pub(crate) use client::UserGateClient;
use rows::{TatRow, first};

use crate::config::{Settings, defaults};
use crate::forward::{Forwarded, OriginAnswer};
use crate::gate;
use crate::gcra::Policy;
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
        sql.exec(
            "DELETE FROM doubtful_keys WHERE updated_ms < ?",
            vec![cutoff.into()],
        )?;
        #[derive(Deserialize)]
        struct Oldest {
            oldest: Option<i64>,
        }
        let oldest = sql
            .exec(
                "SELECT MIN(updated_ms) AS oldest FROM \
                 (SELECT updated_ms FROM idempotency UNION ALL SELECT updated_ms FROM returned_orders \
                 UNION ALL SELECT updated_ms FROM doubtful_keys)",
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

impl UserGate {
    fn sql(&self) -> worker::Result<SqlStorage> {
        let sql = self.state.storage().sql();
        if !self.schema_ready.get() {
            sql.exec(rows::SCHEMA, None)?;
            sql.exec(spent::SCHEMA, None)?;
            self.schema_ready.set(true);
        }
        Ok(sql)
    }

    fn retention_secs(&self) -> u32 {
        Settings::from_lookup(|name| self.env.var(name).ok().map(|v| v.to_string()))
            .map_or(defaults::IDEMPOTENCY_RETENTION_SECS, |s| s.retention_secs)
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
            proof: begin.proof.map(|p| p.id),
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
        let snapshot = rows::snapshot(&sql, input)?;
        let attempt = rows::next_attempt(&sql)?;
        let (reply, effects) = gate::begin(&policy, &snapshot, input, now_ms(), attempt);
        let stored = effects.record.kept();
        rows::apply(&sql, &input.key, &input.sku, effects)?;
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
        let sql = self.sql()?;
        let already = !super::sql::raw_rows(
            &sql,
            "SELECT 1 FROM returned_orders WHERE order_id = ?",
            vec![input.order_id.as_str().into()],
        )?
        .is_empty();
        let bought = rows::bought(&sql, &input.sku)?;
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
        let record = rows::read_record(&sql, &input.key)?;
        let (reply, effects) = gate::finish(record.as_ref(), input, now_ms());
        let stored = effects.record.kept();
        rows::apply(&sql, &input.key, &input.sku, effects)?;
        Ok((reply, stored))
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
