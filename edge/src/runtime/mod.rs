//! The thin adapters between the Workers runtime and the policy modules (wasm32 only). They read
//! requests, call the policy, do the I/O it asks for, and turn [`crate::reply::Reply`] values into
//! responses. Nothing here decides anything a native test could not check in the policy modules.
//!
//! - [`entry`]: the `fetch` event and the route dispatch;
//! - [`purchase`]: `POST /v1/purchases` — stateless checks, the user's gate, the signed forward;
//! - [`orders`]: `GET /v1/orders/{id}` and `POST /v1/orders/{id}/cancel` — token, the user's
//!   `order` bucket, the signed forward;
//! - [`skus`]: `GET /v1/skus/{sku}` and `GET /warmup`, over the Cache API;
//! - [`room`]: `/v1/queue/{sku}` (join, poll, stats) and the purchase's pass check;
//! - [`room_objects`]: the waiting room's shard and coordinator Durable Objects;
//! - [`user_gate`]: the per-user SQLite-backed Durable Object and its client;
//! - [`origin`]: HTTP calls to the origin with a deadline;
//! - [`sku_cache`]: Cache API reads and writes;
//! - [`http`]: settings, clock and `Reply` → `Response`.

mod entry;
mod http;
mod orders;
mod origin;
mod purchase;
mod room;
mod room_objects;
mod sku_cache;
mod skus;
mod user_gate;
