//! One combiner per SKU per process: the single-flight, batching heart of the purchase path.
//!
//! Attempts for a SKU wait in a bounded queue. Exactly one task per SKU per process contends for
//! the SKU's Redlock, so lock contenders per SKU are bounded by the number of origin processes,
//! not the number of shoppers. The holder drains up to `batch_max` attempts — no more than it
//! takes to ask for the units the SKU can have left — and decides them, in
//! arrival order, in ONE transaction ([`crate::store::decide_batch`]), answers each waiter, and goes on
//! while attempts are queued — extending its lease when it runs low, and releasing it after
//! `lock_max_hold` (by default after every batch) when attempts are still queued, then pausing
//! briefly so other processes get their turn. The pause doubles as a batching window: under load
//! each turn decides one large batch. Before each batch it expires the SKU's holds that fell due
//! ([`super::due`]) under the same lease, so a hot sale's expiries need no turn of their own.
//!
//! Lease guard: each batch takes its deadline and fencing token from the held lease's terms
//! ([`SkuLease`](crate::lease::SkuLease), where the guard is written once): it starts only with
//! at least `commit_budget` of validity left, rolls back if the lease may have expired by commit
//! time, and a stale holder's batch commits nothing.
//!
//! Before contending, the combiner consults what the process knows of the SKU ([`knowledge`]):
//! sold out → attempts without a stored 201 are answered `sold_out` at once; no such SKU → the
//! batch is decided without the lease (`BatchMode::UnknownSkuOnly`: all `404 unknown_sku` or
//! replays; if the SKU was created meanwhile, nothing is decided and the lease is taken), so
//! attempts for made-up SKUs never create Redis keys.
//!
//! Traced ([`super::spans`]): each batch is a `batch` span with its `lease` and `commit`
//! spans, the child of one of its requests' spans and linked to the others.
//!
//! [`knowledge`]: super::knowledge

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shared::Sku;
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;
use uuid::Uuid;

use super::answer::{Answer, BatchRef, Refusal};
use super::context::{
    Context, MAX_CONFLICT_RETRIES, lock_refusal, log_lock_failure, store_refusal,
};
use super::knowledge::{Sale, SaleKnowledge};
use super::runtime::Deciders;
use super::spans::{self, BatchSpan};
use crate::decision::Attempt;
use crate::lease::HeldLease;
use crate::store::StoreError;

/// A combiner with no work for this long exits (and is re-created on demand). A combiner whose
/// SKU turned out not to exist exits as soon as its queue is empty, so a stream of distinct
/// unknown SKUs never keeps thousands of idle combiners (and their queues) alive: live combiners
/// are bounded by the SKUs on sale plus those being decided right now.
const IDLE_EXIT: Duration = Duration::from_secs(10);
/// After giving up the lock for fairness, wait this long before contending again: longer than
/// a waiting process's polling interval (`lease::POLL_MAX`), so the waiter gets its turn.
const FAIRNESS_PAUSE: Duration = Duration::from_millis(5);

/// What the combiner does next with its queue, given what the process knows of the SKU.
enum Next {
    /// Every queued attempt was answered (sold out, or the database could not be read).
    Answered,
    /// The SKU does not exist: decide without the lease.
    Unknown,
    /// Take the lease and decide.
    Lock,
}

/// Outcome of one batch under a lease.
enum BatchStep {
    /// Committed (or failed for good and answered); carry on holding.
    Done { sold_out: bool },
    /// Nothing committed and the jobs are back in the queue; the lease is lost or too short.
    LeaseGone,
}

/// A purchase attempt queued on its SKU's combiner: built by
/// [`PurchaseService::submit`](super::PurchaseService::submit) with the attempt's deadline and
/// the channel its waiting request listens on, answered exactly once by the combiner.
#[derive(Debug)]
pub struct Job {
    pub attempt: Attempt,
    pub deadline: Instant,
    /// Where its [`Answer`] goes: the waiting request.
    pub reply: oneshot::Sender<Answer>,
    /// The waiting request's span in its trace (`None` when traces are off: the job stays as
    /// small as without them): the parent of, or a link from, the `batch` span that decides it.
    pub span: Option<Box<tracing::Span>>,
}

/// The per-SKU combiners of this process.
#[derive(Debug, Clone)]
pub struct Combiners {
    ctx: Arc<Context>,
    queues: Arc<Mutex<HashMap<Sku, mpsc::Sender<Job>>>>,
    /// Where the combiners run.
    deciders: Deciders,
}

impl Combiners {
    pub fn new(ctx: Context, deciders: Deciders) -> Self {
        Self {
            ctx: Arc::new(ctx),
            queues: Arc::default(),
            deciders,
        }
    }

    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Live combiners (each removes itself when it retires).
    pub fn len(&self) -> usize {
        self.queues.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues `job` on its SKU's combiner (starting one if needed). A full queue hands the job
    /// back: the caller sheds it with 503.
    pub fn submit(&self, job: Job) -> Result<(), Job> {
        let sku = job.attempt.request.sku.clone();
        // Sending under the map lock: a retiring combiner removes itself under the same lock,
        // so no job can land in a queue nobody drains.
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        let tx = queues
            .entry(sku.clone())
            .or_insert_with(|| self.spawn(sku.clone()));
        match tx.try_send(job) {
            Ok(()) => {
                self.ctx.metrics.queue_depth.inc();
                Ok(())
            }
            Err(mpsc::error::TrySendError::Full(job)) => Err(job),
            Err(mpsc::error::TrySendError::Closed(job)) => {
                let tx = self.spawn(sku.clone());
                let sent = tx.try_send(job);
                queues.insert(sku, tx);
                match sent {
                    Ok(()) => {
                        self.ctx.metrics.queue_depth.inc();
                        Ok(())
                    }
                    Err(e) => Err(e.into_inner()),
                }
            }
        }
    }

    fn spawn(&self, sku: Sku) -> mpsc::Sender<Job> {
        let (tx, rx) = mpsc::channel(self.ctx.settings.queue_capacity);
        let worker = Worker {
            sku,
            rx,
            pending: VecDeque::new(),
            unknown_sku: false,
            ctx: self.ctx.clone(),
            queues: self.queues.clone(),
        };
        self.deciders.spawn(worker.run());
        tx
    }
}

struct Worker {
    sku: Sku,
    rx: mpsc::Receiver<Job>,
    /// Jobs taken off the channel and not yet answered, in arrival order.
    pending: VecDeque<Job>,
    /// The last batch found no such SKU.
    unknown_sku: bool,
    ctx: Arc<Context>,
    queues: Arc<Mutex<HashMap<Sku, mpsc::Sender<Job>>>>,
}

impl Worker {
    async fn run(mut self) {
        loop {
            if self.pending.is_empty() {
                match tokio::time::timeout(IDLE_EXIT, self.rx.recv()).await {
                    Ok(Some(job)) => self.pending.push_back(job),
                    Ok(None) => return,
                    Err(_idle) => {
                        if self.retire() {
                            return;
                        }
                        continue;
                    }
                }
            }
            self.refill();
            if self.pending.is_empty() {
                continue;
            }
            match self.consult(false).await {
                Next::Answered => continue,
                Next::Unknown => {
                    if self.decide_unknown().await && self.pending.is_empty() && self.retire() {
                        return;
                    }
                    continue;
                }
                Next::Lock => {}
            }
            let deadline = self
                .pending
                .iter()
                .map(|j| j.deadline)
                .min()
                .unwrap_or_else(Instant::now);
            let trace = BatchSpan::open(&self.sku, || {
                let n = self.batch_len();
                self.pending.iter().take(n).map(|j| j.span.as_deref())
            });
            let taking = trace.lease("acquire");
            let acquired = self
                .ctx
                .locks
                .acquire(&self.sku, deadline)
                .instrument(taking.clone())
                .await;
            let lease = match acquired {
                Ok(lease) => {
                    // Another process held the lock meanwhile and may have sold the last unit:
                    // read the SKU again rather than trust this process's "not sold out", so a
                    // queue that waited for the lock is answered at once, not by a transaction
                    // that can only refuse it.
                    if lease.contended() && !matches!(self.consult(true).await, Next::Lock) {
                        let _ = self.ctx.locks.release(lease).await;
                        continue;
                    }
                    lease
                }
                Err(e) => {
                    spans::failed(&taking);
                    trace.failed();
                    log_lock_failure(&self.sku, &e);
                    let jobs: Vec<Job> = self.pending.drain(..).collect();
                    self.refuse_all(jobs, lock_refusal(&e));
                    continue;
                }
            };
            drop(taking);
            let gave_up_for_fairness = self.hold(lease, trace).await;
            if std::mem::take(&mut self.unknown_sku) && self.pending.is_empty() && self.retire() {
                return;
            }
            if gave_up_for_fairness {
                self.ctx.metrics.lock_yields.inc();
                tokio::time::sleep(FAIRNESS_PAUSE).await;
            }
        }
    }

    /// Decides batches while holding `lease`, the first one under `first` (the span that took the
    /// lease); releases it at the end. Returns whether the lease was given up for fairness with
    /// work still queued.
    async fn hold(&mut self, mut lease: HeldLease, first: BatchSpan) -> bool {
        let mut first = Some(first);
        let held_since = Instant::now();
        let mut lease_ok = true;
        let mut fair = false;
        loop {
            self.refill();
            if self.pending.is_empty() {
                break;
            }
            let trace = first.take().unwrap_or_else(|| {
                BatchSpan::open(&self.sku, || {
                    let n = self.batch_len();
                    self.pending.iter().take(n).map(|j| j.span.as_deref())
                })
            });
            // Holds of this SKU that fell due are expired first, under this lease: their
            // units are on sale for the batch that follows (the lease is extended
            // after them if they took too much of it).
            if self.ctx.expiry.due().waiting(&self.sku) {
                if let Err(e) = self.ctx.expiry.expire_due(&self.sku, lease.terms()).await {
                    tracing::info!(sku = %self.sku, error = %e, "due holds not expired by the combiner; they wait for the next holder");
                }
            }
            if lease.running_low() {
                let extending = trace.lease("extend");
                let extended = self
                    .ctx
                    .locks
                    .extend(&mut lease)
                    .instrument(extending.clone())
                    .await;
                if let Err(e) = extended {
                    spans::failed(&extending);
                    tracing::info!(sku = %self.sku, error = %e, "lease could not be extended; re-acquiring");
                    lease_ok = false;
                    break;
                }
                if lease.running_low() {
                    lease_ok = false;
                    break;
                }
            }
            match self.batch(&lease, trace).await {
                BatchStep::Done { sold_out: true } => break,
                BatchStep::Done { sold_out: false } => {}
                BatchStep::LeaseGone => {
                    lease_ok = false;
                    break;
                }
            }
            if held_since.elapsed() >= self.ctx.settings.lock_max_hold {
                fair = true;
                break;
            }
        }
        if let Err(e) = self.ctx.locks.release(lease).await {
            if lease_ok {
                tracing::debug!(sku = %self.sku, error = %e, "lease release incomplete");
            }
        }
        // Work left means jobs in `pending` or still in the channel: `batch` drains `pending`,
        // and `refill` tops it up only to `batch_max`, so an empty `pending` says nothing about
        // the channel.
        fair && !(self.pending.is_empty() && self.rx.is_empty())
    }

    /// How many attempts from the front of the queue the next batch decides: up to `batch_max`,
    /// and no more than it takes to ask for every unit the SKU can have left — its stock as last
    /// observed in the current epoch, which only falls ([`SaleKnowledge::units_left_at_most`]).
    /// So the batch that meets the last units does not also decide, and store, hundreds of
    /// attempts that can only be refused: those wait for it and are answered `sold_out` from the
    /// sell-out it observed (not stored, as every fast-path answer), or decided by the next batch
    /// when units are left after all (a cap, a replay, a return meanwhile).
    fn batch_len(&self) -> usize {
        let most = self.pending.len().min(self.ctx.settings.batch_max);
        let Some(units) = self.ctx.knowledge.units_left_at_most(&self.sku) else {
            return most;
        };
        let mut asked = 0;
        for (i, job) in self.pending.iter().take(most).enumerate() {
            asked += i64::from(job.attempt.request.qty.get());
            if asked >= units {
                return i + 1;
            }
        }
        most
    }

    /// Decides one batch from the front of the queue, traced by `trace`.
    async fn batch(&mut self, lease: &HeldLease, trace: BatchSpan) -> BatchStep {
        let n = self.batch_len();
        let batch: Vec<Job> = self.pending.drain(..n).collect();
        trace.decides(batch.iter().map(|j| j.span.as_deref()));
        let attempts: Vec<Attempt> = batch.iter().map(|j| j.attempt.clone()).collect();
        // How often a conflict may roll this batch back before it is answered 503. A conflict
        // (`StoreError::Conflict`) is almost always one attempt's: another transaction — a batch of
        // another SKU, another process — has COMMITTED an order or stored answer of the same (user,
        // key) (Postgres raises the unique violation only once the other transaction has
        // committed). The retry reads that row and decides the offender from it (422, or its
        // replay) while the others commit: each such retry settles at least one pair for good. A
        // fixed count would let a handful of hostile keys, each raced through another SKU at the
        // right moment, exhaust it and answer every innocent shopper of the batch 503; an unbounded
        // loop would spin on a conflict that does not settle. So the bound is per offender — one
        // retry per distinct (user, key) of the batch, which a per-attempt conflict can never
        // exhaust — plus MAX_CONFLICT_RETRIES for deadlock / serialization victims. Time stays
        // bounded by the lease: `decide` refuses to start without `commit_budget` left, and the
        // jobs then go back to the queue, where their deadlines apply.
        let max_conflicts = {
            let pairs: HashSet<(&str, &str)> = attempts
                .iter()
                .map(|a| (a.user.as_str(), a.key.as_str()))
                .collect();
            u32::try_from(pairs.len())
                .unwrap_or(u32::MAX)
                .saturating_add(MAX_CONFLICT_RETRIES)
        };
        let mut conflicts = 0;
        loop {
            let terms = lease.terms();
            let batch_ref = BatchRef {
                id: Uuid::now_v7(),
                fence: terms.fence(),
            };
            let observed_at = Instant::now();
            let commit = trace.commit(batch_ref, conflicts + 1);
            let decided = self
                .ctx
                .decide(&self.sku, &attempts, Some(terms), batch_ref)
                .instrument(commit.clone())
                .await;
            if decided.is_err() {
                spans::failed(&commit);
            }
            drop(commit);
            match decided {
                Ok(mut result) => {
                    let sold_out = result.remaining == Some(0);
                    trace.committed(sold_out);
                    self.unknown_sku = result.remaining.is_none();
                    let decisions = std::mem::take(&mut result.decisions);
                    for (job, decision) in batch.into_iter().zip(decisions) {
                        self.reply(job, Answer::decided(decision, batch_ref));
                    }
                    // After the answers: a sell-out loads the buyers.
                    self.ctx
                        .knowledge
                        .learn_batch(&self.sku, observed_at, &result, &self.ctx.pool)
                        .await;
                    return BatchStep::Done { sold_out };
                }
                Err(StoreError::Conflict) if conflicts < max_conflicts => conflicts += 1,
                Err(e @ (StoreError::StaleFence { .. } | StoreError::LeaseExpired)) => {
                    self.ctx.locks.settle(lease, &e).await;
                    for job in batch.into_iter().rev() {
                        self.pending.push_front(job);
                    }
                    return BatchStep::LeaseGone;
                }
                Err(e) => {
                    trace.failed();
                    self.refuse_all(batch, store_refusal(&e));
                    return BatchStep::Done { sold_out: false };
                }
            }
        }
    }

    /// Decides one batch from the front of the queue for a SKU believed not to exist, without
    /// the lease. Returns false when the SKU exists after all: the jobs are back in the queue,
    /// for the locked path.
    async fn decide_unknown(&mut self) -> bool {
        let n = self.pending.len().min(self.ctx.settings.batch_max);
        let batch: Vec<Job> = self.pending.drain(..n).collect();
        let trace = BatchSpan::open(&self.sku, || batch.iter().map(|j| j.span.as_deref()));
        trace.decides(batch.iter().map(|j| j.span.as_deref()));
        let attempts: Vec<Attempt> = batch.iter().map(|j| j.attempt.clone()).collect();
        let commit = trace.unleased_commit();
        let decided = self
            .ctx
            .decide_unknown(&self.sku, &attempts)
            .instrument(commit.clone())
            .await;
        if decided.is_err() {
            spans::failed(&commit);
            trace.failed();
        }
        drop(commit);
        match decided {
            Ok(Some((result, batch_ref))) => {
                for (job, decision) in batch.into_iter().zip(result.decisions) {
                    self.reply(job, Answer::decided(decision, batch_ref));
                }
                true
            }
            Ok(None) => {
                for job in batch.into_iter().rev() {
                    self.pending.push_front(job);
                }
                false
            }
            Err(e) => {
                self.refuse_all(batch, store_refusal(&e));
                true
            }
        }
    }

    /// Answers `job` (its waiter may have gone: nothing to do then).
    fn reply(&self, job: Job, answer: Answer) {
        self.ctx.metrics.queue_depth.dec();
        if answer == Answer::Refused(Refusal::Overloaded) {
            self.ctx.metrics.shed.inc();
        }
        let _ = job.reply.send(answer);
    }

    /// Answers every job with the same refusal.
    fn refuse_all(&self, jobs: impl IntoIterator<Item = Job>, refusal: Refusal) {
        for job in jobs {
            self.reply(job, refusal.into());
        }
    }

    /// Tops `pending` up from the channel to `batch_max`, and sheds what waited past its deadline
    /// or whose client is gone.
    fn refill(&mut self) {
        while self.pending.len() < self.ctx.settings.batch_max {
            match self.rx.try_recv() {
                Ok(job) => self.pending.push_back(job),
                Err(_) => break,
            }
        }
        let now = Instant::now();
        let (live, dead): (VecDeque<Job>, VecDeque<Job>) = self
            .pending
            .drain(..)
            .partition(|j| j.deadline > now && !j.reply.is_closed());
        self.pending = live;
        self.refuse_all(dead, Refusal::Overloaded);
    }

    /// Consults what the process knows of the SKU (`fresh`: reads the database even if it
    /// knows something fresh). Sold out: answers every queued attempt without a stored 201.
    /// The database cannot be read: answers every queued attempt 503 — unless `fresh` (the
    /// caller holds the lease; the batch will tell).
    async fn consult(&mut self, fresh: bool) -> Next {
        let knowledge = &self.ctx.knowledge;
        let sale = if fresh {
            knowledge.check_fresh(&self.sku, &self.ctx.pool).await
        } else {
            knowledge.check(&self.sku, &self.ctx.pool).await
        };
        let buyers = match sale {
            Ok(Sale::OnSale { .. }) => return Next::Lock,
            Ok(Sale::Unknown) => return Next::Unknown,
            Ok(Sale::SoldOut { buyers, .. }) => buyers,
            Err(_) if fresh => return Next::Lock,
            Err(e) => {
                tracing::warn!(sku = %self.sku, error = %e, "could not read the sku");
                let jobs: Vec<Job> = self.pending.drain(..).collect();
                self.refuse_all(jobs, Refusal::Unavailable);
                return Next::Answered;
            }
        };
        let (answer, keep): (VecDeque<Job>, VecDeque<Job>) = self
            .pending
            .drain(..)
            .partition(|j| SaleKnowledge::answers(&buyers, &j.attempt.user, &j.attempt.key));
        self.pending = keep;
        for job in answer {
            self.ctx.metrics.sold_out_fast_path.inc();
            self.reply(job, Answer::sold_out_known(&self.sku));
        }
        if self.pending.is_empty() {
            Next::Answered
        } else {
            Next::Lock
        }
    }

    /// Removes this combiner from the map if no job is waiting; returns whether it did.
    fn retire(&mut self) -> bool {
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        if !self.rx.is_empty() {
            return false;
        }
        queues.remove(&self.sku);
        true
    }
}
