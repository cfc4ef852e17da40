//! The event feed: `GET /v1/events` (a page of events after a cursor) and `GET /v1/events/{id}`
//! (one event), admin token only — never reachable through the edge. Parse, then one read of
//! the store's outbox (`store::events`), rendered by `crate::events::Event`.

use axum::Json;
use axum::extract::{Path, RawQuery, State};
use serde::Serialize;
use shared::ErrorCode;

use super::AppState;
use super::extract::AdminToken;
use super::skus::store_error;
use crate::events::{self, Event};
use crate::problem::ApiError;
use crate::store::events::{self as store, PageError, Position};

/// Most events in one page.
pub(crate) const MAX_LIMIT: u32 = 1000;
/// Events in a page when `limit` is absent.
pub(crate) const DEFAULT_LIMIT: u32 = 100;

/// A page of the feed.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct EventPage {
    /// The events after the cursor, oldest first.
    pub(crate) data: Vec<Event>,
    /// The cursor of the next page (`after=`): the last event's position, or — when no event of
    /// the requested types is left — the newest position every reader can see.
    pub(crate) next: String,
    /// Whether more events of the requested types can be read at once.
    pub(crate) has_more: bool,
}

/// The feed's query: `after`, `limit`, `type` (repeatable).
#[derive(Debug, Default)]
struct FeedQuery {
    after: Option<Position>,
    limit: u32,
    types: Vec<String>,
}

fn invalid(detail: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, detail)
}

impl FeedQuery {
    fn parse(raw: Option<&str>) -> Result<Self, ApiError> {
        let mut q = Self {
            limit: DEFAULT_LIMIT,
            ..Self::default()
        };
        let (mut seen_after, mut seen_limit) = (false, false);
        for (name, value) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
            match name.as_ref() {
                "after" if !seen_after => {
                    seen_after = true;
                    q.after = Some(
                        value
                            .parse()
                            .map_err(|e| invalid(format!("query `after`: {e}")))?,
                    );
                }
                "limit" if !seen_limit => {
                    seen_limit = true;
                    q.limit = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_LIMIT).contains(n))
                        .ok_or_else(|| {
                            invalid(format!("query `limit`: an integer in 1..={MAX_LIMIT}"))
                        })?;
                }
                "type" => {
                    if !events::TYPES.contains(&value.as_ref()) {
                        return Err(invalid(format!(
                            "query `type`: unknown event type {value:?} (one of {})",
                            events::TYPES.join(", ")
                        )));
                    }
                    if !q.types.iter().any(|t| *t == value) {
                        q.types.push(value.into_owned());
                    }
                }
                "after" | "limit" => {
                    return Err(invalid(format!("query `{name}` given twice")));
                }
                other => {
                    return Err(invalid(format!(
                        "unknown query parameter {other:?} (after, limit, type)"
                    )));
                }
            }
        }
        Ok(q)
    }
}

/// A feed read's failure as an answer.
pub(crate) fn page_error(e: PageError) -> ApiError {
    match e {
        PageError::CursorExpired { after, horizon } => ApiError::new(
            ErrorCode::CursorExpired,
            format!(
                "events after {after} were purged (EVENT_RETENTION_DAYS); the oldest kept come after {horizon}: page again without `after`"
            ),
        ),
        PageError::Store(e) => store_error(e),
    }
}

/// The event feed: events after `after`, oldest first.
///
/// Every order change and SKU sell-out writes its event in the transaction that makes it; the
/// feed shows an event once every transaction that could come before it has finished, so a
/// consumer that pages with `after=<next>` never misses one — even one whose transaction
/// committed after a later-numbered one. Events are kept `EVENT_RETENTION_DAYS` (30 by default).
#[utoipa::path(
    get, path = "/v1/events", tag = "events",
    params(
        ("after" = Option<String>, Query, description = "A cursor: the `next` of the previous page, or an event's `position`. Absent: from the oldest event kept"),
        ("limit" = Option<u32>, Query, description = "1..=1000 events, 100 when absent"),
        ("type" = Option<Vec<String>>, Query, description = "Only these types (repeat the parameter for several): order.created, order.paid, order.cancelled, order.expired, order.refunded, order.refund_due, sku.sold_out, sku.back_on_sale"),
    ),
    security(("admin_token" = [])),
    responses(
        (status = 200, body = EventPage),
        (status = 400, description = "`invalid_request`: a malformed cursor, a limit out of range, an unknown type or parameter", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 410, description = "`cursor_expired`: the events after this cursor were purged; page again from the oldest kept (no `after`)", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`, with Retry-After", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn list(
    State(app): State<AppState>,
    _: AdminToken,
    RawQuery(raw): RawQuery,
) -> Result<Json<EventPage>, ApiError> {
    let q = FeedQuery::parse(raw.as_deref())?;
    let types = (!q.types.is_empty()).then_some(q.types.as_slice());
    let page = store::page(&app.pool, q.after, q.limit, types)
        .await
        .map_err(page_error)?;
    Ok(Json(EventPage {
        data: page.events.iter().map(Event::render).collect(),
        next: page.next.to_string(),
        has_more: page.has_more,
    }))
}

/// One event by its id, while it is kept.
#[utoipa::path(
    get, path = "/v1/events/{id}", tag = "events",
    params(("id" = String, Path, description = "`evt_` + 32 hex digits")),
    security(("admin_token" = [])),
    responses(
        (status = 200, body = Event),
        (status = 400, description = "`invalid_request`: not an event id", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "`event_not_found`: no such event, or purged", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`, with Retry-After", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn get(
    State(app): State<AppState>,
    _: AdminToken,
    Path(raw): Path<String>,
) -> Result<Json<Event>, ApiError> {
    let id = events::parse_id(&raw)
        .ok_or_else(|| invalid("an event id is `evt_` followed by 32 hex digits"))?;
    match store::by_id(&app.pool, id).await.map_err(store_error)? {
        Some(row) => Ok(Json(Event::render(&row))),
        None => Err(ApiError::new(
            ErrorCode::EventNotFound,
            format!("no event {raw} (or it was purged after EVENT_RETENTION_DAYS)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_is_parsed_strictly() {
        let q = FeedQuery::parse(Some(
            "after=12-3&limit=7&type=order.paid&type=sku.sold_out&type=order.paid",
        ))
        .expect("valid");
        assert_eq!(q.after, Some(Position { commit: 12, seq: 3 }));
        assert_eq!(q.limit, 7);
        assert_eq!(q.types, ["order.paid", "sku.sold_out"]);
        let q = FeedQuery::parse(None).expect("empty");
        assert_eq!((q.after, q.limit, q.types.len()), (None, DEFAULT_LIMIT, 0));
        for bad in [
            "after=12",
            "after=-3",
            "after=a-b",
            "after=1-2&after=1-3",
            "limit=0",
            "limit=1001",
            "limit=x",
            "type=order.shipped",
            "cursor=1-2",
        ] {
            let e = FeedQuery::parse(Some(bad)).expect_err(bad);
            assert_eq!(e.code(), ErrorCode::InvalidRequest, "{bad}");
        }
    }
}
