//! Unit tests of the forwarded request: it verifies with the origin's rules.

use super::*;
use crate::purchase::{Incoming, validate};
use serde_json::json;
use shared::KeyId;
use shared::signing::{Verified, Verifier, Version};

#[test]
fn the_forwarded_request_verifies_with_the_origin_rules() {
    let token = crate::jwt::sign_hs256(&json!({"sub": "alice", "exp": 1_700_003_600}), b"s");
    let auth = format!("Bearer {token}");
    let incoming = Incoming {
        credential: &crate::session::Credential::Header(&auth),
        idempotency_key: Some("\"k\\\"1\""),
        body: br#"{ "qty":1, "sku":"A" }"#,
    };
    let session = SecretRing::single(b"s".to_vec());
    let rules = crate::jwt::TokenRules::default();
    let p = validate(incoming, &session, &rules, 1_700_000_000).expect("valid");
    // The edge mid-rotation: new key first (current), old key still held.
    let edge_keys = SecretRing::parse("k2:edge-new,k1:edge-old", 1).expect("ring");
    let rid = RequestId::parse("shop-trace-1").expect("id");
    let shopper_trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let trace = TraceContext::choose(Some(shopper_trace), Some("shop=1"), || [1, 2, 3]);
    let headers = origin_headers(&edge_keys, 1_700_000_000, &p, &rid, &trace);
    let get = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| *k == n)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(get(IDEMPOTENCY_KEY), Some("\"k\\\"1\""));
    assert_eq!(get(USER), Some("alice"));
    assert_eq!(get(REQUEST_ID), Some("shop-trace-1"));
    // The shopper's trace continues at the origin, unsigned (the signature is v2 as before).
    assert_eq!(get(TRACEPARENT), Some(shopper_trace));
    assert_eq!(get(TRACESTATE), Some("shop=1"));
    // Signed v2 with the current key, named.
    let signature = get(SIGNATURE).unwrap_or_default();
    assert!(
        signature.starts_with("t=1700000000,kid=k2,v2="),
        "{signature}"
    );
    // What the origin does: decode the key, hash the body it received, verify.
    let parts = SignedParts {
        method: "POST",
        path: PURCHASE_PATH,
        user: "alice",
        idempotency_key: "k\"1",
        body: p.body.as_bytes(),
    };
    let kid = |s: &str| KeyId::parse(s).expect("kid");
    let origin = |ring: &str| SecretRing::parse(ring, 1).expect("ring");
    for ring in ["k2:edge-new,k1:edge-old", "k2:edge-new", "k3:x,k2:edge-new"] {
        let origin = origin(ring);
        let verifier = Verifier {
            ring: &origin,
            accept_v1: false,
        };
        assert_eq!(
            verifier.verify(get(SIGNATURE), 1_700_000_100, &parts),
            Ok(Verified {
                version: Version::V2,
                kid: kid("k2"),
            }),
            "{ring}"
        );
    }
    // An origin that does not have the new key yet refuses it: the origins learn the new
    // key before the edge signs with it.
    let old_origin = origin("k1:edge-old");
    let verifier = Verifier {
        ring: &old_origin,
        accept_v1: true,
    };
    assert!(
        verifier
            .verify(get(SIGNATURE), 1_700_000_100, &parts)
            .is_err()
    );
}
