-- Flashgate origin schema: the payment provider's webhook events (POST /v1/payments/stripe).
-- Deliveries are at-least-once and out of order; each event id is recorded once, so a repeated
-- delivery is answered from here and never applied again. `result` says what the event did:
-- `pending` only while its delivery is being applied (a delivery that failed with 503 or a
-- process that died leaves it `pending`, and the provider's retry applies it — every order
-- transition is idempotent, so applying it again changes nothing twice).

CREATE TABLE payment_events (
    -- Stripe's event id (`evt_…`).
    event_id     TEXT PRIMARY KEY CHECK (length(event_id) BETWEEN 1 AND 255),
    -- The event type as the provider named it.
    type         TEXT NOT NULL CHECK (length(type) BETWEEN 1 AND 255),
    -- The order named by the event's metadata, when it is an order id (not a foreign key: an
    -- event may name an order this database never had; reconciliation lists applied events
    -- whose order does not exist).
    order_id     UUID,
    result       TEXT NOT NULL CHECK (result IN (
                     'pending', 'applied', 'refund_due', 'ignored_state', 'unknown_order',
                     'ignored_type', 'ignored_unpaid', 'ignored_partial_refund', 'already_refunded')),
    received_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    decided_at   TIMESTAMPTZ
);
-- A payment checks whether its order's charge was already refunded (a refund delivered first).
CREATE INDEX payment_events_order_idx ON payment_events (order_id) WHERE order_id IS NOT NULL;
