-- Issue 34: every order change leaves Flashgate — the transactional outbox and its feed.
--
-- 1. `events`: one row per order transition and per SKU crossing zero stock, INSERTed by the
--    same statement (so the same transaction) that makes the change: the purchase batch's write,
--    an order transition (`OrderTx`), the live-hold payment batch, a restock. No order changes
--    without its event, no event survives a rollback.
--
--    An order event's `data` is the order as `GET /v1/orders/{id}` shows it after the change: its
--    fixed fields (sku, qty, user, created_at, expires_at) are read from `orders` when the event
--    is rendered, the rest (status, updated_at = `at`) are the row's own. Nothing else is copied:
--    the batch's write stays one statement with one more multi-row INSERT.
--
-- 2. The feed's cursor (the classic outbox trap: a sequence number is taken before commit, so a
--    reader paging `after=N` would miss an event with a smaller number that commits later). An
--    event's position is (commit number, seq): `seq` orders the events of one transaction, and
--    the commit number is given to the whole transaction AFTER it committed, by one sequencer at
--    a time (`event_sequencer`'s row lock, any origin process): each pass takes the committed
--    transactions waiting in `event_xacts` and numbers them above everything numbered before. A
--    reader only sees numbered events, and every later commit gets a larger number, so a cursor
--    never skips one. It costs one row per writing transaction (not per event), and nothing is
--    shared between the SKUs' batches but `events_seq` (a sequence: no row lock, no wait).
--    docs/architecture.md, "The event feed", says why not the snapshot-xmin filter.
CREATE SEQUENCE events_seq AS bigint CACHE 100;

CREATE TABLE events (
    -- The transaction that wrote the event (its commit number is in `event_commits`).
    xid       xid8 NOT NULL DEFAULT pg_current_xact_id(),
    seq       bigint NOT NULL DEFAULT nextval('events_seq'),
    -- The event's public id (`evt_` + these 32 hex digits): a UUIDv7, stable forever.
    id        uuid NOT NULL,
    type      text NOT NULL CONSTRAINT events_type_known CHECK (type IN (
                  'order.created', 'order.paid', 'order.cancelled', 'order.expired',
                  'order.refunded', 'order.refund_due', 'sku.sold_out', 'sku.back_on_sale')),
    -- When the change was made: the order's `updated_at` after it (the event's `timestamp`).
    at        timestamptz NOT NULL,
    -- Order events: the order, its per-order sequence number (1, 2, … without gaps) and its
    -- status after the change.
    order_id  uuid,
    sequence  integer,
    status    text,
    -- SKU events: the SKU and the stock it reached.
    sku       text,
    stock     bigint,
    PRIMARY KEY (xid, seq),
    CONSTRAINT events_id_unique UNIQUE (id),
    CONSTRAINT events_order_or_sku CHECK (
        (type LIKE 'order.%' AND order_id IS NOT NULL AND sequence >= 1 AND status IS NOT NULL
             AND sku IS NULL AND stock IS NULL)
        OR (type LIKE 'sku.%' AND order_id IS NULL AND sequence IS NULL AND status IS NULL
             AND sku IS NOT NULL AND stock IS NOT NULL))
);

-- Transactions that wrote events and wait for their commit number: a row is visible to the
-- sequencer only once its transaction committed. Written by a statement trigger on `events` (one
-- row per transaction, whatever it writes), taken (deleted) by the sequencer.
CREATE TABLE event_xacts (
    xid            xid8 PRIMARY KEY,
    -- When its first events were written (reconciliation: a committed one waiting minutes means
    -- no sequencer runs).
    registered_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE FUNCTION flashgate_event_xact() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM new_events) THEN
        INSERT INTO event_xacts (xid) VALUES (pg_current_xact_id()) ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER events_await_number AFTER INSERT ON events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION flashgate_event_xact();

-- The commit numbers: `n` orders the committed transactions as the sequencer saw them commit.
CREATE TABLE event_commits (
    xid          xid8 PRIMARY KEY,
    n            bigint NOT NULL CONSTRAINT event_commits_n_unique UNIQUE,
    numbered_at  timestamptz NOT NULL DEFAULT now()
);

-- The sequencer's state, one row: the last commit number given. A pass holds its lock.
CREATE TABLE event_sequencer (
    one  boolean PRIMARY KEY DEFAULT true CHECK (one),
    n    bigint NOT NULL
);
INSERT INTO event_sequencer (n) VALUES (0);

-- The number of events each order has had: its last event's `sequence`. An order created from
-- now on starts at 1 (its `order.created`); the orders that existed before this migration had no
-- event, so their first event — whatever it is — is sequence 1 as well: an order's sequence
-- always runs 1, 2, 3 … without a gap. Bumped by the statement that writes the transition.
ALTER TABLE orders ADD COLUMN event_seq integer NOT NULL DEFAULT 0;
ALTER TABLE orders ALTER COLUMN event_seq SET DEFAULT 1;

-- What the retention purge removed: the feed answers `410 cursor_expired` to a cursor below
-- (n, seq), every event at or below it is gone; `purged_before` bounds the `at` of what was
-- removed (reconciliation: an order created before it may have lost its first events).
CREATE TABLE event_horizon (
    one            boolean PRIMARY KEY DEFAULT true CHECK (one),
    n              bigint NOT NULL,
    seq            bigint NOT NULL,
    purged_before  timestamptz
);
INSERT INTO event_horizon (n, seq) VALUES (0, 0);
