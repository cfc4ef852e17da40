-- Issue 16: a sale's schedule and pause. Purchases are decided only from `starts_at` (if set),
-- until `ends_at` (if set, exclusive), and not while `paused`; the purchase batch checks them with
-- the database's clock under the SKU row lock. A restock (a PUT of the sale) keeps them unless the
-- PUT names them.
ALTER TABLE skus
    ADD COLUMN starts_at timestamptz NULL,
    ADD COLUMN ends_at timestamptz NULL,
    ADD COLUMN paused boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT skus_schedule_order CHECK (ends_at > starts_at);
