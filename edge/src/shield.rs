//! Answering for the origin when the answer is already known: the sold-out shield and the
//! per-user cap pre-check.
//!
//! The edge keeps [`SkuFacts`] per SKU in the Cache API (so per data center, and deliberately not
//! in a global Durable Object, which would be a hot spot during a sale). The central fact is an
//! *upper bound on the units remaining*. Stock falls with every sale and rises with a restock or
//! a **return** (an expired hold, a cancellation, a refund with restock), so
//! - a warmup sets it to the origin's `stock`, and a fresh origin view (a `GET /v1/skus/{sku}`
//!   cache miss, or the purchase path's refresh below) showing more stock than the bound raises it
//!   to that stock; each raise records its instant in [`SkuFacts::raised_ms`], and every origin
//!   view folded in records its instant in [`SkuFacts::viewed_ms`];
//! - a 201 whose `remaining` is above the bound (units came back since the bound was learned)
//!   raises it too, as a view would: raising is always safe — a bound too high only costs origin
//!   calls, the origin stays the authority — and the raise records its instant, so answers to
//!   requests sent earlier (which may have been decided before the return) cannot lower it again;
//! - a 201 (`remaining`) or a 409 `sold_out` for `qty` (so fewer than `qty` remain) lowers it, and
//!   only if it answers a request **sent after** the last raise ([`SkuFacts::lowered_by`]): an
//!   answer to a request sent earlier may have been decided before the restock or return that the
//!   raise saw, so it says nothing about the current sale. Replayed origin answers
//!   (`Idempotent-Replayed: true`) never lower (nor raise) it: they repeat a decision of the past
//!   (`crate::forward::learn`).
//!   A lowering that leaves the bound at or above `Quantity::MAX` (the most a purchase may ask
//!   for) is not written: such a bound refuses nothing, before or after, so a sale with plenty of
//!   stock costs its purchases no Cache API write ([`SkuFacts::only_lowered_above_any_qty`]).
//!
//! A request for more units than the bound is answered 409 `sold_out` without an origin call —
//! but only while the bound is **fresh**: confirmed by an origin view less than
//! `SKU_CACHE_TTL_SECS` ago ([`SkuFacts::needs_refresh`]). A refusing bound that is older makes
//! the purchase path fetch the view from the origin first (one fetch per data center and period:
//! the first such purchase claims the refresh with [`SkuFacts::refresh_claimed`] before it
//! fetches), so units that come back (an expired hold, a cancellation, a refund) reopen the shield
//! within `SKU_CACHE_TTL_SECS` without a warmup, even when nobody views the SKU. A bound that lets
//! the request through needs no freshness: the origin decides.
//!
//! A shield answer is not the origin's decision, so it is never stored with the shopper's key
//! (`crate::gate`): a retry is checked again. The Cache API has no compare-and-set: a lower bound
//! written by a purchase that read the facts just before a warmup wrote them can overwrite that
//! warmup (a window of one cache round trip); the next refresh, warmup or view miss repairs it, and
//! a bound that is too high only costs origin calls.

use serde::{Deserialize, Serialize};
use shared::{ErrorCode, NetworkLimits, ProofOfWork, Quantity, Schedule, SkuView, WaitingRoom};

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
    /// When an origin view (warmup, view miss, purchase-path refresh) last confirmed the bound,
    /// unix ms of this data center's clock; a refusing bound older than `SKU_CACHE_TTL_SECS` is
    /// refreshed before it answers ([`SkuFacts::needs_refresh`]). Absent in facts cached before
    /// it existed, or learned from purchase answers only: such a bound is refreshed before it
    /// refuses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub viewed_ms: Option<i64>,
    /// The sale's schedule as the origin last showed it (a view, or a `409 not_started` /
    /// `sale_ended` / `sale_paused` answer), if known; `crate::schedule` answers from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    /// The sale's waiting room as the last origin view showed it; `None`: no view folded in yet
    /// (facts cached before it existed, or learned from purchase answers only), so the purchase
    /// path asks for the view before deciding whether a pass is needed (`crate::room`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub room: Option<RoomFact>,
    /// The sale's bot defences as the last origin view showed them; `None`: no view folded in
    /// since they existed, so the purchase and queue paths ask for the view before deciding
    /// whether a proof of work or a network bound applies (`crate::proof`, `crate::network`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defences: Option<Defences>,
}

/// Whether a sale has a waiting room, as an origin view showed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomFact {
    pub waiting_room: Option<RoomSetting>,
}

impl RoomFact {
    pub fn of(view: &SkuView) -> Self {
        Self {
            waiting_room: view.waiting_room.map(RoomSetting::from),
        }
    }
}

/// A waiting room's setting as the facts keep it: the overbook in integer hundredths, so the
/// Worker never formats a float (the view's `overbook` is a JSON number; writing one would pull
/// a float printer into the Worker for this field alone). Facts cached before the overbook
/// existed read with the default, 1.5.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomSetting {
    pub admit_per_minute: u32,
    pub pass_secs: u32,
    #[serde(default = "default_overbook")]
    pub overbook_hundredths: u16,
}

fn default_overbook() -> u16 {
    shared::Overbook::DEFAULT.hundredths()
}

impl From<WaitingRoom> for RoomSetting {
    fn from(room: WaitingRoom) -> Self {
        Self {
            admit_per_minute: room.admit_per_minute,
            pass_secs: room.pass_secs,
            overbook_hundredths: room.overbook.hundredths(),
        }
    }
}

/// A sale's bot defences, as an origin view showed them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Defences {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof_of_work: Option<ProofOfWork>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_limits: Option<NetworkLimits>,
}

impl Defences {
    pub fn of(view: &SkuView) -> Self {
        Self {
            proof_of_work: view.proof_of_work,
            network_limits: view.network_limits,
        }
    }
}

impl SkuFacts {
    /// Facts from a warmup whose view arrived at `now_ms`: authoritative, may raise the bound.
    pub fn from_warmup(view: &SkuView, now_ms: i64) -> Self {
        Self {
            stock_bound: Some(view.stock.max(0)),
            max_per_user: Some(i64::from(view.max_per_user)),
            raised_ms: Some(now_ms),
            viewed_ms: Some(now_ms),
            schedule: Some(view.schedule()),
            room: Some(RoomFact::of(view)),
            defences: Some(Defences::of(view)),
        }
    }

    /// Folds in a view freshly fetched from the origin outside a warmup, requested at `sent_ms`
    /// and arrived at `now_ms`. More stock than the bound (a restock) raises the bound: always
    /// safe, a bound too high only costs origin calls. Otherwise the view is an answer like a
    /// purchase's: it lowers the bound and sets the cap only if it was requested after the last
    /// raise ([`SkuFacts::lowered_by`]). Either way, a view requested after the last raise
    /// confirms the bound: [`SkuFacts::viewed_ms`] becomes `now_ms`, and its schedule replaces the
    /// one known.
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
                viewed_ms: Some(now_ms),
                schedule: Some(view.schedule()),
                room: Some(RoomFact::of(view)),
                defences: Some(Defences::of(view)),
            };
        }
        if !current {
            // An older view still tells whether there is a room, when nothing else did.
            return Self {
                room: self.room.or(Some(RoomFact::of(view))),
                defences: self.defences.or(Some(Defences::of(view))),
                ..self
            };
        }
        Self {
            stock_bound: Some(stock),
            max_per_user: Some(cap),
            viewed_ms: Some(now_ms),
            schedule: Some(view.schedule()),
            room: Some(RoomFact::of(view)),
            defences: Some(Defences::of(view)),
            ..self
        }
    }

    /// Whether the bound would refuse `qty` units but is too old to: no origin view confirmed it
    /// in the last `ttl_ms` (`SKU_CACHE_TTL_SECS`). Units may have come back since (an expired
    /// hold, a cancellation, a refund with restock), so the purchase path fetches the view first.
    pub fn needs_refresh(&self, qty: u32, now_ms: i64, ttl_ms: i64) -> bool {
        let refuses = self.stock_bound.is_some_and(|bound| i64::from(qty) > bound);
        refuses
            && self
                .viewed_ms
                .is_none_or(|viewed| now_ms.saturating_sub(viewed) >= ttl_ms)
    }

    /// The facts a purchase writes when it starts a refresh at `now_ms`: the same bound, marked
    /// as viewed now, so the other purchases of this data center keep using it for one more period
    /// instead of fetching the view too. If the refresh fails (the origin is down), the bound
    /// stays as it was for that period: the origin could not have sold anything anyway.
    #[must_use]
    pub fn refresh_claimed(self, now_ms: i64) -> Self {
        Self {
            viewed_ms: Some(now_ms),
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

    /// A waiting room admitted a shopper while its coordinator read `remaining` units from the
    /// origin's view (issue 36): a bound below that is raised to it (units came back: a restock or
    /// a return the room saw first), recording the raise, so the pass it just gave is not refused
    /// `sold_out` by a stale bound. `None` when nothing changes (raising only: never lowers).
    #[must_use]
    pub fn raised_by_room(self, remaining: i64, now_ms: i64) -> Option<Self> {
        self.stock_bound
            .is_some_and(|bound| remaining > bound)
            .then_some(Self {
                stock_bound: Some(remaining),
                raised_ms: Some(now_ms),
                ..self
            })
    }

    /// The origin sold units and reported `remaining`; the answer arrived at `now_ms`. Below the
    /// bound it lowers it; above the bound (units came back since the bound was learned: a
    /// return or a restock) it raises it, as a fresh view would, and records the raise.
    #[must_use]
    pub fn after_purchase(self, remaining: i64, now_ms: i64) -> Self {
        let remaining = remaining.max(0);
        if self.stock_bound.is_some_and(|bound| remaining > bound) {
            return Self {
                stock_bound: Some(remaining),
                raised_ms: Some(now_ms),
                ..self
            };
        }
        Self {
            stock_bound: Some(lower(self.stock_bound, remaining)),
            ..self
        }
    }
}

impl SkuFacts {
    /// Whether these facts, learned from an origin answer, differ from `before` only by a lower
    /// bound that still admits every quantity a purchase may ask for ([`Quantity::MAX`]), as
    /// `before` did: no answer of the shield could change, so the purchase path does not spend a
    /// Cache API read and write on it (`crate::forward::learn`). A raise, a new cap or schedule,
    /// and any bound below `Quantity::MAX` are always written.
    pub fn only_lowered_above_any_qty(&self, before: &SkuFacts) -> bool {
        let admits_any_qty =
            |bound: Option<i64>| bound.is_some_and(|b| b >= i64::from(Quantity::MAX));
        admits_any_qty(self.stock_bound)
            && admits_any_qty(before.stock_bound)
            && self.stock_bound <= before.stock_bound
            && Self {
                stock_bound: before.stock_bound,
                ..*self
            } == *before
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
            held: 0,
            max_per_user,
            starts_at: None,
            ends_at: None,
            paused: false,
            waiting_room: None,
            proof_of_work: None,
            network_limits: None,
        }
    }

    #[test]
    fn nothing_known_passes() {
        assert_eq!(decide(&SkuFacts::default(), 1_000, 100), Shield::Pass);
    }

    #[test]
    fn a_room_reading_only_raises_the_bound() {
        let sold_out = SkuFacts::from_warmup(&view(0, 5), 0);
        let raised = sold_out.raised_by_room(2, 7).expect("raised");
        assert_eq!((raised.stock_bound, raised.raised_ms), (Some(2), Some(7)));
        assert_eq!(decide(&raised, 0, 1), Shield::Pass);
        assert_eq!(
            raised.raised_by_room(2, 9),
            None,
            "the same: nothing to write"
        );
        assert_eq!(raised.raised_by_room(1, 9), None, "never lowers");
        assert_eq!(
            SkuFacts::default().raised_by_room(3, 1),
            None,
            "no bound, nothing refused"
        );
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
        let facts = facts.after_purchase(0, 0);
        assert_eq!(decide(&facts, 0, 1), Shield::Answer(ErrorCode::SoldOut));
    }

    #[test]
    fn origin_views_raise_the_bound_and_they_record_when() {
        let sold_out = SkuFacts::from_warmup(&view(10, 2), 1_000).after_purchase(0, 1_100);
        assert_eq!(sold_out.stock_bound, Some(0));
        assert_eq!(sold_out.after_sold_out(50).stock_bound, Some(0));
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
                viewed_ms: Some(3_000),
                schedule: Some(Schedule::default()),
                room: Some(RoomFact { waiting_room: None }),
                defences: Some(Defences::default()),
            }
        );
        // Less stock, requested after the last raise: lowers, and is not a raise.
        let lower = warm.with_fresh_view(&view(4, 1), 2_001, 4_000);
        assert_eq!(
            (
                lower.stock_bound,
                lower.max_per_user,
                lower.raised_ms,
                lower.viewed_ms
            ),
            (Some(4), Some(1), Some(2_000), Some(4_000))
        );
        // The same stock: nothing changes but the confirmation.
        assert_eq!(
            warm.with_fresh_view(&view(5, 2), 2_001, 4_000),
            warm.refresh_claimed(4_000)
        );
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
            serde_json::to_string(&SkuFacts::default().after_purchase(2, 0)).expect("json"),
            r#"{"stock_bound":2,"max_per_user":null}"#
        );
    }

    #[test]
    fn a_201_above_the_bound_raises_it_as_a_return_and_records_the_raise() {
        // Sold out at 2,000 ms; then a hold expired at the origin and a purchase that got through
        // (qty within a bound of 1, say) reports 3 remaining at 6,000 ms.
        let known = SkuFacts::from_warmup(&view(1, 5), 1_000);
        let raised = known.after_purchase(3, 6_000);
        assert_eq!(
            (raised.stock_bound, raised.raised_ms),
            (Some(3), Some(6_000))
        );
        // The confirmation instant is a view's, not an answer's.
        assert_eq!(raised.viewed_ms, Some(1_000));
        // An answer to a request sent before that raise (decided, perhaps, before the return)
        // cannot close the shield again; one sent after it can.
        assert!(!raised.lowered_by(5_999));
        assert!(raised.lowered_by(6_001));
        // Below or at the bound, it lowers (or keeps) without a raise.
        assert_eq!(raised.after_purchase(2, 7_000).raised_ms, Some(6_000));
        assert_eq!(raised.after_purchase(2, 7_000).stock_bound, Some(2));
    }

    #[test]
    fn a_refusing_bound_is_refreshed_once_older_than_the_view_ttl() {
        const TTL: i64 = 5_000;
        // Sold out as a warmup saw it at 1,000 ms.
        let sold_out = SkuFacts::from_warmup(&view(0, 5), 1_000);
        assert_eq!(decide(&sold_out, 0, 1), Shield::Answer(ErrorCode::SoldOut));
        assert!(!sold_out.needs_refresh(1, 1_000, TTL));
        assert!(!sold_out.needs_refresh(1, 5_999, TTL), "fresh: answered");
        assert!(sold_out.needs_refresh(1, 6_000, TTL), "a TTL old: refresh");
        assert!(sold_out.needs_refresh(1, i64::MAX, TTL));
        // A bound that lets the request through needs no refresh: the origin decides.
        let some = SkuFacts::from_warmup(&view(3, 5), 1_000);
        assert!(!some.needs_refresh(3, 60_000, TTL));
        assert!(some.needs_refresh(4, 60_000, TTL), "per quantity");
        // Nothing known: nothing refuses.
        assert!(!SkuFacts::default().needs_refresh(1, 60_000, TTL));
        // A bound learned from answers only (no view yet) is refreshed before it refuses.
        let learned = SkuFacts::default().after_sold_out(1);
        assert!(learned.needs_refresh(1, 0, TTL));

        // The refresh: the first purchase claims it, so the others keep answering for a period.
        let claimed = sold_out.refresh_claimed(6_000);
        assert_eq!(claimed.stock_bound, Some(0));
        assert!(!claimed.needs_refresh(1, 6_001, TTL));
        // Its view shows the unit that came back (an expired hold, a cancellation): the shield
        // opens, without a warmup.
        let reopened = claimed.with_fresh_view(&view(1, 5), 6_000, 6_050);
        assert_eq!(decide(&reopened, 0, 1), Shield::Pass);
        assert_eq!(
            (reopened.stock_bound, reopened.raised_ms, reopened.viewed_ms),
            (Some(1), Some(6_050), Some(6_050))
        );
        // Still sold out: confirmed, answered at the edge for another period.
        let still = claimed.with_fresh_view(&view(0, 5), 6_000, 6_050);
        assert_eq!(decide(&still, 0, 1), Shield::Answer(ErrorCode::SoldOut));
        assert!(!still.needs_refresh(1, 11_049, TTL));
        assert!(still.needs_refresh(1, 11_050, TTL));
        // Facts cached before `viewed_ms` existed read as never viewed: refreshed before they
        // refuse, and written back as before until then.
        let legacy: SkuFacts =
            serde_json::from_str(r#"{"stock_bound":0,"max_per_user":1,"raised_ms":5}"#)
                .expect("old facts");
        assert!(legacy.needs_refresh(1, 6, TTL));
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
