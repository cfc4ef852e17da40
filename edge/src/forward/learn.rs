//! What an origin answer to a forwarded purchase teaches the shield about its SKU ([`learn`]): a
//! raised or lowered bound of the units left, a sold-out, a schedule — from answers that are no
//! replays and postdate the bound they would change.

use serde::Deserialize;
use shared::ErrorCode;

use crate::reply::problem_code;
use crate::shield::SkuFacts;

/// An origin answer to a forwarded purchase, with what the shield needs to know about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answered<'a> {
    /// Units the request asked for.
    pub qty: u32,
    pub status: u16,
    pub body: &'a str,
    /// The origin replayed a stored outcome (`Idempotent-Replayed: true`).
    pub replayed: bool,
    /// When the edge sent the request, unix ms.
    pub sent_ms: i64,
    /// When the answer arrived, unix ms (the instant of a raise it causes).
    pub arrived_ms: i64,
}

/// The one member of a 201 body (`shared::PurchaseResponse`) the shield needs. Read alone so that
/// no other member — a hold's `status` and `expires_at`, a state this edge does not know yet — can
/// make the body unreadable here.
#[derive(Deserialize)]
struct Remaining {
    remaining: i64,
}

/// The facts an origin answer teaches about the SKU, if any. A replay repeats a decision of the
/// past (maybe of an earlier sale) and an answer to a request sent before the bound was last
/// raised may have been decided before that restock or return: neither changes the bound. A 201
/// whose `remaining` is above the bound raises it (units came back; see `crate::shield`). The 201
/// body is read tolerantly: only `remaining` matters, and the fields a hold adds (`status`,
/// `expires_at`) or any later one are ignored here and relayed and stored byte for byte. A bound
/// lowered but still at or above `Quantity::MAX` is not worth writing: it refuses nothing more
/// ([`SkuFacts::only_lowered_above_any_qty`]), which spares the hot purchase path of a sale with
/// plenty of stock a Cache API read and write.
pub fn learn(facts: SkuFacts, answer: &Answered<'_>) -> Option<SkuFacts> {
    if answer.replayed {
        return None;
    }
    if let Some(learned) =
        crate::schedule::learned(facts, answer.status, answer.body, answer.sent_ms)
    {
        return Some(learned);
    }
    if !facts.lowered_by(answer.sent_ms) {
        return None;
    }
    let learned = match answer.status {
        201 => facts.after_purchase(
            serde_json::from_str::<Remaining>(answer.body)
                .ok()?
                .remaining,
            answer.arrived_ms,
        ),
        409 if problem_code(answer.body.as_bytes()) == Some(ErrorCode::SoldOut) => {
            facts.after_sold_out(answer.qty)
        }
        _ => return None,
    };
    Some(learned).filter(|f| *f != facts && !f.only_lowered_above_any_qty(&facts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forward::{Outcome, classify};
    use shared::Problem;

    fn fresh<'a>(qty: u32, status: u16, body: &'a str) -> Answered<'a> {
        Answered {
            qty,
            status,
            body,
            replayed: false,
            sent_ms: 5_000,
            arrived_ms: 5_100,
        }
    }

    #[test]
    fn facts_are_learned_from_sold_out_and_remaining() {
        let sold = Problem::new(ErrorCode::SoldOut, "x").to_json();
        assert_eq!(
            learn(SkuFacts::default(), &fresh(2, 409, &sold)).and_then(|f| f.stock_bound),
            Some(1)
        );
        let created = r#"{"order_id":"o","sku":"A","qty":1,"user":"u","remaining":0}"#;
        assert_eq!(
            learn(SkuFacts::default(), &fresh(1, 201, created)).and_then(|f| f.stock_bound),
            Some(0)
        );
        // A hold's 201 carries `status` and `expires_at` (and may carry more): read tolerantly.
        let held = r#"{"order_id":"o","sku":"A","qty":1,"user":"u","remaining":3,"status":"held","expires_at":"2026-05-01T12:00:00Z","later":{"x":1}}"#;
        assert_eq!(
            learn(SkuFacts::default(), &fresh(1, 201, held)).and_then(|f| f.stock_bound),
            Some(3)
        );
        // ... and relayed as received.
        assert_eq!(
            classify(201, held.as_bytes(), None, false),
            Outcome::Answer {
                status: 201,
                body: held.to_owned(),
                replayed: false
            }
        );
        let limit = Problem::new(ErrorCode::PurchaseLimit, "x").to_json();
        assert_eq!(learn(SkuFacts::default(), &fresh(1, 409, &limit)), None);
        // Nothing new: no write.
        let known = SkuFacts {
            stock_bound: Some(0),
            ..SkuFacts::default()
        };
        assert_eq!(learn(known, &fresh(1, 201, created)), None);
    }

    #[test]
    fn a_201_after_a_return_raises_the_bound_but_a_replay_does_not() {
        // Sold out as learned at 1,000 ms (bound 1 let this qty-1 request through, say).
        let known = SkuFacts {
            stock_bound: Some(1),
            raised_ms: Some(1_000),
            ..SkuFacts::default()
        };
        let created =
            r#"{"order_id":"o","sku":"A","qty":1,"user":"u","remaining":4,"status":"confirmed"}"#;
        let learned = learn(known, &fresh(1, 201, created)).expect("learned");
        assert_eq!(
            (learned.stock_bound, learned.raised_ms),
            (Some(4), Some(5_100))
        );
        let replay = Answered {
            replayed: true,
            ..fresh(1, 201, created)
        };
        assert_eq!(learn(known, &replay), None);
    }

    #[test]
    fn replays_and_answers_from_before_the_last_raise_never_lower_the_bound() {
        let created = r#"{"order_id":"o","sku":"A","qty":1,"user":"u","remaining":0}"#;
        let sold = Problem::new(ErrorCode::SoldOut, "x").to_json();
        // Restocked and warmed at t = 5,000 ms.
        let view = shared::SkuView {
            sku: "A".into(),
            name: "A".into(),
            price_cents: 1,
            stock: 10,
            held: 0,
            max_per_user: 5,
            starts_at: None,
            ends_at: None,
            paused: false,
            waiting_room: None,
            proof_of_work: None,
            network_limits: None,
        };
        let warm = SkuFacts::from_warmup(&view, 5_000);
        for (status, body) in [(201, created), (409, sold.as_str())] {
            // The origin replays a purchase of the earlier sale: remaining 0, but a replay.
            let replay = Answered {
                replayed: true,
                sent_ms: 9_000,
                ..fresh(1, status, body)
            };
            assert_eq!(learn(warm, &replay), None, "{status} replayed");
            // Sent before (or at) the warmup: decided before the restock, perhaps.
            for sent_ms in [4_000, 5_000] {
                let early = Answered {
                    sent_ms,
                    ..fresh(1, status, body)
                };
                assert_eq!(learn(warm, &early), None, "{status} sent at {sent_ms}");
            }
            // Sent after it: a decision of this sale, it lowers.
            let late = Answered {
                sent_ms: 5_001,
                ..fresh(1, status, body)
            };
            assert_eq!(
                learn(warm, &late).and_then(|f| f.stock_bound),
                Some(0),
                "{status}"
            );
        }
    }

    #[test]
    fn a_lower_bound_that_still_admits_any_quantity_is_not_worth_a_write() {
        let facts = |bound| SkuFacts {
            stock_bound: Some(bound),
            max_per_user: Some(5),
            raised_ms: Some(1_000),
            viewed_ms: Some(1_000),
            schedule: None,
            room: None,
            defences: None,
        };
        let created = |remaining: i64| format!(r#"{{"order_id":"o","remaining":{remaining}}}"#);
        // A 201 sent at 2 s and answered at 3 s, leaving `remaining`, taught to `before`.
        let learned_from = |before: SkuFacts, remaining: i64| {
            let body = created(remaining);
            learn(
                before,
                &Answered {
                    qty: 1,
                    status: 201,
                    body: &body,
                    replayed: false,
                    sent_ms: 2_000,
                    arrived_ms: 3_000,
                },
            )
            .map(|f| (f.stock_bound, f.raised_ms))
        };
        let learned = |bound, remaining| learned_from(facts(bound), remaining);
        let max = i64::from(shared::Quantity::MAX);
        // Plenty left: nothing the shield answers changes, nothing is written.
        assert_eq!(learned(1_000_000, 999_999), None);
        assert_eq!(learned(max + 50, max), None);
        // Below the largest quantity, every lowering is written.
        assert_eq!(
            learned(max + 50, max - 1),
            Some((Some(max - 1), Some(1_000)))
        );
        assert_eq!(
            learned(max - 1, max - 2),
            Some((Some(max - 2), Some(1_000)))
        );
        // A raise (units came back) is always written, with its instant.
        assert_eq!(
            learned(max + 50, max + 60),
            Some((Some(max + 60), Some(3_000)))
        );
        // No bound known yet: the first answer sets it.
        assert_eq!(
            learned_from(SkuFacts::default(), 5_000).map(|(bound, _)| bound),
            Some(Some(5_000))
        );
    }
}
