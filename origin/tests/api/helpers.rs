//! `spawn_app` and a client that speaks the contract (signing like the edge does).

use std::collections::HashMap;
use std::sync::Arc;

use origin::{Application, Settings};
use reqwest::{Response, StatusCode};
use shared::KeyId;
use shared::signing::{self, SignedParts};
use sqlx::PgPool;

pub(crate) const EDGE_SECRET: &str = "test-edge-secret-0123456789";
pub(crate) const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

pub(crate) struct TestApp {
    pub(crate) base: String,
    pub(crate) client: reqwest::Client,
    pub(crate) pool: PgPool,
    /// The app's metrics, read directly (a test may hold every connection slot).
    pub(crate) metrics: Arc<origin::metrics::Metrics>,
    _shutdown: tokio::sync::oneshot::Sender<()>,
}

/// Settings for a test app; `overrides` replace or add variables.
pub(crate) fn settings(db_name: &str, overrides: &[(&str, &str)]) -> Settings {
    let mut env: HashMap<String, String> = [
        ("DATABASE_URL", "postgres://unused-in-tests"),
        ("REDIS_URLS", "redis://127.0.0.1:6379"),
        ("LISTEN_ADDR", "127.0.0.1:0"),
        ("EDGE_SHARED_SECRET", EDGE_SECRET),
        ("ADMIN_TOKEN", ADMIN_TOKEN),
        ("RUN_MIGRATIONS", "false"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    env.insert("REDIS_KEY_PREFIX".into(), format!("test:{db_name}"));
    for (k, v) in overrides {
        env.insert((*k).to_owned(), (*v).to_owned());
    }
    Settings::from_lookup(|k| env.get(k).cloned()).expect("valid test settings")
}

pub(crate) async fn spawn_app(pool: PgPool) -> TestApp {
    spawn_app_with(pool, &[]).await
}

pub(crate) async fn spawn_app_with(pool: PgPool, overrides: &[(&str, &str)]) -> TestApp {
    let db: (String,) = sqlx::query_as("SELECT current_database()")
        .fetch_one(&pool)
        .await
        .expect("db name");
    let app = Application::build_with_pool(settings(&db.0, overrides), pool.clone())
        .await
        .expect("app builds");
    let base = format!("http://127.0.0.1:{}", app.port());
    let metrics = app.state().metrics.clone();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(app.run_until(async {
        let _ = rx.await;
    }));
    let client = reqwest::Client::new();
    wait_ready(&client, &base).await;
    TestApp {
        base,
        client,
        pool,
        metrics,
        _shutdown: tx,
    }
}

/// Waits for `/readyz` (a Redis node seen for the first time keeps out of the lock quorum for
/// one lock TTL — the Redlock restart guard — so a fresh CI machine starts with a short wait).
pub(crate) async fn wait_ready(client: &reqwest::Client, base: &str) {
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(30) {
        if client
            .get(format!("{base}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("origin at {base} not ready within 30 s");
}

/// Reads a metric's value from the text exposition (0 if it is not exported).
pub(crate) fn metric(text: &str, name: &str) -> f64 {
    crate::probes::metric_value(text, name).unwrap_or(0.0)
}

/// Waits for every task; their outputs, in order.
pub(crate) async fn joined<T>(
    tasks: impl IntoIterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<T> {
    futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(|r| r.expect("task"))
        .collect()
}

pub(crate) fn now() -> i64 {
    shared::Timestamp::now().unix_secs()
}

/// A purchase request as the edge would send it, with knobs to break each part.
#[derive(Clone)]
pub(crate) struct Purchase {
    pub(crate) user: Option<String>,
    pub(crate) key: Option<String>,
    pub(crate) body: Vec<u8>,
    pub(crate) secret: String,
    /// `Some(kid)`: a v2 signature naming `kid` (what the edge sends; `default` is the key id of
    /// the single-secret `EDGE_SHARED_SECRET`); `None`: a v1 signature (an old edge).
    pub(crate) kid: Option<String>,
    pub(crate) t: i64,
    /// Sign these instead of the real values (tampering).
    pub(crate) signed_user: Option<String>,
    pub(crate) signed_body: Option<Vec<u8>>,
    pub(crate) signature: Option<String>,
}

impl Purchase {
    pub(crate) fn new(user: &str, key: &str, sku: &str, qty: i64) -> Self {
        Self {
            user: Some(user.to_owned()),
            key: Some(key.to_owned()),
            body: format!(r#"{{"sku":"{sku}","qty":{qty}}}"#).into_bytes(),
            secret: EDGE_SECRET.to_owned(),
            kid: Some(shared::secrets::DEFAULT_KEY_ID.to_owned()),
            t: now(),
            signed_user: None,
            signed_body: None,
            signature: None,
        }
    }

    pub(crate) fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    pub(crate) fn header_value(&self) -> String {
        if let Some(sig) = &self.signature {
            return sig.clone();
        }
        let key = self.key.as_deref().map(|k| {
            shared::IdempotencyKey::parse(k)
                .map(|k| k.as_str().to_owned())
                .unwrap_or(k.to_owned())
        });
        let parts = SignedParts {
            method: "POST",
            path: "/v1/purchases",
            user: self
                .signed_user
                .as_deref()
                .or(self.user.as_deref())
                .unwrap_or(""),
            idempotency_key: key.as_deref().unwrap_or(""),
            body: self.signed_body.as_deref().unwrap_or(&self.body),
        };
        match self.kid.as_deref().map(KeyId::parse) {
            None => signing::sign_v1(self.secret.as_bytes(), self.t, &parts),
            Some(Some(kid)) => signing::sign_v2(&kid, self.secret.as_bytes(), self.t, &parts),
            Some(None) => panic!("invalid test key id {:?}", self.kid),
        }
    }

    /// Signs with `secret` under `kid` (v2).
    pub(crate) fn signed_v2(mut self, kid: &str, secret: &str) -> Self {
        self.kid = Some(kid.to_owned());
        self.secret = secret.to_owned();
        self
    }

    /// Signs with `secret` as an old edge does (v1, no key id).
    pub(crate) fn signed_v1(mut self, secret: &str) -> Self {
        self.kid = None;
        self.secret = secret.to_owned();
        self
    }
}

impl TestApp {
    pub(crate) async fn put_sku(&self, sku: &str, stock: i64, max_per_user: i64) -> Response {
        self.put_sku_raw(sku, Some(ADMIN_TOKEN), format!(r#"{{"name":"Item {sku}","price_cents":1999,"stock":{stock},"max_per_user":{max_per_user}}}"#))
            .await
    }

    pub(crate) async fn put_sku_raw(
        &self,
        sku: &str,
        token: Option<&str>,
        body: String,
    ) -> Response {
        let mut req = self
            .client
            .put(format!("{}/v1/admin/skus/{sku}", self.base))
            .body(body);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        req.send().await.expect("request")
    }

    pub(crate) async fn get_sku(&self, sku: &str) -> Response {
        self.client
            .get(format!("{}/v1/skus/{sku}", self.base))
            .send()
            .await
            .expect("request")
    }

    pub(crate) async fn stock(&self, sku: &str) -> i64 {
        let v: serde_json::Value = self.get_sku(sku).await.json().await.expect("json");
        v["stock"].as_i64().expect("stock")
    }

    pub(crate) async fn send(&self, p: &Purchase) -> Response {
        let mut req = self
            .client
            .post(format!("{}/v1/purchases", self.base))
            .body(p.body.clone());
        if let Some(u) = &p.user {
            req = req.header("flashgate-user", u);
        }
        if let Some(k) = &p.key {
            req = req.header("idempotency-key", k);
        }
        req = req.header("flashgate-signature", p.header_value());
        req.send().await.expect("request")
    }

    pub(crate) async fn buy(&self, user: &str, key: &str, sku: &str, qty: i64) -> Response {
        self.send(&Purchase::new(user, key, sku, qty)).await
    }

    pub(crate) async fn metrics(&self) -> String {
        self.client
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .expect("request")
            .text()
            .await
            .expect("text")
    }

    pub(crate) async fn order_count(&self) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM orders")
            .fetch_one(&self.pool)
            .await
            .expect("count")
    }
}

/// Asserts a problem+json answer with `status` and `code`; returns the body.
pub(crate) async fn assert_problem(res: Response, status: u16, code: &str) -> serde_json::Value {
    assert_eq!(
        res.status(),
        StatusCode::from_u16(status).expect("status"),
        "expected {status} {code}"
    );
    assert_eq!(res.headers()["content-type"], "application/problem+json");
    let body: serde_json::Value = res.json().await.expect("json body");
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["status"], status);
    assert!(
        body["type"].is_string() && body["title"].is_string() && body["detail"].is_string(),
        "{body}"
    );
    body
}

/// How an order request is authenticated.
#[derive(Clone, Copy)]
pub(crate) enum Caller<'a> {
    /// The shop backend's admin bearer token.
    Shop,
    /// A shopper's request as the edge forwards it: signed (v2), `Flashgate-User: user`.
    Shopper(&'a str),
    /// Nothing.
    Anonymous,
}

impl TestApp {
    /// Creates (or replaces) a sale whose purchases are holds of `hold_secs`.
    pub(crate) async fn put_sku_holds(
        &self,
        sku: &str,
        stock: i64,
        max_per_user: i64,
        hold_secs: i64,
    ) -> Response {
        self.put_sku_raw(
            sku,
            Some(ADMIN_TOKEN),
            format!(
                r#"{{"name":"Item {sku}","price_cents":1999,"stock":{stock},"max_per_user":{max_per_user},"hold_secs":{hold_secs}}}"#
            ),
        )
        .await
    }

    /// `GET /v1/orders/{id}` as `caller`.
    pub(crate) async fn order(&self, id: &str, caller: Caller<'_>) -> Response {
        self.order_request("GET", &format!("/v1/orders/{id}"), "", caller)
            .await
    }

    /// `POST /v1/orders/{id}/{action}` with `body`, as `caller`.
    pub(crate) async fn order_action(
        &self,
        id: &str,
        action: &str,
        body: &str,
        caller: Caller<'_>,
    ) -> Response {
        self.order_request("POST", &format!("/v1/orders/{id}/{action}"), body, caller)
            .await
    }

    async fn order_request(
        &self,
        method: &str,
        path: &str,
        body: &str,
        caller: Caller<'_>,
    ) -> Response {
        let url = format!("{}{path}", self.base);
        let mut req = match method {
            "GET" => self.client.get(url),
            _ => self.client.post(url).body(body.to_owned()),
        };
        match caller {
            Caller::Shop => req = req.bearer_auth(ADMIN_TOKEN),
            Caller::Shopper(user) => {
                let parts = SignedParts {
                    method,
                    path,
                    user,
                    idempotency_key: "",
                    body: body.as_bytes(),
                };
                let kid = KeyId::parse(shared::secrets::DEFAULT_KEY_ID).expect("kid");
                req = req.header("flashgate-user", user).header(
                    "flashgate-signature",
                    signing::sign_v2(&kid, EDGE_SECRET.as_bytes(), now(), &parts),
                );
            }
            Caller::Anonymous => {}
        }
        req.send().await.expect("request")
    }

    /// The order's status as stored.
    pub(crate) async fn status_of(&self, id: &str) -> String {
        sqlx::query_scalar("SELECT status FROM orders WHERE order_id = $1::uuid")
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .expect("order")
    }

    /// The SKU's books: (initial_stock, stock, units_out, written_off).
    pub(crate) async fn books(&self, sku: &str) -> (i64, i64, i64, i64) {
        sqlx::query_as(
            "SELECT initial_stock, stock, units_out, written_off FROM skus WHERE sku = $1",
        )
        .bind(sku)
        .fetch_one(&self.pool)
        .await
        .expect("books")
    }
}

/// Runs `origin reconcile` on the test's database: (exit code, stdout).
pub(crate) async fn reconcile(pool: &PgPool) -> (i32, String) {
    let (_, url) = crate::processes::database_of(pool).await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_origin"))
        .arg("reconcile")
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "error")
        .output()
        .expect("run origin reconcile");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Asserts a 201 and returns its body.
pub(crate) async fn created(res: Response) -> serde_json::Value {
    let status = res.status();
    let body = res.text().await.expect("body");
    assert_eq!(status, 201, "{body}");
    serde_json::from_str(&body).expect("json")
}

/// Asserts a 200 order view and returns it.
pub(crate) async fn order_view(res: Response) -> serde_json::Value {
    let status = res.status();
    let body = res.text().await.expect("body");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("json")
}

impl TestApp {
    /// `PUT /v1/admin/skus/{sku}` with the admin token and a raw JSON body (a sale, or only
    /// schedule / waiting room fields).
    pub(crate) async fn put_json(&self, sku: &str, body: serde_json::Value) -> Response {
        self.put_sku_raw(sku, Some(ADMIN_TOKEN), body.to_string())
            .await
    }

    /// `GET /v1/skus/{sku}`, which must answer 200: its view.
    pub(crate) async fn view(&self, sku: &str) -> serde_json::Value {
        let res = self.get_sku(sku).await;
        assert_eq!(res.status(), 200);
        res.json().await.expect("json")
    }
}

/// A sale's admin body (`stock` units, at most 5 per shopper) with `extra` fields merged in.
pub(crate) fn sale(stock: i64, extra: serde_json::Value) -> serde_json::Value {
    let mut body =
        serde_json::json!({"name": "Shoe", "price_cents": 1999, "stock": stock, "max_per_user": 5});
    if let (Some(body), serde_json::Value::Object(extra)) = (body.as_object_mut(), extra) {
        body.extend(extra);
    }
    body
}
