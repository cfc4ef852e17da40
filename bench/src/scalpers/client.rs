//! The HTTP side shared by honest shoppers and the farm: a client bound to one loopback address
//! (its own connection pool, so its connections are its own: cold unless it opened them before
//! the start), the two calls a shopper makes — `GET /v1/challenge` and `POST /v1/purchases` — and
//! the tally of answers by side, call and `status code`; and what the two sides share during one
//! sale ([`SaleCtx`]).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use edge::proof::Challenge;

/// What honest shoppers and the farm share during one sale.
#[derive(Debug)]
pub(super) struct SaleCtx {
    pub(super) edge: String,
    pub(super) sku: String,
    /// The purchase body (`{"sku":…,"qty":1}`).
    pub(super) body: String,
    pub(super) start: Instant,
    /// Nobody starts a request after this.
    pub(super) deadline: Instant,
    pub(super) defended: bool,
    pub(super) honest: Tally,
    pub(super) farm: Tally,
}

/// A client whose sockets are bound to `addr` (the edge sees the client in `addr`'s /24).
pub(super) fn bound_to(addr: Ipv4Addr) -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        .local_address(IpAddr::V4(addr))
        .pool_max_idle_per_host(2)
        .timeout(Duration::from_secs(30))
        .build()
        .with_context(|| format!("an HTTP client bound to {addr}"))
}

/// Opens the client's connection before the sale (`GET /healthz`); whether it answered 200.
pub(super) async fn preconnect(client: &reqwest::Client, edge: &str) -> bool {
    client
        .get(format!("{edge}/healthz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}

/// One answer, as much of it as a shopper reads.
#[derive(Debug, Clone, Default)]
pub(super) struct Answer {
    /// HTTP status; 0 for a transport error.
    pub(super) status: u16,
    /// The problem's `code`.
    pub(super) code: Option<String>,
    /// `Retry-After` in whole seconds.
    pub(super) retry_after: Option<u64>,
    pub(super) body: serde_json::Value,
}

impl Answer {
    /// `201`, `409 sold_out`, `transport error`: how answers are tallied.
    pub(super) fn label(&self) -> String {
        label(self.status, self.code.as_deref())
    }

    pub(super) fn is(&self, status: u16, code: &str) -> bool {
        self.status == status && self.code.as_deref() == Some(code)
    }

    /// `Retry-After`, or `default` without one.
    pub(super) fn retry_after_or(&self, default: Duration) -> Duration {
        self.retry_after.map_or(default, Duration::from_secs)
    }
}

pub(super) fn label(status: u16, code: Option<&str>) -> String {
    match (status, code) {
        (0, _) => "transport error".to_owned(),
        (s, None) | (s @ 200..=299, _) => s.to_string(),
        (s, Some(code)) => format!("{s} {code}"),
    }
}

async fn read(result: Result<reqwest::Response, reqwest::Error>) -> Answer {
    let Ok(res) = result else {
        return Answer::default();
    };
    let status = res.status().as_u16();
    let retry_after = res
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let Ok(bytes) = res.bytes().await else {
        return Answer::default();
    };
    let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let code = (!(200..300).contains(&status))
        .then(|| body["code"].as_str().map(str::to_owned))
        .flatten()
        // An answer that is not the edge's problem+json (from the runtime in front of it): its
        // first words, so the report says who answered.
        .or_else(|| {
            (status >= 500).then(|| {
                let text = String::from_utf8_lossy(&bytes);
                format!(
                    "(not problem+json: {})",
                    text.chars().take(48).collect::<String>().trim()
                )
            })
        });
    Answer {
        status,
        code,
        retry_after,
        body,
    }
}

/// `GET /v1/challenge?sku=` as the shopper of `token`: the challenge, or the answer that was
/// not one.
pub(super) async fn challenge(
    client: &reqwest::Client,
    edge: &str,
    sku: &str,
    token: &str,
) -> Result<Challenge, Answer> {
    let answer = read(
        client
            .get(format!("{edge}/v1/challenge?{}", sku_query(sku)))
            .bearer_auth(token)
            .send()
            .await,
    )
    .await;
    if answer.status != 200 {
        return Err(answer);
    }
    serde_json::from_value(answer.body.clone()).map_err(|_| Answer {
        code: Some("not a challenge".into()),
        ..answer
    })
}

/// `sku=<sku>`, form-encoded.
pub(super) fn sku_query(sku: &str) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .append_pair("sku", sku)
        .finish()
}

/// `POST /v1/purchases` of `qty` units as the shopper of `token`, with `key` and, when given,
/// `Flashgate-Proof`.
pub(super) async fn purchase(
    client: &reqwest::Client,
    edge: &str,
    token: &str,
    key: &str,
    body: &str,
    proof: Option<&str>,
) -> Answer {
    let mut req = client
        .post(format!("{edge}/v1/purchases"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(body.to_owned());
    if let Some(proof) = proof {
        req = req.header("flashgate-proof", proof);
    }
    read(req.send().await).await
}

/// Which calls an answer is tallied under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Call {
    Challenge,
    Purchase,
}

impl Call {
    fn name(self) -> &'static str {
        match self {
            Self::Challenge => "challenge",
            Self::Purchase => "purchase",
        }
    }
}

/// Answers counted by call and label.
#[derive(Debug, Default)]
pub(super) struct Tally(Mutex<BTreeMap<String, u64>>);

impl Tally {
    pub(super) fn add(&self, call: Call, answer: &Answer) {
        let key = format!("{} {}", call.name(), answer.label());
        if let Ok(mut map) = self.0.lock() {
            *map.entry(key).or_insert(0) += 1;
        }
    }

    pub(super) fn take(&self) -> BTreeMap<String, u64> {
        self.0
            .lock()
            .map(|mut m| std::mem::take(&mut *m))
            .unwrap_or_default()
    }
}

/// Answers of 500 and above in a tally (labels start with the call's name, then the status).
pub(super) fn server_errors(tally: &BTreeMap<String, u64>) -> u64 {
    tally
        .iter()
        .filter(|(label, _)| {
            label
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse::<u16>().ok())
                .is_some_and(|s| s >= 500)
        })
        .map(|(_, n)| n)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_name_the_status_and_the_problem_code() {
        assert_eq!(label(201, None), "201");
        assert_eq!(label(200, Some("x")), "200");
        assert_eq!(label(409, Some("sold_out")), "409 sold_out");
        assert_eq!(label(0, None), "transport error");
        assert_eq!(label(502, None), "502");
    }

    #[test]
    fn server_errors_count_every_5xx_and_nothing_else() {
        let tally: BTreeMap<String, u64> = [
            ("purchase 201", 5),
            ("purchase 503 unavailable", 2),
            ("challenge 500", 1),
            ("purchase 429 rate_limited", 7),
            ("purchase transport error", 3),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        assert_eq!(server_errors(&tally), 3);
    }
}
