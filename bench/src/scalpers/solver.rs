//! Solving the edge's challenges: a solver queue on ONE dedicated OS thread (the farm's single
//! core; the honest shoppers' native solves use a queue of their own), whose CPU time is read
//! from the thread itself, and the pacing that makes an honest shopper's solve take as long as
//! its browser would.
//!
//! The solver is the edge's own (`edge::proof::altcha::solve`: candidates 0, 1, 2… in order, as
//! the ALTCHA widget tries them), so `number + 1` candidates were hashed for a solution of
//! `number`. The thread's CPU time is `/proc/thread-self/schedstat`'s time on the CPU
//! (nanoseconds; the kernel's own accounting, no `unsafe` needed), read when the thread starts and
//! when its queue closes: everything the thread did — solving, and the little else it does — is
//! counted, the time it waited for work is not.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use edge::proof::{Challenge, Solution, altcha};
use tokio::sync::oneshot;

/// A solved challenge.
#[derive(Debug, Clone)]
pub(super) struct Solved {
    pub(super) solution: Solution,
    /// Candidates hashed (`number + 1`).
    pub(super) candidates: u64,
}

/// What a solver thread did, read when its queue closed.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct SolverStats {
    /// CPU time of the thread.
    pub(super) cpu: Duration,
    /// Wall time spent solving.
    pub(super) busy: Duration,
    pub(super) solved: u64,
    /// Jobs dropped unsolved because their requester gave up before their turn.
    pub(super) skipped: u64,
    pub(super) candidates: u64,
}

struct Job {
    challenge: Challenge,
    /// Set when the requester no longer needs the solution (checked when the job's turn comes).
    cancelled: Option<Arc<AtomicBool>>,
    reply: oneshot::Sender<Option<Solved>>,
}

/// A solver queue served by one OS thread.
#[derive(Debug)]
pub(super) struct Solver {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<anyhow::Result<SolverStats>>>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("maxnumber", &self.challenge.maxnumber)
            .finish_non_exhaustive()
    }
}

impl Solver {
    /// Starts the thread `name`.
    pub(super) fn spawn(name: &str) -> anyhow::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || serve(&rx))
            .with_context(|| format!("starting the solver thread {name}"))?;
        Ok(Self {
            jobs: Some(tx),
            thread: Some(thread),
        })
    }

    /// Queues `challenge`; the solution when its turn came and it was solved, `None` when it was
    /// cancelled first (or has no solution within its `maxnumber`).
    pub(super) async fn solve(
        &self,
        challenge: Challenge,
        cancelled: Option<Arc<AtomicBool>>,
    ) -> Option<Solved> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            challenge,
            cancelled,
            reply,
        };
        self.jobs.as_ref()?.send(job).ok()?;
        answer.await.ok().flatten()
    }

    /// Closes the queue (after the jobs already queued) and returns what the thread did.
    pub(super) fn finish(mut self) -> anyhow::Result<SolverStats> {
        drop(self.jobs.take());
        let thread = self
            .thread
            .take()
            .context("the solver was finished twice")?;
        thread
            .join()
            .map_err(|_| anyhow::anyhow!("the solver thread panicked"))?
    }
}

fn serve(jobs: &mpsc::Receiver<Job>) -> anyhow::Result<SolverStats> {
    let cpu_at_start = thread_cpu()?;
    let mut stats = SolverStats::default();
    while let Ok(job) = jobs.recv() {
        if job
            .cancelled
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
        {
            stats.skipped += 1;
            let _ = job.reply.send(None);
            continue;
        }
        let t0 = Instant::now();
        let solved = altcha::solve(&job.challenge).map(|solution| Solved {
            candidates: solution.number.saturating_add(1),
            solution,
        });
        stats.busy += t0.elapsed();
        if let Some(s) = &solved {
            stats.solved += 1;
            stats.candidates += s.candidates;
        }
        let _ = job.reply.send(solved);
    }
    stats.cpu = thread_cpu()?.saturating_sub(cpu_at_start);
    Ok(stats)
}

/// CPU time of the calling thread: the first field of `/proc/thread-self/schedstat` (ns).
pub(super) fn thread_cpu() -> anyhow::Result<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat")
        .context("reading /proc/thread-self/schedstat (Linux only)")?;
    let ns: u64 = text
        .split_whitespace()
        .next()
        .context("empty /proc/thread-self/schedstat")?
        .parse()
        .context("parsing /proc/thread-self/schedstat")?;
    Ok(Duration::from_nanos(ns))
}

/// How long a browser solving `hashes_per_sec` candidates per second takes for `candidates`.
pub(super) fn paced(candidates: u64, hashes_per_sec: f64) -> Duration {
    if !(hashes_per_sec.is_finite() && hashes_per_sec > 0.0) {
        return Duration::ZERO;
    }
    Duration::from_secs_f64(candidates as f64 / hashes_per_sec)
}

/// A solution of `challenge` made with the edge's proof-of-work key instead of by search
/// (`--honest-solver minted`): the same binding (key id, purpose, SKU, shopper, expiry) under a
/// fresh random salt prefix, a secret number drawn as the edge draws it (uniform in
/// 1..=`maxnumber`), hashed and signed as the edge signs. The edge verifies and spends it exactly
/// as a searched one; only the search — the browser's work, paced by [`paced`] — is skipped on
/// this machine, whose two cores the stack needs.
pub(super) fn mint(challenge: &Challenge, pow_secret: &[u8]) -> Option<Solved> {
    use rand::Rng;
    let binding = edge::proof::salt::Binding::parse(&challenge.salt)?;
    let mut rng = rand::rng();
    let prefix: [u8; 12] = rng.random();
    let number = rng.random_range(1..=challenge.maxnumber.max(1));
    let salt = binding.salt(&hex_lower(&prefix));
    let made = altcha::make(pow_secret, salt, number, challenge.maxnumber);
    Some(Solved {
        candidates: number.saturating_add(1),
        solution: Solution {
            algorithm: made.algorithm,
            challenge: made.challenge,
            number,
            salt: made.salt,
            signature: made.signature,
        },
    })
}

fn hex_lower(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn challenge(number: u64, maxnumber: u64) -> Challenge {
        altcha::make(
            b"k",
            "0123456789abcdef01234567?kid=p1&purpose=purchase&sku=S&user=u&expires=1800000000&"
                .into(),
            number,
            maxnumber,
        )
    }

    #[test]
    fn pacing_is_candidates_over_the_rate() {
        assert_eq!(paced(100_000, 100_000.0), Duration::from_secs(1));
        assert_eq!(paced(50_000, 200_000.0), Duration::from_millis(250));
        assert_eq!(paced(1, 0.0), Duration::ZERO);
        assert_eq!(paced(1, f64::NAN), Duration::ZERO);
    }

    #[tokio::test]
    async fn the_queue_solves_in_order_skips_the_cancelled_and_counts_its_cpu() {
        let solver = Solver::spawn("test-solver").expect("spawn");
        let solved = solver.solve(challenge(40_000, 65_536), None).await;
        let solved = solved.expect("solved");
        assert_eq!(solved.solution.number, 40_000);
        assert_eq!(solved.candidates, 40_001);
        let cancel = Arc::new(AtomicBool::new(true));
        assert!(solver.solve(challenge(7, 8), Some(cancel)).await.is_none());
        let stats = solver.finish().expect("stats");
        assert_eq!((stats.solved, stats.skipped), (1, 1));
        assert_eq!(stats.candidates, 40_001);
        assert!(stats.cpu > Duration::ZERO && stats.cpu <= stats.busy + Duration::from_millis(50));
    }

    #[test]
    fn a_minted_solution_verifies_as_the_edge_checks_it_and_keeps_the_binding() {
        let c = challenge(3, 1 << 12);
        let s = mint(&c, b"k").expect("minted");
        assert!((1..=1 << 12).contains(&s.solution.number));
        assert_eq!(s.candidates, s.solution.number + 1);
        assert_eq!(
            altcha::challenge_hex(&s.solution.salt, s.solution.number),
            s.solution.challenge
        );
        assert!(altcha::signature_verifies(
            b"k",
            &s.solution.challenge,
            &s.solution.signature
        ));
        assert_ne!(s.solution.salt, c.salt, "a fresh salt");
        assert_eq!(
            s.solution.salt.split_once('?').map(|p| p.1),
            c.salt.split_once('?').map(|p| p.1),
            "the same binding"
        );
    }
}
