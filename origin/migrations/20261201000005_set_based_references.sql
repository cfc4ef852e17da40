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

-- Every row the statement inserted references an existing row: TG_ARGV[0] is the column, and
-- TG_ARGV[1] the referenced table, whose key has the same name (a NULL references nothing).
CREATE FUNCTION flashgate_new_rows_reference() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    missing text;
BEGIN
    EXECUTE format(
        'SELECT n.%1$I::text FROM new_rows n
         WHERE n.%1$I IS NOT NULL AND NOT EXISTS (SELECT 1 FROM %2$I r WHERE r.%1$I = n.%1$I)
         LIMIT 1',
        TG_ARGV[0], TG_ARGV[1])
    INTO missing;
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'insert on table % violates the reference to %', TG_TABLE_NAME, TG_ARGV[1]
            USING ERRCODE = 'foreign_key_violation',
                  DETAIL = format('Key (%s)=(%s) is not present in table "%s".',
                                  TG_ARGV[0], missing, TG_ARGV[1]);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER orders_sku_exists AFTER INSERT ON orders
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION flashgate_new_rows_reference('sku', 'skus');
CREATE TRIGGER user_units_sku_exists AFTER INSERT ON user_units
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION flashgate_new_rows_reference('sku', 'skus');
CREATE TRIGGER idempotency_records_order_exists AFTER INSERT ON idempotency_records
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION flashgate_new_rows_reference('order_id', 'orders');
