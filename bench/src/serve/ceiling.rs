//! `bench serve-ceiling`: the HTTP ceiling of a purchase on this machine — what the origin's
//! stack can answer at most when deciding a purchase costs nothing. `POST /v1/purchases` checks
//! the edge signature exactly as the origin does ([`super::edge`]) and answers a canned `201` of
//! the purchase shape; nothing is parsed beyond the headers, nothing is stored. The load
//! generator counts its first `--stock` 201s as the sale (`sale.rs`, `Books::Canned`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::{get, post};
use clap::Args;
use shared::SecretRing;

/// The canned answer: a `PurchaseResponse` (the origin's `201` body shape).
const CANNED: &str = r#"{"order_id":"00000000-0000-4000-8000-000000000000","sku":"CEILING","qty":1,"user":"ceiling","remaining":0}"#;

/// `bench serve-ceiling` options.
#[derive(Args, Debug, Clone)]
pub(crate) struct CeilingArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8090")]
    pub(crate) listen: SocketAddr,
    /// The edge's signing secret (key id `default`), as the origin's `EDGE_SHARED_SECRET`.
    #[arg(long, env = "EDGE_SHARED_SECRET", hide_env_values = true)]
    pub(crate) edge_secret: String,
}

/// Serves the ceiling until Ctrl-C.
pub(crate) async fn run(args: CeilingArgs) -> anyhow::Result<()> {
    let ring = SecretRing::from_config(None, Some(&args.edge_secret), 16)
        .map_err(|e| anyhow::anyhow!("--edge-secret: {e}"))?;
    super::serve(args.listen, router(ring)).await
}

pub(crate) fn router(ring: SecretRing) -> Router {
    Router::new()
        .route("/v1/purchases", post(purchase))
        .route("/healthz", get(super::ok))
        .route("/readyz", get(super::ok))
        .with_state(Arc::new(ring))
}

async fn purchase(
    State(ring): State<Arc<SecretRing>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match super::edge::verify(
        &headers,
        &ring,
        "/v1/purchases",
        &body,
        shared::Timestamp::now().unix_secs(),
    ) {
        Ok(_) => super::created(CANNED),
        Err(refused) => refused.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::signing::{self, SignedParts};

    #[tokio::test]
    async fn a_signed_purchase_gets_the_canned_201_and_a_forged_one_401() {
        let ring = SecretRing::single("bench-edge-secret-0123456789");
        let listener = super::super::bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let url = format!(
            "http://{}/v1/purchases",
            listener.local_addr().expect("addr")
        );
        let server = tokio::spawn(super::super::serve_on(listener, router(ring.clone())));
        let body = r#"{"sku":"A","qty":1}"#;
        let post = |ring: &SecretRing| {
            let parts = SignedParts {
                method: "POST",
                path: "/v1/purchases",
                user: "shopper-1",
                idempotency_key: "k-1",
                body: body.as_bytes(),
            };
            reqwest::Client::new()
                .post(&url)
                .header("flashgate-user", "shopper-1")
                .header("idempotency-key", "k-1")
                .header(
                    "flashgate-signature",
                    signing::sign(ring, shared::Timestamp::now().unix_secs(), &parts),
                )
                .body(body)
                .send()
        };
        let ok = post(&ring).await.expect("answer");
        assert_eq!(ok.status(), 201);
        assert_eq!(ok.text().await.expect("body"), CANNED);
        let forged = post(&SecretRing::single("another-secret-0123456789"))
            .await
            .expect("answer");
        assert_eq!(forged.status(), 401);
        let problem: serde_json::Value = forged.json().await.expect("problem+json");
        assert_eq!(problem["code"], "bad_signature");
        server.abort();
    }

    #[test]
    fn the_canned_answer_has_the_purchase_shape() {
        let parsed: shared::PurchaseResponse = serde_json::from_str(CANNED).expect("shape");
        assert_eq!((parsed.qty, parsed.remaining), (1, 0));
    }
}
