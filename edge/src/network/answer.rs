//! `429 network_limit`, built in one place: the detail that says what is true, `Retry-After` when
//! waiting helps, and the `RateLimit-Policy` / `RateLimit` fields of the `network` policy (`q` =
//! the bound, `w` = the window; `r` = what the network may still take, `t` = seconds until the
//! whole bound is back, or 1 while busy), like the per-user limit's.

use shared::ErrorCode;

use super::{Bound, Kind, Refusal, Why};
use crate::ratelimit_fields::{RATELIMIT, RATELIMIT_POLICY, RETRY_AFTER, sf_string};
use crate::reply::Reply;

/// The policy name in the `RateLimit` fields.
pub const POLICY_NAME: &str = "network";

/// The detail of a refusal of `kind` against `bound`.
fn detail(kind: Kind, bound: Bound, refusal: Refusal) -> String {
    let (per, w) = (bound.bound, bound.window_secs);
    match (refusal.why, kind) {
        (Why::Busy, _) => {
            "another request from your network is being decided; retry after the indicated time"
                .to_owned()
        }
        (Why::Spent, Kind::Units) => format!(
            "your network bought the most this sale allows ({per} units per {w} s); retry after the indicated time"
        ),
        (Why::Spent, Kind::Admissions) => format!(
            "the most shoppers this sale admits from your network ({per} per {w} s) have joined; retry after the indicated time"
        ),
        (Why::TooMany, _) => {
            let left = refusal.remaining;
            let unit = if left == 1 { "unit" } else { "units" };
            format!(
                "your network may buy {left} more {unit} of this sale now ({per} units per {w} s): ask for {left} or fewer"
            )
        }
    }
}

/// The refusal of a request of `kind` against `bound`.
pub fn limited(kind: Kind, bound: Bound, refusal: Refusal) -> Reply {
    let name = sf_string(POLICY_NAME);
    let reply = Reply::problem(ErrorCode::NetworkLimit, detail(kind, bound, refusal))
        .with_header(
            RATELIMIT_POLICY,
            format!("{name};q={};w={}", bound.bound, bound.window_secs),
        )
        .with_header(
            RATELIMIT,
            format!("{name};r={};t={}", refusal.remaining, refusal.reset_secs),
        )
        .with_header("cache-control", "private, no-store");
    match refusal.retry_after_secs() {
        Some(secs) => reply.with_header(RETRY_AFTER, secs.to_string()),
        None => reply,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: Bound = Bound {
        bound: 4,
        window_secs: 3_600,
    };

    #[test]
    fn the_refusal_carries_retry_after_and_the_ratelimit_fields() {
        let r = limited(
            Kind::Units,
            BOUND,
            Refusal {
                remaining: 0,
                reset_secs: 120,
                why: Why::Spent,
            },
        );
        assert_eq!(r.status, 429);
        assert_eq!(r.code(), Some(ErrorCode::NetworkLimit));
        assert_eq!(r.header("retry-after"), Some("120"));
        assert_eq!(
            r.header("ratelimit-policy"),
            Some(r#""network";q=4;w=3600"#)
        );
        assert_eq!(r.header("ratelimit"), Some(r#""network";r=0;t=120"#));
        let busy = limited(
            Kind::Units,
            BOUND,
            Refusal {
                remaining: 3,
                reset_secs: 1,
                why: Why::Busy,
            },
        );
        assert_eq!(busy.header("retry-after"), Some("1"));
        assert_eq!(busy.header("ratelimit"), Some(r#""network";r=3;t=1"#));
    }

    /// Issue 35: a `qty` above what the network may still buy was told the network "bought the
    /// most" and sent away for the window, even when it bought nothing.
    #[test]
    fn a_quantity_above_what_is_left_is_told_what_is_left_without_a_wait() {
        let r = limited(
            Kind::Units,
            BOUND,
            Refusal {
                remaining: 4,
                reset_secs: 3_600,
                why: Why::TooMany,
            },
        );
        assert_eq!((r.status, r.code()), (429, Some(ErrorCode::NetworkLimit)));
        let body: serde_json::Value = serde_json::from_str(&r.body).expect("json");
        assert_eq!(
            body["detail"],
            "your network may buy 4 more units of this sale now (4 units per 3600 s): ask for 4 or fewer"
        );
        assert_eq!(r.header("retry-after"), None, "no wait makes it pass");
        assert_eq!(r.header("ratelimit"), Some(r#""network";r=4;t=3600"#));
        let one = limited(
            Kind::Units,
            BOUND,
            Refusal {
                remaining: 1,
                reset_secs: 10,
                why: Why::TooMany,
            },
        );
        assert!(one.body.contains("may buy 1 more unit of"), "{}", one.body);
    }
}
