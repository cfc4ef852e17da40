//! Property tests ("fuzzing") of every parser in `shared` that takes untrusted input: the
//! Idempotency-Key (bare and sf-string), `UserId`, `Sku`, `Quantity::from_json`, the JSON bodies
//! (`PurchaseRequest`, `SkuUpsert`), the `Flashgate-Signature` header and verification (v1 and
//! v2, the v2 signed string) and the rotatable secrets (`SecretRing`, `BearerTokens`).
//!
//! Each property runs `FUZZ_CASES` generated inputs (default [`DEFAULT_CASES`], quick enough for
//! `cargo test`) and prints `fuzz <name>: <n> cases in <s> s` (shown with `--nocapture`). The
//! million-input run (see docs/reliability.md):
//!
//! ```text
//! FUZZ_CASES=1000000 cargo test --release -p shared -p edge \
//!     --test fuzz_parsers --test fuzz_policies -- --nocapture
//! ```
//!
//! Every property checks "never panics" on its input (a panic fails the run with the shrunk
//! input) and, where the contract says what the answer must be, the answer itself against a
//! small, independently written model.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use serde_json::{Value, json};
use shared::signing::{
    self, MAX_SKEW_SECS, Scheme, SignatureError, SignatureHeader, SignedParts, Verified, Verifier,
    Version, sha256_hex,
};
use shared::wire::BodyError;
use shared::{
    BearerTokens, DomainError, ErrorCode, IdempotencyKey, KeyId, Problem, PurchaseRequest,
    Quantity, SecretRing, Sku, SkuUpsert, UserId,
};

/// Cases per property when `FUZZ_CASES` is unset.
const DEFAULT_CASES: u32 = 256;

fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_CASES)
}

/// Runs `test` on `cases()` inputs drawn from `strategy`; fails with the shrunk input.
fn fuzz<S>(name: &str, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S: Strategy,
    S::Value: Debug,
{
    let config = ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(cases())
    };
    let mut runner = TestRunner::new(config);
    let ran = AtomicU64::new(0);
    let start = Instant::now();
    let result = runner.run(&strategy, |value| {
        ran.fetch_add(1, Ordering::Relaxed);
        test(value)
    });
    eprintln!(
        "fuzz {name}: {} cases in {:.1} s",
        ran.load(Ordering::Relaxed),
        start.elapsed().as_secs_f64()
    );
    if let Err(e) = result {
        panic!("fuzz {name} failed: {e}");
    }
}

// ---------------------------------------------------------------------------------------------
// Generators

/// Strings that reach the branches of the sf-string decoder: a leading quote, then quotes,
/// backslashes, printable and non-printable characters in any order.
fn sf_ish() -> impl Strategy<Value = String> {
    prop_oneof![
        "\"[a-c\"\\\\ \t\u{7f}é]{0,12}",
        "\"[!-~]{0,20}\"",
        "\"[ -~]{250,260}\"",
        "[!-~]{0,300}",
        any::<String>(),
    ]
}

/// The RFC 8941 sf-string form of `s` (which must be printable ASCII).
fn sf_encode(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

fn sku_like() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z0-9._-]{1,64}",
        "[A-Za-z0-9._-]{60,70}",
        "[A-Za-z0-9._ /:@é-]{0,8}",
        any::<String>(),
    ]
}

fn user_like() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z0-9._:@-]{1,64}",
        "[A-Za-z0-9._:@-]{60,70}",
        "[A-Za-z0-9._:@ /,é-]{0,8}",
        any::<String>(),
    ]
}

/// JSON number literals, valid and not: integers of any size, fractions, exponents, signs.
fn number_literal() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u32..=120).prop_map(|n| n.to_string()),
        "-?(0|[1-9][0-9]{0,25})(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,3})?",
        Just("1e400".to_owned()),
        Just("-0".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("9223372036854775808".to_owned()),
        Just("\"1\"".to_owned()),
        Just("null".to_owned()),
    ]
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-5i64..=205).prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        (-2.0f64..=200.0).prop_map(Value::from),
        any::<String>().prop_map(Value::from),
        sku_like().prop_map(Value::from),
    ]
}

fn json_key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("sku".to_owned()),
        Just("qty".to_owned()),
        Just("name".to_owned()),
        Just("price_cents".to_owned()),
        Just("stock".to_owned()),
        Just("max_per_user".to_owned()),
        "[a-z_]{0,6}",
        any::<String>(),
    ]
}

/// Arbitrary JSON values, biased towards objects with the contract's field names.
fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((json_key(), inner), 0..7)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// A request body; `Debug` shows it as (lossy) text so a failing input is readable.
#[derive(Clone)]
struct Body(Vec<u8>);

impl Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0))
    }
}

/// One-byte edits (replace, insert, delete) of `bytes`.
fn mutate(bytes: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let len = bytes.len();
    (0..=len, any::<u8>(), 0u8..3).prop_map(move |(at, b, op)| {
        let mut out = bytes.clone();
        match op {
            0 if at < len => out[at] = b,
            1 => out.insert(at, b),
            _ if at < len => {
                out.remove(at);
            }
            _ => out.push(b),
        }
        out
    })
}

/// Purchase bodies: arbitrary bytes, arbitrary JSON, contract-shaped objects with valid and
/// invalid members (raw number literals included), whitespace, duplicate keys and one-byte edits.
fn purchase_body() -> impl Strategy<Value = Body> {
    let shaped = (
        sku_like(),
        number_literal(),
        prop::option::of(json_value()),
        any::<bool>(),
        any::<bool>(),
        "[ \t\r\n]{0,3}",
    )
        .prop_map(|(sku, qty, extra, qty_first, dup, ws)| {
            let sku = format!("\"sku\"{ws}:{ws}{}", Value::from(sku));
            let qty = format!("\"qty\":{ws}{qty}");
            let mut members = if qty_first {
                vec![qty, sku]
            } else {
                vec![sku, qty]
            };
            if let Some(extra) = extra {
                members.push(format!("\"note\":{extra}"));
            }
            if dup {
                members.push("\"sku\":\"DUP\"".to_owned());
            }
            format!("{ws}{{{ws}{}{ws}}}{ws}", members.join(",")).into_bytes()
        })
        .boxed();
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        json_value().prop_map(|v| v.to_string().into_bytes()),
        shaped.clone(),
        shaped.prop_flat_map(mutate),
    ]
    .prop_map(Body)
}

fn upsert_body() -> impl Strategy<Value = Body> {
    let name = prop_oneof![
        "[ -~]{0,10}".prop_map(Value::from),
        "[a-z]{195,205}".prop_map(Value::from),
        any::<String>().prop_map(Value::from),
        Just(Value::from(" \t\n")),
        Just(Value::from("a\u{0}b")),
        json_leaf(),
    ];
    let shaped = (
        name,
        number_literal(),
        number_literal(),
        prop_oneof![
            number_literal(),
            Just("2147483647".to_owned()),
            Just("2147483648".to_owned()),
        ],
        any::<u8>(),
    )
        .prop_map(|(name, price, stock, cap, omit)| {
            let mut members = vec![
                format!("\"name\":{name}"),
                format!("\"price_cents\":{price}"),
                format!("\"stock\":{stock}"),
                format!("\"max_per_user\":{cap}"),
            ];
            if omit < 40 {
                members.remove(usize::from(omit % 4));
            }
            format!("{{{}}}", members.join(",")).into_bytes()
        })
        .boxed();
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        json_value().prop_map(|v| v.to_string().into_bytes()),
        shaped.clone(),
        shaped.prop_flat_map(mutate),
    ]
    .prop_map(Body)
}

// ---------------------------------------------------------------------------------------------
// Independent models of the contract's rules

fn model_key(raw: &str) -> Option<String> {
    let decoded = if let Some(rest) = raw.strip_prefix('"') {
        // Must end with the one unescaped closing quote.
        let mut out = String::new();
        let mut chars = rest.chars();
        loop {
            match chars.next()? {
                '"' => break,
                '\\' => match chars.next()? {
                    c @ ('"' | '\\') => out.push(c),
                    _ => return None,
                },
                c if (' '..='~').contains(&c) => out.push(c),
                _ => return None,
            }
        }
        if chars.next().is_some() {
            return None;
        }
        out
    } else {
        raw.to_owned()
    };
    let ok =
        (1..=255).contains(&decoded.len()) && decoded.chars().all(|c| ('!'..='~').contains(&c));
    ok.then_some(decoded)
}

fn model_name(s: &str, extra: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c) || extra.contains(c))
}

/// A JSON number literal that the contract accepts as `qty`: digits only, 1..=100.
fn model_qty_literal(lit: &str) -> Option<u32> {
    if lit.is_empty() || lit.starts_with('0') || !lit.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    lit.parse::<u32>().ok().filter(|n| (1..=100).contains(n))
}

/// A JSON integer in `min..=max` (not a float, whatever its value).
fn model_int(v: &Value, min: i64, max: i64) -> Option<i64> {
    let Value::Number(n) = v else { return None };
    if n.is_f64() {
        return None;
    }
    n.as_i64().filter(|i| (min..=max).contains(i))
}

fn model_purchase(body: &[u8]) -> Option<(String, u32)> {
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(body) else {
        return None;
    };
    let sku = map.get("sku")?.as_str().filter(|s| model_name(s, ""))?;
    let qty = model_int(map.get("qty")?, 1, 100)?;
    Some((sku.to_owned(), u32::try_from(qty).ok()?))
}

fn model_upsert(body: &[u8]) -> Option<(String, i64, i64, i32)> {
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(body) else {
        return None;
    };
    let name = map.get("name")?.as_str()?;
    // Postgres `text` cannot hold NUL: a name with one must be refused, not fail at insert.
    let name_ok = !name.trim().is_empty() && name.chars().count() <= 200 && !name.contains('\0');
    if !name_ok {
        return None;
    }
    let price = model_int(map.get("price_cents")?, 0, 1_000_000_000_000)?;
    let stock = model_int(map.get("stock")?, 0, 1_000_000_000_000)?;
    let cap = model_int(map.get("max_per_user")?, 1, i64::from(i32::MAX))?;
    Some((name.to_owned(), price, stock, i32::try_from(cap).ok()?))
}

fn model_signature_header(s: &str) -> Option<(i64, Option<String>, Vec<u8>)> {
    let rest = s.strip_prefix("t=")?;
    let (t, rest) = rest.split_once(',')?;
    let (kid, hex_part) = match rest.strip_prefix("v1=") {
        Some(h) => (None, h),
        None => {
            let rest = rest.strip_prefix("kid=")?;
            let (kid, h) = rest.split_once(",v2=")?;
            let kid_ok = (1..=32).contains(&kid.len())
                && kid
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
            if !kid_ok {
                return None;
            }
            (Some(kid.to_owned()), h)
        }
    };
    let t_ok = (1..=18).contains(&t.len()) && t.chars().all(|c| c.is_ascii_digit());
    let hex_ok = hex_part.len() == 64 && hex_part.chars().all(|c| "0123456789abcdef".contains(c));
    if !(t_ok && hex_ok) {
        return None;
    }
    Some((t.parse().ok()?, kid, hex::decode(hex_part).ok()?))
}

// ---------------------------------------------------------------------------------------------
// Idempotency-Key

#[test]
fn idempotency_key_matches_the_model_on_any_input() {
    fuzz("idempotency_key.parse", sf_ish(), |raw| {
        let got = IdempotencyKey::parse(&raw).map(|k| k.as_str().to_owned());
        let want = model_key(&raw);
        prop_assert_eq!(got.as_ref().ok(), want.as_ref(), "{:?}", raw);
        if let Err(e) = got {
            prop_assert_eq!(e, DomainError::InvalidIdempotencyKey);
        }
        Ok(())
    });
}

#[test]
fn idempotency_key_bytes_never_panic() {
    fuzz(
        "idempotency_key.parse_bytes",
        prop::collection::vec(any::<u8>(), 0..300),
        |raw| {
            let got = IdempotencyKey::parse_bytes(&raw);
            let via_str = std::str::from_utf8(&raw)
                .map_err(|_| DomainError::InvalidIdempotencyKey)
                .and_then(IdempotencyKey::parse);
            prop_assert_eq!(got, via_str);
            Ok(())
        },
    );
}

#[test]
fn idempotency_key_bare_and_sf_string_forms_parse_equal() {
    fuzz("idempotency_key.bare_vs_sf", "[!-~]{1,255}", |key| {
        let sf = IdempotencyKey::parse(&sf_encode(&key)).map(|k| k.as_str().to_owned());
        prop_assert_eq!(sf.as_deref(), Ok(key.as_str()));
        if !key.starts_with('"') {
            prop_assert_eq!(
                IdempotencyKey::parse(&key),
                IdempotencyKey::parse(&sf_encode(&key))
            );
        }
        Ok(())
    });
}

#[test]
fn idempotency_key_sf_strings_decode_or_are_refused() {
    let input = ("[ -~]{0,300}", "[ -~]{1,4}", 0u8..3, "[ !#-\\[\\]-~]");
    fuzz(
        "idempotency_key.sf_string",
        input,
        |(s, suffix, how, not_escapable)| {
            let encoded = sf_encode(&s);
            let visible = s.bytes().all(|b| b != b' ');
            let want = ((1..=255).contains(&s.len()) && visible).then_some(s.as_str());
            let got = IdempotencyKey::parse(&encoded);
            prop_assert_eq!(got.as_ref().ok().map(IdempotencyKey::as_str), want);
            // Broken sf-strings: no closing quote, anything after it, or an escape of a
            // character other than `"` and `\`.
            let inner = &encoded[1..encoded.len() - 1];
            let broken = match how {
                0 => format!("\"{inner}"),
                1 => format!("{encoded}{suffix}"),
                _ => format!("\"{inner}\\{not_escapable}\""),
            };
            prop_assert!(IdempotencyKey::parse(&broken).is_err(), "{:?}", broken);
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// UserId, Sku

#[test]
fn user_id_matches_its_alphabet() {
    fuzz("user_id.parse", user_like(), |s| {
        let got = UserId::parse(&s);
        prop_assert_eq!(got.is_ok(), model_name(&s, ":@"), "{:?}", s);
        match got {
            Ok(u) => {
                prop_assert_eq!(u.as_str(), s.as_str());
                prop_assert_eq!(u.to_string(), s.clone());
                prop_assert_eq!(s.parse::<UserId>(), Ok(u));
            }
            Err(e) => prop_assert_eq!(e, DomainError::InvalidUser),
        }
        Ok(())
    });
}

#[test]
fn sku_matches_its_alphabet() {
    fuzz("sku.parse", sku_like(), |s| {
        let got = Sku::parse(&s);
        prop_assert_eq!(got.is_ok(), model_name(&s, ""), "{:?}", s);
        match got {
            Ok(sku) => {
                prop_assert_eq!(sku.as_str(), s.as_str());
                prop_assert_eq!(
                    serde_json::to_value(&sku).ok(),
                    Some(Value::from(s.clone()))
                );
                prop_assert_eq!(s.parse::<Sku>(), Ok(sku));
            }
            Err(e) => prop_assert_eq!(e, DomainError::InvalidSku),
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// Quantity

#[test]
fn quantity_from_any_json_value() {
    fuzz("quantity.from_json.value", json_value(), |v| {
        let got = Quantity::from_json(&v).map(Quantity::get);
        let want = model_int(&v, 1, 100).map(|n| u32::try_from(n).unwrap_or(0));
        prop_assert_eq!(got.ok(), want, "{}", v);
        Ok(())
    });
}

#[test]
fn quantity_from_number_literals() {
    fuzz("quantity.from_json.literal", number_literal(), |lit| {
        let got = serde_json::from_str::<Value>(&lit)
            .ok()
            .and_then(|v| Quantity::from_json(&v).ok())
            .map(Quantity::get);
        prop_assert_eq!(got, model_qty_literal(&lit), "{}", lit);
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// PurchaseRequest

#[test]
fn purchase_request_from_any_body() {
    fuzz(
        "purchase_request.from_json",
        purchase_body(),
        |Body(body)| {
            let got = PurchaseRequest::from_json(&body);
            let want = model_purchase(&body);
            prop_assert_eq!(
                got.as_ref().ok().map(|r| (r.sku.to_string(), r.qty.get())),
                want,
                "{}",
                String::from_utf8_lossy(&body)
            );
            match got {
                Ok(r) => {
                    // to_json is canonical JSON of the same request and parses back to it.
                    let text = r.to_json();
                    prop_assert_eq!(
                        serde_json::from_str::<Value>(&text).ok(),
                        Some(json!({"sku": r.sku.as_str(), "qty": r.qty.get()}))
                    );
                    prop_assert_eq!(PurchaseRequest::from_json(text.as_bytes()), Ok(r));
                }
                Err(e) => {
                    // Every refusal is a client-safe 400 detail.
                    prop_assert!(!e.to_string().is_empty());
                    if serde_json::from_slice::<Value>(&body).is_err() {
                        prop_assert!(matches!(e, BodyError::Json(_)));
                    }
                }
            }
            Ok(())
        },
    );
}

#[test]
fn purchase_request_to_json_round_trips() {
    let input = (
        "[A-Za-z0-9._-]{1,64}",
        1u32..=100,
        prop::collection::vec(("[a-z]{1,6}", json_value()), 0..4),
        any::<bool>(),
    );
    fuzz(
        "purchase_request.round_trip",
        input,
        |(sku, qty, extra, pretty)| {
            let mut map = serde_json::Map::new();
            for (k, v) in extra {
                if k != "sku" && k != "qty" {
                    map.insert(k, v);
                }
            }
            map.insert("qty".into(), Value::from(qty));
            map.insert("sku".into(), Value::from(sku.clone()));
            let obj = Value::Object(map);
            let text = if pretty {
                serde_json::to_string_pretty(&obj).unwrap_or_default()
            } else {
                obj.to_string()
            };
            let r = PurchaseRequest::from_json(text.as_bytes());
            prop_assert_eq!(
                r.as_ref().ok().map(|r| (r.sku.as_str(), r.qty.get())),
                Some((sku.as_str(), qty))
            );
            let r = r.map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(r.to_json(), format!(r#"{{"sku":"{sku}","qty":{qty}}}"#));
            prop_assert_eq!(PurchaseRequest::from_json(r.to_json().as_bytes()), Ok(r));
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// SkuUpsert

#[test]
fn sku_upsert_from_any_body() {
    fuzz("sku_upsert.from_json", upsert_body(), |Body(body)| {
        let got = SkuUpsert::from_json(&body);
        let want = model_upsert(&body);
        prop_assert_eq!(
            got.as_ref()
                .ok()
                .map(|u| (u.name.clone(), u.price_cents, u.stock, u.max_per_user)),
            want,
            "{}",
            String::from_utf8_lossy(&body)
        );
        if let Ok(u) = got {
            // Whatever is accepted can be stored: no NUL (Postgres text refuses it), sums fit.
            prop_assert!(!u.name.contains('\0'));
            prop_assert!(u.stock.checked_add(u.price_cents).is_some());
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// Flashgate-Signature

fn kid_like() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z0-9._-]{1,32}",
        "[A-Za-z0-9._-]{30,34}",
        "[A-Za-z0-9._=, -]{0,6}",
        any::<String>(),
    ]
}

fn header_like() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "t=-?[0-9]{0,20},v1=[0-9a-fA-F]{62,66}",
        "t=[0-9]{1,19},v1=[0-9a-f]{64}",
        "[tv1=, ]{0,6}[0-9a-f]{0,70}[,=]{0,2}",
        (0i64..=i64::MAX, prop::array::uniform32(any::<u8>()))
            .prop_map(|(t, v)| format!("t={t},v1={}", hex::encode(v))),
        "t=[0-9]{1,19},kid=[A-Za-z0-9._-]{0,34},v2=[0-9a-f]{63,65}",
        "t=[0-9]{1,3},(kid|v1|v2|t)=[a-z0-9]{0,4},(kid|v1|v2)=[0-9a-f]{64}(,kid=k)?",
        (
            0i64..=i64::MAX,
            kid_like(),
            prop::array::uniform32(any::<u8>())
        )
            .prop_map(|(t, k, v)| format!("t={t},kid={k},v2={}", hex::encode(v))),
    ]
}

/// The key ids of a ring used by the properties below (the signer's key is always `k-sign`).
fn signing_ring(secret: &[u8]) -> SecretRing {
    let kid = |s: &str| KeyId::parse(s).unwrap_or_else(KeyId::default_id);
    SecretRing::new(vec![
        (kid("k-sign"), secret.to_vec()),
        (kid("k-old"), b"old-secret-x".to_vec()),
    ])
    .unwrap_or_else(|_| SecretRing::single(secret.to_vec()))
}

fn sign_with(v2: bool, secret: &[u8], t: i64, p: &SignedParts<'_>) -> String {
    if v2 {
        signing::sign(&signing_ring(secret), t, p)
    } else {
        signing::sign_v1(secret, t, p)
    }
}

fn verify_with(
    secret: &[u8],
    header: Option<&str>,
    now: i64,
    p: &SignedParts<'_>,
) -> Result<Verified, SignatureError> {
    let ring = signing_ring(secret);
    Verifier {
        ring: &ring,
        accept_v1: true,
    }
    .verify(header, now, p)
}

#[test]
fn signature_header_matches_the_grammar() {
    fuzz("signature_header.parse", header_like(), |s| {
        let got = SignatureHeader::parse(&s);
        let want = model_signature_header(&s);
        let got_tuple = got.as_ref().ok().map(|h| {
            let kid = match &h.scheme {
                Scheme::V1 => None,
                Scheme::V2(k) => Some(k.as_str().to_owned()),
            };
            (h.t, kid, h.mac.to_vec())
        });
        prop_assert_eq!(got_tuple, want, "{:?}", s);
        if let Err(e) = got {
            prop_assert_eq!(e, SignatureError::Malformed);
        }
        Ok(())
    });
}

fn any_parts() -> impl Strategy<Value = (String, String, String, String, Vec<u8>)> {
    (
        prop_oneof![
            Just("POST".to_owned()),
            Just("PUT".to_owned()),
            "[A-Z]{0,7}"
        ],
        prop_oneof![
            Just("/v1/purchases".to_owned()),
            "/[ -~]{0,30}",
            any::<String>()
        ],
        prop_oneof!["[A-Za-z0-9._:@-]{1,64}", any::<String>()],
        prop_oneof![Just(String::new()), "[!-~]{1,255}", any::<String>()],
        prop::collection::vec(any::<u8>(), 0..200),
    )
}

fn parts<'a>(p: &'a (String, String, String, String, Vec<u8>)) -> SignedParts<'a> {
    SignedParts {
        method: &p.0,
        path: &p.1,
        user: &p.2,
        idempotency_key: &p.3,
        body: &p.4,
    }
}

#[test]
fn sign_then_verify_round_trips_within_the_window_only() {
    let input = (
        any_parts(),
        prop::collection::vec(any::<u8>(), 0..80),
        0i64..=4_000_000_000,
        -400i64..=400,
        any::<i64>(),
        any::<bool>(),
    );
    fuzz(
        "signing.round_trip",
        input,
        |(p, secret, t, skew, any_now, v2)| {
            let header = sign_with(v2, &secret, t, &parts(&p));
            let parsed =
                SignatureHeader::parse(&header).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(parsed.t, t);
            prop_assert_eq!(matches!(parsed.scheme, Scheme::V2(_)), v2);
            let want = if skew.abs() <= MAX_SKEW_SECS {
                Ok(())
            } else {
                Err(SignatureError::Expired)
            };
            let got = verify_with(&secret, Some(&header), t + skew, &parts(&p));
            prop_assert_eq!(got.clone().map(|_| ()), want);
            if let Ok(v) = got {
                // v2 names the signer's key; v1 finds the first key that matches (the current
                // one unless the generated secret equals the old one).
                if v2 || secret != b"old-secret-x" {
                    prop_assert_eq!(v.kid.as_str(), "k-sign");
                }
                prop_assert_eq!(v.version, if v2 { Version::V2 } else { Version::V1 });
            }
            // Any clock, however absurd, is an answer, not a panic.
            let far = verify_with(&secret, Some(&header), any_now, &parts(&p));
            prop_assert!(far.is_ok() == (any_now.abs_diff(t) <= 300));
            // Rotation: a ring that holds the signer's key among others verifies; v1 is refused
            // when turned off, v2 is not.
            let ring = signing_ring(&secret);
            let strict = Verifier {
                ring: &ring,
                accept_v1: false,
            };
            let got = strict.verify(Some(&header), t, &parts(&p));
            if v2 {
                prop_assert!(got.is_ok());
            } else {
                prop_assert_eq!(got, Err(SignatureError::V1NotAccepted));
            }
            Ok(())
        },
    );
}

/// Replaces the character at `at` (modulo the length) with `with`, or appends it to an empty
/// string; returns None when that changes nothing.
fn change_char(s: &str, at: usize, with: char) -> Option<String> {
    let chars: Vec<char> = s.chars().collect();
    if chars.is_empty() {
        return Some(with.to_string());
    }
    let i = at % chars.len();
    if chars[i] == with {
        return None;
    }
    let mut out = chars;
    out[i] = with;
    Some(out.into_iter().collect())
}

#[test]
fn any_single_change_of_what_is_signed_fails() {
    let input = (
        any_parts(),
        prop::collection::vec(any::<u8>(), 1..40),
        0usize..5,
        any::<usize>(),
        prop_oneof![any::<char>(), proptest::char::range(' ', '~')],
        any::<u8>(),
        0u8..3,
        any::<bool>(),
    );
    fuzz(
        "signing.single_change",
        input,
        |(p, secret, field, at, with, byte, op, v2)| {
            let t = 1_700_000_000;
            let header = sign_with(v2, &secret, t, &parts(&p));
            let mut q = p.clone();
            let changed = if field < 4 {
                let slot = match field {
                    0 => &mut q.0,
                    1 => &mut q.1,
                    2 => &mut q.2,
                    _ => &mut q.3,
                };
                match change_char(slot, at, with) {
                    Some(s) => {
                        *slot = s;
                        true
                    }
                    None => false,
                }
            } else {
                let body = &mut q.4;
                let i = if body.is_empty() { 0 } else { at % body.len() };
                match op {
                    0 if !body.is_empty() && body[i] != byte => body[i] = byte,
                    0 | 1 => body.insert(i, byte),
                    _ if !body.is_empty() => {
                        body.remove(i);
                    }
                    _ => body.push(byte),
                }
                true
            };
            if changed {
                prop_assert_eq!(
                    verify_with(&secret, Some(&header), t, &parts(&q)),
                    Err(SignatureError::Mismatch),
                    "{:?}",
                    q
                );
            }
            // A different secret never verifies.
            let mut other = secret.clone();
            other[at % secret.len()] ^= 1 | byte;
            if other != b"old-secret-x" {
                prop_assert_eq!(
                    verify_with(&other, Some(&header), t, &parts(&p)),
                    Err(SignatureError::Mismatch)
                );
            }
            Ok(())
        },
    );
}

#[test]
fn any_single_change_of_the_header_fails() {
    let input = (any_parts(), any::<usize>(), any::<char>(), any::<bool>());
    fuzz("signing.header_change", input, |(p, at, with, v2)| {
        let secret = b"edge-secret";
        let t = 1_700_000_000;
        let header = sign_with(v2, secret, t, &parts(&p));
        if let Some(bad) = change_char(&header, at, with) {
            let got = verify_with(secret, Some(&bad), t, &parts(&p));
            // Changing `t` to another valid time is a mismatch (or out of the window); a
            // changed MAC digit is a mismatch; a changed kid is unknown or a mismatch; anything
            // else is malformed. Never Ok.
            prop_assert!(got.is_err(), "{:?}", bad);
        }
        Ok(())
    });
}

#[test]
fn verify_never_panics_on_any_header() {
    let input = (header_like(), any::<i64>(), any_parts(), any::<bool>());
    fuzz(
        "signing.verify.any_header",
        input,
        |(h, now, p, accept_v1)| {
            let ring = signing_ring(b"k");
            let verifier = Verifier {
                ring: &ring,
                accept_v1,
            };
            let got = verifier.verify(Some(&h), now, &parts(&p));
            match SignatureHeader::parse(&h) {
                Err(_) => prop_assert_eq!(got, Err(SignatureError::Malformed)),
                Ok(parsed) => {
                    let v1 = parsed.scheme == Scheme::V1;
                    if v1 && !accept_v1 {
                        prop_assert_eq!(got, Err(SignatureError::V1NotAccepted));
                    } else if now.abs_diff(parsed.t) > 300 {
                        prop_assert_eq!(got, Err(SignatureError::Expired));
                    } else if let Scheme::V2(kid) = &parsed.scheme
                        && ring.get(kid).is_none()
                    {
                        prop_assert_eq!(got, Err(SignatureError::UnknownKey));
                    }
                }
            }
            prop_assert_eq!(
                verifier.verify(None, now, &parts(&p)),
                Err(SignatureError::Missing)
            );
            Ok(())
        },
    );
}

/// Splits `s` into netstrings (`<len>:<bytes>,`), written independently of `canonical_v2`.
fn decode_netstrings(mut s: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    while !s.is_empty() {
        let colon = s.iter().position(|&b| b == b':')?;
        let digits = std::str::from_utf8(&s[..colon]).ok()?;
        if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
            return None;
        }
        let len: usize = digits.parse().ok()?;
        let rest = &s[colon + 1..];
        if rest.len() < len + 1 || rest[len] != b',' {
            return None;
        }
        out.push(rest[..len].to_vec());
        s = &rest[len + 1..];
    }
    Some(out)
}

/// The v2 signed string decodes back to exactly the fields it was made of: it is injective, so
/// two requests that differ in any field (the user/key boundary included) never sign alike.
#[test]
fn the_v2_signed_string_decodes_back_to_its_fields() {
    let kid = "[A-Za-z0-9._-]{1,32}";
    let input = (any_parts(), 0i64..=i64::MAX, kid);
    fuzz("signing.v2_canonical_injective", input, |(p, t, kid)| {
        let kid = KeyId::parse(&kid).ok_or_else(|| TestCaseError::fail("kid"))?;
        let signed = signing::canonical_v2(t, &kid, &parts(&p));
        let fields = decode_netstrings(&signed).ok_or_else(|| TestCaseError::fail("decode"))?;
        let want: Vec<Vec<u8>> = vec![
            signing::V2_TAG.into(),
            t.to_string().into(),
            kid.as_str().into(),
            p.0.clone().into(),
            p.1.clone().into(),
            p.2.clone().into(),
            p.3.clone().into(),
            sha256_hex(&p.4).into(),
        ];
        prop_assert_eq!(fields, want);
        Ok(())
    });
}

/// v2 does not have v1's ambiguity: moving the boundary between the user and the key (`a.b` +
/// `c` vs `a` + `b.c`) changes the signed string, so a captured signature does not verify for
/// another user.
#[test]
fn v2_moving_the_user_key_boundary_fails() {
    let input = ("[A-Za-z0-9]{1,10}", "[A-Za-z0-9]{1,10}", "[!-~]{1,20}");
    fuzz("signing.v2_user_key_boundary", input, |(a, b, c)| {
        let body = br#"{"sku":"A","qty":1}"#;
        let key = format!("{b}.{c}");
        let signed_as = SignedParts {
            method: "POST",
            path: "/v1/purchases",
            user: &a,
            idempotency_key: &key,
            body,
        };
        let header = sign_with(true, b"s", 1_000, &signed_as);
        let user = format!("{a}.{b}");
        let swapped = SignedParts {
            user: &user,
            idempotency_key: &c,
            ..signed_as
        };
        prop_assert_eq!(
            verify_with(b"s", Some(&header), 1_000, &swapped),
            Err(SignatureError::Mismatch)
        );
        Ok(())
    });
}

/// Documents the v1 weakness that v2 fixes (docs/reliability.md): v1 joins the fields with `.`,
/// which user ids and keys may contain, so moving the user/key boundary signs the same string
/// and a captured v1 signature verifies for another user. This holds for every such pair; it
/// is why the origin can be told to refuse v1 (`ACCEPT_SIGNATURE_V1=false`).
#[test]
fn v1_signs_a_moved_user_key_boundary_alike() {
    let input = ("[A-Za-z0-9]{1,10}", "[A-Za-z0-9]{1,10}", "[!-~]{1,20}");
    fuzz("signing.v1_user_key_boundary", input, |(a, b, c)| {
        let body = br#"{"sku":"A","qty":1}"#;
        let key = format!("{b}.{c}");
        let signed_as = SignedParts {
            method: "POST",
            path: "/v1/purchases",
            user: &a,
            idempotency_key: &key,
            body,
        };
        let header = sign_with(false, b"s", 1_000, &signed_as);
        let user = format!("{a}.{b}");
        let swapped = SignedParts {
            user: &user,
            idempotency_key: &c,
            ..signed_as
        };
        prop_assert_eq!(
            signing::canonical_v1(1_000, &signed_as),
            signing::canonical_v1(1_000, &swapped)
        );
        prop_assert!(verify_with(b"s", Some(&header), 1_000, &swapped).is_ok());
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// Rotatable secrets (SecretRing, BearerTokens)

/// What the list form `kid:secret,…` means: trimmed entries, each `kid:secret` with a valid kid
/// and a secret of at least `min_len` bytes, no kid twice.
fn model_ring(raw: &str, min_len: usize) -> Option<Vec<(String, Vec<u8>)>> {
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    for entry in raw.split(',') {
        let (kid, secret) = entry.trim().split_once(':')?;
        let kid = kid.trim();
        let secret = secret.trim();
        let kid_ok = (1..=32).contains(&kid.len())
            && kid
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        if !kid_ok || secret.len() < min_len.max(1) || out.iter().any(|(k, _)| k == kid) {
            return None;
        }
        out.push((kid.to_owned(), secret.as_bytes().to_vec()));
    }
    Some(out)
}

#[test]
fn secret_rings_parse_like_the_model() {
    let entry = prop_oneof![
        ("[a-z0-9]{1,3}", "[!-+--~]{0,20}").prop_map(|(k, s)| format!("{k}:{s}")),
        (" ?[A-Za-z0-9._-]{0,34} ?", " ?[ -~]{0,20}").prop_map(|(k, s)| format!("{k}:{s}")),
        any::<String>(),
    ];
    let input = (prop::collection::vec(entry, 1..5), 0usize..20);
    fuzz("secrets.ring_parse", input, |(entries, min_len)| {
        let raw = entries.join(",");
        let got = SecretRing::parse(&raw, min_len);
        let want = model_ring(&raw, min_len);
        let got_keys = got.as_ref().ok().map(|r| {
            r.iter()
                .map(|(k, s)| (k.as_str().to_owned(), s.to_vec()))
                .collect::<Vec<_>>()
        });
        prop_assert_eq!(&got_keys, &want, "{:?}", raw);
        if let Ok(ring) = &got {
            // The first entry is current; Debug never shows a secret.
            let first = want.as_ref().and_then(|w| w.first().cloned());
            prop_assert_eq!(
                Some((
                    ring.current().0.as_str().to_owned(),
                    ring.current().1.to_vec()
                )),
                first
            );
            // Debug shows the key ids and nothing else.
            let kids: Vec<&str> = ring.kids().map(KeyId::as_str).collect();
            prop_assert_eq!(
                format!("{ring:?}"),
                format!("SecretRing {{ kids: {kids:?}, .. }}")
            );
        }
        if let Err(e) = got {
            // Error messages never contain a secret (they name entries by position).
            for entry in raw.split(',') {
                if let Some((_, secret)) = entry.split_once(':') {
                    let secret = secret.trim();
                    if secret.len() >= 8 {
                        prop_assert!(!e.to_string().contains(secret), "{}", e);
                    }
                }
            }
        }
        Ok(())
    });
}

#[test]
fn bearer_tokens_accept_exactly_the_listed_tokens() {
    let token = "[!-+--~]{1,24}";
    let input = (
        prop::collection::vec(token, 1..4),
        prop_oneof![token.prop_map(Some), Just(None)],
        any::<usize>(),
    );
    fuzz(
        "secrets.bearer_tokens",
        input,
        |(tokens, presented, pick)| {
            let list = tokens.join(" , ");
            let set =
                BearerTokens::parse(&list, 1).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(set.len(), tokens.len());
            // Every listed token is accepted; anything else is not.
            let presented = presented.unwrap_or_else(|| tokens[pick % tokens.len()].clone());
            prop_assert_eq!(set.accepts(&presented), tokens.contains(&presented));
            let longer = format!("{presented}x");
            prop_assert_eq!(set.accepts(&longer), tokens.contains(&longer));
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// Problem bodies (what the edge reads back from the origin)

#[test]
fn problem_bodies_round_trip_and_garbage_does_not_parse() {
    let codes = [
        ErrorCode::InvalidRequest,
        ErrorCode::MissingIdempotencyKey,
        ErrorCode::BadSignature,
        ErrorCode::Unauthorized,
        ErrorCode::Unauthenticated,
        ErrorCode::UnknownSku,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::SoldOut,
        ErrorCode::PurchaseLimit,
        ErrorCode::IdempotencyInFlight,
        ErrorCode::RequestTimeout,
        ErrorCode::PayloadTooLarge,
        ErrorCode::IdempotencyKeyReused,
        ErrorCode::HeadersTooLarge,
        ErrorCode::RateLimited,
        ErrorCode::Unavailable,
        ErrorCode::Internal,
    ];
    let input = (0..codes.len(), any::<String>(), purchase_body());
    fuzz("problem.round_trip", input, |(i, detail, junk)| {
        let p = Problem::new(codes[i], detail);
        let back: Result<Problem, _> = serde_json::from_str(&p.to_json());
        prop_assert_eq!(back.ok(), Some(p.clone()));
        prop_assert_eq!(p.status, codes[i].status());
        // Arbitrary bytes are either a well-formed problem or an error, never a panic.
        let _ = serde_json::from_slice::<Problem>(&junk.0);
        Ok(())
    });
}
