//! The per-user gate: what the user's Durable Object decides, as pure functions over a snapshot
//! of its rows. The Durable Object reads the snapshot, calls [`begin`] or [`finish`] and writes the
//! returned effects, all without an `.await` in between, so each call is atomic for that user.
//!
//! Order inside `begin` — **the key first**, so a retry of a key already decided gets its stored
//! answer whatever the defences say now (docs/bot-defence.md, "A retried key"):
//!
//! 1. The idempotency lookup. A key already decided (a stored answer under the same request), a
//!    key in flight (409) or a key reused for another request (422) is about the key, not new
//!    work: the rate limit is charged (every attempt at a key counts, replays included) and the
//!    key's answer goes back. Nothing else is looked at or spent: not the proof, not the pass,
//!    the network bound or the schedule, whose verdicts the worker sends along.
//!    A key **in doubt** (its last attempt got no answer the edge could trust: the origin timed
//!    out or failed, and may have decided it) is the same attempt again: it goes on as new work,
//!    but the proof of work that attempt spent is still its own, and the shields below are
//!    skipped — the origin replays what it decided or decides it now, where a cached `sold_out`
//!    would tell a key whose unit was sold while the edge timed out that it bought nothing.
//! 2. New work only from here. A refusal by the worker's checks that guard new work — the
//!    waiting room's pass, `not_started` / `sale_paused`, the proof of work's format and
//!    binding, the network's bound (`BeginRequest::new_work_refused`) — is [`Verdict::Refused`]:
//!    nothing is charged, spent or written, and the worker answers its own refusal (so these
//!    refusals are exactly what they were when the worker answered them before this object).
//! 3. The attempt's proof of work, if it carries one: spent before refuses it (`ProofSpent`)
//!    before it costs any rate (the proof ids of a shopper are this object's, so a replay at any
//!    location meets them here); else it is recorded as spent, even when the rate limit then
//!    refuses the attempt (it was shown).
//! 4. The rate limit, then the shields (`sale_ended` from the cached schedule,
//!    `crate::schedule`; then sold out before purchase limit), and finally the key is claimed
//!    for a new attempt.
//!
//! The per-user cap pre-check counts the units the user bought through this object, but only while
//! the origin confirmed that count less than `SKU_CACHE_TTL_SECS` ago (a 201 or a
//! `purchase_limit` it decided, see [`counted_units`]): units also come back without the edge
//! seeing it (an expired hold, a refund, a cancellation by the shop), and the origin then gives
//! the user's allowance back. A count that old lets the request through to the origin, which
//! decides (at most one origin call per user, SKU and period while the user stays at the cap).
//! A cancellation through the edge takes its units off at once ([`returned_delta`]).
//!
//! Only the origin's decisions are stored with a key. A shield answer is the edge's guess from
//! cached facts, which can be stale (a restock the data center has not seen yet): it leaves the
//! key as it was (no record), so the same key retried is checked again and reaches the origin once
//! the shield lets it through. Nothing was bought, so there is nothing to replay.

use shared::Problem;

use crate::gcra::{Decision, Policy};
use crate::idempotency::{self, Disposition, Lookup, Record, State};
use crate::protocol::{BeginReply, BeginRequest, FinishReply, FinishRequest, RateOutcome, Verdict};
use crate::schedule::{self, Local};
use crate::shield::{self, Shield};

/// The rows `begin`/`finish` look at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The GCRA theoretical arrival time, µs.
    pub tat_us: Option<i64>,
    /// The record of the request's idempotency key.
    pub record: Option<Record>,
    /// Units of the request's SKU this user bought through the edge.
    pub bought: i64,
    /// When the origin last confirmed `bought` (unix ms): a 201 or a `purchase_limit` it decided.
    pub counted_ms: Option<i64>,
    /// Whether the request's proof of work (`BeginRequest::proof`) was spent before.
    pub proof_spent: bool,
}

/// Writes to apply after a call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effects {
    pub new_tat_us: Option<i64>,
    pub record: RecordChange,
    /// Units to add to the user's count for the SKU.
    pub bought_delta: i64,
    /// The origin confirmed the user's count for the SKU now (store `counted_ms`).
    pub count_confirmed: bool,
    /// A proof of work to record as spent (until it expires).
    pub spend: Option<crate::proof::Spend>,
}

/// What happens to the key's record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RecordChange {
    #[default]
    Keep,
    Put(Record),
    Delete,
}

impl RecordChange {
    /// Whether the change keeps a record until the purge (a completed answer, or a key in doubt):
    /// the alarm must then be armed.
    pub fn kept(&self) -> bool {
        matches!(
            self,
            Self::Put(Record {
                state: State::Done { .. } | State::InDoubt { .. },
                ..
            })
        )
    }
}

/// Decides one request of `policy`'s bucket whose stored TAT is `tat_us`: the outcome, and the
/// TAT to store when it is admitted (nothing changes when it is limited).
pub fn limit(policy: &Policy, tat_us: Option<i64>, now_ms: i64) -> (RateOutcome, Option<i64>) {
    match policy.check(tat_us, now_ms.saturating_mul(1_000)) {
        Decision::Allowed {
            new_tat_us,
            remaining,
            reset_secs,
        } => (
            RateOutcome::Allowed {
                remaining,
                reset_secs,
            },
            Some(new_tat_us),
        ),
        Decision::Limited { retry_after_secs } => (RateOutcome::Limited { retry_after_secs }, None),
    }
}

/// The change to the user's count of a SKU (`bought` units) when the origin confirmed the
/// cancellation of an order of `qty` units; `already` when this order was returned before (a
/// repeated cancel changes nothing). Never below 0: an order bought around the edge was never
/// counted.
pub fn returned_delta(bought: i64, qty: u32, already: bool) -> i64 {
    if already {
        0
    } else {
        -i64::from(qty).min(bought.max(0))
    }
}

/// The units the cap pre-check counts at `now_ms`: the user's count while the origin confirmed
/// it less than `ttl_ms` ago, else none (units may have come back since; the origin decides).
pub fn counted_units(snap: &Snapshot, now_ms: i64, ttl_ms: i64) -> i64 {
    let fresh = snap
        .counted_ms
        .is_some_and(|at| now_ms.saturating_sub(at) < ttl_ms);
    if fresh { snap.bought } else { 0 }
}

/// The sale's end, if the request's cached schedule says it is over at `now_ms` (past the margin).
fn ended(req: &BeginRequest, now_ms: i64) -> Option<shared::Closed> {
    let schedule = req.facts.schedule.as_ref()?;
    match schedule::decide(schedule, now_ms, req.schedule_margin_ms) {
        Local::Ended(closed) => Some(closed),
        Local::Pass | Local::Answer(_) => None,
    }
}

/// Decides `begin`. `next_attempt` is a number never handed out before by this object.
pub fn begin(
    policy: &Policy,
    snap: &Snapshot,
    req: &BeginRequest,
    now_ms: i64,
    next_attempt: i64,
) -> (BeginReply, Effects) {
    // 1. The key: decided, in flight or reused answers before anything that guards new work. A
    // key in doubt (its last attempt got no answer to trust) is retried as that attempt: the
    // proof it spent is its own, and the origin decides, not the cached facts' guesses.
    let (keyed, in_doubt) = match idempotency::lookup(
        snap.record.as_ref(),
        &req.fingerprint,
        now_ms,
        req.in_flight_timeout_ms,
    ) {
        Lookup::Replay { status, body } => (Some(Verdict::Replay { status, body }), None),
        Lookup::InFlight => (Some(Verdict::InFlight), None),
        Lookup::Reused => (Some(Verdict::Reused), None),
        Lookup::Retry { proof } => (None, Some(proof)),
        Lookup::Proceed => (None, None),
    };
    if let Some(verdict) = keyed {
        let (rate, new_tat_us) = limit(policy, snap.tat_us, now_ms);
        let verdict = if new_tat_us.is_some() {
            verdict
        } else {
            Verdict::Limited
        };
        let effects = Effects {
            new_tat_us,
            ..Effects::default()
        };
        return (BeginReply { rate, verdict }, effects);
    }
    let own_proof = in_doubt.as_ref().is_some_and(|spent| {
        spent.is_some() && spent.as_deref() == req.proof.as_ref().map(|p| p.id.as_str())
    });
    // 2. New work the worker's checks refused: the worker answers; nothing is charged or spent.
    // 3. A spent proof: refused before it costs any rate.
    if req.new_work_refused || (req.proof.is_some() && snap.proof_spent && !own_proof) {
        let (rate, _) = limit(policy, snap.tat_us, now_ms);
        let verdict = if req.new_work_refused {
            Verdict::Refused
        } else {
            Verdict::ProofSpent
        };
        return (BeginReply { rate, verdict }, Effects::default());
    }
    // 4. The rate limit (the proof is spent either way: it was shown), the shields, the claim.
    let spend = req.proof.clone();
    let (rate, new_tat_us) = match limit(policy, snap.tat_us, now_ms) {
        (rate, Some(new_tat_us)) => (rate, new_tat_us),
        (rate, None) => {
            return (
                BeginReply {
                    rate,
                    verdict: Verdict::Limited,
                },
                Effects {
                    spend,
                    ..Effects::default()
                },
            );
        }
    };
    let mut effects = Effects {
        new_tat_us: Some(new_tat_us),
        spend,
        ..Effects::default()
    };
    let shielded = if in_doubt.is_some() {
        None
    } else {
        ended(req, now_ms)
    };
    let verdict = match shielded {
        Some(closed) => {
            let problem = closed.problem();
            Verdict::Answered {
                status: problem.status,
                body: problem.to_json(),
            }
        }
        None if in_doubt.is_some() => {
            effects.record = RecordChange::Put(Record {
                fingerprint: req.fingerprint.clone(),
                attempt: next_attempt,
                state: State::InFlight,
                updated_ms: now_ms,
            });
            Verdict::Proceed {
                attempt: next_attempt,
            }
        }
        None => match shield::decide(
            &req.facts,
            counted_units(snap, now_ms, req.count_ttl_ms),
            req.qty,
        ) {
            Shield::Answer(code) => {
                let body = Problem::new(code, shield::detail(code)).to_json();
                Verdict::Answered {
                    status: code.status(),
                    body,
                }
            }
            Shield::Pass => {
                effects.record = RecordChange::Put(Record {
                    fingerprint: req.fingerprint.clone(),
                    attempt: next_attempt,
                    state: State::InFlight,
                    updated_ms: now_ms,
                });
                Verdict::Proceed {
                    attempt: next_attempt,
                }
            }
        },
    };
    (BeginReply { rate, verdict }, effects)
}

/// Decides `finish` for the current record of the key.
pub fn finish(record: Option<&Record>, req: &FinishRequest, now_ms: i64) -> (FinishReply, Effects) {
    if !idempotency::finish_applies(record, req.attempt) {
        return (FinishReply { stored: false }, Effects::default());
    }
    let Some(record) = record else {
        return (FinishReply { stored: false }, Effects::default());
    };
    match idempotency::disposition(req.status, req.body.as_bytes()) {
        Disposition::Store => {
            let done = Record {
                state: State::Done {
                    status: req.status,
                    body: req.body.clone(),
                },
                updated_ms: now_ms,
                ..record.clone()
            };
            let bought_delta = if req.status == 201 {
                i64::from(req.qty)
            } else {
                0
            };
            let count_confirmed = req.status == 201
                || crate::reply::problem_code(req.body.as_bytes())
                    == Some(shared::ErrorCode::PurchaseLimit);
            (
                FinishReply { stored: true },
                Effects {
                    new_tat_us: None,
                    record: RecordChange::Put(done),
                    bought_delta,
                    count_confirmed,
                    spend: None,
                },
            )
        }
        Disposition::Doubt => (
            FinishReply { stored: false },
            Effects {
                record: RecordChange::Put(Record {
                    state: State::InDoubt {
                        proof: req.proof.clone(),
                    },
                    updated_ms: now_ms,
                    ..record.clone()
                }),
                ..Effects::default()
            },
        ),
        Disposition::Release => (
            FinishReply { stored: false },
            Effects {
                record: RecordChange::Delete,
                ..Effects::default()
            },
        ),
    }
}

/// Records last updated before this instant are purged by the alarm.
pub fn purge_cutoff_ms(now_ms: i64, retention_ms: i64) -> i64 {
    now_ms.saturating_sub(retention_ms)
}

/// When to run the next purge, given the oldest remaining record: just after it falls out of the
/// retention window (a minute of slack batches neighbours into one run).
pub fn next_alarm_ms(oldest_updated_ms: i64, retention_ms: i64) -> i64 {
    oldest_updated_ms
        .saturating_add(retention_ms)
        .saturating_add(60_000)
}

#[cfg(test)]
mod tests;
