//! The edge's settings from vars and secrets: defaults, ranges, the secrets' two forms, the
//! optional secrets, what never prints.

use super::*;
use std::collections::HashMap;

fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |k| map.get(k).cloned()
}

const REQUIRED: [(&str, &str); 4] = [
    ("ORIGIN_URL", "http://127.0.0.1:3000/"),
    ("SESSION_SECRET", "session-secret-0123456789"),
    ("EDGE_SHARED_SECRET", "edge-secret-0123456789"),
    ("ADMIN_TOKEN", "admin-token-0123456789"),
];

#[test]
fn defaults_apply_and_the_origin_url_is_normalised() {
    let s = Settings::from_lookup(lookup(&REQUIRED)).expect("valid");
    assert_eq!(s.origin_url, "http://127.0.0.1:3000");
    assert_eq!((s.rate_limit.quota(), s.rate_limit.window_secs()), (5, 10));
    assert_eq!(s.retention_secs, 86_400);
    assert_eq!(s.in_flight_timeout_ms(), 30_000);
    assert_eq!(s.sku_missing_ttl_secs, 5);
    assert_eq!(s.session_rules, TokenRules::default());
    assert_eq!(s.session_rules.max_lifetime_secs, 86_400);
    assert!(
        !format!("{s:?}").contains("session-secret-0123456789"),
        "secrets must not print"
    );
}

#[test]
fn the_room_secret_is_optional_but_checked_when_set() {
    let s = Settings::from_lookup(lookup(&REQUIRED)).expect("valid");
    assert!(s.room_secrets.is_none());
    let mut pairs = REQUIRED.to_vec();
    pairs.push(("ROOM_SECRETS", "r1:room-secret-0123456789"));
    let s = Settings::from_lookup(lookup(&pairs)).expect("valid");
    assert!(s.room_secrets.is_some());
    assert!(!format!("{s:?}").contains("room-secret-0123456789"));
    pairs.push(("ROOM_SECRET", "another-room-secret-0123"));
    let err = Settings::from_lookup(lookup(&pairs)).expect_err("both forms");
    assert_eq!(err.name, "ROOM_SECRETS");
    let mut short = REQUIRED.to_vec();
    short.push(("ROOM_SECRET", "short"));
    assert!(Settings::from_lookup(lookup(&short)).is_err());
}

#[test]
fn the_pow_secret_is_optional_and_its_settings_have_bounded_defaults() {
    let s = Settings::from_lookup(lookup(&REQUIRED)).expect("valid");
    assert!(s.pow_secrets.is_none());
    assert_eq!(
        (s.pow_challenge_ttl_secs, s.pow_peak_arrivals_per_sec),
        (120, 50)
    );
    let mut pairs = REQUIRED.to_vec();
    pairs.push((
        "POW_SECRETS",
        "p2:pow-secret-0123456789,p1:old-pow-secret-0123",
    ));
    pairs.push(("POW_CHALLENGE_TTL_SECS", "60"));
    pairs.push(("POW_PEAK_ARRIVALS_PER_SEC", "400"));
    let s = Settings::from_lookup(lookup(&pairs)).expect("valid");
    assert_eq!(
        s.pow_secrets.as_ref().map(|r| r.current().0.as_str()),
        Some("p2")
    );
    assert_eq!(
        (s.pow_challenge_ttl_secs, s.pow_peak_arrivals_per_sec),
        (60, 400)
    );
    assert!(!format!("{s:?}").contains("pow-secret-0123456789"));
    for (name, bad) in [
        ("POW_SECRET", "short"),
        ("POW_CHALLENGE_TTL_SECS", "5"),
        ("POW_PEAK_ARRIVALS_PER_SEC", "0"),
    ] {
        let mut pairs = REQUIRED.to_vec();
        pairs.push((name, bad));
        let err = Settings::from_lookup(lookup(&pairs)).expect_err(name);
        assert!(err.name.starts_with(&name[..10]), "{name}: {err}");
    }
}

#[test]
fn overrides_and_errors() {
    let mut pairs = REQUIRED.to_vec();
    pairs.push(("RATE_LIMIT_QUOTA", "20"));
    pairs.push(("RATE_LIMIT_WINDOW_SECS", "60"));
    pairs.push(("SKU_MISSING_TTL_SECS", "30"));
    pairs.push(("SESSION_MAX_LIFETIME_SECS", "600"));
    pairs.push(("SESSION_ISSUER", " https://shop.example "));
    pairs.push(("SESSION_AUDIENCE", "flashgate"));
    let s = Settings::from_lookup(lookup(&pairs)).expect("valid");
    assert_eq!((s.rate_limit.quota(), s.rate_limit.window_secs()), (20, 60));
    assert_eq!(s.sku_missing_ttl_secs, 30);
    assert_eq!(
        s.session_rules,
        TokenRules {
            max_lifetime_secs: 600,
            issuer: Some("https://shop.example".into()),
            audience: Some("flashgate".into()),
        }
    );
    // Blank = unset.
    let mut blank = REQUIRED.to_vec();
    blank.push(("SESSION_ISSUER", "  "));
    blank.push(("SESSION_AUDIENCE", ""));
    let s = Settings::from_lookup(lookup(&blank)).expect("valid");
    assert_eq!(
        (s.session_rules.issuer, s.session_rules.audience),
        (None, None)
    );

    for (name, value) in [
        ("RATE_LIMIT_QUOTA", "0"),
        ("RATE_LIMIT_QUOTA", "x"),
        ("IDEMPOTENCY_RETENTION_SECS", "3600"),
        ("SKU_MISSING_TTL_SECS", "0"),
        ("SKU_MISSING_TTL_SECS", "301"),
        ("SESSION_MAX_LIFETIME_SECS", "59"),
        ("SESSION_MAX_LIFETIME_SECS", "1e300"),
        ("SESSION_MAX_LIFETIME_SECS", "-1"),
        ("SESSION_ISSUER", "a\nb"),
        ("ORIGIN_URL", "ftp://x"),
        ("ORIGIN_URL", ""),
    ] {
        let mut pairs: Vec<(&str, &str)> = REQUIRED
            .iter()
            .copied()
            .filter(|(k, _)| *k != name)
            .collect();
        pairs.push((name, value));
        let err = Settings::from_lookup(lookup(&pairs)).expect_err(name);
        assert_eq!(err.name, name);
    }
    let missing: Vec<(&str, &str)> = REQUIRED
        .iter()
        .copied()
        .filter(|(k, _)| *k != "ADMIN_TOKEN")
        .collect();
    assert_eq!(
        Settings::from_lookup(lookup(&missing))
            .map(|_| ())
            .map_err(|e| e.name),
        Err("ADMIN_TOKENS")
    );
}

#[test]
fn secrets_take_the_list_or_the_single_form() {
    let s = Settings::from_lookup(lookup(&REQUIRED)).expect("valid");
    assert_eq!(s.edge_shared_secrets.current().0.as_str(), "default");
    assert!(s.admin_tokens.accepts("admin-token-0123456789"));

    let rotated = [
        ("ORIGIN_URL", "http://127.0.0.1:3000"),
        (
            "SESSION_SECRETS",
            "s2:new-session-0123456789,s1:old-session-0123456789",
        ),
        (
            "EDGE_SHARED_SECRETS",
            "k2:new-edge-0123456789ab,k1:old-edge-0123456789ab",
        ),
        ("ADMIN_TOKENS", "new-admin-0123456789,old-admin-0123456789"),
    ];
    let s = Settings::from_lookup(lookup(&rotated)).expect("valid");
    assert_eq!(
        s.edge_shared_secrets.current(),
        (
            &shared::KeyId::parse("k2").expect("kid"),
            &b"new-edge-0123456789ab"[..]
        )
    );
    assert_eq!(s.session_secrets.kids().count(), 2);
    assert!(
        s.admin_tokens.accepts("old-admin-0123456789")
            && s.admin_tokens.accepts("new-admin-0123456789")
    );
    let shown = format!("{s:?}");
    for secret in ["new-session", "old-edge", "new-admin"] {
        // (substrings of the secrets)
        assert!(!shown.contains(secret), "{shown}");
    }

    // Both forms, or neither, or a malformed list: the list form's name is reported.
    for (extra, name) in [
        (
            ("SESSION_SECRETS", "s1:x-0123456789abcdef"),
            "SESSION_SECRETS",
        ),
        (
            ("EDGE_SHARED_SECRETS", "k1:x-0123456789abcdef"),
            "EDGE_SHARED_SECRETS",
        ),
        (("ADMIN_TOKENS", "x-0123456789abcdef"), "ADMIN_TOKENS"),
    ] {
        let mut pairs = REQUIRED.to_vec();
        pairs.push(extra);
        let err = Settings::from_lookup(lookup(&pairs)).expect_err(name);
        assert_eq!(err.name, name);
        assert!(err.reason.contains("not both"), "{err}");
    }
    for (list, single, bad) in [
        ("SESSION_SECRETS", "SESSION_SECRET", "no-kid-here"),
        ("EDGE_SHARED_SECRETS", "EDGE_SHARED_SECRET", "k1:a,k1:b"),
        ("EDGE_SHARED_SECRETS", "EDGE_SHARED_SECRET", ""),
    ] {
        let mut pairs: Vec<(&str, &str)> = REQUIRED
            .iter()
            .copied()
            .filter(|(k, _)| *k != single)
            .collect();
        pairs.push((list, bad));
        let err = Settings::from_lookup(lookup(&pairs)).expect_err(list);
        assert_eq!(err.name, list, "{err}");
    }
}

#[test]
fn secrets_shorter_than_the_origin_accepts_are_refused() {
    let short = "fifteen-chars-x";
    assert_eq!(short.len(), MIN_SECRET_LEN - 1);
    for (name, value, reported) in [
        ("SESSION_SECRET", short.to_owned(), "SESSION_SECRETS"),
        (
            "EDGE_SHARED_SECRET",
            short.to_owned(),
            "EDGE_SHARED_SECRETS",
        ),
        ("ADMIN_TOKEN", short.to_owned(), "ADMIN_TOKENS"),
    ] {
        let mut pairs: Vec<(&str, &str)> = REQUIRED
            .iter()
            .copied()
            .filter(|(k, _)| *k != name)
            .collect();
        pairs.push((name, &value));
        let err = Settings::from_lookup(lookup(&pairs)).expect_err(name);
        assert_eq!(err.name, reported, "{err}");
        assert!(err.reason.contains("at least 16"), "{err}");
        assert!(
            !err.to_string().contains(short),
            "never echo a secret: {err}"
        );
    }
    let list = [
        ("ORIGIN_URL", "http://127.0.0.1:3000"),
        ("SESSION_SECRETS", "s2:session-secret-0123456789,s1:short"),
        ("EDGE_SHARED_SECRET", "edge-secret-0123456789"),
        ("ADMIN_TOKEN", "admin-token-0123456789"),
    ];
    let err = Settings::from_lookup(lookup(&list)).expect_err("short list entry");
    assert_eq!(err.name, "SESSION_SECRETS");
}

#[test]
fn challenges_share_the_purchase_limit_and_the_queue_has_its_own() {
    let s = Settings::from_lookup(lookup(&REQUIRED)).expect("valid");
    let shape = |p: &crate::gcra::Policy| (p.name().to_owned(), p.quota(), p.window_secs());
    assert_eq!(shape(&s.challenge_rate_limit), ("challenge".into(), 5, 10));
    assert_eq!(shape(&s.queue_rate_limit), ("queue".into(), 30, 10));
    let mut pairs = REQUIRED.to_vec();
    pairs.extend([
        ("RATE_LIMIT_QUOTA", "20"),
        ("RATE_LIMIT_WINDOW_SECS", "60"),
        ("QUEUE_RATE_LIMIT_QUOTA", "100"),
        ("QUEUE_RATE_LIMIT_WINDOW_SECS", "20"),
    ]);
    let s = Settings::from_lookup(lookup(&pairs)).expect("valid");
    assert_eq!(shape(&s.challenge_rate_limit), ("challenge".into(), 20, 60));
    assert_eq!(shape(&s.queue_rate_limit), ("queue".into(), 100, 20));
    for (name, bad) in [
        ("QUEUE_RATE_LIMIT_QUOTA", "0"),
        ("QUEUE_RATE_LIMIT_WINDOW_SECS", "0"),
        ("QUEUE_RATE_LIMIT_QUOTA", "lots"),
    ] {
        let mut pairs = REQUIRED.to_vec();
        pairs.push((name, bad));
        let err = Settings::from_lookup(lookup(&pairs)).expect_err(name);
        assert_eq!(err.name, name, "{err}");
    }
}
