//! Unit tests of the settings: defaults, each check, secrets never shown, and the docs table
//! generated from the declarations.

use super::*;
use std::collections::HashMap;
use std::path::PathBuf;

use secrecy::ExposeSecret;

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |k| map.get(k).cloned()
}

const BASE: [(&str, &str); 4] = [
    ("DATABASE_URL", "postgres://postgres@127.0.0.1/flashgate"),
    (
        "REDIS_URLS",
        "redis://127.0.0.1:6379, redis://127.0.0.1:6380",
    ),
    ("EDGE_SHARED_SECRET", "0123456789abcdef0123"),
    ("ADMIN_TOKEN", "admin-token-0123456789"),
];

#[test]
fn defaults_apply() {
    let s = Settings::from_lookup(env(&BASE)).expect("valid");
    assert_eq!(
        s.redis_urls,
        ["redis://127.0.0.1:6379", "redis://127.0.0.1:6380"]
    );
    assert_eq!(s.listen_addr.to_string(), "127.0.0.1:8080");
    assert!(s.run_migrations);
    assert_eq!(s.purchase.batch_max, 500);
    assert_eq!(s.http.max_connections, 4096);
    assert_eq!(s.http.header_read_timeout, Duration::from_secs(10));
    assert_eq!(s.http.keepalive_timeout, Duration::from_secs(960));
    assert_eq!(s.http.max_header_bytes, 16 * 1024);
}

#[test]
fn http_limits_are_checked() {
    let with = |k: &'static str, v: &'static str| {
        let mut e = BASE.to_vec();
        e.push((k, v));
        Settings::from_lookup(env(&e))
    };
    let err = with("HTTP_REQUEST_TIMEOUT_MS", "5000").expect_err("below body timeout");
    assert!(err.to_string().contains("HTTP_REQUEST_TIMEOUT_MS"), "{err}");
    let err = with("HTTP_HEADER_READ_TIMEOUT_MS", "0").expect_err("zero");
    assert!(
        err.to_string().contains("HTTP_HEADER_READ_TIMEOUT_MS"),
        "{err}"
    );
    let err = with("HTTP_MAX_HEADER_BYTES", "100").expect_err("too small");
    assert!(err.to_string().contains("HTTP_MAX_HEADER_BYTES"), "{err}");
    let s = with("HTTP_MAX_CONNECTIONS", "0").expect("clamped");
    assert_eq!(s.http.max_connections, 1);
}

#[test]
fn public_reads_get_a_share_of_the_database_pool() {
    let s = with(&[]).expect("defaults");
    assert_eq!((s.db_max_connections, s.db_read_max_connections), (16, 4));
    let s = with(&[("DB_MAX_CONNECTIONS", "2")]).expect("small pool");
    assert_eq!(s.db_read_max_connections, 1);
    let s = with(&[("DB_MAX_CONNECTIONS", "1")]).expect("one connection");
    assert_eq!(s.db_read_max_connections, 1);
    let s = with(&[("DB_READ_MAX_CONNECTIONS", "15")]).expect("below the pool");
    assert_eq!(s.db_read_max_connections, 15);
    for bad in ["0", "16", "17", "x"] {
        let err = with(&[("DB_READ_MAX_CONNECTIONS", bad)]).expect_err(bad);
        assert!(err.to_string().contains("DB_READ_MAX_CONNECTIONS"), "{err}");
    }
}

#[test]
fn missing_and_invalid_values_are_named() {
    let err = Settings::from_lookup(env(&BASE[1..])).expect_err("no db url");
    assert!(err.to_string().contains("DATABASE_URL"), "{err}");
    let mut bad = BASE.to_vec();
    bad.push(("LISTEN_ADDR", "nope"));
    let err = Settings::from_lookup(env(&bad)).expect_err("bad addr");
    assert!(err.to_string().contains("LISTEN_ADDR"), "{err}");
    let mut short = BASE.to_vec();
    short[2] = ("EDGE_SHARED_SECRET", "short");
    assert!(Settings::from_lookup(env(&short)).is_err());
}

fn refused(result: Result<Settings, SettingsError>, name: &str) {
    match result {
        Err(SettingsError::PlaintextRefused { name: n, .. }) if n == name => {}
        other => panic!("expected {name} refused, got {other:?}"),
    }
}

#[test]
fn redis_tls_refuses_plaintext_and_disabled_verification() {
    let tls = with(&[
        ("REDIS_URLS", "rediss://a:6379,rediss://:pw@b:6379"),
        ("REDIS_CA_FILE", "/etc/ca.pem"),
    ])
    .expect("all rediss");
    assert_eq!(tls.redis_tls.ca_file, Some(PathBuf::from("/etc/ca.pem")));
    // A CA file, yet one node is plaintext.
    refused(with(&[("REDIS_CA_FILE", "/etc/ca.pem")]), "REDIS_URLS");
    // Mixed schemes.
    let mixed = with(&[("REDIS_URLS", "rediss://a:6379,redis://:hunter2@b:6379")]);
    let Err(error) = mixed else {
        panic!("mixed schemes accepted")
    };
    assert!(
        matches!(error, SettingsError::PlaintextRefused { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("#1"), "{error}");
    assert!(!error.to_string().contains("hunter2"), "{error}");
    refused(
        with(&[("REDIS_URLS", "rediss://a:6379/#insecure")]),
        "REDIS_URLS",
    );
    // A client certificate without its key.
    let half = with(&[
        ("REDIS_URLS", "rediss://a:6379"),
        ("REDIS_CLIENT_CERT_FILE", "/etc/client.pem"),
    ]);
    assert!(
        matches!(half, Err(SettingsError::Invalid { .. })),
        "{half:?}"
    );
    // No TLS anywhere: plaintext is the operator's choice.
    assert!(with(&[]).expect("plaintext").redis_tls == RedisTlsSettings::default());
}

#[test]
fn database_tls_refuses_weaker_sslmodes() {
    let url = |u: &'static str| ("DATABASE_URL", u);
    let s = with(&[
        ("DATABASE_TLS", "verify-full"),
        ("DATABASE_CA_FILE", "/ca.pem"),
    ])
    .expect("no sslmode in the URL: DATABASE_TLS applies");
    assert_eq!(s.database_tls.mode, Some(DatabaseTls::VerifyFull));
    with(&[
        url("postgres://h/db?sslmode=verify-full"),
        ("DATABASE_TLS", "verify-full"),
    ])
    .expect("same mode");
    with(&[
        url("postgres://h/db?application_name=x&sslmode=verify-ca"),
        ("DATABASE_TLS", "require"),
    ])
    .expect("stronger than required");
    for weak in [
        "postgres://h/db?sslmode=disable",
        "postgres://h/db?sslmode=prefer",
        "postgres://h/db?ssl-mode=allow",
        "postgres://h/db?sslmode=require",
    ] {
        refused(
            with(&[url(weak), ("DATABASE_TLS", "verify-full")]),
            "DATABASE_URL",
        );
    }
    refused(
        with(&[
            url("postgres://h/db?sslmode=DISABLE"),
            ("DATABASE_TLS", "require"),
        ]),
        "DATABASE_URL",
    );
    // Unset: the URL decides, even sslmode=disable.
    with(&[url("postgres://h/db?sslmode=disable")]).expect("no TLS configured");
    // A CA without verification would be a false sense of security.
    assert!(matches!(
        with(&[("DATABASE_CA_FILE", "/ca.pem")]),
        Err(SettingsError::Invalid {
            name: "DATABASE_CA_FILE",
            ..
        })
    ));
    assert!(matches!(
        with(&[("DATABASE_TLS", "on")]),
        Err(SettingsError::Invalid {
            name: "DATABASE_TLS",
            ..
        })
    ));
}

#[test]
fn idempotency_retention_is_parsed_in_one_place_and_checked() {
    let day = Duration::from_secs(24 * 3600);
    assert_eq!(with(&[]).expect("default").idempotency_retention, day);
    let reconcile = |hours: &str| {
        ReconcileSettings::from_lookup(env(&[BASE[0], ("IDEMPOTENCY_RETENTION_HOURS", hours)]))
    };
    let two_days = reconcile(" 48 ").expect("48 h").idempotency_retention;
    assert_eq!(two_days, 2 * day);
    for bad in ["12", "0", "-1", "a day", "18446744073709551615"] {
        let err = reconcile(bad).expect_err(bad);
        assert!(
            matches!(
                err,
                SettingsError::Invalid {
                    name: "IDEMPOTENCY_RETENTION_HOURS",
                    ..
                }
            ),
            "{bad}: {err}"
        );
        let err = with(&[("IDEMPOTENCY_RETENTION_HOURS", bad)]).expect_err(bad);
        assert!(
            err.to_string().contains("IDEMPOTENCY_RETENTION_HOURS"),
            "{err}"
        );
    }
}

#[test]
fn breaker_settings_default_and_validate() {
    let s = with(&[]).expect("defaults");
    assert_eq!(
        s.redlock_breaker,
        BreakerSettings {
            failure_threshold: 3,
            base_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
        }
    );
    for bad in [
        ("REDLOCK_BREAKER_FAILURES", "0"),
        ("REDLOCK_BREAKER_BACKOFF_MS", "0"),
        ("REDLOCK_BREAKER_BACKOFF_MS", "5000"),
        ("REDLOCK_BREAKER_MAX_BACKOFF_MS", "x"),
    ] {
        let err = with(&[bad]).expect_err("invalid breaker setting");
        assert!(err.to_string().contains(bad.0), "{err}");
    }
}

#[test]
fn quorum_loss_grace_defaults_to_a_second_and_is_bounded() {
    let s = with(&[]).expect("defaults");
    assert_eq!(s.redlock_quorum_loss_grace, Duration::from_secs(1));
    let s = with(&[("REDLOCK_QUORUM_LOSS_GRACE_MS", "0")]).expect("0 = at once");
    assert_eq!(s.redlock_quorum_loss_grace, Duration::ZERO);
    for bad in ["x", "-1", "3600001"] {
        let err = with(&[("REDLOCK_QUORUM_LOSS_GRACE_MS", bad)]).expect_err(bad);
        assert!(
            err.to_string().contains("REDLOCK_QUORUM_LOSS_GRACE_MS"),
            "{err}"
        );
    }
}

fn with(changes: &[(&'static str, &'static str)]) -> Result<Settings, SettingsError> {
    let mut pairs: Vec<(&str, &str)> = BASE
        .iter()
        .copied()
        .filter(|(k, _)| !changes.iter().any(|(c, _)| c == k))
        .collect();
    pairs.extend(changes.iter().filter(|(_, v)| !v.is_empty()));
    Settings::from_lookup(env(&pairs))
}

#[test]
fn secrets_take_the_list_or_the_single_form() {
    // The single forms: one secret under the key id `default`, one admin token.
    let s = Settings::from_lookup(env(&BASE)).expect("valid");
    assert_eq!(s.edge_secrets.current().0.as_str(), "default");
    assert!(s.admin_tokens.accepts("admin-token-0123456789"));
    assert!(s.accept_signature_v1);

    let s = with(&[
        ("EDGE_SHARED_SECRET", ""),
        (
            "EDGE_SHARED_SECRETS",
            "k2:new-secret-0123456789,k1:old-secret-0123456789",
        ),
        ("ADMIN_TOKEN", ""),
        ("ADMIN_TOKENS", "new-admin-token-0123,old-admin-token-0123"),
        ("ACCEPT_SIGNATURE_V1", "false"),
    ])
    .expect("valid");
    assert_eq!(
        s.edge_secrets
            .kids()
            .map(|k| k.as_str())
            .collect::<Vec<_>>(),
        ["k2", "k1"]
    );
    assert!(s.admin_tokens.accepts("old-admin-token-0123"));
    assert!(!s.accept_signature_v1);
    let shown = format!("{s:?}");
    assert!(
        !shown.contains("new-secret") && !shown.contains("admin-token"),
        "{shown}"
    );

    for (changes, name) in [
        (
            &[("EDGE_SHARED_SECRETS", "k2:new-secret-0123456789")][..],
            "EDGE_SHARED_SECRETS",
        ),
        (&[("EDGE_SHARED_SECRET", "")][..], "EDGE_SHARED_SECRETS"),
        (
            &[
                ("EDGE_SHARED_SECRET", ""),
                ("EDGE_SHARED_SECRETS", "k2:too-short"),
            ][..],
            "EDGE_SHARED_SECRETS",
        ),
        (
            &[("ADMIN_TOKENS", "another-admin-token-0123")][..],
            "ADMIN_TOKENS",
        ),
        (&[("ADMIN_TOKEN", "")][..], "ADMIN_TOKENS"),
        (
            &[("ACCEPT_SIGNATURE_V1", "maybe")][..],
            "ACCEPT_SIGNATURE_V1",
        ),
    ] {
        let err = with(changes).expect_err(name);
        assert!(err.to_string().contains(name), "{err}");
        assert!(!err.to_string().contains("secret-0123"), "{err}");
    }
}

#[test]
fn values_come_from_the_lookup_only() {
    // Whatever the test process's own environment holds (DATABASE_URL usually is set), a lookup
    // without a variable reads as unset, and an empty value too.
    let err = with(&[("DATABASE_URL", "")]).expect_err("no database url");
    assert!(
        matches!(err, SettingsError::Missing("DATABASE_URL")),
        "{err}"
    );
    let s = with(&[("BATCH_MAX", ""), ("LISTEN_ADDR", "")]).expect("empty = default");
    assert_eq!(s.purchase.batch_max, 500);
    assert_eq!(s.listen_addr.to_string(), "127.0.0.1:8080");
}

#[test]
fn values_are_parsed_and_errors_name_the_variable() {
    let s = with(&[
        ("BATCH_MAX", " 2000 "),
        ("QUEUE_CAPACITY", "0"),
        ("LOCK_TTL_MS", "5000"),
        ("RUN_MIGRATIONS", "No"),
        ("REDIS_KEY_PREFIX", "shop-a"),
        ("RECONCILE_INTERVAL_SECS", "0"),
        ("LISTEN_ADDR", "0.0.0.0:0"),
    ])
    .expect("valid");
    assert_eq!(s.purchase.batch_max, 1000, "clamped");
    assert_eq!(s.purchase.queue_capacity, 1, "clamped");
    assert_eq!(s.purchase.lock_ttl, Duration::from_secs(5));
    assert!(!s.run_migrations);
    assert_eq!(s.redis_key_prefix, "shop-a");
    assert_eq!(s.reconcile_interval, Duration::ZERO);
    for (name, bad, reason) in [
        ("BATCH_MAX", "-1", "invalid digit"),
        ("LOCK_TTL_MS", "2s", "invalid digit"),
        ("RUN_MIGRATIONS", "maybe", "boolean"),
        (
            "DATABASE_TLS",
            "on",
            "expected require or verify-full, got \"on\"",
        ),
        ("HTTP_MAX_CONNECTIONS", "many", "invalid digit"),
    ] {
        match with(&[(name, bad)]) {
            Err(SettingsError::Invalid { name: n, reason: r }) => {
                assert_eq!(n, name);
                assert!(r.contains(reason), "{name}: {r}");
            }
            other => panic!("{name}={bad:?}: {other:?}"),
        }
    }
}

#[test]
fn log_settings_read_format_filter_and_the_pseudonym_key() {
    let s = with(&[("LOG_HASH_KEY", "0123456789abcdef")]).expect("valid key");
    assert!(s.log_hash_key.is_some());
    assert!(!format!("{s:?}").contains("0123456789abcdef"));
    let err = with(&[("LOG_HASH_KEY", "short")]).expect_err("short key");
    assert!(err.to_string().contains("LOG_HASH_KEY"), "{err}");
    assert!(!err.to_string().contains("short"), "{err}");
    let logs: LogSettings = env::parse(&env(&[("LOG_FORMAT", "pretty")])).expect("valid");
    assert_eq!(
        (logs.log_format.as_str(), logs.rust_log.as_str()),
        ("pretty", "info")
    );
    assert!(!format!("{logs:?}").contains("0123"));
}

/// docs/configuration.md's table is generated from the declarations: this fails when they
/// differ. `UPDATE_DOCS=1 cargo test -p origin --lib settings` rewrites the table.
#[test]
fn configuration_doc_lists_every_variable_with_its_default() {
    const START: &str = "<!-- settings-table: generated from origin/src/settings.rs -->\n";
    const END: &str = "<!-- /settings-table -->";
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md");
    let doc = std::fs::read_to_string(path).expect("read docs/configuration.md");
    let (Some(start), Some(end)) = (doc.find(START), doc.find(END)) else {
        panic!("docs/configuration.md lacks the {START:?} … {END:?} markers");
    };
    let table = configuration_table();
    let current = &doc[start + START.len()..end];
    if current != table {
        if std::env::var_os("UPDATE_DOCS").is_some() {
            let updated = format!("{}{table}{}", &doc[..start + START.len()], &doc[end..]);
            std::fs::write(path, updated).expect("write docs/configuration.md");
        } else {
            panic!(
                "docs/configuration.md's table differs from the settings' declarations; \
                 run `UPDATE_DOCS=1 cargo test -p origin --lib settings` and commit it.\n\
                 generated:\n{table}"
            );
        }
    }
    for name in [
        "DATABASE_URL",
        "BATCH_MAX",
        "LOG_FORMAT",
        "HTTP_MAX_HEADER_BYTES",
    ] {
        assert!(table.contains(&format!("| `{name}` |")), "{name} missing");
    }
    assert!(table.contains("| `BATCH_MAX` | `500` |"), "{table}");
}

#[test]
fn payment_webhook_secrets_are_optional_listed_checked_and_never_shown() {
    let s = with(&[]).expect("defaults");
    assert!(s.payment_webhook_secrets.is_none(), "off unless configured");
    let s = with(&[(
        "PAYMENT_WEBHOOK_SECRETS",
        "whsec_new_0123456789abcdef, whsec_old_0123456789abcdef",
    )])
    .expect("two secrets");
    assert_eq!(s.payment_webhook_secrets.as_ref().map(|w| w.len()), Some(2));
    let shown = format!("{s:?}");
    assert!(!shown.contains("whsec_"), "{shown}");
    assert_eq!(
        s.payment_webhook_max_concurrency, 4,
        "a quarter of the pool"
    );
    let s = with(&[("PAYMENT_WEBHOOK_MAX_CONCURRENCY", "2")]).expect("two at once");
    assert_eq!(s.payment_webhook_max_concurrency, 2);
    for bad in ["0", "16", "x"] {
        let err = with(&[("PAYMENT_WEBHOOK_MAX_CONCURRENCY", bad)]).expect_err(bad);
        assert!(
            err.to_string().contains("PAYMENT_WEBHOOK_MAX_CONCURRENCY"),
            "{err}"
        );
    }
    for bad in ["whsec_short", "whsec_new_0123456789abcdef,", ","] {
        let err = with(&[("PAYMENT_WEBHOOK_SECRETS", bad)]).expect_err(bad);
        assert!(err.to_string().contains("PAYMENT_WEBHOOK_SECRETS"), "{err}");
        assert!(!err.to_string().contains("whsec_"), "{err}");
    }
}

#[test]
fn the_https_listener_is_off_by_default_and_its_files_go_together() {
    let s = with(&[]).expect("defaults");
    assert_eq!(s.listener_tls, None, "no certificate: no HTTPS listener");
    let s = with(&[
        ("TLS_CERT_FILE", "/run/secrets/origin.pem"),
        ("TLS_KEY_FILE", "/run/secrets/origin.key"),
    ])
    .expect("certificate and key");
    let tls = s.listener_tls.expect("HTTPS listener on");
    assert_eq!(tls.listen_addr.to_string(), "0.0.0.0:8443");
    assert_eq!(tls.cert_file, PathBuf::from("/run/secrets/origin.pem"));
    assert_eq!(tls.client_ca_file, None);
    assert_eq!(tls.reload_interval, Duration::from_secs(10));
    let s = with(&[
        ("TLS_CERT_FILE", "c.pem"),
        ("TLS_KEY_FILE", "k.pem"),
        ("TLS_CLIENT_CA_FILE", "ca.pem"),
        ("TLS_LISTEN_ADDR", "127.0.0.1:9443"),
        ("TLS_RELOAD_INTERVAL_MS", "0"),
    ])
    .expect("mutual TLS");
    let tls = s.listener_tls.expect("HTTPS listener on");
    assert_eq!(tls.client_ca_file, Some(PathBuf::from("ca.pem")));
    assert_eq!(tls.reload_interval, Duration::ZERO);

    for (bad, name) in [
        (&[("TLS_CERT_FILE", "c.pem")][..], "TLS_CERT_FILE"),
        (&[("TLS_KEY_FILE", "k.pem")][..], "TLS_CERT_FILE"),
        (
            &[("TLS_CLIENT_CA_FILE", "ca.pem")][..],
            "TLS_CLIENT_CA_FILE",
        ),
        (
            &[
                ("TLS_CERT_FILE", "c.pem"),
                ("TLS_KEY_FILE", "k.pem"),
                ("TLS_LISTEN_ADDR", "0.0.0.0:8080"),
            ][..],
            "TLS_LISTEN_ADDR",
        ),
        (&[("TLS_LISTEN_ADDR", "nope")][..], "TLS_LISTEN_ADDR"),
    ] {
        let err = with(bad).expect_err(name);
        assert!(err.to_string().contains(name), "{bad:?}: {err}");
    }
    // Port 0 (tests) never collides.
    with(&[
        ("LISTEN_ADDR", "127.0.0.1:0"),
        ("TLS_LISTEN_ADDR", "127.0.0.1:0"),
        ("TLS_CERT_FILE", "c.pem"),
        ("TLS_KEY_FILE", "k.pem"),
    ])
    .expect("two ephemeral ports");
}

#[test]
fn every_secret_can_come_from_a_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = |name: &str, contents: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, contents).expect("write secret file");
        path.display().to_string()
    };
    // What a `docker secret` or a Kubernetes secret volume holds: the value, maybe a line break.
    let database = file("db", "postgres://app:s3cret@db.internal/flashgate\n");
    let redis = file(
        "redis",
        "redis://:r3dis@10.0.0.1:6379, redis://:r3dis@10.0.0.2:6379\r\n",
    );
    let edge = file("edge", "k2:edge-secret-from-file-0123\n\n");
    let admin = file("admin", " admin token from a file, kept verbatim ");
    let webhook = file("webhook", "whsec_from_a_file_0123456789");
    let hash_key = file("hash", "log-hash-key-from-file-01\n");
    let pairs = [
        ("DATABASE_URL_FILE", database.as_str()),
        ("REDIS_URLS_FILE", redis.as_str()),
        ("EDGE_SHARED_SECRETS_FILE", edge.as_str()),
        ("ADMIN_TOKEN_FILE", admin.as_str()),
        ("PAYMENT_WEBHOOK_SECRETS_FILE", webhook.as_str()),
        ("LOG_HASH_KEY_FILE", hash_key.as_str()),
    ];
    let s = Settings::from_lookup(env(&pairs)).expect("secrets from files");
    assert_eq!(
        s.database_url.expose_secret(),
        "postgres://app:s3cret@db.internal/flashgate"
    );
    assert_eq!(
        s.redis_urls,
        [
            "redis://:r3dis@10.0.0.1:6379",
            "redis://:r3dis@10.0.0.2:6379"
        ]
    );
    let (kid, secret) = s.edge_secrets.current();
    assert_eq!(
        (kid.as_str(), secret),
        ("k2", &b"edge-secret-from-file-0123"[..])
    );
    assert!(
        s.admin_tokens
            .accepts(" admin token from a file, kept verbatim ")
    );
    assert_eq!(s.payment_webhook_secrets.map(|w| w.len()), Some(1));
    assert_eq!(
        s.log_hash_key
            .as_ref()
            .map(|k| k.expose_secret().to_owned()),
        Some("log-hash-key-from-file-01".to_owned())
    );
    // The other forms too, and `origin reconcile`'s and the log settings' readers.
    let single = file("single", "single-edge-secret-0123\n");
    let tokens = file("tokens", "admin-token-aaaa-0001,admin-token-bbbb-0002\n");
    let s = Settings::from_lookup(env(&[
        ("DATABASE_URL_FILE", database.as_str()),
        ("REDIS_URLS", "redis://127.0.0.1:6379"),
        ("EDGE_SHARED_SECRET_FILE", single.as_str()),
        ("ADMIN_TOKENS_FILE", tokens.as_str()),
    ]))
    .expect("single and list forms from files");
    assert_eq!(s.edge_secrets.current().1, b"single-edge-secret-0123");
    assert!(s.admin_tokens.accepts("admin-token-bbbb-0002"));
    let reconcile = ReconcileSettings::from_lookup(env(&[("DATABASE_URL_FILE", &database)]))
        .expect("reconcile reads the file");
    assert!(reconcile.database_url.expose_secret().contains("s3cret"));
    let logging: LogSettings = env::parse(&env(&[("LOG_HASH_KEY_FILE", &hash_key)])).expect("log");
    assert!(logging.log_hash_key().expect("valid").is_some());
    // Every secret the origin declares has its file form, and the docs say so.
    let table = configuration_table();
    for (secret, file_var) in SECRET_FILES {
        assert!(
            table.contains(&format!("| `{secret}` |")),
            "{secret} is declared"
        );
        assert!(
            table.contains(&format!("`{file_var}`")),
            "{file_var} is documented"
        );
    }
}

#[test]
fn secret_files_are_checked_and_their_contents_never_shown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name).display().to_string();
    std::fs::write(path("edge"), "edge-secret-in-a-file-0123").expect("write");
    std::fs::write(path("empty"), "\n").expect("write");
    std::fs::write(path("short"), "short\n").expect("write");
    std::fs::write(path("binary"), [0xff, 0xfe, 0x00]).expect("write");
    let with_base = |extra: &[(&'static str, String)]| {
        let mut pairs: Vec<(&str, &str)> = BASE
            .iter()
            .copied()
            .filter(|(k, _)| *k != "EDGE_SHARED_SECRET")
            .collect();
        pairs.extend(extra.iter().map(|(k, v)| (*k, v.as_str())));
        Settings::from_lookup(env(&pairs))
    };
    let cases: [(&[(&str, String)], &str); 5] = [
        (
            &[
                ("EDGE_SHARED_SECRET", "edge-secret-in-env-0123".to_owned()),
                ("EDGE_SHARED_SECRET_FILE", path("edge")),
            ],
            "not both",
        ),
        (
            &[("EDGE_SHARED_SECRET_FILE", path("missing"))],
            "cannot read",
        ),
        (&[("EDGE_SHARED_SECRET_FILE", path("empty"))], "is empty"),
        (&[("EDGE_SHARED_SECRET_FILE", path("binary"))], "not UTF-8"),
        // The value is checked like the variable's (here: too short).
        (&[("EDGE_SHARED_SECRET_FILE", path("short"))], "at least"),
    ];
    for (pairs, why) in cases {
        let err = with_base(pairs).expect_err(why);
        let shown = format!("{err} {err:?}");
        assert!(shown.contains(why), "{why}: {shown}");
        assert!(
            shown.contains("EDGE_SHARED_SECRET"),
            "names the variable: {shown}"
        );
        for secret in ["edge-secret-in-a-file", "edge-secret-in-env", "short\n"] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }
    // Only the secrets have a file form: another variable's `…_FILE` is not read.
    let s = with(&[("BATCH_MAX_FILE", "/nonexistent")]).expect("ignored");
    assert_eq!(s.purchase.batch_max, 500);
}
