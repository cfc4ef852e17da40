//! The holds sale's load: shoppers that buy one unit at a time and leave a share of their holds
//! unpaid, and payers that pay the rest by a signed Stripe-style webhook, retried like Stripe.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use hmac::{Hmac, Mac};
use rand::Rng;
use sha2::Sha256;
use shared::SecretRing;
use shared::signing::{self, SignedParts};
use tokio::sync::Mutex;

/// What the shoppers and payers share (counters, samples, the stop flag).
pub(super) struct Shared {
    pub(super) client: reqwest::Client,
    pub(super) targets: Vec<String>,
    /// `{target}/v1/payments/stripe` per target.
    pub(super) webhook_urls: Vec<String>,
    pub(super) signer: Signer,
    pub(super) ring: SecretRing,
    pub(super) sku: String,
    pub(super) stock: u64,
    pub(super) abandon: f64,
    pub(super) pay_within: Duration,
    pub(super) start: Instant,
    pub(super) stop: AtomicBool,
    pub(super) created: AtomicU64,
    pub(super) first_pass_micros: AtomicU64,
    pub(super) abandoned: AtomicU64,
    pub(super) paid: AtomicU64,
    pub(super) webhooks: AtomicU64,
    pub(super) webhook_retries: AtomicU64,
    pub(super) purchase_latency: Mutex<Histogram<u64>>,
    pub(super) webhook_latency: Mutex<Histogram<u64>>,
    pub(super) statuses: Mutex<BTreeMap<String, u64>>,
    pub(super) payers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// `Stripe-Signature` for `body` at `t`, as Stripe computes it.
#[cfg(test)]
pub(crate) fn stripe_signature(secret: &str, t: i64, body: &[u8]) -> String {
    Signer::new(secret).sign(t, body)
}

/// Signs webhook bodies as Stripe does, with the secret's HMAC key schedule computed once (a
/// signature clones it instead of hashing the key again).
#[derive(Clone)]
pub(super) struct Signer {
    keyed: Hmac<Sha256>,
}

impl Signer {
    pub(super) fn new(secret: &str) -> Self {
        Self {
            keyed: <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes())
                .unwrap_or_else(|_| unreachable!("any key length")),
        }
    }

    /// `t=<t>,v1=<hex HMAC-SHA256 of "{t}.{body}">`.
    pub(super) fn sign(&self, t: i64, body: &[u8]) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let t_text = t.to_string();
        let mut mac = self.keyed.clone();
        mac.update(t_text.as_bytes());
        mac.update(b".");
        mac.update(body);
        let digest = mac.finalize().into_bytes();
        let mut header = String::with_capacity(6 + t_text.len() + 64);
        header.push_str("t=");
        header.push_str(&t_text);
        header.push_str(",v1=");
        for b in digest {
            header.push(char::from(HEX[usize::from(b >> 4)]));
            header.push(char::from(HEX[usize::from(b & 0x0f)]));
        }
        header
    }
}

/// A `payment_intent.succeeded` for `order` (what Stripe sends, minus fields the origin never
/// reads), written straight into its bytes; event id `evt_bench_<uuid>`.
pub(super) fn payment_body(n: u64, order: &str) -> Vec<u8> {
    use std::io::Write as _;
    let mut body = Vec::with_capacity(256);
    let _ = write!(
        body,
        r#"{{"id":"evt_bench_{}","object":"event","type":"payment_intent.succeeded","created":{},"livemode":false,"data":{{"object":{{"id":"pi_bench_{n}","object":"payment_intent","metadata":{{"order_id":"{order}"}}}}}}}}"#,
        uuid::Uuid::new_v4().simple(),
        shared::Timestamp::now().unix_secs(),
    );
    body
}

/// How a webhook delivery was answered.
pub(super) enum Answer {
    /// 200 `applied`.
    Applied,
    /// 200 with another `result`, or a non-2xx other than 503: the label counted in the
    /// statuses.
    Final(String),
    /// 503, a transport error or an answer cut short: retry.
    Retry,
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Sends one delivery of `body` to `url`, signed now.
pub(super) async fn deliver(
    client: &reqwest::Client,
    url: &str,
    signer: &Signer,
    body: Vec<u8>,
) -> Answer {
    let signature = signer.sign(shared::Timestamp::now().unix_secs(), &body);
    let res = client
        .post(url)
        .header("content-type", "application/json")
        .header("stripe-signature", signature)
        .body(body)
        .send()
        .await;
    match res {
        Ok(r) if r.status().is_success() => match r.bytes().await {
            // The origin writes the receipt compactly (serde_json): the one member that
            // matters is looked for before anything is read as JSON.
            Ok(bytes) if contains(&bytes, br#""result":"applied""#) => Answer::Applied,
            Ok(bytes) => {
                let receipt: serde_json::Value =
                    serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
                Answer::Final(format!("webhook {}", receipt["result"]))
            }
            Err(_) => Answer::Retry,
        },
        Ok(r) if r.status().as_u16() != 503 => Answer::Final(format!("webhook {}", r.status())),
        _ => Answer::Retry,
    }
}

/// One shopper: buys one unit at a time with a fresh key; each 201 is abandoned or handed to a
/// payer. A `sold_out` while units are still unpaid waits and tries again (held units come
/// back when they expire).
pub(super) async fn shopper(s: Arc<Shared>, i: usize) {
    let user = format!("holder-{i}");
    let target = &s.targets[i % s.targets.len()];
    let body = format!(r#"{{"sku":"{}","qty":1}}"#, s.sku);
    while !s.stop.load(Ordering::Relaxed) && s.paid.load(Ordering::Relaxed) < s.stock {
        let key = uuid::Uuid::new_v4().to_string();
        loop {
            if s.stop.load(Ordering::Relaxed) {
                return;
            }
            let parts = SignedParts {
                method: "POST",
                path: "/v1/purchases",
                user: &user,
                idempotency_key: &key,
                body: body.as_bytes(),
            };
            let req = s
                .client
                .post(format!("{target}/v1/purchases"))
                .header("idempotency-key", &key)
                .header("flashgate-user", &user)
                .header(
                    "flashgate-signature",
                    signing::sign(&s.ring, shared::Timestamp::now().unix_secs(), &parts),
                )
                .body(body.clone());
            let t0 = Instant::now();
            let result = req.send().await;
            let _ = s.purchase_latency.lock().await.record(micros(t0.elapsed()));
            let (status, retry_after, json) = match result {
                Ok(res) => {
                    let status = res.status().as_u16();
                    let retry_after = res
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<u64>().ok());
                    let json: serde_json::Value =
                        res.json().await.unwrap_or(serde_json::Value::Null);
                    (status, retry_after, json)
                }
                Err(_) => (0, None, serde_json::Value::Null),
            };
            let label = match status {
                0 => "transport error".to_owned(),
                201 => "201".to_owned(),
                _ => format!("{status} {}", json["code"].as_str().unwrap_or("?")),
            };
            *s.statuses.lock().await.entry(label).or_insert(0) += 1;
            match status {
                201 => {
                    let n = s.created.fetch_add(1, Ordering::Relaxed) + 1;
                    if n == s.stock {
                        s.first_pass_micros
                            .store(micros(s.start.elapsed()), Ordering::Relaxed);
                    }
                    let Some(order) = json["order_id"].as_str().map(str::to_owned) else {
                        return;
                    };
                    if rand::rng().random_bool(s.abandon) {
                        s.abandoned.fetch_add(1, Ordering::Relaxed);
                    } else {
                        let payer = tokio::spawn(pay(s.clone(), order));
                        s.payers.lock().await.push(payer);
                    }
                    break;
                }
                503 | 429 | 0 => {
                    let wait = retry_after.map_or(Duration::from_millis(200), Duration::from_secs);
                    tokio::time::sleep(wait).await;
                }
                409 if json["code"] == "idempotency_in_flight" => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                // Sold out for now: holds still open may expire and put units back.
                409 if json["code"] == "sold_out" => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    break;
                }
                _ => return,
            }
        }
    }
}

/// Pays `order` after a random delay, with a signed `payment_intent.succeeded`, retrying what
/// was not answered 2xx as Stripe does (sooner).
async fn pay(s: Arc<Shared>, order: String) {
    let delay = rand::rng().random_range(0..=s.pay_within.as_millis() as u64);
    tokio::time::sleep(Duration::from_millis(delay)).await;
    let n = s.webhooks.fetch_add(1, Ordering::Relaxed);
    let body = payment_body(n, &order);
    let url = &s.webhook_urls[usize::try_from(n).unwrap_or(0) % s.webhook_urls.len()];
    // Like Stripe, retry what was not answered 2xx (a 503, a transport error, an answer cut
    // short), backing off: `Retry-After`, doubled per attempt, at most 8 s.
    let mut backoff = Duration::from_secs(1);
    loop {
        let t0 = Instant::now();
        let answer = deliver(&s.client, url, &s.signer, body.clone()).await;
        let _ = s.webhook_latency.lock().await.record(micros(t0.elapsed()));
        match answer {
            Answer::Applied => {
                s.paid.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Answer::Final(label) => {
                *s.statuses.lock().await.entry(label).or_insert(0) += 1;
                return;
            }
            Answer::Retry => {
                s.webhook_retries.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(8));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_is_a_payment_event_naming_the_order() {
        let body = payment_body(7, "0190b1a2-3c4d-7e5f-8a9b-0c1d2e3f4a5b");
        let v: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(v["type"], "payment_intent.succeeded");
        assert_eq!(v["data"]["object"]["id"], "pi_bench_7");
        assert_eq!(
            v["data"]["object"]["metadata"]["order_id"],
            "0190b1a2-3c4d-7e5f-8a9b-0c1d2e3f4a5b"
        );
        assert!(
            v["id"]
                .as_str()
                .is_some_and(|id| id.starts_with("evt_bench_"))
        );
    }

    #[test]
    fn the_signature_is_stripes() {
        // printf '1790000000.{}' | openssl dgst -sha256 -hmac whsec_test_0123456789abcdef
        assert_eq!(
            stripe_signature("whsec_test_0123456789abcdef", 1_790_000_000, b"{}"),
            "t=1790000000,v1=d8ce8f9a3d1a74d4b21bddea1c351a73da30d5b39fe47c62996bfac92a491874"
        );
    }
}
