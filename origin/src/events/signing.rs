//! Standard Webhooks signatures (spec 1.0, `spec/standard-webhooks.md`): an endpoint's secret is
//! `whsec_` + the base64 of a 32-byte HMAC key, shown once; a delivery carries
//! `webhook-signature: v1,<base64 HMAC-SHA256(key, "{webhook-id}.{webhook-timestamp}.{body}")>`,
//! and during a rotation one such signature per key, separated by spaces — what the reference
//! libraries (crate, PyPI and npm `standardwebhooks`) verify unchanged. Tested against the crate.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The bytes of a new endpoint key (32, from the OS's CSPRNG through `rand`).
pub(crate) fn new_key() -> Vec<u8> {
    rand::random::<[u8; 32]>().to_vec()
}

/// The secret the API shows once: `whsec_` + base64 of the key.
pub(crate) fn whsec(key: &[u8]) -> String {
    format!("whsec_{}", STANDARD.encode(key))
}

/// One `v1,<base64>` signature of a delivery under `key`.
fn sign(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    // HMAC accepts a key of any length: `new_from_slice` cannot fail.
    let mut mac = <Hmac<Sha256>>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// The `webhook-signature` header of a delivery: one signature per key that signs (the current
/// one first), space-separated.
pub(crate) fn header<'a>(
    keys: impl IntoIterator<Item = &'a [u8]>,
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    keys.into_iter()
        .map(|key| sign(key, id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spec's example (standard-webhooks `spec/standard-webhooks.md`, "Signature scheme").
    #[test]
    fn the_specs_example_signs_the_same() {
        let key = STANDARD
            .decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
            .expect("base64");
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            header(
                [key.as_slice()],
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1614265330,
                body
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn secrets_are_whsec_base64_of_32_random_bytes() {
        let (a, b) = (new_key(), new_key());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        let shown = whsec(&a);
        let decoded = STANDARD
            .decode(shown.strip_prefix("whsec_").expect("prefix"))
            .expect("base64");
        assert_eq!(decoded, a);
    }
}
