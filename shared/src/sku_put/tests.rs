//! The admin body's tests: schedule fields keep, clear or set, a body of them alone is
//! schedule-only, the waiting room and the bot defences name their bad members, the sale's ranges.

use serde_json::Value;

use super::*;
use crate::wire::SkuView;
#[test]
fn schedule_fields_keep_clear_or_set_and_a_body_of_them_only_is_schedule_only() {
    let sale = r#""name":"S","price_cents":0,"stock":1,"max_per_user":1"#;
    let put = |b: &str| SkuPut::from_json(b.as_bytes());
    let Ok(SkuPut::Sale(full)) = put(&format!("{{{sale}}}")) else {
        panic!("a sale")
    };
    assert_eq!(full.schedule(), ScheduleUpdate::default());
    let Ok(SkuPut::Sale(full)) = put(&format!(
        r#"{{{sale},"starts_at":"2026-12-01T10:00:00Z","ends_at":null,"paused":true}}"#
    )) else {
        panic!("a sale with a schedule")
    };
    assert_eq!(
        full.schedule(),
        ScheduleUpdate {
            starts_at: Update::Set(Timestamp::parse("2026-12-01T10:00:00Z").expect("ts")),
            ends_at: Update::Clear,
            paused: Some(true),
            waiting_room: Update::Keep,
            proof_of_work: Update::Keep,
            network_limits: Update::Keep,
        }
    );
    assert_eq!(
        put(r#"{"paused":false}"#),
        Ok(SkuPut::Schedule(ScheduleUpdate {
            paused: Some(false),
            ..ScheduleUpdate::default()
        }))
    );
    assert_eq!(
        put(r#"{"starts_at":null}"#),
        Ok(SkuPut::Schedule(ScheduleUpdate {
            starts_at: Update::Clear,
            ..ScheduleUpdate::default()
        }))
    );
    // A body with some sale field is a sale: the others are required as before.
    assert!(put(r#"{"stock":3,"paused":true}"#).is_err());
    assert!(put("{}").is_err());
    for bad in [
        r#"{"starts_at":"tomorrow"}"#,
        r#"{"starts_at":1796119200}"#,
        r#"{"ends_at":"2026-12-01T10:00:00"}"#,
        r#"{"paused":"yes"}"#,
        r#"{"paused":null}"#,
        r#"{"starts_at":"2026-12-01T10:00:00Z","ends_at":"2026-12-01T10:00:00Z"}"#,
        r#"{"starts_at":"2026-12-01T10:00:00Z","ends_at":"2026-12-01T09:00:00Z"}"#,
    ] {
        assert!(put(bad).is_err(), "{bad}");
        let with_sale = bad.replacen('{', &format!("{{{sale},"), 1);
        assert!(put(&with_sale).is_err(), "{with_sale}");
    }
    // Views written before the schedule existed still parse (no schedule).
    let old: SkuView = serde_json::from_str(
        r#"{"sku":"A","name":"S","price_cents":1,"stock":2,"max_per_user":1}"#,
    )
    .expect("old view");
    assert_eq!(old.schedule(), Schedule::default());
    // And the origin always writes the three fields.
    let json = serde_json::to_value(&old).expect("json");
    assert_eq!(
        (&json["starts_at"], &json["ends_at"], &json["paused"]),
        (&Value::Null, &Value::Null, &Value::Bool(false))
    );
}

#[test]
fn waiting_room_keeps_disables_or_sets_and_bad_values_name_the_member() {
    let sale = r#""name":"S","price_cents":0,"stock":1,"max_per_user":1"#;
    let put = |b: &str| SkuPut::from_json(b.as_bytes());
    let Ok(SkuPut::Sale(full)) = put(&format!(
        r#"{{{sale},"waiting_room":{{"admit_per_minute":600,"pass_secs":120}}}}"#
    )) else {
        panic!("a sale with a room")
    };
    assert_eq!(
        full.waiting_room,
        Update::Set(WaitingRoom {
            admit_per_minute: 600,
            pass_secs: 120
        })
    );
    assert_eq!(
        put(r#"{"waiting_room":null}"#),
        Ok(SkuPut::Schedule(ScheduleUpdate {
            waiting_room: Update::Clear,
            ..ScheduleUpdate::default()
        }))
    );
    assert_eq!(
        put(r#"{"waiting_room":{"admit_per_minute":1000000,"pass_secs":86400}}"#),
        Ok(SkuPut::Schedule(ScheduleUpdate {
            waiting_room: Update::Set(WaitingRoom {
                admit_per_minute: 1_000_000,
                pass_secs: 86_400
            }),
            ..ScheduleUpdate::default()
        }))
    );
    for (bad, field) in [
        (r#"{"waiting_room":true}"#, "waiting_room"),
        (
            r#"{"waiting_room":{"pass_secs":60}}"#,
            "waiting_room.admit_per_minute",
        ),
        (
            r#"{"waiting_room":{"admit_per_minute":0,"pass_secs":60}}"#,
            "waiting_room.admit_per_minute",
        ),
        (
            r#"{"waiting_room":{"admit_per_minute":1000001,"pass_secs":60}}"#,
            "waiting_room.admit_per_minute",
        ),
        (
            r#"{"waiting_room":{"admit_per_minute":1.5,"pass_secs":60}}"#,
            "waiting_room.admit_per_minute",
        ),
        (
            r#"{"waiting_room":{"admit_per_minute":60,"pass_secs":0}}"#,
            "waiting_room.pass_secs",
        ),
        (
            r#"{"waiting_room":{"admit_per_minute":60,"pass_secs":86401}}"#,
            "waiting_room.pass_secs",
        ),
        (
            r#"{"waiting_room":{"admit_per_minute":60,"pass_secs":"60"}}"#,
            "waiting_room.pass_secs",
        ),
    ] {
        let e = put(bad).expect_err(bad);
        assert!(e.to_string().contains(field), "{bad}: {e}");
        let with_sale = bad.replacen('{', &format!("{{{sale},"), 1);
        assert!(put(&with_sale).is_err(), "{with_sale}");
    }
    let old: SkuView = serde_json::from_str(
        r#"{"sku":"A","name":"S","price_cents":1,"stock":2,"max_per_user":1}"#,
    )
    .expect("old view");
    assert_eq!(old.waiting_room, None);
    let json = serde_json::to_value(&old).expect("json");
    assert_eq!(json["waiting_room"], Value::Null);
}

#[test]
fn sku_upsert_validates_ranges() {
    let ok = SkuUpsert::from_json(br#"{"name":"Shoe","price_cents":0,"stock":0,"max_per_user":1}"#);
    assert_eq!(ok.map(|s| s.hold_secs), Ok(None));
    let held = |v: &str| {
        SkuUpsert::from_json(
            format!(r#"{{"name":"S","price_cents":0,"stock":0,"max_per_user":1,"hold_secs":{v}}}"#)
                .as_bytes(),
        )
        .map(|s| s.hold_secs)
    };
    assert_eq!(held("0"), Ok(None));
    assert_eq!(held("null"), Ok(None));
    assert_eq!(held("900"), Ok(Some(900)));
    assert_eq!(held("86400"), Ok(Some(86_400)));
    for bad in [
        &br#"{"name":"","price_cents":0,"stock":0,"max_per_user":1}"#[..],
        br#"{"name":"S","price_cents":-1,"stock":0,"max_per_user":1}"#,
        br#"{"name":"S","price_cents":0,"stock":-1,"max_per_user":1}"#,
        br#"{"name":"S","price_cents":0,"stock":0,"max_per_user":0}"#,
        br#"{"name":"S","price_cents":0.5,"stock":0,"max_per_user":1}"#,
        br#"{"name":"S","price_cents":0,"stock":0}"#,
        br#"{"name":"a\u0000b","price_cents":0,"stock":0,"max_per_user":1}"#,
        br#"{"name":"S","price_cents":0,"stock":0,"max_per_user":1,"hold_secs":86401}"#,
        br#"{"name":"S","price_cents":0,"stock":0,"max_per_user":1,"hold_secs":-1}"#,
        br#"{"name":"S","price_cents":0,"stock":0,"max_per_user":1,"hold_secs":1.5}"#,
        br#"{"name":"S","price_cents":0,"stock":0,"max_per_user":1,"hold_secs":"60"}"#,
    ] {
        assert!(
            SkuUpsert::from_json(bad).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn bot_defences_are_schedule_fields_that_keep_disable_or_set() {
    let put = |b: &str| SkuPut::from_json(b.as_bytes());
    assert_eq!(
        put(r#"{"proof_of_work":{"min_bits":8,"max_bits":16}}"#),
        Ok(SkuPut::Schedule(ScheduleUpdate {
            proof_of_work: Update::Set(ProofOfWork {
                min_bits: 8,
                max_bits: 16
            }),
            ..ScheduleUpdate::default()
        }))
    );
    assert_eq!(
        put(r#"{"network_limits":null,"proof_of_work":null}"#),
        Ok(SkuPut::Schedule(ScheduleUpdate {
            proof_of_work: Update::Clear,
            network_limits: Update::Clear,
            ..ScheduleUpdate::default()
        }))
    );
    let sale = r#""name":"S","price_cents":0,"stock":1,"max_per_user":1"#;
    let Ok(SkuPut::Sale(full)) = put(&format!(
        r#"{{{sale},"network_limits":{{"units":3,"admissions":10}}}}"#
    )) else {
        panic!("a sale with network limits")
    };
    assert_eq!(
        full.network_limits,
        Update::Set(NetworkLimits {
            admissions: Some(10),
            units: Some(3),
            window_secs: NetworkLimits::DEFAULT_WINDOW_SECS
        })
    );
    assert_eq!(full.proof_of_work, Update::Keep);
    for (bad, field) in [
        (r#"{"proof_of_work":true}"#, "proof_of_work"),
        (
            r#"{"proof_of_work":{"min_bits":9}}"#,
            "proof_of_work.max_bits",
        ),
        (r#"{"network_limits":[1]}"#, "network_limits"),
        (r#"{"network_limits":{"units":0}}"#, "network_limits.units"),
    ] {
        let e = put(bad).expect_err(bad);
        assert!(e.to_string().contains(field), "{bad}: {e}");
    }
    // Views cached before the defences existed parse with none.
    let old: SkuView = serde_json::from_str(
        r#"{"sku":"A","name":"S","price_cents":1,"stock":2,"max_per_user":1}"#,
    )
    .expect("old view");
    assert_eq!((old.proof_of_work, old.network_limits), (None, None));
}
