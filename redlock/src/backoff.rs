//! Pauses between acquire attempts: "decorrelated jitter" (each pause drawn uniformly from
//! `base..=3 × previous`, capped), which spreads contenders out better than exponential backoff
//! and never synchronises them.

use std::time::Duration;

use rand::Rng;

/// Decorrelated-jitter pause generator for one `acquire` call.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    base: Duration,
    cap: Duration,
    previous: Duration,
}

impl Backoff {
    /// `base` must not exceed `cap` (checked by the config's validation).
    pub(crate) fn new(base: Duration, cap: Duration) -> Self {
        Self {
            base,
            cap,
            previous: base,
        }
    }

    /// The next pause, using `rng`.
    pub(crate) fn next_delay(&mut self, rng: &mut impl Rng) -> Duration {
        let low = nanos(self.base);
        let high = nanos(self.previous.saturating_mul(3).min(self.cap)).max(low);
        let delay = Duration::from_nanos(rng.random_range(low..=high));
        self.previous = delay;
        delay
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn pauses_stay_within_base_and_cap_and_vary() {
        let (base, cap) = (Duration::from_millis(5), Duration::from_millis(100));
        let mut backoff = Backoff::new(base, cap);
        let mut rng = StdRng::seed_from_u64(7);
        let delays: Vec<Duration> = (0..1000).map(|_| backoff.next_delay(&mut rng)).collect();
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
        let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_secs(10));
        let mut rng = StdRng::seed_from_u64(1);
        let mut previous = Duration::from_millis(1);
        for _ in 0..200 {
            let delay = backoff.next_delay(&mut rng);
            assert!(delay <= previous * 3);
            previous = delay;
        }
    }

    #[test]
    fn base_equal_to_cap_is_constant() {
        let d = Duration::from_millis(20);
        let mut backoff = Backoff::new(d, d);
        let mut rng = StdRng::seed_from_u64(3);
        assert!((0..10).all(|_| backoff.next_delay(&mut rng) == d));
    }
}
