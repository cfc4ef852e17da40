//! The waiting room's answers: the `200` of a join or a poll ([`QueueAnswer`]), and the problems
//! `403 not_admitted` (with `position` and `Retry-After`), `409 no_waiting_room`,
//! `404 not_in_queue` and the fail-closed `503`.

use serde::Serialize;
use shared::{ErrorCode, Problem, Timestamp};

use super::admission::{RoomState, Status};
use super::pass::{Pass, Receipt};
use crate::reply::Reply;
use shared::SecretRing;

/// `Retry-After` of a `503` when the room's state cannot be had.
pub const UNAVAILABLE_RETRY_AFTER_SECS: u64 = 2;
/// Longest poll hint.
const MAX_POLL_SECS: u64 = 5;
/// Poll hint of a sold-out room whose units may come back.
const SOLD_OUT_RETURN_POLL_SECS: u64 = 2;

/// The body of `POST`/`GET /v1/queue/{sku}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(utoipa::ToSchema))]
pub struct QueueAnswer {
    /// Place in line (1 = next); 0 once admitted. Before the start: the size of the pre-queue
    /// (everyone's place in it is drawn at the start).
    pub position: u64,
    pub admitted: bool,
    pub estimated_wait_secs: u64,
    /// The pass (only when admitted and not expired): send it as `Flashgate-Pass`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pass: Option<String>,
    /// When the pass expires (RFC 3339, UTC): `pass_secs` after the admission.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pass_expires_at: Option<String>,
    /// `pre_queue`, `waiting`, `admitted`, `expired` or `sold_out` (no unit remains: nobody is
    /// admitted; `position` is kept for when units come back).
    #[cfg_attr(not(target_arch = "wasm32"), schema(value_type = String))]
    pub phase: &'static str,
    /// Only with `sold_out`: `true` while holds are outstanding that could expire and return
    /// units (keep polling: admission resumes in order), `false` otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub may_return: Option<bool>,
    /// The place lies beyond what the units remaining × `overbook` can admit (unless units come
    /// back or passes ahead expire unused).
    pub likely_sold_out: bool,
    /// When to poll again.
    pub retry_after_secs: u64,
    /// Send it back as `Flashgate-Queue-Receipt` when polling: the edge answers without asking
    /// the room's objects.
    pub receipt: String,
    /// When the shopper joined (RFC 3339, UTC, milliseconds).
    pub joined_at: String,
}

/// Who asks, for which SKU, with which secrets, when.
#[derive(Debug, Clone, Copy)]
pub struct Asker<'a> {
    pub ring: &'a SecretRing,
    pub sku: &'a str,
    pub user: &'a str,
    pub now_ms: i64,
}

fn rfc3339(ms: i64) -> String {
    Timestamp::from_unix_ms(ms).map_or_else(String::new, |t| t.to_rfc3339())
}

impl QueueAnswer {
    /// The answer for a member with `receipt`, whose status in `state` is `status` (never
    /// `AdmittedEarlier`/`Unranked`/`Unplaced`: those ask the shard first).
    pub fn new(asker: Asker<'_>, state: &RoomState, receipt: &Receipt, status: Status) -> Self {
        let now = asker.now_ms;
        let mut receipt = *receipt;
        let base = |position, admitted, wait, phase, retry| Self {
            position,
            admitted,
            estimated_wait_secs: wait,
            pass: None,
            pass_expires_at: None,
            phase,
            may_return: None,
            likely_sold_out: false,
            retry_after_secs: retry,
            receipt: String::new(),
            joined_at: rfc3339(receipt.join_ms),
        };
        let mut answer = match status {
            Status::PreQueue { line } => {
                let to_start = state
                    .starts_ms
                    .map_or(0, |s| shared::schedule::secs_until(s, now));
                let wait = to_start + state.wait_secs(line.div_ceil(2));
                base(
                    line,
                    false,
                    wait,
                    "pre_queue",
                    to_start.clamp(1, MAX_POLL_SECS),
                )
            }
            Status::Waiting { position, next_ms } => {
                let wait = next_ms.map_or_else(
                    || state.wait_secs(position),
                    |at| shared::schedule::secs_until(at, now),
                );
                // When the stock decides the next admissions, poll every second: a sell-out is
                // seen within the tick, the cached state's second and this one.
                let retry = if state.stock_bound() {
                    1
                } else {
                    (wait / 2).clamp(1, MAX_POLL_SECS)
                };
                let mut a = base(position, false, wait, "waiting", retry);
                a.likely_sold_out = state.likely_sold_out(position, now);
                a
            }
            Status::SoldOut {
                position,
                may_return,
            } => {
                let retry = if may_return {
                    SOLD_OUT_RETURN_POLL_SECS
                } else {
                    MAX_POLL_SECS
                };
                let mut a = base(position, false, 0, "sold_out", retry);
                a.may_return = Some(may_return);
                a.likely_sold_out = true;
                a
            }
            Status::Admitted { admitted_ms } => {
                receipt.admitted_ms = Some(admitted_ms);
                let expires_ms = admitted_ms + i64::from(state.pass_secs) * 1_000;
                if now < expires_ms {
                    let mut a = base(0, true, 0, "admitted", MAX_POLL_SECS);
                    a.pass = Some(Pass::mint(asker.ring, asker.sku, asker.user, expires_ms));
                    a.pass_expires_at = Some(rfc3339(expires_ms));
                    a
                } else {
                    base(0, true, 0, "expired", MAX_POLL_SECS)
                }
            }
            Status::AdmittedEarlier | Status::Unranked | Status::Unplaced => {
                base(1, false, 1, "waiting", 1)
            }
        };
        answer.receipt = receipt.sign(asker.ring, asker.sku, asker.user);
        answer
    }

    pub fn reply(&self) -> Reply {
        let body = serde_json::to_string(self).unwrap_or_else(|_| "{}".into());
        Reply::json(200, body)
            .with_header("cache-control", "private, no-store")
            .with_header("retry-after", self.retry_after_secs.to_string())
    }
}

/// `403 not_admitted`: `position` in line (`None`: not in the queue), `Retry-After`.
pub fn not_admitted(detail: &str, position: Option<u64>, retry_after_secs: u64) -> Reply {
    let mut body = serde_json::to_value(Problem::new(ErrorCode::NotAdmitted, detail))
        .unwrap_or(serde_json::Value::Null);
    if let Some(map) = body.as_object_mut() {
        map.insert("position".into(), position.into());
    }
    Reply {
        status: ErrorCode::NotAdmitted.status(),
        headers: vec![("content-type".into(), shared::headers::PROBLEM_JSON.into())],
        body: body.to_string(),
    }
    .with_header("retry-after", retry_after_secs.max(1).to_string())
    .with_header("cache-control", "private, no-store")
}

pub fn no_waiting_room() -> Reply {
    Reply::problem(
        ErrorCode::NoWaitingRoom,
        "this sale has no waiting room; buy directly",
    )
}

pub fn not_in_queue() -> Reply {
    Reply::problem(
        ErrorCode::NotInQueue,
        "you have not joined this queue; POST /v1/queue/{sku} to join",
    )
    .with_header("cache-control", "private, no-store")
}

/// The room's state cannot be had: `503`, never an admission by accident.
pub fn unavailable() -> Reply {
    Reply::unavailable(
        "the waiting room is unavailable, retry later",
        UNAVAILABLE_RETRY_AFTER_SECS,
    )
    .with_header("cache-control", "no-store")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::room::admission::RoomConfig;

    fn ring() -> SecretRing {
        SecretRing::parse("r1:room-secret-0123456789", 16).expect("ring")
    }

    #[test]
    fn an_admitted_member_gets_a_pass_for_pass_secs_from_admission() {
        let state = RoomState::new(
            RoomConfig {
                admit_per_minute: 60,
                pass_secs: 30,
                starts_ms: None,
                overbook: 150,
            },
            4,
            0,
        );
        let asker = Asker {
            ring: &ring(),
            sku: "S",
            user: "u",
            now_ms: 10_000,
        };
        let receipt = Receipt {
            shard: 1,
            rank: Some(0),
            join_ms: 0,
            pre: false,
            admitted_ms: None,
            place: None,
        };
        let a = QueueAnswer::new(
            asker,
            &state,
            &receipt,
            Status::Admitted { admitted_ms: 5_000 },
        );
        assert!(a.admitted);
        let pass = a.pass.clone().expect("pass");
        assert_eq!(
            Pass::check(&ring(), "S", "u", Some(&pass), 34_999).map(|p| p.expires_ms),
            Ok(35_000)
        );
        let r = Receipt::verify(&ring(), "S", "u", &a.receipt).expect("receipt");
        assert_eq!(r.admitted_ms, Some(5_000));
        let late = QueueAnswer::new(
            Asker {
                now_ms: 35_000,
                ..asker
            },
            &state,
            &receipt,
            Status::Admitted { admitted_ms: 5_000 },
        );
        assert_eq!((late.phase, late.pass), ("expired", None));
        let w = QueueAnswer::new(
            asker,
            &state,
            &receipt,
            Status::Waiting {
                position: 7,
                next_ms: None,
            },
        );
        assert_eq!(
            (w.position, w.admitted, w.estimated_wait_secs),
            (7, false, 7)
        );
        let json: serde_json::Value = serde_json::from_str(&w.reply().body).expect("json");
        assert!(json.get("pass").is_none());
    }

    #[test]
    fn not_admitted_carries_position_and_retry_after() {
        let r = not_admitted("no pass", None, 0);
        assert_eq!((r.status, r.header("retry-after")), (403, Some("1")));
        let v: serde_json::Value = serde_json::from_str(&r.body).expect("json");
        assert_eq!(
            (v["code"].as_str(), &v["position"]),
            (Some("not_admitted"), &serde_json::Value::Null)
        );
        let v: serde_json::Value =
            serde_json::from_str(&not_admitted("x", Some(12), 3).body).expect("json");
        assert_eq!(v["position"], 12);
        assert_eq!(no_waiting_room().status, 409);
        assert_eq!(not_in_queue().status, 404);
        assert_eq!(unavailable().header("retry-after"), Some("2"));
    }
}
