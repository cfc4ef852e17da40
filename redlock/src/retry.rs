//! How an acquire waits between attempts: the caller's [`RetryPolicy`], one [`Pause`] per kind
//! of failure. The lock owns the one retry loop ([`Redlock::acquire`](crate::Redlock::acquire));
//! callers choose how it waits, they do not write a second loop around it.

use std::time::Duration;

use rand::Rng;

use crate::error::ConfigError;

/// The longest pause a policy may ask for.
const MAX_PAUSE: Duration = Duration::from_secs(24 * 60 * 60);

/// What to do after a failed attempt of one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pause {
    /// Do not retry: the attempt's error is the answer.
    Stop,
    /// Pause for a time drawn uniformly from `min..=max` each time: polling, e.g. a lock that
    /// another process hands over every few milliseconds.
    Uniform {
        /// Shortest pause; non-zero.
        min: Duration,
        /// Longest pause; at least `min`.
        max: Duration,
    },
    /// "Decorrelated jitter": each pause drawn from `base..=3 × previous pause`, capped at
    /// `cap`. Spreads contenders out better than exponential back-off and never synchronises
    /// them. Raise `cap` with the number of processes contending for one key: contenders that
    /// retry too often split the votes among themselves.
    DecorrelatedJitter {
        /// Shortest (and first) pause; non-zero.
        base: Duration,
        /// Longest pause; at least `base`.
        cap: Duration,
    },
}

/// How [`Redlock::acquire`](crate::Redlock::acquire) waits between attempts, by why the last
/// attempt failed. Retrying always stops at the call's deadline (a next attempt must be able to
/// start before it), and at once on a known quorum loss
/// ([`RedlockError::QuorumLost`](crate::RedlockError::QuorumLost)): retrying cannot help then.
///
/// ```
/// use std::time::Duration;
/// use redlock::{Pause, RetryPolicy};
///
/// // Poll a contended lock every 1..=4 ms; ride out a node that is slow for a moment.
/// const POLICY: RetryPolicy = RetryPolicy {
///     contended: Pause::Uniform { min: Duration::from_millis(1), max: Duration::from_millis(4) },
///     unavailable: Pause::Uniform { min: Duration::from_millis(5), max: Duration::from_millis(20) },
/// };
/// assert!(POLICY.validate().is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// After [`RedlockError::Contended`](crate::RedlockError::Contended): another holder has the
    /// lock.
    pub contended: Pause,
    /// After [`RedlockError::Unreachable`](crate::RedlockError::Unreachable) (too few nodes
    /// could vote: a blip if it passes) or
    /// [`RedlockError::ValidityTooShort`](crate::RedlockError::ValidityTooShort).
    pub unavailable: Pause,
}

impl RetryPolicy {
    /// One attempt, no retry.
    pub const ONCE: Self = Self {
        contended: Pause::Stop,
        unavailable: Pause::Stop,
    };

    /// The same decorrelated jitter after every retryable failure (the Redlock spec's "retry
    /// after a random delay").
    pub const fn jittered(base: Duration, cap: Duration) -> Self {
        let pause = Pause::DecorrelatedJitter { base, cap };
        Self {
            contended: pause,
            unavailable: pause,
        }
    }

    /// Checks both pauses; [`Redlock::acquire`](crate::Redlock::acquire) calls this.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check(self.contended, "retry_policy.contended")?;
        check(self.unavailable, "retry_policy.unavailable")
    }
}

fn check(pause: Pause, field: &'static str) -> Result<(), ConfigError> {
    let (low, high) = match pause {
        Pause::Stop => return Ok(()),
        Pause::Uniform { min, max } => (min, max),
        Pause::DecorrelatedJitter { base, cap } => (base, cap),
    };
    if low.is_zero() || low > high || high > MAX_PAUSE {
        return Err(ConfigError::InvalidSetting {
            field,
            reason: "pauses must be non-zero, ordered and at most 24 h",
        });
    }
    Ok(())
}

/// The pauses of one `acquire` call.
#[derive(Debug, Clone)]
pub(crate) struct Waits {
    contended: Waiting,
    unavailable: Waiting,
}

/// Which pause applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    Contended,
    Unavailable,
}

#[derive(Debug, Clone)]
struct Waiting {
    pause: Pause,
    /// The previous pause (decorrelated jitter grows from it).
    previous: Option<Duration>,
}

impl Waits {
    /// `policy` must have passed [`RetryPolicy::validate`].
    pub(crate) fn new(policy: &RetryPolicy) -> Self {
        let waiting = |pause| Waiting {
            pause,
            previous: None,
        };
        Self {
            contended: waiting(policy.contended),
            unavailable: waiting(policy.unavailable),
        }
    }

    /// The pause before the next attempt after `failure`, or `None` to stop.
    pub(crate) fn next_delay(&mut self, failure: Failure, rng: &mut impl Rng) -> Option<Duration> {
        let waiting = match failure {
            Failure::Contended => &mut self.contended,
            Failure::Unavailable => &mut self.unavailable,
        };
        let delay = match waiting.pause {
            Pause::Stop => return None,
            Pause::Uniform { min, max } => between(min, max, rng),
            Pause::DecorrelatedJitter { base, cap } => {
                let previous = waiting.previous.unwrap_or(base);
                between(base, previous.saturating_mul(3).min(cap).max(base), rng)
            }
        };
        waiting.previous = Some(delay);
        Some(delay)
    }
}

fn between(low: Duration, high: Duration, rng: &mut impl Rng) -> Duration {
    let (low, high) = (nanos(low), nanos(high).max(nanos(low)));
    Duration::from_nanos(rng.random_range(low..=high))
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn jitter(base: Duration, cap: Duration) -> Waits {
        Waits::new(&RetryPolicy::jittered(base, cap))
    }

    #[test]
    fn pauses_stay_within_base_and_cap_and_vary() {
        let (base, cap) = (Duration::from_millis(5), Duration::from_millis(100));
        let mut waits = jitter(base, cap);
        let mut rng = StdRng::seed_from_u64(7);
        let delays: Vec<Duration> = (0..1000)
            .filter_map(|_| waits.next_delay(Failure::Contended, &mut rng))
            .collect();
        assert_eq!(delays.len(), 1000);
        assert!(delays.iter().all(|d| (base..=cap).contains(d)));
        assert!(
            delays.iter().any(|d| *d > Duration::from_millis(50)),
            "grows towards the cap"
        );
        let distinct: std::collections::HashSet<_> = delays.iter().collect();
        assert!(distinct.len() > 900, "jittered, not a fixed sequence");
    }

    #[test]
    fn each_pause_is_at_most_three_times_the_previous() {
        let mut waits = jitter(Duration::from_millis(1), Duration::from_secs(10));
        let mut rng = StdRng::seed_from_u64(1);
        let mut previous = Duration::from_millis(1);
        for _ in 0..200 {
            let delay = waits
                .next_delay(Failure::Unavailable, &mut rng)
                .expect("jitter never stops");
            assert!(delay <= previous * 3);
            previous = delay;
        }
    }

    #[test]
    fn base_equal_to_cap_is_constant() {
        let d = Duration::from_millis(20);
        let mut waits = jitter(d, d);
        let mut rng = StdRng::seed_from_u64(3);
        assert!((0..10).all(|_| waits.next_delay(Failure::Contended, &mut rng) == Some(d)));
    }

    #[test]
    fn each_failure_has_its_own_pause() {
        let policy = RetryPolicy {
            contended: Pause::Uniform {
                min: Duration::from_millis(1),
                max: Duration::from_millis(4),
            },
            unavailable: Pause::Stop,
        };
        assert!(policy.validate().is_ok());
        let mut waits = Waits::new(&policy);
        let mut rng = StdRng::seed_from_u64(5);
        for _ in 0..100 {
            let delay = waits.next_delay(Failure::Contended, &mut rng);
            assert!(delay.is_some_and(|d| (1..=4).contains(&d.as_millis())));
        }
        assert_eq!(waits.next_delay(Failure::Unavailable, &mut rng), None);
        let mut once = Waits::new(&RetryPolicy::ONCE);
        assert_eq!(once.next_delay(Failure::Contended, &mut rng), None);
    }

    #[test]
    fn rejects_nonsense_pauses() {
        let zero = Duration::ZERO;
        let ms = Duration::from_millis(1);
        for pause in [
            Pause::Uniform { min: zero, max: ms },
            Pause::Uniform {
                min: ms * 2,
                max: ms,
            },
            Pause::DecorrelatedJitter {
                base: ms,
                cap: Duration::from_secs(25 * 3600),
            },
        ] {
            let policy = RetryPolicy {
                contended: Pause::Stop,
                unavailable: pause,
            };
            assert!(policy.validate().is_err(), "{pause:?} should be rejected");
        }
    }
}
