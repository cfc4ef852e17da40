//! The origin's answer to a forwarded purchase, as the edge treats it: classified ([`classify`]:
//! relay a 2xx or 4xx, a 503 for anything else), carried back from the user's Durable Object to
//! the worker ([`Forwarded`]) and replied byte for byte as it came.

use serde::{Deserialize, Serialize};
use shared::headers::IDEMPOTENT_REPLAYED;

use crate::reply::Reply;

/// Seconds a shopper is told to wait when the origin cannot be had.
pub const UNAVAILABLE_RETRY_AFTER_SECS: u64 = 2;

/// Largest origin answer the edge relays (and stores); bigger is treated as the origin failing.
pub const MAX_ORIGIN_BODY_BYTES: usize = 64 * 1024;

/// The origin's answer to a forwarded purchase, as the edge will treat it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx or 4xx answer: relay it (and `finish` the attempt with it).
    Answer {
        status: u16,
        body: String,
        replayed: bool,
    },
    /// The origin could not decide (5xx, or a non-problem error): answer this 503 and leave the key in doubt.
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
/// it back to the worker: the status and body the shopper gets (which `finish` stores with the
/// key, or releases or leaves in doubt the key on), whether the origin replayed it, and the
/// `Retry-After` to pass on.
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

    /// Whether the origin sold the attempt its units, to count against its network: a 201, fresh
    /// or replayed by the origin. The shopper's gate lets an attempt through to the origin only
    /// when it holds no answer for its key, so an origin replay of a 201 is a unit the edge
    /// never counted: sold while the edge timed out (or failed) waiting for it, and learned now
    /// (issue 35). A replay the gate answers itself never gets here.
    pub fn sold(&self) -> bool {
        self.status == 201
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

#[cfg(test)]
mod tests {
    use super::*;
    use shared::{ErrorCode, Problem};

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

    /// Issue 35: a unit sold while the edge timed out waiting for the origin was never counted
    /// against its network; the retry of its key learns it from the origin's replay.
    #[test]
    fn a_201_the_origin_replays_to_a_claimed_attempt_is_a_sale_to_count() {
        let answer = |status, replayed| OriginAnswer {
            status,
            body: br#"{"order_id":"o"}"#,
            retry_after: None,
            replayed,
        };
        let replayed = Forwarded::from_origin(Some(answer(201, true)));
        assert!(replayed.replayed && replayed.sold());
        assert!(Forwarded::from_origin(Some(answer(201, false))).sold());
        let sold_out = Problem::new(ErrorCode::SoldOut, "x").to_json();
        let refusal = Forwarded::from_origin(Some(OriginAnswer {
            status: 409,
            body: sold_out.as_bytes(),
            retry_after: None,
            replayed: true,
        }));
        assert!(!refusal.sold());
        assert!(
            !Forwarded::from_origin(None).sold(),
            "a timeout sold nothing we know of"
        );
    }
}
