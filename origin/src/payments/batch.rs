//! The payments' combiner: payments of live holds decided many at a time. Reached from
//! [`super::PaymentWebhooks::receive`] for every verified `pay` event that names an order; the
//! deliveries wait here (not for a database connection) while ONE task per process gathers them
//! (the first waits up to [`LINGER`] for others) and pays them in one transaction (`store::payments::pay_live_holds`: `held → paid`, the
//! `order_payments` rows and the events recorded `applied`, one commit), then answers each.
//!
//! A payment of a live hold moves no unit, so it needs neither the SKU's lease nor the SKU row:
//! the order's row lock decides it against a concurrent expiry or cancellation. Everything else
//! — a known event id, an order that is no longer (or never was) a live hold, a charge refunded
//! first, the same event or order twice in one batch — is answered [`Paid::NotLive`] and decided
//! one by one on the general path (which applies each event at most once). While the
//! transaction runs, new deliveries queue up: under load each transaction pays a large batch,
//! so the webhook keeps up with a sale's payments with one database connection per process.

use std::collections::HashSet;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::orders::OrderService;
use crate::store::StoreError;
use crate::store::payments::{self as store, LivePayment};
use sqlx::PgPool;

/// Most payments in one transaction.
pub const BATCH_MAX: usize = 500;
/// Most payments waiting for a transaction; a delivery beyond it answers 503 (retried).
const QUEUE_MAX: usize = 20_000;
/// How long the first payment of a batch waits for others to join it. A transaction's cost in
/// Postgres is mostly per transaction, not per payment: measured with `bench holds`' cost probe
/// (docs/bench/diary.md), a payment cost ~0.2 ms of Postgres CPU in batches of a few and ~0.06 ms
/// in batches of hundreds. A payment provider waits seconds for its answer; 20 ms is invisible
/// to it, and at a sale's webhook rate it turns a few payments per transaction into dozens.
pub const LINGER: Duration = Duration::from_millis(20);

/// How one payment was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paid {
    /// The hold is paid now (event recorded `applied`).
    Paid,
    /// Not a new payment of a live hold: nothing changed; decide it on the general path.
    NotLive,
}

struct Job {
    payment: LivePayment,
    reply: oneshot::Sender<Result<Paid, String>>,
}

/// The queue of live-hold payments of this process; cheap to clone.
#[derive(Debug, Clone)]
pub struct LivePayer {
    tx: mpsc::Sender<Job>,
}

impl LivePayer {
    /// Starts the combiner task (it ends when the last clone is dropped).
    pub fn start(pool: PgPool, orders: OrderService) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE_MAX);
        tokio::spawn(run(rx, pool, orders));
        Self { tx }
    }

    /// Pays `payment` if its order is a live hold; waits at most `wait` for a full queue.
    /// `Err` (the queue is full or the database failed): nothing is known to have changed —
    /// answer 503, the provider retries.
    pub async fn pay(&self, payment: LivePayment, wait: Duration) -> Result<Paid, String> {
        let (reply, answer) = oneshot::channel();
        let job = Job { payment, reply };
        match tokio::time::timeout(wait, self.tx.send(job)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => return Err("every payment queue slot is busy".into()),
        }
        answer
            .await
            .unwrap_or_else(|_| Err("the payment combiner stopped".into()))
    }
}

async fn run(mut rx: mpsc::Receiver<Job>, pool: PgPool, orders: OrderService) {
    let mut jobs: Vec<Job> = Vec::with_capacity(BATCH_MAX);
    while gather(&mut rx, &mut jobs, BATCH_MAX, LINGER).await {
        decide(&pool, &orders, std::mem::take(&mut jobs)).await;
    }
}

/// Waits for a first job, then gathers what else arrives within `linger` of it, up to `max`
/// jobs, into `jobs`. `false`: every sender is gone and nothing is left.
async fn gather<T>(
    rx: &mut mpsc::Receiver<T>,
    jobs: &mut Vec<T>,
    max: usize,
    linger: Duration,
) -> bool {
    if rx.recv_many(jobs, max).await == 0 {
        return false;
    }
    let until = tokio::time::Instant::now() + linger;
    while jobs.len() < max {
        match tokio::time::timeout_at(until, rx.recv_many(jobs, max - jobs.len())).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    true
}

/// Pays one batch and answers every job of it.
async fn decide(pool: &PgPool, orders: &OrderService, jobs: Vec<Job>) {
    // Each event and each order once per transaction; repeats go the general way.
    let first: Vec<bool> = {
        let mut events = HashSet::with_capacity(jobs.len());
        let mut ids = HashSet::with_capacity(jobs.len());
        jobs.iter()
            .map(|j| events.insert(j.payment.event_id.as_str()) && ids.insert(j.payment.order_id))
            .collect()
    };
    let mut payments = Vec::with_capacity(jobs.len());
    let mut replies = Vec::with_capacity(jobs.len());
    for (job, first) in jobs.into_iter().zip(first) {
        if first {
            payments.push(job.payment);
            replies.push(job.reply);
        } else {
            let _ = job.reply.send(Ok(Paid::NotLive));
        }
    }
    match store::pay_live_holds(pool, &payments).await {
        Ok(paid) => {
            let paid_ids: HashSet<Uuid> = paid.iter().map(|p| p.order_id).collect();
            orders.paid_live(&paid);
            for (payment, reply) in payments.iter().zip(replies) {
                let answer = if paid_ids.contains(&payment.order_id) {
                    Paid::Paid
                } else {
                    Paid::NotLive
                };
                let _ = reply.send(Ok(answer));
            }
        }
        Err(StoreError::Unavailable(e)) => {
            let cause = e.to_string();
            for reply in replies {
                let _ = reply.send(Err(cause.clone()));
            }
        }
        // Nothing committed (a deadlock victim, or a bug one payment triggers): each is decided
        // on its own on the general path.
        Err(e) => {
            tracing::warn!(error = %e, payments = payments.len(), "paying live holds together failed; deciding them one by one");
            for reply in replies {
                let _ = reply.send(Ok(Paid::NotLive));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_batch_gathers_what_arrives_within_the_linger_and_no_more() {
        let (tx, mut rx) = mpsc::channel(100);
        let sender = tokio::spawn(async move {
            tx.send(1).await.expect("open");
            tokio::time::sleep(Duration::from_millis(5)).await;
            tx.send(2).await.expect("open");
            tokio::time::sleep(Duration::from_millis(10)).await;
            tx.send(3).await.expect("open");
            // Past the first batch's linger (20 ms after job 1): the next batch.
            tokio::time::sleep(Duration::from_millis(10)).await;
            tx.send(4).await.expect("open");
        });
        let mut jobs = Vec::new();
        assert!(gather(&mut rx, &mut jobs, 10, LINGER).await);
        assert_eq!(jobs, vec![1, 2, 3], "joined within 20 ms of the first");
        jobs.clear();
        assert!(gather(&mut rx, &mut jobs, 10, LINGER).await);
        assert_eq!(jobs, vec![4]);
        sender.await.expect("sender");
        jobs.clear();
        assert!(
            !gather(&mut rx, &mut jobs, 10, LINGER).await,
            "closed and empty"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_batch_goes_at_once() {
        let (tx, mut rx) = mpsc::channel(100);
        for i in 0..7 {
            tx.send(i).await.expect("open");
        }
        let started = tokio::time::Instant::now();
        let mut jobs = Vec::new();
        assert!(gather(&mut rx, &mut jobs, 5, LINGER).await);
        assert_eq!(jobs, vec![0, 1, 2, 3, 4]);
        assert_eq!(started.elapsed(), Duration::ZERO, "no wait once full");
        jobs.clear();
        assert!(gather(&mut rx, &mut jobs, 5, LINGER).await);
        assert_eq!(jobs, vec![5, 6], "the rest after the linger");
        assert_eq!(started.elapsed(), LINGER);
    }
}
