//! Unit tests of the signature schemes: v1 and v2 match an independently computed HMAC, round
//! trip and refuse any change, the header format is strict, v1 is tried against every key.

use super::*;

const SECRET: &[u8] = b"edge-secret";

fn kid(s: &str) -> KeyId {
    KeyId::parse(s).expect("kid")
}

fn ring(keys: &[(&str, &[u8])]) -> SecretRing {
    SecretRing::new(keys.iter().map(|(k, s)| (kid(k), s.to_vec())).collect()).expect("ring")
}

fn verifier(ring: &SecretRing) -> Verifier<'_> {
    Verifier {
        ring,
        accept_v1: true,
    }
}

fn parts(body: &[u8]) -> SignedParts<'_> {
    SignedParts {
        method: "POST",
        path: "/v1/purchases",
        user: "alice",
        idempotency_key: "k1",
        body,
    }
}

#[test]
fn v1_matches_an_independently_computed_hmac() {
    // Expected value computed with: printf '%s' "1700000000.POST./v1/purchases.alice.k1.$(printf '%s' '{}' | sha256sum | cut -d' ' -f1)" | openssl dgst -sha256 -hmac edge-secret
    let header = sign_v1(SECRET, 1_700_000_000, &parts(b"{}"));
    assert_eq!(
        header,
        "t=1700000000,v1=ccbd250544e37ed66fe0d5361b945f417481980eff64cf002da5031904d98237"
    );
}

#[test]
fn v2_matches_an_independently_computed_hmac() {
    // B=$(printf '%s' '{}' | sha256sum | cut -d' ' -f1)
    // printf '%s' "22:flashgate-signature-v2,10:1700000000,2:k1,4:POST,13:/v1/purchases,5:alice,2:k1,64:$B," \
    //   | openssl dgst -sha256 -hmac edge-secret
    let body_hash = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";
    assert_eq!(
        String::from_utf8(canonical_v2(1_700_000_000, &kid("k1"), &parts(b"{}"))).ok(),
        Some(format!(
            "22:flashgate-signature-v2,10:1700000000,2:k1,4:POST,13:/v1/purchases,5:alice,2:k1,64:{body_hash},"
        ))
    );
    let header = sign_v2(&kid("k1"), SECRET, 1_700_000_000, &parts(b"{}"));
    assert_eq!(
        header,
        "t=1700000000,kid=k1,v2=14ac46bdb6f43b9a9f8a71d8525279b8f6b6ead1b7182a8c991799df745d6487"
    );
    // The edge's `sign` is v2 with the ring's current key.
    let r = ring(&[("k1", SECRET), ("k0", b"old")]);
    assert_eq!(sign(&r, 1_700_000_000, &parts(b"{}")), header);
}

#[test]
fn v2_round_trips_and_rejects_any_change() {
    let body = br#"{"sku":"A","qty":1}"#;
    let r = ring(&[("k2", SECRET), ("k1", b"old")]);
    let h = sign(&r, 1000, &parts(body));
    let ok = Ok(Verified {
        version: Version::V2,
        kid: kid("k2"),
    });
    assert_eq!(verifier(&r).verify(Some(&h), 1000, &parts(body)), ok);
    assert_eq!(verifier(&r).verify(Some(&h), 1300, &parts(body)), ok);
    assert_eq!(
        verifier(&r).verify(Some(&h), 1301, &parts(body)),
        Err(SignatureError::Expired)
    );
    assert_eq!(
        verifier(&r).verify(Some(&h), 699, &parts(body)),
        Err(SignatureError::Expired)
    );
    // The previous key still verifies what it signed.
    let old = sign_v2(&kid("k1"), b"old", 1000, &parts(body));
    assert_eq!(
        verifier(&r).verify(Some(&old), 1000, &parts(body)),
        Ok(Verified {
            version: Version::V2,
            kid: kid("k1"),
        })
    );
    // A removed key is unknown; a key id with the wrong secret, or another key's id, fails.
    let only_new = ring(&[("k2", SECRET)]);
    assert_eq!(
        verifier(&only_new).verify(Some(&old), 1000, &parts(body)),
        Err(SignatureError::UnknownKey)
    );
    let wrong_secret = sign_v2(&kid("k2"), b"old", 1000, &parts(body));
    assert_eq!(
        verifier(&r).verify(Some(&wrong_secret), 1000, &parts(body)),
        Err(SignatureError::Mismatch)
    );
    let relabelled = h.replacen("kid=k2", "kid=k1", 1);
    assert_eq!(
        verifier(&r).verify(Some(&relabelled), 1000, &parts(body)),
        Err(SignatureError::Mismatch)
    );
    // The kid is signed: the same secret under another id does not verify either.
    let twins = ring(&[("k2", SECRET), ("k9", SECRET)]);
    assert_eq!(
        verifier(&twins).verify(Some(&h.replacen("kid=k2", "kid=k9", 1)), 1000, &parts(body)),
        Err(SignatureError::Mismatch)
    );
    let tampered = [
        SignedParts {
            body: br#"{"sku":"A","qty":2}"#,
            ..parts(body)
        },
        SignedParts {
            user: "bob",
            ..parts(body)
        },
        SignedParts {
            path: "/v1/purchase",
            ..parts(body)
        },
        SignedParts {
            method: "PUT",
            ..parts(body)
        },
        SignedParts {
            idempotency_key: "k2",
            ..parts(body)
        },
    ];
    for p in tampered {
        assert_eq!(
            verifier(&r).verify(Some(&h), 1000, &p),
            Err(SignatureError::Mismatch),
            "{p:?}"
        );
    }
    let other_t = h.replacen("t=1000", "t=1001", 1);
    assert_eq!(
        verifier(&r).verify(Some(&other_t), 1000, &parts(body)),
        Err(SignatureError::Mismatch)
    );
    assert_eq!(
        verifier(&r).verify(None, 1000, &parts(body)),
        Err(SignatureError::Missing)
    );
}

#[test]
fn v1_is_verified_against_every_key_unless_turned_off() {
    let body = br#"{"sku":"A","qty":1}"#;
    let r = ring(&[("k2", b"new"), ("k1", SECRET)]);
    let h = sign_v1(SECRET, 1000, &parts(body));
    assert_eq!(
        verifier(&r).verify(Some(&h), 1000, &parts(body)),
        Ok(Verified {
            version: Version::V1,
            kid: kid("k1"),
        })
    );
    assert_eq!(
        verifier(&ring(&[("k2", b"new")])).verify(Some(&h), 1000, &parts(body)),
        Err(SignatureError::Mismatch)
    );
    let strict = Verifier {
        ring: &r,
        accept_v1: false,
    };
    assert_eq!(
        strict.verify(Some(&h), 1000, &parts(body)),
        Err(SignatureError::V1NotAccepted)
    );
    let v2 = sign(&r, 1000, &parts(body));
    assert!(strict.verify(Some(&v2), 1000, &parts(body)).is_ok());
}

#[test]
fn header_format_is_strict() {
    let mac = "a".repeat(64);
    assert_eq!(
        SignatureHeader::parse(&format!("t=1,v1={mac}")).map(|h| h.scheme),
        Ok(Scheme::V1)
    );
    assert_eq!(
        SignatureHeader::parse(&format!("t=1,kid=k-1.a_b,v2={mac}")).map(|h| h.scheme),
        Ok(Scheme::V2(kid("k-1.a_b")))
    );
    for bad in [
        String::new(),
        format!("t=1,v1={}", "A".repeat(64)),
        format!("t=1,v1={}", "a".repeat(63)),
        format!("t=-1,v1={mac}"),
        format!("t=,v1={mac}"),
        format!("v1={mac},t=1"),
        format!("t=1, v1={mac}"),
        format!("t=1,v1={mac},x=2"),
        format!("t=9999999999999999999999,v1={mac}"),
        format!("t=1,kid=k1,v1={mac}"),
        format!("t=1,v2={mac}"),
        format!("t=1,kid=,v2={mac}"),
        format!("t=1,kid=a b,v2={mac}"),
        format!("t=1,kid={},v2={mac}", "k".repeat(33)),
        format!("t=1,v2={mac},kid=k1"),
        format!("kid=k1,t=1,v2={mac}"),
        format!("t=1,kid=k1,v2={mac},"),
        format!("t=1,kid=k1,kid=k1,v2={mac}"),
    ] {
        assert!(SignatureHeader::parse(&bad).is_err(), "{bad}");
    }
}

#[test]
fn v1_is_ambiguous_and_v2_is_not() {
    // The reason v2 exists: v1 joins with `.`, which user ids and keys may contain.
    let a = SignedParts {
        user: "a",
        idempotency_key: "b.c",
        ..parts(b"{}")
    };
    let b = SignedParts {
        user: "a.b",
        idempotency_key: "c",
        ..parts(b"{}")
    };
    assert_eq!(canonical_v1(1, &a), canonical_v1(1, &b));
    assert_ne!(
        canonical_v2(1, &kid("k"), &a),
        canonical_v2(1, &kid("k"), &b)
    );
}
