//! Bounds per network at the edge (docs/bot-defence.md): where a SKU's view carries
//! `network_limits`, at most `admissions` shoppers of one network (IPv4 /24, IPv6 /48, from
//! `CF-Connecting-IP` only: [`prefix`]) join its waiting room and at most `units` units are bought
//! by them per window, however many accounts they use. Decided in the worker from what the
//! instance knows ([`ledger::Local`]), counted after the fact in one small Durable Object per SKU
//! and network — no hot object: it hears of successes only. Over the bound: `429 network_limit`
//! with `Retry-After` and `RateLimit` fields ([`answer`]), never stored with an Idempotency-Key.

pub mod answer;
pub mod ledger;
pub mod prefix;

pub use ledger::{
    Admission, Bound, Count, Counted, Key, Kind, Local, Outcome, Place, Refusal, Ticket, Timing,
    Why,
};
pub use prefix::{CONNECTING_IP_HEADER, Network};

use shared::NetworkLimits;

/// The bound of `kind` in `limits`, if it has one.
pub fn bound(limits: &NetworkLimits, kind: Kind) -> Option<Bound> {
    let bound = match kind {
        Kind::Admissions => limits.admissions,
        Kind::Units => limits.units,
    }?;
    Some(Bound {
        bound,
        window_secs: limits.window_secs,
    })
}

/// A shopper's account as a network's slot tells them apart ([`Local`]: one place per account).
pub fn account(user: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    user.hash(&mut h);
    h.finish()
}

/// The name of the ledger object of `sku`'s `network` (`{sku}#{network}`).
pub fn ledger_name(sku: &str, network: &Network) -> String {
    format!("{sku}#{network}")
}
