//! An honest shopper: one account, one address, one purchase intent. It clicks at the start plus
//! its jitter, fetches a challenge when the sale asks for a proof of work, solves it as fast as
//! its browser would (`--honest-hashes-per-sec`), buys with one Idempotency-Key, and retries only
//! what a real client retries: `503` and `429` after their `Retry-After`, `403 proof_rejected`
//! with a fresh challenge, `409 not_started` (to the purchase or its challenge) after its
//! `Retry-After`. It stops at `201`,
//! `409 sold_out` or `409 purchase_limit` (or anything else it does not know how to retry).
//! Its latency runs from the click to that final answer.

use std::time::{Duration, Instant};

use tokio::time::sleep_until;

use super::client::{self, Answer, Call, SaleCtx};
use super::solver::{self, Solved, Solver};

/// How an honest shopper's browser is emulated.
#[derive(Debug)]
pub(super) enum Browser {
    /// Solve natively on the honest solver queue, then wait until the browser would be done.
    Native { solver: Solver, hashes_per_sec: f64 },
    /// Mint the solution with the edge's key ([`solver::mint`]) and wait as long as the search
    /// would have taken the browser.
    Minted {
        pow_secret: Vec<u8>,
        hashes_per_sec: f64,
    },
}

/// One honest shopper.
#[derive(Debug)]
pub(super) struct Honest {
    pub(super) client: reqwest::Client,
    pub(super) token: String,
    /// When it clicks, after the start.
    pub(super) click: Duration,
}

/// One solve of an honest shopper.
#[derive(Debug, Clone, Copy)]
pub(super) struct SolveRecord {
    /// From the challenge's arrival to the solution (the browser's time).
    pub(super) wall: Duration,
    /// `GET /v1/challenge`'s round trip.
    pub(super) challenge_rtt: Duration,
    pub(super) bits: u32,
    /// The native solve finished after the browser would have (this machine was too busy).
    pub(super) overrun: bool,
}

/// How an honest shopper's intent ended.
#[derive(Debug, Clone, Default)]
pub(super) struct HonestOutcome {
    pub(super) bought: bool,
    pub(super) order_id: Option<String>,
    /// The final answer's label (`201`, `409 sold_out`, …; `gave up` at the deadline).
    pub(super) ended_with: String,
    /// From the click to the final answer (`None` when it gave up at the deadline).
    pub(super) latency: Option<Duration>,
    pub(super) attempts: u32,
    pub(super) solves: Vec<SolveRecord>,
}

/// Most purchase attempts of one intent (a guard; real retries end far sooner).
const MAX_ATTEMPTS: u32 = 30;

/// Runs one honest shopper through the sale.
pub(super) async fn shop(ctx: &SaleCtx, browser: &Browser, me: Honest) -> HonestOutcome {
    let clicked = ctx.start + me.click;
    sleep_until(clicked.into()).await;
    let key = uuid::Uuid::new_v4().to_string();
    let mut out = HonestOutcome::default();
    let mut proof: Option<String> = None;
    let end = |mut out: HonestOutcome, answer: &Answer| {
        out.ended_with = answer.label();
        out.latency = Some(clicked.elapsed());
        out
    };
    while out.attempts < MAX_ATTEMPTS && Instant::now() < ctx.deadline {
        if ctx.defended && proof.is_none() {
            let asked = Instant::now();
            match client::challenge(&me.client, &ctx.edge, &ctx.sku, &me.token).await {
                Ok(challenge) => {
                    ctx.honest.add(
                        Call::Challenge,
                        &Answer {
                            status: 200,
                            ..Answer::default()
                        },
                    );
                    let arrived = Instant::now();
                    let bits = challenge.maxnumber.max(1).ilog2();
                    let Some((solved, overrun)) = solve(browser, challenge, arrived).await else {
                        out.ended_with = "unsolvable challenge".into();
                        return out;
                    };
                    out.solves.push(SolveRecord {
                        wall: arrived.elapsed(),
                        challenge_rtt: arrived - asked,
                        bits,
                        overrun,
                    });
                    proof = Some(solved.solution.encode());
                }
                Err(answer) => {
                    ctx.honest.add(Call::Challenge, &answer);
                    match answer.status {
                        429 | 503 => {
                            tokio::time::sleep(answer.retry_after_or(Duration::from_secs(1))).await;
                            continue;
                        }
                        // No purchase challenge before the start (a click a moment early): again
                        // after its Retry-After, as the sale page does.
                        409 if answer.is(409, "not_started") => {
                            tokio::time::sleep(answer.retry_after_or(Duration::from_secs(1))).await;
                            continue;
                        }
                        // The sale dropped its proof of work: buy without one.
                        409 if answer.is(409, "proof_not_required") => {}
                        _ => return end(out, &answer),
                    }
                }
            }
        }
        out.attempts += 1;
        let answer = client::purchase(
            &me.client,
            &ctx.edge,
            &me.token,
            &key,
            &ctx.body,
            proof.as_deref(),
        )
        .await;
        ctx.honest.add(Call::Purchase, &answer);
        match answer.status {
            201 => {
                out.bought = true;
                out.order_id = answer.body["order_id"].as_str().map(str::to_owned);
                return end(out, &answer);
            }
            403 if answer.is(403, "proof_rejected") => proof = None,
            428 => proof = None,
            409 if answer.is(409, "not_started") => {
                tokio::time::sleep(answer.retry_after_or(Duration::from_secs(1))).await;
            }
            429 | 503 => {
                tokio::time::sleep(answer.retry_after_or(Duration::from_secs(1))).await;
            }
            // The same key is still being decided (an earlier try the client gave up on): check
            // again in a second, as the sale page does.
            409 if answer.is(409, "idempotency_in_flight") => {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            // A transport error: the page would try again a moment later.
            0 => tokio::time::sleep(Duration::from_secs(1)).await,
            _ => return end(out, &answer),
        }
    }
    out.ended_with = "gave up".into();
    out
}

/// Solves `challenge` (arrived at `arrived`) as the browser would; whether the native search
/// finished after the browser would have.
async fn solve(
    browser: &Browser,
    challenge: edge::proof::Challenge,
    arrived: Instant,
) -> Option<(Solved, bool)> {
    let (solved, rate) = match browser {
        Browser::Native {
            solver,
            hashes_per_sec,
        } => (solver.solve(challenge, None).await?, *hashes_per_sec),
        Browser::Minted {
            pow_secret,
            hashes_per_sec,
        } => (solver::mint(&challenge, pow_secret)?, *hashes_per_sec),
    };
    let done = arrived + solver::paced(solved.candidates, rate);
    let overrun = Instant::now() > done;
    sleep_until(done.into()).await;
    Some((solved, overrun))
}
