//! `edge`: the Flashgate Cloudflare Worker that stands in front of the origin.
//!
//! Shoppers hit the edge; it answers everything it can without the origin and forwards, signed,
//! only the purchase attempts that survive its checks. The crate has two halves:
//!
//! - **Policy** — plain Rust, no runtime, tested natively with `cargo test -p edge`:
//!   [`config`] (typed settings from vars/secrets), [`jwt`] (HS256 shopper tokens),
//!   [`gcra`] + [`ratelimit_fields`] (per-user rate limit and its IETF headers), [`local_limit`]
//!   (the per-instance limits of challenges and the waiting room), [`proof`] and [`network`] (the
//!   bot defences), [`room`] (the waiting room),
//!   [`fingerprint`] + [`idempotency`] (the per-key state machine), [`schedule`] (the sale's start, end and pause, answered from cached facts), [`shield`] (sold-out and
//!   per-user-cap pre-checks, cached SKU facts), [`gate`] (the per-user decision the Durable Object
//!   runs), [`purchase`] (request validation in contract order), [`cache_policy`], [`routes`], [`url_parts`],
//!   [`warmup`], [`orders`] (a shopper's own orders: view and cancel), `openapi` (the API description, native only), [`forward`] (signed forwarding and origin answers), [`protocol`] (worker ↔ Durable Object messages), [`request_id`] (`Flashgate-Request-Id`), [`trace_context`] (the W3C `traceparent`/`tracestate` forwarded to the origin), [`session`] (the shopper credential: Bearer header or session cookie under the CSRF defence), [`sale_page`] (`GET /sale/{sku}` and its Content-Security-Policy), [`http_date`] (the `Date` header) and [`reply`] (responses as data).
//! - **Runtime adapters** — `runtime`, compiled only for `wasm32`: the fetch entry point, the
//!   per-user SQLite-backed Durable Object, the Cache API and the signed fetch to the origin. They
//!   move bytes between the Workers runtime and the policy modules and decide nothing themselves.

pub mod cache_policy;
pub mod config;
pub mod fingerprint;
pub mod forward;
pub mod gate;
pub mod gcra;
pub mod http_date;
pub mod idempotency;
pub mod jwt;
pub mod local_limit;
pub mod network;
#[cfg(not(target_arch = "wasm32"))]
pub mod openapi;
pub mod orders;
pub mod proof;
pub mod protocol;
pub mod purchase;
pub mod ratelimit_fields;
pub mod reply;
pub mod request_id;
pub mod room;
pub mod routes;
pub mod sale_page;
pub mod schedule;
pub mod session;
pub mod shield;
pub mod trace_context;
pub mod url_parts;
pub mod warmup;

#[cfg(target_arch = "wasm32")]
mod runtime;
