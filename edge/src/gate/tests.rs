//! The per-user gate's decisions, natively: the order inside `begin` (key, new work's checks,
//! proof, rate, shields),
//! what `finish` stores or releases, the cap's count, the purge.

use super::*;
use crate::protocol::RateSettings;
use crate::shield::SkuFacts;
use shared::ErrorCode;

const NOW: i64 = 1_700_000_000_000;

fn policy() -> Policy {
    Policy::new("purchase", 5, 10).expect("policy")
}

fn req(fp: &str) -> BeginRequest {
    BeginRequest {
        key: "k".into(),
        fingerprint: fp.into(),
        sku: "A".into(),
        qty: 1,
        facts: SkuFacts::default(),
        rate: RateSettings {
            name: "purchase".into(),
            quota: 5,
            window_secs: 10,
        },
        in_flight_timeout_ms: 30_000,
        count_ttl_ms: 5_000,
        schedule_margin_ms: 2_000,
        proof: None,
        new_work_refused: false,
    }
}

#[test]
fn sale_ended_is_answered_after_the_lookup_so_a_bought_key_still_replays() {
    let mut r = req("f");
    r.facts = SkuFacts {
        schedule: Some(shared::Schedule {
            ends_at: shared::Timestamp::from_unix_ms(NOW - 10_000),
            ..shared::Schedule::default()
        }),
        ..SkuFacts::default()
    };
    let (reply, e) = begin(&policy(), &Snapshot::default(), &r, NOW, 1);
    let Verdict::Answered { status, body } = &reply.verdict else {
        panic!("{reply:?}")
    };
    assert_eq!(*status, 409);
    assert_eq!(
        serde_json::from_str::<Problem>(body).map(|p| p.code).ok(),
        Some(ErrorCode::SaleEnded)
    );
    assert_eq!(e.record, RecordChange::Keep, "not stored with the key");
    // A key that bought before the end gets its replay.
    let bought = Snapshot {
        record: Some(Record {
            fingerprint: "f".into(),
            attempt: 1,
            state: State::Done {
                status: 201,
                body: "{}".into(),
            },
            updated_ms: NOW - 20_000,
        }),
        ..Snapshot::default()
    };
    let (reply, _) = begin(&policy(), &bought, &r, NOW, 2);
    assert!(
        matches!(reply.verdict, Verdict::Replay { status: 201, .. }),
        "{reply:?}"
    );
    // Within the margin after the end, the origin decides.
    r.facts.schedule = Some(shared::Schedule {
        ends_at: shared::Timestamp::from_unix_ms(NOW - 1_000),
        ..shared::Schedule::default()
    });
    let (reply, _) = begin(&policy(), &Snapshot::default(), &r, NOW, 3);
    assert!(
        matches!(reply.verdict, Verdict::Proceed { .. }),
        "{reply:?}"
    );
}

fn apply(snap: &mut Snapshot, e: Effects) {
    if let Some(t) = e.new_tat_us {
        snap.tat_us = Some(t);
    }
    match e.record {
        RecordChange::Keep => {}
        RecordChange::Put(r) => snap.record = Some(r),
        RecordChange::Delete => snap.record = None,
    }
    snap.bought += e.bought_delta;
    if e.count_confirmed {
        snap.counted_ms = Some(NOW);
    }
}

fn finish_req(attempt: i64, status: u16, body: &str) -> FinishRequest {
    FinishRequest {
        key: "k".into(),
        attempt,
        sku: "A".into(),
        qty: 1,
        status,
        body: body.into(),
        proof: None,
    }
}

#[test]
fn a_purchase_round_trip_then_replay() {
    let mut snap = Snapshot::default();
    let (reply, e) = begin(&policy(), &snap, &req("f"), NOW, 1);
    assert_eq!(reply.verdict, Verdict::Proceed { attempt: 1 });
    assert_eq!(
        reply.rate,
        RateOutcome::Allowed {
            remaining: 4,
            reset_secs: 2
        }
    );
    apply(&mut snap, e);

    let (dup, e) = begin(&policy(), &snap, &req("f"), NOW, 2);
    assert_eq!(dup.verdict, Verdict::InFlight);
    apply(&mut snap, e);
    let (other, _) = begin(&policy(), &snap, &req("g"), NOW, 3);
    assert_eq!(other.verdict, Verdict::Reused);

    let (fin, e) = finish(
        snap.record.as_ref(),
        &finish_req(1, 201, r#"{"order_id":"o"}"#),
        NOW + 5,
    );
    assert!(fin.stored);
    assert!(e.record.kept());
    apply(&mut snap, e);
    assert_eq!(snap.bought, 1);

    let (replay, _) = begin(&policy(), &snap, &req("f"), NOW + 10, 4);
    assert_eq!(
        replay.verdict,
        Verdict::Replay {
            status: 201,
            body: r#"{"order_id":"o"}"#.into()
        }
    );
}

#[test]
fn a_failed_attempt_leaves_the_key_in_doubt_and_a_stale_finish_is_ignored() {
    let mut snap = Snapshot::default();
    let (_, e) = begin(&policy(), &snap, &req("f"), NOW, 1);
    apply(&mut snap, e);
    let unavailable = Problem::new(ErrorCode::Unavailable, "origin down").to_json();
    let (fin, e) = finish(snap.record.as_ref(), &finish_req(1, 503, &unavailable), NOW);
    assert!(!fin.stored);
    assert!(e.record.kept(), "purged with the done records");
    apply(&mut snap, e);
    assert!(matches!(
        snap.record,
        Some(Record {
            state: State::InDoubt { proof: None },
            ..
        })
    ));
    // An answer the origin gave without deciding anything (a 400) releases the key.
    let mut released = Snapshot::default();
    let (_, e) = begin(&policy(), &released, &req("f"), NOW, 1);
    apply(&mut released, e);
    let bad = Problem::new(ErrorCode::InvalidRequest, "x").to_json();
    let (_, e) = finish(released.record.as_ref(), &finish_req(1, 400, &bad), NOW);
    apply(&mut released, e);
    assert_eq!(released.record, None);

    let (again, e) = begin(&policy(), &snap, &req("f"), NOW + 1, 2);
    assert_eq!(again.verdict, Verdict::Proceed { attempt: 2 });
    apply(&mut snap, e);
    // The first attempt's late answer must not overwrite the second attempt's record.
    let (late, e) = finish(snap.record.as_ref(), &finish_req(1, 201, "{}"), NOW + 2);
    assert!(!late.stored);
    assert_eq!(e, Effects::default());
}

#[test]
fn an_expired_in_flight_attempt_is_taken_over() {
    let mut snap = Snapshot::default();
    let (_, e) = begin(&policy(), &snap, &req("f"), NOW, 1);
    apply(&mut snap, e);
    let (r, _) = begin(&policy(), &snap, &req("f"), NOW + 30_000, 2);
    assert_eq!(r.verdict, Verdict::Proceed { attempt: 2 });
}

#[test]
fn the_rate_limit_comes_first_and_changes_nothing_else() {
    let mut snap = Snapshot::default();
    for attempt in 1..=5 {
        let (r, e) = begin(&policy(), &snap, &req("f"), NOW, attempt);
        assert_ne!(r.verdict, Verdict::Limited);
        apply(&mut snap, e);
    }
    let before = snap.clone();
    let (r, e) = begin(&policy(), &snap, &req("f"), NOW, 6);
    assert_eq!(r.verdict, Verdict::Limited);
    assert_eq!(
        r.rate,
        RateOutcome::Limited {
            retry_after_secs: 2
        }
    );
    apply(&mut snap, e);
    assert_eq!(snap, before);
}

#[test]
fn shields_answer_after_the_idempotency_lookup_and_store_nothing() {
    let mut snap = Snapshot {
        bought: 2,
        counted_ms: Some(NOW - 1),
        ..Snapshot::default()
    };
    let mut r = req("f");
    r.facts = SkuFacts {
        stock_bound: Some(10),
        max_per_user: Some(2),
        ..SkuFacts::default()
    };
    let (reply, e) = begin(&policy(), &snap, &r, NOW, 1);
    let Verdict::Answered { status, body } = &reply.verdict else {
        panic!("{reply:?}")
    };
    assert_eq!(
        (*status, crate::reply::problem_code(body.as_bytes())),
        (409, Some(ErrorCode::PurchaseLimit))
    );
    // Counted by the rate limit, but the key stays free: the origin never decided it.
    assert!(e.new_tat_us.is_some());
    assert_eq!(e.record, RecordChange::Keep);
    assert!(!e.record.kept());
    apply(&mut snap, e);
    assert_eq!(snap.record, None);

    let mut sold = req("g");
    sold.key = "k2".into();
    sold.facts = SkuFacts {
        stock_bound: Some(0),
        max_per_user: Some(2),
        ..SkuFacts::default()
    };
    let mut fresh = Snapshot::default();
    let (reply, e) = begin(&policy(), &fresh, &sold, NOW, 3);
    let Verdict::Answered { body, .. } = &reply.verdict else {
        panic!("{reply:?}")
    };
    assert_eq!(
        crate::reply::problem_code(body.as_bytes()),
        Some(ErrorCode::SoldOut)
    );
    apply(&mut fresh, e);
    // The shield was wrong (a restock this data center had not seen): once the facts say
    // so, the same key goes to the origin instead of replaying a sold_out nobody decided.
    sold.facts = SkuFacts {
        stock_bound: Some(5),
        ..sold.facts
    };
    let (again, _) = begin(&policy(), &fresh, &sold, NOW + 1, 4);
    assert_eq!(again.verdict, Verdict::Proceed { attempt: 4 });
}

#[test]
fn a_shield_answer_leaves_an_expired_attempt_to_finish() {
    // An attempt whose record expired (its worker died) is not overwritten by a shield
    // answer: if its origin answer still arrives, it is stored as the origin decided it.
    let mut snap = Snapshot::default();
    let (_, e) = begin(&policy(), &snap, &req("f"), NOW, 1);
    apply(&mut snap, e);
    let mut r = req("f");
    r.facts = SkuFacts {
        stock_bound: Some(0),
        ..SkuFacts::default()
    };
    let (reply, e) = begin(&policy(), &snap, &r, NOW + 30_000, 2);
    assert!(matches!(
        reply.verdict,
        Verdict::Answered { status: 409, .. }
    ));
    apply(&mut snap, e);
    let (fin, _) = finish(
        snap.record.as_ref(),
        &finish_req(1, 201, "{}"),
        NOW + 30_001,
    );
    assert!(fin.stored);
}

#[test]
fn the_order_bucket_is_a_plain_gcra() {
    let order = Policy::new("order", 2, 10).expect("policy");
    let (first, tat) = limit(&order, None, NOW);
    assert!(matches!(first, RateOutcome::Allowed { remaining: 1, .. }));
    let (second, tat) = limit(&order, tat, NOW);
    assert!(matches!(second, RateOutcome::Allowed { remaining: 0, .. }));
    let (third, none) = limit(&order, tat, NOW);
    assert_eq!(
        third,
        RateOutcome::Limited {
            retry_after_secs: 5
        }
    );
    assert_eq!(none, None, "a limited request changes nothing");
}

#[test]
fn a_cancellation_gives_units_back_once() {
    assert_eq!(returned_delta(3, 2, false), -2);
    assert_eq!(returned_delta(3, 2, true), 0, "a repeated cancel");
    assert_eq!(returned_delta(1, 2, false), -1, "never below zero");
    assert_eq!(returned_delta(0, 2, false), 0, "bought around the edge");
    // The cap pre-check then lets the user buy again.
    let facts = SkuFacts {
        stock_bound: Some(10),
        max_per_user: Some(1),
        ..SkuFacts::default()
    };
    assert_eq!(
        shield::decide(&facts, 1, 1),
        Shield::Answer(ErrorCode::PurchaseLimit)
    );
    assert_eq!(
        shield::decide(&facts, 1 + returned_delta(1, 1, false), 1),
        Shield::Pass
    );
}

#[test]
fn the_cap_counts_units_only_while_the_origin_confirmed_them_recently() {
    let capped = |mut r: BeginRequest| {
        r.facts = SkuFacts {
            max_per_user: Some(1),
            ..SkuFacts::default()
        };
        r
    };
    let mut snap = Snapshot::default();
    let (_, e) = begin(&policy(), &snap, &capped(req("f")), NOW, 1);
    apply(&mut snap, e);
    let (_, e) = finish(snap.record.as_ref(), &finish_req(1, 201, "{}"), NOW);
    assert!(e.count_confirmed);
    apply(&mut snap, e);
    assert_eq!((snap.bought, snap.counted_ms), (1, Some(NOW)));
    let mut next = capped(req("g"));
    next.key = "k2".into();
    // The rows the object reads for the new key: no record yet.
    let mut snap = Snapshot {
        record: None,
        ..snap
    };
    // Within the TTL: the edge answers the cap.
    let (r, _) = begin(&policy(), &snap, &next, NOW + 4_999, 2);
    assert!(matches!(r.verdict, Verdict::Answered { status: 409, .. }));
    // Past it: the hold may have expired and the allowance come back: the origin decides.
    let (r, e) = begin(&policy(), &snap, &next, NOW + 5_000, 3);
    assert_eq!(r.verdict, Verdict::Proceed { attempt: 3 });
    apply(&mut snap, e);
    // It says purchase_limit (the unit is still the user's): the count is confirmed again.
    let limit = Problem::new(ErrorCode::PurchaseLimit, "x").to_json();
    let mut fin = finish_req(3, 409, &limit);
    fin.key = "k2".into();
    let (stored, e) = finish(snap.record.as_ref(), &fin, NOW + 5_010);
    assert!(stored.stored && e.count_confirmed);
    assert_eq!(e.bought_delta, 0);
    // A sold_out confirms nothing about the count.
    let sold = Problem::new(ErrorCode::SoldOut, "x").to_json();
    let (stored, e) = finish(snap.record.as_ref(), &finish_req(3, 409, &sold), NOW);
    assert!(stored.stored && !e.count_confirmed);
    // Never confirmed (a count from before `counted_ms` existed): not counted.
    let legacy = Snapshot {
        bought: 5,
        ..Snapshot::default()
    };
    assert_eq!(counted_units(&legacy, NOW, 5_000), 0);
    // qty alone above the cap needs no count.
    let mut two = capped(req("h"));
    two.qty = 2;
    let (r, _) = begin(&policy(), &legacy, &two, NOW, 4);
    assert!(matches!(r.verdict, Verdict::Answered { status: 409, .. }));
}

#[test]
fn a_held_201_is_stored_and_replayed_byte_for_byte() {
    // A hold's 201 (`status`, `expires_at`, and whatever the origin adds later) is the
    // origin's answer like any other: stored as received, replayed as stored.
    let held = r#"{"order_id":"0192f1c2-7b3a-7c4d-9e8f-0123456789ab","sku":"A","qty":1,"user":"alice","remaining":0,"status":"held","expires_at":"2026-05-01T12:00:00.123Z"}"#;
    let mut snap = Snapshot::default();
    let (_, e) = begin(&policy(), &snap, &req("f"), NOW, 1);
    apply(&mut snap, e);
    let (fin, e) = finish(snap.record.as_ref(), &finish_req(1, 201, held), NOW + 1);
    assert!(fin.stored);
    apply(&mut snap, e);
    assert_eq!(snap.bought, 1);
    let (replay, _) = begin(&policy(), &snap, &req("f"), NOW + 2, 2);
    assert_eq!(
        replay.verdict,
        Verdict::Replay {
            status: 201,
            body: held.into()
        }
    );
}

#[test]
fn alarm_arithmetic() {
    assert_eq!(purge_cutoff_ms(NOW, 86_400_000), NOW - 86_400_000);
    assert_eq!(next_alarm_ms(NOW, 86_400_000), NOW + 86_400_000 + 60_000);
    assert_eq!(next_alarm_ms(i64::MAX, 1), i64::MAX);
}

#[test]
fn a_proof_is_spent_by_the_first_attempt_that_carries_it_and_refuses_every_later_one() {
    let spend = crate::proof::Spend {
        id: "c0ffee".into(),
        expires_ms: NOW + 60_000,
    };
    let r = BeginRequest {
        proof: Some(spend.clone()),
        ..req("f")
    };
    let (reply, e) = begin(&policy(), &Snapshot::default(), &r, NOW, 1);
    assert!(
        matches!(reply.verdict, Verdict::Proceed { .. }),
        "{reply:?}"
    );
    assert_eq!(e.spend, Some(spend.clone()), "recorded as spent");
    // Spent: refused before the rate limit is charged (the key was new work).
    let spent = Snapshot {
        proof_spent: true,
        ..Snapshot::default()
    };
    let (reply, e) = begin(&policy(), &spent, &r, NOW, 2);
    assert_eq!(reply.verdict, Verdict::ProofSpent);
    assert_eq!(e, Effects::default(), "nothing changes");
    assert!(matches!(
        reply.rate,
        RateOutcome::Allowed { remaining: 4, .. }
    ));
    // An attempt over the rate limit still spends its proof (it was shown).
    let limited = Snapshot {
        tat_us: Some((NOW + 60_000) * 1_000),
        ..Snapshot::default()
    };
    let (reply, e) = begin(&policy(), &limited, &r, NOW, 3);
    assert_eq!(reply.verdict, Verdict::Limited);
    assert_eq!(e.spend, Some(spend));
    // Without a proof, nothing is spent and `proof_spent` is not consulted.
    let (reply, e) = begin(&policy(), &spent, &req("f"), NOW, 4);
    assert!(matches!(reply.verdict, Verdict::Proceed { .. }));
    assert_eq!(e.spend, None);
}

fn decided(fp: &str, status: u16, body: &str) -> Snapshot {
    Snapshot {
        record: Some(Record {
            fingerprint: fp.into(),
            attempt: 1,
            state: State::Done {
                status,
                body: body.into(),
            },
            updated_ms: NOW - 60_000,
        }),
        ..Snapshot::default()
    }
}

/// Issue 35: a retry of a key that bought must get its 201 whatever the defences say now — the
/// network's bound it filled itself, an expired pass, the proof it spent buying.
#[test]
fn a_decided_key_replays_before_any_check_of_new_work_and_spends_nothing() {
    let spend = crate::proof::Spend {
        id: "c0ffee".into(),
        expires_ms: NOW + 60_000,
    };
    for (refused, proof, spent) in [
        (true, None, false), // pass expired, network bound filled, not started…
        (false, Some(spend.clone()), true), // the proof it bought with, spent by that purchase
        (true, Some(spend.clone()), true), // both
    ] {
        let mut snap = decided("f", 201, r#"{"order_id":"o"}"#);
        snap.proof_spent = spent;
        let r = BeginRequest {
            proof: proof.clone(),
            new_work_refused: refused,
            ..req("f")
        };
        let (reply, e) = begin(&policy(), &snap, &r, NOW, 2);
        assert_eq!(
            reply.verdict,
            Verdict::Replay {
                status: 201,
                body: r#"{"order_id":"o"}"#.into()
            },
            "refused {refused}, proof {proof:?}"
        );
        // Counted by the rate limit like every attempt at a key; nothing spent or written.
        assert!(e.new_tat_us.is_some());
        assert_eq!(e.spend, None);
        assert_eq!(e.record, RecordChange::Keep);
        assert_eq!((e.bought_delta, e.count_confirmed), (0, false));
    }
    // A stored refusal the origin decided (sold out) replays the same way.
    let snap = decided("f", 409, &Problem::new(ErrorCode::SoldOut, "x").to_json());
    let r = BeginRequest {
        new_work_refused: true,
        ..req("f")
    };
    let (reply, _) = begin(&policy(), &snap, &r, NOW, 2);
    assert!(matches!(reply.verdict, Verdict::Replay { status: 409, .. }));
}

#[test]
fn a_key_in_flight_stays_409_and_a_reused_key_422_whatever_new_work_checks_say() {
    let mut snap = Snapshot::default();
    let (_, e) = begin(&policy(), &snap, &req("f"), NOW, 1);
    apply(&mut snap, e);
    snap.proof_spent = true;
    let refused = BeginRequest {
        new_work_refused: true,
        proof: Some(crate::proof::Spend {
            id: "c0ffee".into(),
            expires_ms: NOW + 60_000,
        }),
        ..req("f")
    };
    let (reply, e) = begin(&policy(), &snap, &refused, NOW + 1, 2);
    assert_eq!(reply.verdict, Verdict::InFlight);
    assert_eq!((e.spend, e.record), (None, RecordChange::Keep));
    let other = BeginRequest {
        fingerprint: "g".into(),
        ..refused
    };
    let (reply, _) = begin(&policy(), &snap, &other, NOW + 1, 3);
    assert_eq!(reply.verdict, Verdict::Reused);
    // Over the rate limit, a key's answer is the 429 (as before: every attempt counts).
    let limited = Snapshot {
        tat_us: Some((NOW + 60_000) * 1_000),
        ..decided("f", 201, "{}")
    };
    let (reply, e) = begin(&policy(), &limited, &req("f"), NOW, 4);
    assert_eq!(reply.verdict, Verdict::Limited);
    assert_eq!(e, Effects::default());
}

#[test]
fn new_work_refused_by_the_worker_is_answered_by_the_worker_and_changes_nothing() {
    // No record, or an in-flight record past its timeout: new work.
    let mut expired = Snapshot::default();
    let (_, e) = begin(&policy(), &expired, &req("f"), NOW, 1);
    apply(&mut expired, e);
    for snap in [Snapshot::default(), expired] {
        let r = BeginRequest {
            new_work_refused: true,
            proof: None,
            facts: SkuFacts {
                stock_bound: Some(0),
                ..SkuFacts::default()
            },
            ..req("f")
        };
        let (reply, e) = begin(&policy(), &snap, &r, NOW + 30_000, 2);
        assert_eq!(reply.verdict, Verdict::Refused);
        assert_eq!(e, Effects::default(), "no rate, no spend, no record");
        assert!(matches!(reply.rate, RateOutcome::Allowed { .. }));
    }
}

/// Issue 35, found by `bench scalpers` under load: the origin sold a unit while the edge timed out
/// waiting for it; the retry of its key met the edge's cached `sold_out` (and its spent proof)
/// instead of the origin's replay. A key in doubt is retried as the same attempt.
#[test]
fn a_key_in_doubt_is_retried_as_that_attempt_past_the_shields_with_its_own_proof() {
    let spend = crate::proof::Spend {
        id: "c0ffee".into(),
        expires_ms: NOW + 60_000,
    };
    let sold_out = SkuFacts {
        stock_bound: Some(0),
        ..SkuFacts::default()
    };
    let attempt = BeginRequest {
        proof: Some(spend.clone()),
        ..req("f")
    };
    let mut snap = Snapshot::default();
    let (_, e) = begin(&policy(), &snap, &attempt, NOW, 1);
    apply(&mut snap, e);
    let unavailable = Problem::new(ErrorCode::Unavailable, "timed out").to_json();
    let mut lost = finish_req(1, 503, &unavailable);
    lost.proof = Some(spend.id.clone());
    let (_, e) = finish(snap.record.as_ref(), &lost, NOW + 3_000);
    apply(&mut snap, e);
    snap.proof_spent = true;
    // The same request again, the sale sold out meanwhile (as the edge's facts say): to the origin.
    let retry = BeginRequest {
        facts: sold_out,
        ..attempt.clone()
    };
    let (reply, e) = begin(&policy(), &snap, &retry, NOW + 4_000, 2);
    assert_eq!(reply.verdict, Verdict::Proceed { attempt: 2 });
    assert!(matches!(
        e.record,
        RecordChange::Put(Record {
            state: State::InFlight,
            attempt: 2,
            ..
        })
    ));
    // …but not with another spent proof, not refused new work, not another request.
    let other = BeginRequest {
        proof: Some(crate::proof::Spend {
            id: "beef".into(),
            ..spend
        }),
        ..retry.clone()
    };
    let (reply, _) = begin(&policy(), &snap, &other, NOW + 4_000, 3);
    assert_eq!(reply.verdict, Verdict::ProofSpent);
    let refused = BeginRequest {
        new_work_refused: true,
        ..retry.clone()
    };
    let (reply, _) = begin(&policy(), &snap, &refused, NOW + 4_000, 4);
    assert_eq!(reply.verdict, Verdict::Refused);
    let (reply, _) = begin(
        &policy(),
        &snap,
        &BeginRequest {
            fingerprint: "g".into(),
            ..retry
        },
        NOW,
        5,
    );
    assert_eq!(reply.verdict, Verdict::Reused);
    // A new key of the same shopper still meets the shield.
    let fresh = BeginRequest {
        key: "k2".into(),
        proof: None,
        facts: sold_out,
        ..req("h")
    };
    let (reply, _) = begin(&policy(), &Snapshot::default(), &fresh, NOW, 6);
    assert!(matches!(
        reply.verdict,
        Verdict::Answered { status: 409, .. }
    ));
}
