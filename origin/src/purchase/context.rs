//! What every combiner of the process shares ([`Context`]): the pool, the lock, the sale
//! knowledge and the settings, and the steps of deciding a batch under a SKU's lease — acquiring
//! it with the combiner's retry policy, the lease guard around the transaction, the batch's audit
//! event, and the mapping of store and lock failures to the answers shoppers get. Used by the
//! per-SKU combiners ([`super::combiner`]) and by the baseline without them ([`super::baseline`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use shared::Sku;
use sqlx::PgPool;
use uuid::Uuid;

use super::answer::{Answer, BatchRef, Refusal};
use super::due::DueHolds;
use super::job::Job;
use super::knowledge::SaleKnowledge;
use crate::hold_queue::{self, HoldQueue};
use crate::metrics::Metrics;
use crate::settings::PurchaseSettings;
use crate::store::{self, Attempt, BatchMode, StoreError};
use redlock::{Lease, Pause, Redlock, RedlockError, RetryPolicy};

/// A contended combiner polls the lock every 1..=POLL_MAX. Contenders per SKU are bounded by
/// the number of origin processes, so polling this often costs little and hands the lock over
/// quickly (a growing back-off would let the yielding holder win again).
const POLL_MAX: Duration = Duration::from_millis(4);
/// How the combiner waits for the SKU's lock: it polls while the lock is contended, and retries
/// while too few nodes could vote — a node slower than its 40 ms timeout for a moment (a
/// CPU-starved host, a slow fsync) must not turn into a 503 for a request that still has most
/// of its deadline.
const LOCK_RETRY: RetryPolicy = RetryPolicy {
    contended: Pause::Uniform {
        min: Duration::from_millis(1),
        max: POLL_MAX,
    },
    unavailable: Pause::Uniform {
        min: Duration::from_millis(5),
        max: Duration::from_millis(20),
    },
};
/// Margin kept between commit and lease expiry for the COMMIT round trip itself.
pub(super) const COMMIT_MARGIN: Duration = Duration::from_millis(20);
/// Retries of a batch rolled back by a conflict that need not settle anything (a deadlock or
/// serialization victim), on top of the one retry per (user, key) pair a batch is allowed for
/// per-attempt conflicts (see the combiner's `Worker::batch`). Nothing is committed by a conflicting batch.
pub(super) const MAX_CONFLICT_RETRIES: u32 = 3;

/// Everything a combiner needs; shared by all combiners of the process.
#[derive(Debug)]
pub struct Context {
    pub pool: PgPool,
    pub lock: Redlock,
    pub knowledge: Arc<SaleKnowledge>,
    pub metrics: Arc<Metrics>,
    pub settings: PurchaseSettings,
    /// Prefix of the Redis keys of this deployment (`REDIS_KEY_PREFIX`). The lock was built
    /// with it as its key prefix, so lock keys are passed bare (`Context::lock_key`).
    pub key_prefix: String,
    /// The holds' delayed queue: a batch that created holds schedules their expiry there.
    pub holds: HoldQueue,
    /// Holds that fell due, expired by the next holder of their SKU's lease ([`super::due`]).
    pub due: DueHolds,
}

impl Context {
    /// The SKU's lock resource, `sku:<SKU>`: the lock stores it as
    /// `<REDIS_KEY_PREFIX>:lock:sku:<SKU>` (and its fence counter as
    /// `<REDIS_KEY_PREFIX>:fence:sku:<SKU>`), and audits it under this name.
    pub(super) fn lock_key(sku: &Sku) -> String {
        format!("sku:{sku}")
    }

    pub(super) fn reply(&self, job: Job, answer: Answer) {
        self.metrics.queue_depth.dec();
        if answer == Answer::Refused(Refusal::Overloaded) {
            self.metrics.shed.inc();
        }
        // The waiter may have gone (client disconnected); nothing to do then.
        let _ = job.reply.send(answer);
    }

    /// Answers every job with the same refusal.
    pub(super) fn refuse_all(&self, jobs: impl IntoIterator<Item = Job>, refusal: Refusal) {
        for job in jobs {
            self.reply(job, refusal.into());
        }
    }

    /// Acquires the SKU's lease, retrying by [`LOCK_RETRY`] until `deadline`, the request's
    /// budget. A quorum loss the lock already knows about (fewer than a quorum of nodes unable
    /// to vote for longer than `REDLOCK_QUORUM_LOSS_GRACE_MS`) is [`RedlockError::QuorumLost`],
    /// returned at once: retrying cannot help, so the purchases answer 503 now rather than at
    /// their deadline.
    /// [`Lease::contended`] tells whether another holder had it first (the caller waited).
    pub(crate) async fn acquire_until(
        &self,
        sku: &Sku,
        deadline: Instant,
    ) -> Result<Lease, RedlockError> {
        let started = Instant::now();
        let result = self
            .lock
            .acquire(
                &Self::lock_key(sku),
                self.settings.lock_ttl,
                &LOCK_RETRY,
                deadline,
            )
            .await;
        self.metrics
            .lock_wait
            .observe(started.elapsed().as_secs_f64());
        if result.is_ok() {
            self.metrics.lock_acquisitions.inc();
        }
        result
    }

    /// Decides `attempts` in one transaction under `lease`, with the lease guard — or, without a
    /// lease, only if the SKU does not exist ([`BatchMode::UnknownSkuOnly`]) — and writes the
    /// batch's audit event.
    pub(super) async fn decide(
        &self,
        sku: &Sku,
        attempts: &[Attempt],
        lease: Option<&Lease>,
        batch: BatchRef,
    ) -> Result<store::BatchResult, StoreError> {
        let (fence, commit_by, mode) = match lease {
            Some(lease) => {
                let remaining = lease.remaining();
                if remaining < self.settings.commit_budget {
                    audit_batch(
                        sku,
                        batch,
                        attempts.len(),
                        &Err(StoreError::LeaseExpired),
                        0.0,
                    );
                    return Err(StoreError::LeaseExpired);
                }
                let commit_by = Instant::now() + remaining.saturating_sub(COMMIT_MARGIN);
                (Some(lease.fence()), Some(commit_by), BatchMode::Sell)
            }
            None => (None, None, BatchMode::UnknownSkuOnly),
        };
        let started = Instant::now();
        let result = store::decide_batch(&self.pool, sku, attempts, fence, commit_by, mode).await;
        let seconds = started.elapsed().as_secs_f64();
        self.metrics.db_transaction.observe(seconds);
        if let Err(StoreError::Conflict) = result {
            self.metrics.batch_conflicts.inc();
        }
        audit_batch(sku, batch, attempts.len(), &result, seconds);
        if let (Err(StoreError::StaleFence { current, .. }), Some(lease)) = (&result, lease) {
            self.catch_up_fence(sku, lease, *current).await;
        }
        if let Ok(res) = &result {
            self.metrics.batch_size.observe(attempts.len() as f64);
            self.metrics
                .units_sold
                .inc_by(u64::try_from(res.units_sold).unwrap_or(0));
            self.schedule_holds(sku, res);
        }
        result
    }

    /// Adds the holds a committed batch created to the delayed queue, off the request path
    /// (a failure only leaves their expiry to the database sweep).
    fn schedule_holds(&self, sku: &Sku, res: &store::BatchResult) {
        let Some(at) = res.expires_at else { return };
        if res.holds.is_empty() {
            return;
        }
        let due = at.timestamp_millis();
        let entries: Vec<(String, i64)> = res
            .holds
            .iter()
            .map(|id| (hold_queue::member(sku.as_str(), *id), due))
            .collect();
        let holds = self.holds.clone();
        tokio::spawn(async move {
            if let Err(e) = holds.schedule(&entries).await {
                tracing::warn!(error = %e, holds = entries.len(), "could not queue hold expiries; the sweep will expire them");
            }
        });
    }

    /// After a batch was refused as stale: raises the SKU's fence counters to the row's fence,
    /// so the next lease's fence is above it. A holder that merely outlived its lease changes
    /// nothing by this (the counters are past that fence already); counters that fell behind the
    /// row — renamed keys after an upgrade or a rollback, a counter recreated by a machine whose
    /// clock ran behind — would otherwise get every later batch refused too, forever.
    pub(crate) async fn catch_up_fence(&self, sku: &Sku, lease: &Lease, current: i64) {
        let Ok(current) = u64::try_from(current) else {
            return;
        };
        match self.lock.raise_fence(lease, current).await {
            Ok(()) => tracing::info!(
                sku = %sku,
                presented = lease.fence(),
                current,
                "batch refused as stale: the sku's fence counters were raised to the row's fence"
            ),
            Err(e) => {
                tracing::warn!(sku = %sku, error = %e, "could not raise the sku's fence counters")
            }
        }
    }

    /// Decides `attempts` for a SKU believed not to exist, without its lease, retrying a batch
    /// that lost a race on an idempotency key. `Ok(None)`: the SKU exists (now known here); take
    /// the lease.
    pub(super) async fn decide_unknown(
        &self,
        sku: &Sku,
        attempts: &[Attempt],
    ) -> Result<Option<(store::BatchResult, BatchRef)>, StoreError> {
        let mut conflicts = 0;
        loop {
            let batch = BatchRef {
                id: Uuid::now_v7(),
                fence: 0,
            };
            let observed_at = Instant::now();
            match self.decide(sku, attempts, None, batch).await {
                Ok(result) => {
                    self.knowledge
                        .learn_batch(sku, observed_at, &result, &self.pool)
                        .await;
                    return Ok(Some((result, batch)));
                }
                Err(StoreError::SkuExists(state)) => {
                    self.knowledge
                        .learn_state(sku, observed_at, Some(state), &self.pool)
                        .await;
                    return Ok(None);
                }
                Err(StoreError::Conflict) if conflicts < MAX_CONFLICT_RETRIES => conflicts += 1,
                Err(e) => return Err(e),
            }
        }
    }
}

/// One `flashgate::audit` batch event at `$level` (tracing needs the level as a constant, so
/// each arm of [`audit_batch`] names its own) with the fields every batch event carries.
macro_rules! batch_event {
    ($level:ident, $sku:expr, $batch:expr, $size:expr, $tx_ms:expr, $result:expr, $($rest:tt)+) => {
        tracing::$level!(
            target: "flashgate::audit",
            event = "batch",
            result = $result,
            sku = %$sku,
            batch_id = %$batch.id,
            fence = $batch.fence,
            size = $size,
            tx_ms = $tx_ms,
            $($rest)+
        )
    };
}

/// The audit event of one batch transaction: committed or not, and why. Together with the
/// per-attempt `purchase decided` events (same `batch_id`) and the Redlock lease events (same
/// `fence`), an incident can be replayed from the logs.
fn audit_batch(
    sku: &Sku,
    batch: BatchRef,
    size: usize,
    result: &Result<store::BatchResult, StoreError>,
    seconds: f64,
) {
    let tx_ms = seconds * 1000.0;
    match result {
        Ok(res) => batch_event!(
            info,
            sku,
            batch,
            size,
            tx_ms,
            "committed",
            units_sold = res.units_sold,
            remaining = res.remaining,
            "batch committed"
        ),
        Err(e @ StoreError::Unexpected(_)) => batch_event!(
            error, sku, batch, size, tx_ms, batch_error_label(e),
            error = %e, "batch failed"
        ),
        // Not a fault: a SKU believed unknown was created meanwhile; decided under its lease.
        Err(e @ StoreError::SkuExists(_)) => batch_event!(
            info,
            sku,
            batch,
            size,
            tx_ms,
            batch_error_label(e),
            "batch not committed"
        ),
        Err(e) => batch_event!(
            warn, sku, batch, size, tx_ms, batch_error_label(e),
            error = %e, "batch not committed"
        ),
    }
}

/// Logs a lock acquisition that failed. A known quorum loss is logged once by the lock when it
/// starts (and its end when it ends); a warning per refused batch would flood the log for as long
/// as it lasts.
pub(super) fn log_lock_failure(sku: &Sku, e: &RedlockError) {
    if matches!(e, RedlockError::QuorumLost { .. }) {
        tracing::debug!(sku = %sku, error = %e, "sku lock refused: known quorum loss");
    } else {
        tracing::warn!(sku = %sku, error = %e, "could not acquire sku lock");
    }
}

fn batch_error_label(e: &StoreError) -> &'static str {
    match e {
        StoreError::Unavailable(_) => "unavailable",
        StoreError::Conflict => "conflict",
        StoreError::StaleFence { .. } => "stale_fence",
        StoreError::LeaseExpired => "lease_expired",
        StoreError::SkuExists(_) => "sku_exists",
        StoreError::Unexpected(_) => "failed",
    }
}

/// The answer to attempts whose batch failed for good: 503 when the database could not be had,
/// a conflict did not settle or the lease was lost (retrying may help), 500 for a bug (logged by
/// `audit_batch`).
pub(super) fn store_refusal(e: &StoreError) -> Refusal {
    match e {
        StoreError::Unavailable(_)
        | StoreError::Conflict
        | StoreError::StaleFence { .. }
        | StoreError::LeaseExpired => Refusal::Unavailable,
        StoreError::Unexpected(_) | StoreError::SkuExists(_) => Refusal::Internal,
    }
}

/// The answer to attempts whose SKU lease could not be had by their deadline: a lock still
/// contended is load (shed), anything else a lost dependency.
pub(super) fn lock_refusal(e: &RedlockError) -> Refusal {
    if matches!(e, RedlockError::Contended) {
        Refusal::Overloaded
    } else {
        Refusal::Unavailable
    }
}
