-- Flashgate origin schema v1.
-- The database is the final guard against overselling: every purchase decision commits in one
-- transaction that holds the SKU row lock, and CHECK constraints refuse negative stock even if
-- the application were wrong.

CREATE TABLE skus (
    sku            TEXT PRIMARY KEY CHECK (sku ~ '^[A-Za-z0-9._-]{1,64}$'),
    name           TEXT NOT NULL,
    price_cents    BIGINT NOT NULL CHECK (price_cents >= 0),
    -- Units put on sale by the last PUT (restock); reconciliation checks
    -- initial_stock - stock == units ordered in this generation.
    initial_stock  BIGINT NOT NULL CHECK (initial_stock >= 0),
    -- Units remaining.
    stock          BIGINT NOT NULL CHECK (stock >= 0 AND stock <= initial_stock),
    max_per_user   INTEGER NOT NULL CHECK (max_per_user >= 1),
    -- Incremented by every PUT, so orders can be attributed to the sale they belong to.
    generation     BIGINT NOT NULL DEFAULT 1,
    -- Highest Redlock fencing token that committed a purchase batch for this SKU; a batch
    -- carrying a lower token comes from a stale lock holder and is refused.
    fence          BIGINT NOT NULL DEFAULT 0,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE orders (
    order_id         UUID PRIMARY KEY,
    sku              TEXT NOT NULL REFERENCES skus (sku),
    generation       BIGINT NOT NULL,
    user_id          TEXT NOT NULL,
    qty              INTEGER NOT NULL CHECK (qty BETWEEN 1 AND 100),
    idempotency_key  TEXT NOT NULL,
    fence            BIGINT NOT NULL DEFAULT 0,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- A (user, key) pair buys at most once, whatever the application does.
    CONSTRAINT orders_user_key_unique UNIQUE (user_id, idempotency_key)
);
-- Per-user cap: units a user bought of a SKU, across all generations.
CREATE INDEX orders_sku_user_idx ON orders (sku, user_id);

-- Stored outcomes of purchase attempts, replayed for the same (user, key).
CREATE TABLE idempotency_records (
    user_id          TEXT NOT NULL,
    idempotency_key  TEXT NOT NULL,
    -- The parsed request the key was first used with.
    sku              TEXT NOT NULL,
    qty              INTEGER NOT NULL,
    -- The answer, byte for byte.
    status           SMALLINT NOT NULL,
    body             TEXT NOT NULL,
    order_id         UUID REFERENCES orders (order_id),
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, idempotency_key),
    CHECK ((status = 201) = (order_id IS NOT NULL))
);
CREATE INDEX idempotency_records_created_at_idx ON idempotency_records (created_at);
