//! The Worker's `fetch` event: route, read the settings, dispatch. Every path ends in a
//! [`Reply`]; only a failure to build the response object itself could surface as an error.

use shared::ErrorCode;
use shared::headers::REQUEST_ID;
use worker::{Context, Env, Request, Response, event};

use crate::reply::Reply;
use crate::request_id::RequestId;
use crate::routes::{self, Route};

use super::http::{self, to_response};
use super::room::{self, QueueAction};
use super::{defences, orders, purchase, skus};
use crate::orders::OrderAction;

#[event(fetch)]
async fn fetch(mut req: Request, env: Env, ctx: Context) -> worker::Result<Response> {
    let id = RequestId::choose(
        http::header(&req, REQUEST_ID).as_deref(),
        http::header(&req, "cf-ray").as_deref(),
        http::random_u64_pair,
    );
    let reply = handle(&mut req, &env, &ctx, &id).await;
    to_response(reply.with_header(REQUEST_ID, id.as_str()))
}

async fn handle(req: &mut Request, env: &Env, ctx: &Context, id: &RequestId) -> Reply {
    let method = req.method().to_string();
    let route = routes::route(&method, &req.path());
    if let Some(reply) = routes::static_reply(&route) {
        return reply;
    }
    let settings = match http::settings(env) {
        Ok(settings) => settings,
        Err(e) => {
            // An operator's error: the reason goes to the logs only.
            worker::console_error!("edge misconfigured: {e}");
            return routes::misconfigured();
        }
    };
    match route {
        Route::Readyz => routes::ready(),
        Route::Purchase => purchase::handle(req, env, ctx, &settings, id).await,
        Route::SkuView(sku) => skus::view(req, &settings, &sku).await,
        Route::Order(order) => {
            orders::handle(req, env, &settings, &order, OrderAction::View, id).await
        }
        Route::OrderCancel(order) => {
            orders::handle(req, env, &settings, &order, OrderAction::Cancel, id).await
        }
        Route::Warmup => skus::warmup(req, &settings).await,
        Route::QueueJoin(sku) => {
            room::handle(req, env, ctx, &settings, &sku, QueueAction::Join).await
        }
        Route::QueuePoll(sku) => {
            room::handle(req, env, ctx, &settings, &sku, QueueAction::Poll).await
        }
        Route::Challenge => defences::challenge(req, &settings).await,
        Route::QueueStats(sku) => room::stats(req, env, &settings, &sku).await,
        Route::Healthz
        | Route::OpenApi
        | Route::SalePage(_)
        | Route::SaleWorker
        | Route::MethodNotAllowed(_)
        | Route::NotFound => Reply::problem(ErrorCode::NotFound, "no such route"),
    }
}
