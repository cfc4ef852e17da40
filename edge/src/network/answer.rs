//! `429 network_limit`, built in one place: `Retry-After`, and the `RateLimit-Policy` /
//! `RateLimit` fields of the `network` policy (`q` = the bound, `w` = the window; `r` = what the
//! network may still take, `t` = `Retry-After`), like the per-user limit's.

use shared::ErrorCode;

use super::{Bound, Kind, Refusal};
use crate::ratelimit_fields::{RATELIMIT, RATELIMIT_POLICY, RETRY_AFTER, sf_string};
use crate::reply::Reply;

/// The policy name in the `RateLimit` fields.
pub const POLICY_NAME: &str = "network";

/// The refusal of a request of `kind` against `bound`.
pub fn limited(kind: Kind, bound: Bound, refusal: Refusal) -> Reply {
    let detail = if refusal.busy {
        "another request from your network is being decided; retry after the indicated time"
            .to_owned()
    } else {
        match kind {
            Kind::Units => format!(
                "your network bought the most this sale allows ({} units per {} s); retry after the indicated time",
                bound.bound, bound.window_secs
            ),
            Kind::Admissions => format!(
                "the most shoppers this sale admits from your network ({} per {} s) have joined; retry after the indicated time",
                bound.bound, bound.window_secs
            ),
        }
    };
    let name = sf_string(POLICY_NAME);
    Reply::problem(ErrorCode::NetworkLimit, detail)
        .with_header(RETRY_AFTER, refusal.retry_after_secs.to_string())
        .with_header(
            RATELIMIT_POLICY,
            format!("{name};q={};w={}", bound.bound, bound.window_secs),
        )
        .with_header(
            RATELIMIT,
            format!(
                "{name};r={};t={}",
                refusal.remaining, refusal.retry_after_secs
            ),
        )
        .with_header("cache-control", "private, no-store")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_carries_retry_after_and_the_ratelimit_fields() {
        let r = limited(
            Kind::Units,
            Bound {
                bound: 4,
                window_secs: 3_600,
            },
            Refusal {
                remaining: 0,
                retry_after_secs: 120,
                busy: false,
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
    }
}
