//! Typed settings, read once per request from the Worker's vars and secrets (see `wrangler.toml`
//! and `.dev.vars.example`). Secrets are held in `shared::secrets` types, parsed once, so they
//! never print; each can hold several values at once so it rotates without downtime.

use std::fmt;

use shared::secrets::MIN_SECRET_LEN;
use shared::{BearerTokens, SecretRing, SecretsError};

use crate::gcra::Policy;
use crate::jwt::TokenRules;

/// Everything the edge is configured with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Base URL of the origin, without a trailing slash (`ORIGIN_URL`).
    pub origin_url: String,
    /// Per-user purchase rate limit (`RATE_LIMIT_QUOTA` per `RATE_LIMIT_WINDOW_SECS`).
    pub rate_limit: Policy,
    /// Per-user rate limit of the order routes (`GET /v1/orders/{id}`, `POST …/cancel`): the same
    /// quota and window as purchases, in a bucket of its own named `order` (`crate::orders`).
    pub order_rate_limit: Policy,
    /// How long an in-flight idempotency record blocks its key (`IDEMPOTENCY_IN_FLIGHT_TIMEOUT_SECS`).
    pub in_flight_timeout_secs: u32,
    /// How long completed idempotency records are kept (`IDEMPOTENCY_RETENTION_SECS`, >= 24 h).
    pub retention_secs: u32,
    /// Deadline for one origin call (`ORIGIN_TIMEOUT_MS`).
    pub origin_timeout_ms: u32,
    /// `max-age` of cached SKU views (`SKU_CACHE_TTL_SECS`).
    pub sku_cache_ttl_secs: u32,
    /// How long sold-out/cap facts are kept in the cache (`SKU_FACTS_TTL_SECS`).
    pub sku_facts_ttl_secs: u32,
    /// How long a `404 unknown_sku` of `GET /v1/skus/{sku}` is cached (`SKU_MISSING_TTL_SECS`).
    pub sku_missing_ttl_secs: u32,
    /// How far this edge's clock may be off the origin's database clock
    /// (`SCHEDULE_CLOCK_MARGIN_MS`): within it of a sale's start or end, the origin decides
    /// (`crate::schedule`).
    pub schedule_clock_margin_ms: u32,
    /// What shopper tokens' claims must satisfy: `SESSION_MAX_LIFETIME_SECS`, and the optional
    /// `SESSION_ISSUER` / `SESSION_AUDIENCE`.
    pub session_rules: TokenRules,
    /// `SESSION_SECRETS` (`kid:secret,…`) or `SESSION_SECRET`: HS256 keys of shopper tokens. A
    /// token's `kid` header picks its key; a token without `kid` may match any of them.
    pub session_secrets: SecretRing,
    /// `EDGE_SHARED_SECRETS` (`kid:secret,…`, first = current) or `EDGE_SHARED_SECRET` (key id
    /// `default`): forwarded purchases are signed (v2) with the current key.
    pub edge_shared_secrets: SecretRing,
    /// `ADMIN_TOKENS` (`token,…`) or `ADMIN_TOKEN`: bearer tokens of `/warmup` and the room's
    /// stats.
    pub admin_tokens: BearerTokens,
    /// `ROOM_SECRETS` (`kid:secret,…`, first = current) or `ROOM_SECRET`: HMAC key of the waiting
    /// room's passes, receipts and lottery tickets (`crate::room`). Optional: without it, a SKU
    /// with a waiting room answers `503` on its queue and purchase routes (fail closed).
    pub room_secrets: Option<SecretRing>,
    /// `POW_SECRETS` (`kid:secret,…`, first = current) or `POW_SECRET`: HMAC key of the proof-of-work
    /// challenges (`crate::proof`). Optional: without it, a SKU with a proof of work answers
    /// `503` on its challenge, queue and purchase routes (fail closed).
    pub pow_secrets: Option<SecretRing>,
    /// How long a challenge may be solved and used (`POW_CHALLENGE_TTL_SECS`): short, so a farm
    /// cannot stockpile cheap challenges solved off-peak for the peak.
    pub pow_challenge_ttl_secs: u32,
    /// The arrivals per second of a SKU at which its challenges reach `max_bits`
    /// (`POW_PEAK_ARRIVALS_PER_SEC`, per Worker instance; `crate::proof::difficulty`).
    pub pow_peak_arrivals_per_sec: u32,
}

/// A missing or invalid setting (its name and why). Logged, never shown to clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub name: &'static str,
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "setting {}: {}", self.name, self.reason)
    }
}

/// Defaults of the optional settings.
pub mod defaults {
    pub const RATE_LIMIT_QUOTA: u32 = 5;
    pub const RATE_LIMIT_WINDOW_SECS: u32 = 10;
    pub const IDEMPOTENCY_IN_FLIGHT_TIMEOUT_SECS: u32 = 30;
    pub const IDEMPOTENCY_RETENTION_SECS: u32 = 86_400;
    pub const ORIGIN_TIMEOUT_MS: u32 = 8_000;
    pub const SKU_CACHE_TTL_SECS: u32 = 5;
    pub const SKU_FACTS_TTL_SECS: u32 = 86_400;
    pub const SKU_MISSING_TTL_SECS: u32 = 5;
    pub const SCHEDULE_CLOCK_MARGIN_MS: u32 = 2_000;
    pub const SESSION_MAX_LIFETIME_SECS: u32 = crate::jwt::DEFAULT_MAX_LIFETIME_SECS;
    pub const POW_CHALLENGE_TTL_SECS: u32 = 120;
    pub const POW_PEAK_ARRIVALS_PER_SEC: u32 = 50;
}

/// Longest `SESSION_ISSUER` / `SESSION_AUDIENCE` accepted.
pub const MAX_CLAIM_SETTING_LEN: usize = 256;

/// The rate-limit policy's name in the `RateLimit` fields.
pub const RATE_LIMIT_POLICY_NAME: &str = "purchase";

/// A rate-limit policy as configured on the worker ([`Settings::rate_settings`]), in the form the
/// Durable Object's calls carry it (`crate::protocol`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RateSettings {
    pub name: String,
    pub quota: u32,
    pub window_secs: u32,
}

impl Settings {
    /// Reads the settings through `get` (vars and secrets by name; `None` when unset).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let number = |name: &'static str,
                      default: u32,
                      range: std::ops::RangeInclusive<u32>|
         -> Result<u32, ConfigError> {
            let Some(raw) = get(name).filter(|v| !v.trim().is_empty()) else {
                return Ok(default);
            };
            match raw.trim().parse::<u32>() {
                Ok(n) if range.contains(&n) => Ok(n),
                _ => Err(ConfigError {
                    name,
                    reason: format!("must be an integer in {}..={}", range.start(), range.end()),
                }),
            }
        };
        let secrets_error = |list: &'static str, single: &'static str| {
            move |e: SecretsError| ConfigError {
                name: list,
                reason: match e {
                    SecretsError::Missing => {
                        format!("{list} or {single} is required (wrangler secret put / .dev.vars)")
                    }
                    SecretsError::Conflict => format!("set {list} or {single}, not both"),
                    other => other.to_string(),
                },
            }
        };
        // An optional string claim to match: unset or blank = not checked.
        let claim = |name: &'static str| -> Result<Option<String>, ConfigError> {
            let Some(raw) = get(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
            else {
                return Ok(None);
            };
            if raw.len() > MAX_CLAIM_SETTING_LEN || raw.chars().any(char::is_control) {
                return Err(ConfigError {
                    name,
                    reason: format!(
                        "must be at most {MAX_CLAIM_SETTING_LEN} bytes without control characters"
                    ),
                });
            }
            Ok(Some(raw))
        };
        let ring = |list: &'static str, single: &'static str| {
            SecretRing::from_config(get(list).as_deref(), get(single).as_deref(), MIN_SECRET_LEN)
                .map_err(secrets_error(list, single))
        };
        // A secret whose absence only turns a feature off (fail closed where it is needed).
        let optional_ring = |list: &'static str, single: &'static str| match SecretRing::from_config(
            get(list).as_deref(),
            get(single).as_deref(),
            MIN_SECRET_LEN,
        ) {
            Ok(ring) => Ok(Some(ring)),
            Err(SecretsError::Missing) => Ok(None),
            Err(e) => Err(secrets_error(list, single)(e)),
        };

        let origin_url = get("ORIGIN_URL")
            .unwrap_or_default()
            .trim()
            .trim_end_matches('/')
            .to_owned();
        let scheme_ok = origin_url.starts_with("http://") || origin_url.starts_with("https://");
        if !scheme_ok || origin_url.len() <= "https://".len() {
            return Err(ConfigError {
                name: "ORIGIN_URL",
                reason: "must be an http(s) URL".into(),
            });
        }

        let quota = number("RATE_LIMIT_QUOTA", defaults::RATE_LIMIT_QUOTA, 1..=10_000)?;
        let window = number(
            "RATE_LIMIT_WINDOW_SECS",
            defaults::RATE_LIMIT_WINDOW_SECS,
            1..=86_400,
        )?;
        let rate_limit =
            Policy::new(RATE_LIMIT_POLICY_NAME, quota, window).map_err(|e| ConfigError {
                name: "RATE_LIMIT_WINDOW_SECS",
                reason: e.to_string(),
            })?;
        let order_rate_limit = Policy::new(crate::orders::RATE_POLICY_NAME, quota, window)
            .map_err(|e| ConfigError {
                name: "RATE_LIMIT_WINDOW_SECS",
                reason: e.to_string(),
            })?;

        Ok(Self {
            origin_url,
            rate_limit,
            order_rate_limit,
            in_flight_timeout_secs: number(
                "IDEMPOTENCY_IN_FLIGHT_TIMEOUT_SECS",
                defaults::IDEMPOTENCY_IN_FLIGHT_TIMEOUT_SECS,
                1..=3_600,
            )?,
            retention_secs: number(
                "IDEMPOTENCY_RETENTION_SECS",
                defaults::IDEMPOTENCY_RETENTION_SECS,
                86_400..=30 * 86_400,
            )?,
            origin_timeout_ms: number(
                "ORIGIN_TIMEOUT_MS",
                defaults::ORIGIN_TIMEOUT_MS,
                100..=60_000,
            )?,
            sku_cache_ttl_secs: number(
                "SKU_CACHE_TTL_SECS",
                defaults::SKU_CACHE_TTL_SECS,
                1..=3_600,
            )?,
            sku_facts_ttl_secs: number(
                "SKU_FACTS_TTL_SECS",
                defaults::SKU_FACTS_TTL_SECS,
                60..=30 * 86_400,
            )?,
            sku_missing_ttl_secs: number(
                "SKU_MISSING_TTL_SECS",
                defaults::SKU_MISSING_TTL_SECS,
                1..=300,
            )?,
            schedule_clock_margin_ms: number(
                "SCHEDULE_CLOCK_MARGIN_MS",
                defaults::SCHEDULE_CLOCK_MARGIN_MS,
                0..=60_000,
            )?,
            session_rules: TokenRules {
                max_lifetime_secs: number(
                    "SESSION_MAX_LIFETIME_SECS",
                    defaults::SESSION_MAX_LIFETIME_SECS,
                    60..=30 * 86_400,
                )?,
                issuer: claim("SESSION_ISSUER")?,
                audience: claim("SESSION_AUDIENCE")?,
            },
            session_secrets: ring("SESSION_SECRETS", "SESSION_SECRET")?,
            edge_shared_secrets: ring("EDGE_SHARED_SECRETS", "EDGE_SHARED_SECRET")?,
            admin_tokens: BearerTokens::from_config(
                get("ADMIN_TOKENS").as_deref(),
                get("ADMIN_TOKEN").as_deref(),
                MIN_SECRET_LEN,
            )
            .map_err(secrets_error("ADMIN_TOKENS", "ADMIN_TOKEN"))?,
            room_secrets: optional_ring("ROOM_SECRETS", "ROOM_SECRET")?,
            pow_secrets: optional_ring("POW_SECRETS", "POW_SECRET")?,
            pow_challenge_ttl_secs: number(
                "POW_CHALLENGE_TTL_SECS",
                defaults::POW_CHALLENGE_TTL_SECS,
                10..=3_600,
            )?,
            pow_peak_arrivals_per_sec: number(
                "POW_PEAK_ARRIVALS_PER_SEC",
                defaults::POW_PEAK_ARRIVALS_PER_SEC,
                1..=1_000_000,
            )?,
        })
    }

    /// The rate-limit policy as sent to the Durable Object.
    pub fn rate_settings(&self) -> RateSettings {
        RateSettings {
            name: self.rate_limit.name().to_owned(),
            quota: self.rate_limit.quota(),
            window_secs: self.rate_limit.window_secs(),
        }
    }

    /// The order routes' rate-limit policy as sent to the Durable Object.
    pub fn order_rate_settings(&self) -> RateSettings {
        RateSettings {
            name: self.order_rate_limit.name().to_owned(),
            quota: self.order_rate_limit.quota(),
            window_secs: self.order_rate_limit.window_secs(),
        }
    }

    /// The in-flight timeout in ms. It must outlast an origin call, or a live attempt could be
    /// taken over; [`Settings::from_lookup`] does not enforce it, so it is clamped here.
    pub fn in_flight_timeout_ms(&self) -> i64 {
        (i64::from(self.in_flight_timeout_secs) * 1_000)
            .max(i64::from(self.origin_timeout_ms) + 1_000)
    }
}

#[cfg(test)]
mod tests {
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
}
