//! The states an order goes through ([`OrderStatus`]): which of them hold units, and the names
//! they are stored and sent under (the origin decides the moves between them). Carried by the
//! order view (`crate::orders`) and the purchase answer (`crate::wire`).

use serde::{Deserialize, Serialize};

/// The state of an order. `held` → `paid` | `expired` | `cancelled`; `confirmed` → `cancelled`
/// | `refunded`; `paid` → `refunded`; a payment that arrives after its hold expired makes an
/// `expired` order `paid` again when a unit can still be taken, else `refund_due`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum OrderStatus {
    /// Units held until `expires_at`, waiting for the payment.
    Held,
    /// Bought on a SKU without holds.
    Confirmed,
    /// A hold that was paid.
    Paid,
    /// A hold not paid by `expires_at`: its units went back on sale.
    Expired,
    /// Cancelled: its units went back on sale.
    Cancelled,
    /// Refunded (its units back on sale or not, as the refund asked).
    Refunded,
    /// Paid after its hold expired, when no unit could be taken any more: the payment must be
    /// refunded.
    RefundDue,
}

impl OrderStatus {
    pub const ALL: [Self; 7] = [
        Self::Held,
        Self::Confirmed,
        Self::Paid,
        Self::Expired,
        Self::Cancelled,
        Self::Refunded,
        Self::RefundDue,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Held => "held",
            Self::Confirmed => "confirmed",
            Self::Paid => "paid",
            Self::Expired => "expired",
            Self::Cancelled => "cancelled",
            Self::Refunded => "refunded",
            Self::RefundDue => "refund_due",
        }
    }

    /// The state named `s` (as stored and sent), if any.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Whether the order's units count as taken: on the books as `units_out`, and toward the
    /// user's `max_per_user`.
    pub const fn holds_units(self) -> bool {
        matches!(self, Self::Held | Self::Confirmed | Self::Paid)
    }
}

impl std::fmt::Display for OrderStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_by_name() {
        for s in OrderStatus::ALL {
            assert_eq!(OrderStatus::parse(s.as_str()), Some(s));
            assert_eq!(
                serde_json::to_value(s).expect("ser"),
                serde_json::Value::from(s.as_str())
            );
        }
        assert_eq!(OrderStatus::parse("shipped"), None);
    }
}
