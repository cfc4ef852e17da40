//! The proof of work against ALTCHA's own libraries: vectors made by `altcha-lib` (`v1` of
//! 2.8.0, and 1.4.0) verify here, and a challenge issued here with the same salt, number and key
//! is byte for byte the one `altcha-lib` makes (so `altcha-lib`'s `verifySolution` accepts its
//! solutions; `edge/e2e/proof.test.mjs` checks that against the running edge too). The vectors
//! are `edge/e2e/altcha-vectors.mjs`'s output.

use shared::{KeyId, SecretRing};

use super::*;

const KEY: &str = "altcha-vector-secret-0123456789";
/// 2023-06-13T… is before, 2027-01-15T08:00:00Z (1 800 000 000 s) the vectors' expiry.
const NOW_MS: i64 = 1_700_000_000_000;

fn ring() -> SecretRing {
    SecretRing::single(KEY.as_bytes().to_vec())
}

fn alice_purchase() -> Expected<'static> {
    Expected {
        sku: "SHOE-1",
        user: "alice@shop:42",
        purpose: Purpose::Purchase,
        not_before_ms: None,
    }
}

/// `createChallenge({hmacKey, number: 123456, salt: "0123456789abcdef01234567", maxnumber: 2^20,
/// params: {kid: "default", purpose: "purchase", sku: "SHOE-1", user: "alice@shop:42"},
/// expires: 1800000000 s})` of `altcha-lib/v1` 2.8.0.
const V2_CHALLENGE: &str = r#"{"algorithm":"SHA-256","challenge":"34ef64b6a6eec94357962a73bdb73776dcbb812e6f1fdf030114e589c291dd35","maxnumber":1048576,"salt":"0123456789abcdef01234567?kid=default&purpose=purchase&sku=SHOE-1&user=alice%40shop%3A42&expires=1800000000&","signature":"c38f2ea00253d9069ad2286187d383230afc9bfefea5084335742e2044badc03"}"#;
/// The same with `issued: "1799999828"` after `user` in `params` (as `issue` binds a challenge to
/// the second it was issued in: 1 800 000 000 − 120 − 52, the TTL and the slowest solve at 20
/// bits before the expiry).
const V2_ISSUED_CHALLENGE: &str = r#"{"algorithm":"SHA-256","challenge":"3b6cf12050c3a6be217642f2c9fa951f8d8347e7838ed1313328ebf7eeb04a63","maxnumber":1048576,"salt":"0123456789abcdef01234567?kid=default&purpose=purchase&sku=SHOE-1&user=alice%40shop%3A42&issued=1799999828&expires=1800000000&","signature":"e5e4e0acad0b0cf062fb691baefabc4f4d3509e8d6fb37b2ae47ca96ce4ecb41"}"#;
/// Its solution as the widget submits it (`btoa(JSON.stringify(payload))`).
const V2_PAYLOAD: &str = "eyJhbGdvcml0aG0iOiJTSEEtMjU2IiwiY2hhbGxlbmdlIjoiMzRlZjY0YjZhNmVlYzk0MzU3OTYyYTczYmRiNzM3NzZkY2JiODEyZTZmMWZkZjAzMDExNGU1ODljMjkxZGQzNSIsIm51bWJlciI6MTIzNDU2LCJzYWx0IjoiMDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3P2tpZD1kZWZhdWx0JnB1cnBvc2U9cHVyY2hhc2Umc2t1PVNIT0UtMSZ1c2VyPWFsaWNlJTQwc2hvcCUzQTQyJmV4cGlyZXM9MTgwMDAwMDAwMCYiLCJzaWduYXR1cmUiOiJjMzhmMmVhMDAyNTNkOTA2OWFkMjI4NjE4N2QzODMyMzBhZmM5YmZlZmVhNTA4NDMzNTc0MmUyMDQ0YmFkYzAzIn0=";
/// The same for a join of `DROP.2026_x-1` by `bob`, number 1.
const V2_JOIN_PAYLOAD: &str = "eyJhbGdvcml0aG0iOiJTSEEtMjU2IiwiY2hhbGxlbmdlIjoiYWNmNDlkZDhkNzc1NzNkZWY1ZjExNDQ3MzQ2NzI2ODRhNzNiMDA4MzlhZjFkNWVjNDQ4YTc2MzY3Yjk5ODQxZCIsIm51bWJlciI6MSwic2FsdCI6ImZmZWVkZGNjYmJhYTk5ODg3NzY2NTU0ND9raWQ9ZGVmYXVsdCZwdXJwb3NlPWpvaW4mc2t1PURST1AuMjAyNl94LTEmdXNlcj1ib2ImZXhwaXJlcz0xODAwMDAwMDAwJiIsInNpZ25hdHVyZSI6ImJiOTYyMWRkNjczYzdlNzc1NTJkMTAyOTIxOTgzMjJmYjQ1NDZhMWY2ZDA3OWQ1YTE0ZDI5OTk1OThmOWFhNzEifQ==";
/// `altcha-lib` 1.4.0's (salt ending with `;`), number 777, maxnumber 1000.
const V1_PAYLOAD: &str = "eyJhbGdvcml0aG0iOiJTSEEtMjU2IiwiY2hhbGxlbmdlIjoiY2QwMjIyOTRlNjA0OTQ3YTA2NDA3NTg4ZTNjZjZmNzZkMmQzN2I2OGQwMDYyYjgyNjM5ODExNGIyZTFjZWFmNCIsIm51bWJlciI6Nzc3LCJzYWx0IjoiYTFiMmMzZDRlNWY2YTdiOGM5ZDBlMWYyP2tpZD1kZWZhdWx0JnB1cnBvc2U9cHVyY2hhc2Umc2t1PVNIT0UtMSZ1c2VyPWFsaWNlJTQwc2hvcCUzQTQyJmV4cGlyZXM9MTgwMDAwMDAwMDsiLCJzaWduYXR1cmUiOiI2YjUzZjY0NjAyZjkxNzU1NDQyNGEzNTMyODllNTJhMmE2NGExNDQyMDJlMDdlNTZiZTgwYTY4NGUyMzYzN2JiIn0=";

/// A v1 challenge, as `issue` makes it for a SKU of the default algorithm.
fn issue_v1(
    ring: &SecretRing,
    expected: Expected<'_>,
    bits: u8,
    now_s: i64,
    ttl_s: u32,
    entropy: Entropy,
) -> Challenge {
    match issue(
        ring,
        shared::PowAlgorithm::Sha256,
        expected,
        bits,
        now_s,
        ttl_s,
        entropy,
    ) {
        Issued::V1(c) => c,
        Issued::V2(c) => panic!("v2 for SHA-256: {c:?}"),
    }
}

/// Entropy that makes `issue` draw `salt_hex` and the secret `number` of a 2^`bits` challenge.
fn entropy(salt_hex: &str, number: u64) -> Entropy {
    let mut e = [0u8; 36];
    e[..12].copy_from_slice(&hex::decode(salt_hex).expect("hex"));
    e[12..20].copy_from_slice(&(number - 1).to_le_bytes());
    e
}

#[test]
fn a_challenge_issued_here_is_the_one_altcha_lib_makes() {
    let issued = issue_v1(
        &ring(),
        alice_purchase(),
        20,
        // Its lifetime is the TTL plus the slowest shopper's worst case at 20 bits.
        1_800_000_000 - 120 - difficulty::slowest_solve_secs(20),
        120,
        entropy("0123456789abcdef01234567", 123_456),
    );
    let made: Challenge = serde_json::from_str(V2_ISSUED_CHALLENGE).expect("vector");
    assert_eq!(issued, made);
    let solved = altcha::solve(&issued).expect("solvable");
    assert_eq!(solved.number, 123_456);
    // Without the issue second, the challenge is the one altcha-lib makes without it, whose
    // widget payload is the vector's.
    let mut bare: Challenge = serde_json::from_str(V2_CHALLENGE).expect("vector");
    assert_eq!(
        Solution::decode(V2_PAYLOAD).expect("payload"),
        altcha::solve(&bare).expect("solvable"),
        "same solution"
    );
    bare.salt = bare
        .salt
        .replace("&expires=", "&issued=1799999828&expires=");
    assert_eq!(bare.salt, issued.salt);
}

#[test]
fn solutions_of_altcha_lib_challenges_verify_here() {
    let spend = check(&ring(), Some(V2_PAYLOAD), alice_purchase(), NOW_MS).expect("v2");
    assert_eq!(
        spend,
        Spend {
            id: "34ef64b6a6eec94357962a73bdb73776dcbb812e6f1fdf030114e589c291dd35".into(),
            expires_ms: 1_800_000_000_000,
        }
    );
    let bob_join = Expected {
        sku: "DROP.2026_x-1",
        user: "bob",
        purpose: Purpose::Join,
        not_before_ms: None,
    };
    assert!(check(&ring(), Some(V2_JOIN_PAYLOAD), bob_join, NOW_MS).is_ok());
    assert!(check(&ring(), Some(V1_PAYLOAD), alice_purchase(), NOW_MS).is_ok());
    // Under another key, none of them does.
    let other = SecretRing::single(b"another-secret-of-enough-length".to_vec());
    for payload in [V2_PAYLOAD, V1_PAYLOAD] {
        assert_eq!(
            check(&other, Some(payload), alice_purchase(), NOW_MS),
            Err(ProofError::Forged)
        );
    }
}

#[test]
fn a_proof_is_bound_to_its_sku_shopper_purpose_and_time() {
    let ok = alice_purchase();
    let cases = [
        (
            Expected {
                sku: "SHOE-2",
                ..ok
            },
            NOW_MS,
            ProofError::OtherSku,
        ),
        (
            Expected {
                user: "mallory",
                ..ok
            },
            NOW_MS,
            ProofError::OtherShopper,
        ),
        (
            Expected {
                purpose: Purpose::Join,
                ..ok
            },
            NOW_MS,
            ProofError::OtherPurpose,
        ),
        (ok, 1_800_000_000_001, ProofError::Expired),
    ];
    for (expected, now, error) in cases {
        assert_eq!(check(&ring(), Some(V2_PAYLOAD), expected, now), Err(error));
    }
    // Valid up to and including its `expires` second, as altcha-lib's verifySolution.
    assert!(check(&ring(), Some(V2_PAYLOAD), ok, 1_800_000_000_000).is_ok());
}

#[test]
fn a_wrong_number_a_forged_signature_or_a_rewritten_salt_does_not_verify() {
    let good = Solution::decode(V2_PAYLOAD).expect("payload");
    let forge = |f: &dyn Fn(&mut Solution)| {
        let mut s = good.clone();
        f(&mut s);
        check(&ring(), Some(&s.encode()), alice_purchase(), NOW_MS)
    };
    assert_eq!(forge(&|s| s.number += 1), Err(ProofError::Forged));
    assert_eq!(
        forge(&|s| s.signature = "00".repeat(32)),
        Err(ProofError::Forged)
    );
    // A salt rewritten for another SKU: the hash no longer matches (and a new hash has no
    // signature).
    assert_eq!(
        forge(&|s| s.salt = s.salt.replace("SHOE-1", "SHOE-2")),
        Err(ProofError::Forged)
    );
    assert_eq!(
        forge(&|s| {
            s.salt = s.salt.replace("SHOE-1", "SHOE-2");
            s.challenge = altcha::challenge_hex(&s.salt, s.number);
        }),
        Err(ProofError::Forged)
    );
    // Splicing: the delimiter moved from the salt into the number's place hashes the same bytes
    // only if the salt may end without it, which it may not.
    assert_eq!(
        forge(&|s| {
            s.salt = s.salt.trim_end_matches('&').to_owned();
        }),
        Err(ProofError::Malformed)
    );
    assert_eq!(
        forge(&|s| s.algorithm = "SHA-1".into()),
        Err(ProofError::Malformed)
    );
    for blank in [None, Some(""), Some("  ")] {
        assert_eq!(
            check(&ring(), blank, alice_purchase(), NOW_MS),
            Err(ProofError::Missing)
        );
    }
    assert_eq!(
        check(&ring(), Some("junk"), alice_purchase(), NOW_MS),
        Err(ProofError::Malformed)
    );
}

#[test]
fn rotation_verifies_every_listed_key_and_signs_with_the_first() {
    let old = SecretRing::single(KEY.as_bytes().to_vec());
    let rotated = SecretRing::new(vec![
        (
            KeyId::parse("p2").expect("kid"),
            b"the-new-pow-secret-0123456789".to_vec(),
        ),
        (KeyId::default_id(), KEY.as_bytes().to_vec()),
    ])
    .expect("ring");
    // An old key's proofs still verify while it is listed…
    assert!(check(&rotated, Some(V2_PAYLOAD), alice_purchase(), NOW_MS).is_ok());
    // …new challenges name the new key, and a ring without it refuses them.
    let c = issue_v1(
        &rotated,
        alice_purchase(),
        4,
        NOW_MS / 1_000,
        60,
        entropy("00112233445566778899aabb", 5),
    );
    assert!(c.salt.contains("kid=p2&"), "{}", c.salt);
    let s = altcha::solve(&c).expect("solvable").encode();
    assert!(check(&rotated, Some(&s), alice_purchase(), NOW_MS).is_ok());
    assert_eq!(
        check(&old, Some(&s), alice_purchase(), NOW_MS),
        Err(ProofError::Forged)
    );
}

#[test]
fn an_issued_challenge_is_as_hard_as_its_bits_and_expires_after_its_ttl() {
    for bits in [1, 8, 16] {
        let c = issue_v1(
            &ring(),
            alice_purchase(),
            bits,
            NOW_MS / 1_000,
            120,
            [7; 36],
        );
        assert_eq!(c.maxnumber, 1 << bits);
        let s = altcha::solve(&c).expect("within maxnumber");
        assert!((1..=c.maxnumber).contains(&s.number));
        let header = s.encode();
        let life_ms = (120 + difficulty::slowest_solve_secs(bits)) * 1_000;
        assert!(check(&ring(), Some(&header), alice_purchase(), NOW_MS + life_ms).is_ok());
        assert_eq!(
            check(
                &ring(),
                Some(&header),
                alice_purchase(),
                NOW_MS + life_ms + 1_000
            ),
            Err(ProofError::Expired)
        );
    }
}

/// Issue 35: a farm fetched its challenges in the quiet minute before `starts_at`, solved them at
/// leisure and fired them at the start. A purchase of a scheduled sale needs a proof issued from
/// the start on.
#[test]
fn a_purchase_of_a_scheduled_sale_needs_a_proof_issued_from_its_start_on() {
    let start_ms = NOW_MS + 60_500;
    let scheduled = Expected {
        not_before_ms: Some(start_ms),
        ..alice_purchase()
    };
    let issued_at = |s: i64| {
        let c = issue_v1(&ring(), alice_purchase(), 4, s, 120, [9; 36]);
        assert!(
            c.salt.contains(&format!("&issued={s}&expires=")),
            "{}",
            c.salt
        );
        altcha::solve(&c).expect("solvable").encode()
    };
    let early = issued_at(start_ms / 1_000 - 1);
    // Used after the start, a proof issued before it is refused; it still verifies otherwise.
    assert_eq!(
        check(&ring(), Some(&early), scheduled, start_ms + 1_000),
        Err(ProofError::BeforeStart)
    );
    assert!(check(&ring(), Some(&early), alice_purchase(), start_ms + 1_000).is_ok());
    // Issued in the start's second or later: good.
    for s in [start_ms / 1_000, start_ms / 1_000 + 30] {
        assert!(check(&ring(), Some(&issued_at(s)), scheduled, start_ms + 31_000).is_ok());
    }
    // A challenge that does not say when it was issued (altcha-lib's, made with the secret)
    // cannot buy from a sale with a start.
    assert_eq!(
        check(&ring(), Some(V2_PAYLOAD), scheduled, NOW_MS),
        Err(ProofError::BeforeStart)
    );
    assert_eq!(
        ProofError::BeforeStart.to_string(),
        "the proof was issued before the sale started"
    );
}

/// Issue 35: spent records were dropped at the proof's expiry on the object's clock while the
/// worker checks the expiry on its own: they are kept well past any skew.
#[test]
fn spent_records_outlive_the_proofs_expiry_by_more_than_any_clock_skew() {
    let expires_ms = NOW_MS;
    // The object forgets records whose proof expired before the cutoff.
    let kept_at = |object_now: i64| expires_ms >= spent_forget_before(object_now);
    assert!(kept_at(expires_ms + 1), "a millisecond after its expiry");
    assert!(
        kept_at(expires_ms + 60_000),
        "the largest SCHEDULE_CLOCK_MARGIN_MS"
    );
    assert!(kept_at(expires_ms + SPENT_KEPT_PAST_EXPIRY_MS));
    assert!(!kept_at(expires_ms + SPENT_KEPT_PAST_EXPIRY_MS + 1));
    // A worker whose clock is a minute behind the object's still takes the proof for valid a
    // minute after its expiry on the object's clock: the record is there to refuse it.
    let worker_now = 1_800_000_000_000;
    assert!(
        check(&ring(), Some(V2_PAYLOAD), alice_purchase(), worker_now).is_ok(),
        "valid on the worker's clock"
    );
    assert!(1_800_000_000_000 >= spent_forget_before(worker_now + 60_000));
}

#[test]
fn a_purchase_challenge_is_not_issued_before_the_start_and_a_join_challenge_is() {
    let start_ms = NOW_MS + 30_000;
    let schedule = shared::Schedule {
        starts_at: shared::Timestamp::from_unix_ms(start_ms),
        ..shared::Schedule::default()
    };
    let early = too_early(Purpose::Purchase, Some(&schedule), start_ms - 1);
    assert!(
        matches!(
            early,
            Some(shared::Closed::NotStarted {
                retry_after_secs: 1,
                ..
            })
        ),
        "{early:?}"
    );
    assert_eq!(
        too_early(Purpose::Purchase, Some(&schedule), start_ms),
        None
    );
    assert_eq!(too_early(Purpose::Join, Some(&schedule), NOW_MS), None);
    assert_eq!(too_early(Purpose::Purchase, None, NOW_MS), None);
    // A paused or ended sale gets its challenges; the purchase says the rest.
    let paused = shared::Schedule {
        paused: true,
        ..shared::Schedule::default()
    };
    assert_eq!(too_early(Purpose::Purchase, Some(&paused), NOW_MS), None);
    // And what the purchase then asks of its proof.
    let e = Expected::purchase("SHOE-1", "alice@shop:42", Some(&schedule));
    assert_eq!(
        (e.purpose, e.not_before_ms),
        (Purpose::Purchase, Some(start_ms - start_ms % 1_000))
    );
    assert_eq!(Expected::purchase("S", "u", None).not_before_ms, None);
    assert_eq!(Expected::join("S", "u").not_before_ms, None);
}
