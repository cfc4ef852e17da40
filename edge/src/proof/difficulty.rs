//! How much work a challenge asks for: between the SKU's `min_bits` and `max_bits`, rising with
//! the SKU's arrivals per second (the shoppers this Worker instance issued challenges to), so a shopper
//! pays little while the sale is quiet and every account of a farm pays the most at the peak.
//!
//! `bits(r) = min + round((max − min) · min(1, log2(1 + r) / log2(1 + peak)))`, where `r` is the
//! distinct shoppers asking per second (a sliding one-second window: one account asking fifty
//! times counts once) and `peak` is `POW_PEAK_ARRIVALS_PER_SEC`.
//! A challenge of `b` bits has `maxnumber = 2^b`: its number is drawn uniformly from
//! `1..=2^b`, so a solver tries `2^(b−1)` candidates on average (the table of solve times is in
//! docs/bot-defence.md). In ALTCHA's v2 (`PBKDF2/SHA-256`) the same `b` bits are `2^b` PBKDF2
//! iterations at most, split between the counters to try and the iterations per counter
//! ([`v2_split`]). Demand is counted per Worker instance: each instance sees its share of
//! its location's arrivals, which is what it can measure without a shared (hot) counter.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

use shared::ProofOfWork;

/// The bits of work at `arrivals_per_sec` for `pow`, with `max_bits` reached at `peak`.
pub fn bits(pow: ProofOfWork, arrivals_per_sec: f64, peak: u32) -> u8 {
    let span = f64::from(pow.max_bits - pow.min_bits);
    let peak = f64::from(peak.max(1));
    let r = if arrivals_per_sec.is_finite() {
        arrivals_per_sec.max(0.0)
    } else {
        0.0
    };
    let share = ((1.0 + r).log2() / (1.0 + peak).log2()).clamp(0.0, 1.0);
    // `share` is in 0..=1, so the sum stays within min_bits..=max_bits.
    let extra = (span * share).round() as u8;
    pow.min_bits.saturating_add(extra).min(pow.max_bits)
}

/// The hash rate the challenges' lifetime allows for: a low-end phone's browser, about a third of
/// headless Chromium on this project's 2-core test machine (docs/bot-defence.md).
pub const SLOWEST_HASHES_PER_SEC: u64 = 20_000;

/// Seconds the slowest shopper's worst case takes at `bits` (all `2^bits` candidates at
/// [`SLOWEST_HASHES_PER_SEC`]): added to a challenge's lifetime, so a hard challenge cannot
/// expire while an honest shopper is still solving it (0 below 15 bits).
pub fn slowest_solve_secs(bits: u8) -> i64 {
    i64::try_from(max_number(bits) / SLOWEST_HASHES_PER_SEC).unwrap_or(i64::MAX)
}

/// `maxnumber` of a challenge of `bits` bits.
pub fn max_number(bits: u8) -> u64 {
    1u64 << u32::from(bits.min(ProofOfWork::MAX_BITS))
}

/// Counter bits a v2 challenge keeps at least (below `V2_MIN_COUNTER_BITS` bits, all of them).
pub const V2_MIN_COUNTER_BITS: u8 = 10;
/// The most PBKDF2 iterations per counter: the edge derives one key per challenge it issues, so
/// this bounds its own cost (~2^13 SHA-256 compressions, a few milliseconds of wasm).
pub const V2_MAX_COST_BITS: u8 = 12;

/// How a v2 challenge of `bits` bits asks for its `2^bits` PBKDF2 iterations at most: `(counter
/// bits, cost)` — the secret counter is drawn from `0..2^counter_bits` (half of them tried on
/// average, as v1's numbers) and each counter costs `cost` iterations, with `counter_bits + log2
/// cost = bits`. The iterations per counter go up first (a browser's WebCrypto pays a fixed
/// overhead per derivation, which more iterations per call spread out), up to 2^12 (the edge's
/// own cost per challenge); then the counters. 10 bits: 1,024 counters of 1 iteration; 16: 1,024
/// of 64; 22: 1,024 of 4,096; 30: 262,144 of 4,096.
pub fn v2_split(bits: u8) -> (u8, u32) {
    let bits = bits.clamp(1, ProofOfWork::MAX_BITS);
    let cost_bits = bits
        .saturating_sub(V2_MIN_COUNTER_BITS)
        .min(V2_MAX_COST_BITS);
    (bits - cost_bits, 1u32 << cost_bits)
}

/// Distinct shoppers per second over a sliding one-second window (two one-second buckets, the
/// previous one weighted by how much of it the window still covers). A shopper counts once per
/// second however many challenges they ask for, and never for their own price: one account
/// cannot set the price for everyone, or for itself (issue 35). A farm's accounts are distinct
/// shoppers and raise it, as they should.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ArrivalMeter {
    /// The current bucket's second (unix ms / 1000).
    second: i64,
    /// The shoppers seen in the current second (hashes of their ids), at most the count at which
    /// the difficulty is at its peak: past it, more shoppers change nothing.
    current: HashSet<u64>,
    /// The shoppers of the second before.
    previous: HashSet<u64>,
    /// When the last shopper arrived (unix ms): the least recently used meters go first.
    last_ms: i64,
}

/// Distinct shoppers a meter remembers per second at most, whatever `POW_PEAK_ARRIVALS_PER_SEC`.
pub const MAX_COUNTED_PER_SEC: usize = 100_000;

impl ArrivalMeter {
    fn roll(&mut self, now_ms: i64) {
        let second = now_ms.div_euclid(1_000);
        if second == self.second {
            return;
        }
        if second == self.second + 1 {
            std::mem::swap(&mut self.previous, &mut self.current);
        } else {
            self.previous.clear();
        }
        self.current.clear();
        self.second = second;
    }

    /// The rate at `now_ms` of the shoppers other than `shopper` (`None`: of all).
    pub fn rate(&self, now_ms: i64, shopper: Option<u64>) -> f64 {
        let second = now_ms.div_euclid(1_000);
        let empty = HashSet::new();
        let (previous, current) = if second == self.second {
            (&self.previous, &self.current)
        } else if second == self.second + 1 {
            (&self.current, &empty)
        } else {
            (&empty, &empty)
        };
        let others = |set: &HashSet<u64>| {
            let mine = shopper.is_some_and(|s| set.contains(&s));
            (set.len() - usize::from(mine)) as f64
        };
        let into = f64::from(u32::try_from(now_ms.rem_euclid(1_000)).unwrap_or(0)) / 1_000.0;
        others(previous) * (1.0 - into) + others(current)
    }

    /// Counts `shopper` arriving at `now_ms` (once per second), remembering at most `cap`
    /// shoppers a second; returns the rate of the other shoppers (so a lone shopper, however
    /// often they ask, meets a quiet sale: 0).
    pub fn arrive(&mut self, now_ms: i64, shopper: u64, cap: usize) -> f64 {
        let before = self.rate(now_ms, Some(shopper));
        self.roll(now_ms);
        self.last_ms = now_ms;
        if self.current.len() < cap.clamp(1, MAX_COUNTED_PER_SEC) {
            self.current.insert(shopper);
        }
        before
    }
}

/// A shopper's id as the meters count it.
pub fn shopper_hash(user: &str) -> u64 {
    let mut h = DefaultHasher::new();
    user.hash(&mut h);
    h.finish()
}

/// Meters per SKU, bounded: past `MAX_SKUS`, meters idle for two seconds are dropped (they read
/// 0 anyway), then the least recently used ones — never all at once.
#[derive(Debug, Default)]
pub struct Demand {
    meters: HashMap<String, ArrivalMeter>,
}

impl Demand {
    const MAX_SKUS: usize = 4_096;

    /// Counts `user` arriving for `sku` at `now_ms`; returns the rate of the shoppers before it.
    /// `peak` is `POW_PEAK_ARRIVALS_PER_SEC`: a meter need count no further.
    pub fn arrive(&mut self, sku: &str, user: &str, now_ms: i64, peak: u32) -> f64 {
        if self.meters.len() >= Self::MAX_SKUS && !self.meters.contains_key(sku) {
            let idle = now_ms.div_euclid(1_000) - 2;
            self.meters.retain(|_, m| m.second >= idle);
            if self.meters.len() >= Self::MAX_SKUS {
                // The least recently used go: those last used in the oldest eighth of the time
                // since the oldest one's last use.
                let oldest = self
                    .meters
                    .values()
                    .map(|m| m.last_ms)
                    .min()
                    .unwrap_or(now_ms);
                let cut = oldest.saturating_add(now_ms.saturating_sub(oldest) / 8);
                self.meters.retain(|_, m| m.last_ms > cut);
            }
        }
        let cap = usize::try_from(peak).unwrap_or(usize::MAX).max(1);
        self.meters
            .entry(sku.to_owned())
            .or_default()
            .arrive(now_ms, shopper_hash(user), cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_700_000_000_000;

    fn pow(min: u8, max: u8) -> ProofOfWork {
        ProofOfWork::new(min, max).expect("pow")
    }

    #[test]
    fn a_v2_challenge_asks_for_two_to_the_bits_iterations_with_bounded_edge_cost() {
        assert_eq!(v2_split(1), (1, 1));
        assert_eq!(v2_split(10), (10, 1));
        assert_eq!(v2_split(16), (10, 64));
        assert_eq!(v2_split(22), (10, 4_096));
        assert_eq!(v2_split(30), (18, 4_096));
        for bits in 1..=ProofOfWork::MAX_BITS {
            let (counter_bits, cost) = v2_split(bits);
            assert_eq!(u64::from(cost) << counter_bits, max_number(bits), "{bits}");
            assert!(cost <= 1 << V2_MAX_COST_BITS);
        }
    }

    #[test]
    fn difficulty_rises_with_demand_from_min_to_max_and_never_leaves_the_bounds() {
        let p = pow(10, 20);
        assert_eq!(bits(p, 0.0, 50), 10);
        assert_eq!(bits(p, 1.0, 50), 12);
        assert_eq!(bits(p, 5.0, 50), 15);
        assert_eq!(bits(p, 10.0, 50), 16);
        assert_eq!(bits(p, 25.0, 50), 18);
        assert_eq!(bits(p, 50.0, 50), 20);
        assert_eq!(bits(p, 1e9, 50), 20);
        for junk in [f64::NAN, f64::INFINITY, -5.0] {
            assert_eq!(bits(p, junk, 50), 10, "{junk}");
        }
        let mut last = 0;
        for r in 0..200 {
            let b = bits(p, f64::from(r), 50);
            assert!((10..=20).contains(&b) && b >= last, "monotone at {r}");
            last = b;
        }
        assert_eq!(bits(pow(30, 30), 0.0, 0), 30);
        assert_eq!(max_number(1), 2);
        assert_eq!(max_number(20), 1 << 20);
        assert_eq!(max_number(200), 1 << 30);
        assert_eq!(slowest_solve_secs(10), 0);
        assert_eq!(slowest_solve_secs(20), 52);
        assert_eq!(slowest_solve_secs(24), 838);
    }

    #[test]
    fn the_meter_counts_the_distinct_shoppers_of_the_last_second() {
        let mut m = ArrivalMeter::default();
        for i in 0..10 {
            m.arrive(T + i * 50, i as u64, 50);
        }
        assert_eq!(m.rate(T + 999, None), 10.0);
        assert_eq!(m.rate(T + 999, Some(3)), 9.0, "never one's own price");
        // Half into the next second, half of the previous second still counts.
        assert!((m.rate(T + 1_500, None) - 5.0).abs() < 1e-9);
        assert_eq!(m.rate(T + 2_000, None), 0.0);
        assert_eq!(
            m.arrive(T + 5_000, 1, 50),
            0.0,
            "a lone arrival meets a quiet sale"
        );
        assert_eq!(m.rate(T + 5_001, None), 1.0);
        let mut d = Demand::default();
        for i in 0..5 {
            d.arrive("A", &format!("u{i}"), T + i, 50);
        }
        assert_eq!(d.arrive("A", "u9", T + 10, 50), 5.0);
        assert_eq!(d.arrive("B", "u9", T + 10, 50), 0.0);
        // Past the peak a meter stops remembering: the price is at its top anyway.
        let mut m = ArrivalMeter::default();
        for i in 0..500 {
            m.arrive(T, i, 50);
        }
        assert_eq!(m.rate(T, None), 50.0);
        assert_eq!(bits(pow(10, 20), m.rate(T, Some(999)), 50), 20);
    }

    /// Issue 35: one signed-in account asking ~50 challenges a second kept every shopper at
    /// `max_bits`. It counts once.
    #[test]
    fn one_account_asking_fifty_times_a_second_does_not_raise_the_price() {
        let p = pow(10, 20);
        let mut d = Demand::default();
        let mut hardest = 0;
        for i in 0..200 {
            // 50 a second for four seconds.
            let rate = d.arrive("A", "flooder", T + i * 20, 50);
            hardest = hardest.max(bits(p, rate, 50));
        }
        assert_eq!(hardest, 10, "the flooder alone pays min_bits");
        // An honest shopper meanwhile pays for one other shopper in the last second.
        let honest = d.arrive("A", "honest", T + 4_000, 50);
        assert!(honest <= 1.0, "{honest}");
        assert_eq!(bits(p, honest, 50), 12);
        // Fifty distinct shoppers a second are the peak.
        let mut crowd = Demand::default();
        let mut last = 0.0;
        for i in 0..60 {
            last = crowd.arrive("A", &format!("s{i}"), T + i * 16, 50);
        }
        assert_eq!(bits(p, last, 50), 20);
    }

    #[test]
    fn the_per_sku_meters_stay_bounded_and_keep_the_recent_ones() {
        let mut d = Demand::default();
        for i in 0..(Demand::MAX_SKUS + 10) {
            // All within a second and a half: none is idle.
            d.arrive(&format!("S{i}"), "u", T + 10_000 + i as i64 / 3, 50);
        }
        assert!(d.meters.len() <= Demand::MAX_SKUS);
        assert!(
            d.meters.len() > Demand::MAX_SKUS / 2,
            "only the oldest go: {}",
            d.meters.len()
        );
        assert!(d.meters.contains_key(&format!("S{}", Demand::MAX_SKUS + 9)));
    }
}
