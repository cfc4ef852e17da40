//! The Worker's `fetch` event: route, read the settings, dispatch. Every path ends in a
//! [`Reply`]; only a failure to build the response object itself could surface as an error.

use shared::ErrorCode;
use worker::{Context, Env, Request, Response, event};

use crate::reply::Reply;
use crate::routes::{self, Route};

use super::http::{self, to_response};
use super::{purchase, skus};

#[event(fetch)]
async fn fetch(mut req: Request, env: Env, _ctx: Context) -> worker::Result<Response> {
    to_response(handle(&mut req, &env).await)
}

async fn handle(req: &mut Request, env: &Env) -> Reply {
    let method = req.method().to_string();
    let route = routes::route(&method, &req.path());
    if let Some(reply) = routes::static_reply(&route) {
        return reply;
    }
    let settings = match http::settings(env) {
        Ok(settings) => settings,
        Err(e) => {
            // An operator error, not a client's or a dependency's: say so in the logs only.
            worker::console_error!("edge misconfigured: {e}");
            return Reply::problem(ErrorCode::Internal, "the edge is misconfigured");
        }
    };
    match route {
        Route::Purchase => purchase::handle(req, env, &settings).await,
        Route::SkuView(sku) => skus::view(req, &settings, &sku).await,
        Route::Warmup => skus::warmup(req, &settings).await,
        Route::Healthz | Route::OpenApi | Route::MethodNotAllowed(_) | Route::NotFound => {
            Reply::problem(ErrorCode::NotFound, "no such route")
        }
    }
}
