//! A sale's waiting room on the wire: [`WaitingRoom`] (`{"admit_per_minute": N, "pass_secs": S,
//! "overbook": X}`), set by the admin `PUT /v1/admin/skus/{sku}` (`waiting_room`, absent keeps,
//! `null` disables), stored by the origin and shown in the SKU view, from which the edge learns it
//! (`edge::room` runs the room itself; the origin only stores the setting).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How many passes a room may have outstanding per unit remaining (issue 36): at most
/// `remaining × overbook` passes admitted and neither used for a purchase nor expired. 1.0..=10.0,
/// in hundredths (a JSON number on the wire; stored as the integer hundredths): `1.5` by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Overbook(u16);

impl Overbook {
    /// 1.0
    pub const MIN_HUNDREDTHS: u16 = 100;
    /// 10.0
    pub const MAX_HUNDREDTHS: u16 = 1_000;
    /// 1.5
    pub const DEFAULT: Self = Self(150);

    /// From hundredths in `100..=1000`.
    pub fn from_hundredths(n: u16) -> Option<Self> {
        (Self::MIN_HUNDREDTHS..=Self::MAX_HUNDREDTHS)
            .contains(&n)
            .then_some(Self(n))
    }

    /// From a number in `1.0..=10.0` (rounded to hundredths); NaN and anything outside: none.
    pub fn from_f64(x: f64) -> Option<Self> {
        if !(1.0..=10.0).contains(&x) {
            return None;
        }
        // In range, so the rounded hundredths fit u16.
        let n = (x * 100.0).round();
        Self::from_hundredths(n as u16)
    }

    pub fn hundredths(self) -> u16 {
        self.0
    }

    pub fn as_f64(self) -> f64 {
        f64::from(self.0) / 100.0
    }

    /// `floor(remaining × overbook)`: the most passes a room may have outstanding.
    pub fn passes_for(self, remaining: u64) -> u64 {
        remaining.saturating_mul(u64::from(self.0)) / 100
    }
}

impl Default for Overbook {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl Serialize for Overbook {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.as_f64())
    }
}

impl<'de> Deserialize<'de> for Overbook {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let x = f64::deserialize(d)?;
        Self::from_f64(x)
            .ok_or_else(|| serde::de::Error::custom("overbook must be a number in 1.0..=10.0"))
    }
}

/// A SKU's waiting room: at most `admit_per_minute` shoppers admitted per minute (smoothly), each
/// with a pass usable for `pass_secs` from its admission, and never more passes outstanding than
/// the units remaining × `overbook`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaitingRoom {
    /// Shoppers admitted per minute, 1..=1000000.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1_000_000))]
    pub admit_per_minute: u32,
    /// How long a pass is usable from its admission, seconds, 1..=86400.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 86400))]
    pub pass_secs: u32,
    /// Passes outstanding (admitted, neither used for a purchase nor expired) per unit
    /// remaining, 1.0..=10.0 (hundredths), default 1.5. At 0 units remaining nobody is admitted.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = f64, minimum = 1.0, maximum = 10.0, default = 1.5))]
    pub overbook: Overbook,
}

impl WaitingRoom {
    pub const MAX_ADMIT_PER_MINUTE: u32 = 1_000_000;
    pub const MAX_PASS_SECS: u32 = 86_400;

    /// Both values in range, with the default overbook.
    pub fn new(admit_per_minute: u32, pass_secs: u32) -> Option<Self> {
        ((1..=Self::MAX_ADMIT_PER_MINUTE).contains(&admit_per_minute)
            && (1..=Self::MAX_PASS_SECS).contains(&pass_secs))
        .then_some(Self {
            admit_per_minute,
            pass_secs,
            overbook: Overbook::DEFAULT,
        })
    }

    /// From the stored columns (rate and pass both set, in range; the overbook's hundredths,
    /// null: the default), else none.
    pub fn from_columns(
        admit_per_minute: Option<i32>,
        pass_secs: Option<i32>,
        overbook_hundredths: Option<i32>,
    ) -> Option<Self> {
        let rate = u32::try_from(admit_per_minute?).ok()?;
        let pass = u32::try_from(pass_secs?).ok()?;
        let overbook = match overbook_hundredths {
            None => Overbook::DEFAULT,
            Some(n) => Overbook::from_hundredths(u16::try_from(n).ok()?)?,
        };
        Some(Self {
            overbook,
            ..Self::new(rate, pass)?
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overbook_is_bounded_defaulted_and_a_number_on_the_wire() {
        assert_eq!(Overbook::from_f64(1.0).map(Overbook::hundredths), Some(100));
        assert_eq!(
            Overbook::from_f64(10.0).map(Overbook::hundredths),
            Some(1_000)
        );
        assert_eq!(
            Overbook::from_f64(2.345).map(Overbook::hundredths),
            Some(235)
        );
        for bad in [0.99, 10.01, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(Overbook::from_f64(bad), None, "{bad}");
        }
        assert_eq!(Overbook::DEFAULT.passes_for(7), 10);
        assert_eq!(Overbook::DEFAULT.passes_for(0), 0);
        let room: WaitingRoom =
            serde_json::from_str(r#"{"admit_per_minute":60,"pass_secs":30}"#).expect("parses");
        assert_eq!(room.overbook, Overbook::DEFAULT);
        let json = serde_json::to_value(room).expect("json");
        assert_eq!(json["overbook"], 1.5);
        assert!(
            serde_json::from_str::<WaitingRoom>(
                r#"{"admit_per_minute":60,"pass_secs":30,"overbook":11}"#
            )
            .is_err()
        );
        assert_eq!(
            WaitingRoom::from_columns(Some(60), Some(30), Some(300)).map(|r| r.overbook.as_f64()),
            Some(3.0)
        );
        assert_eq!(
            WaitingRoom::from_columns(Some(60), Some(30), Some(50)),
            None
        );
        assert_eq!(
            WaitingRoom::from_columns(Some(60), Some(30), None).map(|r| r.overbook),
            Some(Overbook::DEFAULT)
        );
    }
}
