-- Issue 18: the references a purchase batch writes, checked once per statement instead of once
-- per row.
--
-- A batch writes hundreds of orders, per-user counters and stored answers in ONE statement
-- (store/batch.rs). Their foreign keys (`orders.sku`, `user_units.sku` -> skus;
-- `idempotency_records.order_id` -> orders) each ran a check per row — a query and a row lock on
-- the referenced row: 4-6 ms of a ~20 ms write of 500 purchases, ~18 % of Postgres's CPU per
-- purchase (docs/benchmarks.md). The same guarantee, for a fraction of that:
--
-- 1. The referenced rows are permanent: SKUs and orders are never deleted (the books count every
--    order ever sold; a sale is ended or paused, never removed) and their keys never change.
--    Triggers refuse a DELETE, a TRUNCATE, or a changed key. So a reference, once checked, stays
--    valid — which is what a foreign key's row lock was for.
-- 2. The referencing columns never change either (the same triggers), and each INSERT
--    statement checks all of its new rows in one query over its transition table. The checks
--    run after the statement, so a batch's stored answers see the orders its same statement
--    wrote, as the foreign keys did.
--
-- A violation is SQLSTATE 23503 (foreign_key_violation), as before; a refused delete or key
-- change is 23001 (restrict_violation).

ALTER TABLE orders DROP CONSTRAINT orders_sku_fkey;
ALTER TABLE user_units DROP CONSTRAINT user_units_sku_fkey;
ALTER TABLE idempotency_records DROP CONSTRAINT idempotency_records_order_id_fkey;

-- Rows of this table are never deleted (DELETE, TRUNCATE).
CREATE FUNCTION flashgate_permanent_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'rows of % are permanent: they are never deleted', TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END
$$;

-- The column named by the trigger's argument never changes (fired only when it did).
CREATE FUNCTION flashgate_fixed_column() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%.% never changes', TG_TABLE_NAME, TG_ARGV[0]
        USING ERRCODE = 'restrict_violation';
END
$$;

CREATE TRIGGER skus_permanent BEFORE DELETE ON skus
    FOR EACH ROW EXECUTE FUNCTION flashgate_permanent_rows();
CREATE TRIGGER skus_permanent_truncate BEFORE TRUNCATE ON skus
    FOR EACH STATEMENT EXECUTE FUNCTION flashgate_permanent_rows();
CREATE TRIGGER skus_fixed_key BEFORE UPDATE OF sku ON skus
    FOR EACH ROW WHEN (OLD.sku IS DISTINCT FROM NEW.sku)
    EXECUTE FUNCTION flashgate_fixed_column('sku');

CREATE TRIGGER orders_permanent BEFORE DELETE ON orders
    FOR EACH ROW EXECUTE FUNCTION flashgate_permanent_rows();
CREATE TRIGGER orders_permanent_truncate BEFORE TRUNCATE ON orders
    FOR EACH STATEMENT EXECUTE FUNCTION flashgate_permanent_rows();
CREATE TRIGGER orders_fixed_key BEFORE UPDATE OF order_id ON orders
    FOR EACH ROW WHEN (OLD.order_id IS DISTINCT FROM NEW.order_id)
    EXECUTE FUNCTION flashgate_fixed_column('order_id');
CREATE TRIGGER orders_fixed_sku BEFORE UPDATE OF sku ON orders
    FOR EACH ROW WHEN (OLD.sku IS DISTINCT FROM NEW.sku)
    EXECUTE FUNCTION flashgate_fixed_column('sku');

CREATE TRIGGER user_units_fixed_sku BEFORE UPDATE OF sku ON user_units
    FOR EACH ROW WHEN (OLD.sku IS DISTINCT FROM NEW.sku)
    EXECUTE FUNCTION flashgate_fixed_column('sku');

CREATE TRIGGER idempotency_records_fixed_order BEFORE UPDATE OF order_id ON idempotency_records
    FOR EACH ROW WHEN (OLD.order_id IS DISTINCT FROM NEW.order_id)
    EXECUTE FUNCTION flashgate_fixed_column('order_id');

-- Every SKU the statement's new rows name exists.
CREATE FUNCTION flashgate_new_rows_name_skus() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    missing text;
BEGIN
    SELECT n.sku INTO missing FROM new_rows n
    WHERE NOT EXISTS (SELECT 1 FROM skus s WHERE s.sku = n.sku)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'insert on table % violates the reference to skus', TG_TABLE_NAME
            USING ERRCODE = 'foreign_key_violation',
                  DETAIL = format('Key (sku)=(%s) is not present in table "skus".', missing);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER orders_sku_exists AFTER INSERT ON orders
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION flashgate_new_rows_name_skus();
CREATE TRIGGER user_units_sku_exists AFTER INSERT ON user_units
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION flashgate_new_rows_name_skus();

-- Every order the statement's new stored answers name exists.
CREATE FUNCTION flashgate_new_records_name_orders() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    missing uuid;
BEGIN
    SELECT n.order_id INTO missing FROM new_rows n
    WHERE n.order_id IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.order_id = n.order_id)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'insert on table % violates the reference to orders', TG_TABLE_NAME
            USING ERRCODE = 'foreign_key_violation',
                  DETAIL = format('Key (order_id)=(%s) is not present in table "orders".', missing);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER idempotency_records_order_exists AFTER INSERT ON idempotency_records
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION flashgate_new_records_name_orders();
