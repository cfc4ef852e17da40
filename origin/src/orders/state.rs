//! The order state machine, as one pure function: what an action does to an order in a given
//! state. Used twice on every action — once before any lock, to answer repeats and refusals
//! without taking the SKU's lease, and once more under the row locks of the transaction that
//! applies it (`orders::OrderService`), where the answer is final.
//!
//! ```text
//! held      → paid (pay) | expired (expiry) | cancelled (cancel)
//! confirmed → cancelled (cancel) | refunded (refund)
//! paid      → refunded (refund)
//! expired   → paid | refund_due (a late payment: paid if a unit can be taken again)
//! refund_due→ refunded (refund: the payment was given back; no unit moves)
//! ```
//!
//! Anything else is refused with the order's current state (409 `order_state`). An action that
//! already happened is a repeat: same answer, nothing changes.

use shared::OrderStatus;

/// Who paid: the shop backend's API call, or a payment provider's event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaymentSource {
    Api,
    Stripe { event_id: String },
}

impl PaymentSource {
    /// `order_payments.source`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Api => "api",
            Self::Stripe { .. } => "stripe",
        }
    }

    /// `order_payments.reference`: the provider's event id.
    pub fn reference(&self) -> Option<&str> {
        match self {
            Self::Api => None,
            Self::Stripe { event_id } => Some(event_id),
        }
    }
}

/// What is asked of an order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrderAction {
    /// The order was paid.
    Pay { source: PaymentSource },
    /// The shopper or the shop cancels it: its units go back on sale.
    Cancel,
    /// The shop refunds it; `restock`: its units go back on sale.
    Refund { restock: bool },
    /// The hold ran out (the origin's expiry only, never a route).
    Expire,
}

impl OrderAction {
    /// Label for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Pay { .. } => "pay",
            Self::Cancel => "cancel",
            Self::Refund { .. } => "refund",
            Self::Expire => "expire",
        }
    }
}

/// Why units went back on sale (`origin_returns_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReturnReason {
    Expired,
    Cancelled,
    Refunded,
}

impl ReturnReason {
    pub fn label(self) -> &'static str {
        match self {
            Self::Expired => "expired",
            Self::Cancelled => "cancelled",
            Self::Refunded => "refunded",
        }
    }
}

/// A transition and how it moves units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// held → paid: the units stay taken; no SKU row, no lease.
    Pay,
    /// expired → paid when a unit can be taken again (current generation, stock, cap), else
    /// refund_due: under the SKU's lease, like a purchase.
    LatePay,
    /// Units back into their generation's stock (and the user's allowance), under the lease.
    Return {
        to: OrderStatus,
        reason: ReturnReason,
    },
    /// confirmed | paid → refunded without restock: the units leave the sale for good.
    WriteOff,
    /// refund_due → refunded: nothing held, nothing moves.
    Settle,
}

impl Step {
    /// Whether the step changes the SKU's books, and so runs under the SKU's lease.
    pub fn needs_lease(self) -> bool {
        !matches!(self, Self::Pay | Self::Settle)
    }

    /// Whether a payment is recorded with the step.
    pub fn records_payment(self) -> bool {
        matches!(self, Self::Pay | Self::LatePay)
    }
}

/// What an action does to an order in `current`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Already done: answer the order as it is.
    Repeat,
    /// Not allowed from `current`: 409 `order_state`.
    Refuse,
    /// Apply this step.
    Move(Step),
}

/// The state machine. See the module docs.
pub fn plan(current: OrderStatus, action: &OrderAction) -> Plan {
    use OrderStatus as S;
    match (action, current) {
        (OrderAction::Pay { .. }, S::Held) => Plan::Move(Step::Pay),
        (OrderAction::Pay { .. }, S::Expired) => Plan::Move(Step::LatePay),
        (OrderAction::Pay { .. }, S::Paid | S::RefundDue) => Plan::Repeat,
        (OrderAction::Cancel, S::Held | S::Confirmed) => Plan::Move(Step::Return {
            to: S::Cancelled,
            reason: ReturnReason::Cancelled,
        }),
        (OrderAction::Cancel, S::Cancelled) => Plan::Repeat,
        (OrderAction::Refund { restock: true }, S::Confirmed | S::Paid) => {
            Plan::Move(Step::Return {
                to: S::Refunded,
                reason: ReturnReason::Refunded,
            })
        }
        (OrderAction::Refund { restock: false }, S::Confirmed | S::Paid) => {
            Plan::Move(Step::WriteOff)
        }
        (OrderAction::Refund { .. }, S::RefundDue) => Plan::Move(Step::Settle),
        (OrderAction::Refund { .. }, S::Refunded) => Plan::Repeat,
        (OrderAction::Expire, S::Held) => Plan::Move(Step::Return {
            to: S::Expired,
            reason: ReturnReason::Expired,
        }),
        (OrderAction::Expire, S::Expired) => Plan::Repeat,
        _ => Plan::Refuse,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OrderStatus as S;

    fn pay() -> OrderAction {
        OrderAction::Pay {
            source: PaymentSource::Api,
        }
    }

    #[test]
    fn the_allowed_transitions_and_nothing_else() {
        let actions = [
            pay(),
            OrderAction::Cancel,
            OrderAction::Refund { restock: true },
            OrderAction::Refund { restock: false },
            OrderAction::Expire,
        ];
        for action in &actions {
            for state in S::ALL {
                let p = plan(state, action);
                let allowed = matches!(
                    (action, state),
                    (OrderAction::Pay { .. }, S::Held | S::Expired)
                        | (OrderAction::Cancel, S::Held | S::Confirmed)
                        | (
                            OrderAction::Refund { .. },
                            S::Confirmed | S::Paid | S::RefundDue
                        )
                        | (OrderAction::Expire, S::Held)
                );
                assert_eq!(matches!(p, Plan::Move(_)), allowed, "{action:?} on {state}");
            }
        }
    }

    #[test]
    fn the_state_an_action_leads_to_repeats_it() {
        assert_eq!(plan(S::Paid, &pay()), Plan::Repeat);
        assert_eq!(plan(S::RefundDue, &pay()), Plan::Repeat);
        assert_eq!(plan(S::Cancelled, &OrderAction::Cancel), Plan::Repeat);
        assert_eq!(
            plan(S::Refunded, &OrderAction::Refund { restock: true }),
            Plan::Repeat
        );
        assert_eq!(plan(S::Expired, &OrderAction::Expire), Plan::Repeat);
        // Not a repeat: a state another action led to.
        assert_eq!(plan(S::Cancelled, &pay()), Plan::Refuse);
        assert_eq!(plan(S::Expired, &OrderAction::Cancel), Plan::Refuse);
        assert_eq!(plan(S::Paid, &OrderAction::Cancel), Plan::Refuse);
        assert_eq!(
            plan(S::Held, &OrderAction::Refund { restock: true }),
            Plan::Refuse
        );
    }

    #[test]
    fn only_steps_that_move_units_take_the_lease() {
        assert!(!Step::Pay.needs_lease());
        assert!(!Step::Settle.needs_lease());
        assert!(Step::LatePay.needs_lease());
        assert!(Step::WriteOff.needs_lease());
        assert!(
            Step::Return {
                to: S::Cancelled,
                reason: ReturnReason::Cancelled
            }
            .needs_lease()
        );
    }
}
