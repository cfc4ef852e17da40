//! What a test reads from outside a running origin, after the request path: the value of a
//! series in its `/metrics` text exposition, and the keys its Redis nodes hold. Shared by the
//! api suite and the process tests (`#[path]`), which read them the same way.
#![allow(dead_code)] // each test binary uses its own subset

/// The value of `series` (a metric name, with its labels if it has any) in a text exposition;
/// `None` if it is not exported.
pub(crate) fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// The text of `GET {base}/metrics`.
pub(crate) async fn scrape_metrics(client: &reqwest::Client, base: &str) -> String {
    client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text")
}

/// A connection to the Redis node at `url`.
pub(crate) async fn redis_connection(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// `DBSIZE` of the node behind `conn`.
pub(crate) async fn dbsize(conn: &mut redis::aio::MultiplexedConnection) -> i64 {
    redis::cmd("DBSIZE")
        .query_async(conn)
        .await
        .expect("DBSIZE")
}

/// `DBSIZE` of every node in `urls`, in order.
pub(crate) async fn dbsizes(urls: &[String]) -> Vec<i64> {
    let mut sizes = Vec::new();
    for url in urls {
        sizes.push(dbsize(&mut redis_connection(url).await).await);
    }
    sizes
}
