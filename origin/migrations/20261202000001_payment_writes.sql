-- Issue 15: what a paid hold writes, cut to what is read back.
--
-- A payment of a live hold (`store/payments.rs::pay_live_holds`) writes, per order, its
-- `held -> paid` transition, its `order_payments` row and its `payment_events` row, many
-- payments in one statement. Two of those writes cost more than what they guard:
--
-- 1. `order_payments.order_id` was a foreign key: a check per row — a query and a row lock on
--    the order the same statement had just locked and paid. It becomes the set-based reference
--    of migration 20261201000005 (one check per statement over its new rows, orders permanent,
--    the referencing column fixed): the same guarantee, SQLSTATE 23503 as before.
-- 2. `payment_events_order_idx` indexed every event that names an order, but the only reads by
--    order are "was this order's whole charge refunded?" (`type = 'charge.refunded'`): the index
--    now holds refunds only, so a payment event no longer inserts into it.

ALTER TABLE order_payments DROP CONSTRAINT order_payments_order_id_fkey;

CREATE TRIGGER order_payments_fixed_order BEFORE UPDATE OF order_id ON order_payments
    FOR EACH ROW WHEN (OLD.order_id IS DISTINCT FROM NEW.order_id)
    EXECUTE FUNCTION flashgate_fixed_column('order_id');
CREATE TRIGGER order_payments_order_exists AFTER INSERT ON order_payments
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION flashgate_new_rows_reference('order_id', 'orders');

DROP INDEX payment_events_order_idx;
CREATE INDEX payment_events_refunds_idx ON payment_events (order_id)
    WHERE type = 'charge.refunded' AND order_id IS NOT NULL;
