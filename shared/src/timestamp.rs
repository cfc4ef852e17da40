//! An instant on the wire ([`Timestamp`]): an RFC 3339 date-time, parsed once at the boundary
//! and kept as unix milliseconds; the instants of a sale's schedule (`crate::schedule`) and of
//! the problems that answer a closed sale (`crate::problem`). The host's clock is read in one
//! place, [`Timestamp::now`] (not on wasm32, whose std has no clock: the worker reads
//! `Date::now()`).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An instant, whole milliseconds since the unix epoch, between 1970-01-01 and 9999-12-31 (UTC).
/// Parsed from RFC 3339 (`2026-12-01T10:00:00Z`, with an optional fraction — kept to the
/// millisecond — and `Z` or a `±hh:mm` offset); written in UTC with a `Z`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

/// Why a string is not an RFC 3339 instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("must be an RFC 3339 date-time between 1970 and 9999, like 2026-12-01T10:00:00Z")]
pub struct TimestampError;

/// 9999-12-31T23:59:59.999Z.
const MAX_MS: i64 = 253_402_300_799_999;

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of `days` since 1970-01-01 (`civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

impl Timestamp {
    /// The instant `ms` milliseconds after the epoch, if within the supported range.
    pub fn from_unix_ms(ms: i64) -> Option<Self> {
        (0..=MAX_MS).contains(&ms).then_some(Self(ms))
    }

    pub const fn unix_ms(self) -> i64 {
        self.0
    }

    /// Whole seconds since the epoch (what signatures and tokens carry).
    pub const fn unix_secs(self) -> i64 {
        self.0 / 1000
    }

    /// Now, by this machine's clock: the epoch when it reads before 1970.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn now() -> Self {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        Self(ms.min(MAX_MS))
    }

    /// Parses an RFC 3339 date-time (`YYYY-MM-DDTHH:MM:SS[.fff…](Z|±HH:MM)`); digits beyond the
    /// millisecond are dropped.
    pub fn parse(s: &str) -> Result<Self, TimestampError> {
        let b = s.as_bytes();
        let num = |from: usize, len: usize| -> Result<i64, TimestampError> {
            let part = b.get(from..from + len).ok_or(TimestampError)?;
            part.iter().try_fold(0i64, |acc, c| {
                c.is_ascii_digit()
                    .then(|| acc * 10 + i64::from(c - b'0'))
                    .ok_or(TimestampError)
            })
        };
        let at = |i: usize, allowed: &[u8]| b.get(i).is_some_and(|c| allowed.contains(c));
        if !(at(4, b"-") && at(7, b"-") && at(10, b"Tt") && at(13, b":") && at(16, b":")) {
            return Err(TimestampError);
        }
        let (y, mo, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
        let (h, mi, sec) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
        if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 {
            return Err(TimestampError);
        }
        // No leap seconds: a sale starts at an instant the edge's clock can name.
        if sec > 59 {
            return Err(TimestampError);
        }
        let mut i = 19;
        let mut millis = 0i64;
        if at(i, b".") {
            i += 1;
            let start = i;
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                if i - start < 3 {
                    millis = millis * 10 + i64::from(b[i] - b'0');
                }
                i += 1;
            }
            let digits = i - start;
            if digits == 0 || digits > 9 {
                return Err(TimestampError);
            }
            for _ in digits..3 {
                millis *= 10;
            }
        }
        let offset_min = match b.get(i) {
            Some(b'Z' | b'z') if i + 1 == b.len() => 0,
            Some(sign @ (b'+' | b'-')) if i + 6 == b.len() && at(i + 3, b":") => {
                let (oh, om) = (num(i + 1, 2)?, num(i + 4, 2)?);
                if oh > 23 || om > 59 {
                    return Err(TimestampError);
                }
                let off = oh * 60 + om;
                if *sign == b'-' { -off } else { off }
            }
            _ => return Err(TimestampError),
        };
        let secs = days_from_civil(y, mo, d) * 86_400 + h * 3_600 + mi * 60 + sec;
        let ms = (secs - offset_min * 60) * 1_000 + millis;
        Self::from_unix_ms(ms).ok_or(TimestampError)
    }

    /// RFC 3339 in UTC: `2026-12-01T10:00:00Z`, with `.mmm` only when the milliseconds are not 0.
    pub fn to_rfc3339(self) -> String {
        let (days, rest) = (self.0.div_euclid(86_400_000), self.0.rem_euclid(86_400_000));
        let (y, m, d) = civil_from_days(days);
        let (secs, millis) = (rest / 1_000, rest % 1_000);
        let (h, mi, s) = (secs / 3_600, secs / 60 % 60, secs % 60);
        if millis == 0 {
            format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
        } else {
            format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{millis:03}Z")
        }
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_reads_the_clock_in_milliseconds_and_whole_seconds() {
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970");
        let now = Timestamp::now();
        assert!(now.unix_ms() >= i64::try_from(before.as_millis()).expect("fits"));
        assert!(now.unix_ms() < i64::try_from(before.as_millis()).expect("fits") + 60_000);
        assert_eq!(now.unix_secs(), now.unix_ms().div_euclid(1000));
        assert_eq!(Timestamp(1_999).unix_secs(), 1);
    }

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn rfc3339_round_trips_in_utc() {
        assert_eq!(ts("1970-01-01T00:00:00Z").unix_ms(), 0);
        assert_eq!(ts("2026-12-01T10:00:00Z").unix_ms(), 1_796_119_200_000);
        assert_eq!(
            ts("2026-12-01T10:00:00Z").to_rfc3339(),
            "2026-12-01T10:00:00Z"
        );
        assert_eq!(
            ts("2026-12-01T11:00:00.5+01:00").to_rfc3339(),
            "2026-12-01T10:00:00.500Z"
        );
        assert_eq!(
            ts("2026-12-01t09:30:00.123456789-00:30").unix_ms(),
            1_796_119_200_123
        );
        assert_eq!(
            ts("2024-02-29T23:59:59.999Z").to_rfc3339(),
            "2024-02-29T23:59:59.999Z"
        );
        assert_eq!(ts("9999-12-31T23:59:59.999Z").unix_ms(), MAX_MS);
        for ms in [0, 1, 86_399_999, 951_782_400_000, 4_107_542_400_001, MAX_MS] {
            let t = Timestamp::from_unix_ms(ms).expect("in range");
            assert_eq!(ts(&t.to_rfc3339()), t, "{ms}");
        }
        let json = serde_json::to_string(&Some(ts("2026-12-01T10:00:00Z"))).expect("json");
        assert_eq!(json, r#""2026-12-01T10:00:00Z""#);
        assert_eq!(
            serde_json::from_str::<Timestamp>(&json).ok(),
            Some(ts("2026-12-01T10:00:00Z"))
        );
    }

    proptest::proptest! {
        #[test]
        fn any_instant_round_trips(ms in 0i64..=MAX_MS) {
            let t = Timestamp::from_unix_ms(ms).expect("in range");
            proptest::prop_assert_eq!(Timestamp::parse(&t.to_rfc3339()), Ok(t));
        }

        #[test]
        fn any_string_parses_or_is_refused_without_panicking(s in "\\PC{0,40}|[0-9T:.Z+-]{0,35}") {
            if let Ok(t) = Timestamp::parse(&s) {
                proptest::prop_assert!((0..=MAX_MS).contains(&t.unix_ms()));
            }
        }
    }

    #[test]
    fn what_is_not_rfc3339_is_refused() {
        for bad in [
            "",
            "2026-12-01",
            "2026-12-01T10:00:00",
            "2026-12-01 10:00:00Z",
            "2026-13-01T10:00:00Z",
            "2026-02-29T10:00:00Z",
            "2026-12-01T24:00:00Z",
            "2026-12-01T10:60:00Z",
            "2026-12-01T10:00:60Z",
            "2026-12-01T10:00:00.Z",
            "2026-12-01T10:00:00.1234567890Z",
            "2026-12-01T10:00:00+1:00",
            "2026-12-01T10:00:00+24:00",
            "2026-12-01T10:00:00Zjunk",
            "1969-12-31T23:59:59Z",
            "+2026-12-01T10:00:00Z",
            "２026-12-01T10:00:00Z",
            "1700000000",
        ] {
            assert_eq!(Timestamp::parse(bad), Err(TimestampError), "{bad}");
        }
        assert!(Timestamp::from_unix_ms(-1).is_none());
        assert!(Timestamp::from_unix_ms(MAX_MS + 1).is_none());
    }
}
