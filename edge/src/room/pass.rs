//! What the edge signs for the waiting room, with `ROOM_SECRETS` (rotatable, `kid:secret,…`; the
//! first signs, any verifies): the admission [`Pass`] a purchase sends in `Flashgate-Pass`, bound
//! to the user, the SKU and an expiry; and the join [`Receipt`] a poll sends back in
//! `Flashgate-Queue-Receipt`, which lets the worker answer it without asking a shard object.
//! Both are `<version>.<kid>.<fields…>.<base64url HMAC-SHA256>`; the user and the SKU are not in
//! the token but in what is signed, so a token shown for another user or SKU does not verify.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use shared::{KeyId, SecretRing};

/// Longest token accepted (ours are under 120 bytes).
const MAX_LEN: usize = 512;

/// Why a pass (or receipt) is refused. Every case is `403 not_admitted` for a purchase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PassError {
    #[error("no Flashgate-Pass header")]
    Missing,
    #[error("the pass is malformed")]
    Malformed,
    #[error("the pass does not verify for this shopper and SKU")]
    Forged,
    #[error("the pass has expired")]
    Expired,
}

fn mac(key: &[u8], parts: &[&str]) -> Option<Hmac<Sha256>> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).ok()?;
    for part in parts {
        // Length-prefixed: no two field lists sign the same bytes.
        mac.update(format!("{}:", part.len()).as_bytes());
        mac.update(part.as_bytes());
        mac.update(b",");
    }
    Some(mac)
}

/// Signs `fields` (bound to `version`, `sku`, `user`) into `version.kid.fields….sig`.
fn sign(ring: &SecretRing, version: &str, sku: &str, user: &str, fields: &[String]) -> String {
    let (kid, key) = ring.current();
    let mut parts = vec![version, kid.as_str(), sku, user];
    parts.extend(fields.iter().map(String::as_str));
    let sig = mac(key, &parts).map_or_else(Vec::new, |m| m.finalize().into_bytes().to_vec());
    let mut out = format!("{version}.{kid}");
    for f in fields {
        out.push('.');
        out.push_str(f);
    }
    out.push('.');
    out.push_str(&URL_SAFE_NO_PAD.encode(sig));
    out
}

/// Verifies `token` of `version` with `n` fields for `sku` and `user`; returns the fields.
fn verify<'t>(
    ring: &SecretRing,
    version: &str,
    n: usize,
    sku: &str,
    user: &str,
    token: &'t str,
) -> Result<Vec<&'t str>, PassError> {
    if token.len() > MAX_LEN {
        return Err(PassError::Malformed);
    }
    let parts: Vec<&str> = token.trim().split('.').collect();
    if parts.len() != n + 3 || parts[0] != version {
        return Err(PassError::Malformed);
    }
    let kid = KeyId::parse(parts[1]).ok_or(PassError::Malformed)?;
    let key = ring.get(&kid).ok_or(PassError::Forged)?;
    let sig = URL_SAFE_NO_PAD
        .decode(parts[n + 2])
        .map_err(|_| PassError::Malformed)?;
    let fields = parts[2..n + 2].to_vec();
    let mut signed = vec![version, kid.as_str(), sku, user];
    signed.extend(fields.iter().copied());
    let mac = mac(key, &signed).ok_or(PassError::Forged)?;
    // Constant time.
    mac.verify_slice(&sig).map_err(|_| PassError::Forged)?;
    Ok(fields)
}

/// An admission pass: `user` may buy `sku` until `expires_ms` (admission + `pass_secs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pass {
    pub expires_ms: i64,
}

impl Pass {
    const VERSION: &'static str = "p1";

    pub fn mint(ring: &SecretRing, sku: &str, user: &str, expires_ms: i64) -> String {
        sign(ring, Self::VERSION, sku, user, &[expires_ms.to_string()])
    }

    /// The pass of a purchase by `user` of `sku` at `now_ms` (`token`: the header, if any).
    pub fn check(
        ring: &SecretRing,
        sku: &str,
        user: &str,
        token: Option<&str>,
        now_ms: i64,
    ) -> Result<Self, PassError> {
        let token = token.ok_or(PassError::Missing)?;
        let fields = verify(ring, Self::VERSION, 1, sku, user, token)?;
        let expires_ms: i64 = fields[0].parse().map_err(|_| PassError::Malformed)?;
        if now_ms >= expires_ms {
            return Err(PassError::Expired);
        }
        Ok(Self { expires_ms })
    }
}

/// A join receipt: where `user` stands in `sku`'s room. `rank` (the place in the shard's order)
/// is unknown for a pre-queue member until the start; `admitted_ms` once the shard learned it;
/// `place` (the index in the room's total order: the exact position, issue 36) once the
/// coordinator numbered the member's epoch. `r2` receipts carry `place`; `r1` ones (from before)
/// still verify, without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receipt {
    pub shard: u32,
    pub rank: Option<u64>,
    pub join_ms: i64,
    pub pre: bool,
    pub admitted_ms: Option<i64>,
    pub place: Option<u64>,
}

impl Receipt {
    const VERSION: &'static str = "r2";
    const VERSION_1: &'static str = "r1";

    pub fn sign(&self, ring: &SecretRing, sku: &str, user: &str) -> String {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        sign(
            ring,
            Self::VERSION,
            sku,
            user,
            &[
                self.shard.to_string(),
                opt(self.rank.map(|r| r.to_string())),
                self.join_ms.to_string(),
                u8::from(self.pre).to_string(),
                opt(self.admitted_ms.map(|m| m.to_string())),
                opt(self.place.map(|p| p.to_string())),
            ],
        )
    }

    pub fn verify(
        ring: &SecretRing,
        sku: &str,
        user: &str,
        token: &str,
    ) -> Result<Self, PassError> {
        let f = if token.split('.').next() == Some(Self::VERSION_1) {
            verify(ring, Self::VERSION_1, 5, sku, user, token)?
        } else {
            verify(ring, Self::VERSION, 6, sku, user, token)?
        };
        let num = |s: &str| s.parse::<i64>().map_err(|_| PassError::Malformed);
        let opt = |s: &str| if s == "-" { Ok(None) } else { num(s).map(Some) };
        Ok(Self {
            shard: f[0].parse().map_err(|_| PassError::Malformed)?,
            rank: opt(f[1])?.and_then(|r| u64::try_from(r).ok()),
            join_ms: num(f[2])?,
            pre: f[3] == "1",
            admitted_ms: opt(f[4])?,
            place: match f.get(5) {
                Some(p) => opt(p)?.and_then(|p| u64::try_from(p).ok()),
                None => None,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring() -> SecretRing {
        SecretRing::parse("r1:room-secret-0123456789", 16).expect("ring")
    }

    #[test]
    fn a_pass_verifies_for_its_user_and_sku_until_it_expires() {
        let pass = Pass::mint(&ring(), "SKU", "alice", 10_000);
        assert_eq!(
            Pass::check(&ring(), "SKU", "alice", Some(&pass), 9_999),
            Ok(Pass { expires_ms: 10_000 })
        );
        assert_eq!(
            Pass::check(&ring(), "SKU", "alice", Some(&pass), 10_000),
            Err(PassError::Expired)
        );
        assert_eq!(
            Pass::check(&ring(), "SKU", "bob", Some(&pass), 0),
            Err(PassError::Forged),
            "another user"
        );
        assert_eq!(
            Pass::check(&ring(), "SKU2", "alice", Some(&pass), 0),
            Err(PassError::Forged),
            "another SKU"
        );
        assert_eq!(
            Pass::check(&ring(), "SKU", "alice", None, 0),
            Err(PassError::Missing)
        );
    }

    #[test]
    fn forged_and_malformed_passes_are_refused() {
        let pass = Pass::mint(&ring(), "SKU", "alice", 10_000);
        // A later expiry with the old signature.
        let stretched = pass.replace("10000", "99999");
        assert_eq!(
            Pass::check(&ring(), "SKU", "alice", Some(&stretched), 0),
            Err(PassError::Forged)
        );
        // Signed with another secret (same kid).
        let other = SecretRing::parse("r1:other-secret-0123456789", 16).expect("ring");
        let foreign = Pass::mint(&other, "SKU", "alice", 10_000);
        assert_eq!(
            Pass::check(&ring(), "SKU", "alice", Some(&foreign), 0),
            Err(PassError::Forged)
        );
        // An unknown kid.
        let unknown = SecretRing::parse("zz:room-secret-0123456789", 16).expect("ring");
        let p = Pass::mint(&unknown, "SKU", "alice", 10_000);
        assert_eq!(
            Pass::check(&ring(), "SKU", "alice", Some(&p), 0),
            Err(PassError::Forged)
        );
        for bad in [
            "",
            "p1",
            "p1.r1.1",
            "x1.r1.10000.AAAA",
            "p1.r1.ten.AAAA",
            "p1.r1.10000.!!",
        ] {
            assert!(
                Pass::check(&ring(), "SKU", "alice", Some(bad), 0).is_err(),
                "{bad}"
            );
        }
        // A receipt is not a pass.
        let receipt = Receipt {
            shard: 1,
            rank: Some(0),
            join_ms: 5,
            pre: false,
            admitted_ms: None,
            place: None,
        }
        .sign(&ring(), "SKU", "alice");
        assert!(Pass::check(&ring(), "SKU", "alice", Some(&receipt), 0).is_err());
    }

    #[test]
    fn a_rotated_ring_still_verifies_older_passes() {
        let pass = Pass::mint(&ring(), "SKU", "alice", 10_000);
        let rotated = SecretRing::parse(
            "r2:new-room-secret-0123456789,r1:room-secret-0123456789",
            16,
        )
        .expect("ring");
        assert!(Pass::check(&rotated, "SKU", "alice", Some(&pass), 0).is_ok());
    }

    #[test]
    fn receipts_round_trip_and_bind_user_and_sku() {
        let r = Receipt {
            shard: 7,
            rank: None,
            join_ms: 1_796_119_200_000,
            pre: true,
            admitted_ms: None,
            place: None,
        };
        let t = r.sign(&ring(), "SKU", "alice");
        assert_eq!(Receipt::verify(&ring(), "SKU", "alice", &t), Ok(r));
        assert!(Receipt::verify(&ring(), "SKU", "bob", &t).is_err());
        assert!(Receipt::verify(&ring(), "SKU2", "alice", &t).is_err());
        let r = Receipt {
            rank: Some(41),
            admitted_ms: Some(9),
            pre: false,
            place: Some(1_234),
            ..r
        };
        let t = r.sign(&ring(), "SKU", "alice");
        assert_eq!(Receipt::verify(&ring(), "SKU", "alice", &t), Ok(r));
        // A receipt of before the exact place (r1, five fields) still verifies, without it.
        let v1 = sign(
            &ring(),
            "r1",
            "SKU",
            "alice",
            &["7".into(), "41".into(), "5".into(), "0".into(), "-".into()],
        );
        let old = Receipt::verify(&ring(), "SKU", "alice", &v1).expect("an r1 receipt");
        assert_eq!((old.rank, old.place), (Some(41), None));
    }
}
