//! The farm's side of `bench/scalpers/pow-rate-v2.mjs`: how many PBKDF2-HMAC-SHA-256 iterations
//! per second one native core gets through with the edge's own v2 solver (`proof::altcha_v2`,
//! the `pbkdf2`/`sha2` crates), at the iterations per counter of each bits (`v2_split`), and
//! v1's SHA-256 candidates per second beside it (`proof::altcha::solve`, the farm of
//! `bench scalpers`).
//!
//! ```text
//! cargo run --release -q -p edge --example pow-rate-v2 -- [bits …]     (default 10 16 20 22)
//! ```
//!
//! Prints one JSON line.

use std::time::Instant;

use edge::proof::{altcha, altcha_v2, difficulty};

fn main() {
    let bits: Vec<u8> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let bits = if bits.is_empty() {
        vec![10, 16, 20, 22]
    } else {
        bits
    };
    let mut rows = Vec::new();
    for b in bits {
        let (_, cost) = difficulty::v2_split(b);
        // About 2^20 iterations per row: long enough to time, short enough on a loaded machine.
        let counters = ((1u32 << 20) / cost).max(64);
        let started = Instant::now();
        let mut sink = 0u8;
        for counter in 0..counters {
            sink ^= altcha_v2::derive(&[7; 16], &[9; 16], cost, counter)[0];
        }
        let secs = started.elapsed().as_secs_f64();
        let rate = f64::from(counters) * f64::from(cost) / secs;
        rows.push(format!(
            r#"{{"bits":{b},"cost":{cost},"counters":{counters},"native_iterations_per_sec":{rate:.0},"native_average_solve_ms":{:.2},"sink":{sink}}}"#,
            (2f64.powi(i32::from(b) - 1)) / rate * 1_000.0
        ));
    }
    // v1 beside it: the edge's own v1 solver on a 2^20 challenge shaped like the edge's.
    let salt = "0123456789abcdef01234567?kid=p1&purpose=purchase&sku=SCALP-ON-0a1b2c3d&user=farm-0&issued=1799999880&expires=1800000000&".to_owned();
    let number = 1u64 << 20;
    let c = altcha::make(b"k", salt, number, number);
    let started = Instant::now();
    let solved = altcha::solve(&c).map(|s| s.number);
    let secs = started.elapsed().as_secs_f64();
    println!(
        r#"{{"v2":[{}],"v1":{{"candidates":{},"native_hashes_per_sec":{:.0},"found":{}}}}}"#,
        rows.join(","),
        number + 1,
        (number + 1) as f64 / secs,
        solved.is_some()
    );
}
