//! A sale's waiting room on the wire: [`WaitingRoom`] (`{"admit_per_minute": N, "pass_secs": S}`),
//! set by the admin `PUT /v1/admin/skus/{sku}` (`waiting_room`, absent keeps, `null` disables),
//! stored by the origin and shown in the SKU view, from which the edge learns it (`edge::room`
//! runs the room itself; the origin only stores the setting).

use serde::{Deserialize, Serialize};

/// A SKU's waiting room: at most `admit_per_minute` shoppers admitted per minute (smoothly), each
/// with a pass usable for `pass_secs` from its admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaitingRoom {
    /// Shoppers admitted per minute, 1..=1000000.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1_000_000))]
    pub admit_per_minute: u32,
    /// How long a pass is usable from its admission, seconds, 1..=86400.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 86400))]
    pub pass_secs: u32,
}

impl WaitingRoom {
    pub const MAX_ADMIT_PER_MINUTE: u32 = 1_000_000;
    pub const MAX_PASS_SECS: u32 = 86_400;

    /// Both values in range.
    pub fn new(admit_per_minute: u32, pass_secs: u32) -> Option<Self> {
        ((1..=Self::MAX_ADMIT_PER_MINUTE).contains(&admit_per_minute)
            && (1..=Self::MAX_PASS_SECS).contains(&pass_secs))
        .then_some(Self {
            admit_per_minute,
            pass_secs,
        })
    }

    /// From the stored columns (both set, in range), else none.
    pub fn from_columns(admit_per_minute: Option<i32>, pass_secs: Option<i32>) -> Option<Self> {
        let rate = u32::try_from(admit_per_minute?).ok()?;
        let pass = u32::try_from(pass_secs?).ok()?;
        Self::new(rate, pass)
    }
}
