//! Typed configuration, read once from the environment at startup. Every variable is documented
//! in the README's configuration table; secrets are wrapped so they never print.

use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use secrecy::SecretString;

/// Why the environment does not describe a runnable origin.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("environment variable {0} is required")]
    Missing(&'static str),
    #[error("environment variable {name} is invalid: {reason}")]
    Invalid { name: &'static str, reason: String },
}

/// The whole origin configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `DATABASE_URL`: Postgres connection string.
    pub database_url: SecretString,
    /// `REDIS_URLS`: comma-separated `redis://` URLs, one per independent Redlock node.
    pub redis_urls: Vec<String>,
    /// `LISTEN_ADDR`: where the HTTP server binds (default `127.0.0.1:8080`; port 0 = any).
    pub listen_addr: SocketAddr,
    /// `EDGE_SHARED_SECRET`: HMAC key the edge signs purchase requests with.
    pub edge_shared_secret: SecretString,
    /// `ADMIN_TOKEN`: bearer token of the admin API.
    pub admin_token: SecretString,
    /// `REDIS_KEY_PREFIX` (default `flashgate`): namespace of every Redis key of this deployment.
    pub redis_key_prefix: String,
    /// `RUN_MIGRATIONS` (default `true`): apply `origin/migrations` at startup.
    pub run_migrations: bool,
    /// `DB_MAX_CONNECTIONS` (default 16).
    pub db_max_connections: u32,
    /// `DB_ACQUIRE_TIMEOUT_MS` (default 2000): waiting longer for a connection answers 503.
    pub db_acquire_timeout: Duration,
    /// `IDEMPOTENCY_RETENTION_HOURS` (default 24, minimum 24): how long stored outcomes replay.
    pub idempotency_retention: Duration,
    /// `RECONCILE_INTERVAL_SECS` (default 60, 0 = off): how often the server reconciles.
    pub reconcile_interval: Duration,
    /// Purchase pipeline tunables.
    pub purchase: PurchaseSettings,
    /// Connection and request limits of the HTTP server.
    pub http: HttpSettings,
}

/// Limits of the HTTP server: what one client may hold and for how long (see `server`).
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// `HTTP_MAX_CONNECTIONS` (default 4096): open connections served at once. At the cap the
    /// origin closes idle keep-alive connections to make room; otherwise new connections wait in
    /// the listen backlog. Keep `ulimit -n` above it.
    pub max_connections: usize,
    /// `HTTP_HEADER_READ_TIMEOUT_MS` (default 10000): a request head must arrive whole within
    /// this time (from the connection's accept, or from its first byte on a kept-alive
    /// connection); otherwise the connection is closed without an answer.
    pub header_read_timeout: Duration,
    /// `HTTP_BODY_READ_TIMEOUT_MS` (default 10000): a request body must arrive whole within this
    /// time after its head; otherwise 408 `request_timeout`.
    pub body_read_timeout: Duration,
    /// `HTTP_REQUEST_TIMEOUT_MS` (default 30000): a request not answered within this time
    /// answers 503 `unavailable` (a dependency hung); must exceed the body read timeout.
    pub request_timeout: Duration,
    /// `HTTP_KEEPALIVE_TIMEOUT_SECS` (default 960): an idle keep-alive connection is closed after
    /// this long — longer than Cloudflare's 900 s proxy idle timeout, so the edge never reuses a
    /// connection the origin has just closed.
    pub keepalive_timeout: Duration,
    /// `HTTP_MAX_HEADER_BYTES` (default 16384): request header fields (names + values) above
    /// this answer 431 `headers_too_large`. A head above twice this, or with more than 100
    /// fields, is refused by the HTTP parser itself with a bare 431 (no body).
    pub max_header_bytes: usize,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            max_connections: 4096,
            header_read_timeout: Duration::from_millis(10_000),
            body_read_timeout: Duration::from_millis(10_000),
            request_timeout: Duration::from_millis(30_000),
            keepalive_timeout: Duration::from_secs(960),
            max_header_bytes: 16 * 1024,
        }
    }
}

/// Tunables of the per-SKU purchase pipeline.
#[derive(Debug, Clone)]
pub struct PurchaseSettings {
    /// `BATCH_MAX` (default 64): most purchases decided in one transaction. 1 disables batching.
    pub batch_max: usize,
    /// `QUEUE_CAPACITY` (default 4096): queued purchases per SKU per process before shedding.
    pub queue_capacity: usize,
    /// `REQUEST_DEADLINE_MS` (default 3000): a purchase not decided by then answers 503.
    pub request_deadline: Duration,
    /// `LOCK_TTL_MS` (default 2000): Redlock lease length for a SKU.
    pub lock_ttl: Duration,
    /// `COMMIT_BUDGET_MS` (default 250): never start a commit with less lease validity left.
    pub commit_budget: Duration,
    /// `LOCK_MAX_HOLD_MS` (default 200): after this long a holder releases the SKU lock so other
    /// processes get their turn, even with requests still queued.
    pub lock_max_hold: Duration,
    /// `SINGLE_FLIGHT` (default `true`): `false` turns off the combiner (one lock and one
    /// transaction per request) — the benchmark's baseline.
    pub single_flight: bool,
}

impl Default for PurchaseSettings {
    fn default() -> Self {
        Self {
            batch_max: 64,
            queue_capacity: 4096,
            request_deadline: Duration::from_millis(3000),
            lock_ttl: Duration::from_millis(2000),
            commit_budget: Duration::from_millis(250),
            lock_max_hold: Duration::from_millis(200),
            single_flight: true,
        }
    }
}

impl Settings {
    /// Reads the settings from the process environment.
    pub fn from_env() -> Result<Self, SettingsError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the settings through `get` (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let required = |name: &'static str| -> Result<String, SettingsError> {
            get(name)
                .filter(|v| !v.is_empty())
                .ok_or(SettingsError::Missing(name))
        };
        let secret = |name: &'static str| -> Result<SecretString, SettingsError> {
            let v = required(name)?;
            if v.len() < 16 {
                return Err(SettingsError::Invalid {
                    name,
                    reason: "must be at least 16 characters".into(),
                });
            }
            Ok(SecretString::from(v))
        };
        let parsed = |name: &'static str, default: &str| -> Result<String, SettingsError> {
            Ok(get(name)
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| default.to_owned()))
        };
        fn num<T: FromStr>(name: &'static str, raw: String) -> Result<T, SettingsError>
        where
            T::Err: std::fmt::Display,
        {
            raw.trim()
                .parse()
                .map_err(|e: T::Err| SettingsError::Invalid {
                    name,
                    reason: e.to_string(),
                })
        }
        let millis = |name: &'static str, default: &str| -> Result<Duration, SettingsError> {
            Ok(Duration::from_millis(num(name, parsed(name, default)?)?))
        };

        let redis_urls: Vec<String> = required("REDIS_URLS")?
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        if redis_urls.is_empty() {
            return Err(SettingsError::Missing("REDIS_URLS"));
        }
        for url in &redis_urls {
            if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
                return Err(SettingsError::Invalid {
                    name: "REDIS_URLS",
                    reason: "each URL must start with redis:// or rediss://".into(),
                });
            }
        }
        let retention_hours: u64 = num(
            "IDEMPOTENCY_RETENTION_HOURS",
            parsed("IDEMPOTENCY_RETENTION_HOURS", "24")?,
        )?;
        if retention_hours < 24 {
            return Err(SettingsError::Invalid {
                name: "IDEMPOTENCY_RETENTION_HOURS",
                reason: "must be at least 24".into(),
            });
        }
        let boolean = |name: &'static str, default: &str| -> Result<bool, SettingsError> {
            match parsed(name, default)?.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" => Ok(true),
                "false" | "0" | "no" => Ok(false),
                other => Err(SettingsError::Invalid {
                    name,
                    reason: format!("expected true or false, got {other:?}"),
                }),
            }
        };
        let run_migrations = boolean("RUN_MIGRATIONS", "true")?;
        let single_flight = boolean("SINGLE_FLIGHT", "true")?;
        let purchase = PurchaseSettings {
            batch_max: num::<usize>("BATCH_MAX", parsed("BATCH_MAX", "64")?)?.clamp(1, 1000),
            queue_capacity: num::<usize>("QUEUE_CAPACITY", parsed("QUEUE_CAPACITY", "4096")?)?
                .max(1),
            request_deadline: millis("REQUEST_DEADLINE_MS", "3000")?,
            lock_ttl: millis("LOCK_TTL_MS", "2000")?,
            commit_budget: millis("COMMIT_BUDGET_MS", "250")?,
            lock_max_hold: millis("LOCK_MAX_HOLD_MS", "200")?,
            single_flight,
        };
        let http = HttpSettings {
            max_connections: num::<usize>(
                "HTTP_MAX_CONNECTIONS",
                parsed("HTTP_MAX_CONNECTIONS", "4096")?,
            )?
            .clamp(1, 1_000_000),
            header_read_timeout: millis("HTTP_HEADER_READ_TIMEOUT_MS", "10000")?,
            body_read_timeout: millis("HTTP_BODY_READ_TIMEOUT_MS", "10000")?,
            request_timeout: millis("HTTP_REQUEST_TIMEOUT_MS", "30000")?,
            keepalive_timeout: Duration::from_secs(num(
                "HTTP_KEEPALIVE_TIMEOUT_SECS",
                parsed("HTTP_KEEPALIVE_TIMEOUT_SECS", "960")?,
            )?),
            max_header_bytes: num::<usize>(
                "HTTP_MAX_HEADER_BYTES",
                parsed("HTTP_MAX_HEADER_BYTES", "16384")?,
            )?,
        };
        for (name, value) in [
            ("HTTP_HEADER_READ_TIMEOUT_MS", http.header_read_timeout),
            ("HTTP_BODY_READ_TIMEOUT_MS", http.body_read_timeout),
            ("HTTP_KEEPALIVE_TIMEOUT_SECS", http.keepalive_timeout),
        ] {
            if value.is_zero() {
                return Err(SettingsError::Invalid {
                    name,
                    reason: "must be above 0".into(),
                });
            }
        }
        if http.request_timeout <= http.body_read_timeout {
            return Err(SettingsError::Invalid {
                name: "HTTP_REQUEST_TIMEOUT_MS",
                reason: "must be above HTTP_BODY_READ_TIMEOUT_MS".into(),
            });
        }
        if !(1024..=1024 * 1024).contains(&http.max_header_bytes) {
            return Err(SettingsError::Invalid {
                name: "HTTP_MAX_HEADER_BYTES",
                reason: "must be between 1024 and 1048576".into(),
            });
        }
        if purchase.commit_budget >= purchase.lock_ttl {
            return Err(SettingsError::Invalid {
                name: "COMMIT_BUDGET_MS",
                reason: "must be below LOCK_TTL_MS".into(),
            });
        }
        Ok(Self {
            database_url: SecretString::from(required("DATABASE_URL")?),
            redis_urls,
            listen_addr: num("LISTEN_ADDR", parsed("LISTEN_ADDR", "127.0.0.1:8080")?)?,
            edge_shared_secret: secret("EDGE_SHARED_SECRET")?,
            admin_token: secret("ADMIN_TOKEN")?,
            redis_key_prefix: parsed("REDIS_KEY_PREFIX", "flashgate")?,
            run_migrations,
            db_max_connections: num::<u32>(
                "DB_MAX_CONNECTIONS",
                parsed("DB_MAX_CONNECTIONS", "16")?,
            )?
            .max(1),
            db_acquire_timeout: millis("DB_ACQUIRE_TIMEOUT_MS", "2000")?,
            idempotency_retention: Duration::from_secs(retention_hours * 3600),
            reconcile_interval: Duration::from_secs(num(
                "RECONCILE_INTERVAL_SECS",
                parsed("RECONCILE_INTERVAL_SECS", "60")?,
            )?),
            purchase,
            http,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

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
        assert_eq!(s.purchase.batch_max, 64);
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
}
