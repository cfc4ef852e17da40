//! What every handler reaches ([`AppState`]): the services, the pool, the lock, the metrics and
//! the credentials, built once by `crate::app` and handed to each request by axum's `State`
//! extractor.

use std::sync::Arc;

use prometheus_client::registry::Registry;
use shared::{BearerTokens, SecretRing};
use sqlx::PgPool;

use super::readiness::Readiness;
use super::reads::ReadGate;
use crate::metrics::Metrics;
use crate::openapi::ServedDoc;
use crate::orders::OrderService;
use crate::pseudonym::Pseudonyms;
use crate::purchase::PurchaseService;
use redlock::Redlock;

/// What every handler can reach: ONE `Arc`, so a request's `State` extractor clones (and drops)
/// one pointer, not one per shared part. Reads like the parts it holds ([`SharedState`]).
#[derive(Debug, Clone)]
pub struct AppState(Arc<SharedState>);

impl AppState {
    pub fn new(shared: SharedState) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = SharedState;

    fn deref(&self) -> &SharedState {
        &self.0
    }
}

/// The credentials the origin accepts, from the settings.
#[derive(Debug)]
pub struct Credentials {
    /// Keys of the edge's signatures (`EDGE_SHARED_SECRETS` / `EDGE_SHARED_SECRET`).
    pub edge_secrets: SecretRing,
    /// `ACCEPT_SIGNATURE_V1`: whether v1 signatures are still accepted.
    pub accept_signature_v1: bool,
    /// Admin bearer tokens (`ADMIN_TOKENS` / `ADMIN_TOKEN`).
    pub admin_tokens: BearerTokens,
}

/// The parts of [`AppState`].
#[derive(Debug)]
pub struct SharedState {
    pub pool: PgPool,
    pub purchases: PurchaseService,
    /// Payments, cancellations, refunds and expiries of orders.
    pub orders: OrderService,
    /// The payment provider's webhook; `None` without `PAYMENT_WEBHOOK_SECRETS` (404).
    pub payments: Option<crate::payments::PaymentWebhooks>,
    pub lock: Redlock,
    pub metrics: Arc<Metrics>,
    pub registry: Registry,
    /// Edge signature keys and admin tokens.
    pub credentials: Credentials,
    /// Keyed hashes standing for user ids and keys in logs.
    pub pseudonyms: Pseudonyms,
    /// The public reads' share of the database pool.
    pub reads: ReadGate,
    /// `/readyz` probes, one at a time.
    pub readiness: Readiness,
    /// The answer of `GET /openapi.json` ([`document`](super::document), rendered once).
    pub doc: ServedDoc,
}
