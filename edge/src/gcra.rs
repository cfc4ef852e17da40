//! Per-user rate limiting with the Generic Cell Rate Algorithm.
//!
//! A policy allows `quota` requests per `window`. GCRA keeps one number per user, the
//! *theoretical arrival time* (TAT): each admitted request pushes it `window / quota` further, and
//! a request is refused when that would put it more than `window` ahead of now. That admits a burst
//! of exactly `quota` and then one request every `window / quota` — a sliding window without
//! counters. Time is kept in microseconds; [`Policy::new`] refuses windows too short for the
//! integer emission interval to stay exact (so a burst never admits `quota + 1`).
//!
//! The state lives in the user's Durable Object, which runs one request at a time, so the check
//! is strongly consistent (not per-location, not eventual).
//!
//! Why by hand: rate-limit crates (`governor` and the like) keep their state in process memory
//! with their own clock, while here the state is one number in Durable Object storage — it must
//! outlive the object's eviction and be the same for every Worker instance — and the clock is the
//! Worker's. What is left of GCRA over one stored number is a few lines of integer arithmetic,
//! and the answer's `RateLimit` fields (remaining, reset) are read off the same TAT.

/// A rate-limit policy: `quota` requests per `window_secs`, named for the `RateLimit` fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    name: String,
    quota: u32,
    window_secs: u32,
}

/// Why a policy is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyError {
    Quota,
    Window,
    Name,
}

impl std::fmt::Display for PolicyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Quota => "quota must be 1..=10000",
            Self::Window => "window must be 1..=86400 seconds and at least quota*(quota+1) µs",
            Self::Name => "policy name must be 1..=64 characters of [A-Za-z0-9_-]",
        })
    }
}

const MICROS: i64 = 1_000_000;

impl Policy {
    pub fn new(name: &str, quota: u32, window_secs: u32) -> Result<Self, PolicyError> {
        if !(1..=10_000).contains(&quota) {
            return Err(PolicyError::Quota);
        }
        // Exactness: (quota + 1) * floor(W / quota) > W holds when W >= quota * (quota + 1).
        let window_us = i64::from(window_secs) * MICROS;
        if !(1..=86_400).contains(&window_secs)
            || window_us < i64::from(quota) * (i64::from(quota) + 1)
        {
            return Err(PolicyError::Window);
        }
        let name_ok = (1..=64).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !name_ok {
            return Err(PolicyError::Name);
        }
        Ok(Self {
            name: name.to_owned(),
            quota,
            window_secs,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn quota(&self) -> u32 {
        self.quota
    }

    pub fn window_secs(&self) -> u32 {
        self.window_secs
    }

    fn window_us(&self) -> i64 {
        i64::from(self.window_secs) * MICROS
    }

    /// Time one request "costs": `window / quota`, floored to a microsecond.
    fn emission_us(&self) -> i64 {
        self.window_us() / i64::from(self.quota)
    }

    /// Decides a request at `now_us` given the stored TAT (None for a user never seen).
    pub fn check(&self, tat_us: Option<i64>, now_us: i64) -> Decision {
        let window = self.window_us();
        let emission = self.emission_us();
        let tat = tat_us.map_or(now_us, |t| t.max(now_us));
        let new_tat = tat.saturating_add(emission);
        let ahead = new_tat - now_us; // in (0, window + emission]
        if ahead <= window {
            let remaining = u32::try_from((window - ahead) / emission)
                .unwrap_or(0)
                .min(self.quota - 1);
            Decision::Allowed {
                new_tat_us: new_tat,
                remaining,
                reset_secs: ceil_secs(ahead),
            }
        } else {
            Decision::Limited {
                retry_after_secs: ceil_secs(ahead - window).max(1),
            }
        }
    }
}

fn ceil_secs(us: i64) -> u64 {
    u64::try_from(us.max(0))
        .unwrap_or(0)
        .div_ceil(MICROS.unsigned_abs())
}

/// The outcome of [`Policy::check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Admit; store `new_tat_us`. `remaining` more requests fit right now; the full quota is back
    /// after `reset_secs`.
    Allowed {
        new_tat_us: i64,
        remaining: u32,
        reset_secs: u64,
    },
    /// Refuse; the stored TAT is unchanged. The next request is admitted after `retry_after_secs`.
    Limited { retry_after_secs: u64 },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(q: u32, w: u32) -> Policy {
        Policy::new("purchase", q, w).expect("valid policy")
    }

    /// Runs `n` requests at `now_us`, threading the TAT; returns how many were admitted.
    fn burst(p: &Policy, tat: &mut Option<i64>, now_us: i64, n: usize) -> usize {
        let mut admitted = 0;
        for _ in 0..n {
            if let Decision::Allowed { new_tat_us, .. } = p.check(*tat, now_us) {
                *tat = Some(new_tat_us);
                admitted += 1;
            }
        }
        admitted
    }

    #[test]
    fn a_burst_admits_exactly_the_quota() {
        for (q, w) in [(1, 1), (5, 10), (3, 10), (7, 1), (100, 60), (999, 1)] {
            let p = policy(q, w);
            let mut tat = None;
            assert_eq!(
                burst(&p, &mut tat, 1_000_000_000, 5_000),
                q as usize,
                "q={q} w={w}"
            );
        }
    }

    #[test]
    fn remaining_counts_down_and_limited_says_when_to_retry() {
        let p = policy(5, 10);
        let now = 50 * MICROS;
        let mut tat = None;
        let mut seen = vec![];
        for _ in 0..5 {
            match p.check(tat, now) {
                Decision::Allowed {
                    new_tat_us,
                    remaining,
                    reset_secs,
                } => {
                    tat = Some(new_tat_us);
                    seen.push((remaining, reset_secs));
                }
                Decision::Limited { .. } => panic!("within quota"),
            }
        }
        assert_eq!(seen, vec![(4, 2), (3, 4), (2, 6), (1, 8), (0, 10)]);
        assert_eq!(
            p.check(tat, now),
            Decision::Limited {
                retry_after_secs: 2
            }
        );
        // One emission interval later exactly one more request fits.
        assert!(matches!(
            p.check(tat, now + 2 * MICROS),
            Decision::Allowed { remaining: 0, .. }
        ));
        assert_eq!(
            p.check(tat, now + 2 * MICROS - 1),
            Decision::Limited {
                retry_after_secs: 1
            }
        );
    }

    #[test]
    fn the_rate_is_sustained_not_exceeded_over_time() {
        let p = policy(5, 10);
        let mut tat = None;
        let mut admitted = 0;
        // 100 requests per second for 60 seconds: expect the burst plus one per 2 s.
        for step in 0..6_000 {
            admitted += burst(&p, &mut tat, i64::from(step) * 10_000, 1);
        }
        assert_eq!(admitted, 5 + 29);
    }

    #[test]
    fn an_old_tat_does_not_bank_credit() {
        let p = policy(2, 10);
        let mut tat = Some(0);
        assert_eq!(burst(&p, &mut tat, 1_000 * MICROS, 10), 2);
    }

    #[test]
    fn policies_are_validated() {
        assert_eq!(Policy::new("purchase", 0, 10), Err(PolicyError::Quota));
        assert_eq!(Policy::new("purchase", 5, 0), Err(PolicyError::Window));
        assert_eq!(Policy::new("purchase", 5, 86_401), Err(PolicyError::Window));
        assert_eq!(Policy::new("purchase", 10_000, 1), Err(PolicyError::Window));
        assert_eq!(Policy::new("", 5, 10), Err(PolicyError::Name));
        assert_eq!(Policy::new("a\"b", 5, 10), Err(PolicyError::Name));
    }

    #[test]
    fn extreme_tats_do_not_overflow() {
        let p = policy(5, 10);
        assert!(matches!(
            p.check(Some(i64::MAX), 0),
            Decision::Limited { .. }
        ));
        assert!(matches!(
            p.check(Some(i64::MIN), 0),
            Decision::Allowed { .. }
        ));
    }
}
