//! Payment provider webhooks (`POST /v1/payments/stripe`): Stripe's events confirm, cancel and
//! refund orders. The path of one delivery: the route (`routes::payments`) reads the raw body
//! (at most [`MAX_EVENT_BYTES`]) → [`signature`] verifies `Stripe-Signature` → [`event`] parses
//! the event → [`PaymentWebhooks::receive`]: a payment naming an order goes to the payments'
//! combiner ([`batch`]), which pays it, if its order is a live hold and the event is new, in one
//! transaction with the other payments waiting in the process (no turn, no lease: no unit
//! moves); anything else — and a payment the combiner did not pay — takes a turn, records the
//! event id (`store::payments`) and applies its intent through the orders service (`orders`),
//! the one place order states change one by one → the route writes the [`WebhookReceipt`] (or
//! the problem) and counts it.
//!
//! Deliveries are at-least-once and out of order; what that means for each case:
//!
//! - A repeated event id (a retry, a concurrent duplicate) applies nothing twice: the first
//!   delivery records it `pending`, applies it and writes the result (the combiner records a
//!   payment it made `applied` in the transaction that made it); a later delivery answers
//!   from the result (`duplicate: true`). A delivery that finds it still `pending` (a concurrent
//!   delivery, or one that failed or died half-way) applies it again: every order transition
//!   is idempotent (a repeat changes nothing), so the effect happens once.
//! - A payment failure, cancellation or expiry cancels the order only while it is a hold: a late
//!   failure after the payment (or for a `confirmed` order) is recorded `ignored_state` and
//!   answered 200, so Stripe stops retrying.
//! - A refund that arrives before its payment (the order still a hold) cancels the hold — the
//!   units go back on sale at once — and is remembered: the payment arriving afterwards never
//!   makes the order paid (`already_refunded`).
//! - Unknown types, unknown orders (and events naming none), unpaid delayed-method checkouts and
//!   partial refunds are recorded and answered 200, counted by result.
//! - A dependency failure (the database, the lock) answers 503 with `Retry-After`: Stripe
//!   retries, and the event stays `pending` until a retry decides it.

pub mod batch;
pub mod event;
pub mod signature;

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use shared::{ErrorCode, OrderStatus};
use sqlx::PgPool;
use tokio::sync::Semaphore;
use uuid::Uuid;

use crate::orders::{OrderAction, OrderError, OrderService, PaymentSource, Requester};
use crate::problem::ApiError;
use crate::store::StoreError;
use crate::store::payments::{self as store, Begun, LivePayment};
use batch::{LivePayer, Paid};
use event::{EventError, Ignored, Intent, PaymentEvent};
use signature::{SignatureError, WebhookSecrets};

/// Largest accepted event body: 256 KiB (Stripe's events are a few KiB; a Checkout Session with
/// many line items or a charge with many refunds is larger than the purchase API's 16 KiB).
pub const MAX_EVENT_BYTES: usize = 256 * 1024;

/// What a recorded event did (`payment_events.result`, the `result` of the answer and of
/// `origin_payment_events_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The order moved: paid, cancelled or refunded (or already was, by an earlier request).
    Applied,
    /// A payment for a hold that had expired, whose unit could not be taken again: the order is
    /// `refund_due`.
    RefundDue,
    /// A payment for an order whose charge had already been refunded: not applied.
    AlreadyRefunded,
    /// The order's state does not allow the transition (a late failure after the payment, a
    /// refund of an expired hold …): nothing changed.
    IgnoredState,
    /// The event names no order of this database.
    UnknownOrder,
    /// A type the origin does not act on.
    IgnoredType,
    /// A Checkout Session completed with a delayed payment method, not paid yet.
    IgnoredUnpaid,
    /// A partial refund.
    IgnoredPartialRefund,
}

impl Outcome {
    const ALL: [Self; 8] = [
        Self::Applied,
        Self::RefundDue,
        Self::AlreadyRefunded,
        Self::IgnoredState,
        Self::UnknownOrder,
        Self::IgnoredType,
        Self::IgnoredUnpaid,
        Self::IgnoredPartialRefund,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Applied => "applied",
            Self::RefundDue => "refund_due",
            Self::AlreadyRefunded => "already_refunded",
            Self::IgnoredState => "ignored_state",
            Self::UnknownOrder => "unknown_order",
            Self::IgnoredType => "ignored_type",
            Self::IgnoredUnpaid => "ignored_unpaid",
            Self::IgnoredPartialRefund => "ignored_partial_refund",
        }
    }

    fn parse(stored: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == stored)
    }
}

/// The 200 answer to a delivery: Stripe only looks at the status; the body is for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct WebhookReceipt {
    /// The event's `id`.
    pub event_id: String,
    /// `applied`, `refund_due`, `already_refunded`, `ignored_state`, `unknown_order`,
    /// `ignored_type`, `ignored_unpaid` or `ignored_partial_refund`.
    pub result: String,
    /// `true` when an earlier delivery of this event decided it (nothing was applied now).
    pub duplicate: bool,
}

/// Why a delivery is not answered 200.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// 400 `webhook_signature`.
    #[error(transparent)]
    Signature(#[from] SignatureError),
    /// 400 `invalid_request`: signed, but not an event.
    #[error(transparent)]
    Event(#[from] EventError),
    /// 503: the database or the lock cannot be had; Stripe retries.
    #[error("dependency unavailable: {0}")]
    Unavailable(String),
    /// A bug (500).
    #[error("unexpected: {0}")]
    Unexpected(String),
}

impl From<StoreError> for WebhookError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(_) | StoreError::Conflict | StoreError::LeaseExpired => {
                Self::Unavailable(e.to_string())
            }
            other => Self::Unexpected(other.to_string()),
        }
    }
}

impl From<WebhookError> for ApiError {
    fn from(e: WebhookError) -> Self {
        match e {
            WebhookError::Signature(s) => ApiError::new(ErrorCode::WebhookSignature, s.to_string()),
            WebhookError::Event(e) => ApiError::new(ErrorCode::InvalidRequest, e.to_string()),
            WebhookError::Unavailable(cause) => ApiError::unavailable(&cause),
            WebhookError::Unexpected(cause) => ApiError::internal(&cause),
        }
    }
}

/// A decided delivery: the event (for counting and logs) and its receipt.
#[derive(Debug)]
pub struct Delivery {
    pub event: PaymentEvent,
    pub outcome: Outcome,
    pub duplicate: bool,
}

impl Delivery {
    pub fn receipt(&self) -> WebhookReceipt {
        WebhookReceipt {
            event_id: self.event.id.to_string(),
            result: self.outcome.as_str().to_owned(),
            duplicate: self.duplicate,
        }
    }
}

/// The webhook's service: verifies, records and applies deliveries. Cheap to clone.
#[derive(Debug, Clone)]
pub struct PaymentWebhooks {
    secrets: Arc<WebhookSecrets>,
    pool: PgPool,
    orders: OrderService,
    /// At most `PAYMENT_WEBHOOK_MAX_CONCURRENCY` deliveries are decided one by one at once (each
    /// holds a database connection while it is), so a burst of deliveries — Stripe sends them
    /// concurrently, and a sale makes thousands — cannot take the purchases' connections. The
    /// combiner's payments take no turn (one connection per batch).
    turns: Arc<Semaphore>,
    /// How long a delivery waits for its turn before it answers 503 (`DB_ACQUIRE_TIMEOUT_MS`).
    wait: Duration,
    /// Payments of live holds, decided many per transaction ([`batch`]).
    live: LivePayer,
}

impl PaymentWebhooks {
    pub fn new(
        secrets: WebhookSecrets,
        pool: PgPool,
        orders: OrderService,
        max_concurrency: u32,
        wait: Duration,
    ) -> Self {
        let live = LivePayer::start(pool.clone(), orders.clone());
        Self {
            secrets: Arc::new(secrets),
            pool,
            orders,
            turns: Arc::new(Semaphore::new(max_concurrency.max(1) as usize)),
            wait,
            live,
        }
    }

    /// Verifies the signature (only then is the body looked at) and parses the event.
    pub fn verify(
        &self,
        signature_header: Option<&str>,
        body: &[u8],
        now_unix: i64,
    ) -> Result<PaymentEvent, WebhookError> {
        signature::verify(signature_header, body, &self.secrets, now_unix)?;
        Ok(event::parse(body)?)
    }

    /// Decides a verified event (see the module docs).
    pub async fn receive(&self, event: PaymentEvent) -> Result<Delivery, WebhookError> {
        if let (Intent::Pay, Some(order_id)) = (event.intent, event.order) {
            // The common case, a new payment of a live hold: paid with others in one
            // transaction, without a turn.
            let payment = LivePayment {
                event_id: event.id.as_str().to_owned(),
                event_type: event.raw_type.clone(),
                order_id,
            };
            match self.live.pay(payment, self.wait).await {
                Ok(Paid::Paid) => {
                    return Ok(Delivery {
                        event,
                        outcome: Outcome::Applied,
                        duplicate: false,
                    });
                }
                Ok(Paid::NotLive) => {}
                Err(cause) => return Err(WebhookError::Unavailable(cause)),
            }
        }
        let _turn = match tokio::time::timeout(self.wait, self.turns.acquire()).await {
            Ok(Ok(turn)) => turn,
            // Never closed; refused like a full pool would.
            Ok(Err(_)) | Err(_) => {
                return Err(WebhookError::Unavailable(
                    "every payment webhook turn is busy".into(),
                ));
            }
        };
        let begun =
            store::begin_event(&self.pool, event.id.as_str(), &event.raw_type, event.order).await?;
        if let Begun::Decided(stored) = begun {
            let outcome = Outcome::parse(&stored).ok_or_else(|| {
                WebhookError::Unexpected(format!("stored result {stored:?} is unknown"))
            })?;
            return Ok(Delivery {
                event,
                outcome,
                duplicate: true,
            });
        }
        let outcome = self.apply(&event).await?;
        store::finish_event(&self.pool, event.id.as_str(), outcome.as_str()).await?;
        Ok(Delivery {
            event,
            outcome,
            duplicate: false,
        })
    }

    /// Applies one event's intent to its order.
    async fn apply(&self, event: &PaymentEvent) -> Result<Outcome, WebhookError> {
        let intent = match event.intent {
            Intent::Ignore(Ignored::Type) => return Ok(Outcome::IgnoredType),
            Intent::Ignore(Ignored::Unpaid) => return Ok(Outcome::IgnoredUnpaid),
            Intent::Ignore(Ignored::PartialRefund) => return Ok(Outcome::IgnoredPartialRefund),
            intent => intent,
        };
        let Some(order) = event.order else {
            return Ok(Outcome::UnknownOrder);
        };
        match intent {
            Intent::Pay => {
                if store::refund_recorded(&self.pool, order).await? {
                    // The refund came first: the payment it refunded must not make the order
                    // paid. A hold still open is cancelled (its units go back on sale).
                    return match self.cancel_hold(order).await? {
                        Outcome::UnknownOrder => Ok(Outcome::UnknownOrder),
                        _ => Ok(Outcome::AlreadyRefunded),
                    };
                }
                let source = PaymentSource::Stripe {
                    event_id: event.id.to_string(),
                };
                self.act(order, OrderAction::Pay { source }).await
            }
            Intent::CancelHold => self.cancel_hold(order).await,
            Intent::Refund => match self.act(order, OrderAction::Refund { restock: true }).await {
                // Refunded before the payment was delivered: nothing was paid as far as the
                // order knows, so the hold is cancelled (the payment, when it comes, finds the
                // refund recorded).
                Ok(Outcome::IgnoredState) => self.cancel_hold(order).await,
                other => other,
            },
            Intent::Ignore(_) => Ok(Outcome::IgnoredType),
        }
    }

    /// Cancels `order` if it is a hold; any other state is left as it is (`ignored_state`).
    async fn cancel_hold(&self, order: Uuid) -> Result<Outcome, WebhookError> {
        match self.orders.get(order, &Requester::Shop).await {
            Ok(view) if view.status == OrderStatus::Held => {
                self.act(order, OrderAction::Cancel).await
            }
            Ok(_) => Ok(Outcome::IgnoredState),
            Err(e) => outcome_of(Err(e)),
        }
    }

    async fn act(&self, order: Uuid, action: OrderAction) -> Result<Outcome, WebhookError> {
        outcome_of(
            self.orders
                .apply(order, action, Requester::Shop)
                .await
                .map(|view| view.status),
        )
    }
}

/// The outcome of an order transition, or the error that makes the delivery fail.
fn outcome_of(result: Result<OrderStatus, OrderError>) -> Result<Outcome, WebhookError> {
    match result {
        Ok(OrderStatus::RefundDue) => Ok(Outcome::RefundDue),
        Ok(_) => Ok(Outcome::Applied),
        Err(OrderError::NotFound) => Ok(Outcome::UnknownOrder),
        Err(OrderError::State { .. }) => Ok(Outcome::IgnoredState),
        Err(e) if e.is_unavailable() => Err(WebhookError::Unavailable(e.to_string())),
        Err(other) => Err(WebhookError::Unexpected(other.to_string())),
    }
}
