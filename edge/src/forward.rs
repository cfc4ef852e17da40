//! Forwarding a purchase to the origin: the signed headers, and what the edge does with the
//! origin's answer (pass it on, store it, learn sold-out facts from it, or turn a failure into a
//! 503 the shopper may retry).

use serde::{Deserialize, Serialize};
use shared::ErrorCode;
use shared::SecretRing;
use shared::headers::{IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED, REQUEST_ID, SIGNATURE, USER};
use shared::signing::{SignedParts, sign};

use crate::purchase::Purchase;
use crate::reply::{Reply, problem_code};
use crate::request_id::RequestId;
use crate::shield::SkuFacts;

/// Path of the purchase endpoint on the origin (also the signed path).
pub const PURCHASE_PATH: &str = "/v1/purchases";

/// Seconds a shopper is told to wait when the origin cannot be had.
pub const UNAVAILABLE_RETRY_AFTER_SECS: u64 = 2;

/// Largest origin answer the edge relays (and stores); bigger is treated as the origin failing.
pub const MAX_ORIGIN_BODY_BYTES: usize = 64 * 1024;

/// The headers of the forwarded request: content type, the raw Idempotency-Key, the user and the
/// signature over `POST /v1/purchases`, the user, the *decoded* key and the exact body bytes — v2,
/// with the current key of `keys` (`EDGE_SHARED_SECRETS`), named by its `kid`.
pub fn signed_headers(
    keys: &SecretRing,
    now: i64,
    purchase: &Purchase,
) -> Vec<(&'static str, String)> {
    let parts = SignedParts {
        method: "POST",
        path: PURCHASE_PATH,
        user: purchase.user.as_str(),
        idempotency_key: purchase.key.as_str(),
        body: purchase.body.as_bytes(),
    };
    vec![
        ("content-type", "application/json".to_owned()),
        (IDEMPOTENCY_KEY, purchase.raw_key.clone()),
        (USER, purchase.user.to_string()),
        (SIGNATURE, sign(keys, now, &parts)),
    ]
}

/// Everything the forwarded request carries: the [`signed_headers`] plus the request id (not
/// signed: it only labels logs).
pub fn origin_headers(
    keys: &SecretRing,
    now: i64,
    purchase: &Purchase,
    request_id: &RequestId,
) -> Vec<(&'static str, String)> {
    let mut headers = signed_headers(keys, now, purchase);
    headers.push((REQUEST_ID, request_id.to_string()));
    headers
}

/// The origin's answer to a forwarded purchase, as the edge will treat it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx or 4xx answer: relay it (and `finish` the attempt with it).
    Answer {
        status: u16,
        body: String,
        replayed: bool,
    },
    /// The origin could not decide (5xx, or a non-problem error): answer this 503, release the key.
    Unavailable(Reply),
}

/// Classifies the origin's `status`/`body` (`retry_after`: its `Retry-After`, if any).
pub fn classify(status: u16, body: &[u8], retry_after: Option<&str>, replayed: bool) -> Outcome {
    let retry = retry_after
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(UNAVAILABLE_RETRY_AFTER_SECS)
        .clamp(1, 300);
    let text = std::str::from_utf8(body)
        .ok()
        .filter(|_| body.len() <= MAX_ORIGIN_BODY_BYTES);
    match (status, text) {
        // 401 `bad_signature` means the edge and the origin disagree on the edge secrets or
        // the clock: nothing the shopper can fix, so it is the origin being unavailable to them.
        (401, _) => Outcome::Unavailable(unavailable()),
        (200..=299 | 400..=499, Some(text)) => Outcome::Answer {
            status,
            body: text.to_owned(),
            replayed,
        },
        (503, _) => Outcome::Unavailable(Reply::unavailable(
            "the purchase service is unavailable, retry later",
            retry,
        )),
        _ => Outcome::Unavailable(unavailable()),
    }
}

/// The 503 for an origin that is down, slow, or answered nonsense.
pub fn unavailable() -> Reply {
    Reply::unavailable(
        "the purchase service cannot be reached, retry later",
        UNAVAILABLE_RETRY_AFTER_SECS,
    )
}

/// What the origin's answer to a forwarded purchase comes to, as the user's Durable Object hands
/// it back to the worker: the status and body the shopper gets (and `finish` stores or releases
/// the key with), whether the origin replayed it, and the `Retry-After` to pass on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forwarded {
    pub status: u16,
    pub body: String,
    /// The origin replayed a stored outcome (`Idempotent-Replayed: true`).
    #[serde(default)]
    pub replayed: bool,
    /// `Retry-After` of the reply: the origin's on a `not_started` / `sale_paused`, or the 503's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
}

/// The origin's raw answer to a forwarded purchase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OriginAnswer<'a> {
    pub status: u16,
    pub body: &'a [u8],
    /// Its `Retry-After`, if any.
    pub retry_after: Option<&'a str>,
    pub replayed: bool,
}

impl Forwarded {
    /// What `answer` comes to ([`classify`]); `None`: no answer (down, or past the deadline).
    pub fn from_origin(answer: Option<OriginAnswer<'_>>) -> Self {
        let Some(a) = answer else {
            return Self::unavailable(&unavailable());
        };
        match classify(a.status, a.body, a.retry_after, a.replayed) {
            Outcome::Answer {
                status,
                body,
                replayed,
            } => {
                let retry_after = crate::schedule::origin_retry_after(status, &body, a.retry_after);
                Self {
                    status,
                    body,
                    replayed,
                    retry_after,
                }
            }
            Outcome::Unavailable(reply) => Self::unavailable(&reply),
        }
    }

    fn unavailable(reply: &Reply) -> Self {
        Self {
            status: reply.status,
            body: reply.body.clone(),
            replayed: false,
            retry_after: reply.header("retry-after").and_then(|v| v.parse().ok()),
        }
    }

    /// The reply to the shopper: the origin's status and body byte for byte (a 503 `unavailable`
    /// when it could not decide), with `Idempotent-Replayed` and `Retry-After` as it sent them.
    pub fn reply(&self) -> Reply {
        let reply = Reply::stored(self.status, self.body.clone());
        let reply = if self.replayed {
            reply.with_header(IDEMPOTENT_REPLAYED, "true")
        } else {
            reply
        };
        match self.retry_after {
            Some(secs) => reply.with_header("retry-after", secs.to_string()),
            None => reply,
        }
    }
}

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
    use crate::purchase::{Incoming, validate};
    use serde_json::json;
    use shared::signing::{Verified, Verifier, Version};
    use shared::{KeyId, Problem};

    #[test]
    fn the_forwarded_request_verifies_with_the_origin_rules() {
        let token = crate::jwt::sign_hs256(&json!({"sub": "alice", "exp": 1_700_003_600}), b"s");
        let auth = format!("Bearer {token}");
        let incoming = Incoming {
            credential: &crate::session::Credential::Header(&auth),
            idempotency_key: Some("\"k\\\"1\""),
            body: br#"{ "qty":1, "sku":"A" }"#,
        };
        let session = SecretRing::single(b"s".to_vec());
        let rules = crate::jwt::TokenRules::default();
        let p = validate(incoming, &session, &rules, 1_700_000_000).expect("valid");
        // The edge mid-rotation: new key first (current), old key still held.
        let edge_keys = SecretRing::parse("k2:edge-new,k1:edge-old", 1).expect("ring");
        let rid = RequestId::parse("shop-trace-1").expect("id");
        let headers = origin_headers(&edge_keys, 1_700_000_000, &p, &rid);
        let get = |n: &str| {
            headers
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get(IDEMPOTENCY_KEY), Some("\"k\\\"1\""));
        assert_eq!(get(USER), Some("alice"));
        assert_eq!(get(REQUEST_ID), Some("shop-trace-1"));
        // Signed v2 with the current key, named.
        let signature = get(SIGNATURE).unwrap_or_default();
        assert!(
            signature.starts_with("t=1700000000,kid=k2,v2="),
            "{signature}"
        );
        // What the origin does: decode the key, hash the body it received, verify.
        let parts = SignedParts {
            method: "POST",
            path: PURCHASE_PATH,
            user: "alice",
            idempotency_key: "k\"1",
            body: p.body.as_bytes(),
        };
        let kid = |s: &str| KeyId::parse(s).expect("kid");
        let origin = |ring: &str| SecretRing::parse(ring, 1).expect("ring");
        for ring in ["k2:edge-new,k1:edge-old", "k2:edge-new", "k3:x,k2:edge-new"] {
            let origin = origin(ring);
            let verifier = Verifier {
                ring: &origin,
                accept_v1: false,
            };
            assert_eq!(
                verifier.verify(get(SIGNATURE), 1_700_000_100, &parts),
                Ok(Verified {
                    version: Version::V2,
                    kid: kid("k2"),
                }),
                "{ring}"
            );
        }
        // An origin that does not have the new key yet refuses it: the origins learn the new
        // key before the edge signs with it.
        let old_origin = origin("k1:edge-old");
        let verifier = Verifier {
            ring: &old_origin,
            accept_v1: true,
        };
        assert!(
            verifier
                .verify(get(SIGNATURE), 1_700_000_100, &parts)
                .is_err()
        );
    }

    #[test]
    fn origin_answers_are_relayed_or_become_503() {
        let sold = Problem::new(ErrorCode::SoldOut, "x").to_json();
        assert!(matches!(
            classify(409, sold.as_bytes(), None, false),
            Outcome::Answer { status: 409, .. }
        ));
        assert!(matches!(
            classify(201, b"{}", None, true),
            Outcome::Answer { replayed: true, .. }
        ));
        let Outcome::Unavailable(r) = classify(503, b"{}", Some("7"), false) else {
            panic!("503 must be unavailable")
        };
        assert_eq!((r.status, r.header("retry-after")), (503, Some("7")));
        for status in [500, 502, 504, 302, 401] {
            let Outcome::Unavailable(r) = classify(status, b"boom", None, false) else {
                panic!("{status}")
            };
            assert_eq!((r.status, r.header("retry-after")), (503, Some("2")));
        }
        let huge = vec![b'a'; MAX_ORIGIN_BODY_BYTES + 1];
        assert!(matches!(
            classify(201, &huge, None, false),
            Outcome::Unavailable(_)
        ));
        assert!(matches!(
            classify(201, &[0xff], None, false),
            Outcome::Unavailable(_)
        ));
    }

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
    fn what_the_durable_object_hands_back_replies_like_the_origin_answered() {
        let created = r#"{"order_id":"o","status":"held","remaining":3}"#;
        let answer = |status: u16, body: &str, retry_after: Option<&str>, replayed: bool| {
            Forwarded::from_origin(Some(OriginAnswer {
                status,
                body: body.as_bytes(),
                retry_after,
                replayed,
            }))
        };
        // A 201, byte for byte; replayed by the origin: marked so.
        let first = answer(201, created, None, false);
        let reply = first.reply();
        assert_eq!((reply.status, reply.body.as_str()), (201, created));
        assert_eq!(reply.header(IDEMPOTENT_REPLAYED), None);
        let again = answer(201, created, None, true).reply();
        assert_eq!(again.header(IDEMPOTENT_REPLAYED), Some("true"));
        assert_eq!(again.header("content-type"), Some(crate::reply::JSON));
        // A paused sale: its Retry-After is passed on; a sold-out one has none to pass.
        let paused = Problem::new(ErrorCode::SalePaused, "paused").to_json();
        let reply = answer(409, &paused, Some("5"), false).reply();
        assert_eq!(
            (reply.status, reply.header("retry-after")),
            (409, Some("5"))
        );
        let sold = Problem::new(ErrorCode::SoldOut, "gone").to_json();
        assert_eq!(
            answer(409, &sold, Some("5"), false)
                .reply()
                .header("retry-after"),
            None
        );
        // No answer, a 5xx or keys out of step: 503 + Retry-After, as a problem.
        for forwarded in [
            Forwarded::from_origin(None),
            answer(500, "boom", None, false),
            answer(401, "{}", None, false),
            answer(503, "{}", Some("7"), false),
        ] {
            let reply = forwarded.reply();
            assert_eq!(reply.status, 503, "{forwarded:?}");
            assert_eq!(reply.code(), Some(ErrorCode::Unavailable));
            assert_eq!(
                reply.header("content-type"),
                Some(shared::headers::PROBLEM_JSON)
            );
            assert!(reply.header("retry-after").is_some(), "{forwarded:?}");
            // It crosses the Durable Object boundary as JSON unchanged.
            let text = serde_json::to_string(&forwarded).expect("json");
            assert_eq!(
                serde_json::from_str::<Forwarded>(&text).ok(),
                Some(forwarded)
            );
        }
        assert_eq!(
            answer(503, "{}", Some("7"), false)
                .reply()
                .header("retry-after"),
            Some("7")
        );
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
