//! Proof of work at the edge, in the ALTCHA format — v1 (`SHA-256`, [`altcha`]) or proof of work
//! v2 (`PBKDF2/SHA-256`, [`altcha_v2`]), as the SKU's `proof_of_work.algorithm` says
//! (docs/bot-defence.md). Where a SKU's view
//! carries `proof_of_work`, joining its waiting room — or, without a room, a purchase — needs a
//! solved challenge in `Flashgate-Proof`: every account of a farm then pays CPU per attempt, and
//! pays the most at the peak ([`difficulty`]).
//!
//! On the request path: `GET /v1/challenge?sku=…` issues a challenge ([`issue`]) bound to the SKU,
//! the shopper and the purpose ([`salt`]), signed with `POW_SECRETS`; the join or the purchase
//! then [`check`]s the solution in the worker (format, signature, expiry, binding: no I/O), and
//! the object that serializes the shopper's requests spends it once — the shopper's `UserGate`
//! for a purchase (`crate::gate`), the shopper's room shard for a join — so a replay at any
//! location is refused without a global (hot) object. A proof is never forwarded to the origin,
//! and its refusals (`428 proof_required`, `403 proof_rejected`) are never stored with an
//! Idempotency-Key ([`answer`]).

pub mod altcha;
pub mod altcha_v2;
pub mod answer;
pub mod difficulty;
pub mod salt;

use serde::{Deserialize, Serialize};
use shared::{Closed, PowAlgorithm, Schedule, SecretRing};

pub use altcha::{Challenge, Solution};
pub use salt::{Binding, Purpose};

/// The request header that carries a solution (base64 of the widget's JSON payload).
pub const PROOF_HEADER: &str = "flashgate-proof";
/// Where challenges are issued.
pub const CHALLENGE_PATH: &str = "/v1/challenge";

/// What a proof must be good for: this SKU, this shopper, this purpose, and — for a purchase of a
/// sale with a start — issued from that start on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected<'a> {
    pub sku: &'a str,
    pub user: &'a str,
    pub purpose: Purpose,
    /// The sale's `starts_at` (unix ms) for a purchase of a scheduled sale: a proof issued before
    /// it (the second it was issued in, on the issuing edge's clock) is refused, so proofs
    /// solved in the quiet minutes before the start cannot be fired at it (issue 35). `None`:
    /// any issue time (a join: the pre-queue before the start is the room's design).
    pub not_before_ms: Option<i64>,
}

impl<'a> Expected<'a> {
    /// What a purchase of `sku` by `user` needs: a purchase proof, issued from the start of a
    /// sale with one (`schedule`).
    pub fn purchase(sku: &'a str, user: &'a str, schedule: Option<&Schedule>) -> Self {
        Self {
            sku,
            user,
            purpose: Purpose::Purchase,
            not_before_ms: schedule.and_then(|s| s.starts_at).map(|s| s.unix_ms()),
        }
    }

    /// What a join of `sku`'s waiting room by `user` needs: a join proof, issued any time.
    pub fn join(sku: &'a str, user: &'a str) -> Self {
        Self {
            sku,
            user,
            purpose: Purpose::Join,
            not_before_ms: None,
        }
    }
}

/// Whether `GET /v1/challenge` must refuse a challenge for `purpose` of a sale with `schedule` at
/// `now_ms` (this edge's clock): a purchase's is issued only from the sale's start on — before,
/// the purchase's own `409 not_started` with `Retry-After` — so no proof for it can be solved in
/// the quiet minutes before the start; a join's always is (the waiting room's pre-queue before
/// the start is its design, and each member joins once).
pub fn too_early(purpose: Purpose, schedule: Option<&Schedule>, now_ms: i64) -> Option<Closed> {
    match (purpose, schedule?.closed_at(now_ms)?) {
        (Purpose::Purchase, closed @ Closed::NotStarted { .. }) => Some(closed),
        _ => None,
    }
}

/// How long a spent proof's record is kept past its expiry. A proof's expiry is checked on the
/// worker's clock and its record dropped on the object's: the records outlive the expiry by far
/// more than any skew between the two (Cloudflare's clocks are NTP-synchronised to milliseconds;
/// `SCHEDULE_CLOCK_MARGIN_MS` allows 60 s at most), so no clock sees a proof still valid whose
/// record is gone.
pub const SPENT_KEPT_PAST_EXPIRY_MS: i64 = 10 * 60_000;

/// Spent records whose proof expired before this instant (`now_ms` on the object's clock) may be
/// forgotten: [`SPENT_KEPT_PAST_EXPIRY_MS`] earlier than now.
pub fn spent_forget_before(now_ms: i64) -> i64 {
    now_ms.saturating_sub(SPENT_KEPT_PAST_EXPIRY_MS)
}

/// A verified proof, to be spent once: its id (the challenge's hash, unique per salt) and when it
/// expires (after which the spent record may be forgotten: the proof no longer verifies).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Spend {
    pub id: String,
    pub expires_ms: i64,
}

/// Why a proof is refused: `Missing` is `428 proof_required`, everything else `403
/// proof_rejected` (the `Display` is the problem's detail).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    #[error("no Flashgate-Proof header")]
    Missing,
    #[error("the proof is malformed")]
    Malformed,
    #[error("the proof does not verify")]
    Forged,
    #[error("the proof has expired")]
    Expired,
    #[error("the proof was made for another SKU")]
    OtherSku,
    #[error("the proof was made for another shopper")]
    OtherShopper,
    #[error("the proof was made for another purpose")]
    OtherPurpose,
    #[error("the proof was used before")]
    Spent,
    #[error("the proof was issued before the sale started")]
    BeforeStart,
}

/// Random bytes a challenge needs: v1 takes 12 for the salt and 8 for the secret number; v2 16
/// for the nonce, 16 for the salt and 4 for the secret counter. The caller draws them from a
/// CSPRNG: a predictable number would be no work at all.
pub type Entropy = [u8; 36];

/// A challenge as `GET /v1/challenge` answers it: ALTCHA v1's or v2's, as the SKU asks.
// Serialize only in the worker: only the native tests read challenges back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(Deserialize, utoipa::ToSchema), schema(as = AltchaAnyChallenge))]
#[serde(untagged)]
pub enum Issued {
    /// `proof_of_work.algorithm` `SHA-256` (the default).
    V1(Challenge),
    /// `proof_of_work.algorithm` `PBKDF2/SHA-256`.
    V2(altcha_v2::Challenge),
}

/// A challenge of `bits` bits in the format `algorithm` for `expected`, valid for `ttl_s` plus
/// the time the slowest shopper's worst case takes ([`difficulty::slowest_solve_secs`]), signed
/// with the current key of `ring`.
pub fn issue(
    ring: &SecretRing,
    algorithm: PowAlgorithm,
    expected: Expected<'_>,
    bits: u8,
    now_s: i64,
    ttl_s: u32,
    entropy: Entropy,
) -> Issued {
    match algorithm {
        PowAlgorithm::Sha256 => Issued::V1(issue_v1(ring, expected, bits, now_s, ttl_s, entropy)),
        PowAlgorithm::Pbkdf2Sha256 => {
            Issued::V2(issue_v2(ring, expected, bits, now_s, ttl_s, entropy))
        }
    }
}

/// What a challenge issued at `now_s` for `expected` is bound to.
fn binding(ring: &SecretRing, expected: Expected<'_>, bits: u8, now_s: i64, ttl_s: u32) -> Binding {
    Binding {
        issued_s: Some(now_s),
        expires_s: now_s
            .saturating_add(i64::from(ttl_s))
            .saturating_add(difficulty::slowest_solve_secs(bits)),
        kid: ring.current().0.clone(),
        purpose: expected.purpose,
        sku: expected.sku.to_owned(),
        user: expected.user.to_owned(),
    }
}

/// A v2 challenge: `bits` bits of PBKDF2 iterations split by [`difficulty::v2_split`], the
/// secret counter uniform in `0..2^counter_bits`.
fn issue_v2(
    ring: &SecretRing,
    expected: Expected<'_>,
    bits: u8,
    now_s: i64,
    ttl_s: u32,
    entropy: Entropy,
) -> altcha_v2::Challenge {
    let binding = binding(ring, expected, bits, now_s, ttl_s);
    let (_, key) = ring.current();
    let (counter_bits, cost) = difficulty::v2_split(bits);
    let mut nonce = [0u8; 16];
    let mut salt = [0u8; 16];
    let mut counter = [0u8; 4];
    nonce.copy_from_slice(&entropy[..16]);
    salt.copy_from_slice(&entropy[16..32]);
    counter.copy_from_slice(&entropy[32..]);
    // counter_bits <= 30: a power of two, no modulo bias.
    let counter = u32::from_le_bytes(counter) % (1u32 << counter_bits);
    altcha_v2::make(
        key,
        altcha_v2::Draw {
            nonce,
            salt,
            counter,
            cost,
            expires_at: binding.expires_s,
            data: binding.into_data(),
        },
    )
}

/// A v1 challenge: `maxnumber` 2^`bits`.
fn issue_v1(
    ring: &SecretRing,
    expected: Expected<'_>,
    bits: u8,
    now_s: i64,
    ttl_s: u32,
    entropy: Entropy,
) -> Challenge {
    let key = ring.current().1;
    let binding = binding(ring, expected, bits, now_s, ttl_s);
    let (salt_bytes, number_bytes) = entropy[..20].split_at(12);
    let maxnumber = difficulty::max_number(bits);
    let mut draw = [0u8; 8];
    draw.copy_from_slice(number_bytes);
    // 1..=maxnumber, as ALTCHA draws it (maxnumber is a power of two: no modulo bias).
    let number = 1 + u64::from_le_bytes(draw) % maxnumber;
    altcha::make(
        key,
        binding.salt(&hex::encode(salt_bytes)),
        number,
        maxnumber,
    )
}

/// Verifies the `Flashgate-Proof` value `header` (absent or blank: `Missing`) for `expected` at
/// `now_ms`, without I/O: the format, the hash, the signature (under the key its salt names), the
/// expiry, the binding and, for a scheduled sale's purchase, that it was issued from the start on.
/// Whether it was spent before is the serializing object's to say.
pub fn check(
    ring: &SecretRing,
    header: Option<&str>,
    expected: Expected<'_>,
    now_ms: i64,
) -> Result<Spend, ProofError> {
    let header = header
        .filter(|h| !h.trim().is_empty())
        .ok_or(ProofError::Missing)?;
    let json = altcha::decode_base64(header).ok_or(ProofError::Malformed)?;
    let (binding, id) = match serde_json::from_slice::<altcha_v2::Payload>(&json) {
        Ok(payload) => verified_v2(ring, &payload)?,
        Err(_) => {
            let solution: Solution =
                serde_json::from_slice(&json).map_err(|_| ProofError::Malformed)?;
            verified_v1(ring, solution)?
        }
    };
    let expires_ms = binding.expires_s.saturating_mul(1_000);
    if expires_ms < now_ms {
        return Err(ProofError::Expired);
    }
    if binding.sku != expected.sku {
        return Err(ProofError::OtherSku);
    }
    if binding.user != expected.user {
        return Err(ProofError::OtherShopper);
    }
    if binding.purpose != expected.purpose {
        return Err(ProofError::OtherPurpose);
    }
    if let Some(start_ms) = expected.not_before_ms {
        // Whole seconds, as the salt says it: issued in the start's second or later.
        if binding
            .issued_s
            .is_none_or(|issued| issued < start_ms.div_euclid(1_000))
        {
            return Err(ProofError::BeforeStart);
        }
    }
    Ok(Spend { id, expires_ms })
}

/// A v1 solution's binding and id (its challenge hash), if its hash and signature verify.
fn verified_v1(ring: &SecretRing, solution: Solution) -> Result<(Binding, String), ProofError> {
    if solution.algorithm != altcha::ALGORITHM {
        return Err(ProofError::Malformed);
    }
    let binding = Binding::parse(&solution.salt).ok_or(ProofError::Malformed)?;
    let key = ring.get(&binding.kid).ok_or(ProofError::Forged)?;
    if altcha::challenge_hex(&solution.salt, solution.number) != solution.challenge
        || !altcha::signature_verifies(key, &solution.challenge, &solution.signature)
    {
        return Err(ProofError::Forged);
    }
    Ok((binding, solution.challenge))
}

/// A v2 payload's binding and id (its signature), if its signature and key verify.
fn verified_v2(
    ring: &SecretRing,
    payload: &altcha_v2::Payload,
) -> Result<(Binding, String), ProofError> {
    let parameters = &payload.challenge.parameters;
    let binding =
        Binding::from_data(&parameters.data, parameters.expires_at).ok_or(ProofError::Malformed)?;
    let key = ring.get(&binding.kid).ok_or(ProofError::Forged)?;
    let id = altcha_v2::verify(key, payload).map_err(|refusal| match refusal {
        altcha_v2::Refusal::Malformed => ProofError::Malformed,
        altcha_v2::Refusal::Forged => ProofError::Forged,
    })?;
    Ok((binding, id))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tests_v2;
