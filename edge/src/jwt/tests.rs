//! Unit tests of the session tokens: what verifies, what each rule refuses, key rotation and the
//! signing helpers.

use super::*;
use serde_json::json;

const SECRET: &[u8] = b"session-secret";
const NOW: i64 = 1_700_000_000;

fn token(claims: Value) -> String {
    sign_hs256(&claims, SECRET)
}

fn keys() -> SecretRing {
    SecretRing::single(SECRET.to_vec())
}

fn kid(s: &str) -> KeyId {
    KeyId::parse(s).expect("kid")
}

#[test]
fn the_kid_header_selects_the_session_key() {
    let ring = SecretRing::parse("s2:new-session-key,s1:old-session-key", 1).expect("ring");
    let claims = json!({"sub": "alice", "exp": NOW + 60});
    // Each key verifies the tokens that name it.
    for (k, secret) in [("s2", "new-session-key"), ("s1", "old-session-key")] {
        let t = sign_hs256_kid(&claims, &kid(k), secret.as_bytes());
        assert_eq!(
            verify_hs256(&t, &ring, &TokenRules::default(), NOW).map(|c| c.sub.to_string()),
            Ok("alice".to_owned()),
            "{k}"
        );
    }
    // A kid selects exactly its key: another configured key's secret does not verify.
    let crossed = sign_hs256_kid(&claims, &kid("s2"), b"old-session-key");
    assert_eq!(
        verify_hs256(&crossed, &ring, &TokenRules::default(), NOW),
        Err(TokenError::BadSignature)
    );
    // An unknown, retired or non-string kid is refused, even when the MAC is right.
    let unknown = sign_hs256_kid(&claims, &kid("s0"), b"new-session-key");
    assert_eq!(
        verify_hs256(&unknown, &ring, &TokenRules::default(), NOW),
        Err(TokenError::UnknownKey)
    );
    for bad_kid in [
        json!(2),
        json!(null),
        json!(["s2"]),
        json!("s 2"),
        json!(""),
    ] {
        let t = sign_with_header(
            &json!({"alg": "HS256", "kid": bad_kid}),
            &claims,
            b"new-session-key",
        );
        assert_eq!(
            verify_hs256(&t, &ring, &TokenRules::default(), NOW),
            Err(TokenError::UnknownKey),
            "{bad_kid}"
        );
    }
    // Tokens without kid (issued before key ids): any configured key.
    for secret in ["new-session-key", "old-session-key"] {
        let t = sign_hs256(&claims, secret.as_bytes());
        assert!(
            verify_hs256(&t, &ring, &TokenRules::default(), NOW).is_ok(),
            "{secret}"
        );
    }
    let retired = sign_hs256(&claims, b"older-session-key");
    assert_eq!(
        verify_hs256(&retired, &ring, &TokenRules::default(), NOW),
        Err(TokenError::BadSignature)
    );
    // Once the old key is removed, its tokens stop working, with or without kid.
    let new_only = SecretRing::parse("s2:new-session-key", 1).expect("ring");
    let old_kid = sign_hs256_kid(&claims, &kid("s1"), b"old-session-key");
    let old_plain = sign_hs256(&claims, b"old-session-key");
    assert_eq!(
        verify_hs256(&old_kid, &new_only, &TokenRules::default(), NOW),
        Err(TokenError::UnknownKey)
    );
    assert_eq!(
        verify_hs256(&old_plain, &new_only, &TokenRules::default(), NOW),
        Err(TokenError::BadSignature)
    );
}

#[test]
fn a_valid_token_yields_its_subject() {
    let t = token(json!({"sub": "alice@shop:1", "exp": NOW + 60, "iat": NOW}));
    let claims = verify_hs256(&t, &keys(), &TokenRules::default(), NOW).expect("valid");
    assert_eq!(claims.sub.as_str(), "alice@shop:1");
    assert_eq!(claims.exp, NOW + 60);
}

#[test]
fn an_independently_computed_token_verifies() {
    // Produced with Python's hmac/hashlib/base64: header {"alg":"HS256","typ":"JWT"},
    // claims {"sub":"bob","exp":4102444800}, key "k".
    let t = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJib2IiLCJleHAiOjQxMDI0NDQ4MDB9.\
             WATS_fEk6DE1_hhmXRhUpoVnIWcipSsCWZsBmj91orM";
    let k = SecretRing::single(b"k".to_vec());
    // It expires in 2100, so only without a practical lifetime bound.
    let lenient = TokenRules {
        max_lifetime_secs: u32::MAX,
        ..TokenRules::default()
    };
    assert_eq!(
        verify_hs256(t, &k, &lenient, NOW).map(|c| c.sub.to_string()),
        Ok("bob".to_owned())
    );
    assert_eq!(
        verify_hs256(t, &k, &TokenRules::default(), NOW),
        Err(TokenError::LifetimeTooLong)
    );
}

#[test]
fn the_rejection_matrix() {
    let good = json!({"sub": "alice", "exp": NOW + 60});
    let none_alg = {
        let h = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
        let c = URL_SAFE_NO_PAD.encode(good.to_string());
        format!("{h}.{c}.")
    };
    let cases: Vec<(String, TokenError)> = vec![
        (none_alg, TokenError::UnsupportedAlgorithm),
        (
            sign_with_header(&json!({"alg": "HS512"}), &good, SECRET),
            TokenError::UnsupportedAlgorithm,
        ),
        (
            sign_with_header(&json!({"alg": "hs256"}), &good, SECRET),
            TokenError::UnsupportedAlgorithm,
        ),
        (
            sign_with_header(&json!({"typ": "JWT"}), &good, SECRET),
            TokenError::UnsupportedAlgorithm,
        ),
        (
            sign_with_header(&json!({"alg": "HS256", "crit": ["x"]}), &good, SECRET),
            TokenError::UnsupportedAlgorithm,
        ),
        (
            sign_with_header(&json!({"alg": "HS256", "typ": "at+jwt"}), &good, SECRET),
            TokenError::UnsupportedAlgorithm,
        ),
        (sign_hs256(&good, b"wrong-key"), TokenError::BadSignature),
        (
            token(json!({"sub": "alice", "exp": NOW})),
            TokenError::Expired,
        ),
        (
            token(json!({"sub": "alice", "exp": NOW - 1})),
            TokenError::Expired,
        ),
        (token(json!({"sub": "alice"})), TokenError::MissingExpiry),
        (
            token(json!({"sub": "alice", "exp": "tomorrow"})),
            TokenError::MissingExpiry,
        ),
        (
            token(json!({"sub": "alice", "exp": NOW + 60, "nbf": NOW + 1})),
            TokenError::NotYetValid,
        ),
        (
            token(json!({"sub": "alice", "exp": NOW + 60, "nbf": "x"})),
            TokenError::Malformed,
        ),
        (token(json!({"exp": NOW + 60})), TokenError::InvalidSubject),
        (
            token(json!({"sub": "", "exp": NOW + 60})),
            TokenError::InvalidSubject,
        ),
        (
            token(json!({"sub": "a b", "exp": NOW + 60})),
            TokenError::InvalidSubject,
        ),
        (
            token(json!({"sub": 42, "exp": NOW + 60})),
            TokenError::InvalidSubject,
        ),
        ("garbage".to_owned(), TokenError::Malformed),
        ("a.b".to_owned(), TokenError::Malformed),
        ("a.b.c.d".to_owned(), TokenError::Malformed),
        ("!!!.!!!.!!!".to_owned(), TokenError::Malformed),
        (
            format!("{}.{}", URL_SAFE_NO_PAD.encode("[]"), "e30.x"),
            TokenError::Malformed,
        ),
        ("x".repeat(MAX_TOKEN_LEN + 1), TokenError::Malformed),
    ];
    for (t, want) in cases {
        assert_eq!(
            verify_hs256(&t, &keys(), &TokenRules::default(), NOW),
            Err(want),
            "{t}"
        );
    }
}

#[test]
fn tampering_with_any_segment_breaks_the_signature() {
    let t = token(json!({"sub": "alice", "exp": NOW + 60}));
    let forged_claims =
        URL_SAFE_NO_PAD.encode(json!({"sub": "mallory", "exp": NOW + 60}).to_string());
    let mut parts: Vec<&str> = t.split('.').collect();
    parts[1] = &forged_claims;
    assert_eq!(
        verify_hs256(&parts.join("."), &keys(), &TokenRules::default(), NOW),
        Err(TokenError::BadSignature)
    );
    // Padding and non-canonical base64 are malformed, not silently accepted.
    assert_eq!(
        verify_hs256(&format!("{t}="), &keys(), &TokenRules::default(), NOW),
        Err(TokenError::Malformed)
    );
    let truncated = &t[..t.len() - 2];
    assert!(verify_hs256(truncated, &keys(), &TokenRules::default(), NOW).is_err());
}

#[test]
fn fractional_and_huge_dates_are_handled_without_panicking() {
    let rules = TokenRules::default();
    let t = token(json!({"sub": "alice", "exp": (NOW as f64) + 0.5}));
    assert!(verify_hs256(&t, &keys(), &rules, NOW).is_ok());
    let t = token(json!({"sub": "alice", "exp": -1e300}));
    assert_eq!(
        verify_hs256(&t, &keys(), &rules, NOW),
        Err(TokenError::Expired)
    );
    // Absurd dates are refused, never accepted and never a panic (1e400 is not even JSON
    // that parses as a number, so the claims are malformed).
    for (claims, want) in [
        (
            json!({"sub": "alice", "exp": 1e300}),
            TokenError::LifetimeTooLong,
        ),
        (
            json!({"sub": "alice", "exp": f64::MAX}),
            TokenError::LifetimeTooLong,
        ),
        (
            json!({"sub": "alice", "exp": NOW + 60, "iat": -1e300}),
            TokenError::LifetimeTooLong,
        ),
        (
            json!({"sub": "alice", "exp": f64::MAX, "iat": -f64::MAX}),
            TokenError::LifetimeTooLong,
        ),
        (
            json!({"sub": "alice", "exp": NOW + 60, "nbf": 1e300}),
            TokenError::NotYetValid,
        ),
        (
            json!({"sub": "alice", "exp": NOW + 60, "iat": "yesterday"}),
            TokenError::Malformed,
        ),
        (
            json!({"sub": "alice", "exp": u64::MAX}),
            TokenError::LifetimeTooLong,
        ),
    ] {
        let t = token(claims.clone());
        assert_eq!(
            verify_hs256(&t, &keys(), &rules, NOW),
            Err(want),
            "{claims}"
        );
    }
    let raw = |claims: &str| {
        let h = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256"}"#);
        let c = URL_SAFE_NO_PAD.encode(claims);
        let mut mac = new_mac(SECRET);
        mac.update(format!("{h}.{c}").as_bytes());
        let sig = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        format!("{h}.{c}.{sig}")
    };
    assert_eq!(
        verify_hs256(&raw(r#"{"sub":"alice","exp":1e400}"#), &keys(), &rules, NOW),
        Err(TokenError::Malformed)
    );
}

#[test]
fn the_lifetime_is_bounded() {
    let rules = TokenRules {
        max_lifetime_secs: 3_600,
        ..TokenRules::default()
    };
    let check = |claims: Value| verify_hs256(&token(claims), &keys(), &rules, NOW).map(|_| ());
    // With `iat`: exp - iat.
    assert_eq!(
        check(json!({"sub": "a", "iat": NOW, "exp": NOW + 3_600})),
        Ok(())
    );
    assert_eq!(
        check(json!({"sub": "a", "iat": NOW, "exp": NOW + 3_601})),
        Err(TokenError::LifetimeTooLong)
    );
    // Issued long ago, still within its (long) life: refused, the lifetime is too long
    // even though only a minute is left.
    assert_eq!(
        check(json!({"sub": "a", "iat": NOW - 7_200, "exp": NOW + 60})),
        Err(TokenError::LifetimeTooLong)
    );
    assert_eq!(
        check(json!({"sub": "a", "iat": NOW - 1_800, "exp": NOW + 1_800})),
        Ok(())
    );
    // Without `iat`, or with an `iat` in the future: exp - now.
    assert_eq!(check(json!({"sub": "a", "exp": NOW + 3_600})), Ok(()));
    assert_eq!(
        check(json!({"sub": "a", "exp": NOW + 3_601})),
        Err(TokenError::LifetimeTooLong)
    );
    assert_eq!(
        check(json!({"sub": "a", "iat": NOW + 10_000, "exp": NOW + 10_060})),
        Err(TokenError::LifetimeTooLong)
    );
    assert_eq!(
        check(json!({"sub": "a", "iat": NOW + 10, "exp": NOW + 70})),
        Ok(())
    );
    // The default is one day.
    let day = TokenRules::default();
    assert_eq!(day.max_lifetime_secs, 86_400);
    let t = token(json!({"sub": "a", "iat": NOW, "exp": NOW + 86_401}));
    assert_eq!(
        verify_hs256(&t, &keys(), &day, NOW),
        Err(TokenError::LifetimeTooLong)
    );
}

#[test]
fn issuer_and_audience_must_match_when_configured() {
    let rules = TokenRules {
        issuer: Some("https://shop.example".into()),
        audience: Some("flashgate".into()),
        ..TokenRules::default()
    };
    let check = |extra: Value| {
        let mut claims = json!({"sub": "a", "exp": NOW + 60});
        if let (Some(c), Some(e)) = (claims.as_object_mut(), extra.as_object()) {
            c.extend(e.clone());
        }
        verify_hs256(&token(claims), &keys(), &rules, NOW).map(|_| ())
    };
    assert_eq!(
        check(json!({"iss": "https://shop.example", "aud": "flashgate"})),
        Ok(())
    );
    assert_eq!(
        check(json!({"iss": "https://shop.example", "aud": ["other", "flashgate"]})),
        Ok(())
    );
    for (extra, want) in [
        (json!({"aud": "flashgate"}), TokenError::WrongIssuer),
        (
            json!({"iss": "https://shop.example/", "aud": "flashgate"}),
            TokenError::WrongIssuer,
        ),
        (
            json!({"iss": ["https://shop.example"], "aud": "flashgate"}),
            TokenError::WrongIssuer,
        ),
        (
            json!({"iss": "https://shop.example"}),
            TokenError::WrongAudience,
        ),
        (
            json!({"iss": "https://shop.example", "aud": "Flashgate"}),
            TokenError::WrongAudience,
        ),
        (
            json!({"iss": "https://shop.example", "aud": ["other"]}),
            TokenError::WrongAudience,
        ),
        (
            json!({"iss": "https://shop.example", "aud": []}),
            TokenError::WrongAudience,
        ),
        (
            json!({"iss": "https://shop.example", "aud": [["flashgate"]]}),
            TokenError::WrongAudience,
        ),
        (
            json!({"iss": "https://shop.example", "aud": 7}),
            TokenError::WrongAudience,
        ),
    ] {
        assert_eq!(check(extra.clone()), Err(want), "{extra}");
    }
    // Unset, they are not looked at.
    let open = TokenRules::default();
    let t = token(json!({"sub": "a", "exp": NOW + 60, "iss": 1, "aud": {"x": 1}}));
    assert!(verify_hs256(&t, &keys(), &open, NOW).is_ok());
}

#[test]
fn bearer_scheme_parsing() {
    assert_eq!(bearer_token(Some("Bearer abc")), Ok("abc"));
    assert_eq!(bearer_token(Some("bearer  abc")), Ok("abc"));
    for bad in [
        None,
        Some(""),
        Some("Bearer"),
        Some("Bearer "),
        Some("Basic abc"),
        Some("abc"),
    ] {
        assert_eq!(bearer_token(bad), Err(TokenError::Missing), "{bad:?}");
    }
}
