//! The admin `PUT /v1/admin/skus/{sku}` body: a sale ([`SkuUpsert`], a new generation) or only
//! its schedule fields ([`ScheduleUpdate`]: the schedule, the waiting room, the bot defences;
//! absent keeps, `null` clears), told apart by [`SkuPut::from_json`] and parsed once, with
//! errors that name the field (a `BodyError`, 400 `invalid_request`).

use serde::Serialize;
use serde_json::Value;

use crate::body::{BodyError, object, required, setting};
use crate::defence::{NetworkLimits, ProofOfWork};
use crate::room::{Overbook, WaitingRoom};
use crate::schedule::{Schedule, Timestamp, Update};

/// `PUT /v1/admin/skus/{sku}` body: creates or replaces a SKU's sale.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SkuUpsert {
    pub name: String,
    pub price_cents: i64,
    pub stock: i64,
    pub max_per_user: i32,
    /// Seconds a purchase holds its units until it is paid (1..=86400); absent, `null` or 0:
    /// purchases are confirmed at once.
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 86400))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold_secs: Option<u32>,
    /// When purchases open (RFC 3339). Absent: keep the stored value (none for a new SKU);
    /// `null`: clear it (open at once).
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime, example = "2026-12-01T10:00:00Z"))]
    #[serde(skip_serializing_if = "Update::is_keep")]
    pub starts_at: Update<Timestamp>,
    /// When purchases close (RFC 3339, after `starts_at`). Absent: keep; `null`: no end.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    #[serde(skip_serializing_if = "Update::is_keep")]
    pub ends_at: Update<Timestamp>,
    /// Pause (`true`) or resume (`false`) the sale. Absent: keep (not paused for a new SKU).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// The sale's waiting room (`{"admit_per_minute": 1..=1000000, "pass_secs": 1..=86400,
    /// "overbook": 1.0..=10.0}`, the overbook 1.5 by default).
    /// Absent: keep the stored setting (none for a new SKU); `null`: no waiting room.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<WaitingRoom>))]
    #[serde(skip_serializing_if = "Update::is_keep")]
    pub waiting_room: Update<WaitingRoom>,
    /// The sale's proof of work (`{"min_bits": 1..=30, "max_bits": min_bits..=30}`). Absent:
    /// keep the stored setting (none for a new SKU); `null`: no proof of work.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<ProofOfWork>))]
    #[serde(skip_serializing_if = "Update::is_keep")]
    pub proof_of_work: Update<ProofOfWork>,
    /// The sale's bounds per network (`{"admissions": 1..=1000000, "units": 1..=1000000,
    /// "window_secs": 1..=86400}`, either bound optional, the window 3600 by default). Absent:
    /// keep the stored setting (none for a new SKU); `null`: no bounds per network.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<NetworkLimits>))]
    #[serde(skip_serializing_if = "Update::is_keep")]
    pub network_limits: Update<NetworkLimits>,
}

/// The schedule fields of an admin `PUT` (all optional): absent keeps the stored value, `null`
/// clears it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScheduleUpdate {
    pub starts_at: Update<Timestamp>,
    pub ends_at: Update<Timestamp>,
    pub paused: Option<bool>,
    /// `waiting_room`: absent keeps, `null` disables.
    pub waiting_room: Update<WaitingRoom>,
    /// `proof_of_work`: absent keeps, `null` disables.
    pub proof_of_work: Update<ProofOfWork>,
    /// `network_limits`: absent keeps, `null` disables.
    pub network_limits: Update<NetworkLimits>,
}

impl ScheduleUpdate {
    /// The schedule after applying this update to `stored`.
    pub fn apply(&self, stored: Schedule) -> Schedule {
        Schedule {
            starts_at: self.starts_at.apply(stored.starts_at),
            ends_at: self.ends_at.apply(stored.ends_at),
            paused: self.paused.unwrap_or(stored.paused),
        }
    }

    /// Reads the schedule fields of an admin body; `ends_at` must be after `starts_at` when the
    /// body sets both.
    fn from_map(map: &serde_json::Map<String, Value>) -> Result<Self, BodyError> {
        let instant = |field: &'static str| -> Result<Update<Timestamp>, BodyError> {
            match map.get(field) {
                None => Ok(Update::Keep),
                Some(Value::Null) => Ok(Update::Clear),
                Some(Value::String(s)) => {
                    Timestamp::parse(s)
                        .map(Update::Set)
                        .map_err(|e| BodyError::Field {
                            field,
                            reason: e.to_string(),
                        })
                }
                Some(_) => Err(BodyError::Field {
                    field,
                    reason: "must be an RFC 3339 date-time string or null".into(),
                }),
            }
        };
        let starts_at = instant("starts_at")?;
        let ends_at = instant("ends_at")?;
        let paused = match map.get("paused") {
            None => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => {
                return Err(BodyError::Field {
                    field: "paused",
                    reason: "must be true or false".into(),
                });
            }
        };
        let waiting_room = setting(
            map,
            "waiting_room",
            "must be an object {\"admit_per_minute\": int, \"pass_secs\": int} or null",
            waiting_room,
        )?;
        let proof_of_work = setting(
            map,
            "proof_of_work",
            "must be an object {\"min_bits\": int, \"max_bits\": int} or null",
            ProofOfWork::from_map,
        )?;
        let network_limits = setting(
            map,
            "network_limits",
            "must be an object {\"admissions\": int, \"units\": int, \"window_secs\": int} or null",
            NetworkLimits::from_map,
        )?;
        if let (Update::Set(start), Update::Set(end)) = (starts_at, ends_at) {
            if end <= start {
                return Err(BodyError::Field {
                    field: "ends_at",
                    reason: "must be after starts_at".into(),
                });
            }
        }
        Ok(Self {
            starts_at,
            ends_at,
            paused,
            waiting_room,
            proof_of_work,
            network_limits,
        })
    }
}

/// The members of a `waiting_room` object; a bad one is named `waiting_room.<member>`.
fn waiting_room(room: &serde_json::Map<String, Value>) -> Result<WaitingRoom, BodyError> {
    let int = |key: &str, field: &'static str, max: u32| -> Result<u32, BodyError> {
        let bad = || BodyError::Field {
            field,
            reason: format!("must be a JSON integer in 1..={max}"),
        };
        let v = room.get(key).ok_or(BodyError::Missing(field))?;
        match v.as_u64() {
            Some(n) if (1..=u64::from(max)).contains(&n) => u32::try_from(n).map_err(|_| bad()),
            _ => Err(bad()),
        }
    };
    let admit_per_minute = int(
        "admit_per_minute",
        "waiting_room.admit_per_minute",
        WaitingRoom::MAX_ADMIT_PER_MINUTE,
    )?;
    let pass_secs = int(
        "pass_secs",
        "waiting_room.pass_secs",
        WaitingRoom::MAX_PASS_SECS,
    )?;
    // Optional: absent (or null) is the default, 1.5.
    let overbook = match room.get("overbook") {
        None | Some(Value::Null) => Overbook::DEFAULT,
        Some(v) => v
            .as_f64()
            .and_then(Overbook::from_f64)
            .ok_or_else(|| BodyError::Field {
                field: "waiting_room.overbook",
                reason: "must be a JSON number in 1.0..=10.0".into(),
            })?,
    };
    Ok(WaitingRoom {
        admit_per_minute,
        pass_secs,
        overbook,
    })
}

/// What a `PUT /v1/admin/skus/{sku}` body asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkuPut {
    /// Create or replace the sale (a new generation), with any schedule fields.
    Sale(SkuUpsert),
    /// Only schedule fields (`starts_at`, `ends_at`, `paused`, `waiting_room`, `proof_of_work`,
    /// `network_limits`) and none of the sale's: change the schedule of an existing SKU, nothing
    /// else (no new generation, stock untouched).
    Schedule(ScheduleUpdate),
}

impl SkuPut {
    /// The sale's own fields: a body with none of them (and some schedule field) is
    /// schedule-only.
    pub const SALE_FIELDS: [&'static str; 5] =
        ["name", "price_cents", "stock", "max_per_user", "hold_secs"];
    /// The fields a schedule-only body may name (any of them).
    pub const SCHEDULE_FIELDS: [&'static str; 6] = [
        "starts_at",
        "ends_at",
        "paused",
        "waiting_room",
        "proof_of_work",
        "network_limits",
    ];

    pub fn from_json(body: &[u8]) -> Result<Self, BodyError> {
        let map = object(body)?;
        let schedule_only = !Self::SALE_FIELDS.iter().any(|f| map.contains_key(*f))
            && Self::SCHEDULE_FIELDS.iter().any(|f| map.contains_key(*f));
        if schedule_only {
            Ok(Self::Schedule(ScheduleUpdate::from_map(&map)?))
        } else {
            Ok(Self::Sale(SkuUpsert::from_map(&map)?))
        }
    }
}

impl SkuUpsert {
    pub const MAX_NAME_LEN: usize = 200;
    /// Longest hold: one day.
    pub const MAX_HOLD_SECS: u32 = 86_400;
    /// Upper bound on stock and price, far above any real sale, so sums never overflow.
    pub const MAX_AMOUNT: i64 = 1_000_000_000_000;

    pub fn from_json(body: &[u8]) -> Result<Self, BodyError> {
        Self::from_map(&object(body)?)
    }

    /// The schedule fields of this body.
    pub fn schedule(&self) -> ScheduleUpdate {
        ScheduleUpdate {
            starts_at: self.starts_at,
            ends_at: self.ends_at,
            paused: self.paused,
            waiting_room: self.waiting_room,
            proof_of_work: self.proof_of_work,
            network_limits: self.network_limits,
        }
    }

    fn from_map(map: &serde_json::Map<String, Value>) -> Result<Self, BodyError> {
        // NUL is refused: Postgres `text` cannot store it (the insert would fail as a 500).
        let name = match required(map, "name")? {
            Value::String(s)
                if !s.trim().is_empty()
                    && s.chars().count() <= Self::MAX_NAME_LEN
                    && !s.contains('\0') =>
            {
                s.clone()
            }
            _ => {
                return Err(BodyError::Field {
                    field: "name",
                    reason: "must be a non-empty string of at most 200 characters, without NUL"
                        .into(),
                });
            }
        };
        let int = |field: &'static str, min: i64, max: i64| -> Result<i64, BodyError> {
            let v = required(map, field)?;
            match v.as_i64() {
                Some(n) if (v.is_i64() || v.is_u64()) && (min..=max).contains(&n) => Ok(n),
                _ => Err(BodyError::Field {
                    field,
                    reason: format!("must be a JSON integer in {min}..={max}"),
                }),
            }
        };
        let price_cents = int("price_cents", 0, Self::MAX_AMOUNT)?;
        let stock = int("stock", 0, Self::MAX_AMOUNT)?;
        let max_per_user = int("max_per_user", 1, i64::from(i32::MAX))?;
        let max_per_user = i32::try_from(max_per_user).map_err(|_| BodyError::Field {
            field: "max_per_user",
            reason: "too large".into(),
        })?;
        let hold_secs = match map.get("hold_secs") {
            None | Some(Value::Null) => None,
            Some(_) => match int("hold_secs", 0, i64::from(Self::MAX_HOLD_SECS))? {
                0 => None,
                n => u32::try_from(n).ok(),
            },
        };
        let schedule = ScheduleUpdate::from_map(map)?;
        Ok(Self {
            name,
            price_cents,
            stock,
            max_per_user,
            hold_secs,
            starts_at: schedule.starts_at,
            ends_at: schedule.ends_at,
            paused: schedule.paused,
            waiting_room: schedule.waiting_room,
            proof_of_work: schedule.proof_of_work,
            network_limits: schedule.network_limits,
        })
    }
}

#[cfg(test)]
mod tests {
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
                pass_secs: 120,
                overbook: Overbook::DEFAULT,
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
            put(r#"{"waiting_room":{"admit_per_minute":1000000,"pass_secs":86400,"overbook":10}}"#),
            Ok(SkuPut::Schedule(ScheduleUpdate {
                waiting_room: Update::Set(WaitingRoom {
                    admit_per_minute: 1_000_000,
                    pass_secs: 86_400,
                    overbook: Overbook::from_hundredths(1_000).expect("10.0"),
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
            (
                r#"{"waiting_room":{"admit_per_minute":60,"pass_secs":60,"overbook":0.99}}"#,
                "waiting_room.overbook",
            ),
            (
                r#"{"waiting_room":{"admit_per_minute":60,"pass_secs":60,"overbook":10.5}}"#,
                "waiting_room.overbook",
            ),
            (
                r#"{"waiting_room":{"admit_per_minute":60,"pass_secs":60,"overbook":"2"}}"#,
                "waiting_room.overbook",
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
        let ok =
            SkuUpsert::from_json(br#"{"name":"Shoe","price_cents":0,"stock":0,"max_per_user":1}"#);
        assert_eq!(ok.map(|s| s.hold_secs), Ok(None));
        let held =
            |v: &str| {
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
                    max_bits: 16,
                    algorithm: crate::PowAlgorithm::Sha256,
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
}
