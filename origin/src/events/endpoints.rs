//! The webhook endpoints' admin API behind `routes::webhooks`: each request body parsed once
//! into a checked value ([`WebhookUrl`], the types), then one store call
//! (`store::webhooks`), answered as an [`EndpointView`]. The secret (`whsec_…`) is made here and
//! shown only in the answers of a creation and a rotation; nothing logs it.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};
use sqlx::PgPool;
use uuid::Uuid;

use super::signing;
use super::wire::TYPES;
use crate::orders::rfc3339;
use crate::settings::WebhookSettings;
use crate::store::StoreError;
use crate::store::events::{PageError, Position};
use crate::store::webhooks::{self as store, EndpointPatch, EndpointRow, NewEndpoint, ReplayRange};

/// How long the previous secret keeps signing after a rotation.
pub const ROTATION_OVERLAP: Duration = Duration::from_secs(24 * 3600);
/// Longest URL accepted.
const MAX_URL: usize = 2048;
/// Longest description accepted.
const MAX_DESCRIPTION: usize = 1024;

/// Why an endpoint request was refused.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The body is not what the API takes (400 `invalid_request`).
    #[error("{0}")]
    Invalid(String),
    /// No such endpoint (404 `webhook_not_found`).
    #[error("no such webhook endpoint")]
    NotFound,
    /// A replay's `after` is older than what is kept (410 `cursor_expired`).
    #[error("the cursor {after} is older than the oldest event kept (after {horizon})")]
    CursorExpired { after: Position, horizon: Position },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<PageError> for EndpointError {
    fn from(e: PageError) -> Self {
        match e {
            PageError::CursorExpired { after, horizon } => Self::CursorExpired { after, horizon },
            PageError::Store(e) => Self::Store(e),
        }
    }
}

fn invalid(detail: impl Into<String>) -> EndpointError {
    EndpointError::Invalid(detail.into())
}

/// A webhook URL, checked: `https://`, or `http://` on a loopback host (any host with
/// `WEBHOOK_ALLOW_HTTP`); a host; no credentials; at most 2048 characters.
#[derive(Debug, Clone)]
pub struct WebhookUrl(String);

impl WebhookUrl {
    pub fn parse(raw: &str, allow_http: bool) -> Result<Self, EndpointError> {
        if raw.len() > MAX_URL {
            return Err(invalid(format!(
                "field `url`: longer than {MAX_URL} characters"
            )));
        }
        let url =
            url::Url::parse(raw).map_err(|e| invalid(format!("field `url`: not a URL ({e})")))?;
        let host = url.host().ok_or_else(|| invalid("field `url`: no host"))?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid(
                "field `url`: credentials in the URL are not accepted",
            ));
        }
        let loopback = match host {
            url::Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
            url::Host::Ipv4(ip) => ip.is_loopback(),
            url::Host::Ipv6(ip) => ip.is_loopback(),
        };
        match url.scheme() {
            "https" => {}
            "http" if loopback || allow_http => {}
            "http" => {
                return Err(invalid(
                    "field `url`: http:// only on a loopback host (or with WEBHOOK_ALLOW_HTTP=true, in development); use https://",
                ));
            }
            other => {
                return Err(invalid(format!(
                    "field `url`: scheme {other:?} (https only)"
                )));
            }
        }
        let url: String = url.into();
        // As stored: normalization percent-encodes, which may lengthen it.
        if url.len() > MAX_URL {
            return Err(invalid(format!(
                "field `url`: longer than {MAX_URL} characters"
            )));
        }
        Ok(Self(url))
    }
}

/// The subscribed types as the API shows them: `["*"]` for every type (stored as none).
fn shown_types(types: Option<Vec<String>>) -> Vec<String> {
    types.unwrap_or_else(|| vec!["*".to_owned()])
}

/// The `types` of a body: `None` for every type (`["*"]`), else the listed known types.
fn parse_types(types: Vec<String>) -> Result<Option<Vec<String>>, EndpointError> {
    if types.is_empty() {
        return Err(invalid(
            "field `types`: at least one type, or [\"*\"] (or no field) for every type",
        ));
    }
    if types.iter().any(|t| t == "*") {
        return if types.len() == 1 {
            Ok(None)
        } else {
            Err(invalid("field `types`: \"*\" stands alone"))
        };
    }
    let mut known: Vec<String> = Vec::with_capacity(types.len());
    for t in types {
        if !TYPES.contains(&t.as_str()) {
            return Err(invalid(format!(
                "field `types`: unknown event type {t:?} (one of {})",
                TYPES.join(", ")
            )));
        }
        if !known.contains(&t) {
            known.push(t);
        }
    }
    Ok(Some(known))
}

fn parse_description(d: Option<String>) -> Result<Option<String>, EndpointError> {
    match d {
        Some(d) if d.chars().count() > MAX_DESCRIPTION => Err(invalid(format!(
            "field `description`: longer than {MAX_DESCRIPTION} characters"
        ))),
        Some(d) if d.contains('\0') => Err(invalid("field `description`: a NUL character")),
        other => Ok(other),
    }
}

/// `Some(value)` for a field that is present, `null` included (`Some(None)`).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// `POST /v1/admin/webhooks` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateEndpoint {
    /// Where events are POSTed: `https://…` (`http://` on a loopback host only).
    pub url: String,
    /// The event types to deliver; absent or `["*"]`: every type.
    #[serde(default)]
    pub types: Option<Vec<String>>,
    /// Free text for the shop's own use (at most 1024 characters).
    #[serde(default)]
    pub description: Option<String>,
}

/// `PATCH /v1/admin/webhooks/{id}` body: only the fields to change.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchEndpoint {
    /// `false` stops deliveries (they wait); `true` resumes them, in order, with a fresh retry
    /// schedule.
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default)]
    pub url: Option<String>,
    /// The event types; `["*"]` for every type.
    #[serde(default)]
    pub types: Option<Vec<String>>,
    /// `null` clears it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub description: Option<Option<String>>,
}

/// `POST /v1/admin/webhooks/{id}/replay` body: `after` or `since` (with an optional `until`).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// Re-deliver the events after this feed cursor.
    #[serde(default)]
    pub after: Option<String>,
    /// Re-deliver the events made at or after this instant (RFC 3339)…
    #[serde(default)]
    pub since: Option<String>,
    /// …and before this one (RFC 3339; absent: up to now).
    #[serde(default)]
    pub until: Option<String>,
}

/// An endpoint as the API shows it (never its secret).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EndpointView {
    pub id: String,
    pub url: String,
    /// The event types delivered; `["*"]`: every type.
    pub types: Vec<String>,
    pub description: Option<String>,
    pub enabled: bool,
    /// Why it is disabled: `failing` (still failing after the last retry), `gone` (it answered
    /// 410) or `manual`; `null` while enabled.
    pub disabled_reason: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// Deliveries not yet acknowledged (they wait while the endpoint is disabled).
    pub pending: i64,
    /// Seconds since the oldest of them was made; `null` when none waits.
    pub oldest_pending_age_secs: Option<f64>,
    /// The last failed attempt's error, and when (written at most every 100 ms per origin
    /// process).
    pub last_error: Option<String>,
    pub last_error_at: Option<String>,
    /// Since when its deliveries fail: the first attempt of the oldest waiting delivery that
    /// failed; `null` when none of those waiting has failed.
    pub failing_since: Option<String>,
    /// After a rotation: until when the previous secret still signs beside the new one.
    pub previous_secret_expires_at: Option<String>,
}

/// An endpoint with its secret: the answer of a creation and of a rotation, the only two.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EndpointWithSecret {
    #[serde(flatten)]
    pub endpoint: EndpointView,
    /// `whsec_` + base64 of the 32-byte HMAC key: give it to the receiver's Standard Webhooks
    /// library. Shown only here.
    pub secret: String,
}

impl From<EndpointRow> for EndpointView {
    fn from(r: EndpointRow) -> Self {
        let now = chrono::Utc::now();
        Self {
            id: r.id.to_string(),
            url: r.url,
            types: shown_types(r.types),
            description: r.description,
            enabled: r.enabled,
            disabled_reason: r.disabled_reason,
            created_at: rfc3339(r.created_at),
            updated_at: rfc3339(r.updated_at),
            pending: r.pending,
            oldest_pending_age_secs: r
                .oldest_pending
                .map(|at| (now - at).num_milliseconds().max(0) as f64 / 1000.0),
            last_error: r.last_error,
            last_error_at: r.last_error_at.map(rfc3339),
            failing_since: r.failing_since.map(rfc3339),
            previous_secret_expires_at: r.previous_until.map(rfc3339),
        }
    }
}

/// The endpoints' admin operations; cheap to clone.
#[derive(Debug, Clone)]
pub struct Endpoints {
    pool: PgPool,
    allow_http: bool,
}

fn json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, EndpointError> {
    serde_json::from_slice(body).map_err(|e| invalid(format!("body: {e}")))
}

impl Endpoints {
    pub fn new(pool: PgPool, settings: &WebhookSettings) -> Self {
        Self {
            pool,
            allow_http: settings.allow_http,
        }
    }

    /// Creates an endpoint from a `POST` body; it receives the events committed from now on.
    pub async fn create(&self, body: &[u8]) -> Result<EndpointWithSecret, EndpointError> {
        let new: CreateEndpoint = json(body)?;
        let url = WebhookUrl::parse(&new.url, self.allow_http)?;
        let types = new.types.map(parse_types).transpose()?.flatten();
        let description = parse_description(new.description)?;
        let key = signing::new_key();
        let row = store::create(
            &self.pool,
            NewEndpoint {
                id: Uuid::now_v7(),
                url: &url.0,
                types: types.as_deref(),
                description: description.as_deref(),
                secret: &key,
            },
        )
        .await?;
        tracing::info!(endpoint = %row.id, url = %row.url, "webhook endpoint created");
        Ok(EndpointWithSecret {
            endpoint: row.into(),
            secret: signing::whsec(&key),
        })
    }

    pub async fn list(&self) -> Result<Vec<EndpointView>, EndpointError> {
        Ok(store::list(&self.pool)
            .await?
            .into_iter()
            .map(Into::into)
            .collect())
    }

    pub async fn get(&self, id: Uuid) -> Result<EndpointView, EndpointError> {
        store::get(&self.pool, id)
            .await?
            .map(Into::into)
            .ok_or(EndpointError::NotFound)
    }

    /// Changes what a `PATCH` body names.
    pub async fn update(&self, id: Uuid, body: &[u8]) -> Result<EndpointView, EndpointError> {
        let patch: PatchEndpoint = json(body)?;
        let url = patch
            .url
            .as_deref()
            .map(|u| WebhookUrl::parse(u, self.allow_http))
            .transpose()?;
        let types = patch.types.map(parse_types).transpose()?;
        let description = patch.description.map(parse_description).transpose()?;
        let row = store::update(
            &self.pool,
            id,
            EndpointPatch {
                url: url.as_ref().map(|u| u.0.as_str()),
                types: types.as_ref().map(|t| t.as_deref()),
                description: description.as_ref().map(|d| d.as_deref()),
                enabled: patch.enabled,
            },
        )
        .await?
        .ok_or(EndpointError::NotFound)?;
        tracing::info!(endpoint = %row.id, enabled = row.enabled, url = %row.url, "webhook endpoint changed");
        Ok(row.into())
    }

    pub async fn delete(&self, id: Uuid) -> Result<(), EndpointError> {
        if store::delete(&self.pool, id).await? {
            tracing::info!(endpoint = %id, "webhook endpoint deleted");
            Ok(())
        } else {
            Err(EndpointError::NotFound)
        }
    }

    /// A new secret; the current one keeps signing beside it for [`ROTATION_OVERLAP`].
    pub async fn rotate(&self, id: Uuid) -> Result<EndpointWithSecret, EndpointError> {
        let key = signing::new_key();
        let row = store::rotate(&self.pool, id, &key, ROTATION_OVERLAP)
            .await?
            .ok_or(EndpointError::NotFound)?;
        tracing::info!(endpoint = %id, "webhook endpoint secret rotated");
        Ok(EndpointWithSecret {
            endpoint: row.into(),
            secret: signing::whsec(&key),
        })
    }

    /// Queues the events a `replay` body names for delivery to the endpoint again; how many.
    pub async fn replay(&self, id: Uuid, body: &[u8]) -> Result<u64, EndpointError> {
        let request: ReplayRequest = json(body)?;
        let instant = |field: &str, raw: &str| {
            shared::Timestamp::parse(raw)
                .ok()
                .and_then(|t| chrono::DateTime::from_timestamp_millis(t.unix_ms()))
                .ok_or_else(|| invalid(format!("field `{field}`: not an RFC 3339 date-time")))
        };
        let range = match (request.after, request.since, request.until) {
            (Some(after), None, None) => ReplayRange::After(
                after
                    .parse()
                    .map_err(|e| invalid(format!("field `after`: {e}")))?,
            ),
            (None, Some(since), until) => {
                let since = instant("since", &since)?;
                let until = until.map(|u| instant("until", &u)).transpose()?;
                if until.is_some_and(|u| u <= since) {
                    return Err(invalid("field `until`: must be after `since`"));
                }
                ReplayRange::Between { since, until }
            }
            _ => {
                return Err(invalid(
                    "a replay takes `after` (a feed cursor), or `since` with an optional `until`",
                ));
            }
        };
        let queued = store::replay(&self.pool, id, range)
            .await?
            .ok_or(EndpointError::NotFound)?;
        tracing::info!(endpoint = %id, queued, "webhook replay queued");
        Ok(queued)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_https_or_loopback_http() {
        for ok in [
            "https://shop.example/hooks",
            "http://127.0.0.1:8080/h",
            "http://localhost/h",
            "http://[::1]:9/h",
        ] {
            assert!(WebhookUrl::parse(ok, false).is_ok(), "{ok}");
        }
        for bad in [
            "http://shop.example/h",
            "ftp://shop.example/",
            "https://user:pw@shop.example/",
            "not a url",
            "https://",
            &format!("https://shop.example/{}", "é".repeat(400)),
        ] {
            assert!(WebhookUrl::parse(bad, false).is_err(), "{bad}");
        }
        assert!(WebhookUrl::parse("http://shop.example/h", true).is_ok());
        assert!(parse_description(Some("a\0b".into())).is_err());
    }

    #[test]
    fn types_are_known_deduplicated_or_every_one() {
        let s = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(parse_types(s(&["*"])).expect("all"), None);
        assert_eq!(
            parse_types(s(&["order.paid", "order.paid", "sku.sold_out"])).expect("known"),
            Some(s(&["order.paid", "sku.sold_out"]))
        );
        for bad in [s(&[]), s(&["order.shipped"]), s(&["*", "order.paid"])] {
            assert!(parse_types(bad).is_err());
        }
    }
}
