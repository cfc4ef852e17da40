//! The order events' Prometheus metrics, registered in the origin's registry beside
//! `crate::metrics` (served by `GET /metrics`; alerts in deploy/prometheus/alerts.yml, the
//! dashboard's "Order events" row).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// `origin_events_total{type}`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeLabels {
    pub r#type: String,
}

/// A webhook endpoint's series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    /// The endpoint's id.
    pub endpoint: String,
}

/// `origin_webhook_deliveries_total{endpoint,result}`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeliveryLabels {
    pub endpoint: String,
    /// `delivered`, `failed` (an answer other than 2xx), `timeout`, `unreachable` (no answer),
    /// `deferred` (429/503 with `Retry-After`: no attempt spent), `gone` (410).
    pub result: &'static str,
}

/// `origin_webhook_endpoints_disabled_total{reason}`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DisabledLabels {
    /// `failing` (still failing after the last retry) or `gone` (answered 410).
    pub reason: &'static str,
}

/// Every metric of the order events.
#[derive(Debug)]
pub struct EventMetrics {
    /// `origin_events_total{type}`: events that entered the feed, counted once across the
    /// processes (by the one whose sequencer numbered them).
    pub events: Family<TypeLabels, Counter>,
    /// `origin_event_feed_lag_seconds`: from an event's change to its commit number (when the
    /// feed shows it).
    pub feed_lag: Histogram,
    /// `origin_webhook_pending{endpoint}`: deliveries not yet acknowledged (read from the
    /// database every few seconds; the same in every process).
    pub pending: Family<EndpointLabels, Gauge>,
    /// `origin_webhook_oldest_pending_seconds{endpoint}`: age of the oldest of them.
    pub oldest_pending: Family<EndpointLabels, Gauge>,
    /// `origin_webhook_endpoint_enabled{endpoint}`: 1 enabled, 0 disabled.
    pub enabled: Family<EndpointLabels, Gauge>,
    /// `origin_webhook_deliveries_total{endpoint,result}`: delivery attempts of this process.
    pub deliveries: Family<DeliveryLabels, Counter>,
    /// `origin_webhook_delivery_lag_seconds{endpoint}`: from an event's change to its 2xx.
    pub delivery_lag: Family<EndpointLabels, Histogram>,
    /// `origin_webhook_endpoints_disabled_total{reason}`: endpoints this process disabled.
    pub disabled: Family<DisabledLabels, Counter>,
    /// `origin_event_stream_appended_total`: events this process appended to the stream.
    pub stream_appended: Counter,
    /// `origin_event_stream_lag_seconds`: from an event's change to its entry in the stream.
    pub stream_lag: Histogram,
    /// `origin_event_stream_errors_total`: failed appends (the Redis cannot be had); retried.
    pub stream_errors: Counter,
}

/// Latency buckets from 10 ms to ~3 days (a webhook retried along its whole schedule).
fn lag() -> Histogram {
    Histogram::new([
        0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 7200.0,
        86_400.0, 259_200.0,
    ])
}

impl EventMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            events: Family::default(),
            feed_lag: lag(),
            pending: Family::default(),
            oldest_pending: Family::default(),
            enabled: Family::default(),
            deliveries: Family::default(),
            delivery_lag: Family::new_with_constructor(lag),
            disabled: Family::default(),
            stream_appended: Counter::default(),
            stream_lag: lag(),
            stream_errors: Counter::default(),
        };
        for r#type in super::wire::TYPES {
            let _ = m.events.get_or_create(&TypeLabels {
                r#type: r#type.to_owned(),
            });
        }
        for reason in ["failing", "gone"] {
            let _ = m.disabled.get_or_create(&DisabledLabels { reason });
        }
        let r = registry;
        r.register(
            "origin_events",
            "Order and SKU events that entered the feed, by type",
            m.events.clone(),
        );
        r.register(
            "origin_event_feed_lag_seconds",
            "From an event's change to the feed showing it",
            m.feed_lag.clone(),
        );
        r.register(
            "origin_webhook_pending",
            "Webhook deliveries not yet acknowledged, by endpoint",
            m.pending.clone(),
        );
        r.register(
            "origin_webhook_oldest_pending_seconds",
            "Age of the oldest webhook delivery not yet acknowledged, by endpoint",
            m.oldest_pending.clone(),
        );
        r.register(
            "origin_webhook_endpoint_enabled",
            "Whether a webhook endpoint is enabled (1) or disabled (0)",
            m.enabled.clone(),
        );
        r.register(
            "origin_webhook_deliveries",
            "Webhook delivery attempts by endpoint and result",
            m.deliveries.clone(),
        );
        r.register(
            "origin_webhook_delivery_lag_seconds",
            "From an event's change to its acknowledged delivery, by endpoint",
            m.delivery_lag.clone(),
        );
        r.register(
            "origin_webhook_endpoints_disabled",
            "Webhook endpoints disabled by the origin, by reason",
            m.disabled.clone(),
        );
        r.register(
            "origin_event_stream_appended",
            "Events appended to the Redis stream",
            m.stream_appended.clone(),
        );
        r.register(
            "origin_event_stream_lag_seconds",
            "From an event's change to its entry in the Redis stream",
            m.stream_lag.clone(),
        );
        r.register(
            "origin_event_stream_errors",
            "Failed appends to the Redis stream (retried)",
            m.stream_errors.clone(),
        );
        m
    }
}
