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
    };
    assert_eq!(RoomConfig::of(&SkuFacts::default()), None, "no view yet");
    let without = SkuFacts {
        room: Some(RoomFact { waiting_room: None }),
        ..SkuFacts::default()
    };
    assert_eq!(RoomConfig::of(&without), None, "no room");
    let mut facts = SkuFacts {
        room: Some(RoomFact {
            waiting_room: Some(room),
        }),
        ..SkuFacts::default()
    };
    assert_eq!(
        RoomConfig::of(&facts),
        Some(RoomConfig {
            admit_per_minute: 90,
            pass_secs: 30,
            starts_ms: None
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
    }
}

fn post(shard: u32, rank: u64, join_ms: i64) -> Head {
    Head {
        rank,
        key: Key::post(join_ms, shard, rank),
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
