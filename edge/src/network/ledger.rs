//! Counting a network's admissions and units without a hot Durable Object, and deciding from the
//! count. Two halves:
//!
//! - [`Count`]: what the network's `NetworkLedger` object (one per SKU and network) stores, per
//!   kind: the current window's start and total. It is told only of what happened — a new member
//!   of the room, units the origin sold (a 201) — so it sees at most one call per admission or
//!   purchase of that network, never one per attempt.
//! - [`Local`]: what one Worker instance knows, per SKU, network and kind: the total as the ledger
//!   last told it (after this instance's own last success) and which request of that network holds
//!   its one slot here. A request is let through only if `known + n <= bound` and it holds the
//!   slot; it keeps it until its answer is counted ([`Local::settle`]), or until the slot's
//!   deadline (`Timing::slot_deadline_ms`, the key's in-flight timeout) says it was lost.
//!
//! **Fairness within a network's slot.** A request that finds the slot taken waits for it in the
//! network's line (at most [`Local::MAX_LINE`] places, at most `Timing::max_wait_ms`, then `429`
//! busy), first come first served, and **each account holds at most one place** — the slot or one
//! place in line: an account that already has one is refused busy at once. So one account
//! hammering from a /24 never stands more than once between a neighbour and the slot: the
//! neighbour waits for at most one of its requests (plus the one holding the slot), instead of
//! being refused whenever it found the slot taken (issue 35: 17 % of a neighbour's purchases).
//!
//! **The bound.** Each instance lets through at most one request per network at a time, and after
//! each of its own successes it knows the ledger's total, which includes everything counted before.
//! So an instance can be wrong about the total only by what other instances sold since its own last
//! success, and once the total has reached the bound, each instance lets through at most one more
//! success before it learns that. A network therefore gets at most `bound` plus one request's
//! worth (`qty`, at most the sale's `max_per_user`, for units; one member for admissions) per Worker
//! instance that serves it: one per edge location in flight (`local_model_never_exceeds_…`
//! checks it over random interleavings). A ledger that cannot be reached to count a success is
//! logged and the success counted here only (the bound may then be exceeded by it).

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::Network;

/// What is counted per network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Shoppers who joined the sale's waiting room.
    Admissions,
    /// Units bought (201s).
    Units,
}

impl Kind {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Admissions => "admissions",
            Self::Units => "units",
        }
    }
}

/// A network's count of one kind in its current window, as its ledger object stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Count {
    pub window_start_ms: i64,
    pub total: u32,
}

impl Count {
    /// `stored` after `n` more at `now_ms`, in windows of `window_ms` from a network's first count:
    /// a window that is over starts again at `now_ms`.
    pub fn add(stored: Option<Self>, n: u32, window_ms: i64, now_ms: i64) -> Self {
        match stored {
            Some(c) if now_ms < c.window_start_ms.saturating_add(window_ms) => Self {
                total: c.total.saturating_add(n),
                ..c
            },
            _ => Self {
                window_start_ms: now_ms,
                total: n,
            },
        }
    }

    pub fn window_end_ms(&self, window_ms: i64) -> i64 {
        self.window_start_ms.saturating_add(window_ms)
    }
}

/// The ledger's answer to a count: the total in the window, and when the window ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counted {
    pub total: u32,
    pub window_end_ms: i64,
}

/// Which count a request is decided against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    pub sku: String,
    pub network: Network,
    pub kind: Kind,
}

/// A bound to decide against: at most `bound` per `window_secs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    pub bound: u32,
    pub window_secs: u32,
}

impl Bound {
    fn window_ms(self) -> i64 {
        i64::from(self.window_secs) * 1_000
    }
}

/// How long a network's slot and its line hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// A request that held its network's slot this long is taken as lost (its call hangs, its
    /// worker died before settling): the slot is free again. The key's in-flight timeout, which
    /// outlasts the origin call.
    pub slot_deadline_ms: i64,
    /// A request waits at most this long in its network's line, then is refused busy.
    pub max_wait_ms: i64,
}

impl Timing {
    /// The line's wait: a second, what `Retry-After: 1` used to ask of a busy request.
    pub const MAX_WAIT_MS: i64 = 1_000;

    /// `slot_deadline_ms` with the line's usual wait.
    pub fn with_deadline(slot_deadline_ms: i64) -> Self {
        Self {
            slot_deadline_ms,
            max_wait_ms: Self::MAX_WAIT_MS,
        }
    }
}

/// A request holding a network's slot, or waiting in its line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    id: u64,
    /// The shopper's account ([`super::account`]).
    account: u64,
    since_ms: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Entry {
    /// The total as the ledger last told it (or as counted here).
    known: u32,
    /// When the window of `known` ends; 0: no window known.
    window_end_ms: i64,
    /// The request holding the slot.
    holder: Option<Slot>,
    /// The requests waiting for it, oldest first, one per account.
    line: VecDeque<Slot>,
    /// When a request last came (the least recently used entries are forgotten first).
    last_used_ms: i64,
}

impl Entry {
    /// Forgets what time made stale at `now_ms`: an ended window, a lost holder, waiters that
    /// waited too long.
    fn tidy(&mut self, now_ms: i64, timing: Timing) {
        if self.window_end_ms <= now_ms {
            self.known = 0;
            self.window_end_ms = 0;
        }
        if self
            .holder
            .is_some_and(|h| now_ms.saturating_sub(h.since_ms) >= timing.slot_deadline_ms)
        {
            self.holder = None;
        }
        self.line
            .retain(|w| now_ms.saturating_sub(w.since_ms) <= timing.max_wait_ms);
    }

    fn idle(&self) -> bool {
        self.holder.is_none() && self.line.is_empty()
    }

    fn reset_secs(&self, bound: Bound, now_ms: i64) -> u64 {
        if self.window_end_ms > now_ms {
            u64::try_from((self.window_end_ms - now_ms + 999) / 1_000)
                .unwrap_or(1)
                .max(1)
        } else {
            u64::from(bound.window_secs)
        }
    }

    /// The refusal of `n` against `bound`, if it does not fit what the network may still take.
    fn over(&self, n: u32, bound: Bound, now_ms: i64) -> Option<Refusal> {
        if self.known.saturating_add(n) <= bound.bound {
            return None;
        }
        let remaining = bound.bound.saturating_sub(self.known);
        Some(Refusal {
            remaining,
            reset_secs: self.reset_secs(bound, now_ms),
            why: if remaining == 0 {
                Why::Spent
            } else {
                Why::TooMany
            },
        })
    }

    fn busy(&self, bound: Bound) -> Refusal {
        Refusal {
            remaining: bound.bound.saturating_sub(self.known),
            reset_secs: 1,
            why: Why::Busy,
        }
    }

    /// `slot` takes the slot at `now_ms`; the window starts with the first request of it.
    fn take(&mut self, slot: Slot, bound: Bound, now_ms: i64) {
        self.holder = Some(Slot {
            since_ms: now_ms,
            ..slot
        });
        if self.window_end_ms <= now_ms {
            self.window_end_ms = now_ms.saturating_add(bound.window_ms());
        }
    }
}

/// A request let through: settle it with [`Local::settle`] once its answer is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    pub key: Key,
    pub n: u32,
    /// Which holding of the slot this is (a lost one's late settle does not free its successor's).
    pub id: u64,
}

/// A request's place in its network's line: [`Local::poll`] it, [`Local::leave`] it if it gives
/// up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub key: Key,
    pub id: u64,
}

/// Why a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The network's slot here is taken and its line full, or the request waited its longest.
    Busy,
    /// The network took its whole bound in this window.
    Spent,
    /// The request asks for more than the network may still take (`remaining`, at least 1).
    TooMany,
}

/// A request refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// What the network may still take in this window, as known here.
    pub remaining: u32,
    /// Seconds until the network's window ends (the whole bound is back), or 1 when busy.
    pub reset_secs: u64,
    pub why: Why,
}

impl Refusal {
    /// When the same request may succeed: a busy one in a second, one over a spent bound at the
    /// window's end; one asking for more than is left never sooner than with a smaller `qty`, so
    /// it names no time (it would send the shopper away for the window for nothing).
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self.why {
            Why::Busy | Why::Spent => Some(self.reset_secs),
            Why::TooMany => None,
        }
    }
}

/// What happens to a request at its network's slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// It holds the slot: go on, and settle the ticket.
    Go(Ticket),
    /// It waits in the line: poll again shortly.
    Wait(Place),
    Refused(Refusal),
}

/// How a request let through ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing to count (refused, failed, replayed by the shopper's gate).
    Nothing,
    /// Counted by the ledger.
    Counted(Counted),
    /// A success the ledger could not be told of: counted here only.
    Uncounted,
}

/// One Worker instance's knowledge of the networks' counts (bounded in size).
#[derive(Debug, Default)]
pub struct Local {
    entries: HashMap<Key, Entry>,
    /// The id of the last slot or place handed out.
    last_id: u64,
}

impl Local {
    /// Entries kept at most; past it, those idle whose window ended are dropped, then the least
    /// recently used idle ones: those last used in the oldest eighth of the time since the
    /// oldest one (forgetting a network only makes this instance let one more request of it
    /// through; a network with a request in flight or waiting is never forgotten).
    pub const MAX_ENTRIES: usize = 50_000;
    /// Places in one network's line.
    pub const MAX_LINE: usize = 16;

    fn next_id(&mut self) -> u64 {
        self.last_id = self.last_id.wrapping_add(1);
        self.last_id
    }

    fn make_room(&mut self, key: &Key, now_ms: i64) {
        if self.entries.len() < Self::MAX_ENTRIES || self.entries.contains_key(key) {
            return;
        }
        self.entries
            .retain(|_, e| !e.idle() || e.window_end_ms > now_ms);
        if self.entries.len() < Self::MAX_ENTRIES {
            return;
        }
        // The least recently used idle entries: those last used in the first eighth of the span
        // from the oldest idle entry's last use to now (at least the oldest one).
        let oldest = self
            .entries
            .values()
            .filter(|e| e.idle())
            .map(|e| e.last_used_ms)
            .min();
        if let Some(oldest) = oldest {
            let cut = oldest.saturating_add(now_ms.saturating_sub(oldest) / 8);
            self.entries
                .retain(|_, e| !e.idle() || e.last_used_ms > cut);
        }
    }

    /// May a request of `n` by `account` go on against `bound` at `now_ms`?
    pub fn admit(
        &mut self,
        key: Key,
        account: u64,
        n: u32,
        bound: Bound,
        now_ms: i64,
        timing: Timing,
    ) -> Admission {
        self.make_room(&key, now_ms);
        let id = self.next_id();
        let entry = self.entries.entry(key.clone()).or_default();
        entry.last_used_ms = now_ms;
        entry.tidy(now_ms, timing);
        if let Some(refused) = entry.over(n, bound, now_ms) {
            return Admission::Refused(refused);
        }
        let mine = |s: &Slot| s.account == account;
        if entry.holder.as_ref().is_some_and(mine) || entry.line.iter().any(mine) {
            return Admission::Refused(entry.busy(bound));
        }
        let slot = Slot {
            id,
            account,
            since_ms: now_ms,
        };
        if entry.idle() {
            entry.take(slot, bound, now_ms);
            return Admission::Go(Ticket { key, n, id });
        }
        if entry.line.len() < Self::MAX_LINE {
            entry.line.push_back(slot);
            return Admission::Wait(Place { key, id });
        }
        Admission::Refused(entry.busy(bound))
    }

    /// The request at `place` asks again at `now_ms`: it takes the slot once it is first in line
    /// and the slot is free.
    pub fn poll(
        &mut self,
        place: &Place,
        account: u64,
        n: u32,
        bound: Bound,
        now_ms: i64,
        timing: Timing,
    ) -> Admission {
        let Some(entry) = self.entries.get_mut(&place.key) else {
            return self.admit(place.key.clone(), account, n, bound, now_ms, timing);
        };
        entry.last_used_ms = now_ms;
        entry.tidy(now_ms, timing);
        let Some(at) = entry.line.iter().position(|w| w.id == place.id) else {
            // It waited its longest.
            return Admission::Refused(entry.busy(bound));
        };
        if let Some(refused) = entry.over(n, bound, now_ms) {
            entry.line.remove(at);
            return Admission::Refused(refused);
        }
        if at > 0 || entry.holder.is_some() {
            return Admission::Wait(place.clone());
        }
        if let Some(first) = entry.line.pop_front() {
            entry.take(first, bound, now_ms);
        }
        Admission::Go(Ticket {
            key: place.key.clone(),
            n,
            id: place.id,
        })
    }

    /// The request at `place` gives up waiting (nothing happens if it no longer waits).
    pub fn leave(&mut self, place: &Place) {
        if let Some(entry) = self.entries.get_mut(&place.key) {
            entry.line.retain(|w| w.id != place.id);
        }
    }

    /// Ends `ticket`'s flight with what its answer taught (a success counts even when its slot
    /// was taken as lost meanwhile).
    pub fn settle(&mut self, ticket: &Ticket, outcome: Outcome) {
        let Some(entry) = self.entries.get_mut(&ticket.key) else {
            return;
        };
        if entry.holder.is_some_and(|h| h.id == ticket.id) {
            entry.holder = None;
        }
        match outcome {
            Outcome::Nothing => {}
            Outcome::Counted(c) => {
                entry.known = entry.known.max(c.total);
                if c.window_end_ms != entry.window_end_ms {
                    // The ledger's window (it may have started elsewhere, or again).
                    entry.known = c.total;
                    entry.window_end_ms = c.window_end_ms;
                }
            }
            Outcome::Uncounted => entry.known = entry.known.saturating_add(ticket.n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_700_000_000_000;
    const TIMING: Timing = Timing {
        slot_deadline_ms: 30_000,
        max_wait_ms: 1_000,
    };
    /// Accounts.
    const A: u64 = 1;
    const B: u64 = 2;
    const C: u64 = 3;

    fn key(net: &str) -> Key {
        Key {
            sku: "A".into(),
            network: Network::of(Some(net)),
            kind: Kind::Units,
        }
    }

    fn bound(b: u32) -> Bound {
        Bound {
            bound: b,
            window_secs: 60,
        }
    }

    fn counted(total: u32) -> Outcome {
        Outcome::Counted(Counted {
            total,
            window_end_ms: T + 60_000,
        })
    }

    fn go(a: Admission) -> Ticket {
        match a {
            Admission::Go(t) => t,
            other => panic!("expected Go, got {other:?}"),
        }
    }

    fn refused(a: Admission) -> Refusal {
        match a {
            Admission::Refused(r) => r,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    fn waits(a: Admission) -> Place {
        match a {
            Admission::Wait(p) => p,
            other => panic!("expected a place in line, got {other:?}"),
        }
    }

    #[test]
    fn the_ledger_counts_in_windows_from_the_first_count() {
        let c = Count::add(None, 2, 60_000, T);
        assert_eq!(
            c,
            Count {
                window_start_ms: T,
                total: 2
            }
        );
        let c = Count::add(Some(c), 3, 60_000, T + 59_999);
        assert_eq!(c.total, 5);
        assert_eq!(c.window_end_ms(60_000), T + 60_000);
        let c = Count::add(Some(c), 1, 60_000, T + 60_000);
        assert_eq!(
            c,
            Count {
                window_start_ms: T + 60_000,
                total: 1
            }
        );
    }

    #[test]
    fn one_request_per_network_holds_the_slot_and_the_bound_refuses_until_the_window_ends() {
        let mut local = Local::default();
        let a = go(local.admit(key("10.0.0.1"), A, 2, bound(3), T, TIMING));
        // Same /24, while the first is out: a place in line.
        let place = waits(local.admit(key("10.0.0.2"), B, 1, bound(3), T, TIMING));
        assert_eq!(
            local.poll(&place, B, 1, bound(3), T + 20, TIMING),
            Admission::Wait(place.clone())
        );
        // Another /24 is not affected.
        assert!(matches!(
            local.admit(key("10.0.1.1"), C, 1, bound(3), T, TIMING),
            Admission::Go(_)
        ));
        local.settle(&a, counted(2));
        // The slot is free: the first in line takes it; 2 + 1 fits.
        let b = go(local.poll(&place, B, 1, bound(3), T + 40, TIMING));
        local.settle(&b, counted(3));
        // 3 of 3: refused until the window ends, and told so.
        let over = refused(local.admit(key("10.0.0.3"), C, 1, bound(3), T + 1_000, TIMING));
        assert_eq!(
            (over.why, over.remaining, over.retry_after_secs()),
            (Why::Spent, 0, Some(59))
        );
        // The next window starts afresh.
        assert!(matches!(
            local.admit(key("10.0.0.5"), C, 3, bound(3), T + 60_000, TIMING),
            Admission::Go(_)
        ));
    }

    #[test]
    fn a_failed_purchase_counts_nothing_and_a_missed_success_counts_here() {
        let mut local = Local::default();
        let b = go(local.admit(key("10.0.0.3"), A, 1, bound(2), T, TIMING));
        local.settle(&b, Outcome::Nothing);
        let c = go(local.admit(key("10.0.0.4"), A, 1, bound(2), T + 1, TIMING));
        local.settle(&c, Outcome::Uncounted);
        let d = go(local.admit(key("10.0.0.4"), B, 1, bound(2), T + 2, TIMING));
        local.settle(&d, Outcome::Uncounted);
        assert_eq!(
            refused(local.admit(key("10.0.0.5"), C, 1, bound(2), T + 3, TIMING)).why,
            Why::Spent
        );
    }

    /// Issue 35: a `qty` above what the network may still buy was told "your network bought the
    /// most" with the whole window as `Retry-After`, even when it bought nothing, and forever when
    /// `qty` is above the bound.
    #[test]
    fn a_quantity_above_what_is_left_says_what_is_left_and_names_no_wait() {
        let mut local = Local::default();
        let r = refused(local.admit(key("10.0.0.1"), A, 5, bound(3), T, TIMING));
        assert_eq!((r.why, r.remaining), (Why::TooMany, 3));
        assert_eq!(r.retry_after_secs(), None, "not sent away for the window");
        assert_eq!(
            r.reset_secs, 60,
            "the whole bound is back in a window (RateLimit t)"
        );
        // What is left is bought at once.
        let t = go(local.admit(key("10.0.0.1"), A, 2, bound(3), T, TIMING));
        local.settle(&t, counted(2));
        let r = refused(local.admit(key("10.0.0.1"), A, 2, bound(3), T + 1_000, TIMING));
        assert_eq!(
            (r.why, r.remaining, r.retry_after_secs()),
            (Why::TooMany, 1, None)
        );
        assert!(matches!(
            local.admit(key("10.0.0.1"), A, 1, bound(3), T + 1_000, TIMING),
            Admission::Go(_)
        ));
    }

    /// Issue 35: a request that never finishes must not hold its network's slot forever.
    #[test]
    fn a_slot_held_past_its_deadline_is_free_again_and_its_late_answer_still_counts() {
        let mut local = Local::default();
        let lost = go(local.admit(key("10.0.0.1"), A, 1, bound(5), T, TIMING));
        let before = refused(local.admit(key("10.0.0.2"), A, 1, bound(5), T + 29_999, TIMING));
        assert_eq!(before.why, Why::Busy, "the same account, still held");
        let next = go(local.admit(key("10.0.0.2"), B, 1, bound(5), T + 30_000, TIMING));
        // The lost request's answer arrives after all: counted, but it frees nobody's slot.
        local.settle(&lost, counted(1));
        let c = waits(local.admit(key("10.0.0.3"), C, 3, bound(5), T + 30_001, TIMING));
        assert!(
            matches!(
                local.poll(&c, C, 3, bound(5), T + 30_002, TIMING),
                Admission::Wait(_)
            ),
            "the successor still holds the slot"
        );
        local.settle(&next, counted(2));
        let r = go(local.poll(&c, C, 3, bound(5), T + 30_003, TIMING));
        local.settle(&r, counted(5));
        assert_eq!(
            refused(local.admit(key("10.0.0.3"), C, 1, bound(5), T + 30_003, TIMING)).why,
            Why::Spent
        );
    }

    /// Issue 35: one capped account hammering from a /24 made a neighbour's purchases "busy". Each
    /// account holds at most one place — the slot or one place in line — so the neighbour waits
    /// for at most one of the hammer's requests.
    #[test]
    fn each_account_holds_one_place_so_a_hammering_neighbour_delays_another_by_one_request() {
        let mut local = Local::default();
        let b = bound(100);
        let hammer = |local: &mut Local, now| local.admit(key("10.0.0.1"), A, 1, b, now, TIMING);
        let h1 = go(hammer(&mut local, T));
        // The neighbour queues behind the one request holding the slot…
        let n = waits(local.admit(key("10.0.0.2"), B, 1, b, T + 1, TIMING));
        // …and every further hammer request while it holds the slot is refused at once.
        for i in 0..50 {
            assert_eq!(refused(hammer(&mut local, T + 2 + i)).why, Why::Busy);
        }
        local.settle(&h1, Outcome::Nothing);
        // The hammer is quick to ask again, but the neighbour is first in line.
        let h2 = waits(hammer(&mut local, T + 60));
        let n = go(local.poll(&n, B, 1, b, T + 61, TIMING));
        assert_eq!(
            local.poll(&h2, A, 1, b, T + 62, TIMING),
            Admission::Wait(h2.clone())
        );
        local.settle(&n, Outcome::Nothing);
        let h2 = go(local.poll(&h2, A, 1, b, T + 80, TIMING));
        // A third account queues behind the hammer's one place, not behind all its requests.
        let c = waits(local.admit(key("10.0.0.3"), C, 1, b, T + 81, TIMING));
        assert_eq!(refused(hammer(&mut local, T + 82)).why, Why::Busy);
        local.settle(&h2, Outcome::Nothing);
        assert!(matches!(
            local.poll(&c, C, 1, b, T + 90, TIMING),
            Admission::Go(_)
        ));
    }

    #[test]
    fn the_line_is_bounded_in_length_and_in_time_and_a_waiter_may_leave() {
        let mut local = Local::default();
        let b = bound(100);
        let _holder = go(local.admit(key("10.0.0.1"), 0, 1, b, T, TIMING));
        let places: Vec<Place> = (1..=Local::MAX_LINE as u64)
            .map(|a| waits(local.admit(key("10.0.0.1"), a, 1, b, T, TIMING)))
            .collect();
        let full = refused(local.admit(key("10.0.0.1"), 999, 1, b, T, TIMING));
        assert_eq!((full.why, full.retry_after_secs()), (Why::Busy, Some(1)));
        // One leaves: a place frees.
        local.leave(&places[0]);
        assert!(matches!(
            local.admit(key("10.0.0.1"), 999, 1, b, T, TIMING),
            Admission::Wait(_)
        ));
        // Past the longest wait, a waiter is refused busy.
        let late = refused(local.poll(&places[1], 2, 1, b, T + 1_001, TIMING));
        assert_eq!(late.why, Why::Busy);
    }

    #[test]
    fn a_waiter_whose_quantity_no_longer_fits_is_refused_when_the_slot_frees() {
        let mut local = Local::default();
        let first = go(local.admit(key("10.0.0.1"), A, 2, bound(3), T, TIMING));
        let second = waits(local.admit(key("10.0.0.2"), B, 2, bound(3), T, TIMING));
        local.settle(&first, counted(2));
        let r = refused(local.poll(&second, B, 2, bound(3), T + 20, TIMING));
        assert_eq!((r.why, r.remaining), (Why::TooMany, 1));
    }

    /// A small deterministic generator (no dependency): xorshift.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    #[test]
    fn local_model_never_exceeds_the_bound_plus_one_request_per_instance() {
        // Instances ("edge locations") share one ledger; requests of up to `max_qty` units by a
        // few accounts arrive at random instances, wait in line or go, and end at random times,
        // most of them successful.
        for seed in 1..=300u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let instances = 1 + rng.below(4) as usize;
            let max_qty = 1 + rng.below(3) as u32;
            let b = bound(1 + rng.below(12) as u32);
            let mut locals: Vec<Local> = (0..instances).map(|_| Local::default()).collect();
            let mut ledger: Option<Count> = None;
            let mut out: Vec<(usize, Ticket)> = Vec::new();
            let mut waiting: Vec<(usize, Place, u64, u32)> = Vec::new();
            let mut sold = 0u32;
            for step in 0..400 {
                let now = T + step;
                let admission = match rng.below(3) {
                    0 if !out.is_empty() => {
                        let (i, ticket) = out.swap_remove(rng.below(out.len() as u64) as usize);
                        let outcome = if rng.below(10) < 8 {
                            sold += ticket.n;
                            let c = Count::add(ledger, ticket.n, b.window_ms(), now);
                            ledger = Some(c);
                            Outcome::Counted(Counted {
                                total: c.total,
                                window_end_ms: c.window_end_ms(b.window_ms()),
                            })
                        } else {
                            Outcome::Nothing
                        };
                        locals[i].settle(&ticket, outcome);
                        None
                    }
                    1 if !waiting.is_empty() => {
                        let (i, place, account, n) =
                            waiting.swap_remove(rng.below(waiting.len() as u64) as usize);
                        Some((
                            i,
                            account,
                            n,
                            locals[i].poll(&place, account, n, b, now, TIMING),
                        ))
                    }
                    _ => {
                        let i = rng.below(instances as u64) as usize;
                        let n = 1 + rng.below(u64::from(max_qty)) as u32;
                        let account = rng.below(5);
                        Some((
                            i,
                            account,
                            n,
                            locals[i].admit(key("192.0.2.9"), account, n, b, now, TIMING),
                        ))
                    }
                };
                match admission {
                    Some((i, _, _, Admission::Go(t))) => out.push((i, t)),
                    Some((i, account, n, Admission::Wait(p))) => waiting.push((i, p, account, n)),
                    _ => {}
                }
                let ceiling = b.bound + instances as u32 * max_qty;
                assert!(
                    sold <= ceiling,
                    "seed {seed}: {sold} sold, bound {} + {instances} × {max_qty}",
                    b.bound
                );
            }
            if instances == 1 {
                assert!(sold <= b.bound, "one instance is exact: seed {seed}");
            }
        }
    }

    /// Issue 35: at 50,000 entries the table forgot everything, letting every network through once
    /// more. Only the least recently used go.
    #[test]
    fn a_full_table_forgets_its_least_recently_used_networks_only() {
        let mut local = Local::default();
        let k = |i: usize| Key {
            sku: format!("S{i}"),
            ..key("10.0.0.1")
        };
        for i in 0..Local::MAX_ENTRIES {
            // Each network bought its whole bound (1) in a window still running.
            let t = go(local.admit(k(i), A, 1, bound(1), T + i as i64, TIMING));
            local.settle(&t, counted(1));
        }
        assert_eq!(local.entries.len(), Local::MAX_ENTRIES);
        // A network in flight is never forgotten, however old.
        let held = k(0);
        local.entries.get_mut(&held).expect("entry").holder = Some(Slot {
            id: u64::MAX,
            account: B,
            since_ms: T + 59_000,
        });
        // One more network: room is made for it.
        let new = go(local.admit(k(usize::MAX), A, 1, bound(1), T + 59_000, TIMING));
        local.settle(&new, counted(1));
        assert!(local.entries.len() <= Local::MAX_ENTRIES);
        let forgotten = (0..Local::MAX_ENTRIES)
            .filter(|&i| !local.entries.contains_key(&k(i)))
            .count();
        // Used once a millisecond, the first 59 s: the oldest eighth of them.
        let eighth = 59_000 / 8;
        assert!(
            (eighth..=eighth + 1).contains(&forgotten),
            "the oldest eighth, not all: {forgotten}"
        );
        // The recent ones still refuse (they bought their bound); the oldest were forgotten.
        for i in (Local::MAX_ENTRIES - 100)..Local::MAX_ENTRIES {
            assert_eq!(
                refused(local.admit(k(i), C, 1, bound(1), T + 59_001, TIMING)).why,
                Why::Spent,
                "recent network {i}"
            );
        }
        assert!(
            !local.entries.contains_key(&k(1)),
            "the oldest idle one went"
        );
        assert!(
            local.entries.contains_key(&held),
            "the one in flight stayed"
        );
    }
}
