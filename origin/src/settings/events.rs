//! The order events' variables (issue 34), parsed once at startup: how long the feed keeps
//! events, the Redis stream they are appended to, and how webhooks are delivered. Read by
//! `crate::events`.

use std::time::Duration;

use clap::ArgAction;
use clap::Args;
use clap::builder::BoolishValueParser;

use super::SettingsError;
use super::values;

/// The variables as declared (see docs/configuration.md).
#[derive(Args)]
pub(super) struct EventsEnvironment {
    /// days events are kept in the feed and the stream, then purged; a cursor older than what is
    /// kept answers 410 `cursor_expired` (1–3650)
    #[arg(long, env = "EVENT_RETENTION_DAYS", default_value = "30", value_parser = values::trimmed::<u32>)]
    event_retention_days: u32,
    /// `redis://` or `rediss://` URL of a Redis that keeps its data (persistence on; never one of
    /// the `REDIS_URLS` Redlock nodes): every event is appended once to the stream
    /// `EVENTS_STREAM_KEY` there, its position as the entry ID ([operations.md](operations.md#the-event-stream)).
    /// Unset: no stream
    #[arg(long, env = "EVENTS_STREAM_URL")]
    events_stream_url: Option<String>,
    /// the stream's key on `EVENTS_STREAM_URL`
    #[arg(long, env = "EVENTS_STREAM_KEY", default_value = "flashgate:events")]
    events_stream_key: String,
    /// webhook deliveries in flight at once per endpoint, across all origin processes (1–1000);
    /// one order's events are always delivered one at a time, in order
    #[arg(long, env = "WEBHOOK_MAX_IN_FLIGHT", default_value = "16", value_parser = values::trimmed::<u32>)]
    webhook_max_in_flight: u32,
    /// how long one webhook delivery may take, from connecting to the last byte of the answer;
    /// longer is a failed attempt (100–60000)
    #[arg(long, env = "WEBHOOK_TIMEOUT_MS", default_value = "15000", value_parser = values::millis)]
    webhook_timeout: Duration,
    /// the delay before each attempt of a webhook delivery, comma-separated (`0`, `250ms`, `5s`,
    /// `5m`, `2h`): by default the Standard Webhooks schedule (about 3 days; each delay but the
    /// first jittered by ±10 %). An endpoint still failing after the last attempt is disabled.
    /// Tests and development shorten it
    #[arg(
        long,
        env = "WEBHOOK_RETRY_SCHEDULE",
        default_value = "0,5s,5m,30m,2h,5h,10h,14h,20h,24h"
    )]
    webhook_retry_schedule: String,
    /// `true` accepts `http://` webhook URLs on any host (development only); otherwise `http://`
    /// only on a loopback host, `https://` everywhere
    #[arg(long, env = "WEBHOOK_ALLOW_HTTP", default_value = "false", action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    webhook_allow_http: bool,
}

/// The events' settings, checked.
#[derive(Debug, Clone)]
pub struct EventSettings {
    /// `EVENT_RETENTION_DAYS`.
    pub retention: Duration,
    /// `EVENTS_STREAM_URL` (`None`: no stream) and `EVENTS_STREAM_KEY`.
    pub stream: Option<StreamSettings>,
    /// `WEBHOOK_*`.
    pub webhooks: WebhookSettings,
}

/// Where the event stream is appended.
#[derive(Clone)]
pub struct StreamSettings {
    /// `EVENTS_STREAM_URL` (may carry a password: never shown).
    pub url: String,
    /// `EVENTS_STREAM_KEY`.
    pub key: String,
}

impl std::fmt::Debug for StreamSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSettings")
            .field("url", &"[REDACTED]")
            .field("key", &self.key)
            .finish()
    }
}

/// How webhooks are delivered.
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// `WEBHOOK_MAX_IN_FLIGHT`.
    pub max_in_flight: u32,
    /// `WEBHOOK_TIMEOUT_MS`.
    pub timeout: Duration,
    /// `WEBHOOK_RETRY_SCHEDULE`: the delay before each attempt (the first is usually 0).
    pub schedule: Vec<Duration>,
    /// `WEBHOOK_ALLOW_HTTP`.
    pub allow_http: bool,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            max_in_flight: 16,
            timeout: Duration::from_secs(15),
            schedule: parse_schedule("0,5s,5m,30m,2h,5h,10h,14h,20h,24h").unwrap_or_default(),
            allow_http: false,
        }
    }
}

fn invalid(name: &'static str, reason: impl Into<String>) -> SettingsError {
    SettingsError::Invalid {
        name,
        reason: reason.into(),
    }
}

/// A retry schedule: comma-separated delays, each a whole number with an optional unit (`ms`,
/// `s`, `m`, `h`; none: seconds), at most 7 days each, 1 to 20 of them.
pub fn parse_schedule(list: &str) -> Result<Vec<Duration>, String> {
    let mut schedule = Vec::new();
    for entry in list.split(',').map(str::trim) {
        let split = entry
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(entry.len());
        let (digits, unit) = entry.split_at(split);
        let n: u64 = digits
            .parse()
            .map_err(|_| format!("{entry:?} is not a delay such as 0, 250ms, 5s, 5m or 2h"))?;
        let delay = match unit {
            "ms" => Duration::from_millis(n),
            "" | "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            _ => return Err(format!("{entry:?}: the unit is ms, s, m or h")),
        };
        if delay > Duration::from_secs(7 * 24 * 3600) {
            return Err(format!("{entry:?} is longer than 7 days"));
        }
        schedule.push(delay);
    }
    if schedule.len() > 20 {
        return Err("at most 20 attempts".into());
    }
    Ok(schedule)
}

impl EventsEnvironment {
    /// The checked settings; `redis_urls` are the Redlock nodes the stream must not be.
    pub(super) fn check(self, redis_urls: &[String]) -> Result<EventSettings, SettingsError> {
        if !(1..=3650).contains(&self.event_retention_days) {
            return Err(invalid("EVENT_RETENTION_DAYS", "must be 1 to 3650"));
        }
        let stream = match self.events_stream_url {
            None => None,
            Some(url) => {
                let url = url.trim().to_owned();
                if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
                    return Err(invalid(
                        "EVENTS_STREAM_URL",
                        "must be a redis:// or rediss:// URL",
                    ));
                }
                if redis_urls.iter().any(|node| same_redis(node, &url)) {
                    return Err(invalid(
                        "EVENTS_STREAM_URL",
                        "must not be one of the REDIS_URLS Redlock nodes (they keep no data across a restart)",
                    ));
                }
                let key = self.events_stream_key.trim().to_owned();
                if key.is_empty() {
                    return Err(invalid("EVENTS_STREAM_KEY", "must not be empty"));
                }
                Some(StreamSettings { url, key })
            }
        };
        if !(1..=1000).contains(&self.webhook_max_in_flight) {
            return Err(invalid("WEBHOOK_MAX_IN_FLIGHT", "must be 1 to 1000"));
        }
        if !(Duration::from_millis(100)..=Duration::from_secs(60)).contains(&self.webhook_timeout) {
            return Err(invalid("WEBHOOK_TIMEOUT_MS", "must be 100 to 60000"));
        }
        let schedule = parse_schedule(&self.webhook_retry_schedule)
            .map_err(|e| invalid("WEBHOOK_RETRY_SCHEDULE", e))?;
        Ok(EventSettings {
            retention: Duration::from_secs(u64::from(self.event_retention_days) * 24 * 3600),
            stream,
            webhooks: WebhookSettings {
                max_in_flight: self.webhook_max_in_flight,
                timeout: self.webhook_timeout,
                schedule,
                allow_http: self.webhook_allow_http,
            },
        })
    }
}

/// Whether two Redis URLs name the same server and database (host, port, database number; the
/// scheme, credentials and options aside).
fn same_redis(a: &str, b: &str) -> bool {
    fn server(url: &str) -> Option<(String, u16, String)> {
        let rest = url.split_once("://")?.1;
        let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
        let rest = rest.split(['?', '#']).next()?;
        let (hostport, db) = rest.split_once('/').unwrap_or((rest, ""));
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || hostport.starts_with('[') => {
                (h.to_owned(), p.parse().ok()?)
            }
            _ => (hostport.to_owned(), 6379),
        };
        let host = match host.to_ascii_lowercase().as_str() {
            "localhost" | "127.0.0.1" | "[::1]" => "loopback".to_owned(),
            h => h.to_owned(),
        };
        let db = if db.is_empty() {
            "0".to_owned()
        } else {
            db.to_owned()
        };
        Some((host, port, db))
    }
    matches!((server(a), server(b)), (Some(x), Some(y)) if x == y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_parse_with_units_and_refuse_nonsense() {
        assert_eq!(
            parse_schedule("0, 250ms,5s,5m,2h").expect("valid"),
            [0, 250, 5000, 300_000, 7_200_000].map(Duration::from_millis)
        );
        assert_eq!(WebhookSettings::default().schedule.len(), 10);
        let total: Duration = WebhookSettings::default().schedule.iter().sum();
        assert_eq!(
            total,
            Duration::from_secs(5 + 300 + 1800 + (2 + 5 + 10 + 14 + 20 + 24) * 3600)
        );
        for bad in ["", "5x", "-1", "8d", "1,,2", "9999h"] {
            assert!(parse_schedule(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_stream_is_never_a_redlock_node() {
        assert!(same_redis(
            "redis://127.0.0.1:6379",
            "redis://localhost:6379/0"
        ));
        assert!(same_redis("redis://:pw@10.0.0.1", "rediss://10.0.0.1:6379"));
        assert!(!same_redis(
            "redis://127.0.0.1:6379",
            "redis://127.0.0.1:6380"
        ));
        assert!(!same_redis(
            "redis://127.0.0.1:6379/0",
            "redis://127.0.0.1:6379/3"
        ));
    }
}
