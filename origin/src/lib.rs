//! Flashgate origin: decides flash-sale purchase attempts forwarded by the edge — exactly once,
//! never overselling, with a clear answer.
//!
//! The purchase path in one read: [`routes`] (`POST /v1/purchases`) → parse ([`body`], `routes`'
//! extractors, `shared`) → per-SKU combiner ([`purchase`]) → Redlock lease ([`redlock`]) → one transaction
//! ([`store::decide_batch`]) → answer. The HTTP server itself (connection cap, timeouts) is
//! `server`.

pub mod app;
pub mod body;
pub mod decision;
pub mod hold_queue;
pub mod lease;
pub mod metrics;
pub mod openapi;
pub mod orders;
pub mod payments;
pub mod problem;
pub mod pseudonym;
pub mod purchase;
pub mod reconcile;
pub mod routes;
pub(crate) mod server;
pub mod settings;
pub mod store;
pub mod telemetry;
pub mod tls;

pub use app::Application;
pub use settings::Settings;
