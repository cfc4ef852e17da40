-- Issue 34: the shop's webhook endpoints and the deliveries of the feed's events to them.
--
-- The dispatcher (one pass at a time, `webhook_dispatch`'s row lock) reads the feed after its
-- cursor and writes one delivery per (endpoint, event) the endpoint wants; the purchase batches
-- never see any of it. Every origin process sends deliveries: it claims due ones for a while
-- (`claimed_until`, `FOR UPDATE SKIP LOCKED`, at most WEBHOOK_MAX_IN_FLIGHT claimed per
-- endpoint), posts them, and deletes a delivery once acknowledged (2xx) or reschedules it. A
-- process that dies mid-delivery leaves its claim to lapse: the delivery is claimed again, no
-- attempt spent (at least once; receivers deduplicate on `webhook-id`).

CREATE TABLE webhook_endpoints (
    id               uuid PRIMARY KEY,
    url              text NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    -- The event types it wants; NULL: every type.
    types            text[],
    description      text CHECK (length(description) <= 1024),
    enabled          boolean NOT NULL DEFAULT true,
    -- The HMAC-SHA256 keys its deliveries are signed with (the bytes of the `whsec_…` secret,
    -- shown once): the current one, and after a rotation the previous one until
    -- `previous_until` (both sign meanwhile). Keys, so stored as they are (docs/security.md).
    secret           bytea NOT NULL CHECK (length(secret) = 32),
    previous_secret  bytea CHECK (length(previous_secret) = 32),
    previous_until   timestamptz,
    -- The feed position it was created at: the events after it are delivered to it.
    start_commit     bigint NOT NULL,
    start_seq        bigint NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    -- Why it is disabled: `failing` (still failing after the last retry), `gone` (it answered
    -- 410), `manual` (PATCH enabled=false).
    disabled_reason  text CHECK (disabled_reason IN ('failing', 'gone', 'manual')),
    disabled_at      timestamptz,
    -- The last failed attempt (written at most a few times a second: this row is locked by
    -- every claim; since when it fails is read from its waiting deliveries).
    last_error       text,
    last_error_at    timestamptz,
    CONSTRAINT webhook_endpoints_disabled CHECK (enabled = (disabled_reason IS NULL))
);

-- The dispatcher's cursor: the feed position up to which every event was fanned out.
CREATE TABLE webhook_dispatch (
    one  boolean PRIMARY KEY DEFAULT true CHECK (one),
    n    bigint NOT NULL,
    seq  bigint NOT NULL
);
INSERT INTO webhook_dispatch (n, seq) VALUES (0, 0);

CREATE TABLE webhook_deliveries (
    endpoint_id       uuid NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    -- The event: its position (commit number, seq) and its row (xid, seq).
    n                 bigint NOT NULL,
    seq               bigint NOT NULL,
    xid               xid8 NOT NULL,
    -- An order event's order and sequence: of one (endpoint, order), only the delivery of the
    -- lowest sequence is sent.
    order_id          uuid,
    order_sequence    integer,
    -- Attempts spent (a deferral by Retry-After or a lapsed claim spends none), and when the
    -- first was made (the schedule is bounded from it).
    attempts          integer NOT NULL DEFAULT 0,
    first_attempt_at  timestamptz,
    next_at           timestamptz NOT NULL DEFAULT now(),
    -- A process sending it holds it until `claimed_until` (then it lapses), `claim` its token.
    claimed_until     timestamptz,
    claim             uuid,
    last_error        text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (endpoint_id, n, seq)
);
-- "Is an earlier event of this order still undelivered to this endpoint?"
CREATE INDEX webhook_deliveries_order_idx ON webhook_deliveries (endpoint_id, order_id, order_sequence)
    WHERE order_id IS NOT NULL;
-- The due deliveries of an endpoint, oldest due first (what a claim reads).
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (endpoint_id, next_at, n, seq);
-- The claims of an endpoint (counted against WEBHOOK_MAX_IN_FLIGHT by every claim: without it,
-- the count would read the endpoint's whole backlog each time).
CREATE INDEX webhook_deliveries_claimed_idx ON webhook_deliveries (endpoint_id)
    WHERE claimed_until IS NOT NULL;
