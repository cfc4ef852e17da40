//! The waiting room (issue 17): `POST /v1/queue/{sku}` (join), `GET /v1/queue/{sku}` (poll) and
//! the `Flashgate-Pass` check of `POST /v1/purchases`, for a SKU whose view carries a
//! `waiting_room`. The design and its numbers are in `docs/waiting-room.md`; in short:
//!
//! - a join goes to one of [`SHARDS`] shard objects (by a hash of the user, [`order::shard_of`]),
//!   which stores it once (join instant, sequence, the pre-queue lottery ticket
//!   [`order::ticket`]) and gives it a rank in the shard's own order; the worker signs that as a
//!   receipt ([`pass::Receipt`]) the shopper sends back when polling;
//! - a coordinator object, run by its alarm every [`admission::TICK_MS`] and never by a shopper's
//!   request, pulls the shards' next members and publishes the admission state
//!   ([`admission::RoomState`]): who is next (a window of admission slots over the total order),
//!   and how many each shard has had admitted. Workers cache it for a second in the Cache API;
//! - a poll is answered from the receipt and the cached state ([`admission::RoomState::status`]),
//!   with no Durable Object call on a cache hit; when admitted, it carries a pass
//!   ([`pass::Pass`]) bound to the user, the SKU and an expiry, HMAC-signed with `ROOM_SECRETS`;
//! - a purchase of such a SKU needs a valid pass, checked in the worker before the user's object.
//!
//! Everything here is plain Rust, tested natively; `runtime::room` and `runtime::room_objects`
//! are the adapters.

pub mod admission;
pub mod answer;
pub mod order;
pub mod pass;
pub mod protocol;

/// Shard objects per room: joins and fallback polls spread over them.
pub const SHARDS: u32 = 32;
/// The header of a purchase that carries its pass.
pub const PASS_HEADER: &str = "flashgate-pass";
/// The header of a poll (or purchase) that carries its join receipt.
pub const RECEIPT_HEADER: &str = "flashgate-queue-receipt";
