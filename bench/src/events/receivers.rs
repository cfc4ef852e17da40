//! `bench events`' webhook receivers: real HTTP servers on loopback (axum) that log every
//! delivery (event id, arrival, answer, the event's own timestamp). The healthy one answers 204
//! at once; the flaky one waits `delay` and answers 500 to a share `fail` of the deliveries.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use rand::Rng;

/// One delivery a receiver got.
#[derive(Debug, Clone)]
pub(super) struct Delivery {
    pub(super) id: String,
    /// Unix milliseconds at arrival, and the event's `timestamp` (its order change).
    pub(super) arrived_ms: i64,
    pub(super) event_ms: Option<i64>,
    pub(super) acknowledged: bool,
}

struct Behaviour {
    fail: f64,
    delay: Duration,
    log: Mutex<Vec<Delivery>>,
}

/// A running receiver.
pub(super) struct Receiver {
    pub(super) url: String,
    behaviour: Arc<Behaviour>,
    server: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Starts a receiver answering 500 to a share `fail` of the deliveries, each after `delay`.
    pub(super) async fn start(fail: f64, delay: Duration) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/hooks", listener.local_addr()?);
        let behaviour = Arc::new(Behaviour {
            fail,
            delay,
            log: Mutex::new(Vec::new()),
        });
        let app = axum::Router::new()
            .fallback(receive)
            .with_state(behaviour.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            url,
            behaviour,
            server,
        })
    }

    /// Every delivery so far, in arrival order.
    pub(super) fn log(&self) -> Vec<Delivery> {
        self.behaviour
            .log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The `"timestamp"` of an event body, as unix milliseconds.
fn event_ms(body: &[u8]) -> Option<i64> {
    let event: serde_json::Value = serde_json::from_slice(body).ok()?;
    let ts = shared::Timestamp::parse(event["timestamp"].as_str()?).ok()?;
    Some(ts.unix_ms())
}

async fn receive(State(b): State<Arc<Behaviour>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let arrived_ms = unix_ms();
    if !b.delay.is_zero() {
        tokio::time::sleep(b.delay).await;
    }
    let acknowledged = !(b.fail > 0.0 && rand::rng().random_bool(b.fail));
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    b.log
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Delivery {
            id,
            arrived_ms,
            event_ms: event_ms(&body),
            acknowledged,
        });
    if acknowledged {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}
