//! Per-shopper rate limits kept in one Worker instance's memory, for the requests that reach no
//! Durable Object of the shopper's and must stay that cheap: `GET /v1/challenge` (the `challenge`
//! bucket, the purchase limit's quota and window) and the waiting room's joins and polls (the
//! `queue` bucket, `QUEUE_RATE_LIMIT_*`; a poll with a receipt is answered from the cache, with no
//! object call). The algorithm is the purchase limit's GCRA ([`crate::gcra`]) and the answer the
//! same `429 rate_limited` with `Retry-After` and the `RateLimit` fields; the state is per
//! instance, like the difficulty the challenge limit protects ([`crate::proof::difficulty`]): a
//! shopper whose requests reach `k` instances gets `k` times the quota at most.
//!
//! Bounded: past [`LocalBuckets::MAX_SHOPPERS`], shoppers whose bucket is full again are
//! forgotten (a GCRA state at or before now is the same as none: nothing changes), then those
//! whose buckets fill soonest (the first eighth of the span of their states).

use std::collections::HashMap;

use crate::gcra::{Decision, Policy};
use crate::protocol::RateOutcome;

/// One policy's buckets on this instance, by shopper.
#[derive(Debug, Default)]
pub struct LocalBuckets {
    /// The theoretical arrival time per shopper, µs.
    tats: HashMap<String, i64>,
}

impl LocalBuckets {
    pub const MAX_SHOPPERS: usize = 50_000;

    /// One request of `user` under `policy` at `now_ms`.
    pub fn check(&mut self, policy: &Policy, user: &str, now_ms: i64) -> RateOutcome {
        let now_us = now_ms.saturating_mul(1_000);
        if self.tats.len() >= Self::MAX_SHOPPERS && !self.tats.contains_key(user) {
            self.tats.retain(|_, tat| *tat > now_us);
            if self.tats.len() >= Self::MAX_SHOPPERS {
                // Those whose buckets fill soonest: the first eighth of the span of TATs.
                let (lo, hi) = self
                    .tats
                    .values()
                    .fold((i64::MAX, i64::MIN), |(lo, hi), t| (lo.min(*t), hi.max(*t)));
                let cut = lo.saturating_add(hi.saturating_sub(lo) / 8);
                self.tats.retain(|_, tat| *tat > cut);
            }
        }
        match policy.check(self.tats.get(user).copied(), now_us) {
            Decision::Allowed {
                new_tat_us,
                remaining,
                reset_secs,
            } => {
                self.tats.insert(user.to_owned(), new_tat_us);
                RateOutcome::Allowed {
                    remaining,
                    reset_secs,
                }
            }
            Decision::Limited { retry_after_secs } => RateOutcome::Limited { retry_after_secs },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_700_000_000_000;

    #[test]
    fn each_shopper_gets_the_quota_then_429_until_a_request_fits_again() {
        let p = Policy::new("challenge", 5, 10).expect("policy");
        let mut b = LocalBuckets::default();
        for left in (0..5).rev() {
            assert!(matches!(
                b.check(&p, "flooder", T),
                RateOutcome::Allowed { remaining, .. } if remaining == left
            ));
        }
        assert_eq!(
            b.check(&p, "flooder", T),
            RateOutcome::Limited {
                retry_after_secs: 2
            }
        );
        // Another shopper is not affected; the flooder gets one more after 2 s.
        assert!(matches!(
            b.check(&p, "honest", T),
            RateOutcome::Allowed { .. }
        ));
        assert!(matches!(
            b.check(&p, "flooder", T + 2_000),
            RateOutcome::Allowed { remaining: 0, .. }
        ));
    }

    #[test]
    fn the_table_stays_bounded_and_forgets_full_buckets_first() {
        let p = Policy::new("queue", 2, 10).expect("policy");
        let mut b = LocalBuckets::default();
        // A shopper at their limit, then a crowd that each asked once, long ago.
        b.check(&p, "limited", T + 100_000);
        b.check(&p, "limited", T + 100_000);
        for i in 0..LocalBuckets::MAX_SHOPPERS {
            b.check(&p, &format!("u{i}"), T);
        }
        assert!(b.tats.len() <= LocalBuckets::MAX_SHOPPERS);
        // The crowd's buckets are full again by now: forgotten; the limited one is not.
        assert!(matches!(
            b.check(&p, "new", T + 100_000),
            RateOutcome::Allowed { .. }
        ));
        assert!(matches!(
            b.check(&p, "limited", T + 100_000),
            RateOutcome::Limited { .. }
        ));
    }
}
