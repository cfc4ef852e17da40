//! ALTCHA's proof of work v2 (`PBKDF2/SHA-256`) against ALTCHA's own libraries, both ways:
//! - `altcha-lib` 2.8.0 (npm, what the `altcha` widget 3.x runs): a challenge it makes in
//!   deterministic mode is byte for byte the one the edge makes from the same nonce, salt and
//!   counter, and its solutions (as the widget submits them) verify here. The vectors are
//!   `node edge/e2e/altcha-v2-vectors.mjs`'s output; `edge/e2e/proof.test.mjs` has altcha-lib
//!   solve and verify the running edge's challenges, and `edge/e2e/browser/altcha_widget.test.mjs`
//!   the real widget.
//! - the PyPI `altcha` 2.3.0: it solves and verifies the edge's challenge of the npm vector (which
//!   the edge issues byte for byte), and a solution of a challenge it makes (its JSON unsorted,
//!   with spaces) verifies here: `edge/e2e/altcha-v2-vectors.py`.
//! - the official Rust crate (`altcha` 1.x, a dev-dependency): it solves and verifies the edge's
//!   challenges, and the solutions of challenges it makes with the edge's secret and binding
//!   verify here.

use shared::{KeyId, PowAlgorithm, SecretRing};

use super::*;

const KEY: &str = "altcha-vector-secret-0123456789";
const NOW_MS: i64 = 1_700_000_000_000;

const PURCHASE_CHALLENGE: &str = r#"{"parameters":{"algorithm":"PBKDF2/SHA-256","cost":64,"data":{"issued":1799999877,"kid":"default","purpose":"purchase","sku":"SHOE-1","user":"alice@shop:42"},"expiresAt":1800000000,"keyLength":32,"keyPrefix":"deea62bde985a4f046b3fa344e11de52","keySignature":"025f021d9ce3c6d04588fb8e420711c83b77eff6aed112b5bf20bb34f6d7e030","nonce":"2cfe00469799946b6e85908988d7d7c2","salt":"135b846f4909a7619c820de05bdf15a1"},"signature":"710fb76f36dc272142abd7a9726b6222063a38c3eb8ccfcceafd29b0748324c0"}"#;
const PURCHASE_PAYLOAD: &str = "eyJjaGFsbGVuZ2UiOnsicGFyYW1ldGVycyI6eyJhbGdvcml0aG0iOiJQQktERjIvU0hBLTI1NiIsImNvc3QiOjY0LCJkYXRhIjp7Imlzc3VlZCI6MTc5OTk5OTg3Nywia2lkIjoiZGVmYXVsdCIsInB1cnBvc2UiOiJwdXJjaGFzZSIsInNrdSI6IlNIT0UtMSIsInVzZXIiOiJhbGljZUBzaG9wOjQyIn0sImV4cGlyZXNBdCI6MTgwMDAwMDAwMCwia2V5TGVuZ3RoIjozMiwia2V5UHJlZml4IjoiZGVlYTYyYmRlOTg1YTRmMDQ2YjNmYTM0NGUxMWRlNTIiLCJrZXlTaWduYXR1cmUiOiIwMjVmMDIxZDljZTNjNmQwNDU4OGZiOGU0MjA3MTFjODNiNzdlZmY2YWVkMTEyYjViZjIwYmIzNGY2ZDdlMDMwIiwibm9uY2UiOiIyY2ZlMDA0Njk3OTk5NDZiNmU4NTkwODk4OGQ3ZDdjMiIsInNhbHQiOiIxMzViODQ2ZjQ5MDlhNzYxOWM4MjBkZTA1YmRmMTVhMSJ9LCJzaWduYXR1cmUiOiI3MTBmYjc2ZjM2ZGMyNzIxNDJhYmQ3YTk3MjZiNjIyMjA2M2EzOGMzZWI4Y2NmY2NlYWZkMjliMDc0ODMyNGMwIn0sInNvbHV0aW9uIjp7ImNvdW50ZXIiOjc3LCJkZXJpdmVkS2V5IjoiZGVlYTYyYmRlOTg1YTRmMDQ2YjNmYTM0NGUxMWRlNTJjYmQzZmYyMTk5NTE0ODQ3ZWEyYzcyYzE3NjkzNzMwOCIsInRpbWUiOjEyLjN9fQ==";
const JOIN_CHALLENGE: &str = r#"{"parameters":{"algorithm":"PBKDF2/SHA-256","cost":1,"data":{"kid":"default","purpose":"join","sku":"DROP.2026_x-1","user":"bob"},"expiresAt":1800000000,"keyLength":32,"keyPrefix":"39fd5f78df569f5d8b4cecf08a922fa2","keySignature":"3529b8838ec6ad4665488bad6927ee9b54b9b3af6bdfd9e99550a30e5a871b8f","nonce":"62a5b1d039a6b01447d9c8fb0e7c4bc8","salt":"819047b1c2c697575e062abbf817bd95"},"signature":"9e0a9f419a8155c917f8f4423adf0bdcbdf7fedaba78e443940374e7bfd27317"}"#;
const JOIN_PAYLOAD: &str = "eyJjaGFsbGVuZ2UiOnsicGFyYW1ldGVycyI6eyJhbGdvcml0aG0iOiJQQktERjIvU0hBLTI1NiIsImNvc3QiOjEsImRhdGEiOnsia2lkIjoiZGVmYXVsdCIsInB1cnBvc2UiOiJqb2luIiwic2t1IjoiRFJPUC4yMDI2X3gtMSIsInVzZXIiOiJib2IifSwiZXhwaXJlc0F0IjoxODAwMDAwMDAwLCJrZXlMZW5ndGgiOjMyLCJrZXlQcmVmaXgiOiIzOWZkNWY3OGRmNTY5ZjVkOGI0Y2VjZjA4YTkyMmZhMiIsImtleVNpZ25hdHVyZSI6IjM1MjliODgzOGVjNmFkNDY2NTQ4OGJhZDY5MjdlZTliNTRiOWIzYWY2YmRmZDllOTk1NTBhMzBlNWE4NzFiOGYiLCJub25jZSI6IjYyYTViMWQwMzlhNmIwMTQ0N2Q5YzhmYjBlN2M0YmM4Iiwic2FsdCI6IjgxOTA0N2IxYzJjNjk3NTc1ZTA2MmFiYmY4MTdiZDk1In0sInNpZ25hdHVyZSI6IjllMGE5ZjQxOWE4MTU1YzkxN2Y4ZjQ0MjNhZGYwYmRjYmRmN2ZlZGFiYTc4ZTQ0Mzk0MDM3NGU3YmZkMjczMTcifSwic29sdXRpb24iOnsiY291bnRlciI6MywiZGVyaXZlZEtleSI6IjM5ZmQ1Zjc4ZGY1NjlmNWQ4YjRjZWNmMDhhOTIyZmEyOTUyODNmOGRkMzI5YWU4Y2Y0ODk4YjYzYTM0YTQxZTciLCJ0aW1lIjoxMi4zfX0=";
/// PyPI `altcha` 2.3.0's payload of a challenge it made (`create_challenge("PBKDF2/SHA-256", 32,
/// counter=1234, …)`, the edge's binding in `data`), solved by its `solve_challenge`.
const PYPI_PAYLOAD: &str = "eyJjaGFsbGVuZ2UiOiB7InBhcmFtZXRlcnMiOiB7ImFsZ29yaXRobSI6ICJQQktERjIvU0hBLTI1NiIsICJjb3N0IjogMzIsICJrZXlMZW5ndGgiOiAzMiwgImtleVByZWZpeCI6ICI2ZjY3MjNjNjAxN2ExMWZlMDhlNzU0ZTliNWNjZmE4YyIsICJub25jZSI6ICJlMTUxNWJjNDE2N2NmOWJlMDQ4MWJiYWU2YTY4MzMxNSIsICJzYWx0IjogImJkNDQ2OGU2NzE4MmU1YTg4ZjY5ZTlmM2JlNDA0OTYyIiwgImtleVNpZ25hdHVyZSI6ICI0MjQ5ODE4YmFkOTk4NDcwYWExZjViMDEzYWNhMzFkYjM0ZDYyMjI5NDI4ODY5NDhhODE0MmJlMTc4M2IxZWZmIiwgImV4cGlyZXNBdCI6IDE4MDAwMDAwMDAsICJkYXRhIjogeyJraWQiOiAiZGVmYXVsdCIsICJwdXJwb3NlIjogInB1cmNoYXNlIiwgInNrdSI6ICJTSE9FLTEiLCAidXNlciI6ICJhbGljZUBzaG9wOjQyIiwgImlzc3VlZCI6IDE3OTk5OTk4Nzd9fSwgInNpZ25hdHVyZSI6ICI5MGUyZDZiZTJjMWJjZDQzMGUwN2Q4NWEyY2IwYjEwZWMwZDViYzBkZGQ1NzcwOGExNzljZTk0ZGM5MzA0ZTk2In0sICJzb2x1dGlvbiI6IHsiY291bnRlciI6IDEyMzQsICJkZXJpdmVkS2V5IjogIjZmNjcyM2M2MDE3YTExZmUwOGU3NTRlOWI1Y2NmYThjNzI2M2U4MzIwOGQ1Njk0N2M3MDQ3ZjBhM2VmMTYyNzIifX0=";

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

fn issue_v2(ring: &SecretRing, bits: u8, now_s: i64, entropy: Entropy) -> altcha_v2::Challenge {
    match issue(
        ring,
        PowAlgorithm::Pbkdf2Sha256,
        alice_purchase(),
        bits,
        now_s,
        120,
        entropy,
    ) {
        Issued::V2(c) => c,
        Issued::V1(c) => panic!("v1 for PBKDF2/SHA-256: {c:?}"),
    }
}

/// Entropy that makes `issue` draw this nonce, salt and counter.
fn entropy(nonce_hex: &str, salt_hex: &str, counter: u32) -> Entropy {
    let mut e = [0u8; 36];
    e[..16].copy_from_slice(&hex::decode(nonce_hex).expect("hex"));
    e[16..32].copy_from_slice(&hex::decode(salt_hex).expect("hex"));
    e[32..].copy_from_slice(&counter.to_le_bytes());
    e
}

/// The widget's payload of a solved challenge: `btoa(JSON.stringify({challenge, solution}))`.
fn widget_payload(challenge: &impl serde::Serialize, solution: &impl serde::Serialize) -> String {
    use base64::Engine;
    let json = serde_json::json!({ "challenge": challenge, "solution": solution });
    base64::engine::general_purpose::STANDARD.encode(json.to_string())
}

#[test]
fn a_challenge_issued_here_is_the_one_altcha_lib_makes() {
    let made: altcha_v2::Challenge = serde_json::from_str(PURCHASE_CHALLENGE).expect("vector");
    let p = &made.parameters;
    // 16 bits: 1,024 counters of 64 PBKDF2 iterations; expiring after the TTL and the slowest
    // shopper's worst case, as the vector says.
    let issued = issue_v2(
        &ring(),
        16,
        1_800_000_000 - 120 - difficulty::slowest_solve_secs(16),
        entropy(&p.nonce, &p.salt, 77),
    );
    assert_eq!(issued, made);
    assert_eq!(
        serde_json::to_string(&Issued::V2(issued.clone())).expect("json"),
        PURCHASE_CHALLENGE,
        "the answer's JSON is altcha-lib's, member for member"
    );
    let solved = altcha_v2::solve(&issued, 1_023).expect("solvable");
    assert_eq!(solved.solution.counter, 77);
    // The join's vector: 1 iteration, no issue second.
    let join: altcha_v2::Challenge = serde_json::from_str(JOIN_CHALLENGE).expect("vector");
    let j = &join.parameters;
    let mut nonce = [0u8; 16];
    let mut salt = [0u8; 16];
    nonce.copy_from_slice(&hex::decode(&j.nonce).expect("hex"));
    salt.copy_from_slice(&hex::decode(&j.salt).expect("hex"));
    let remade = altcha_v2::make(
        KEY.as_bytes(),
        altcha_v2::Draw {
            nonce,
            salt,
            counter: 3,
            cost: 1,
            data: j.data.clone(),
            expires_at: 1_800_000_000,
        },
    );
    assert_eq!(remade, join);
}

#[test]
fn solutions_of_altcha_lib_challenges_verify_here() {
    let made: altcha_v2::Challenge = serde_json::from_str(PURCHASE_CHALLENGE).expect("vector");
    assert_eq!(
        check(&ring(), Some(PURCHASE_PAYLOAD), alice_purchase(), NOW_MS),
        Ok(Spend {
            id: made.signature,
            expires_ms: 1_800_000_000_000,
        })
    );
    let bob_join = Expected {
        sku: "DROP.2026_x-1",
        user: "bob",
        purpose: Purpose::Join,
        not_before_ms: None,
    };
    assert!(check(&ring(), Some(JOIN_PAYLOAD), bob_join, NOW_MS).is_ok());
    // Bound like v1: another SKU, shopper, purpose; expired; issued before the start.
    for (expected, now, error) in [
        (
            Expected {
                sku: "SHOE-2",
                ..alice_purchase()
            },
            NOW_MS,
            ProofError::OtherSku,
        ),
        (
            Expected {
                user: "mallory",
                ..alice_purchase()
            },
            NOW_MS,
            ProofError::OtherShopper,
        ),
        (
            Expected {
                purpose: Purpose::Join,
                ..alice_purchase()
            },
            NOW_MS,
            ProofError::OtherPurpose,
        ),
        (alice_purchase(), 1_800_000_000_001, ProofError::Expired),
        (
            Expected {
                not_before_ms: Some(1_799_999_878_000),
                ..alice_purchase()
            },
            NOW_MS,
            ProofError::BeforeStart,
        ),
    ] {
        assert_eq!(
            check(&ring(), Some(PURCHASE_PAYLOAD), expected, now),
            Err(error)
        );
    }
    // Under another key, neither verifies.
    let other = SecretRing::single(b"another-secret-of-enough-length".to_vec());
    assert_eq!(
        check(&other, Some(PURCHASE_PAYLOAD), alice_purchase(), NOW_MS),
        Err(ProofError::Forged)
    );
    assert_eq!(
        check(&other, Some(JOIN_PAYLOAD), bob_join, NOW_MS),
        Err(ProofError::Forged)
    );
}

#[test]
fn solutions_of_the_pypi_librarys_challenges_verify_here() {
    let spend = check(&ring(), Some(PYPI_PAYLOAD), alice_purchase(), NOW_MS).expect("verifies");
    assert_eq!(spend.expires_ms, 1_800_000_000_000);
    assert_eq!(
        check(
            &ring(),
            Some(PYPI_PAYLOAD),
            Expected {
                user: "bob",
                ..alice_purchase()
            },
            NOW_MS
        ),
        Err(ProofError::OtherShopper)
    );
}

#[test]
fn a_wrong_key_a_forged_signature_or_rewritten_parameters_do_not_verify() {
    let good: altcha_v2::Payload =
        serde_json::from_slice(&altcha::decode_base64(PURCHASE_PAYLOAD).expect("base64"))
            .expect("payload");
    let forge = |f: &dyn Fn(&mut altcha_v2::Payload)| {
        let mut p = good.clone();
        f(&mut p);
        let header = widget_payload(&p.challenge, &p.solution);
        check(&ring(), Some(&header), alice_purchase(), NOW_MS)
    };
    assert!(forge(&|_| ()).is_ok());
    assert_eq!(
        forge(&|p| p.solution.derived_key = "00".repeat(32)),
        Err(ProofError::Forged)
    );
    assert_eq!(
        forge(&|p| p.solution.derived_key = p.solution.derived_key.to_uppercase()),
        Err(ProofError::Forged)
    );
    assert_eq!(
        forge(&|p| p.solution.derived_key = "zz".into()),
        Err(ProofError::Forged)
    );
    assert_eq!(
        forge(&|p| p.challenge.signature = "00".repeat(32)),
        Err(ProofError::Forged)
    );
    // Easier work, a longer life, another shopper: the signature no longer covers them.
    assert_eq!(
        forge(&|p| p.challenge.parameters.cost = 1),
        Err(ProofError::Forged)
    );
    assert_eq!(
        forge(&|p| p.challenge.parameters.expires_at += 3_600),
        Err(ProofError::Forged)
    );
    assert_eq!(
        forge(&|p| p.challenge.parameters.data.user = "mallory".into()),
        Err(ProofError::Forged)
    );
    assert_eq!(
        forge(&|p| p.challenge.parameters.algorithm = "SHA-256".into()),
        Err(ProofError::Malformed)
    );
    assert_eq!(
        forge(&|p| p.challenge.parameters.data.purpose = "refund".into()),
        Err(ProofError::Malformed)
    );
    // An unknown member in the parameters or the data is not what was signed.
    for (path, member) in [("/parameters", "memoryCost"), ("/parameters/data", "tier")] {
        let mut extra = serde_json::to_value(&good.challenge).expect("json");
        if let Some(serde_json::Value::Object(o)) = extra.pointer_mut(path) {
            o.insert(member.into(), 1.into());
        }
        assert_eq!(
            check(
                &ring(),
                Some(&widget_payload(&extra, &good.solution)),
                alice_purchase(),
                NOW_MS
            ),
            Err(ProofError::Malformed),
            "{member}"
        );
    }
    // The signature in upper case verifies, and is the same proof (one id).
    let spent = check(&ring(), Some(PURCHASE_PAYLOAD), alice_purchase(), NOW_MS);
    let mut shouted = good.clone();
    shouted.challenge.signature = shouted.challenge.signature.to_uppercase();
    assert_eq!(
        check(
            &ring(),
            Some(&widget_payload(&shouted.challenge, &shouted.solution)),
            alice_purchase(),
            NOW_MS
        ),
        spent
    );
}

#[test]
fn the_official_rust_crate_solves_and_verifies_challenges_issued_here() {
    // The crate checks the expiry on the real clock.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(0));
    for bits in [1, 10, 14] {
        let issued = issue_v2(
            &ring(),
            bits,
            now_ms / 1_000,
            entropy(&"ab".repeat(16), &"cd".repeat(16), 0xdead_beef),
        );
        let json = serde_json::to_string(&issued).expect("json");
        let theirs: ::altcha::Challenge = serde_json::from_str(&json).expect("the crate reads it");
        let solution = ::altcha::solve_challenge(::altcha::SolveChallengeOptions::new(&theirs))
            .expect("solve")
            .expect("solved in time");
        let (counter_bits, _) = difficulty::v2_split(bits);
        assert_eq!(
            solution.counter,
            0xdead_beef % (1 << counter_bits),
            "{bits} bits"
        );
        let mut verify = ::altcha::VerifySolutionOptions::new(&theirs, &solution, KEY);
        verify.hmac_key_signature_secret = Some(KEY.to_owned());
        let verdict = ::altcha::verify_solution(verify).expect("verify");
        assert!(verdict.verified, "{bits}: {verdict:?}");
        // And the crate's solution, submitted as the widget submits it, verifies here.
        let header = widget_payload(&theirs, &solution);
        assert_eq!(
            check(&ring(), Some(&header), alice_purchase(), now_ms).map(|s| s.id),
            Ok(issued.signature.clone())
        );
    }
}

#[test]
fn solutions_of_challenges_the_official_rust_crate_makes_verify_here() {
    let data = [
        ("issued", serde_json::json!(NOW_MS / 1_000)),
        ("kid", "default".into()),
        ("purpose", "purchase".into()),
        ("sku", "SHOE-1".into()),
        ("user", "alice@shop:42".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let challenge = ::altcha::create_challenge(::altcha::CreateChallengeOptions {
        algorithm: "PBKDF2/SHA-256".into(),
        cost: 16,
        counter: Some(321),
        data: Some(data),
        expires_at: Some(NOW_MS / 1_000 + 60),
        hmac_key_signature_secret: Some(KEY.into()),
        hmac_signature_secret: Some(KEY.into()),
        ..Default::default()
    })
    .expect("challenge");
    let solution = ::altcha::solve_challenge(::altcha::SolveChallengeOptions::new(&challenge))
        .expect("solve")
        .expect("solved in time");
    let header = widget_payload(&challenge, &solution);
    let spend = check(&ring(), Some(&header), alice_purchase(), NOW_MS).expect("verifies");
    assert_eq!(Some(spend.id), challenge.signature);
    assert_eq!(spend.expires_ms, NOW_MS + 60_000);
    assert_eq!(
        check(&ring(), Some(&header), alice_purchase(), NOW_MS + 61_000),
        Err(ProofError::Expired)
    );
}

#[test]
fn rotation_and_expiry_hold_for_v2_as_for_v1() {
    let rotated = SecretRing::new(vec![
        (
            KeyId::parse("p2").expect("kid"),
            b"the-new-pow-secret-0123456789".to_vec(),
        ),
        (KeyId::default_id(), KEY.as_bytes().to_vec()),
    ])
    .expect("ring");
    // An old key's proofs still verify while it is listed…
    assert!(check(&rotated, Some(PURCHASE_PAYLOAD), alice_purchase(), NOW_MS).is_ok());
    // …new challenges name the new key, and a ring without it refuses them.
    let c = issue_v2(&rotated, 4, NOW_MS / 1_000, [5; 36]);
    assert_eq!(c.parameters.data.kid, "p2");
    let solved = altcha_v2::solve(&c, 15).expect("solvable");
    let header = widget_payload(&solved.challenge, &solved.solution);
    assert!(check(&rotated, Some(&header), alice_purchase(), NOW_MS).is_ok());
    assert_eq!(
        check(&ring(), Some(&header), alice_purchase(), NOW_MS),
        Err(ProofError::Forged)
    );
    // Valid for the TTL plus the slowest shopper's worst case at its bits, then expired.
    for bits in [4, 16] {
        let c = issue_v2(&ring(), bits, NOW_MS / 1_000, [6; 36]);
        let (counter_bits, cost) = difficulty::v2_split(bits);
        assert_eq!(c.parameters.cost, cost);
        let solved = altcha_v2::solve(&c, (1 << counter_bits) - 1).expect("within the counters");
        let header = widget_payload(&solved.challenge, &solved.solution);
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
