//! How much work a challenge asks for: between the SKU's `min_bits` and `max_bits`, rising with
//! the SKU's arrivals per second (the challenges this Worker instance issued for it), so a shopper
//! pays little while the sale is quiet and every account of a farm pays the most at the peak.
//!
//! `bits(r) = min + round((max − min) · min(1, log2(1 + r) / log2(1 + peak)))`, where `r` is the
//! arrivals per second (a sliding one-second window) and `peak` is `POW_PEAK_ARRIVALS_PER_SEC`.
//! A challenge of `b` bits has `maxnumber = 2^b`: its number is drawn uniformly from
//! `1..=2^b`, so a solver tries `2^(b−1)` candidates on average (the table of solve times is in
//! docs/bot-defence.md). Demand is counted per Worker instance: each instance sees its share of
//! its location's arrivals, which is what it can measure without a shared (hot) counter.

use std::collections::HashMap;

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

/// Arrivals per second over a sliding one-second window (two one-second buckets, the previous
/// one weighted by how much of it the window still covers).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ArrivalMeter {
    /// The current bucket's second (unix ms / 1000).
    second: i64,
    current: u32,
    previous: u32,
}

impl ArrivalMeter {
    fn roll(&mut self, now_ms: i64) {
        let second = now_ms.div_euclid(1_000);
        if second == self.second {
            return;
        }
        self.previous = if second == self.second + 1 {
            self.current
        } else {
            0
        };
        self.current = 0;
        self.second = second;
    }

    /// The rate at `now_ms`.
    pub fn rate(&self, now_ms: i64) -> f64 {
        let mut meter = *self;
        meter.roll(now_ms);
        let into = f64::from(u32::try_from(now_ms.rem_euclid(1_000)).unwrap_or(0)) / 1_000.0;
        f64::from(meter.previous) * (1.0 - into) + f64::from(meter.current)
    }

    /// Counts one arrival at `now_ms`; returns the rate of the arrivals before it (so a lone
    /// arrival meets a quiet sale: 0).
    pub fn arrive(&mut self, now_ms: i64) -> f64 {
        let before = self.rate(now_ms);
        self.roll(now_ms);
        self.current = self.current.saturating_add(1);
        before
    }
}

/// Meters per SKU, bounded: past `MAX_SKUS`, meters idle for two seconds are dropped (they read
/// 0 anyway).
#[derive(Debug, Default)]
pub struct Demand {
    meters: HashMap<String, ArrivalMeter>,
}

impl Demand {
    const MAX_SKUS: usize = 4_096;

    /// Counts an arrival for `sku` at `now_ms`; returns the rate of the arrivals before it.
    pub fn arrive(&mut self, sku: &str, now_ms: i64) -> f64 {
        if self.meters.len() >= Self::MAX_SKUS && !self.meters.contains_key(sku) {
            let idle = now_ms.div_euclid(1_000) - 2;
            self.meters.retain(|_, m| m.second >= idle);
            if self.meters.len() >= Self::MAX_SKUS {
                self.meters.clear();
            }
        }
        self.meters
            .entry(sku.to_owned())
            .or_default()
            .arrive(now_ms)
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
    fn the_meter_counts_the_last_second() {
        let mut m = ArrivalMeter::default();
        for i in 0..10 {
            m.arrive(T + i * 50);
        }
        assert_eq!(m.rate(T + 999), 10.0);
        // Half into the next second, half of the previous second still counts.
        assert!((m.rate(T + 1_500) - 5.0).abs() < 1e-9);
        assert_eq!(m.rate(T + 2_000), 0.0);
        assert_eq!(
            m.arrive(T + 5_000),
            0.0,
            "a lone arrival meets a quiet sale"
        );
        assert_eq!(m.rate(T + 5_001), 1.0);
        let mut d = Demand::default();
        for i in 0..5 {
            d.arrive("A", T + i);
        }
        assert_eq!(d.arrive("A", T + 10), 5.0);
        assert_eq!(d.arrive("B", T + 10), 0.0);
    }

    #[test]
    fn the_per_sku_meters_stay_bounded() {
        let mut d = Demand::default();
        for i in 0..(Demand::MAX_SKUS + 10) {
            d.arrive(&format!("S{i}"), T + 10_000);
        }
        assert!(d.meters.len() <= Demand::MAX_SKUS);
    }
}
