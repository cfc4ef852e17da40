//! The IETF `RateLimit` / `RateLimit-Policy` header fields (draft-ietf-httpapi-ratelimit-headers),
//! serialized as RFC 8941 structured fields:
//!
//! ```text
//! RateLimit-Policy: "purchase";q=5;w=10
//! RateLimit: "purchase";r=0;t=2
//! ```
//!
//! `q` is the quota and `w` the window in seconds. `r` is what remains now. `t` is in seconds: on
//! an admitted request, when the full quota is back; on a 429, when the next request is admitted,
//! which is also the `Retry-After` (the contract wants `Retry-After >= t`).

use crate::gcra::Policy;
use crate::protocol::RateOutcome;

/// Header names, lower-case.
pub const RATELIMIT: &str = "ratelimit";
pub const RATELIMIT_POLICY: &str = "ratelimit-policy";
pub const RETRY_AFTER: &str = "retry-after";

/// An RFC 8941 sf-string: `"` + the value with `\` and `"` escaped + `"`. Characters outside
/// printable ASCII are dropped (policy names are validated to `[A-Za-z0-9_-]` anyway).
pub fn sf_string(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars().filter(|c| (' '..='~').contains(c)) {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// `RateLimit-Policy` for `policy`.
pub fn policy_field(policy: &Policy) -> String {
    format!(
        "{};q={};w={}",
        sf_string(policy.name()),
        policy.quota(),
        policy.window_secs()
    )
}

/// The largest RFC 8941 sf-integer (at most 15 digits).
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// `RateLimit` for `policy` after `outcome`. `t` is capped at the largest sf-integer, so the
/// field stays a valid structured field (and `Retry-After`, uncapped, stays `>= t`).
pub fn limit_field(policy: &Policy, outcome: &RateOutcome) -> String {
    let (r, t) = match *outcome {
        RateOutcome::Allowed {
            remaining,
            reset_secs,
        } => (remaining, reset_secs),
        RateOutcome::Limited { retry_after_secs } => (0, retry_after_secs),
    };
    let t = t.min(SF_INTEGER_MAX);
    format!("{};r={r};t={t}", sf_string(policy.name()))
}

/// The rate-limit headers of a response after `outcome`: both fields always, and `Retry-After`
/// when limited.
pub fn headers(policy: &Policy, outcome: &RateOutcome) -> Vec<(String, String)> {
    let mut out = vec![
        (RATELIMIT_POLICY.to_owned(), policy_field(policy)),
        (RATELIMIT.to_owned(), limit_field(policy, outcome)),
    ];
    if let RateOutcome::Limited { retry_after_secs } = *outcome {
        out.push((RETRY_AFTER.to_owned(), retry_after_secs.to_string()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_match_the_draft_examples() {
        let p = Policy::new("purchase", 5, 10).expect("policy");
        assert_eq!(policy_field(&p), r#""purchase";q=5;w=10"#);
        let limited = RateOutcome::Limited {
            retry_after_secs: 7,
        };
        assert_eq!(limit_field(&p, &limited), r#""purchase";r=0;t=7"#);
        let h = headers(&p, &limited);
        assert!(h.contains(&("retry-after".to_owned(), "7".to_owned())));
        let allowed = RateOutcome::Allowed {
            remaining: 3,
            reset_secs: 4,
        };
        assert_eq!(limit_field(&p, &allowed), r#""purchase";r=3;t=4"#);
        assert_eq!(headers(&p, &allowed).len(), 2);
    }

    #[test]
    fn t_stays_a_structured_field_integer() {
        let p = Policy::new("purchase", 5, 10).expect("policy");
        let huge = RateOutcome::Limited {
            retry_after_secs: u64::MAX,
        };
        assert_eq!(
            limit_field(&p, &huge),
            r#""purchase";r=0;t=999999999999999"#
        );
        let h = headers(&p, &huge);
        assert!(h.contains(&("retry-after".to_owned(), u64::MAX.to_string())));
    }

    #[test]
    fn sf_strings_are_escaped() {
        assert_eq!(sf_string(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(sf_string("é\u{7f}x"), r#""x""#);
    }
}
