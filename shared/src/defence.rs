//! A sale's bot defences on the wire, set by the admin `PUT /v1/admin/skus/{sku}` beside the
//! waiting room (absent keeps the stored setting, none for a new SKU; `null` turns it off), stored
//! by the origin and shown in the SKU view, from which the edge learns them (`edge::proof` and
//! `edge::network` enforce them; the origin only stores the settings):
//!
//! - [`ProofOfWork`] (`proof_of_work: {"min_bits", "max_bits", "algorithm"}`): joining the sale's
//!   waiting room, or a purchase of a sale without one, needs a solved ALTCHA challenge whose
//!   difficulty follows demand between the two bounds, in ALTCHA's v1 format (`SHA-256`, the
//!   default) or its proof of work v2 (`PBKDF2/SHA-256`).
//! - [`NetworkLimits`] (`network_limits: {"admissions", "units", "window_secs"}`): at most
//!   `admissions` shoppers join the room and `units` units are bought per network (IPv4 /24,
//!   IPv6 /48) per `window_secs`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::body::BodyError;

/// A SKU's proof of work: each challenge asks for `bits` bits of work (2^bits units of work at
/// most, half of them on average: SHA-256 candidates in v1, PBKDF2 iterations in v2), `min_bits`
/// while the SKU is quiet up to `max_bits` at its peak of arrivals, in the format `algorithm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProofOfWork {
    /// Bits of work off-peak, 1..=30.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 30))]
    pub min_bits: u8,
    /// Bits of work at the peak, `min_bits`..=30.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 30))]
    pub max_bits: u8,
    /// The challenges' format (default `SHA-256`, ALTCHA v1; absent from a view of an older
    /// origin, which is v1).
    #[serde(default)]
    pub algorithm: PowAlgorithm,
}

/// The ALTCHA format of a SKU's challenges (docs/bot-defence.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum PowAlgorithm {
    /// ALTCHA v1 ("legacy"): find the number whose SHA-256 with the salt is the challenge.
    #[default]
    #[serde(rename = "SHA-256")]
    Sha256,
    /// ALTCHA proof of work v2: find the counter whose PBKDF2-HMAC-SHA-256 key has the challenge's
    /// prefix (what the current widget, `altcha` 3.x, solves by default, at the browser's native
    /// speed).
    #[serde(rename = "PBKDF2/SHA-256")]
    Pbkdf2Sha256,
}

impl PowAlgorithm {
    /// Every accepted value, as written on the wire and stored.
    pub const ALL: [Self; 2] = [Self::Sha256, Self::Pbkdf2Sha256];

    /// The wire (and stored) name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Sha256 => "SHA-256",
            Self::Pbkdf2Sha256 => "PBKDF2/SHA-256",
        }
    }

    /// The algorithm named `name` exactly, else none.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str() == name)
    }
}

impl ProofOfWork {
    /// The most work a challenge may ask for: 2^30 units (minutes on a phone).
    pub const MAX_BITS: u8 = 30;

    /// Both bounds in `1..=MAX_BITS`, `min_bits <= max_bits`, in the default format (v1).
    pub fn new(min_bits: u8, max_bits: u8) -> Option<Self> {
        (1 <= min_bits && min_bits <= max_bits && max_bits <= Self::MAX_BITS).then_some(Self {
            min_bits,
            max_bits,
            algorithm: PowAlgorithm::default(),
        })
    }

    /// The same bounds in the format `algorithm`.
    pub fn with_algorithm(self, algorithm: PowAlgorithm) -> Self {
        Self { algorithm, ..self }
    }

    /// From the stored columns (both bounds set, valid; the algorithm null for v1), else none.
    pub fn from_columns(
        min_bits: Option<i16>,
        max_bits: Option<i16>,
        algorithm: Option<&str>,
    ) -> Option<Self> {
        let algorithm = match algorithm {
            None => PowAlgorithm::default(),
            Some(name) => PowAlgorithm::parse(name)?,
        };
        Some(
            Self::new(u8::try_from(min_bits?).ok()?, u8::try_from(max_bits?).ok()?)?
                .with_algorithm(algorithm),
        )
    }

    /// The members of a `proof_of_work` object; a bad one is named `proof_of_work.<member>`.
    pub(crate) fn from_map(map: &serde_json::Map<String, Value>) -> Result<Self, BodyError> {
        let bits = |key: &str, field: &'static str| -> Result<u8, BodyError> {
            let v = map.get(key).ok_or(BodyError::Missing(field))?;
            v.as_u64()
                .filter(|n| (1..=u64::from(Self::MAX_BITS)).contains(n))
                .and_then(|n| u8::try_from(n).ok())
                .ok_or_else(|| BodyError::Field {
                    field,
                    reason: format!("must be a JSON integer in 1..={}", Self::MAX_BITS),
                })
        };
        let min_bits = bits("min_bits", "proof_of_work.min_bits")?;
        let max_bits = bits("max_bits", "proof_of_work.max_bits")?;
        let algorithm = match map.get("algorithm") {
            None | Some(Value::Null) => PowAlgorithm::default(),
            Some(v) => {
                v.as_str()
                    .and_then(PowAlgorithm::parse)
                    .ok_or_else(|| BodyError::Field {
                        field: "proof_of_work.algorithm",
                        reason: format!(
                            "must be one of {}",
                            PowAlgorithm::ALL
                                .map(|a| format!("\"{}\"", a.as_str()))
                                .join(", ")
                        ),
                    })?
            }
        };
        Self::new(min_bits, max_bits)
            .map(|p| p.with_algorithm(algorithm))
            .ok_or(BodyError::Field {
                field: "proof_of_work.max_bits",
                reason: "must be at least min_bits".into(),
            })
    }
}

/// A SKU's bounds per network: within any `window_secs` from a network's first count, at most
/// `admissions` of its shoppers join the waiting room and at most `units` units are bought by
/// its shoppers. A network is an IPv4 /24 or an IPv6 /48 of the shopper's address as
/// Cloudflare saw it (`CF-Connecting-IP`). Either bound may be absent (not bounded), not both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NetworkLimits {
    /// Shoppers of one network who may join the waiting room per window, 1..=1000000, or `null`.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1_000_000))]
    pub admissions: Option<u32>,
    /// Units the shoppers of one network may buy per window, 1..=1000000, or `null`.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1_000_000))]
    pub units: Option<u32>,
    /// The window, seconds, 1..=86400 (default 3600): counted from the network's first count.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 86400))]
    pub window_secs: u32,
}

impl NetworkLimits {
    pub const MAX_BOUND: u32 = 1_000_000;
    pub const MAX_WINDOW_SECS: u32 = 86_400;
    pub const DEFAULT_WINDOW_SECS: u32 = 3_600;

    /// Bounds in `1..=MAX_BOUND` (at least one of them), window in `1..=MAX_WINDOW_SECS`.
    pub fn new(admissions: Option<u32>, units: Option<u32>, window_secs: u32) -> Option<Self> {
        let bound_ok = |b: Option<u32>| b.is_none_or(|b| (1..=Self::MAX_BOUND).contains(&b));
        (bound_ok(admissions)
            && bound_ok(units)
            && (admissions.is_some() || units.is_some())
            && (1..=Self::MAX_WINDOW_SECS).contains(&window_secs))
        .then_some(Self {
            admissions,
            units,
            window_secs,
        })
    }

    /// From the stored columns (valid), else none.
    pub fn from_columns(
        admissions: Option<i32>,
        units: Option<i32>,
        window_secs: Option<i32>,
    ) -> Option<Self> {
        let bound = |b: Option<i32>| b.and_then(|b| u32::try_from(b).ok());
        Self::new(
            bound(admissions),
            bound(units),
            u32::try_from(window_secs?).ok()?,
        )
    }

    /// The members of a `network_limits` object; a bad one is named `network_limits.<member>`.
    pub(crate) fn from_map(map: &serde_json::Map<String, Value>) -> Result<Self, BodyError> {
        let int = |key: &str, field: &'static str, max: u32| -> Result<Option<u32>, BodyError> {
            match map.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_u64()
                    .filter(|n| (1..=u64::from(max)).contains(n))
                    .and_then(|n| u32::try_from(n).ok())
                    .map(Some)
                    .ok_or_else(|| BodyError::Field {
                        field,
                        reason: format!("must be a JSON integer in 1..={max} or null"),
                    }),
            }
        };
        let admissions = int("admissions", "network_limits.admissions", Self::MAX_BOUND)?;
        let units = int("units", "network_limits.units", Self::MAX_BOUND)?;
        let window_secs = int(
            "window_secs",
            "network_limits.window_secs",
            Self::MAX_WINDOW_SECS,
        )?
        .unwrap_or(Self::DEFAULT_WINDOW_SECS);
        Self::new(admissions, units, window_secs).ok_or(BodyError::Field {
            field: "network_limits",
            reason: "must bound `admissions`, `units` or both".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(json: &str) -> serde_json::Map<String, Value> {
        match serde_json::from_str(json) {
            Ok(Value::Object(m)) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn proof_of_work_bounds_are_checked_and_name_the_member() {
        assert_eq!(
            ProofOfWork::from_map(&map(r#"{"min_bits":10,"max_bits":18}"#)),
            Ok(ProofOfWork {
                min_bits: 10,
                max_bits: 18,
                algorithm: PowAlgorithm::Sha256,
            })
        );
        assert!(ProofOfWork::from_map(&map(r#"{"min_bits":30,"max_bits":30}"#)).is_ok());
        // The format: v1 by default (absent or null), v2 by name.
        assert_eq!(
            ProofOfWork::from_map(&map(
                r#"{"min_bits":10,"max_bits":18,"algorithm":"PBKDF2/SHA-256"}"#
            ))
            .map(|p| p.algorithm),
            Ok(PowAlgorithm::Pbkdf2Sha256)
        );
        assert_eq!(
            ProofOfWork::from_map(&map(r#"{"min_bits":1,"max_bits":2,"algorithm":null}"#))
                .map(|p| p.algorithm),
            Ok(PowAlgorithm::Sha256)
        );
        for (bad, field) in [
            (r#"{"max_bits":18}"#, "proof_of_work.min_bits"),
            (r#"{"min_bits":0,"max_bits":18}"#, "proof_of_work.min_bits"),
            (r#"{"min_bits":10,"max_bits":31}"#, "proof_of_work.max_bits"),
            (r#"{"min_bits":10,"max_bits":9}"#, "proof_of_work.max_bits"),
            (
                r#"{"min_bits":"10","max_bits":18}"#,
                "proof_of_work.min_bits",
            ),
            (
                r#"{"min_bits":10.5,"max_bits":18}"#,
                "proof_of_work.min_bits",
            ),
            (
                r#"{"min_bits":10,"max_bits":18,"algorithm":"ARGON2ID"}"#,
                "proof_of_work.algorithm",
            ),
            (
                r#"{"min_bits":10,"max_bits":18,"algorithm":"pbkdf2/sha-256"}"#,
                "proof_of_work.algorithm",
            ),
            (
                r#"{"min_bits":10,"max_bits":18,"algorithm":2}"#,
                "proof_of_work.algorithm",
            ),
        ] {
            let e = ProofOfWork::from_map(&map(bad)).expect_err(bad);
            assert!(e.to_string().contains(field), "{bad}: {e}");
        }
        assert_eq!(
            ProofOfWork::from_columns(Some(4), Some(20), None),
            ProofOfWork::new(4, 20)
        );
        assert_eq!(
            ProofOfWork::from_columns(Some(4), Some(20), Some("PBKDF2/SHA-256")),
            ProofOfWork::new(4, 20).map(|p| p.with_algorithm(PowAlgorithm::Pbkdf2Sha256))
        );
        assert_eq!(ProofOfWork::from_columns(Some(4), None, None), None);
        assert_eq!(ProofOfWork::from_columns(Some(21), Some(20), None), None);
        assert_eq!(
            ProofOfWork::from_columns(Some(4), Some(20), Some("MD5")),
            None
        );
        // A view of an older origin (no `algorithm`) is v1.
        assert_eq!(
            serde_json::from_str::<ProofOfWork>(r#"{"min_bits":4,"max_bits":20}"#).ok(),
            ProofOfWork::new(4, 20)
        );
    }

    #[test]
    fn network_limits_need_a_bound_and_default_the_window() {
        assert_eq!(
            NetworkLimits::from_map(&map(r#"{"units":4}"#)),
            Ok(NetworkLimits {
                admissions: None,
                units: Some(4),
                window_secs: 3_600
            })
        );
        assert_eq!(
            NetworkLimits::from_map(&map(r#"{"admissions":20,"units":null,"window_secs":600}"#)),
            Ok(NetworkLimits {
                admissions: Some(20),
                units: None,
                window_secs: 600
            })
        );
        for (bad, field) in [
            (r#"{}"#, "network_limits"),
            (r#"{"units":null,"admissions":null}"#, "network_limits"),
            (r#"{"units":0}"#, "network_limits.units"),
            (r#"{"units":1000001}"#, "network_limits.units"),
            (r#"{"admissions":-1}"#, "network_limits.admissions"),
            (
                r#"{"units":2,"window_secs":0}"#,
                "network_limits.window_secs",
            ),
            (
                r#"{"units":2,"window_secs":86401}"#,
                "network_limits.window_secs",
            ),
            (r#"{"units":"2"}"#, "network_limits.units"),
        ] {
            let e = NetworkLimits::from_map(&map(bad)).expect_err(bad);
            assert!(e.to_string().contains(field), "{bad}: {e}");
        }
        assert_eq!(
            NetworkLimits::from_columns(Some(5), None, Some(60)),
            NetworkLimits::new(Some(5), None, 60)
        );
        assert_eq!(NetworkLimits::from_columns(None, None, Some(60)), None);
    }
}
