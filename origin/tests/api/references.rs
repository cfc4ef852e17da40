//! The books' references (migrations `20261201000005_set_based_references.sql` and
//! `20261202000001_payment_writes.sql`): an order, a per-user counter, a stored answer or a
//! payment record that names a SKU or an order that does not exist is refused (23503, checked
//! once per statement), and the rows referenced — SKUs and orders — are permanent: never
//! deleted, their keys never changed (23001). Plain SQL against the migrated database, after a
//! real sale through the app.

use sqlx::PgPool;
use uuid::Uuid;

use crate::helpers::spawn_app;

/// The SQLSTATE `sql` fails with (`None`: it succeeded).
async fn sqlstate(pool: &PgPool, sql: &str) -> Option<String> {
    match sqlx::query(sql).execute(pool).await {
        Ok(_) => None,
        Err(sqlx::Error::Database(e)) => e.code().map(|c| c.into_owned()),
        Err(e) => panic!("{sql}: {e}"),
    }
}

#[sqlx::test(migrations = "./migrations")]
async fn rows_naming_a_missing_sku_or_order_are_refused_and_referenced_rows_are_permanent(
    pool: PgPool,
) {
    let app = spawn_app(pool.clone()).await;
    app.put_sku("REF-A", 10, 5).await;
    app.put_sku("REF-B", 10, 5).await;
    // The batch statement writes orders, counters and stored answers that reference each other.
    assert_eq!(app.buy("alice", "k1", "REF-A", 2).await.status(), 201);
    assert_eq!(app.buy("bob", "k1", "REF-A", 1).await.status(), 201);
    let order: Uuid = sqlx::query_scalar("SELECT order_id FROM orders WHERE user_id = 'alice'")
        .fetch_one(&pool)
        .await
        .expect("alice's order");
    let missing = Uuid::now_v7();
    // Alice's order paid through a payment record that names it (allowed: the order exists).
    assert_eq!(
        sqlstate(
            &pool,
            &format!("INSERT INTO order_payments (order_id, source) VALUES ('{order}', 'api')")
        )
        .await,
        None
    );

    let refused = [
        format!(
            "INSERT INTO orders (order_id, sku, generation, user_id, qty, idempotency_key, fence, status)
             VALUES ('{missing}', 'NO-SUCH-SKU', 1, 'carol', 1, 'k1', 0, 'confirmed')"
        ),
        // One bad row among good ones: the whole statement is refused.
        "INSERT INTO user_units (sku, user_id, units) VALUES ('REF-B', 'carol', 1), ('NO-SUCH-SKU', 'dave', 1)".into(),
        format!(
            "INSERT INTO idempotency_records (user_id, idempotency_key, sku, qty, status, body, order_id)
             VALUES ('carol', 'k9', 'REF-A', 1, 201, '{{}}', '{missing}')"
        ),
        // A payment record of a missing order, beside one of a real order.
        format!(
            "INSERT INTO order_payments (order_id, source)
             VALUES ((SELECT order_id FROM orders WHERE user_id = 'bob'), 'api'), ('{missing}', 'api')"
        ),
    ];
    for sql in &refused {
        assert_eq!(
            sqlstate(&pool, sql).await.as_deref(),
            Some("23503"),
            "{sql}"
        );
    }

    let permanent = [
        "DELETE FROM skus WHERE sku = 'REF-B'".to_owned(),
        "TRUNCATE skus CASCADE".into(),
        "UPDATE skus SET sku = 'REF-C' WHERE sku = 'REF-B'".into(),
        format!("DELETE FROM orders WHERE order_id = '{order}'"),
        "TRUNCATE orders CASCADE".into(),
        format!("UPDATE orders SET order_id = '{missing}' WHERE order_id = '{order}'"),
        format!("UPDATE orders SET sku = 'REF-B' WHERE order_id = '{order}'"),
        "UPDATE user_units SET sku = 'REF-B' WHERE user_id = 'alice'".into(),
        "UPDATE idempotency_records SET order_id = (SELECT order_id FROM orders WHERE user_id = 'bob') WHERE user_id = 'alice'".into(),
        // A payment record stays with its order, even when moved to another real one.
        "UPDATE order_payments SET order_id = (SELECT order_id FROM orders WHERE user_id = 'bob')".into(),
    ];
    for sql in &permanent {
        assert_eq!(
            sqlstate(&pool, sql).await.as_deref(),
            Some("23001"),
            "{sql}"
        );
    }

    // Nothing changed: the sale's rows are all there, as the app wrote them.
    let counts: (i64, i64, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM skus), (SELECT COUNT(*) FROM orders),
                (SELECT COUNT(*) FROM user_units), (SELECT COUNT(*) FROM idempotency_records),
                (SELECT COUNT(*) FROM order_payments)",
    )
    .fetch_one(&pool)
    .await
    .expect("counts");
    assert_eq!(counts, (2, 2, 2, 2, 1));
    // And what the rules allow still works: a new sale's rows, an unrelated update.
    assert_eq!(app.buy("carol", "k1", "REF-B", 1).await.status(), 201);
    assert_eq!(
        sqlstate(
            &pool,
            "UPDATE skus SET name = 'renamed' WHERE sku = 'REF-B'"
        )
        .await,
        None
    );
}
