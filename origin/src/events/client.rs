//! The webhooks' HTTP client (`super::delivery` sends through it): hyper's pooled client over
//! rustls (ring, TLS 1.2 and 1.3, the system's root certificates), HTTP/1.1, `https://` and the
//! `http://` the endpoint URLs allow. It follows no redirect (hyper never does), reads only the
//! answer's head, and bounds each exchange — connecting, sending, the head — by one timeout.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    #[error("no answer within {} ms", .0.as_millis())]
    Timeout(Duration),
    #[error("could not be reached: {0}")]
    Unreachable(String),
}

/// The client; cheap to clone.
#[derive(Clone)]
pub(crate) struct WebhookClient {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
}

impl std::fmt::Debug for WebhookClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookClient")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl WebhookClient {
    /// A client whose exchanges take at most `timeout`. Fails only when rustls refuses its
    /// configuration.
    pub(crate) fn new(timeout: Duration) -> Result<Self, rustls::Error> {
        let mut roots = rustls::RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        for error in &native.errors {
            tracing::warn!(error = %error, "a system root certificate could not be read");
        }
        let (added, ignored) = roots.add_parsable_certificates(native.certs);
        if added == 0 {
            tracing::warn!(
                ignored,
                "no system root certificate: https:// webhooks will fail"
            );
        }
        let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(timeout));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(https);
        Ok(Self { client, timeout })
    }

    /// POSTs `body` to `url` with `headers`; the answer's status and headers (its body is not
    /// read).
    pub(crate) async fn post(
        &self,
        url: &str,
        headers: HeaderMap,
        body: String,
    ) -> Result<(StatusCode, HeaderMap), SendError> {
        let mut request = Request::post(url)
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| SendError::Unreachable(format!("invalid request: {e}")))?;
        *request.headers_mut() = headers;
        match tokio::time::timeout(self.timeout, self.client.request(request)).await {
            Err(_) => Err(SendError::Timeout(self.timeout)),
            Ok(Err(e)) => Err(SendError::Unreachable(describe(&e))),
            Ok(Ok(response)) => {
                let (parts, _body) = response.into_parts();
                Ok((parts.status, parts.headers))
            }
        }
    }
}

/// A client error with its causes (hyper-util's own message says little).
fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
