//! `GET /v1/skus/{sku}` (served from the Cache API, filled from the origin on a miss; an origin
//! 404 is remembered for `SKU_MISSING_TTL_SECS`), `GET /warmup?sku=…` (admin: fetch each SKU
//! from the origin, prime the cache and the shield), and the purchase path's refresh of a
//! refusing shield bound older than `SKU_CACHE_TTL_SECS` ([`refresh_facts`]).

use futures_util::future::join_all;
use shared::{ErrorCode, Sku};
use worker::{Method, Request};

use crate::cache_policy::{self, CACHE_STATUS_HEADER, OriginView};
use crate::config::Settings;
use crate::reply::Reply;
use crate::shield::SkuFacts;
use crate::warmup::{self, Report};

use super::http::{base_url, header, now_ms, query_pairs};
use super::origin;
use super::sku_cache;

fn unknown_sku(settings: &Settings, cache_status: &str) -> Reply {
    Reply::problem(ErrorCode::UnknownSku, "no sale for this SKU")
        .with_header(
            "cache-control",
            cache_policy::cache_control(settings.sku_missing_ttl_secs),
        )
        .with_header(CACHE_STATUS_HEADER, cache_status)
}

/// The body of a cached "unknown SKU" mark (only its presence matters).
const MISSING_MARK: &str = r#"{"missing":true}"#;

fn view_reply(body: String, settings: &Settings, cache_status: &str) -> Reply {
    Reply::json(200, body)
        .with_header(
            "cache-control",
            cache_policy::cache_control(settings.sku_cache_ttl_secs),
        )
        .with_header(CACHE_STATUS_HEADER, cache_status)
}

/// Fetches `sku`'s view from the origin (no caching here).
async fn fetch_view(settings: &Settings, sku: &Sku) -> (OriginView, Option<String>) {
    let url = format!("{}/v1/skus/{sku}", settings.origin_url);
    match origin::send(Method::Get, &url, &[], None, settings.origin_timeout_ms).await {
        Ok(r) => {
            let view = cache_policy::classify_view(sku, r.status, &r.body);
            (view, String::from_utf8(r.body).ok())
        }
        Err(e) => {
            worker::console_warn!("sku view fetch: {e}");
            (OriginView::Unavailable, None)
        }
    }
}

/// `GET /v1/skus/{sku}`.
pub(crate) async fn view(req: &Request, settings: &Settings, raw_sku: &str) -> Reply {
    let Ok(sku) = Sku::parse(raw_sku) else {
        return Reply::problem(
            ErrorCode::InvalidRequest,
            shared::DomainError::InvalidSku.to_string(),
        );
    };
    let base = base_url(req);
    let view_key = cache_policy::view_key(&base, &sku);
    if let Some(body) = sku_cache::get_text(&view_key).await {
        return view_reply(body, settings, "HIT");
    }
    let missing_key = cache_policy::missing_key(&base, &sku);
    if sku_cache::get_text(&missing_key).await.is_some() {
        return unknown_sku(settings, "HIT");
    }
    match fetch_and_fold(settings, &base, &sku).await {
        Fetched::Found { body, .. } => view_reply(body, settings, "MISS"),
        Fetched::Missing => {
            sku_cache::put_json(&missing_key, MISSING_MARK, settings.sku_missing_ttl_secs).await;
            unknown_sku(settings, "MISS")
        }
        Fetched::Failed => crate::forward::unavailable(),
    }
}

/// A view fetched from the origin and folded into the cache.
enum Fetched {
    /// The view (now cached) and the facts as written with it.
    Found {
        body: String,
        facts: SkuFacts,
    },
    Missing,
    Failed,
}

/// Fetches `sku`'s view from the origin; when found, caches it and folds it into the shield facts
/// ([`SkuFacts::with_fresh_view`]: may raise the bound, confirms it).
async fn fetch_and_fold(settings: &Settings, base: &str, sku: &Sku) -> Fetched {
    let sent_ms = now_ms();
    match fetch_view(settings, sku).await {
        (OriginView::Found(view), Some(body)) => {
            let view_key = cache_policy::view_key(base, sku);
            sku_cache::put_json(&view_key, &body, settings.sku_cache_ttl_secs).await;
            let facts_key = cache_policy::facts_key(base, sku);
            // Re-read just before writing: the narrowest window for a concurrent writer.
            let facts =
                sku_cache::get_facts(&facts_key)
                    .await
                    .with_fresh_view(&view, sent_ms, now_ms());
            sku_cache::put_facts(&facts_key, &facts, settings.sku_facts_ttl_secs).await;
            Fetched::Found { body, facts }
        }
        (OriginView::Missing, _) => Fetched::Missing,
        _ => Fetched::Failed,
    }
}

/// The purchase path's refresh of `facts` (read under `facts_key`), which would refuse the
/// purchase but are older than `SKU_CACHE_TTL_SECS` ([`SkuFacts::needs_refresh`]): claims the
/// refresh (so this data center's other purchases keep the bound for one more period instead of
/// all fetching), then fetches the view from the origin and folds it in. Returns the facts to
/// decide with: the refreshed ones, or the claimed ones if the origin could not be had.
pub(crate) async fn refresh_facts(
    settings: &Settings,
    base: &str,
    sku: &Sku,
    facts: SkuFacts,
) -> SkuFacts {
    let facts_key = cache_policy::facts_key(base, sku);
    let claimed = facts.refresh_claimed(now_ms());
    sku_cache::put_facts(&facts_key, &claimed, settings.sku_facts_ttl_secs).await;
    match fetch_and_fold(settings, base, sku).await {
        Fetched::Found { facts, .. } => facts,
        Fetched::Missing | Fetched::Failed => claimed,
    }
}

/// `facts` with the sale's waiting room and bot defences known ([`SkuFacts::room`],
/// [`SkuFacts::defences`]): as cached, or after fetching the view when no view (since they
/// existed) was folded in yet.
pub(crate) enum SaleKnown {
    Known(SkuFacts),
    /// The origin has no sale for this SKU.
    Missing,
    /// The origin could not be asked.
    Failed,
}

pub(crate) async fn known_sale(
    settings: &Settings,
    base: &str,
    sku: &Sku,
    facts: SkuFacts,
) -> SaleKnown {
    if facts.room.is_some() && facts.defences.is_some() {
        return SaleKnown::Known(facts);
    }
    match fetch_and_fold(settings, base, sku).await {
        Fetched::Found { facts, .. } => SaleKnown::Known(facts),
        Fetched::Missing => SaleKnown::Missing,
        Fetched::Failed => SaleKnown::Failed,
    }
}

/// `GET /warmup?sku=A&sku=B…` with the admin bearer token.
pub(crate) async fn warmup(req: &Request, settings: &Settings) -> Reply {
    if !warmup::authorized(
        header(req, "authorization").as_deref(),
        &settings.admin_tokens,
    ) {
        return warmup::unauthorized();
    }
    let skus = match warmup::skus(&query_pairs(req)) {
        Ok(skus) => skus,
        Err(reply) => return reply,
    };
    let base = base_url(req);
    let fetched = join_all(skus.iter().map(|sku| fetch_view(settings, sku))).await;

    let mut report = Report::default();
    let mut failed = false;
    for (sku, fetched) in skus.iter().zip(fetched) {
        let view_key = cache_policy::view_key(&base, sku);
        let facts_key = cache_policy::facts_key(&base, sku);
        let missing_key = cache_policy::missing_key(&base, sku);
        match fetched {
            (OriginView::Found(view), Some(body)) => {
                sku_cache::put_json(&view_key, &body, settings.sku_cache_ttl_secs).await;
                sku_cache::put_facts(
                    &facts_key,
                    &SkuFacts::from_warmup(&view, now_ms()),
                    settings.sku_facts_ttl_secs,
                )
                .await;
                sku_cache::delete(&missing_key).await;
                if view.stock <= 0 {
                    report.sold_out.push(sku.to_string());
                }
                report.warmed.push(sku.to_string());
            }
            (OriginView::Missing, _) => {
                sku_cache::delete(&view_key).await;
                sku_cache::delete(&facts_key).await;
                sku_cache::put_json(&missing_key, MISSING_MARK, settings.sku_missing_ttl_secs)
                    .await;
                report.missing.push(sku.to_string());
            }
            _ => failed = true,
        }
    }
    if failed {
        return crate::forward::unavailable();
    }
    report.to_reply()
}
