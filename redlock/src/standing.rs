//! Whether each node can vote, and since when a quorum cannot — free of I/O. This is what lets an
//! acquire refuse at once ([`RedlockError::QuorumLost`](crate::RedlockError::QuorumLost)) when the
//! lock already knows that too few nodes can vote, instead of every caller finding it out again
//! by waiting for timeouts until its deadline.
//!
//! A node **can vote** when its circuit breaker ([`crate::breaker`]) is closed and it is not in
//! its restart recovery window (it answered "recovering for N ms" to an acquire or a health
//! probe, and those N ms have not passed). A node that cannot vote is **out**, and its
//! [`Standing`] remembers since when: the moment it went from able to unable, kept while it
//! stays out (a dead node whose breaker a probe closes straight into its recovery window stays
//! out from its first failure on).
//!
//! [`quorum_lost_since`] turns the nodes' standings into "since when have fewer than a quorum
//! been able to vote": the moment the `N − quorum + 1`-th node still out went out. The lock
//! compares that with
//! [`RedlockConfig::quorum_loss_grace`](crate::RedlockConfig::quorum_loss_grace): shorter is a
//! blip that acquires ride out, longer is a known loss that acquires refuse at once.
//!
//! Going out only ever happens at an event (a failure opens the breaker, a node says it is
//! recovering), where [`Standing`] records the time; coming back can also happen by the clock
//! alone (a recovery window runs out), which needs no record.

use std::time::{Duration, Instant};

use rand::Rng;

use crate::breaker::{Breaker, BreakerConfig, Transition};

/// What a node's answer says about its ability to vote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// It answered; the reply says nothing about its recovery window (release, extend, fence
    /// raise).
    Answered,
    /// It voted (granted or refused an acquire) or its health probe said it can vote.
    Voting,
    /// It is in its restart recovery window for this much longer.
    Recovering(Duration),
}

/// One node's circuit breaker and recovery window, and since when it has been out.
#[derive(Debug, Clone)]
pub(crate) struct Standing {
    breaker: Breaker,
    /// End of the recovery window last reported by the node.
    recovering_until: Option<Instant>,
    /// When the node last went out; meaningful only while it is out.
    out_since: Option<Instant>,
}

impl Standing {
    pub(crate) fn new(config: BreakerConfig) -> Self {
        Self {
            breaker: Breaker::new(config),
            recovering_until: None,
            out_since: None,
        }
    }

    /// The node's circuit breaker (read-only: changes go through the methods below, which keep
    /// `out_since` right).
    pub(crate) fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// Whether the node can vote at `now`: breaker closed and no recovery window running.
    pub(crate) fn can_vote(&self, now: Instant) -> bool {
        self.breaker.is_closed() && self.recovering_until.is_none_or(|until| now >= until)
    }

    /// Since when the node has been unable to vote; `None` if it can vote at `now`.
    pub(crate) fn out_since(&self, now: Instant) -> Option<Instant> {
        if self.can_vote(now) {
            None
        } else {
            self.out_since
        }
    }

    /// The node answered a call (whatever it said about the lock).
    pub(crate) fn on_answer(&mut self, seen: Seen, now: Instant) -> Option<Transition> {
        self.change(now, |standing| {
            match seen {
                Seen::Answered => {}
                Seen::Voting => standing.recovering_until = None,
                Seen::Recovering(left) => standing.recovering_until = now.checked_add(left),
            }
            standing.breaker.on_success(now)
        })
    }

    /// A call that started at `call_started` failed (error or timeout) at `now`.
    pub(crate) fn on_failure(
        &mut self,
        call_started: Instant,
        now: Instant,
        rng: &mut impl Rng,
    ) -> Option<Transition> {
        self.change(now, |standing| {
            standing.breaker.on_failure(call_started, now, rng)
        })
    }

    /// See [`Breaker::start_probe`] (open and half-open are both out: nothing else changes).
    pub(crate) fn start_probe(&mut self, now: Instant) -> bool {
        self.breaker.start_probe(now)
    }

    /// The breaker's probe finished: `Some` with what the node said, `None` if it did not answer.
    pub(crate) fn probe_finished(
        &mut self,
        answer: Option<Seen>,
        now: Instant,
        rng: &mut impl Rng,
    ) -> Option<Transition> {
        self.change(now, |standing| {
            if let Some(seen) = answer {
                match seen {
                    Seen::Answered => {}
                    Seen::Voting => standing.recovering_until = None,
                    Seen::Recovering(left) => standing.recovering_until = now.checked_add(left),
                }
            }
            standing.breaker.probe_finished(answer.is_some(), now, rng)
        })
    }

    /// Applies `change` at `now` and records when the node went out, if it just did.
    fn change<T>(&mut self, now: Instant, change: impl FnOnce(&mut Self) -> T) -> T {
        let was_out = !self.can_vote(now);
        let result = change(self);
        if self.can_vote(now) {
            self.out_since = None;
        } else if !was_out || self.out_since.is_none() {
            self.out_since = Some(now);
        }
        result
    }
}

/// Since when fewer than `quorum` of `nodes` nodes have been able to vote, given the `out_since`
/// of each node that is out (`None` for those that can vote); `None` while a quorum can vote.
pub(crate) fn quorum_lost_since(
    out_since: impl IntoIterator<Item = Option<Instant>>,
    nodes: usize,
    quorum: usize,
) -> Option<Instant> {
    // The loss began when the `nodes - quorum + 1`-th of the nodes still out went out.
    let needed_out = nodes.checked_sub(quorum)?.checked_add(1)?;
    let mut out: Vec<Instant> = out_since.into_iter().flatten().collect();
    if out.len() < needed_out {
        return None;
    }
    out.sort_unstable();
    out.get(needed_out - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const MS: Duration = Duration::from_millis(1);

    fn standing() -> Standing {
        Standing::new(BreakerConfig {
            failure_threshold: 2,
            base_backoff: 100 * MS,
            max_backoff: 1000 * MS,
        })
    }

    /// Two sequential failed calls from `t`: the breaker opens at `t + 3 ms`.
    fn kill(s: &mut Standing, t: Instant, rng: &mut StdRng) -> Instant {
        let _ = s.on_failure(t, t + MS, rng);
        let opened = t + 3 * MS;
        let moved = s.on_failure(t + 2 * MS, opened, rng);
        assert!(
            matches!(moved, Some(Transition::Opened { .. })),
            "{moved:?}"
        );
        opened
    }

    #[test]
    fn a_node_is_out_from_its_breaker_opening_until_it_answers() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut s = standing();
        let t0 = Instant::now();
        assert!(s.can_vote(t0));
        assert_eq!(s.out_since(t0), None);
        let _ = s.on_failure(t0, t0 + MS, &mut rng);
        assert!(s.can_vote(t0 + MS), "one failure is not out yet");
        let _ = s.on_answer(Seen::Answered, t0 + 2 * MS);
        let opened = kill(&mut s, t0 + 3 * MS, &mut rng);
        assert_eq!(s.out_since(opened + 500 * MS), Some(opened));
        let later = opened + 2000 * MS;
        let _ = s.on_answer(Seen::Voting, later);
        assert!(s.can_vote(later));
        assert_eq!(s.out_since(later), None);
    }

    #[test]
    fn a_probe_that_finds_the_node_recovering_keeps_it_out_from_its_first_failure() {
        let mut rng = StdRng::seed_from_u64(2);
        let mut s = standing();
        let opened = kill(&mut s, Instant::now(), &mut rng);
        let probe_at = opened + s.breaker().wait_for_probe(opened).expect("open");
        assert!(s.start_probe(probe_at));
        assert_eq!(s.out_since(probe_at), Some(opened), "half-open is out");
        let moved = s.probe_finished(Some(Seen::Recovering(2000 * MS)), probe_at, &mut rng);
        assert!(
            matches!(moved, Some(Transition::Closed { .. })),
            "{moved:?}"
        );
        assert!(s.breaker().is_closed());
        assert_eq!(
            s.out_since(probe_at + 1999 * MS),
            Some(opened),
            "recovering: still out, since the same moment"
        );
        // The window ends by the clock alone.
        assert!(s.can_vote(probe_at + 2000 * MS));
        // Out again later: a new episode, timed from its own start.
        let again = kill(&mut s, probe_at + 5000 * MS, &mut rng);
        assert_eq!(s.out_since(again), Some(again));
    }

    #[test]
    fn a_node_met_in_its_recovery_window_is_out_until_it_ends() {
        let mut s = standing();
        let t0 = Instant::now();
        let _ = s.on_answer(Seen::Recovering(300 * MS), t0);
        assert_eq!(s.out_since(t0 + 299 * MS), Some(t0));
        // Answers that say nothing about the window do not end it.
        let _ = s.on_answer(Seen::Answered, t0 + 100 * MS);
        assert_eq!(s.out_since(t0 + 200 * MS), Some(t0));
        assert!(s.can_vote(t0 + 300 * MS));
        // A vote ends it early (e.g. the window was shorter than we were told).
        let _ = s.on_answer(Seen::Recovering(300 * MS), t0 + 400 * MS);
        let _ = s.on_answer(Seen::Voting, t0 + 450 * MS);
        assert!(s.can_vote(t0 + 450 * MS));
    }

    #[test]
    fn a_failed_probe_keeps_the_node_out_since_its_first_failure() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut s = standing();
        let opened = kill(&mut s, Instant::now(), &mut rng);
        let probe_at = opened + s.breaker().wait_for_probe(opened).expect("open");
        assert!(s.start_probe(probe_at));
        let _ = s.probe_finished(None, probe_at, &mut rng);
        assert_eq!(s.out_since(probe_at), Some(opened));
    }

    #[test]
    fn the_quorum_is_lost_from_when_the_deciding_node_went_out() {
        let t0 = Instant::now();
        let at = |ms: u64| Some(t0 + Duration::from_millis(ms));
        // 3 nodes, quorum 2: lost once 2 are out, from when the second went out.
        assert_eq!(quorum_lost_since([None, None, None], 3, 2), None);
        assert_eq!(quorum_lost_since([at(5), None, None], 3, 2), None);
        assert_eq!(quorum_lost_since([at(50), None, at(5)], 3, 2), at(50));
        assert_eq!(quorum_lost_since([at(50), at(7), at(5)], 3, 2), at(7));
        // 5 nodes, quorum 3: lost once 3 are out.
        assert_eq!(
            quorum_lost_since([at(1), at(2), None, None, None], 5, 3),
            None
        );
        assert_eq!(
            quorum_lost_since([at(9), at(2), None, at(4), at(1)], 5, 3),
            at(4)
        );
        // One node, quorum 1.
        assert_eq!(quorum_lost_since([at(3)], 1, 1), at(3));
        assert_eq!(quorum_lost_since([None], 1, 1), None);
    }
}
