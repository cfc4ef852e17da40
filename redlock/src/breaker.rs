//! Per-node circuit breaker, free of I/O: when a node that keeps failing is taken out of
//! operations, for how long, and when it is let back in.
//!
//! * **Closed** (normal): every operation contacts the node. A failure (error or timeout — not a
//!   refusal such as "held by another owner", which is an answer) that is *consecutive*, i.e.
//!   from a call that started after the previous counted failure, adds to a streak; any answer
//!   resets it. Concurrent calls cut short by one stall therefore count once, so
//!   [`BreakerConfig::failure_threshold`] failures mean the node failed that many times in a
//!   row, not that many callers noticed one hiccup.
//! * **Open**: the streak reached the threshold. Operations skip the node (a vote not asked for
//!   is a "no", which is always safe) for a back-off period: exponential (`base × 2^level`,
//!   capped at [`BreakerConfig::max_backoff`]) with jitter (uniform in its upper half), so the
//!   processes sharing a dead node do not probe it in lockstep. The level rises with every
//!   failed probe, and with every re-opening that follows a close by less than `max_backoff` (a
//!   flapping node), and starts over otherwise.
//! * **Half-open**: the back-off is over; exactly one background probe is in flight and
//!   operations still skip the node. Its answer closes the breaker; its failure re-opens it
//!   with a longer back-off.
//!
//! Any answer from the node, probe or not, closes the breaker: the node is demonstrably back.

use std::time::{Duration, Instant};

use rand::Rng;

/// Settings of every node's breaker (validated as part of
/// [`RedlockConfig`](crate::RedlockConfig)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BreakerConfig {
    /// Consecutive failures that open the breaker (at least 1).
    pub(crate) failure_threshold: u32,
    /// First back-off.
    pub(crate) base_backoff: Duration,
    /// Longest back-off (at least `base_backoff`).
    pub(crate) max_backoff: Duration,
}

/// Where a breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Normal operation; `failures` consecutive failures so far.
    Closed { failures: u32 },
    /// Skipped until `until`; then one probe decides.
    Open { until: Instant },
    /// The probe is in flight; still skipped.
    HalfOpen,
}

/// A change worth a log line and a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transition {
    /// Closed → open after `failures` consecutive failures; skipped for `backoff`.
    Opened { failures: u32, backoff: Duration },
    /// Half-open → open: the probe failed; skipped for `backoff` more.
    Reopened { backoff: Duration },
    /// Open or half-open → closed, after being out for `out_for`.
    Closed { out_for: Duration },
}

/// One node's breaker. Every method takes the current time, so tests drive it without sleeping.
#[derive(Debug, Clone)]
pub(crate) struct Breaker {
    config: BreakerConfig,
    state: State,
    /// Exponent of the next back-off.
    level: u32,
    /// When the last counted failure was recorded: a failure of a call that started before it
    /// overlapped that failure (the same stall, seen by a concurrent caller) and is not counted.
    last_failure_at: Option<Instant>,
    /// When the breaker last opened (for `out_for`).
    opened_at: Option<Instant>,
    /// When the breaker last closed (a quick re-open escalates the back-off).
    closed_at: Option<Instant>,
    /// Bumped on every close → open transition; a probe task serves one episode.
    episode: u64,
}

/// Highest back-off exponent ever used (2^16 × base is far beyond any sensible cap).
const MAX_LEVEL: u32 = 16;

impl Breaker {
    pub(crate) fn new(config: BreakerConfig) -> Self {
        Self {
            config,
            state: State::Closed { failures: 0 },
            level: 0,
            last_failure_at: None,
            opened_at: None,
            closed_at: None,
            episode: 0,
        }
    }

    #[cfg(test)]
    pub(crate) fn state(&self) -> State {
        self.state
    }

    /// Whether operations contact the node.
    pub(crate) fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed { .. })
    }

    /// The current open episode (changes each time the breaker opens from closed).
    pub(crate) fn episode(&self) -> u64 {
        self.episode
    }

    /// The node answered (whatever it said).
    pub(crate) fn on_success(&mut self, now: Instant) -> Option<Transition> {
        self.last_failure_at = None;
        match self.state {
            State::Closed { .. } => {
                self.state = State::Closed { failures: 0 };
                None
            }
            State::Open { .. } | State::HalfOpen => Some(self.close(now)),
        }
    }

    /// A call that started at `call_started` failed (error or timeout) at `now`.
    pub(crate) fn on_failure(
        &mut self,
        call_started: Instant,
        now: Instant,
        rng: &mut impl Rng,
    ) -> Option<Transition> {
        let State::Closed { failures } = self.state else {
            // Already out; only the probe decides from here.
            return None;
        };
        if self.last_failure_at.is_some_and(|last| call_started < last) {
            return None;
        }
        self.last_failure_at = Some(now);
        let failures = failures.saturating_add(1);
        if failures < self.config.failure_threshold {
            self.state = State::Closed { failures };
            return None;
        }
        let flapping = self
            .closed_at
            .is_some_and(|closed| now.saturating_duration_since(closed) < self.config.max_backoff);
        self.level = if flapping {
            self.level.saturating_add(1).min(MAX_LEVEL)
        } else {
            0
        };
        self.episode = self.episode.wrapping_add(1);
        self.opened_at = Some(now);
        let backoff = self.open(now, rng);
        Some(Transition::Opened { failures, backoff })
    }

    /// Time left before a probe is due (zero if due now); `None` unless open.
    pub(crate) fn wait_for_probe(&self, now: Instant) -> Option<Duration> {
        match self.state {
            State::Open { until } => Some(until.saturating_duration_since(now)),
            _ => None,
        }
    }

    /// Moves an open breaker whose back-off is over to half-open; returns whether the caller
    /// now owns the (single) probe.
    pub(crate) fn start_probe(&mut self, now: Instant) -> bool {
        match self.state {
            State::Open { until } if now >= until => {
                self.state = State::HalfOpen;
                true
            }
            _ => false,
        }
    }

    /// The probe's result. A failed probe re-opens with the next back-off; a successful one
    /// closes (unless something else closed the breaker meanwhile).
    pub(crate) fn probe_finished(
        &mut self,
        healthy: bool,
        now: Instant,
        rng: &mut impl Rng,
    ) -> Option<Transition> {
        if self.state != State::HalfOpen {
            return None;
        }
        if healthy {
            return Some(self.close(now));
        }
        self.level = self.level.saturating_add(1).min(MAX_LEVEL);
        let backoff = self.open(now, rng);
        Some(Transition::Reopened { backoff })
    }

    fn open(&mut self, now: Instant, rng: &mut impl Rng) -> Duration {
        let backoff = self.backoff(rng);
        // A back-off is at most `max_backoff` (validated ≤ 24 h): this cannot overflow in
        // practice; if it did, the probe would simply be due at once.
        self.state = State::Open {
            until: now.checked_add(backoff).unwrap_or(now),
        };
        backoff
    }

    fn close(&mut self, now: Instant) -> Transition {
        self.state = State::Closed { failures: 0 };
        self.closed_at = Some(now);
        let out_for = self
            .opened_at
            .map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        Transition::Closed { out_for }
    }

    /// `min(max, base × 2^level)`, jittered uniformly over its upper half.
    fn backoff(&self, rng: &mut impl Rng) -> Duration {
        let ceiling = self
            .config
            .base_backoff
            .saturating_mul(1_u32 << self.level.min(MAX_LEVEL))
            .min(self.config.max_backoff);
        let high = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rng.random_range(high / 2..=high))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const MS: Duration = Duration::from_millis(1);

    fn breaker() -> Breaker {
        Breaker::new(BreakerConfig {
            failure_threshold: 3,
            base_backoff: 100 * MS,
            max_backoff: 1000 * MS,
        })
    }

    /// Fails `n` sequential calls of 1 ms each starting at `t`; returns the time after them and
    /// the last transition.
    fn fail(
        b: &mut Breaker,
        mut t: Instant,
        n: u32,
        rng: &mut StdRng,
    ) -> (Instant, Option<Transition>) {
        let mut last = None;
        for _ in 0..n {
            last = b.on_failure(t, t + MS, rng);
            t += 2 * MS;
        }
        (t, last)
    }

    #[test]
    fn opens_after_threshold_consecutive_failures_and_an_answer_resets_the_streak() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut b = breaker();
        let t0 = Instant::now();
        let (t, last) = fail(&mut b, t0, 2, &mut rng);
        assert_eq!(last, None);
        assert!(b.is_closed());
        assert_eq!(
            b.on_success(t),
            None,
            "an answer while closed is no transition"
        );
        let (t, last) = fail(&mut b, t, 2, &mut rng);
        assert_eq!(last, None, "the streak started over");
        let (_, last) = fail(&mut b, t, 1, &mut rng);
        let Some(Transition::Opened {
            failures: 3,
            backoff,
        }) = last
        else {
            panic!("expected to open, got {last:?}");
        };
        assert!((50 * MS..=100 * MS).contains(&backoff), "{backoff:?}");
        assert!(!b.is_closed());
    }

    #[test]
    fn concurrent_failures_of_one_stall_count_once() {
        let mut rng = StdRng::seed_from_u64(2);
        let mut b = breaker();
        let start = Instant::now();
        // Ten callers sent at `start`, all timing out together 40 ms later.
        for i in 0..10 {
            let _ = b.on_failure(start, start + 40 * MS + i * MS, &mut rng);
        }
        assert_eq!(b.state(), State::Closed { failures: 1 });
    }

    #[test]
    fn half_open_probe_closes_or_reopens_with_growing_capped_backoff() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut b = breaker();
        let (mut t, _) = fail(&mut b, Instant::now(), 3, &mut rng);
        let episode = b.episode();
        assert!(!b.start_probe(t), "no probe before the back-off is over");
        let mut ceilings = Vec::new();
        for _ in 0..6 {
            t += b.wait_for_probe(t).expect("open");
            assert!(b.start_probe(t));
            assert_eq!(b.state(), State::HalfOpen);
            assert!(!b.start_probe(t), "one probe at a time");
            assert_eq!(b.on_failure(t, t + MS, &mut rng), None, "skipped while out");
            match b.probe_finished(false, t, &mut rng) {
                Some(Transition::Reopened { backoff }) => ceilings.push(backoff),
                other => panic!("expected a reopen, got {other:?}"),
            }
        }
        // 200, 400, 800, then capped at 1000 (each jittered within its upper half).
        for (backoff, ceiling) in ceilings.iter().zip([200, 400, 800, 1000, 1000, 1000]) {
            assert!(
                (ceiling * MS / 2..=ceiling * MS).contains(backoff),
                "{backoff:?} not within the upper half of {ceiling} ms"
            );
        }
        t += b.wait_for_probe(t).expect("open");
        assert!(b.start_probe(t));
        let closed = b.probe_finished(true, t + 5 * MS, &mut rng);
        assert!(
            matches!(closed, Some(Transition::Closed { out_for }) if out_for > Duration::ZERO),
            "{closed:?}"
        );
        assert!(b.is_closed());
        assert_eq!(b.episode(), episode, "reopening is the same episode");
    }

    #[test]
    fn any_answer_closes_and_a_quick_reopen_escalates() {
        let mut rng = StdRng::seed_from_u64(4);
        let mut b = breaker();
        let (t, _) = fail(&mut b, Instant::now(), 3, &mut rng);
        assert!(matches!(b.on_success(t), Some(Transition::Closed { .. })));
        // Fails again right away: flapping, so the back-off starts one level up.
        let (t, last) = fail(&mut b, t, 3, &mut rng);
        let Some(Transition::Opened { backoff, .. }) = last else {
            panic!("{last:?}")
        };
        assert!((100 * MS..=200 * MS).contains(&backoff), "{backoff:?}");
        assert_eq!(b.episode(), 2);
        // Closed for longer than max_backoff: a later failure streak starts over at the base.
        let _ = b.on_success(t);
        let (_, last) = fail(&mut b, t + 2000 * MS, 3, &mut rng);
        let Some(Transition::Opened { backoff, .. }) = last else {
            panic!("{last:?}")
        };
        assert!((50 * MS..=100 * MS).contains(&backoff), "{backoff:?}");
    }

    #[test]
    fn a_late_probe_result_after_something_else_closed_it_is_ignored() {
        let mut rng = StdRng::seed_from_u64(5);
        let mut b = breaker();
        let (mut t, _) = fail(&mut b, Instant::now(), 3, &mut rng);
        t += b.wait_for_probe(t).expect("open");
        assert!(b.start_probe(t));
        assert!(matches!(b.on_success(t), Some(Transition::Closed { .. })));
        assert_eq!(b.probe_finished(false, t, &mut rng), None);
        assert!(b.is_closed());
    }

    #[test]
    fn threshold_one_opens_on_the_first_failure() {
        let mut rng = StdRng::seed_from_u64(6);
        let mut b = Breaker::new(BreakerConfig {
            failure_threshold: 1,
            base_backoff: MS,
            max_backoff: MS,
        });
        let t = Instant::now();
        assert!(matches!(
            b.on_failure(t, t, &mut rng),
            Some(Transition::Opened { failures: 1, .. })
        ));
    }
}
