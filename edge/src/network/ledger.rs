//! Counting a network's admissions and units without a hot Durable Object, and deciding from the
//! count. Two halves:
//!
//! - [`Count`]: what the network's `NetworkLedger` object (one per SKU and network) stores, per
//!   kind: the current window's start and total. It is told only of what happened — a new member
//!   of the room, units the origin sold (a 201) — so it sees at most one call per admission or
//!   purchase of that network, never one per attempt.
//! - [`Local`]: what one Worker instance knows, per SKU, network and kind: the total as the ledger
//!   last told it (after this instance's own last success) and whether this instance has a request
//!   of that network in flight. A request is let through only if `known + n <= bound` and nothing
//!   of its network is in flight here; it then stays in flight until its answer is counted.
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

use std::collections::HashMap;

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

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Entry {
    /// The total as the ledger last told it (or as counted here).
    known: u32,
    /// When the window of `known` ends; 0: no window known.
    window_end_ms: i64,
    in_flight: bool,
}

/// A request let through: settle it with [`Local::settle`] once its answer is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    pub key: Key,
    pub n: u32,
}

/// A request refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// What the network may still take in this window, as known here.
    pub remaining: u32,
    /// Seconds until it may try again: the end of the window, or 1 while another request of the
    /// network is in flight here.
    pub retry_after_secs: u64,
    /// Another request of the network is in flight here (not the bound itself).
    pub busy: bool,
}

/// How a request let through ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing to count (refused, failed, replayed).
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
}

impl Local {
    /// Entries kept at most; past it, those not in flight whose window ended are dropped, then
    /// all not in flight (forgetting only makes this instance let one more through).
    pub const MAX_ENTRIES: usize = 50_000;

    /// May a request of `n` go on against `bound` at `now_ms`?
    pub fn admit(
        &mut self,
        key: Key,
        n: u32,
        bound: Bound,
        now_ms: i64,
    ) -> Result<Ticket, Refusal> {
        if self.entries.len() >= Self::MAX_ENTRIES && !self.entries.contains_key(&key) {
            self.entries
                .retain(|_, e| e.in_flight || e.window_end_ms > now_ms);
            if self.entries.len() >= Self::MAX_ENTRIES {
                self.entries.retain(|_, e| e.in_flight);
            }
        }
        let entry = self.entries.entry(key.clone()).or_default();
        if entry.window_end_ms <= now_ms {
            *entry = Entry {
                in_flight: entry.in_flight,
                ..Entry::default()
            };
        }
        let remaining = bound.bound.saturating_sub(entry.known);
        let until_end = if entry.window_end_ms > now_ms {
            u64::try_from((entry.window_end_ms - now_ms + 999) / 1_000).unwrap_or(1)
        } else {
            u64::from(bound.window_secs)
        };
        if entry.in_flight {
            return Err(Refusal {
                remaining,
                retry_after_secs: 1,
                busy: true,
            });
        }
        if entry.known.saturating_add(n) > bound.bound {
            return Err(Refusal {
                remaining,
                retry_after_secs: until_end.max(1),
                busy: false,
            });
        }
        entry.in_flight = true;
        if entry.window_end_ms <= now_ms {
            entry.window_end_ms = now_ms.saturating_add(bound.window_ms());
        }
        Ok(Ticket { key, n })
    }

    /// Ends `ticket`'s flight with what its answer taught.
    pub fn settle(&mut self, ticket: &Ticket, outcome: Outcome) {
        let Some(entry) = self.entries.get_mut(&ticket.key) else {
            return;
        };
        entry.in_flight = false;
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
    fn one_request_per_network_is_in_flight_and_the_bound_refuses_until_the_window_ends() {
        let mut local = Local::default();
        let a = local.admit(key("10.0.0.1"), 2, bound(3), T).expect("first");
        // Same /24, while the first is out: busy, try again in a second.
        let busy = local
            .admit(key("10.0.0.2"), 1, bound(3), T)
            .expect_err("busy");
        assert_eq!(
            (busy.busy, busy.retry_after_secs, busy.remaining),
            (true, 1, 3)
        );
        // Another /24 is not affected.
        assert!(local.admit(key("10.0.1.1"), 1, bound(3), T).is_ok());
        local.settle(
            &a,
            Outcome::Counted(Counted {
                total: 2,
                window_end_ms: T + 60_000,
            }),
        );
        // 2 + 2 > 3: refused until the window ends.
        let over = local
            .admit(key("10.0.0.3"), 2, bound(3), T + 1_000)
            .expect_err("over");
        assert_eq!(
            (over.busy, over.retry_after_secs, over.remaining),
            (false, 59, 1)
        );
        let b = local
            .admit(key("10.0.0.3"), 1, bound(3), T + 1_000)
            .expect("fits");
        // A failed purchase counts nothing and frees the network.
        local.settle(&b, Outcome::Nothing);
        let c = local
            .admit(key("10.0.0.4"), 1, bound(3), T + 2_000)
            .expect("fits");
        // A success the ledger missed is still counted here.
        local.settle(&c, Outcome::Uncounted);
        assert!(
            local
                .admit(key("10.0.0.5"), 1, bound(3), T + 3_000)
                .is_err()
        );
        // The next window starts afresh.
        assert!(
            local
                .admit(key("10.0.0.5"), 3, bound(3), T + 60_000)
                .is_ok()
        );
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
        // Instances ("edge locations") share one ledger; requests of up to `max_qty` units arrive
        // at random instances, are decided, and end at random times, most of them successful.
        for seed in 1..=300u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let instances = 1 + rng.below(4) as usize;
            let max_qty = 1 + rng.below(3) as u32;
            let b = bound(1 + rng.below(12) as u32);
            let mut locals: Vec<Local> = (0..instances).map(|_| Local::default()).collect();
            let mut ledger: Option<Count> = None;
            let mut out: Vec<(usize, Ticket)> = Vec::new();
            let mut sold = 0u32;
            for step in 0..400 {
                let now = T + step;
                if !out.is_empty() && rng.below(2) == 0 {
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
                } else {
                    let i = rng.below(instances as u64) as usize;
                    let n = 1 + rng.below(u64::from(max_qty)) as u32;
                    if let Ok(t) = locals[i].admit(key("192.0.2.9"), n, b, now) {
                        out.push((i, t));
                    }
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

    #[test]
    fn the_local_table_stays_bounded() {
        let mut local = Local::default();
        for i in 0..(Local::MAX_ENTRIES + 5) {
            let k = Key {
                sku: format!("S{i}"),
                ..key("10.0.0.1")
            };
            if let Ok(t) = local.admit(k, 1, bound(5), T) {
                local.settle(&t, Outcome::Nothing);
            }
        }
        assert!(local.entries.len() <= Local::MAX_ENTRIES);
    }
}
