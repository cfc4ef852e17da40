//! Answering for the origin when the answer is already known: the sold-out shield and the
//! per-user cap pre-check.
//!
//! The edge keeps [`SkuFacts`] per SKU in the Cache API (so per data center, and deliberately not
//! in a global Durable Object, which would be a hot spot during a sale). The central fact is an
//! *upper bound on the units remaining*: stock only goes down between restocks, so
//! - a warmup sets it to the origin's `stock`, and a fresh origin view (a `GET /v1/skus/{sku}`
//!   cache miss) showing more stock than the bound raises it to that stock (a restock); each
//!   raise records its instant in [`SkuFacts::raised_ms`];
//! - a 201 (`remaining`) or a 409 `sold_out` for `qty` (so fewer than `qty` remain) can only
//!   lower it, and only if it answers a request **sent after** the last raise
//!   ([`SkuFacts::lowered_by`]): an answer to a request sent earlier may have been decided before
//!   the restock that the raise saw, so it says nothing about the current sale. Replayed origin
//!   answers (`Idempotent-Replayed: true`) never lower it either: they repeat a decision of the
//!   past (`crate::forward::learn`).
//!
//! A request for more units than the bound is answered 409 `sold_out` without an origin call. With
//! the bound at 0 the SKU is sold out for everyone until a warmup or a fresh view shows stock again.
//! Such an answer is not the origin's decision, so it is never stored with the shopper's key
//! (`crate::gate`): a retry is checked again. The Cache API has no compare-and-set: a lower bound
//! written by a purchase that read the facts just before a warmup wrote them can overwrite that
//! warmup (a window of one cache round trip); the next warmup or view miss repairs it, and a bound
//! that is too high only costs origin calls: the origin stays the authority.

use serde::{Deserialize, Serialize};
use shared::{ErrorCode, SkuView};

/// What the edge knows about one SKU's sale.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkuFacts {
    /// Upper bound on the units remaining, if known.
    pub stock_bound: Option<i64>,
    /// The sale's per-user cap, if known.
    pub max_per_user: Option<i64>,
    /// When the bound was last raised or first learned from an origin view (a warmup, or a fresh
    /// view with more stock), unix ms of this data center's clock. Absent in facts cached before
    /// it existed (`serde(default)`): then every answer may lower the bound, as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raised_ms: Option<i64>,
}

impl SkuFacts {
    /// Facts from a warmup whose view arrived at `now_ms`: authoritative, may raise the bound.
    pub fn from_warmup(view: &SkuView, now_ms: i64) -> Self {
        Self {
            stock_bound: Some(view.stock.max(0)),
            max_per_user: Some(i64::from(view.max_per_user)),
            raised_ms: Some(now_ms),
        }
    }

    /// Folds in a view freshly fetched from the origin outside a warmup, requested at `sent_ms`
    /// and arrived at `now_ms`. More stock than the bound (a restock) raises the bound: always
    /// safe, a bound too high only costs origin calls. Otherwise the view is an answer like a
    /// purchase's: it lowers the bound and sets the cap only if it was requested after the last
    /// raise ([`SkuFacts::lowered_by`]).
    #[must_use]
    pub fn with_fresh_view(self, view: &SkuView, sent_ms: i64, now_ms: i64) -> Self {
        let stock = view.stock.max(0);
        let cap = i64::from(view.max_per_user);
        let current = self.lowered_by(sent_ms);
        if self.stock_bound.is_none_or(|bound| stock > bound) {
            return Self {
                stock_bound: Some(stock),
                max_per_user: if current {
                    Some(cap)
                } else {
                    self.max_per_user.or(Some(cap))
                },
                raised_ms: Some(now_ms),
            };
        }
        if !current {
            return self;
        }
        Self {
            stock_bound: Some(stock),
            max_per_user: Some(cap),
            ..self
        }
    }

    /// Whether an origin answer to a purchase sent at `sent_ms` may lower the bound: only if the
    /// request left after the last raise (a request sent at the same millisecond may have been
    /// decided before the restock that raise saw).
    pub fn lowered_by(&self, sent_ms: i64) -> bool {
        self.raised_ms.is_none_or(|raised| sent_ms > raised)
    }

    /// The origin said `sold_out` to a request for `qty`: fewer than `qty` remain.
    #[must_use]
    pub fn after_sold_out(self, qty: u32) -> Self {
        Self {
            stock_bound: Some(lower(self.stock_bound, i64::from(qty) - 1)),
            ..self
        }
    }

    /// The origin sold units and reported `remaining`.
    #[must_use]
    pub fn after_purchase(self, remaining: i64) -> Self {
        Self {
            stock_bound: Some(lower(self.stock_bound, remaining.max(0))),
            ..self
        }
    }
}

fn lower(bound: Option<i64>, to: i64) -> i64 {
    bound.map_or(to, |b| b.min(to))
}

/// The outcome of the shields for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shield {
    /// Nothing known stops it: ask the origin.
    Pass,
    /// Answer with this code now (409 `sold_out` or 409 `purchase_limit`).
    Answer(ErrorCode),
}

/// Decides the shields for `qty` units, given the SKU's facts and the units this user already
/// bought of it. `sold_out` wins over `purchase_limit`, as at the origin.
pub fn decide(facts: &SkuFacts, bought: i64, qty: u32) -> Shield {
    let qty = i64::from(qty);
    if facts.stock_bound.is_some_and(|bound| qty > bound) {
        return Shield::Answer(ErrorCode::SoldOut);
    }
    if facts
        .max_per_user
        .is_some_and(|cap| bought.saturating_add(qty) > cap)
    {
        return Shield::Answer(ErrorCode::PurchaseLimit);
    }
    Shield::Pass
}

/// The `detail` of a shield answer.
pub fn detail(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::SoldOut => "fewer units remain than requested",
        ErrorCode::PurchaseLimit => "this purchase would exceed the per-user limit for this SKU",
        _ => "answered at the edge",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(stock: i64, max_per_user: i32) -> SkuView {
        SkuView {
            sku: "A".into(),
            name: "A".into(),
            price_cents: 100,
            stock,
            max_per_user,
        }
    }

    #[test]
    fn nothing_known_passes() {
        assert_eq!(decide(&SkuFacts::default(), 1_000, 100), Shield::Pass);
    }

    #[test]
    fn sold_out_is_answered_before_the_cap() {
        let facts = SkuFacts::from_warmup(&view(0, 1), 0);
        assert_eq!(decide(&facts, 5, 1), Shield::Answer(ErrorCode::SoldOut));
    }

    #[test]
    fn the_bound_is_per_quantity() {
        let facts = SkuFacts::default().after_sold_out(3); // fewer than 3 remain
        assert_eq!(decide(&facts, 0, 3), Shield::Answer(ErrorCode::SoldOut));
        assert_eq!(decide(&facts, 0, 2), Shield::Pass);
        let facts = facts.after_purchase(0);
        assert_eq!(decide(&facts, 0, 1), Shield::Answer(ErrorCode::SoldOut));
    }

    #[test]
    fn only_origin_views_raise_the_bound_and_they_record_when() {
        let sold_out = SkuFacts::from_warmup(&view(10, 2), 1_000).after_purchase(0);
        assert_eq!(sold_out.stock_bound, Some(0));
        assert_eq!(sold_out.after_sold_out(50).stock_bound, Some(0));
        assert_eq!(sold_out.after_purchase(7).stock_bound, Some(0));
        // A warmup after a restock: raised, at that instant.
        let warm = SkuFacts::from_warmup(&view(5, 2), 2_000);
        assert_eq!((warm.stock_bound, warm.raised_ms), (Some(5), Some(2_000)));
        // A fresh view with more stock is a restock seen on a cache miss: raised too, at its
        // arrival.
        let fresh = sold_out.with_fresh_view(&view(5, 3), 2_500, 3_000);
        assert_eq!(
            fresh,
            SkuFacts {
                stock_bound: Some(5),
                max_per_user: Some(3),
                raised_ms: Some(3_000),
            }
        );
        // Less stock, requested after the last raise: lowers, and is not a raise.
        let lower = warm.with_fresh_view(&view(4, 1), 2_001, 4_000);
        assert_eq!(
            (lower.stock_bound, lower.max_per_user, lower.raised_ms),
            (Some(4), Some(1), Some(2_000))
        );
        assert_eq!(warm.with_fresh_view(&view(5, 2), 2_001, 4_000), warm);
        // Less stock, but requested before the warmup: it may predate the restock: ignored.
        assert_eq!(warm.with_fresh_view(&view(0, 1), 1_500, 4_000), warm);
        assert_eq!(warm.with_fresh_view(&view(0, 1), 2_000, 4_000), warm);
        // Nothing known yet: the first view is a raise.
        let first = SkuFacts::default().with_fresh_view(&view(0, 1), 4_000, 5_000);
        assert_eq!((first.stock_bound, first.raised_ms), (Some(0), Some(5_000)));
    }

    #[test]
    fn answers_to_requests_sent_before_the_last_raise_do_not_lower() {
        let warm = SkuFacts::from_warmup(&view(5, 2), 2_000);
        assert!(!warm.lowered_by(1_999), "sent before the warmup");
        assert!(
            !warm.lowered_by(2_000),
            "same millisecond: may predate the restock"
        );
        assert!(warm.lowered_by(2_001));
        // Facts cached before `raised_ms` existed: every answer lowers, as before.
        let legacy: SkuFacts =
            serde_json::from_str(r#"{"stock_bound":3,"max_per_user":1}"#).expect("old facts");
        assert_eq!(legacy.raised_ms, None);
        assert!(legacy.lowered_by(i64::MIN));
        // And they still serialize as before when nothing was raised.
        assert_eq!(
            serde_json::to_string(&SkuFacts::default().after_purchase(2)).expect("json"),
            r#"{"stock_bound":2,"max_per_user":null}"#
        );
    }

    #[test]
    fn cap_precheck_counts_units_already_bought() {
        let facts = SkuFacts::from_warmup(&view(100, 3), 0);
        assert_eq!(decide(&facts, 0, 3), Shield::Pass);
        assert_eq!(decide(&facts, 2, 1), Shield::Pass);
        assert_eq!(
            decide(&facts, 2, 2),
            Shield::Answer(ErrorCode::PurchaseLimit)
        );
        assert_eq!(
            decide(&facts, 3, 1),
            Shield::Answer(ErrorCode::PurchaseLimit)
        );
        assert_eq!(
            decide(&facts, i64::MAX, 1),
            Shield::Answer(ErrorCode::PurchaseLimit)
        );
    }

    #[test]
    fn negative_stock_from_a_confused_origin_is_clamped() {
        assert_eq!(SkuFacts::from_warmup(&view(-4, 1), 0).stock_bound, Some(0));
        let known = SkuFacts::from_warmup(&view(3, 1), 0);
        assert_eq!(
            known.with_fresh_view(&view(-4, 1), 1, 2).stock_bound,
            Some(0)
        );
    }
}
