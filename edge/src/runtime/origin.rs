//! HTTP calls from the edge to the origin, each with a deadline: a slow origin is aborted and
//! reported like an unreachable one (the caller answers 503).

use std::pin::pin;
use std::time::Duration;

use futures_util::future::{Either, select};
use shared::headers::IDEMPOTENT_REPLAYED;
use worker::wasm_bindgen::JsValue;
use worker::{AbortController, Delay, Fetch, Headers, Method, Request, RequestInit};

/// What the origin answered.
#[derive(Debug)]
pub(crate) struct OriginResponse {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
    pub(crate) retry_after: Option<String>,
    pub(crate) replayed: bool,
}

/// Why there is no answer.
#[derive(Debug)]
pub(crate) enum OriginError {
    /// No answer before the deadline (the request was aborted).
    Timeout,
    /// Connection refused, DNS, TLS, a broken body… (the runtime's error, for logs).
    Failed(worker::Error),
}

impl std::fmt::Display for OriginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Timeout => f.write_str("origin timed out"),
            Self::Failed(e) => write!(f, "origin call failed: {e}"),
        }
    }
}

/// Sends `method url` with `headers` and `body`, waiting at most `timeout_ms` for the whole answer.
pub(crate) async fn send(
    method: Method,
    url: &str,
    headers: &[(&str, String)],
    body: Option<&str>,
    timeout_ms: u32,
) -> Result<OriginResponse, OriginError> {
    let controller = AbortController::default();
    let signal = controller.signal();
    let call = async {
        let h = Headers::new();
        for (name, value) in headers {
            h.set(name, value)?;
        }
        let mut init = RequestInit::new();
        init.with_method(method)
            .with_headers(h)
            .with_body(body.map(JsValue::from_str));
        let request = Request::new_with_init(url, &init)?;
        let mut response = Fetch::Request(request).send_with_signal(&signal).await?;
        let bytes = response.bytes().await?;
        let get = |name: &str| response.headers().get(name).ok().flatten();
        Ok::<_, worker::Error>(OriginResponse {
            status: response.status_code(),
            retry_after: get("retry-after"),
            replayed: get(IDEMPOTENT_REPLAYED).is_some_and(|v| v.eq_ignore_ascii_case("true")),
            body: bytes,
        })
    };
    let deadline = Delay::from(Duration::from_millis(u64::from(timeout_ms)));
    match select(pin!(call), pin!(deadline)).await {
        Either::Left((result, _)) => result.map_err(OriginError::Failed),
        Either::Right(((), _)) => {
            controller.abort();
            Err(OriginError::Timeout)
        }
    }
}
