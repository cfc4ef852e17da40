//! Unit tests of the admission state: its text form, the rate and the order of admissions, what
//! a member is told, and the measured rate.

use super::*;
use crate::room::order::Key;

const S: u32 = 4;

#[test]
fn the_config_comes_from_the_facts_room_and_schedule() {
    use crate::shield::RoomFact;
    use shared::{Schedule, Timestamp, WaitingRoom};
    let room = WaitingRoom {
        admit_per_minute: 90,
        pass_secs: 30,
        overbook: shared::Overbook::from_hundredths(250).expect("2.5"),
    };
    assert_eq!(RoomConfig::of(&SkuFacts::default()), None, "no view yet");
    let without = SkuFacts {
        room: Some(RoomFact { waiting_room: None }),
        ..SkuFacts::default()
    };
    assert_eq!(RoomConfig::of(&without), None, "no room");
    let mut facts = SkuFacts {
        room: Some(RoomFact {
            waiting_room: Some(room.into()),
        }),
        ..SkuFacts::default()
    };
    assert_eq!(
        RoomConfig::of(&facts),
        Some(RoomConfig {
            admit_per_minute: 90,
            pass_secs: 30,
            starts_ms: None,
            overbook: 250,
        })
    );
    facts.schedule = Some(Schedule {
        starts_at: Timestamp::from_unix_ms(1_700_000_000_000),
        ends_at: None,
        paused: false,
    });
    assert_eq!(
        RoomConfig::of(&facts).and_then(|c| c.starts_ms),
        Some(1_700_000_000_000)
    );
}

fn config(rate: u32, starts_ms: Option<i64>) -> RoomConfig {
    RoomConfig {
        admit_per_minute: rate,
        pass_secs: 60,
        starts_ms,
        overbook: 150,
    }
}

fn post(shard: u32, rank: u64, join_ms: i64) -> Head {
    Head {
        rank,
        key: Key::post(1, join_ms, shard, rank),
    }
}

/// A simulated room: members per shard (join instants in the shard's order), ticks every
/// TICK_MS, returns each member's admission instant in order of admission.
fn run(rate: u32, members: &[Vec<i64>], until: i64) -> Vec<(i64, u32, u64)> {
    let cfg = config(rate, None);
    let mut state = RoomState::new(cfg, S, 0);
    let mut admitted = Vec::new();
    let mut now = 0;
    while now <= until {
        let (next, adm) = state.advance(cfg, now);
        for (s, list) in adm.iter().enumerate() {
            for &(rank, ms) in list {
                admitted.push((ms, s as u32, rank));
            }
        }
        let target = next.window_target();
        let heads: Vec<Vec<Head>> = (0..S)
            .map(|s| {
                let from = next.shard_base[s as usize];
                members[s as usize]
                    .iter()
                    .enumerate()
                    .skip(from as usize)
                    .filter(|(_, j)| **j < now - HORIZON_MS)
                    .take(target)
                    .map(|(r, &j)| post(s, r as u64, j))
                    .collect()
            })
            .collect();
        let joined = members.iter().map(|m| m.len() as u64).collect();
        state = next.with_window(&heads, joined, 0);
        now += TICK_MS;
    }
    admitted.sort();
    admitted
}

#[test]
fn admission_follows_the_join_order_across_shards_and_never_exceeds_the_rate() {
    // 400 members joining over 2 s, spread over the shards; 600 per minute = 10 per second.
    let mut members = vec![Vec::new(); S as usize];
    for i in 0..400i64 {
        members[(i * 7 % 4) as usize].push(i * 5);
    }
    let admitted = run(600, &members, 60_000);
    assert_eq!(admitted.len(), 400, "all admitted within a minute at 10/s");
    // In join order: the join instants of the admitted, in admission order, increase.
    let joins: Vec<i64> = admitted
        .iter()
        .map(|&(_, s, r)| members[s as usize][r as usize])
        .collect();
    assert!(joins.windows(2).all(|w| w[0] < w[1]), "{joins:?}");
    // Smooth: consecutive admissions at least 100 ms apart; any 10 s holds at most 101.
    assert!(
        admitted.windows(2).all(|w| w[1].0 - w[0].0 >= 100),
        "{admitted:?}"
    );
    for &(t0, _, _) in &admitted {
        let n = admitted
            .iter()
            .filter(|(t, _, _)| *t >= t0 && *t < t0 + 10_000)
            .count();
        assert!(n <= 101, "{n} admitted in 10 s from {t0}");
    }
}

#[test]
fn nobody_banks_credit_while_the_room_is_empty() {
    // Nobody for 30 s, then 50 at once: still one per 100 ms.
    let mut members = vec![Vec::new(); S as usize];
    for i in 0..50i64 {
        members[(i % 4) as usize].push(30_000 + i);
    }
    let admitted = run(600, &members, 45_000);
    assert_eq!(admitted.len(), 50);
    assert!(admitted.windows(2).all(|w| w[1].0 - w[0].0 >= 100));
    let first = admitted[0].0;
    assert!(first >= 30_000 + HORIZON_MS, "{first}");
    let in_first_second = admitted
        .iter()
        .filter(|(t, _, _)| *t < first + 1_000)
        .count();
    assert!(in_first_second <= 11, "{in_first_second}");
}

#[test]
fn the_count_is_floor_of_rate_times_elapsed() {
    let mut state = RoomState::new(config(6_000, None), S, 0);
    state.open = true;
    state.window = "0123".repeat(100);
    // 100 per second: 1 at 10 ms, 10 at 100 ms, 99 at 999 ms.
    assert_eq!(state.admitted(9), 0);
    assert_eq!(state.admitted(10), 1);
    assert_eq!(state.admitted(999), 99);
    assert_eq!(state.admitted(100_000), 400, "never more than the window");
    assert_eq!(state.slot_ms(0), 10);
    assert_eq!(state.slot_ms(99), 1_000);
}

#[test]
fn a_member_is_told_its_place_and_its_admission() {
    let mut state = RoomState::new(config(60, None), 2, 0);
    state.open = true;
    state.window = "0110".into();
    state.shard_base = vec![5, 3];
    state.shard_joined = vec![20, 20];
    state.a_base = 8;
    // One per second from t = 0: slot 8 (shard 0, rank 5) at 1 s.
    assert_eq!(
        state.status(0, Some(4), false, None, 0),
        Status::AdmittedEarlier
    );
    assert_eq!(
        state.status(0, Some(5), false, None, 0),
        Status::Waiting {
            position: 1,
            next_ms: Some(1_000)
        }
    );
    assert_eq!(
        state.status(0, Some(5), false, None, 1_000),
        Status::Admitted { admitted_ms: 1_000 }
    );
    assert_eq!(
        state.status(1, Some(4), false, None, 1_500),
        Status::Waiting {
            position: 2,
            next_ms: Some(3_000)
        }
    );
    // Beyond the window: the rest of the window, then an estimate.
    let Status::Waiting { position, next_ms } = state.status(1, Some(10), false, None, 0) else {
        panic!("waiting")
    };
    assert_eq!(next_ms, None);
    assert!(position > 4, "{position}");
    assert_eq!(
        state.status(1, Some(10), false, Some(77), 0),
        Status::Admitted { admitted_ms: 77 }
    );
    // Unranked after the start; the pre-queue before it.
    assert_eq!(state.status(1, None, true, None, 0), Status::Unranked);
    let mut early = RoomState::new(config(60, Some(10_000)), 2, 0);
    early.pre_joined = 42;
    assert_eq!(
        early.status(1, None, true, None, 0),
        Status::PreQueue { line: 42 }
    );
    assert_eq!(state.wait_secs(2), 2);
}

#[test]
fn admission_begins_after_the_start_and_its_horizon() {
    let cfg = config(600, Some(10_000));
    let state = RoomState::new(cfg, S, 0);
    assert!(!state.advance(cfg, 10_999).0.open);
    assert!(state.advance(cfg, 11_000).0.open);
    assert!(
        RoomState::new(config(1, None), S, 0)
            .advance(config(1, None), 0)
            .0
            .open
    );
}

#[test]
fn the_config_round_trips_as_text() {
    for c in [config(600, None), config(1, Some(1_796_119_200_000))] {
        assert_eq!(RoomConfig::decode(&c.encode()), Some(c));
    }
    assert_eq!(RoomConfig::decode("1;2"), None);
}

#[test]
fn the_state_round_trips_as_text() {
    let mut state = RoomState::new(config(600, Some(1_796_119_200_000)), S, 5);
    assert_eq!(RoomState::decode(&state.encode()), Some(state.clone()));
    state.open = true;
    state.window = "0v31".into();
    state.shard_base = vec![1, 2, 3, 4];
    state.carry = 59_999;
    state.measured_per_minute = 599;
    state.starts_ms = None;
    assert_eq!(RoomState::decode(&state.encode()), Some(state));
    for bad in [
        "",
        "s1",
        "s2;1;1;-;1;0;0;0;;;;0;0;0",
        "s2;1;1;-;1;0;0;0;;;;0;0;0;150;x;0;0",
        "s1;x;1;-;1;0;0;0;;;;0;0;0",
    ] {
        assert_eq!(RoomState::decode(bad), None, "{bad}");
    }
}

#[test]
fn the_measured_rate_spans_the_last_minute() {
    assert_eq!(measured_per_minute(&[]), 0);
    assert_eq!(measured_per_minute(&[(0, 0), (4_000, 40)]), 0, "too short");
    assert_eq!(measured_per_minute(&[(0, 0), (10_000, 100)]), 600);
    assert_eq!(
        measured_per_minute(&[(0, 0), (50_000, 10), (110_000, 70)]),
        60
    );
}

/// A room with stock: members joined at 0 spread over the shards (rank order = join order),
/// each admitted member buys one unit 500 ms after admission if `buys(index)`, else lets the pass
/// expire; `restock` adds units at an instant. Checks at every tick that the passes given since
/// the last one never exceed what its stock allowed (outstanding + new ≤ remaining × overbook
/// then), and returns the admissions
/// (instant, member index) and the state at the end.
struct StockRun {
    admitted: Vec<(i64, usize)>,
    state: RoomState,
    remaining: u64,
}

fn run_with_stock(
    n: usize,
    mut remaining: u64,
    overbook: u16,
    buys: impl Fn(usize) -> bool,
    restock: Option<(i64, u64)>,
    until: i64,
) -> StockRun {
    let cfg = RoomConfig {
        overbook,
        pass_secs: 10,
        ..config(600, None)
    };
    let pass_ms = 10_000;
    // Member i: shard i % S, rank i / S, joined at i ms.
    let index = |s: usize, r: u64| r as usize * S as usize + s;
    let mut state = RoomState::new(cfg, S, 0);
    // (admitted_ms, index, used)
    let mut passes: Vec<(i64, usize, bool)> = Vec::new();
    let mut now = 0;
    let mut allowed_before = u64::MAX;
    while now <= until {
        if let Some((at, units)) = restock
            && at <= now
            && at > now - TICK_MS
        {
            remaining += units;
        }
        // Purchases due since the last tick.
        for p in passes.iter_mut() {
            if !p.2 && buys(p.1) && p.0 + 500 <= now && remaining > 0 && p.0 + pass_ms > p.0 + 500 {
                p.2 = true;
                remaining -= 1;
            }
        }
        let (next, adm) = state.advance(cfg, now);
        let given: usize = adm.iter().map(Vec::len).sum();
        assert!(
            given as u64 <= allowed_before,
            "{given} passes given before {now}, {allowed_before} allowed"
        );
        for (s, list) in adm.iter().enumerate() {
            for &(rank, ms) in list {
                passes.push((ms, index(s, rank), false));
            }
        }
        let outstanding = passes
            .iter()
            .filter(|p| !p.2 && p.0 > now - pass_ms)
            .count() as u64;
        let target = next.window_target();
        let heads: Vec<Vec<Head>> = (0..S)
            .map(|s| {
                let from = next.shard_base[s as usize];
                (from..)
                    .map(|r| (r, index(s as usize, r)))
                    .take_while(|&(_, i)| i < n)
                    .take(target)
                    .map(|(r, i)| post(s, r, i as i64))
                    .collect()
            })
            .collect();
        let joined = (0..S as usize)
            .map(|s| (0..n).filter(|i| i % S as usize == s).count() as u64)
            .collect();
        state = next
            .with_window(&heads, joined, 0)
            .with_stock(Some(Stock { remaining, held: 0 }), outstanding);
        allowed_before = state.allowance();
        assert!(
            outstanding + allowed_before
                <= shared::Overbook::from_hundredths(overbook)
                    .expect("overbook")
                    .passes_for(remaining)
                    .max(outstanding),
            "the allowance tops the passes up to remaining × overbook at most"
        );
        now += TICK_MS;
    }
    let mut admitted: Vec<(i64, usize)> = passes.iter().map(|p| (p.0, p.1)).collect();
    admitted.sort();
    StockRun {
        admitted,
        state,
        remaining,
    }
}

#[test]
fn admission_stops_at_the_sell_out_and_the_line_is_told() {
    // 10 units, 200 in line, everyone buys: 15 passes at most at once (1.5), and exactly 10
    // buyers; after the sell-out nobody is admitted.
    let run = run_with_stock(200, 10, 150, |_| true, None, 30_000);
    assert_eq!(run.remaining, 0);
    let sold_out_at = run.admitted[9].0 + 500;
    let after: Vec<_> = run
        .admitted
        .iter()
        .filter(|(t, _)| *t > sold_out_at + TICK_MS)
        .collect();
    assert!(after.is_empty(), "admitted after the sell-out: {after:?}");
    assert!(run.admitted.len() <= 15, "{}", run.admitted.len());
    // In order.
    assert!(run.admitted.windows(2).all(|w| w[0].1 < w[1].1));
    let last = run.admitted.len() as u64;
    let (shard, rank) = ((last % u64::from(S)) as u32, last / u64::from(S));
    let seat = Seat {
        shard,
        rank: Some(rank),
        pre: false,
        admitted_ms: None,
        // All joined in index order, one epoch: the place is the index.
        place: Some(last),
        asked: false,
    };
    let status = run.state.status_of(&seat, 30_000);
    assert_eq!(
        status,
        Status::SoldOut {
            position: 1,
            may_return: false
        }
    );
    let held = RoomState {
        held: 2,
        ..run.state.clone()
    };
    assert!(matches!(
        held.status_of(&seat, 30_000),
        Status::SoldOut {
            may_return: true,
            ..
        }
    ));
    assert!(run.state.likely_sold_out(1, 30_000));
}

#[test]
fn admission_resumes_in_order_when_units_come_back() {
    let run = run_with_stock(200, 5, 100, |_| true, Some((20_000, 3)), 40_000);
    assert_eq!(run.remaining, 0);
    assert_eq!(run.admitted.len(), 8, "{:?}", run.admitted);
    let idx: Vec<usize> = run.admitted.iter().map(|a| a.1).collect();
    assert_eq!(idx, (0..8).collect::<Vec<_>>(), "in their order");
    assert!(run.admitted[5].0 >= 20_000, "{:?}", run.admitted);
}

#[test]
fn the_overbook_bounds_the_passes_outstanding_and_expiry_frees_them() {
    // Nobody buys: 4 units × 2.0 = 8 passes at once; they expire after 10 s and free their slots.
    let run = run_with_stock(200, 4, 200, |_| false, None, 10_500);
    assert_eq!(run.admitted.len(), 8, "{:?}", run.admitted);
    let later = run_with_stock(200, 4, 200, |_| false, None, 20_000);
    assert_eq!(later.admitted.len(), 16, "{:?}", later.admitted);
    // Without a stock reading nobody is admitted.
    let blind = RoomState::new(config(600, None), S, 0).with_stock(None, 0);
    assert_eq!(blind.allowance(), 0);
}

#[test]
fn a_state_of_before_the_stock_still_reads() {
    let state = RoomState::new(config(600, None), S, 5).with_stock(
        Some(Stock {
            remaining: 7,
            held: 3,
        }),
        2,
    );
    assert_eq!(RoomState::decode(&state.encode()), Some(state.clone()));
    let old = "s1;600;60;-;1;5;0;0;01;0,0;1,1;2;0;0";
    let read = RoomState::decode(old).expect("an s1 state reads");
    assert_eq!(
        (read.remaining, read.overbook, read.window.as_str()),
        (None, 150, "01")
    );
    assert_eq!(
        RoomConfig::decode("600;60;-").map(|c| c.overbook),
        Some(150)
    );
}

/// A room run the way the coordinator runs it (issue 36): each tick settles the members who
/// joined before the horizon into the tick's epoch, numbers them in the total order, and admits
/// from the window. `joins[s]`: join instants of shard `s`'s members (non-decreasing). Calls
/// `check(state, places, now)` every 100 ms, with each member's place once numbered.
fn run_numbered(
    rate: u32,
    joins: &[Vec<i64>],
    until: i64,
    mut check: impl FnMut(&RoomState, &[Vec<Option<u64>>], i64),
) {
    let cfg = config(rate, None);
    let mut state = RoomState::new(cfg, S, 0);
    let mut epoch_of: Vec<Vec<Option<u64>>> = joins.iter().map(|j| vec![None; j.len()]).collect();
    let mut places: Vec<Vec<Option<u64>>> = epoch_of.clone();
    let mut placed = 0u64;
    let mut epoch = 1u64;
    let mut now = 0;
    while now <= until {
        if now % TICK_MS == 0 {
            let (mut next, admissions) = state.advance(cfg, now);
            // Admitted in the order of the places: the k-th admission is place k.
            let mut given: Vec<(i64, usize, u64)> = admissions
                .iter()
                .enumerate()
                .flat_map(|(s, list)| list.iter().map(move |&(r, ms)| (ms, s, r)))
                .collect();
            given.sort();
            for (i, &(_, s, r)) in given.iter().enumerate() {
                assert_eq!(
                    places[s][r as usize],
                    Some(state.a_base + i as u64),
                    "order"
                );
            }
            let mut newly = vec![Vec::new(); S as usize];
            for s in 0..S as usize {
                for (r, &j) in joins[s].iter().enumerate() {
                    if epoch_of[s][r].is_none() && j < now - HORIZON_MS {
                        epoch_of[s][r] = Some(epoch);
                        newly[s].push(Head {
                            rank: r as u64,
                            key: Key::post(epoch, j, s as u32, r as u64),
                        });
                    }
                }
            }
            for (i, (s, r)) in crate::room::order::merge_ranked(&newly)
                .into_iter()
                .enumerate()
            {
                places[s as usize][r as usize] = Some(placed + i as u64);
            }
            placed += newly.iter().map(Vec::len).sum::<usize>() as u64;
            epoch += 1;
            let target = next.window_target();
            let heads: Vec<Vec<Head>> = (0..S as usize)
                .map(|s| {
                    (next.shard_base[s] as usize..joins[s].len())
                        .filter_map(|r| {
                            epoch_of[s][r].map(|e| Head {
                                rank: r as u64,
                                key: Key::post(e, joins[s][r], s as u32, r as u64),
                            })
                        })
                        .take(target)
                        .collect()
                })
                .collect();
            let joined = joins.iter().map(|j| j.len() as u64).collect();
            next = next.with_window(&heads, joined, 0);
            next.shard_settled = epoch_of
                .iter()
                .map(|e| e.iter().filter(|e| e.is_some()).count() as u64)
                .collect();
            next.placed = placed;
            state = next;
        }
        check(&state, &places, now);
        now += 100;
    }
}

fn seat(s: usize, r: usize, place: Option<u64>) -> Seat {
    Seat {
        shard: s as u32,
        rank: Some(r as u64),
        pre: false,
        admitted_ms: None,
        place,
        asked: true,
    }
}

#[test]
fn the_position_is_exact_and_monotone_for_every_member() {
    // 600 members joining over 12 s into the 4 shards (uneven: shard 0 twice as busy), admitted
    // at 1,200/min (20/s): the line is long, far beyond the window.
    let mut joins = vec![Vec::new(); S as usize];
    for i in 0..600i64 {
        let s = [0, 0, 1, 2, 3][(i * 7 % 5) as usize];
        joins[s].push(i * 20);
    }
    let mut last: Vec<Vec<Option<u64>>> = joins.iter().map(|j| vec![None; j.len()]).collect();
    let mut checked = 0;
    run_numbered(1_200, &joins, 45_000, |state, places, now| {
        let admitted = state.admitted(now);
        // Everyone numbered: exact (the count of members numbered before them and not yet
        // admitted, plus one), never rising from one poll to the next.
        let mut snapshot = Vec::new();
        for s in 0..S as usize {
            for (r, p) in places[s].iter().enumerate() {
                let Some(place) = *p else { continue };
                match state.status_of(&seat(s, r, Some(place)), now) {
                    Status::Waiting { position, .. } => {
                        assert_eq!(position, place - admitted + 1, "exact");
                        if let Some(before) = last[s][r] {
                            assert!(
                                position <= before,
                                "rose from {before} to {position} at {now}"
                            );
                        }
                        last[s][r] = Some(position);
                        snapshot.push((joins[s][r], position));
                        checked += 1;
                    }
                    Status::Admitted { .. } | Status::AdmittedEarlier => {
                        assert!(place < admitted);
                        last[s][r] = Some(0);
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
        // In one snapshot, whoever joined more than the settle (1 s) after another is behind.
        snapshot.sort();
        for (i, &(join_a, pos_a)) in snapshot.iter().enumerate() {
            for &(join_b, pos_b) in &snapshot[i + 1..] {
                if join_b > join_a + HORIZON_MS + TICK_MS {
                    assert!(
                        pos_b > pos_a,
                        "{join_b} ({pos_b}) ahead of {join_a} ({pos_a})"
                    );
                }
            }
        }
    });
    assert!(checked > 10_000, "{checked}");
}
