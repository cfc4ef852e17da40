//! Servers `bench compare` starts beside (or instead of) the origin, as targets for the same
//! shoppers: `bench serve-ceiling` ([`ceiling`]) and `bench serve-redis-lua` ([`redis_lua`]). On
//! the request path they sit where the origin sits: the shoppers (signing as the edge) call them
//! directly.
//!
//! They run on the origin's HTTP stack — axum routes on hyper's HTTP/1.1 server (keep-alive,
//! `TCP_NODELAY`) on the multi-threaded tokio runtime, listening with the origin's 4,096-deep
//! accept queue so a burst of cold connects is queued, not dropped — without the origin's
//! connection cap and per-phase time limits, which only make the origin slower. Answers use the
//! origin's contract: [`edge`] checks the edge signature with `shared::signing` as the origin
//! does, and every refusal is an RFC 9457 problem with the contract's stable `code`.

pub(crate) mod ceiling;
pub(crate) mod edge;
pub(crate) mod redis_lua;

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use shared::{ErrorCode, Problem};
use tokio::net::{TcpListener, TcpSocket};
use tower::ServiceExt;

/// Connections the kernel queues for `accept`, as the origin's (`origin/src/server/mod.rs`).
const LISTEN_BACKLOG: u32 = 4096;
/// Pause after a failed accept (e.g. out of file descriptors) before trying again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Binds `addr` with a [`LISTEN_BACKLOG`]-deep accept queue (`TcpListener::bind` has 128).
pub(crate) fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Serves `router` on `addr` over HTTP/1.1 until Ctrl-C (the bench's cluster kills the process).
pub(crate) async fn serve(addr: SocketAddr, router: Router) -> anyhow::Result<()> {
    serve_on(bind(addr)?, router).await
}

/// Serves `router` on `listener`; see [`serve`].
pub(crate) async fn serve_on(listener: TcpListener, router: Router) -> anyhow::Result<()> {
    let mut builder = http1::Builder::new();
    builder.keep_alive(true);
    let mut stop = std::pin::pin!(tokio::signal::ctrl_c());
    loop {
        let stream = tokio::select! {
            biased;
            _ = &mut stop => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(e) => {
                    eprintln!("accept failed: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        // Best effort, as the origin: a socket that refuses it still works.
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            router.clone().oneshot(req.map(Body::new))
        });
        let conn = builder.serve_connection(TokioIo::new(stream), service);
        tokio::spawn(async move {
            // A client that goes away mid-request is not an error of the server.
            let _ = conn.await;
        });
    }
}

/// `201 Created` with a JSON body.
fn created(body: impl Into<Body>) -> Response {
    let mut res = (StatusCode::CREATED, body.into()).into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

/// The problem+json answer for `code`; a 503 carries `Retry-After: 1`.
fn problem(code: ErrorCode, detail: impl Into<String>) -> Response {
    let body = Problem::new(code, detail).to_json();
    let status = StatusCode::from_u16(code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut res = (status, body).into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(shared::headers::PROBLEM_JSON),
    );
    if code == ErrorCode::Unavailable {
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    res
}

/// `GET /healthz` and `/readyz`: the process answers (the cluster waits for it, the shoppers
/// warm their connections with it).
async fn ok() -> &'static str {
    "ok"
}
