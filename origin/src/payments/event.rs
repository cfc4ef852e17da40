//! A verified Stripe event body, parsed once into what the origin acts on: the event id (the
//! unit of at-most-once), its type, the order it names and what it asks for ([`Intent`]). Pure;
//! runs after [`super::signature`] has accepted the delivery, and reads the body in one pass
//! through `members` (only the members it acts on).
//!
//! Event shape (Stripe's `Event` object): `{"id":"evt_…","type":"…","data":{"object":{…}}}`.
//! The order id is in `data.object.metadata.order_id` — the shop puts it in the metadata of the
//! Checkout Session (`metadata`) or of the PaymentIntent (`payment_intent_data.metadata`; a
//! PaymentIntent's charges carry its metadata, so `charge.refunded` names it too).
//!
//! | type | intent |
//! |---|---|
//! | `checkout.session.completed` (`payment_status` `paid` or `no_payment_required`), `checkout.session.async_payment_succeeded`, `payment_intent.succeeded` | pay |
//! | `checkout.session.completed` with `payment_status` `unpaid` (a delayed method: the async event follows) | ignored |
//! | `payment_intent.payment_failed`, `payment_intent.canceled`, `checkout.session.expired`, `checkout.session.async_payment_failed` | cancel the hold |
//! | `charge.refunded` (`refunded: true`: the whole charge) | refund with restock |
//! | `charge.refunded` with `refunded: false` (a partial refund) | ignored |
//! | anything else | ignored |

mod members;

use uuid::Uuid;

use members::{EventMembers, Object, Scalar};

/// Longest accepted event id (Stripe's are ~30 characters).
pub const MAX_EVENT_ID_LEN: usize = 255;

/// A Stripe event id: 1..=255 visible ASCII characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EventId(String);

impl EventId {
    pub fn parse(raw: &str) -> Option<Self> {
        let ok = (1..=MAX_EVENT_ID_LEN).contains(&raw.len())
            && raw.bytes().all(|b| b.is_ascii_graphic());
        ok.then(|| Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for EventId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The event types the origin acts on; everything else is [`EventType::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    CheckoutSessionCompleted,
    CheckoutSessionAsyncPaymentSucceeded,
    CheckoutSessionAsyncPaymentFailed,
    CheckoutSessionExpired,
    PaymentIntentSucceeded,
    PaymentIntentPaymentFailed,
    PaymentIntentCanceled,
    ChargeRefunded,
    Other,
}

impl EventType {
    const KNOWN: [Self; 8] = [
        Self::CheckoutSessionCompleted,
        Self::CheckoutSessionAsyncPaymentSucceeded,
        Self::CheckoutSessionAsyncPaymentFailed,
        Self::CheckoutSessionExpired,
        Self::PaymentIntentSucceeded,
        Self::PaymentIntentPaymentFailed,
        Self::PaymentIntentCanceled,
        Self::ChargeRefunded,
    ];

    pub fn parse(raw: &str) -> Self {
        Self::KNOWN
            .into_iter()
            .find(|k| k.as_str() == raw)
            .unwrap_or(Self::Other)
    }

    /// Stripe's name of the type; `other` for every type the origin does not act on (the
    /// `type` label of `origin_payment_events_total`, so its cardinality stays bounded).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::CheckoutSessionCompleted => "checkout.session.completed",
            Self::CheckoutSessionAsyncPaymentSucceeded => {
                "checkout.session.async_payment_succeeded"
            }
            Self::CheckoutSessionAsyncPaymentFailed => "checkout.session.async_payment_failed",
            Self::CheckoutSessionExpired => "checkout.session.expired",
            Self::PaymentIntentSucceeded => "payment_intent.succeeded",
            Self::PaymentIntentPaymentFailed => "payment_intent.payment_failed",
            Self::PaymentIntentCanceled => "payment_intent.canceled",
            Self::ChargeRefunded => "charge.refunded",
            Self::Other => "other",
        }
    }
}

/// What an event asks of its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    /// The order is paid.
    Pay,
    /// The payment failed or was abandoned: cancel the order if it is still a hold.
    CancelHold,
    /// The whole charge was refunded: refund the order and put its units back on sale.
    Refund,
    /// Nothing to do.
    Ignore(Ignored),
}

/// Why an event asks for nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ignored {
    /// A type the origin does not act on.
    Type,
    /// `checkout.session.completed` of a delayed payment method, not paid yet.
    Unpaid,
    /// `charge.refunded` for part of the charge.
    PartialRefund,
}

/// A parsed event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentEvent {
    pub id: EventId,
    pub kind: EventType,
    /// The type as Stripe named it (stored as is; at most 255 characters).
    pub raw_type: String,
    /// `data.object.metadata.order_id`, when it is an order id (a UUID).
    pub order: Option<Uuid>,
    pub intent: Intent,
}

/// Why a verified body is not an event the origin can record (400 `invalid_request`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    #[error("the body is not a JSON object")]
    NotAnObject,
    #[error("`id` must be a string of 1..={MAX_EVENT_ID_LEN} visible ASCII characters")]
    Id,
    #[error("`type` must be a string of 1..=255 characters")]
    Type,
    #[error("`data.object` must be an object for a {0} event")]
    Object(&'static str),
}

/// Parses a verified delivery's body.
///
/// Only what the origin acts on is read — `id`, `type`, `data.object.metadata.order_id`,
/// `data.object.payment_status` and `data.object.refunded` — borrowed from the body where it
/// has no escapes; every other member (a Stripe event is mostly other members) is skipped
/// without being built (`members`). The answers are those of reading the whole body as a
/// JSON value: a member of the wrong type reads as absent, a repeated member's last value
/// counts, and a body that is not one JSON object (or has trailing bytes) is refused.
pub fn parse(body: &[u8]) -> Result<PaymentEvent, EventError> {
    let Object(Some(event)) = serde_json::from_slice::<Object<EventMembers<'_>>>(body)
        .map_err(|_| EventError::NotAnObject)?
    else {
        return Err(EventError::NotAnObject);
    };
    let id = event
        .id
        .as_str()
        .and_then(EventId::parse)
        .ok_or(EventError::Id)?;
    let raw_type = event
        .kind
        .as_str()
        .filter(|t| (1..=255).contains(&t.len()))
        .ok_or(EventError::Type)?
        .to_owned();
    let kind = EventType::parse(&raw_type);
    let Some(object) = event.data.0.and_then(|d| d.object.0) else {
        if kind == EventType::Other {
            return Ok(PaymentEvent {
                id,
                kind,
                raw_type,
                order: None,
                intent: Intent::Ignore(Ignored::Type),
            });
        }
        return Err(EventError::Object(kind.as_str()));
    };
    let order = object.metadata.0.and_then(|m| {
        m.order_id
            .as_str()
            .and_then(|s| Uuid::parse_str(s.trim()).ok())
    });
    let intent = match kind {
        EventType::CheckoutSessionCompleted => {
            // Absent on no Stripe event; treated as paid rather than dropping a payment.
            match object.payment_status.as_str() {
                Some("unpaid") => Intent::Ignore(Ignored::Unpaid),
                _ => Intent::Pay,
            }
        }
        EventType::CheckoutSessionAsyncPaymentSucceeded | EventType::PaymentIntentSucceeded => {
            Intent::Pay
        }
        EventType::CheckoutSessionAsyncPaymentFailed
        | EventType::CheckoutSessionExpired
        | EventType::PaymentIntentPaymentFailed
        | EventType::PaymentIntentCanceled => Intent::CancelHold,
        EventType::ChargeRefunded => match object.refunded {
            Scalar::Bool(false) => Intent::Ignore(Ignored::PartialRefund),
            _ => Intent::Refund,
        },
        EventType::Other => Intent::Ignore(Ignored::Type),
    };
    Ok(PaymentEvent {
        id,
        kind,
        raw_type,
        order,
        intent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORDER: &str = "0190b1a2-3c4d-7e5f-8a9b-0c1d2e3f4a5b";

    fn event(kind: &str, object: &str) -> Vec<u8> {
        format!(r#"{{"id":"evt_1","object":"event","type":"{kind}","data":{{"object":{object}}}}}"#)
            .into_bytes()
    }

    fn with_order(extra: &str) -> String {
        format!(r#"{{"id":"x","metadata":{{"order_id":"{ORDER}"}}{extra}}}"#)
    }

    #[test]
    fn each_type_maps_to_its_intent() {
        let cases = [
            (
                "checkout.session.completed",
                r#","payment_status":"paid""#,
                Intent::Pay,
            ),
            (
                "checkout.session.completed",
                r#","payment_status":"no_payment_required""#,
                Intent::Pay,
            ),
            (
                "checkout.session.completed",
                r#","payment_status":"unpaid""#,
                Intent::Ignore(Ignored::Unpaid),
            ),
            ("checkout.session.async_payment_succeeded", "", Intent::Pay),
            ("payment_intent.succeeded", "", Intent::Pay),
            ("payment_intent.payment_failed", "", Intent::CancelHold),
            ("payment_intent.canceled", "", Intent::CancelHold),
            ("checkout.session.expired", "", Intent::CancelHold),
            (
                "checkout.session.async_payment_failed",
                "",
                Intent::CancelHold,
            ),
            ("charge.refunded", r#","refunded":true"#, Intent::Refund),
            (
                "charge.refunded",
                r#","refunded":false"#,
                Intent::Ignore(Ignored::PartialRefund),
            ),
            ("customer.created", "", Intent::Ignore(Ignored::Type)),
        ];
        for (kind, extra, intent) in cases {
            let e = parse(&event(kind, &with_order(extra))).expect(kind);
            assert_eq!(
                (e.intent, e.order.map(|o| o.to_string())),
                (intent, Some(ORDER.to_owned())),
                "{kind} {extra}"
            );
            assert_eq!(e.raw_type, kind);
            assert_eq!(e.id.as_str(), "evt_1");
        }
        assert_eq!(EventType::parse("customer.created").as_str(), "other");
    }

    #[test]
    fn a_missing_or_foreign_order_id_is_no_order() {
        for object in [
            r#"{"metadata":{}}"#,
            r#"{"metadata":{"order_id":"not-a-uuid"}}"#,
            r#"{"metadata":{"order_id":7}}"#,
            r#"{}"#,
        ] {
            let e = parse(&event("payment_intent.succeeded", object)).expect(object);
            assert_eq!((e.intent, e.order), (Intent::Pay, None), "{object}");
        }
    }

    #[test]
    fn bodies_that_are_not_events_are_refused() {
        assert_eq!(parse(b"[]"), Err(EventError::NotAnObject));
        assert_eq!(parse(b"{"), Err(EventError::NotAnObject));
        assert_eq!(parse(br#"{"type":"charge.refunded"}"#), Err(EventError::Id));
        assert_eq!(parse(br#"{"id":"","type":"x"}"#), Err(EventError::Id));
        assert_eq!(parse(br#"{"id":"evt 1","type":"x"}"#), Err(EventError::Id));
        assert_eq!(parse(br#"{"id":"evt_1","type":5}"#), Err(EventError::Type));
        assert_eq!(
            parse(br#"{"id":"evt_1","type":"charge.refunded","data":{"object":[]}}"#),
            Err(EventError::Object("charge.refunded"))
        );
        // Types the origin ignores need no object.
        let e = parse(br#"{"id":"evt_1","type":"ping"}"#).expect("other");
        assert_eq!(e.intent, Intent::Ignore(Ignored::Type));
    }

    #[test]
    fn it_reads_like_a_whole_json_value() {
        // Escaped strings (keys and values) read as their text; members of other types read as
        // absent; a repeated member's last value counts; what else the event holds is skipped.
        let body = format!(
            r#"{{"id":"evt_\u0031","type":"payment_intent.succeeded","livemode":false,"created":1790000000,
               "request":{{"id":null,"idempotency_key":[1,{{"a":[]}}]}},"data":{{"previous":[],"object":{{
               "amount":100.5,"metadata":{{"order_id":5}},"metadata":{{"other":"x","order_\u0069d":" {ORDER} "}}}}}}}}"#
        );
        let e = parse(body.as_bytes()).expect("event");
        assert_eq!(e.id.as_str(), "evt_1");
        assert_eq!(e.order.map(|o| o.to_string()), Some(ORDER.to_owned()));
        assert_eq!(e.intent, Intent::Pay);
        // A `refunded` that is not a boolean is not a partial refund; `data` that is not an
        // object has no object.
        let e = parse(&event("charge.refunded", r#"{"refunded":"false"}"#)).expect("refund");
        assert_eq!(e.intent, Intent::Refund);
        assert_eq!(
            parse(br#"{"id":"evt_1","type":"charge.refunded","data":"x"}"#),
            Err(EventError::Object("charge.refunded"))
        );
        assert_eq!(
            parse(br#"{"id":"evt_1","type":"x"} trailing"#),
            Err(EventError::NotAnObject)
        );
        assert_eq!(parse(b"\"evt_1\""), Err(EventError::NotAnObject));
        assert_eq!(
            parse(br#"{"id":"a","id":7,"type":"x"}"#),
            Err(EventError::Id)
        );
    }
}
