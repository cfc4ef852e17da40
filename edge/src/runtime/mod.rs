//! The thin adapters between the Workers runtime and the policy modules (wasm32 only). They read
//! requests, call the policy, do the I/O it asks for, and turn [`crate::reply::Reply`] values into
//! responses. Nothing here decides anything a native test could not check in the policy modules.
//!
//! - [`entry`]: the `fetch` event and the route dispatch;
//! - [`purchase`]: `POST /v1/purchases` — stateless checks, then one call to the user's gate, which
//!   sends the signed forward for a claimed key;
//! - [`orders`]: `GET /v1/orders/{id}` and `POST /v1/orders/{id}/cancel` — token, the user's
//!   `order` bucket, the signed forward;
//! - [`skus`]: `GET /v1/skus/{sku}` and `GET /warmup`, over the Cache API;
//! - [`room`]: `/v1/queue/{sku}` (join, poll, stats) and the purchase's pass check;
//! - [`defences`]: `GET /v1/challenge`, and the proof-of-work and network checks of a join or a
//!   purchase;
//! - [`network`]: the instance's knowledge of the networks' counts and the `NetworkLedger` object;
//! - [`spent`]: the spent proofs of work, in the shopper's gate and room shard;
//! - [`sql`]: the objects' SQLite rows as plain values;
//! - [`room_objects`]: the waiting room's shard and coordinator Durable Objects;
//! - [`user_gate`]: the per-user SQLite-backed Durable Object and its client;
//! - [`origin`]: HTTP calls to the origin with a deadline;
//! - [`sku_cache`]: Cache API reads and writes;
//! - [`http`]: settings, clock and `Reply` → `Response`.

mod defences;
mod entry;
mod http;
mod network;
mod orders;
mod origin;
mod purchase;
mod room;
mod room_objects;
mod sku_cache;
mod skus;
mod spent;
mod sql;
mod user_gate;
