//! Prometheus metrics of the origin, one registry per running app (so tests that start several
//! apps in one process never mix their numbers). Served as text at `GET /metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use redlock::RedlockMetrics;

/// Label set of `origin_purchases_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `created`, `replayed`, or the error code of the answer.
    pub outcome: String,
}

/// Label set of `origin_edge_signatures_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SignatureLabels {
    /// `v1` or `v2`.
    pub scheme: String,
    /// The key id that verified (for v1, the first key of the ring whose secret matched).
    pub kid: String,
}

/// Label set of `origin_payment_events_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PaymentEventLabels {
    /// The event type the origin acts on (`payment_intent.succeeded`, …) or `other`.
    pub r#type: &'static str,
    /// What the delivery did: `applied`, `refund_due`, `already_refunded`, `ignored_state`,
    /// `unknown_order`, `ignored_type`, `ignored_unpaid`, `ignored_partial_refund`, `duplicate`
    /// (an event already decided), `invalid` (a verified body that is not an event) or
    /// `unavailable` (503, retried by the provider).
    pub result: &'static str,
}

/// Label set of `origin_webhook_signature_failures_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SignatureFailureLabels {
    /// `missing`, `malformed`, `no_v1`, `too_old`, `in_future` or `mismatch`.
    pub reason: &'static str,
}

/// Label set of `origin_returns_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReturnLabels {
    /// Why units went back on sale: `expired`, `cancelled`, `refunded`.
    pub reason: &'static str,
}

/// Label set of `origin_http_connections_closed_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CloseLabels {
    /// Why the server closed the connection: `header_timeout`, `stalled`, `keepalive_timeout`,
    /// `reclaimed`, `evicted`, `tls_handshake` (the HTTPS listener: a failed handshake, e.g. a
    /// client without an accepted certificate).
    pub reason: &'static str,
}

/// Label set of `origin_tls_reloads_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TlsReloadLabels {
    /// `loaded` (new connections get the new files) or `failed` (the previous ones still serve).
    pub result: &'static str,
}

/// Every metric the origin exports.
#[derive(Debug)]
pub struct Metrics {
    /// `origin_purchase_requests_total`: every `POST /v1/purchases` that reached the origin.
    pub purchase_requests: Counter,
    /// `origin_purchases_total{outcome}`: answers to purchase requests.
    pub purchases: Family<OutcomeLabels, Counter>,
    /// `origin_edge_signatures_total{scheme,kid}`: verified edge signatures, by scheme and key —
    /// during a rotation, the retired key may be removed once its count stops growing everywhere.
    pub edge_signatures: Family<SignatureLabels, Counter>,
    /// `origin_purchase_duration_seconds`: time from request to answer.
    pub purchase_duration: Histogram,
    /// `origin_db_transaction_seconds`: duration of one purchase-batch transaction.
    pub db_transaction: Histogram,
    /// `origin_batch_size`: purchases decided per transaction.
    pub batch_size: Histogram,
    /// `origin_queue_depth`: purchases queued across all SKU combiners of this process.
    pub queue_depth: Gauge,
    /// `origin_lock_wait_seconds`: time a combiner waited to acquire a SKU's lock.
    pub lock_wait: Histogram,
    /// `origin_lock_acquisitions_total`: SKU leases acquired by this process.
    pub lock_acquisitions: Counter,
    /// `origin_lock_yields_total`: SKU leases given up for fairness (`LOCK_MAX_HOLD_MS`) while
    /// purchases were still queued, so other processes get their turn.
    pub lock_yields: Counter,
    /// `origin_units_sold_total`: units committed (lock acquisitions per unit = ratio of the two).
    pub units_sold: Counter,
    /// `origin_sold_out_fast_path_total`: `sold_out` answers given from the process's knowledge
    /// that the SKU is sold out (`purchase::knowledge`), without lock or transaction.
    pub sold_out_fast_path: Counter,
    /// `origin_shed_total`: requests refused with 503 by load shedding (full queue, deadline).
    pub shed: Counter,
    /// `origin_stale_fence_total`: batches refused by the database fence (a stale lock holder).
    pub stale_fence: Counter,
    /// `origin_batch_conflicts_total`: batch transactions rolled back by a conflicting concurrent
    /// transaction (the same (user, key) written elsewhere, a deadlock) and retried.
    pub batch_conflicts: Counter,
    /// `origin_lease_expired_batches_total`: batches rolled back because the lease could have
    /// expired before their commit (a paused or slow holder).
    pub lease_expired: Counter,
    /// `origin_reconcile_discrepancies`: discrepancies found by the last periodic reconciliation.
    pub reconcile_discrepancies: Gauge,
    /// `origin_combiners`: live per-SKU combiner tasks (set when scraped).
    pub combiners: Gauge,
    /// `origin_purchases_in_flight`: purchase attempts being decided (set when scraped).
    pub in_flight: Gauge,
    /// `origin_http_connections`: open HTTP connections.
    pub http_connections: Gauge,
    /// `origin_http_connections_closed_total{reason}`: connections the server closed on its own
    /// initiative (timeouts, reclaimed at the connection cap).
    pub http_closed: Family<CloseLabels, Counter>,
    /// `origin_tls_reloads_total{result}`: changed TLS files of the HTTPS listener, loaded or
    /// refused.
    pub tls_reloads: Family<TlsReloadLabels, Counter>,
    /// `origin_payment_events_total{type,result}`: payment webhook deliveries with a valid
    /// signature, by event type and what they did.
    pub payment_events: Family<PaymentEventLabels, Counter>,
    /// `origin_webhook_signature_failures_total{reason}`: payment webhook deliveries refused
    /// with 400 `webhook_signature`.
    pub webhook_signature_failures: Family<SignatureFailureLabels, Counter>,
    /// `origin_holds_active`: orders held right now, across all processes (read from the
    /// database by the expiry loop every few seconds).
    pub holds_active: Gauge,
    /// `origin_holds_overdue`: holds more than 60 s past their `expires_at` (a stuck expiry).
    pub holds_overdue: Gauge,
    /// `origin_hold_expiries_total`: holds this process expired.
    pub hold_expiries: Counter,
    /// `origin_hold_expiry_lag_seconds`: from a hold's `expires_at` to the write of its expiry.
    pub expiry_lag: Histogram,
    /// `origin_returns_total{reason}`: orders whose units this process put back on sale.
    pub returns: Family<ReturnLabels, Counter>,
    /// `origin_refund_due_total`: payments that arrived after their hold expired, when no unit
    /// could be taken again: the order is `refund_due`, the money must go back.
    pub refund_due: Counter,
    /// Redlock's own metrics (`redlock_*`).
    pub redlock: RedlockMetrics,
    /// `purchases`' series, resolved once each.
    outcome_handles: Handles<&'static str>,
    /// `edge_signatures`' series, resolved once each.
    signature_handles: Handles<(shared::signing::Version, String)>,
}

impl Metrics {
    /// Creates the metrics and the registry that exports them.
    pub fn new() -> (Self, Registry) {
        let mut registry = Registry::default();
        let latency = || Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        let metrics = Self {
            purchase_requests: Counter::default(),
            purchases: Family::default(),
            edge_signatures: Family::default(),
            purchase_duration: latency(),
            db_transaction: latency(),
            batch_size: Histogram::new(exponential_buckets(1.0, 2.0, 11)),
            queue_depth: Gauge::default(),
            lock_wait: latency(),
            lock_acquisitions: Counter::default(),
            lock_yields: Counter::default(),
            units_sold: Counter::default(),
            sold_out_fast_path: Counter::default(),
            shed: Counter::default(),
            stale_fence: Counter::default(),
            reconcile_discrepancies: Gauge::default(),
            lease_expired: Counter::default(),
            batch_conflicts: Counter::default(),
            combiners: Gauge::default(),
            in_flight: Gauge::default(),
            http_connections: Gauge::default(),
            http_closed: Family::default(),
            tls_reloads: Family::default(),
            payment_events: Family::default(),
            webhook_signature_failures: Family::default(),
            holds_active: Gauge::default(),
            holds_overdue: Gauge::default(),
            hold_expiries: Counter::default(),
            expiry_lag: Histogram::new([
                0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0,
            ]),
            returns: Family::default(),
            refund_due: Counter::default(),
            redlock: RedlockMetrics::register(&mut registry),
            outcome_handles: Handles::default(),
            signature_handles: Handles::default(),
        };
        // Every reason's series exists from the start (dashboards and alerts name them).
        for reason in ["expired", "cancelled", "refunded"] {
            let _ = metrics.returns.get_or_create(&ReturnLabels { reason });
        }
        let r = &mut registry;
        r.register(
            "origin_purchase_requests",
            "POST /v1/purchases requests that reached the origin",
            metrics.purchase_requests.clone(),
        );
        r.register(
            "origin_purchases",
            "Answers to purchase requests by outcome",
            metrics.purchases.clone(),
        );
        r.register(
            "origin_edge_signatures",
            "Verified edge signatures by scheme (v1, v2) and key id",
            metrics.edge_signatures.clone(),
        );
        r.register(
            "origin_purchase_duration_seconds",
            "Purchase request latency",
            metrics.purchase_duration.clone(),
        );
        r.register(
            "origin_db_transaction_seconds",
            "Duration of one purchase-batch transaction",
            metrics.db_transaction.clone(),
        );
        r.register(
            "origin_batch_size",
            "Purchases decided per database transaction",
            metrics.batch_size.clone(),
        );
        r.register(
            "origin_queue_depth",
            "Purchases queued in this process's SKU combiners",
            metrics.queue_depth.clone(),
        );
        r.register(
            "origin_lock_wait_seconds",
            "Time a SKU combiner waited for its lock",
            metrics.lock_wait.clone(),
        );
        r.register(
            "origin_lock_acquisitions",
            "SKU leases acquired",
            metrics.lock_acquisitions.clone(),
        );
        r.register(
            "origin_lock_yields",
            "SKU leases given up for fairness with purchases still queued",
            metrics.lock_yields.clone(),
        );
        r.register(
            "origin_units_sold",
            "Units committed as orders",
            metrics.units_sold.clone(),
        );
        r.register(
            "origin_sold_out_fast_path",
            "Sold-out answers given without lock or database",
            metrics.sold_out_fast_path.clone(),
        );
        r.register(
            "origin_shed",
            "Purchase requests shed with 503 (full queue or deadline)",
            metrics.shed.clone(),
        );
        r.register(
            "origin_stale_fence",
            "Purchase batches refused by the fencing token check",
            metrics.stale_fence.clone(),
        );
        r.register(
            "origin_lease_expired_batches",
            "Purchase batches rolled back because the lease could have expired before commit",
            metrics.lease_expired.clone(),
        );
        r.register(
            "origin_batch_conflicts",
            "Purchase batches rolled back by a conflicting concurrent transaction and retried",
            metrics.batch_conflicts.clone(),
        );
        r.register(
            "origin_reconcile_discrepancies",
            "Discrepancies found by the last reconciliation (0 = the books balance)",
            metrics.reconcile_discrepancies.clone(),
        );
        r.register(
            "origin_combiners",
            "Live per-SKU combiner tasks of this process (idle ones exit)",
            metrics.combiners.clone(),
        );
        r.register(
            "origin_purchases_in_flight",
            "Purchase attempts being decided by this process",
            metrics.in_flight.clone(),
        );
        r.register(
            "origin_http_connections",
            "Open HTTP connections",
            metrics.http_connections.clone(),
        );
        r.register(
            "origin_http_connections_closed",
            "HTTP connections closed by the server on its own initiative, by reason",
            metrics.http_closed.clone(),
        );
        r.register(
            "origin_tls_reloads",
            "Changed TLS files of the HTTPS listener, loaded or refused (the previous ones serve)",
            metrics.tls_reloads.clone(),
        );
        r.register(
            "origin_payment_events",
            "Payment webhook deliveries with a valid signature, by event type and result",
            metrics.payment_events.clone(),
        );
        r.register(
            "origin_webhook_signature_failures",
            "Payment webhook deliveries refused for their signature, by reason",
            metrics.webhook_signature_failures.clone(),
        );
        r.register(
            "origin_holds_active",
            "Orders held right now, awaiting payment (all processes)",
            metrics.holds_active.clone(),
        );
        r.register(
            "origin_holds_overdue",
            "Holds more than 60 s past their expires_at (a stuck expiry)",
            metrics.holds_overdue.clone(),
        );
        r.register(
            "origin_hold_expiries",
            "Holds expired by this process (their units back on sale)",
            metrics.hold_expiries.clone(),
        );
        r.register(
            "origin_hold_expiry_lag_seconds",
            "From a hold's expires_at to the write of its expiry",
            metrics.expiry_lag.clone(),
        );
        r.register(
            "origin_returns",
            "Orders whose units this process put back on sale, by reason",
            metrics.returns.clone(),
        );
        r.register(
            "origin_refund_due",
            "Payments that arrived after their hold expired when no unit could be taken again",
            metrics.refund_due.clone(),
        );
        (metrics, registry)
    }

    /// Counts one verified payment webhook delivery.
    pub fn count_payment_event(&self, kind: &'static str, result: &'static str) {
        self.payment_events
            .get_or_create(&PaymentEventLabels {
                r#type: kind,
                result,
            })
            .inc();
    }

    /// Counts one payment webhook delivery refused for its signature.
    pub fn count_webhook_signature_failure(&self, reason: &'static str) {
        self.webhook_signature_failures
            .get_or_create(&SignatureFailureLabels { reason })
            .inc();
    }

    /// Counts `n` orders whose units went back on sale for `reason`.
    pub fn count_return(&self, reason: &'static str, n: u64) {
        self.returns
            .get_or_create(&ReturnLabels { reason })
            .inc_by(n);
    }

    /// Counts one connection closed by the server for `reason`.
    pub fn count_close(&self, reason: &'static str) {
        self.http_closed
            .get_or_create(&CloseLabels { reason })
            .inc();
    }

    /// Counts one reload of the HTTPS listener's TLS files: `loaded` or `failed`.
    pub fn count_tls_reload(&self, result: &'static str) {
        self.tls_reloads
            .get_or_create(&TlsReloadLabels { result })
            .inc();
    }

    /// Counts one answer to a purchase request. The series is looked up in the family (a
    /// hashed label, an allocated `String`) on its first use only; later answers with the same
    /// outcome count through the resolved handle.
    pub fn count_outcome(&self, outcome: &'static str) {
        self.outcome_handles.inc(
            |known| std::ptr::eq(*known, outcome) || *known == outcome,
            || {
                let counter = self.purchases.get_or_create(&OutcomeLabels {
                    outcome: outcome.to_owned(),
                });
                (outcome, counter.clone())
            },
        );
    }

    /// Counts a verified edge signature under its scheme and key id (resolved once per scheme
    /// and key, as [`Metrics::count_outcome`]).
    pub fn count_signature(&self, verified: &shared::signing::Verified) {
        let (version, kid) = (verified.version, verified.kid.as_str());
        self.signature_handles.inc(
            |(v, k)| *v == version && k == kid,
            || {
                let counter = self.edge_signatures.get_or_create(&SignatureLabels {
                    scheme: version.as_str().to_owned(),
                    kid: kid.to_owned(),
                });
                ((version, kid.to_owned()), counter.clone())
            },
        );
    }
}

/// Counter handles of a labelled family, each resolved from the family once, on its first use
/// (so the exported series are exactly those counted), then found by a scan of a few entries
/// under a read lock: no label hashing, no allocation per count.
#[derive(Debug)]
pub(crate) struct Handles<K> {
    resolved: std::sync::RwLock<Vec<(K, Counter)>>,
}

impl<K> Default for Handles<K> {
    fn default() -> Self {
        Self {
            resolved: std::sync::RwLock::new(Vec::new()),
        }
    }
}

impl<K> Handles<K> {
    /// Increments the handle whose key `matches`, resolving it with `resolve` the first time.
    fn inc(&self, matches: impl Fn(&K) -> bool, resolve: impl FnOnce() -> (K, Counter)) {
        {
            let resolved = self.resolved.read().unwrap_or_else(|p| p.into_inner());
            if let Some((_, counter)) = resolved.iter().find(|(k, _)| matches(k)) {
                counter.inc();
                return;
            }
        }
        let mut resolved = self.resolved.write().unwrap_or_else(|p| p.into_inner());
        if let Some((_, counter)) = resolved.iter().find(|(k, _)| matches(k)) {
            counter.inc();
            return;
        }
        let (key, counter) = resolve();
        counter.inc();
        resolved.push((key, counter));
    }
}
