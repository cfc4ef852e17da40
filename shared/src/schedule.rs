//! A sale's schedule on the wire: [`Update`] (an admin field that may be absent, `null` or set)
//! and [`Schedule`] with the one decision both sides make from it — is the sale open at
//! `now`? The origin asks with the database's clock (the authority), the edge with its own clock
//! and a safety margin (`edge::schedule`). No clock here: callers pass `now`.

use serde::{Deserialize, Serialize, Serializer};

use crate::problem::ErrorCode;
/// The schedule's instants (`crate::timestamp`), where they have always been named.
pub use crate::timestamp::{Timestamp, TimestampError};

/// `Retry-After` (seconds) of a `409 sale_paused`, at the origin and the edge alike: how soon a
/// paused sale is worth asking again.
pub const PAUSED_RETRY_AFTER_SECS: u64 = 5;

/// An optional admin field: absent keeps the stored value, `null` clears it, a value sets it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Update<T> {
    #[default]
    Keep,
    Clear,
    Set(T),
}

impl<T: Copy> Update<T> {
    /// The value after applying this update to `stored`.
    pub fn apply(self, stored: Option<T>) -> Option<T> {
        match self {
            Self::Keep => stored,
            Self::Clear => None,
            Self::Set(v) => Some(v),
        }
    }

    pub fn is_keep(&self) -> bool {
        matches!(self, Self::Keep)
    }
}

impl<T: Serialize> Serialize for Update<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Keep | Self::Clear => s.serialize_none(),
            Self::Set(v) => s.serialize_some(v),
        }
    }
}

/// A SKU's schedule: purchases are decided only from `starts_at` (if set), until `ends_at` (if
/// set, exclusive), and not while `paused`. Serialized (the edge caches it with its SKU facts)
/// as `{"starts_at": RFC 3339 | null, "ends_at": …, "paused": bool}`; missing members default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Schedule {
    pub starts_at: Option<Timestamp>,
    pub ends_at: Option<Timestamp>,
    pub paused: bool,
}

/// Why a sale is closed at some instant: the answer to a purchase attempt then (409, never
/// stored with the key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// `409 not_started`, `Retry-After` = whole seconds until `starts_at` (at least 1).
    NotStarted {
        starts_at: Timestamp,
        retry_after_secs: u64,
    },
    /// `409 sale_ended`.
    Ended { ends_at: Timestamp },
    /// `409 sale_paused`, `Retry-After` = [`PAUSED_RETRY_AFTER_SECS`].
    Paused,
}

impl Closed {
    pub fn code(self) -> ErrorCode {
        match self {
            Self::NotStarted { .. } => ErrorCode::NotStarted,
            Self::Ended { .. } => ErrorCode::SaleEnded,
            Self::Paused => ErrorCode::SalePaused,
        }
    }

    /// The `Retry-After` seconds of the answer (none for an ended sale).
    pub fn retry_after_secs(self) -> Option<u64> {
        match self {
            Self::NotStarted {
                retry_after_secs, ..
            } => Some(retry_after_secs),
            Self::Ended { .. } => None,
            Self::Paused => Some(PAUSED_RETRY_AFTER_SECS),
        }
    }

    /// The problem+json of the answer: `starts_at` / `ends_at` members as the case may be.
    pub fn problem(self) -> crate::Problem {
        let code = self.code();
        match self {
            Self::NotStarted { starts_at, .. } => crate::Problem::new(
                code,
                format!("the sale starts at {starts_at}; retry then with the same Idempotency-Key"),
            )
            .with_starts_at(starts_at),
            Self::Ended { ends_at } => {
                crate::Problem::new(code, format!("the sale ended at {ends_at}"))
                    .with_ends_at(ends_at)
            }
            Self::Paused => crate::Problem::new(
                code,
                "the sale is paused; retry later with the same Idempotency-Key",
            ),
        }
    }
}

/// Whole seconds from `now_ms` until `at_ms`, rounded up, at least 1.
pub fn secs_until(at_ms: i64, now_ms: i64) -> u64 {
    let ms = u64::try_from(at_ms.saturating_sub(now_ms).max(1)).unwrap_or(1);
    ms.div_ceil(1_000)
}

impl Schedule {
    /// Whether the sale is closed at `now_ms` (unix ms of the deciding clock), and why. An ended
    /// sale is `Ended` even if also paused; a paused sale that has not started is `NotStarted`
    /// (the start is what the shopper waits for).
    pub fn closed_at(&self, now_ms: i64) -> Option<Closed> {
        if let Some(starts_at) = self.starts_at.filter(|s| now_ms < s.unix_ms()) {
            return Some(Closed::NotStarted {
                starts_at,
                retry_after_secs: secs_until(starts_at.unix_ms(), now_ms),
            });
        }
        if let Some(ends_at) = self.ends_at.filter(|e| now_ms >= e.unix_ms()) {
            return Some(Closed::Ended { ends_at });
        }
        self.paused.then_some(Closed::Paused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn the_schedule_decides_in_order_start_end_pause() {
        let start = ts("2026-12-01T10:00:00Z");
        let end = ts("2026-12-01T11:00:00Z");
        let s = Schedule {
            starts_at: Some(start),
            ends_at: Some(end),
            paused: false,
        };
        let t = start.unix_ms();
        assert_eq!(
            s.closed_at(t - 1),
            Some(Closed::NotStarted {
                starts_at: start,
                retry_after_secs: 1
            })
        );
        assert_eq!(
            s.closed_at(t - 1_001).and_then(Closed::retry_after_secs),
            Some(2)
        );
        assert_eq!(s.closed_at(t), None, "open at the start instant");
        assert_eq!(s.closed_at(end.unix_ms() - 1), None);
        assert_eq!(
            s.closed_at(end.unix_ms()),
            Some(Closed::Ended { ends_at: end })
        );
        let paused = Schedule { paused: true, ..s };
        assert_eq!(paused.closed_at(t), Some(Closed::Paused));
        assert_eq!(
            paused.closed_at(t - 5_000).map(Closed::code),
            Some(ErrorCode::NotStarted)
        );
        assert_eq!(
            paused.closed_at(end.unix_ms()).map(Closed::code),
            Some(ErrorCode::SaleEnded)
        );
        assert_eq!(Schedule::default().closed_at(0), None);
        assert_eq!(
            Closed::Paused.retry_after_secs(),
            Some(PAUSED_RETRY_AFTER_SECS)
        );
    }

    #[test]
    fn answers_carry_the_instants() {
        let start = ts("2026-12-01T10:00:00Z");
        let v: serde_json::Value = serde_json::from_str(
            &Closed::NotStarted {
                starts_at: start,
                retry_after_secs: 3,
            }
            .problem()
            .to_json(),
        )
        .expect("json");
        assert_eq!(v["code"], "not_started");
        assert_eq!(v["status"], 409);
        assert_eq!(v["starts_at"], "2026-12-01T10:00:00Z");
        assert!(v.get("ends_at").is_none());
        let v: serde_json::Value =
            serde_json::from_str(&Closed::Ended { ends_at: start }.problem().to_json())
                .expect("json");
        assert_eq!(
            (v["code"].as_str(), v["ends_at"].as_str()),
            (Some("sale_ended"), Some("2026-12-01T10:00:00Z"))
        );
        assert_eq!(Closed::Paused.problem().code, ErrorCode::SalePaused);
    }

    #[test]
    fn updates_keep_clear_or_set() {
        let t = Timestamp::from_unix_ms(5);
        assert_eq!(Update::Keep.apply(t), t);
        assert_eq!(Update::<Timestamp>::Clear.apply(t), None);
        let seven = Timestamp::from_unix_ms(7).expect("in range");
        assert_eq!(Update::Set(seven).apply(t), Some(seven));
    }
}
