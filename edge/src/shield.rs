//! Answering for the origin when the answer is already known: the sold-out shield and the
//! per-user cap pre-check.
//!
//! The edge keeps [`SkuFacts`] per SKU in the Cache API (so per data center, and deliberately not
//! in a global Durable Object, which would be a hot spot during a sale). The central fact is an
//! *upper bound on the units remaining*: stock only goes down between restocks, so
//! - a warmup sets it to the origin's `stock` (and is the only thing that may raise it, e.g. after
//!   a restock),
//! - a fresh origin view, a 201 (`remaining`) or a 409 `sold_out` for `qty` (so fewer than `qty`
//!   remain) can only lower it.
//!
//! A request for more units than the bound is answered 409 `sold_out` without an origin call. With
//! the bound at 0 the SKU is sold out for everyone until a warmup shows stock again. A lost update
//! between two data-center writers can only leave a bound too high, which costs an origin call but
//! never a wrong answer: the origin stays the authority.

use serde::{Deserialize, Serialize};
use shared::{ErrorCode, SkuView};

/// What the edge knows about one SKU's sale.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkuFacts {
    /// Upper bound on the units remaining, if known.
    pub stock_bound: Option<i64>,
    /// The sale's per-user cap, if known.
    pub max_per_user: Option<i64>,
}

impl SkuFacts {
    /// Facts from a warmup: authoritative, may raise the bound.
    pub fn from_warmup(view: &SkuView) -> Self {
        Self {
            stock_bound: Some(view.stock.max(0)),
            max_per_user: Some(i64::from(view.max_per_user)),
        }
    }

    /// Folds in a view freshly fetched from the origin outside a warmup: the cap is taken, the
    /// bound only lowered.
    #[must_use]
    pub fn with_fresh_view(self, view: &SkuView) -> Self {
        Self {
            stock_bound: Some(lower(self.stock_bound, view.stock.max(0))),
            max_per_user: Some(i64::from(view.max_per_user)),
        }
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
        let facts = SkuFacts::from_warmup(&view(0, 1));
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
    fn only_a_warmup_raises_the_bound() {
        let sold_out = SkuFacts::from_warmup(&view(10, 2)).after_purchase(0);
        assert_eq!(sold_out.with_fresh_view(&view(5, 2)).stock_bound, Some(0));
        assert_eq!(sold_out.after_sold_out(50).stock_bound, Some(0));
        assert_eq!(SkuFacts::from_warmup(&view(5, 2)).stock_bound, Some(5));
    }

    #[test]
    fn cap_precheck_counts_units_already_bought() {
        let facts = SkuFacts::from_warmup(&view(100, 3));
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
        assert_eq!(SkuFacts::from_warmup(&view(-4, 1)).stock_bound, Some(0));
    }
}
