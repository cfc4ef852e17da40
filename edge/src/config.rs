//! Typed settings, read once per request from the Worker's vars and secrets (see `wrangler.toml`
//! and `.dev.vars.example`). Secrets are wrapped so they never print.

use std::fmt;

use crate::gcra::Policy;
use crate::protocol::RateSettings;

/// A secret value; `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Everything the edge is configured with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Base URL of the origin, without a trailing slash (`ORIGIN_URL`).
    pub origin_url: String,
    /// Per-user purchase rate limit (`RATE_LIMIT_QUOTA` per `RATE_LIMIT_WINDOW_SECS`).
    pub rate_limit: Policy,
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
    /// `SESSION_SECRET`: HS256 key of shopper tokens.
    pub session_secret: Secret,
    /// `EDGE_SHARED_SECRET`: key of `Flashgate-Signature` towards the origin.
    pub edge_shared_secret: Secret,
    /// `ADMIN_TOKEN`: bearer token of `/warmup`.
    pub admin_token: Secret,
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
}

/// The rate-limit policy's name in the `RateLimit` fields.
pub const RATE_LIMIT_POLICY_NAME: &str = "purchase";

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
        let secret = |name: &'static str| -> Result<Secret, ConfigError> {
            match get(name) {
                Some(v) if !v.is_empty() => Ok(Secret::new(v)),
                _ => Err(ConfigError {
                    name,
                    reason: "is required (wrangler secret put / .dev.vars)".into(),
                }),
            }
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

        Ok(Self {
            origin_url,
            rate_limit,
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
            session_secret: secret("SESSION_SECRET")?,
            edge_shared_secret: secret("EDGE_SHARED_SECRET")?,
            admin_token: secret("ADMIN_TOKEN")?,
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
        ("SESSION_SECRET", "s"),
        ("EDGE_SHARED_SECRET", "e"),
        ("ADMIN_TOKEN", "a"),
    ];

    #[test]
    fn defaults_apply_and_the_origin_url_is_normalised() {
        let s = Settings::from_lookup(lookup(&REQUIRED)).expect("valid");
        assert_eq!(s.origin_url, "http://127.0.0.1:3000");
        assert_eq!((s.rate_limit.quota(), s.rate_limit.window_secs()), (5, 10));
        assert_eq!(s.retention_secs, 86_400);
        assert_eq!(s.in_flight_timeout_ms(), 30_000);
        assert!(
            !format!("{s:?}").contains("\"s\""),
            "secrets must not print"
        );
    }

    #[test]
    fn overrides_and_errors() {
        let mut pairs = REQUIRED.to_vec();
        pairs.push(("RATE_LIMIT_QUOTA", "20"));
        pairs.push(("RATE_LIMIT_WINDOW_SECS", "60"));
        let s = Settings::from_lookup(lookup(&pairs)).expect("valid");
        assert_eq!((s.rate_limit.quota(), s.rate_limit.window_secs()), (20, 60));

        for (name, value) in [
            ("RATE_LIMIT_QUOTA", "0"),
            ("RATE_LIMIT_QUOTA", "x"),
            ("IDEMPOTENCY_RETENTION_SECS", "3600"),
            ("ORIGIN_URL", "ftp://x"),
            ("ORIGIN_URL", ""),
            ("SESSION_SECRET", ""),
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
            Err("ADMIN_TOKEN")
        );
    }
}
