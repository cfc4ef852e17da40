//! The scalper farm: 1,000 accounts (each with its own token and address) behind a few /24s, as
//! aggressive as pays off. Every account fires at the start and keeps buying with a fresh
//! Idempotency-Key per attempt (the same one again after a `503` or a dropped connection, as the
//! contract asks: the origin may have decided it) until it holds `max_per_user`, the sale is sold
//! out or its network is spent:
//!
//! - with a proof of work, each attempt that reaches the shopper's gate spends its proof, so the
//!   account fetches and solves a new challenge; ALL the farm's solving goes through ONE solver
//!   queue on one OS thread (one core), whose CPU time is the farm's cost. A refusal decided
//!   before the gate (`429 network_limit`, `409 not_started`, `428`) leaves the proof unspent,
//!   and the account tries again with it;
//! - `429 network_limit` with `Retry-After: 1` (another purchase of the network is in flight at
//!   the edge) is retried after a random share of it (`--farm-retry-share`, on average): the
//!   slot frees as soon as that purchase ends, so waiting the whole second would not pay off;
//!   with a longer `Retry-After` (the network's units are spent for the window) the network is
//!   given up: none of its accounts tries again, and their queued solves are dropped;
//! - `429 rate_limited` is honoured (an earlier try is refused again and burns a proof);
//! - `503` is retried after at most 200 ms, `409 not_started` at the start, a transport error
//!   after 100 ms — with the same key and proof (the edge takes it as that same attempt), even
//!   once the network is given up, to learn whether it bought; `409 sold_out` stops the whole
//!   farm.
//!
//! A **stockpiling** farm (`--farm-stockpile N`, issue 35) also has `N` of its accounts fetch a
//! challenge each in the quiet seconds before the start, paced so the price stays low, and solve
//! it then ([`stockpile`]); at the start they fire those proofs at once, while honest shoppers
//! are still solving theirs at the peak price. An edge that issues no challenge for a purchase
//! before the start (`409 not_started`) leaves them with nothing stockpiled.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;

use super::client::{self, Answer, Call, SaleCtx};
use super::solver::Solver;

/// One farm account.
#[derive(Debug)]
pub(super) struct FarmAccount {
    pub(super) client: reqwest::Client,
    pub(super) token: String,
    /// Its network (0-based).
    pub(super) network: usize,
}

/// What the farm's accounts share.
#[derive(Debug)]
pub(super) struct Farm {
    /// The single solver queue (with a proof of work).
    pub(super) solver: Solver,
    /// Per network: set once the network is given up (or the sale is sold out); queued solves
    /// of its accounts are then dropped.
    pub(super) given_up: Vec<Arc<AtomicBool>>,
    pub(super) sold_out: AtomicBool,
    pub(super) units: AtomicU64,
    pub(super) challenges: AtomicU64,
    /// Challenges asked for before the start, and those given (and solved).
    pub(super) stockpile_asked: AtomicU64,
    pub(super) stockpiled: AtomicU64,
    /// The bits of the challenges stockpiled.
    pub(super) stockpile_bits: Mutex<Vec<u32>>,
    pub(super) order_ids: Mutex<Vec<String>>,
    /// `429 network_limit` with `Retry-After: 1` is retried after this share of it, on average.
    pub(super) retry_share: f64,
    pub(super) max_per_user: u64,
}

impl Farm {
    fn stopped(&self, me: &FarmAccount) -> bool {
        self.sold_out.load(Ordering::Relaxed)
            || self
                .given_up
                .get(me.network)
                .is_none_or(|g| g.load(Ordering::Relaxed))
    }

    fn stop_all(&self) {
        self.sold_out.store(true, Ordering::Relaxed);
        for g in &self.given_up {
            g.store(true, Ordering::Relaxed);
        }
    }
}

/// A random wait of `share` × `retry_after` on average (uniform in 0..2 × that).
pub(super) fn partial_wait(retry_after: Duration, share: f64) -> Duration {
    let mean = retry_after.as_secs_f64() * share.clamp(0.0, 1.0);
    Duration::from_secs_f64(rand::rng().random_range(0.0..=2.0 * mean))
}

/// A proof stockpiled before the start: at `at`, `me` asks for a challenge and solves it on the
/// farm's solver thread. `None` when the edge gives none (`409 not_started`) or it cannot be had.
pub(super) async fn stockpile(
    ctx: &SaleCtx,
    farm: &Farm,
    me: &FarmAccount,
    at: Instant,
) -> Option<String> {
    tokio::time::sleep_until(at.into()).await;
    farm.stockpile_asked.fetch_add(1, Ordering::Relaxed);
    farm.challenges.fetch_add(1, Ordering::Relaxed);
    match client::challenge(&me.client, &ctx.edge, &ctx.sku, &me.token).await {
        Ok(challenge) => {
            ctx.farm.add(
                Call::Challenge,
                &Answer {
                    status: 200,
                    ..Answer::default()
                },
            );
            let bits = challenge.maxnumber.max(1).ilog2();
            let solved = farm.solver.solve(challenge, None).await?;
            farm.stockpiled.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut b) = farm.stockpile_bits.lock() {
                b.push(bits);
            }
            Some(solved.solution.encode())
        }
        Err(answer) => {
            ctx.farm.add(Call::Challenge, &answer);
            None
        }
    }
}

/// Runs one farm account through the sale, firing `stockpiled` (a proof solved before the start)
/// first if it has one.
pub(super) async fn account(
    ctx: &SaleCtx,
    farm: &Farm,
    me: FarmAccount,
    stockpiled: Option<String>,
) {
    tokio::time::sleep_until(ctx.start.into()).await;
    let mut proof: Option<String> = stockpiled;
    let mut bought = 0;
    // A key is kept across a 503 or a dropped connection, as the contract asks (the origin may
    // have decided it: the retry replays the answer); every other answer takes a new one.
    let mut key = uuid::Uuid::new_v4().to_string();
    // The last attempt got no answer (503, dropped connection): the origin may have sold it, so
    // the account retries it — with the same key and proof, which the edge takes as that same
    // attempt — to learn its answer, even once its network is given up.
    let mut in_doubt = false;
    while Instant::now() < ctx.deadline && (in_doubt || !farm.stopped(&me)) {
        if ctx.defended && proof.is_none() {
            farm.challenges.fetch_add(1, Ordering::Relaxed);
            match client::challenge(&me.client, &ctx.edge, &ctx.sku, &me.token).await {
                Ok(challenge) => {
                    ctx.farm.add(
                        Call::Challenge,
                        &Answer {
                            status: 200,
                            ..Answer::default()
                        },
                    );
                    let cancel = farm.given_up.get(me.network).cloned();
                    let Some(solved) = farm.solver.solve(challenge, cancel).await else {
                        return;
                    };
                    proof = Some(solved.solution.encode());
                }
                Err(answer) => {
                    ctx.farm.add(Call::Challenge, &answer);
                    match answer.status {
                        0 => tokio::time::sleep(Duration::from_millis(100)).await,
                        503 => tokio::time::sleep(Duration::from_millis(200)).await,
                        429 => {
                            tokio::time::sleep(answer.retry_after_or(Duration::from_secs(1))).await;
                        }
                        // No purchase challenge before the start: at the start, then.
                        409 if answer.is(409, "not_started") => {
                            let wait = ctx.start.saturating_duration_since(Instant::now());
                            tokio::time::sleep(wait.max(Duration::from_millis(10))).await;
                        }
                        _ => return,
                    }
                    continue;
                }
            }
        }
        let answer = client::purchase(
            &me.client,
            &ctx.edge,
            &me.token,
            &key,
            &ctx.body,
            proof.as_deref(),
        )
        .await;
        ctx.farm.add(Call::Purchase, &answer);
        // In doubt until an answer settles the key (a 201 or the origin's refusal); meanwhile a
        // refusal of new work (the network's bound, its proof) leaves the key as it is.
        let settles = answer.status == 201
            || answer.is(409, "sold_out")
            || answer.is(409, "purchase_limit")
            || matches!(answer.status, 404 | 422);
        if matches!(answer.status, 0 | 503) {
            in_doubt = true;
        } else if settles {
            in_doubt = false;
        }
        if !in_doubt {
            key = uuid::Uuid::new_v4().to_string();
        }
        // Refusals decided before the shopper's gate leave the proof unspent; after a 503 it is
        // still the attempt's own, for its retry.
        let unspent = answer.is(429, "network_limit")
            || answer.is(409, "not_started")
            || answer.status == 428
            || matches!(answer.status, 0 | 503);
        if !unspent {
            proof = None;
        }
        match answer.status {
            201 => {
                farm.units.fetch_add(1, Ordering::Relaxed);
                if let Some(id) = answer.body["order_id"].as_str()
                    && let Ok(mut ids) = farm.order_ids.lock()
                {
                    ids.push(id.to_owned());
                }
                bought += 1;
                if bought >= farm.max_per_user {
                    return;
                }
            }
            409 if answer.is(409, "sold_out") => {
                farm.stop_all();
                return;
            }
            409 if answer.is(409, "purchase_limit") => return,
            409 if answer.is(409, "not_started") => {
                let wait = ctx.start.saturating_duration_since(Instant::now());
                tokio::time::sleep(wait.max(Duration::from_millis(10))).await;
            }
            // Another of this network's purchases is in flight: its slot frees soon.
            429 if answer.is(429, "network_limit") && answer.retry_after.unwrap_or(1) <= 1 => {
                tokio::time::sleep(partial_wait(Duration::from_secs(1), farm.retry_share)).await;
            }
            // The network's units are spent for the window: give it up.
            429 if answer.is(429, "network_limit") => {
                if let Some(g) = farm.given_up.get(me.network) {
                    g.store(true, Ordering::Relaxed);
                }
                return;
            }
            429 => {
                tokio::time::sleep(answer.retry_after_or(Duration::from_secs(1))).await;
            }
            503 => {
                let wait = answer.retry_after_or(Duration::from_secs(1));
                tokio::time::sleep(wait.min(Duration::from_millis(200))).await;
            }
            0 => tokio::time::sleep(Duration::from_millis(100)).await,
            // A proof refused (spent, expired): a fresh one next time round. A key still in
            // flight: again shortly (in doubt: the same key; else a new one).
            403 if answer.is(403, "proof_rejected") => {}
            409 if answer.is(409, "idempotency_in_flight") => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            428 => {}
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partial_wait_averages_its_share_of_retry_after() {
        let n = 20_000;
        let total: f64 = (0..n)
            .map(|_| partial_wait(Duration::from_secs(1), 0.25).as_secs_f64())
            .sum();
        let mean = total / f64::from(n);
        assert!((mean - 0.25).abs() < 0.02, "{mean}");
        for _ in 0..1000 {
            assert!(partial_wait(Duration::from_secs(1), 0.25) <= Duration::from_millis(500));
        }
        assert_eq!(partial_wait(Duration::from_secs(1), 0.0), Duration::ZERO);
    }
}
