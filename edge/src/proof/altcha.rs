//! The ALTCHA v1 proof-of-work format, byte for byte as ALTCHA's own libraries (`altcha-lib`'s
//! `v1`, the `altcha` widget) make, solve and verify it, so any of them interoperates with the
//! edge:
//!
//! - a **challenge** `{"algorithm":"SHA-256","challenge","maxnumber","salt","signature"}`, where
//!   `challenge` = lower-case hex SHA-256 of `salt` followed by the decimal secret `number`
//!   (1..=`maxnumber`), and `signature` = lower-case hex HMAC-SHA256 of the `challenge` string under
//!   the secret key;
//! - a **solution** (the widget's payload) `{"algorithm","challenge","number","salt","signature"}`
//!   as JSON, base64-encoded (the widget's `btoa`), found by trying `number` = 0, 1, 2… until the
//!   hash matches.
//!
//! The salt ends with `&` (ALTCHA's delimiter against splicing digits between the salt's
//! parameters and the number: `salt + number` must not be readable as a different salt and
//! number); what the salt binds is `super::salt`'s. Nothing here knows about SKUs or shoppers.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The only algorithm the edge issues and accepts.
pub const ALGORITHM: &str = "SHA-256";

/// Longest `Flashgate-Proof` header accepted (a v1 solution is ~300 bytes, a v2 one ~900).
pub const MAX_PAYLOAD_LEN: usize = 2_048;

/// A v1 challenge, as `GET /v1/challenge` answers it for a SKU whose `proof_of_work.algorithm` is
/// `SHA-256` (the default): what the `altcha` widget solves from its `challenge` URL (3.x; its
/// `challengeurl` in 1.x and 2.x).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(utoipa::ToSchema), schema(as = AltchaChallenge))]
pub struct Challenge {
    /// Always `SHA-256`.
    #[cfg_attr(not(target_arch = "wasm32"), schema(example = "SHA-256"))]
    pub algorithm: String,
    /// Lower-case hex SHA-256 of `salt` followed by the decimal secret number.
    pub challenge: String,
    /// The secret number is in 1..=maxnumber (2^bits): a solver tries 0, 1, 2… until the hash
    /// matches, maxnumber/2 candidates on average.
    pub maxnumber: u64,
    /// `<random hex>?kid=…&purpose=join|purchase&sku=…&user=…&expires=<unix s>&`: what the
    /// solution is good for, and until when.
    pub salt: String,
    /// Lower-case hex HMAC-SHA256 of `challenge` under the edge's `POW_SECRETS` key `kid`.
    pub signature: String,
}

/// A solved challenge, as the widget submits it (extra members such as `took` are ignored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Solution {
    pub algorithm: String,
    pub challenge: String,
    pub number: u64,
    pub salt: String,
    pub signature: String,
}

impl Solution {
    /// Reads a `Flashgate-Proof` value: base64 (with or without padding) of the solution's JSON.
    /// `None` for anything else.
    pub fn decode(header: &str) -> Option<Self> {
        serde_json::from_slice(&decode_base64(header)?).ok()
    }

    /// The `Flashgate-Proof` value of this solution (what the widget submits).
    pub fn encode(&self) -> String {
        STANDARD.encode(serde_json::to_vec(self).unwrap_or_default())
    }
}

/// The bytes of a `Flashgate-Proof` value (base64, with or without padding, at most
/// [`MAX_PAYLOAD_LEN`]): a v1 or v2 payload's JSON. `None` for anything else.
pub fn decode_base64(header: &str) -> Option<Vec<u8>> {
    let header = header.trim();
    if header.is_empty() || header.len() > MAX_PAYLOAD_LEN {
        return None;
    }
    STANDARD
        .decode(header)
        .or_else(|_| STANDARD_NO_PAD.decode(header))
        .ok()
}

/// Lower-case hex SHA-256 of `salt` followed by the decimal `number`: the `challenge` string.
pub fn challenge_hex(salt: &str, number: u64) -> String {
    let mut hasher = Sha256::new();
    hasher.update(salt.as_bytes());
    hasher.update(number.to_string().as_bytes());
    hex::encode(hasher.finalize())
}

/// HMAC-SHA256 of `challenge` under `key` (HMAC takes a key of any length: never `None`).
fn mac(key: &[u8], challenge: &str) -> Option<Hmac<Sha256>> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).ok()?;
    mac.update(challenge.as_bytes());
    Some(mac)
}

/// Lower-case hex HMAC-SHA256 of the `challenge` string under `key`: the `signature`.
pub fn signature_hex(key: &[u8], challenge: &str) -> String {
    mac(key, challenge).map_or_else(String::new, |m| hex::encode(m.finalize().into_bytes()))
}

/// Whether `signature` (hex, any case) is the signature of `challenge` under `key`, compared in
/// constant time.
pub fn signature_verifies(key: &[u8], challenge: &str, signature: &str) -> bool {
    match (hex::decode(signature), mac(key, challenge)) {
        (Ok(presented), Some(mac)) => mac.verify_slice(&presented).is_ok(),
        _ => false,
    }
}

/// The challenge for `salt` (ending with `&`), secret `number` and `maxnumber`, signed with `key`.
pub fn make(key: &[u8], salt: String, number: u64, maxnumber: u64) -> Challenge {
    let challenge = challenge_hex(&salt, number);
    Challenge {
        algorithm: ALGORITHM.to_owned(),
        signature: signature_hex(key, &challenge),
        challenge,
        maxnumber,
        salt,
    }
}

/// Finds the number of `challenge`, trying 0..=`maxnumber` in order as the widget does: the
/// work a shopper's browser (or a farm) must do. `None` if none matches.
pub fn solve(challenge: &Challenge) -> Option<Solution> {
    let target: [u8; 32] = hex::decode(&challenge.challenge).ok()?.try_into().ok()?;
    let prefix = Sha256::new_with_prefix(challenge.salt.as_bytes());
    let mut digits = [0u8; 20];
    (0..=challenge.maxnumber)
        .find(|&n| {
            let mut h = prefix.clone();
            h.update(format_u64(&mut digits, n));
            h.finalize().as_slice() == target
        })
        .map(|number| Solution {
            algorithm: challenge.algorithm.clone(),
            challenge: challenge.challenge.clone(),
            number,
            salt: challenge.salt.clone(),
            signature: challenge.signature.clone(),
        })
}

/// `n` in decimal, written into `buf` (no allocation in the solver's loop).
fn format_u64(buf: &mut [u8; 20], mut n: u64) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_solver_finds_the_number_and_formats_digits_like_javascript() {
        let mut buf = [0u8; 20];
        for n in [0, 7, 10, 99, 1_000_000, u64::MAX] {
            assert_eq!(format_u64(&mut buf, n), n.to_string().as_bytes());
        }
        let c = make(b"k", "abc?x=1&".into(), 4_321, 10_000);
        let s = solve(&c).expect("solvable");
        assert_eq!(s.number, 4_321);
        assert_eq!(challenge_hex(&s.salt, s.number), c.challenge);
        assert!(signature_verifies(b"k", &c.challenge, &c.signature));
        assert!(signature_verifies(
            b"k",
            &c.challenge,
            &c.signature.to_uppercase()
        ));
        assert!(!signature_verifies(b"K", &c.challenge, &c.signature));
        assert!(!signature_verifies(b"k", &c.challenge, "zz"));
        // A number above maxnumber is not found: the work is bounded by what was announced.
        let hidden = make(b"k", "abc&".into(), 11, 10);
        assert_eq!(solve(&hidden), None);
    }

    #[test]
    fn a_payload_round_trips_through_base64_and_junk_does_not_parse() {
        let c = make(b"k", "s&".into(), 3, 10);
        let s = solve(&c).expect("solvable");
        assert_eq!(Solution::decode(&s.encode()), Some(s.clone()));
        assert_eq!(
            Solution::decode(s.encode().trim_end_matches('=')),
            Some(s.clone())
        );
        // The widget adds `took`; extra members are ignored.
        let mut v = serde_json::to_value(&s).expect("json");
        v["took"] = 12.into();
        let with_took = STANDARD.encode(v.to_string());
        assert_eq!(Solution::decode(&with_took), Some(s));
        for junk in [
            "",
            "not base64!",
            &STANDARD.encode("[]"),
            &STANDARD.encode(r#"{"algorithm":"SHA-256"}"#),
            &STANDARD.encode(
                r#"{"algorithm":"SHA-256","challenge":"a","number":-1,"salt":"s","signature":"x"}"#,
            ),
            &STANDARD.encode(
                r#"{"algorithm":"SHA-256","challenge":"a","number":1.5,"salt":"s","signature":"x"}"#,
            ),
            &"A".repeat(MAX_PAYLOAD_LEN + 4),
        ] {
            assert_eq!(Solution::decode(junk), None, "{junk:?}");
        }
    }
}
