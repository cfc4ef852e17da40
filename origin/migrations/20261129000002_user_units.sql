-- Flashgate origin schema v2: a per-(SKU, user) counter of units bought.
-- The purchase batch used to sum a user's orders of the SKU to enforce `max_per_user`; that read
-- grows with the user's orders and cost a third of a batch transaction under a flash sale. The
-- counter is read by primary key and bumped in the batch's single write statement, in the same
-- transaction as the orders it counts; reconciliation checks it against the orders.

CREATE TABLE user_units (
    sku      TEXT NOT NULL REFERENCES skus (sku),
    user_id  TEXT NOT NULL,
    -- Units this user bought of this SKU, across all generations (sales) of it.
    units    BIGINT NOT NULL CHECK (units >= 0),
    PRIMARY KEY (sku, user_id)
);

INSERT INTO user_units (sku, user_id, units)
SELECT sku, user_id, SUM(qty) FROM orders GROUP BY sku, user_id;

-- Only the per-user sum used this index; every order paid for maintaining it.
DROP INDEX orders_sku_user_idx;
