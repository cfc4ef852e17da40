//! Prometheus metrics of the lock ([`RedlockMetrics`]), all prefixed `redlock_`. Nodes are
//! labelled by their index in the URL list, never by URL (URLs may carry passwords); the circuit
//! breaker metrics also carry the node's `host:port` (no credentials), for the operator who has
//! to find the dead machine.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Final outcome of one `acquire` call (all its attempts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types)] // label values are the variant names, as exported
pub(crate) enum AcquireResult {
    acquired,
    contended,
    unreachable,
    validity_too_short,
}

/// Labels of `redlock_acquire_total`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct ResultLabel {
    result: AcquireResult,
}

/// Labels of `redlock_node_errors_total`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct NodeLabel {
    /// Index of the node in the URL list.
    node: String,
}

/// Labels of the circuit breaker metrics.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct BreakerLabel {
    /// Index of the node in the URL list.
    node: String,
    /// `host:port` of the node, without credentials.
    addr: String,
}

/// Which way a breaker moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types)] // label values are the variant names, as exported
pub(crate) enum BreakerTo {
    open,
    closed,
}

/// Labels of `redlock_node_breaker_transitions_total`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct TransitionLabel {
    node: String,
    addr: String,
    to: BreakerTo,
}

/// The lock's metrics. Cheap to clone (every metric is an `Arc` inside), so one set can be
/// shared by all clones of a [`Redlock`](crate::Redlock). `Default` gives an unregistered set
/// (for tests and tools).
#[derive(Debug, Clone)]
pub struct RedlockMetrics {
    /// `redlock_acquire_total{result}`: acquire calls by final outcome.
    acquire: Family<ResultLabel, Counter>,
    /// `redlock_acquire_attempts_total`: single attempts, retries included.
    attempts: Counter,
    /// `redlock_acquire_seconds`: time spent in one acquire call, whatever its outcome.
    acquire_seconds: Histogram,
    /// `redlock_node_errors_total{node}`: per-node timeouts and errors.
    node_errors: Family<NodeLabel, Counter>,
    /// `redlock_extend_failures_total`: extends that did not extend the lease.
    extend_failures: Counter,
    /// `redlock_release_validity_remaining_seconds`: validity left when a lease was released
    /// (zero means the work outlived the lease).
    release_remaining: Histogram,
    /// `redlock_node_breaker_open{node,addr}`: lock clients sharing these metrics whose breaker
    /// for the node is open or half-open (0 or 1 in the origin, which has one client).
    breaker_open: Family<BreakerLabel, Gauge>,
    /// `redlock_node_breaker_transitions_total{node,addr,to="open|closed"}`: breaker openings
    /// (from closed) and closings.
    breaker_transitions: Family<TransitionLabel, Counter>,
    /// `redlock_quorum_lost`: lock clients sharing these metrics that refuse acquires at once
    /// because fewer than a quorum of nodes have been able to vote for longer than the grace
    /// (0 or 1 in the origin), as of the last acquire or readiness check.
    quorum_lost: Gauge,
}

impl Default for RedlockMetrics {
    fn default() -> Self {
        Self {
            acquire: Family::default(),
            attempts: Counter::default(),
            // 0.5 ms .. ~16 s
            acquire_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            node_errors: Family::default(),
            extend_failures: Counter::default(),
            // 1 ms .. ~33 s
            release_remaining: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            breaker_open: Family::default(),
            breaker_transitions: Family::default(),
            quorum_lost: Gauge::default(),
        }
    }
}

impl RedlockMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        // prometheus-client appends `_total` to counters.
        registry.register(
            "redlock_acquire",
            "Redlock acquire calls by final result",
            metrics.acquire.clone(),
        );
        registry.register(
            "redlock_acquire_attempts",
            "Redlock acquire attempts, retries included",
            metrics.attempts.clone(),
        );
        registry.register(
            "redlock_acquire_seconds",
            "Time spent in one Redlock acquire call, whatever its result",
            metrics.acquire_seconds.clone(),
        );
        registry.register(
            "redlock_node_errors",
            "Redlock per-node errors and timeouts, by node index",
            metrics.node_errors.clone(),
        );
        registry.register(
            "redlock_extend_failures",
            "Redlock extends that failed",
            metrics.extend_failures.clone(),
        );
        registry.register(
            "redlock_release_validity_remaining_seconds",
            "Validity left on a Redlock lease when it was released",
            metrics.release_remaining.clone(),
        );
        registry.register(
            "redlock_node_breaker_open",
            "Redlock clients whose circuit breaker for the node is open (node skipped)",
            metrics.breaker_open.clone(),
        );
        registry.register(
            "redlock_node_breaker_transitions",
            "Redlock node circuit breaker openings and closings",
            metrics.breaker_transitions.clone(),
        );
        registry.register(
            "redlock_quorum_lost",
            "Redlock clients refusing acquires at once: fewer than a quorum of nodes could vote for longer than the grace",
            metrics.quorum_lost.clone(),
        );
        metrics
    }

    /// A client started (`true`) or stopped refusing acquires for a known quorum loss.
    pub(crate) fn quorum_loss_changed(&self, lost: bool) {
        if lost {
            self.quorum_lost.inc();
        } else {
            self.quorum_lost.dec();
        }
    }

    /// Makes the node's breaker series exist (at zero) before anything happens to it.
    pub(crate) fn breaker_known(&self, node: &str, addr: &str) {
        let label = BreakerLabel {
            node: node.to_owned(),
            addr: addr.to_owned(),
        };
        let _ = self.breaker_open.get_or_create(&label);
        for to in [BreakerTo::open, BreakerTo::closed] {
            let _ = self.breaker_transitions.get_or_create(&TransitionLabel {
                node: node.to_owned(),
                addr: addr.to_owned(),
                to,
            });
        }
    }

    /// A node whose breaker was open is gone (its lock was dropped): it no longer counts.
    pub(crate) fn breaker_dropped(&self, node: &str, addr: &str) {
        self.breaker_open
            .get_or_create(&BreakerLabel {
                node: node.to_owned(),
                addr: addr.to_owned(),
            })
            .dec();
    }

    /// A breaker opened (`open`) or closed.
    pub(crate) fn breaker_moved(&self, node: &str, addr: &str, open: bool) {
        let label = BreakerLabel {
            node: node.to_owned(),
            addr: addr.to_owned(),
        };
        let gauge = self.breaker_open.get_or_create(&label);
        let to = if open {
            gauge.inc();
            BreakerTo::open
        } else {
            gauge.dec();
            BreakerTo::closed
        };
        self.breaker_transitions
            .get_or_create(&TransitionLabel {
                node: label.node,
                addr: label.addr,
                to,
            })
            .inc();
    }

    pub(crate) fn acquire_finished(&self, result: AcquireResult, seconds: f64) {
        self.acquire.get_or_create(&ResultLabel { result }).inc();
        self.acquire_seconds.observe(seconds);
    }

    pub(crate) fn attempt(&self) {
        self.attempts.inc();
    }

    pub(crate) fn node_error(&self, node: &str) {
        // Allocates the label; node errors are rare enough for that not to matter.
        self.node_errors
            .get_or_create(&NodeLabel {
                node: node.to_owned(),
            })
            .inc();
    }

    pub(crate) fn extend_failed(&self) {
        self.extend_failures.inc();
    }

    pub(crate) fn released(&self, remaining_seconds: f64) {
        self.release_remaining.observe(remaining_seconds);
    }
}
