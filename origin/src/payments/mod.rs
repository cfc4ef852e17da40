//! Payment provider webhooks (`POST /v1/payments/stripe`): Stripe's events confirm, cancel and
//! refund orders. [`signature`] verifies `Stripe-Signature`; [`event`] parses the event.

pub mod event;
pub mod signature;
