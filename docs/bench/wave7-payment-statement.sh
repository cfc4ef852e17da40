#!/usr/bin/env bash
# Wave 7 (docs/bench/diary.md, "Next levers, measured in Postgres alone"): the payment statement
# of `store/payments.rs::pay_live_holds` run 300 times with 50 payments each from a PL/pgSQL loop,
# on a fresh copy of a migrated database, as landed and in two variants. Exploratory: it measures
# Postgres alone, not the origin. Run from the repository root with the machine's Postgres:
#   bash docs/bench/wave7-payment-statement.sh
set -euo pipefail
P="psql -h 127.0.0.1 -U postgres -q -v ON_ERROR_STOP=1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

$P -c "DROP DATABASE IF EXISTS wave7_base" -c "CREATE DATABASE wave7_base"
for f in origin/migrations/*.sql; do $P -d wave7_base -f "$f"; done
$P -d wave7_base -c "
INSERT INTO skus (sku, name, price_cents, initial_stock, stock, max_per_user, hold_secs, units_out)
VALUES ('hot', 'Hot', 100, 200000, 80000, 10, 5, 120000);
INSERT INTO orders (order_id, sku, generation, user_id, qty, idempotency_key, status)
SELECT gen_random_uuid(), 'hot', 1, 'v' || i, 1, 'k' || i, 'confirmed' FROM generate_series(1, 100000) i;"

# The statement as landed (the query text of pay_live_holds), and without its order_payments insert.
sed -n '/r#"WITH candidates AS (/,/FROM paid"#,/p' origin/src/store/payments.rs \
  | sed -e 's/^.*r#"//' -e 's/"#,$//' -e 's/ AS "[a-z_]*!"//g' > "$work/landed.sql"
sed -e '/recorded AS (/,/^           ),$/d' "$work/landed.sql" > "$work/norec.sql"

run() { # run <statement file> <sql before the data> <label>
  local stmt
  stmt=$(cat "$1")
  $P -c "DROP DATABASE IF EXISTS wave7_run" -c "CREATE DATABASE wave7_run TEMPLATE wave7_base"
  [ -n "$2" ] && $P -d wave7_run -c "$2"
  $P -d wave7_run -c "
INSERT INTO orders (order_id, sku, generation, user_id, qty, idempotency_key, status, expires_at)
SELECT gen_random_uuid(), 'hot', 1, 'h' || i, 1, 'hk' || i, 'held', now() + interval '1 hour'
FROM generate_series(1, 20000) i;
CREATE TABLE helper AS SELECT row_number() OVER () AS seq, order_id FROM orders WHERE status = 'held';
CREATE INDEX ON helper (seq);
INSERT INTO payment_events (event_id, type, order_id, result)
SELECT 'evt_' || gen_random_uuid(), 'payment_intent.succeeded', gen_random_uuid(), 'applied'
FROM generate_series(1, 20000);
ANALYZE;
CHECKPOINT;"
  $P -d wave7_run 2>&1 <<EOF | grep -o "ms per payment.*" | sed "s/^/$3: /"
DO \$do\$
DECLARE t0 timestamptz; ids uuid[]; evs text[]; tys text[]; stmt text := \$s\$ $stmt \$s\$;
BEGIN
  t0 := clock_timestamp();
  FOR i IN 0..299 LOOP
    SELECT array_agg(order_id) INTO ids FROM helper WHERE seq > i * 50 AND seq <= i * 50 + 50;
    SELECT array_agg('evt_' || gen_random_uuid()) INTO evs FROM generate_series(1, 50);
    tys := array_fill('payment_intent.succeeded'::text, ARRAY[50]);
    EXECUTE stmt USING evs, tys, ids;
  END LOOP;
  RAISE NOTICE 'ms per payment: %', round((extract(epoch FROM clock_timestamp() - t0) * 1000 / 15000)::numeric, 4);
END \$do\$;
EOF
  $P -d wave7_run -Atc "SELECT 'HOT updates of orders: ' || n_tup_hot_upd || ' of ' || n_tup_upd FROM pg_stat_user_tables WHERE relname = 'orders'"
}

hot="DROP INDEX orders_held_expires_idx; ALTER TABLE orders SET (fillfactor = 70);"
for round in 1 2 3; do
  run "$work/landed.sql" "" "as landed"
  run "$work/norec.sql" "" "without the order_payments insert"
  run "$work/norec.sql" "$hot" "without it, HOT-able orders"
done
$P -c "DROP DATABASE wave7_run" -c "DROP DATABASE wave7_base"
