//! `shared`: everything that crosses the Flashgate edge ↔ origin wire, and nothing else.
//!
//! - [`domain`]: newtypes that parse once at the boundary (`Sku`, `UserId`, `Quantity`,
//!   `IdempotencyKey`); holding one means it is valid.
//! - [`wire`]: the purchase and view bodies of the HTTP contract (v1); [`sku_put`]: the admin
//!   `PUT`'s body; [`body`]: why a body is refused, and the field readers they share.
//! - [`order_status`]: the states of an order and their rules (`OrderStatus`).
//! - [`orders`]: the order view and the refund body.
//! - [`timestamp`]: an RFC 3339 instant (`Timestamp`), parsed once, kept as unix milliseconds.
//! - [`schedule`]: a sale's schedule (`Schedule`) and whether it is open at `now`.
//! - [`room`]: a sale's waiting room setting (`WaitingRoom`).
//! - [`defence`]: a sale's bot defences (`ProofOfWork`, `NetworkLimits`).
//! - [`problem`]: the stable error `code`s and the RFC 9457 `application/problem+json` body.
//! - [`signing`]: the `Flashgate-Signature` HMAC schemes (v1, v2) the edge signs with and the
//!   origin verifies.
//! - [`secrets`]: rotatable secrets parsed once from configuration (`KeyId`, `SecretRing`,
//!   `BearerTokens`), shared by the origin and the edge.
//! - [`headers`]: the header names of the contract.
//!
//! The crate is plain Rust with no I/O and no clock (callers pass `now`), so it builds for the
//! host and for `wasm32-unknown-unknown` alike.

pub mod body;
pub mod defence;
pub mod domain;
pub mod headers;
pub mod order_status;
pub mod orders;
pub mod problem;
pub mod room;
pub mod schedule;
pub mod secrets;
pub mod signing;
pub mod sku_put;
pub mod timestamp;
pub mod wire;

pub use defence::{NetworkLimits, PowAlgorithm, ProofOfWork};
pub use domain::{DomainError, IdempotencyKey, Quantity, Sku, UserId};
pub use orders::{OrderStatus, OrderView, RefundRequest};
pub use problem::{ErrorCode, Problem};
pub use room::{Overbook, WaitingRoom};
pub use schedule::{Closed, PAUSED_RETRY_AFTER_SECS, Schedule, Timestamp, Update};
pub use secrets::{BearerTokens, KeyId, SecretRing, SecretsError};
pub use sku_put::{ScheduleUpdate, SkuPut, SkuUpsert};
pub use wire::{PurchaseRequest, PurchaseResponse, SkuView};
