-- Flashgate origin schema v3: stock flows both ways (issue 15).
--
-- A purchase of a SKU with `hold_secs > 0` is a HOLD that expires unless paid; cancellations,
-- expiries and refunds with restock put units back on sale. The books of every sale generation
-- stay balanced in every committed state, enforced by CHECK constraints on counters that the
-- statements moving units maintain in the same statement (no trigger: the purchase batch's
-- single write statement stays one round trip):
--
--   initial_stock = stock + units_out + written_off
--
-- where `units_out` is the generation's units in held, confirmed and paid orders (the issue's
-- "held + confirmed + paid units"), and `written_off` its units refunded WITHOUT restock (they
-- left the sale for good: neither on sale nor owed to anyone). The current generation's counters
-- live on the `skus` row (the one the purchase batch already locks and updates); when a PUT
-- starts a new generation, the old one's counters move to `sku_generations`, where returns of its
-- orders keep them balanced (its stock is no longer on sale). `origin reconcile` checks the
-- counters against the orders themselves.

ALTER TABLE skus
    -- Seconds a purchase holds its units before it expires unpaid; 0 = no holds (orders are
    -- confirmed at once, as before).
    ADD COLUMN hold_secs   INTEGER NOT NULL DEFAULT 0 CHECK (hold_secs BETWEEN 0 AND 86400),
    -- Units of the current generation in held, confirmed and paid orders.
    ADD COLUMN units_out   BIGINT NOT NULL DEFAULT 0 CHECK (units_out >= 0),
    -- Units of the current generation refunded without restock.
    ADD COLUMN written_off BIGINT NOT NULL DEFAULT 0 CHECK (written_off >= 0),
    -- Bumped by every transaction that puts units back into the current generation's stock:
    -- within one (generation, returns) epoch stock only falls (`purchase::knowledge`).
    ADD COLUMN returns     BIGINT NOT NULL DEFAULT 0;

-- Existing sales: every unit gone from stock is in a confirmed order.
UPDATE skus SET units_out = initial_stock - stock;

ALTER TABLE skus ADD CONSTRAINT skus_books_balance
    CHECK (initial_stock = stock + units_out + written_off);

-- Sale generations replaced by a PUT, with their books at that moment (then kept balanced by
-- returns of their orders).
CREATE TABLE sku_generations (
    sku            TEXT NOT NULL REFERENCES skus (sku),
    generation     BIGINT NOT NULL,
    initial_stock  BIGINT NOT NULL CHECK (initial_stock >= 0),
    -- Units left when the generation was replaced, plus units returned since (not on sale).
    stock          BIGINT NOT NULL CHECK (stock >= 0),
    units_out      BIGINT NOT NULL CHECK (units_out >= 0),
    written_off    BIGINT NOT NULL CHECK (written_off >= 0),
    closed_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (sku, generation),
    CONSTRAINT sku_generations_books_balance
        CHECK (initial_stock = stock + units_out + written_off)
);

-- Generations replaced before this migration: their initial stock was not kept, so they are
-- recorded as exactly their orders (0 left, nothing written off).
INSERT INTO sku_generations (sku, generation, initial_stock, stock, units_out, written_off)
SELECT o.sku, o.generation, SUM(o.qty), 0, SUM(o.qty), 0
FROM orders o JOIN skus s ON s.sku = o.sku AND o.generation < s.generation
GROUP BY o.sku, o.generation;

ALTER TABLE orders
    ADD COLUMN status TEXT NOT NULL DEFAULT 'confirmed'
        CONSTRAINT orders_status_known CHECK (status IN
            ('held', 'confirmed', 'paid', 'expired', 'cancelled', 'refunded', 'refund_due')),
    -- When a hold expires unpaid; NULL for an order that was never a hold.
    ADD COLUMN expires_at TIMESTAMPTZ,
    ADD COLUMN updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- For a refunded order: whether its units went back on sale.
    ADD COLUMN restocked BOOLEAN,
    ADD CONSTRAINT orders_hold_expires CHECK (status <> 'held' OR expires_at IS NOT NULL),
    ADD CONSTRAINT orders_refund_restocked CHECK ((status = 'refunded') = (restocked IS NOT NULL));

UPDATE orders SET updated_at = created_at;

-- The expiry sweep's scan: only live holds, by due time.
CREATE INDEX orders_held_expires_idx ON orders (expires_at) WHERE status = 'held';

-- One payment record per paid order (an API `pay` call or a payment provider's event), written in
-- the same transaction as the order's transition to `paid` (or to `refund_due`, for a payment
-- that arrived after its hold expired and could not take a unit again).
CREATE TABLE order_payments (
    order_id     UUID PRIMARY KEY REFERENCES orders (order_id),
    source       TEXT NOT NULL CHECK (source IN ('api', 'stripe')),
    -- The provider's event id (Stripe `evt_…`); NULL for an API call.
    reference    TEXT,
    recorded_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
