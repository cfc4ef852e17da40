#![allow(dead_code)] // each test binary uses its own subset
//! A real receiving HTTP server for the webhook tests (axum on a free loopback port): it records
//! every request (headers, body, when) and answers as the test says — 200, a status, a status
//! with `Retry-After`, a redirect, after a delay — per `webhook-id` or for all; it can go down
//! (its port closed) and come back on the same port. Signatures are checked by the tests with the
//! `standardwebhooks` crate.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// How the receiver answers a request.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    Ok,
    Status(u16),
    /// A status with `Retry-After: <secs>`.
    RetryAfter(u16, u64),
    /// A 302 to this URL.
    Redirect(String),
    /// Sleeps, then answers 200.
    Slow(Duration),
}

/// One request the receiver got, recorded when it arrived.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    pub(crate) at: Instant,
    /// What it answered (a slow 200 the sender gave up on counts as 200).
    pub(crate) status: u16,
}

impl Received {
    pub(crate) fn id(&self) -> String {
        self.headers["webhook-id"].to_str().expect("id").to_owned()
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("json body")
    }

    /// Whether the Standard Webhooks reference implementation accepts it under `secret`.
    pub(crate) fn verifies(&self, secret: &str) -> bool {
        let webhook = standardwebhooks::Webhook::new(secret).expect("secret");
        webhook.verify(&self.body, &self.headers).is_ok()
    }
}

/// Which requests a scripted answer is for.
type Matcher = Box<dyn Fn(&Value) -> bool + Send + Sync>;

#[derive(Default)]
struct Script {
    /// Answers for the events a matcher accepts, used in order (then the rest).
    when: Vec<(Matcher, Vec<Reply>)>,
    /// Answers for a given `webhook-id`, used in order (then `default`).
    by_id: HashMap<String, Vec<Reply>>,
    /// Answers for any request, used in order (then `default`).
    next: Vec<Reply>,
    default: Option<Reply>,
}

#[derive(Default)]
struct Shared {
    received: Mutex<Vec<Received>>,
    script: Mutex<Script>,
    in_flight: Mutex<(usize, usize)>,
}

/// The receiver; dropping it closes it.
pub(crate) struct Receiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl Receiver {
    pub(crate) async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let shared = Arc::new(Shared::default());
        let server = Some(serve(listener, shared.clone()));
        Self {
            addr,
            shared,
            server,
        }
    }

    /// `http://127.0.0.1:<port>/hooks`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}/hooks", self.addr)
    }

    /// Answers every request not scripted otherwise with `reply` (200 when never set).
    pub(crate) fn always(&self, reply: Reply) {
        self.shared.script.lock().expect("script").default = Some(reply);
    }

    /// Answers the next requests (any id) with these replies, in order.
    pub(crate) fn next(&self, replies: Vec<Reply>) {
        self.shared.script.lock().expect("script").next = replies;
    }

    /// Answers the deliveries of event `id` with these replies, in order.
    pub(crate) fn for_id(&self, id: &str, replies: Vec<Reply>) {
        self.shared
            .script
            .lock()
            .expect("script")
            .by_id
            .insert(id.to_owned(), replies);
    }

    /// Answers the deliveries whose event `matches` with these replies, in order.
    pub(crate) fn when(
        &self,
        matches: impl Fn(&Value) -> bool + Send + Sync + 'static,
        replies: Vec<Reply>,
    ) {
        self.shared
            .script
            .lock()
            .expect("script")
            .when
            .push((Box::new(matches), replies));
    }

    /// Every request so far, in arrival order.
    pub(crate) fn received(&self) -> Vec<Received> {
        self.shared.received.lock().expect("received").clone()
    }

    /// The requests it acknowledged (2xx), in order.
    pub(crate) fn acknowledged(&self) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| (200..300).contains(&r.status))
            .collect()
    }

    /// The most requests it was answering at once.
    pub(crate) fn max_in_flight(&self) -> usize {
        self.shared.in_flight.lock().expect("in flight").1
    }

    /// Closes its port (connections refused) until [`Receiver::up`].
    pub(crate) fn down(&mut self) {
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }

    /// Listens again on the same port.
    pub(crate) async fn up(&mut self) {
        let start = Instant::now();
        let listener = loop {
            match tokio::net::TcpListener::bind(self.addr).await {
                Ok(l) => break l,
                Err(e) if start.elapsed() < Duration::from_secs(5) => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("rebinding {}: {e}", self.addr),
            }
        };
        self.server = Some(serve(listener, self.shared.clone()));
    }

    /// Waits until `done` holds for what it acknowledged; panics after `within`.
    pub(crate) async fn wait_for(
        &self,
        within: Duration,
        what: &str,
        done: impl Fn(&[Received]) -> bool,
    ) -> Vec<Received> {
        let start = Instant::now();
        loop {
            let acked = self.acknowledged();
            if done(&acked) {
                return acked;
            }
            assert!(
                start.elapsed() < within,
                "the receiver did not get {what} within {within:?}: {} acknowledged of {} received",
                acked.len(),
                self.received().len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.down();
    }
}

fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>) -> tokio::task::JoinHandle<()> {
    let app = axum::Router::new().fallback(handle).with_state(shared);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    })
}

async fn handle(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let at = Instant::now();
    {
        let mut f = shared.in_flight.lock().expect("in flight");
        f.0 += 1;
        f.1 = f.1.max(f.0);
    }
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let reply = {
        let mut script = shared.script.lock().expect("script");
        let event: Value = serde_json::from_slice(&body).unwrap_or_default();
        let matched = script
            .when
            .iter_mut()
            .find(|(matches, replies)| !replies.is_empty() && matches(&event))
            .map(|(_, replies)| replies.remove(0));
        let scripted = matched.or_else(|| {
            script
                .by_id
                .get_mut(&id)
                .filter(|r| !r.is_empty())
                .map(|r| r.remove(0))
        });
        match scripted {
            Some(r) => r,
            None if !script.next.is_empty() => script.next.remove(0),
            None => script.default.clone().unwrap_or(Reply::Ok),
        }
    };
    let status = match &reply {
        Reply::Ok | Reply::Slow(_) => 200,
        Reply::Status(s) | Reply::RetryAfter(s, _) => *s,
        Reply::Redirect(_) => 302,
    };
    shared.received.lock().expect("received").push(Received {
        headers,
        body,
        at,
        status,
    });
    let response = match reply {
        Reply::Ok => StatusCode::OK.into_response(),
        Reply::Slow(d) => {
            tokio::time::sleep(d).await;
            StatusCode::OK.into_response()
        }
        Reply::Status(s) => StatusCode::from_u16(s).expect("status").into_response(),
        Reply::RetryAfter(s, secs) => (
            StatusCode::from_u16(s).expect("status"),
            [("retry-after", secs.to_string())],
        )
            .into_response(),
        Reply::Redirect(to) => (StatusCode::FOUND, [("location", to)]).into_response(),
    };
    shared.in_flight.lock().expect("in flight").0 -= 1;
    response
}
