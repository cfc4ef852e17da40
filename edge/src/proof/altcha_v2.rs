//! ALTCHA's proof of work v2 (`PBKDF2/SHA-256`), byte for byte as ALTCHA's own libraries
//! (`altcha-lib` 2.x's default export, the `altcha` crate 1.x, the `altcha` widget 3.x) make,
//! solve and verify it, so any of them interoperates with the edge:
//!
//! - a **challenge** `{"parameters": {algorithm, cost, data, expiresAt, keyLength, keyPrefix,
//!   keySignature, nonce, salt}, "signature"}` in ALTCHA's *deterministic mode*: the edge draws a
//!   secret `counter`, derives `key = PBKDF2-HMAC-SHA-256(password = nonce ‖ counter as a 4-byte
//!   big-endian integer, salt, cost iterations, keyLength 32)`, and publishes the first half of
//!   the key as `keyPrefix` and `keySignature` = hex HMAC-SHA-256 of the key under the secret;
//!   `signature` = hex HMAC-SHA-256 of the parameters' canonical JSON (members sorted by name, as
//!   `JSON.stringify` writes them) under the secret;
//! - a **solution** (the widget's payload) `{"challenge": {parameters, signature}, "solution":
//!   {counter, derivedKey, time}}` as JSON, base64-encoded (the widget's `btoa`), found by trying
//!   `counter` = 0, 1, 2… until the derived key starts with `keyPrefix`.
//!
//! Verifying costs the edge two HMACs and no key derivation (the `keySignature` fast path of the
//! libraries' `verifySolution`): the one derivation a challenge costs the edge is made when it is
//! issued. What the challenge is bound to travels in `data` (`super::salt::Binding`'s members)
//! and `expiresAt`, covered by the signature. Nothing here knows about SKUs or shoppers.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// The only v2 algorithm the edge issues and accepts.
pub const ALGORITHM: &str = "PBKDF2/SHA-256";
/// Bytes of a derived key (ALTCHA's default `keyLength`).
pub const KEY_LENGTH: usize = 32;
/// Bytes of the derived key published as `keyPrefix` (ALTCHA's default: half the key).
pub const PREFIX_LENGTH: usize = KEY_LENGTH / 2;

/// What a v2 challenge is bound to (the v1 salt's parameters, as JSON members sorted by name).
/// Members the edge never issues are refused (not what it signed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(target_arch = "wasm32"), derive(utoipa::ToSchema), schema(as = AltchaV2Data))]
pub struct Data {
    /// Unix seconds when the edge issued it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issued: Option<i64>,
    /// The `POW_SECRETS` key that signed it.
    pub kid: String,
    /// `join` or `purchase`.
    pub purpose: String,
    pub sku: String,
    pub user: String,
}

/// A challenge's parameters, members in canonical (sorted) order: serialized as they are, they
/// are the JSON the signature covers. Members the edge never issues are refused (the libraries
/// would sign them too: they are not what the edge signed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(target_arch = "wasm32"), derive(utoipa::ToSchema), schema(as = AltchaV2Parameters))]
pub struct Parameters {
    /// Always `PBKDF2/SHA-256`.
    pub algorithm: String,
    /// PBKDF2 iterations per candidate counter.
    pub cost: u32,
    pub data: Data,
    /// Unix seconds after which the challenge is refused.
    #[serde(rename = "expiresAt")]
    pub expires_at: i64,
    /// Always 32.
    #[serde(rename = "keyLength")]
    pub key_length: u32,
    /// Lower-case hex of the first 16 bytes of the secret counter's key: what a solver looks for.
    #[serde(rename = "keyPrefix")]
    pub key_prefix: String,
    /// Lower-case hex HMAC-SHA-256 of the secret counter's key under the signing key.
    #[serde(rename = "keySignature")]
    pub key_signature: String,
    /// 16 random bytes, hex: the password is the nonce followed by the counter.
    pub nonce: String,
    /// 16 random bytes, hex: PBKDF2's salt.
    pub salt: String,
}

/// A v2 challenge, as `GET /v1/challenge` answers it for a SKU whose `proof_of_work.algorithm`
/// is `PBKDF2/SHA-256` (the `altcha` widget's `challenge` URL or JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(utoipa::ToSchema), schema(as = AltchaV2Challenge))]
pub struct Challenge {
    pub parameters: Parameters,
    /// Lower-case hex HMAC-SHA-256 of the parameters' canonical JSON under the edge's
    /// `POW_SECRETS` key `data.kid`.
    pub signature: String,
}

/// A solved counter (extra members such as `time` are ignored).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(Serialize))]
pub struct Found {
    pub counter: u32,
    #[serde(rename = "derivedKey")]
    pub derived_key: String,
}

/// The widget's v2 payload.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(Serialize))]
pub struct Payload {
    pub challenge: Challenge,
    pub solution: Found,
}

/// The password of `counter`: the nonce followed by the counter, 4 bytes big-endian (ALTCHA v2's
/// `uint32` counter mode).
fn password(nonce: &[u8], counter: u32) -> Vec<u8> {
    let mut p = Vec::with_capacity(nonce.len() + 4);
    p.extend_from_slice(nonce);
    p.extend_from_slice(&counter.to_be_bytes());
    p
}

/// The key of `counter`: PBKDF2-HMAC-SHA-256 of the password over `salt`, `cost` iterations.
pub fn derive(nonce: &[u8], salt: &[u8], cost: u32, counter: u32) -> [u8; KEY_LENGTH] {
    let mut key = [0u8; KEY_LENGTH];
    pbkdf2::pbkdf2_hmac::<Sha256>(&password(nonce, counter), salt, cost.max(1), &mut key);
    key
}

/// HMAC-SHA-256 of `message` under `key` (HMAC takes a key of any length: never `None`).
fn mac(key: &[u8], message: &[u8]) -> Option<Hmac<Sha256>> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).ok()?;
    mac.update(message);
    Some(mac)
}

fn mac_hex(key: &[u8], message: &[u8]) -> String {
    mac(key, message).map_or_else(String::new, |m| hex::encode(m.finalize().into_bytes()))
}

/// Whether `presented` (hex) is the HMAC of `message` under `key`, compared in constant time.
fn mac_verifies(key: &[u8], message: &[u8], presented: &str) -> bool {
    match (hex::decode(presented), mac(key, message)) {
        (Ok(presented), Some(mac)) => mac.verify_slice(&presented).is_ok(),
        _ => false,
    }
}

impl Parameters {
    /// The JSON the signature covers: the members sorted by name, as ALTCHA's `canonicalJSON`
    /// (`JSON.stringify` of the sorted object) writes them.
    pub fn canonical_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// What `make` needs besides the key: the random nonce and salt, the secret counter, the cost
/// and the binding.
#[derive(Debug, Clone)]
pub struct Draw {
    pub nonce: [u8; 16],
    pub salt: [u8; 16],
    pub counter: u32,
    pub cost: u32,
    pub data: Data,
    pub expires_at: i64,
}

/// The challenge of `draw`, signed with `key` (ALTCHA's `createChallenge` with `counter`,
/// `hmacSignatureSecret` and `hmacKeySignatureSecret` both the key).
pub fn make(key: &[u8], draw: Draw) -> Challenge {
    let derived = derive(&draw.nonce, &draw.salt, draw.cost, draw.counter);
    let parameters = Parameters {
        algorithm: ALGORITHM.to_owned(),
        cost: draw.cost.max(1),
        data: draw.data,
        expires_at: draw.expires_at,
        key_length: KEY_LENGTH as u32,
        key_prefix: hex::encode(&derived[..PREFIX_LENGTH]),
        key_signature: mac_hex(key, &derived),
        nonce: hex::encode(draw.nonce),
        salt: hex::encode(draw.salt),
    };
    Challenge {
        signature: mac_hex(key, parameters.canonical_json().as_bytes()),
        parameters,
    }
}

/// Why a payload is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not ours: another algorithm or key length.
    Malformed,
    /// The signature or the key does not verify.
    Forged,
}

/// Verifies `payload` under `key`: the parameters' signature, then the solved key against the
/// signed `keySignature` (no derivation). The id of a verified payload is its signature as the
/// edge computes it (lower-case hex, unique per challenge): one id per challenge, however the
/// presented hex is written.
pub fn verify(key: &[u8], payload: &Payload) -> Result<String, Refusal> {
    let p = &payload.challenge.parameters;
    if p.algorithm != ALGORITHM || p.key_length != KEY_LENGTH as u32 {
        return Err(Refusal::Malformed);
    }
    let json = p.canonical_json();
    if !mac_verifies(key, json.as_bytes(), &payload.challenge.signature) {
        return Err(Refusal::Forged);
    }
    // The solvers write the key in lower-case hex (the libraries refuse anything else too).
    let solved = &payload.solution.derived_key;
    let well_formed = solved.len() == 2 * KEY_LENGTH
        && solved
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let derived = hex::decode(solved).map_err(|_| Refusal::Forged)?;
    if !well_formed || !mac_verifies(key, &derived, &p.key_signature) {
        return Err(Refusal::Forged);
    }
    Ok(mac_hex(key, json.as_bytes()))
}

/// Finds the counter of `challenge`, trying 0, 1, 2… up to `max_counter` as the widget does: the
/// work a shopper's browser (or a farm) must do. `None` if none matches.
pub fn solve(challenge: &Challenge, max_counter: u32) -> Option<Payload> {
    let p = &challenge.parameters;
    let nonce = hex::decode(&p.nonce).ok()?;
    let salt = hex::decode(&p.salt).ok()?;
    let prefix = hex::decode(&p.key_prefix).ok()?;
    (0..=max_counter)
        .map(|counter| (counter, derive(&nonce, &salt, p.cost, counter)))
        .find(|(_, key)| key.starts_with(&prefix))
        .map(|(counter, key)| Payload {
            challenge: challenge.clone(),
            solution: Found {
                counter,
                derived_key: hex::encode(key),
            },
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draw(counter: u32) -> Draw {
        Draw {
            nonce: [7; 16],
            salt: [9; 16],
            counter,
            cost: 3,
            data: Data {
                issued: Some(1_700_000_000),
                kid: "default".into(),
                purpose: "purchase".into(),
                sku: "SHOE-1".into(),
                user: "alice\"\n\u{1}é".into(),
            },
            expires_at: 1_800_000_000,
        }
    }

    #[test]
    fn the_canonical_json_sorts_members_as_javascript_does() {
        let c = make(b"k", draw(5));
        let json = c.parameters.canonical_json();
        let names: Vec<String> = serde_json::from_str::<serde_json::Value>(&json)
            .ok()
            .and_then(|v| v.as_object().map(|o| o.keys().cloned().collect()))
            .unwrap_or_default();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert!(json.starts_with(r#"{"algorithm":"PBKDF2/SHA-256","cost":3,"data":{"issued":1700000000,"kid":"default","purpose":"purchase","sku":"SHOE-1","user":"alice\"\n\u0001é"},"expiresAt":1800000000,"keyLength":32,"keyPrefix":""#), "{json}");
    }

    #[test]
    fn the_solver_finds_the_counter_and_only_the_key_verifies() {
        let c = make(b"k", draw(5));
        let solved = solve(&c, 100).expect("solvable");
        assert_eq!(solved.solution.counter, 5);
        let id = verify(b"k", &solved).expect("verifies");
        assert_eq!(id, c.signature);
        assert_eq!(verify(b"K", &solved), Err(Refusal::Forged));
        // Another key, a key in upper case, a rewritten binding: refused.
        let mut wrong = solved.clone();
        wrong.solution.derived_key = hex::encode([0u8; 32]);
        assert_eq!(verify(b"k", &wrong), Err(Refusal::Forged));
        let mut upper = solved.clone();
        upper.solution.derived_key = upper.solution.derived_key.to_uppercase();
        assert_eq!(verify(b"k", &upper), Err(Refusal::Forged));
        let mut rebound = solved.clone();
        rebound.challenge.parameters.data.user = "mallory".into();
        assert_eq!(verify(b"k", &rebound), Err(Refusal::Forged));
        let mut cheaper = solved.clone();
        cheaper.challenge.parameters.cost = 1;
        assert_eq!(verify(b"k", &cheaper), Err(Refusal::Forged));
        // The signature in upper case still verifies, to the same id.
        let mut shouted = solved;
        shouted.challenge.signature = shouted.challenge.signature.to_uppercase();
        assert_eq!(verify(b"k", &shouted), Ok(id));
        // A counter above the bound is not found: the work is bounded by the draw.
        assert_eq!(solve(&make(b"k", draw(11)), 10), None);
    }
}
