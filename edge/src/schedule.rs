//! The sale schedule at the edge: on the purchase path, after the stateless checks and the SKU's
//! cached facts (`crate::shield::SkuFacts::schedule`), before the user's Durable Object. The
//! origin is the authority (its purchase batch reads the schedule with the database's clock under
//! the SKU row lock); the edge only **shields** it, answering exactly as the origin would — same
//! status, `code`, `starts_at`/`ends_at` members, `Retry-After` — from its cached facts and its
//! own clock, without an origin call, where that answer cannot be wrong by more than documented:
//!
//! - **`409 not_started`** only while `now < starts_at − margin` (`margin` =
//!   `SCHEDULE_CLOCK_MARGIN_MS`). An edge clock behind the origin's by up to the margin never
//!   delays the start, and one ahead never opens the sale early: in the last margin before the
//!   start the attempt goes to the origin, which decides. `Retry-After` = whole seconds to
//!   `starts_at` by the edge's clock (≥ 1).
//! - **`409 sale_paused`** (`Retry-After: 5`, as the origin) while the facts say paused — except
//!   within the margin around the start or the end, where the origin decides.
//! - **`409 sale_ended`** only when `now > ends_at + margin`. It is answered by the Durable Object
//!   after the key's lookup ([`Local::Ended`]), so a key that bought before the end still gets its
//!   replay, forever; `not_started` and `sale_paused` are answered before the Durable Object, so
//!   they count against neither the shopper's rate limit nor their cap (a key decided before a
//!   pause gets its replay once the sale reopens).
//!
//! Nothing answered here is stored with the key: the same key is decided once the sale opens.
//!
//! **Freshness.** The schedule comes from origin views (a warmup; a `GET /v1/skus/{sku}` cache
//! miss; the purchase path's refresh) and from the origin's own 409s (`crate::forward::learn`). A
//! fact that would refuse is used only while an origin view confirmed the facts less than
//! `SKU_CACHE_TTL_SECS` ago ([`needs_refresh`]); older, the purchase path fetches the view first
//! (one fetch per data center and period). So an unpause, or a start moved earlier, reaches
//! every data center within one `SKU_CACHE_TTL_SECS` (at once with a warmup), and a pause stops
//! a running sale at the edge as soon as one purchase meets the origin's `sale_paused` (and within
//! one `SKU_CACHE_TTL_SECS` of any view) — the origin refuses at once on every process anyway.

use shared::{Closed, Schedule};

use crate::reply::Reply;
use crate::shield::SkuFacts;

/// What the edge does with a purchase attempt, given the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Local {
    /// Nothing known closes the sale (or too close to the start or end to tell): go on.
    Pass,
    /// Answer now, before the Durable Object (`not_started`, `sale_paused`).
    Answer(Closed),
    /// `sale_ended`: answered by the Durable Object after the key's lookup (a replay wins).
    Ended(Closed),
}

/// Decides from `schedule` at `now_ms` (this edge's clock) with `margin_ms`; see the module docs.
pub fn decide(schedule: &Schedule, now_ms: i64, margin_ms: i64) -> Local {
    let near = |at: Option<shared::Timestamp>| {
        at.is_some_and(|at| now_ms.abs_diff(at.unix_ms()) <= margin_ms.unsigned_abs())
    };
    if near(schedule.starts_at) || near(schedule.ends_at) {
        return Local::Pass;
    }
    match schedule.closed_at(now_ms) {
        None => Local::Pass,
        Some(ended @ Closed::Ended { .. }) => Local::Ended(ended),
        Some(closed) => Local::Answer(closed),
    }
}

/// Whether the schedule in `facts` would refuse at `now_ms` but no origin view confirmed the facts
/// in the last `ttl_ms` (`SKU_CACHE_TTL_SECS`): the purchase path fetches the view first.
pub fn needs_refresh(facts: &SkuFacts, now_ms: i64, ttl_ms: i64, margin_ms: i64) -> bool {
    let Some(schedule) = &facts.schedule else {
        return false;
    };
    decide(schedule, now_ms, margin_ms) != Local::Pass
        && facts
            .viewed_ms
            .is_none_or(|viewed| now_ms.saturating_sub(viewed) >= ttl_ms)
}

/// What an origin answer to a purchase sent at `sent_ms` teaches about the schedule: a
/// `409 sale_paused` that the sale is paused, a `409 not_started` / `sale_ended` its start / end.
/// Only an answer to a request sent after the last origin view may change what that view said
/// (an older one may predate the change the view saw). Learned facts are not a view: they refuse
/// only after a view confirmed them ([`needs_refresh`]). `None`: nothing new.
pub fn learned(facts: SkuFacts, status: u16, body: &str, sent_ms: i64) -> Option<SkuFacts> {
    if status != 409 || facts.viewed_ms.is_some_and(|viewed| sent_ms <= viewed) {
        return None;
    }
    let problem: shared::Problem = serde_json::from_str(body).ok()?;
    let known = facts.schedule.unwrap_or_default();
    let schedule = match problem.code {
        shared::ErrorCode::SalePaused => Schedule {
            paused: true,
            ..known
        },
        shared::ErrorCode::NotStarted => Schedule {
            starts_at: problem.starts_at.or(known.starts_at),
            ..known
        },
        shared::ErrorCode::SaleEnded => Schedule {
            ends_at: problem.ends_at.or(known.ends_at),
            ..known
        },
        _ => return None,
    };
    (facts.schedule != Some(schedule)).then_some(SkuFacts {
        schedule: Some(schedule),
        ..facts
    })
}

/// The `Retry-After` to pass on with an origin answer: its own, for a `409 not_started` or
/// `sale_paused` (the edge sends the origin's answer as the origin sent it).
pub fn origin_retry_after(status: u16, body: &str, retry_after: Option<&str>) -> Option<u64> {
    let secs = retry_after?.trim().parse::<u64>().ok()?;
    let code = serde_json::from_str::<shared::Problem>(body).ok()?.code;
    (status == 409
        && matches!(
            code,
            shared::ErrorCode::NotStarted | shared::ErrorCode::SalePaused
        ))
    .then_some(secs)
}

/// The answer to an attempt the schedule refuses: the origin's problem, with `Retry-After`.
pub fn reply(closed: Closed) -> Reply {
    let problem = closed.problem();
    let reply = Reply::stored(problem.status, problem.to_json());
    match closed.retry_after_secs() {
        Some(secs) => reply.with_header("retry-after", secs.to_string()),
        None => reply,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::{ErrorCode, PAUSED_RETRY_AFTER_SECS, Timestamp};

    const MARGIN: i64 = 2_000;
    const START: i64 = 1_796_119_200_000;
    const END: i64 = START + 3_600_000;

    fn at(ms: i64) -> Option<Timestamp> {
        Timestamp::from_unix_ms(ms)
    }

    fn sale(paused: bool) -> Schedule {
        Schedule {
            starts_at: at(START),
            ends_at: at(END),
            paused,
        }
    }

    fn code(local: Local) -> Option<ErrorCode> {
        match local {
            Local::Pass => None,
            Local::Answer(c) | Local::Ended(c) => Some(c.code()),
        }
    }

    #[test]
    fn not_started_is_answered_locally_only_until_the_margin_before_the_start() {
        let s = sale(false);
        let early = decide(&s, START - 60_000, MARGIN);
        assert_eq!(
            early,
            Local::Answer(Closed::NotStarted {
                starts_at: Timestamp::from_unix_ms(START).expect("ts"),
                retry_after_secs: 60
            })
        );
        // Retry-After rounds up to the start by this clock.
        let Local::Answer(c) = decide(&s, START - MARGIN - 1, MARGIN) else {
            panic!("answered")
        };
        assert_eq!(c.retry_after_secs(), Some(3));
        // In the last margin the origin decides, whichever way this clock is off.
        for now in [START - MARGIN, START - 1, START, START + MARGIN] {
            assert_eq!(decide(&s, now, MARGIN), Local::Pass, "{now}");
        }
        assert_eq!(decide(&s, START + MARGIN + 1, MARGIN), Local::Pass);
    }

    #[test]
    fn a_clock_off_by_less_than_the_margin_never_opens_early_nor_delays_the_start() {
        let s = sale(false);
        for skew in [-MARGIN, -1_000, 0, 1_000, MARGIN] {
            for true_now in (START - 10_000..START + 10_000).step_by(250) {
                let edge_now = true_now + skew;
                match decide(&s, edge_now, MARGIN) {
                    // Refused locally only when the origin would refuse too.
                    Local::Answer(Closed::NotStarted { .. }) => {
                        assert!(true_now < START, "skew {skew}, true now {true_now}")
                    }
                    Local::Pass => {}
                    other => panic!("{other:?}"),
                }
                if true_now >= START {
                    assert_eq!(decide(&s, edge_now, MARGIN), Local::Pass);
                }
            }
        }
    }

    #[test]
    fn ended_only_past_the_margin_and_answered_after_the_lookup() {
        let s = sale(false);
        assert_eq!(decide(&s, END - 1, MARGIN), Local::Pass);
        assert_eq!(decide(&s, END + MARGIN, MARGIN), Local::Pass);
        assert_eq!(
            decide(&s, END + MARGIN + 1, MARGIN),
            Local::Ended(Closed::Ended {
                ends_at: Timestamp::from_unix_ms(END).expect("ts")
            })
        );
        // Ended wins over paused, as at the origin.
        assert_eq!(
            code(decide(&sale(true), END + 10_000, MARGIN)),
            Some(ErrorCode::SaleEnded)
        );
    }

    #[test]
    fn paused_is_answered_from_the_facts_except_near_the_start_or_end() {
        let p = sale(true);
        assert_eq!(
            decide(&p, START + 60_000, MARGIN),
            Local::Answer(Closed::Paused)
        );
        assert_eq!(
            code(decide(&p, START - 60_000, MARGIN)),
            Some(ErrorCode::NotStarted)
        );
        assert_eq!(decide(&p, START + 1, MARGIN), Local::Pass);
        assert_eq!(decide(&p, END - 1, MARGIN), Local::Pass);
        let always = Schedule {
            paused: true,
            ..Schedule::default()
        };
        assert_eq!(decide(&always, 0, MARGIN), Local::Answer(Closed::Paused));
        assert_eq!(decide(&Schedule::default(), 0, MARGIN), Local::Pass);
    }

    #[test]
    fn answers_are_the_origins() {
        let r = reply(Closed::Paused);
        assert_eq!(
            (r.status, r.code(), r.header("retry-after")),
            (
                409,
                Some(ErrorCode::SalePaused),
                Some(PAUSED_RETRY_AFTER_SECS.to_string().as_str())
            )
        );
        let start = Timestamp::from_unix_ms(START).expect("ts");
        let r = reply(Closed::NotStarted {
            starts_at: start,
            retry_after_secs: 7,
        });
        let v: serde_json::Value = serde_json::from_str(&r.body).expect("json");
        assert_eq!(
            (
                v["code"].as_str(),
                v["starts_at"].as_str(),
                r.header("retry-after")
            ),
            (Some("not_started"), Some("2026-12-01T10:00:00Z"), Some("7"))
        );
        assert_eq!(
            r.header("content-type"),
            Some(shared::headers::PROBLEM_JSON)
        );
        let r = reply(Closed::Ended { ends_at: start });
        assert_eq!(
            (r.code(), r.header("retry-after")),
            (Some(ErrorCode::SaleEnded), None)
        );
    }

    #[test]
    fn origin_answers_teach_the_schedule_unless_older_than_the_last_view() {
        let paused = Closed::Paused.problem().to_json();
        let known = SkuFacts {
            viewed_ms: Some(1_000),
            ..SkuFacts::default()
        };
        let got = learned(known, 409, &paused, 1_001).expect("learned");
        assert_eq!(got.schedule.map(|s| s.paused), Some(true));
        assert_eq!(got.viewed_ms, Some(1_000), "not a view");
        assert_eq!(
            learned(known, 409, &paused, 1_000),
            None,
            "sent before the view"
        );
        assert_eq!(learned(got, 409, &paused, 2_000), None, "nothing new");
        let start = Timestamp::from_unix_ms(START).expect("ts");
        let not_started = Closed::NotStarted {
            starts_at: start,
            retry_after_secs: 3,
        }
        .problem()
        .to_json();
        let got = learned(SkuFacts::default(), 409, &not_started, 0).expect("learned");
        assert_eq!(got.schedule.and_then(|s| s.starts_at), Some(start));
        let sold = shared::Problem::new(ErrorCode::SoldOut, "x").to_json();
        assert_eq!(learned(SkuFacts::default(), 409, &sold, 0), None);
        assert_eq!(learned(SkuFacts::default(), 201, "{}", 0), None);
        // The origin's Retry-After goes on with its schedule answers only.
        assert_eq!(origin_retry_after(409, &not_started, Some("3")), Some(3));
        assert_eq!(origin_retry_after(409, &paused, Some(" 5 ")), Some(5));
        assert_eq!(origin_retry_after(409, &sold, Some("5")), None);
        assert_eq!(origin_retry_after(409, &paused, Some("soon")), None);
        assert_eq!(origin_retry_after(409, &paused, None), None);
    }

    #[test]
    fn a_refusing_schedule_is_refreshed_once_older_than_the_view_ttl() {
        const TTL: i64 = 5_000;
        let now = START - 60_000;
        let facts = SkuFacts {
            schedule: Some(sale(false)),
            viewed_ms: Some(now - 1_000),
            ..SkuFacts::default()
        };
        assert!(!needs_refresh(&facts, now, TTL, MARGIN));
        assert!(needs_refresh(&facts, now + 4_000, TTL, MARGIN));
        // Nothing refuses: nothing to refresh (the origin decides).
        assert!(!needs_refresh(&facts, START + 10_000, TTL, MARGIN));
        assert!(!needs_refresh(&SkuFacts::default(), now, TTL, MARGIN));
        // A schedule learned from an answer only (never viewed) is confirmed before it refuses.
        let learned = SkuFacts {
            schedule: Some(sale(true)),
            ..SkuFacts::default()
        };
        assert!(needs_refresh(&learned, START + 10_000, TTL, MARGIN));
    }
}
