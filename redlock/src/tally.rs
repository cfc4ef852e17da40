//! Vote counting, free of I/O: when an operation on N nodes is decided (as soon as the outcome
//! is known, not when the last node answers), and why it failed.

/// How one node answered an acquire attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vote {
    /// Lock set with our token; the node's fence counter is now this value.
    Granted(u64),
    /// Another owner's lock is there.
    Held,
    /// The node is in its restart recovery window and does not vote.
    Recovering,
    /// Timeout, connection error or unexpected reply: the node may or may not have set our
    /// lock.
    Failed,
    /// Not asked (its circuit breaker is open): it cannot have set our lock.
    Skipped,
}

/// Why an acquire attempt did not get a quorum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Enough nodes could vote, but others' locks took the votes needed.
    Contended,
    /// Fewer than a quorum of nodes could vote at all.
    Unreachable { available: usize },
}

/// Votes of one acquire attempt, indexed by node.
#[derive(Debug)]
pub(crate) struct AcquireTally {
    quorum: usize,
    votes: Vec<Option<Vote>>,
}

impl AcquireTally {
    pub(crate) fn new(nodes: usize, quorum: usize) -> Self {
        Self {
            quorum,
            votes: vec![None; nodes],
        }
    }

    pub(crate) fn record(&mut self, node: usize, vote: Vote) {
        if let Some(slot) = self.votes.get_mut(node) {
            *slot = Some(vote);
        }
    }

    fn count(&self, pred: impl Fn(&Option<Vote>) -> bool) -> usize {
        self.votes.iter().filter(|v| pred(v)).count()
    }

    fn granted(&self) -> usize {
        self.count(|v| matches!(v, Some(Vote::Granted(_))))
    }

    fn pending(&self) -> usize {
        self.count(Option::is_none)
    }

    /// `Some(Ok)` once a quorum granted; `Some(Err)` once a quorum can no longer be reached
    /// *and* the reason is certain; `None` while open.
    ///
    /// The reason: [`Refusal::Contended`] if enough nodes were able to vote (granted or held)
    /// that, had nobody else held the lock, we would have won; [`Refusal::Unreachable`] if even
    /// then too few could vote. While pending nodes could tip it either way the attempt is lost
    /// but undecided: they are waited for (at most the per-node timeout, which the cleanup
    /// release after a failed attempt costs anyway).
    pub(crate) fn outcome(&self) -> Option<Result<(), Refusal>> {
        let granted = self.granted();
        let pending = self.pending();
        if granted >= self.quorum {
            return Some(Ok(()));
        }
        if granted + pending >= self.quorum {
            return None;
        }
        let available = granted + self.count(|v| matches!(v, Some(Vote::Held)));
        if available >= self.quorum {
            Some(Err(Refusal::Contended))
        } else if available + pending < self.quorum {
            Some(Err(Refusal::Unreachable { available }))
        } else {
            None
        }
    }

    /// The outcome once every node has answered (or been given up on).
    pub(crate) fn final_outcome(&self) -> Result<(), Refusal> {
        self.outcome().unwrap_or_else(|| {
            let available = self.count(|v| matches!(v, Some(Vote::Granted(_) | Vote::Held)));
            if available >= self.quorum {
                Err(Refusal::Contended)
            } else {
                Err(Refusal::Unreachable { available })
            }
        })
    }

    /// The quorum's fence (the highest counter among granting nodes) and how many granting
    /// nodes are already at it.
    pub(crate) fn fence(&self) -> (u64, usize) {
        let fences = self.votes.iter().filter_map(|v| match v {
            Some(Vote::Granted(fence)) => Some(*fence),
            _ => None,
        });
        let max = fences.clone().max().unwrap_or(0);
        (max, fences.filter(|f| *f == max).count())
    }

    /// Whether `node` granted with exactly `fence`.
    pub(crate) fn granted_with(&self, node: usize, fence: u64) -> bool {
        matches!(self.votes.get(node), Some(Some(Vote::Granted(f))) if *f == fence)
    }

    /// Whether `node` may hold our lock: it granted, failed (the command may have run), or has
    /// not answered yet. Only these need a release after a failed attempt.
    pub(crate) fn may_hold(&self, node: usize) -> bool {
        !matches!(
            self.votes.get(node),
            Some(Some(Vote::Held | Vote::Recovering | Vote::Skipped))
        )
    }

    /// Whether `node` granted (so it certainly holds our lock).
    pub(crate) fn granted_by(&self, node: usize) -> bool {
        matches!(self.votes.get(node), Some(Some(Vote::Granted(_))))
    }
}

/// One node's answer in a confirm-style round (fence write-back, extend, release, health).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The node did what was asked (or is healthy).
    Yes,
    /// The node answered but refused (token gone, recovering, …).
    No,
    /// No answer.
    Failed,
}

/// Counts answers until `needed` yeses are in, or cannot be anymore.
#[derive(Debug)]
pub(crate) struct Confirmations {
    needed: usize,
    pending: usize,
    yes: usize,
    no: usize,
}

impl Confirmations {
    pub(crate) fn new(asked: usize, needed: usize) -> Self {
        Self {
            needed,
            pending: asked,
            yes: 0,
            no: 0,
        }
    }

    pub(crate) fn record(&mut self, answer: Answer) {
        self.pending = self.pending.saturating_sub(1);
        match answer {
            Answer::Yes => self.yes += 1,
            Answer::No => self.no += 1,
            Answer::Failed => {}
        }
    }

    /// `Some(true)` once enough yeses, `Some(false)` once they cannot come, `None` while open.
    pub(crate) fn outcome(&self) -> Option<bool> {
        if self.yes >= self.needed {
            Some(true)
        } else if self.yes + self.pending < self.needed {
            Some(false)
        } else {
            None
        }
    }

    pub(crate) fn yes(&self) -> usize {
        self.yes
    }

    /// Nodes that answered, whatever they said.
    pub(crate) fn answered(&self) -> usize {
        self.yes + self.no
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(nodes: usize, votes: &[(usize, Vote)]) -> AcquireTally {
        let mut tally = AcquireTally::new(nodes, nodes / 2 + 1);
        for (node, vote) in votes {
            tally.record(*node, *vote);
        }
        tally
    }

    #[test]
    fn decides_as_soon_as_a_quorum_granted() {
        let t = tally(3, &[(0, Vote::Granted(5)), (2, Vote::Granted(5))]);
        assert_eq!(t.outcome(), Some(Ok(())), "node 1 need not be waited for");
        assert_eq!(t.fence(), (5, 2));
    }

    #[test]
    fn decides_as_soon_as_a_quorum_is_impossible() {
        let t = tally(5, &[(0, Vote::Held), (1, Vote::Held), (3, Vote::Held)]);
        assert_eq!(t.outcome(), Some(Err(Refusal::Contended)));
        let open = tally(
            5,
            &[(0, Vote::Held), (1, Vote::Held), (3, Vote::Granted(1))],
        );
        assert_eq!(open.outcome(), None, "two pending nodes could still grant");
    }

    #[test]
    fn tells_unreachable_from_contended() {
        // 2 of 3 down: unreachable even though nobody holds the lock.
        let down = tally(3, &[(0, Vote::Failed), (1, Vote::Failed)]);
        assert_eq!(
            down.outcome(),
            Some(Err(Refusal::Unreachable { available: 0 }))
        );
        // 1 of 3 down and one held: lost, but why depends on the third node.
        let mut held = tally(3, &[(0, Vote::Failed), (1, Vote::Held)]);
        assert_eq!(held.outcome(), None, "the third node decides the reason");
        assert_eq!(
            held.final_outcome(),
            Err(Refusal::Unreachable { available: 1 })
        );
        held.record(2, Vote::Granted(4));
        assert_eq!(
            held.outcome(),
            Some(Err(Refusal::Contended)),
            "the holder is why"
        );
        let mut dead = tally(3, &[(0, Vote::Failed), (1, Vote::Held)]);
        dead.record(2, Vote::Failed);
        assert_eq!(
            dead.outcome(),
            Some(Err(Refusal::Unreachable { available: 1 }))
        );
        // Recovering nodes cannot vote either.
        let recovering = tally(
            3,
            &[
                (0, Vote::Recovering),
                (1, Vote::Recovering),
                (2, Vote::Held),
            ],
        );
        assert_eq!(
            recovering.outcome(),
            Some(Err(Refusal::Unreachable { available: 1 }))
        );
    }

    #[test]
    fn single_node() {
        assert_eq!(tally(1, &[(0, Vote::Granted(9))]).outcome(), Some(Ok(())));
        assert_eq!(
            tally(1, &[(0, Vote::Held)]).outcome(),
            Some(Err(Refusal::Contended))
        );
        assert_eq!(
            tally(1, &[(0, Vote::Failed)]).outcome(),
            Some(Err(Refusal::Unreachable { available: 0 }))
        );
    }

    #[test]
    fn fence_is_the_max_over_granting_nodes() {
        let t = tally(
            5,
            &[
                (0, Vote::Granted(3)),
                (1, Vote::Granted(8)),
                (2, Vote::Granted(8)),
                (3, Vote::Held),
            ],
        );
        assert_eq!(t.fence(), (8, 2));
        assert!(t.granted_with(1, 8) && !t.granted_with(0, 8) && !t.granted_with(3, 8));
    }

    #[test]
    fn release_targets_every_node_that_may_hold_the_lock() {
        let t = tally(
            6,
            &[
                (0, Vote::Granted(1)),
                (1, Vote::Held),
                (2, Vote::Failed),
                (3, Vote::Recovering),
                (4, Vote::Skipped),
            ],
        );
        let targets: Vec<usize> = (0..6).filter(|n| t.may_hold(*n)).collect();
        assert_eq!(targets, vec![0, 2, 5], "granted, failed and unanswered");
        assert!(t.granted_by(0) && !t.granted_by(2) && !t.granted_by(5));
    }

    #[test]
    fn skipped_nodes_cannot_vote() {
        let t = tally(
            3,
            &[(0, Vote::Skipped), (1, Vote::Skipped), (2, Vote::Held)],
        );
        assert_eq!(
            t.outcome(),
            Some(Err(Refusal::Unreachable { available: 1 }))
        );
    }

    #[test]
    fn confirmations() {
        let mut c = Confirmations::new(3, 2);
        c.record(Answer::Yes);
        assert_eq!(c.outcome(), None);
        c.record(Answer::No);
        assert_eq!(c.outcome(), None);
        c.record(Answer::Yes);
        assert_eq!(c.outcome(), Some(true));

        let mut lost = Confirmations::new(3, 2);
        lost.record(Answer::No);
        lost.record(Answer::Failed);
        assert_eq!(
            lost.outcome(),
            Some(false),
            "one pending yes cannot make two"
        );
        assert_eq!(lost.answered(), 1);

        assert_eq!(Confirmations::new(0, 0).outcome(), Some(true));
    }
}
