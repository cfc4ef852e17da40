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
    /// Per-shopper limit of `GET /v1/challenge`: the purchase limit's quota and window, in a bucket
    /// named `challenge` kept per Worker instance (`crate::local_limit`).
    pub challenge_rate_limit: Policy,
    /// Per-shopper limit of the waiting room's joins and polls (`QUEUE_RATE_LIMIT_QUOTA` per
    /// `QUEUE_RATE_LIMIT_WINDOW_SECS`), a bucket named `queue` kept per Worker instance.
    pub queue_rate_limit: Policy,
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
    /// Joins and polls: the room asks for a poll every 1–5 s, so 30 per 10 s leaves a shopper
    /// three times the fastest pace it is asked for.
    pub const QUEUE_RATE_LIMIT_QUOTA: u32 = 30;
    pub const QUEUE_RATE_LIMIT_WINDOW_SECS: u32 = 10;
}

/// Longest `SESSION_ISSUER` / `SESSION_AUDIENCE` accepted.
pub const MAX_CLAIM_SETTING_LEN: usize = 256;

/// The rate-limit policy's name in the `RateLimit` fields.
pub const RATE_LIMIT_POLICY_NAME: &str = "purchase";
/// The name of `GET /v1/challenge`'s per-shopper limit in the `RateLimit` fields.
pub const CHALLENGE_RATE_POLICY_NAME: &str = "challenge";
/// The name of the waiting room's per-shopper limit in the `RateLimit` fields.
pub const QUEUE_RATE_POLICY_NAME: &str = "queue";

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
        let challenge_rate_limit =
            Policy::new(CHALLENGE_RATE_POLICY_NAME, quota, window).map_err(|e| ConfigError {
                name: "RATE_LIMIT_WINDOW_SECS",
                reason: e.to_string(),
            })?;
        let queue_quota = number(
            "QUEUE_RATE_LIMIT_QUOTA",
            defaults::QUEUE_RATE_LIMIT_QUOTA,
            1..=10_000,
        )?;
        let queue_window = number(
            "QUEUE_RATE_LIMIT_WINDOW_SECS",
            defaults::QUEUE_RATE_LIMIT_WINDOW_SECS,
            1..=86_400,
        )?;
        let queue_rate_limit = Policy::new(QUEUE_RATE_POLICY_NAME, queue_quota, queue_window)
            .map_err(|e| ConfigError {
                name: "QUEUE_RATE_LIMIT_WINDOW_SECS",
                reason: e.to_string(),
            })?;

        Ok(Self {
            origin_url,
            rate_limit,
            order_rate_limit,
            challenge_rate_limit,
            queue_rate_limit,
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
mod tests;
