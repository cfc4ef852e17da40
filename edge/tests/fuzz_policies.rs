//! Property tests ("fuzzing") of every edge policy module that reads untrusted input: shopper
//! tokens (`jwt`), the purchase checks (`purchase`), the `RateLimit` / `RateLimit-Policy` builder
//! (`ratelimit_fields`, over `gcra`), the per-user gate and idempotency state machine, the origin's
//! answers (`forward`, `cache_policy`, `reply`), routes, URLs and queries (`routes`, `url_parts`,
//! `warmup`), settings (`config`), the shields and the worker ↔ Durable Object messages.
//!
//! Each property runs `FUZZ_CASES` generated inputs (default [`DEFAULT_CASES`]) and prints
//! `fuzz <name>: <n> cases in <s> s` (shown with `--nocapture`). The million-input run (see
//! docs/reliability.md):
//!
//! ```text
//! FUZZ_CASES=1000000 cargo test --release -p shared -p edge \
//!     --test fuzz_parsers --test fuzz_policies -- --nocapture
//! ```

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use edge::cache_policy::{self, OriginView};
use edge::config::Settings;
use edge::forward::{self, Outcome};
use edge::gate::{self, RecordChange, Snapshot};
use edge::gcra::{Decision, Policy, PolicyError};
use edge::idempotency::{self, Disposition, Lookup, Record, State};
use edge::jwt::{self, TokenError, TokenRules};
use edge::protocol::{
    BeginReply, BeginRequest, FinishReply, FinishRequest, RateOutcome, RateSettings, Verdict,
};
use edge::purchase::{self, Incoming, MAX_BODY_BYTES};
use edge::ratelimit_fields;
use edge::reply::{self, Reply};
use edge::routes::{self, Route};
use edge::shield::{self, Shield, SkuFacts};
use edge::{fingerprint, url_parts, warmup};
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use serde_json::{Map, Value, json};
use shared::secrets::MIN_SECRET_LEN;
use shared::signing::{self, SignedParts, sha256_hex};
use shared::{
    BearerTokens, ErrorCode, IdempotencyKey, KeyId, Problem, PurchaseRequest, SecretRing, Sku,
    SkuView, UserId,
};

/// Cases per property when `FUZZ_CASES` is unset.
const DEFAULT_CASES: u32 = 256;

const SECRET: &[u8] = b"session-secret-for-fuzzing";
/// The previous session key, still configured (a rotation in progress).
const OLD_SECRET: &[u8] = b"old-session-secret-for-fuzzing";

/// The session keys the properties run with: `s-cur` (current) and `s-old` (previous).
fn session_keys() -> SecretRing {
    let kid = |s: &str| KeyId::parse(s).unwrap_or_else(KeyId::default_id);
    SecretRing::new(vec![
        (kid("s-cur"), SECRET.to_vec()),
        (kid("s-old"), OLD_SECRET.to_vec()),
    ])
    .unwrap_or_else(|_| SecretRing::single(SECRET.to_vec()))
}
const NOW: i64 = 1_700_000_000;

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

/// Bytes whose `Debug` is (lossy) text, so a failing input is readable.
#[derive(Clone)]
struct Bytes(Vec<u8>);

impl Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0))
    }
}

fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

// ---------------------------------------------------------------------------------------------
// Generators

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-5i64..=205).prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        any::<String>().prop_map(Value::from),
        "[A-Za-z0-9._-]{1,8}".prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        Just("sku".to_owned()),
                        Just("qty".to_owned()),
                        Just("code".to_owned()),
                        Just("remaining".to_owned()),
                        "[a-z_]{0,8}"
                    ],
                    inner
                ),
                0..5
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn valid_user() -> impl Strategy<Value = String> {
    "[A-Za-z0-9._:@-]{1,64}"
}

fn valid_key() -> impl Strategy<Value = String> {
    "[!-~]{1,255}"
}

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

/// Purchase bodies: arbitrary bytes, arbitrary JSON, valid and nearly valid objects.
fn purchase_body() -> impl Strategy<Value = Vec<u8>> {
    let shaped = (
        prop_oneof!["[A-Za-z0-9._-]{1,64}", "[A-Za-z0-9 ._/-]{0,66}"],
        prop_oneof![
            (0i64..=102).prop_map(|n| n.to_string()),
            Just("1.5".to_owned()),
            Just("1e400".to_owned()),
            Just("\"1\"".to_owned()),
            Just("2.0".to_owned()),
        ],
        "[ \n]{0,2}",
        any::<bool>(),
    )
        .prop_map(|(sku, qty, ws, note)| {
            let note = if note {
                r#","note":[1,{"a":null}]"#
            } else {
                ""
            };
            format!(
                "{{{ws}\"qty\"{ws}:{qty},\"sku\":{}{note}}}",
                Value::from(sku)
            )
            .into_bytes()
        });
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..48),
        json_value().prop_map(|v| v.to_string().into_bytes()),
        shaped,
    ]
}

// ---------------------------------------------------------------------------------------------
// JWT

/// An `alg` member: mostly HS256, and every kind of wrong one.
fn alg() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        4 => Just(Some(json!("HS256"))),
        1 => Just(None),
        2 => prop_oneof![
            Just("none"), Just("None"), Just("NONE"), Just("HS384"), Just("HS512"),
            Just("RS256"), Just("ES256"), Just("PS256"), Just("EdDSA"), Just("hs256"),
            Just("HS256 "), Just(" HS256"), Just("HS256\u{0}"), Just("")
        ]
        .prop_map(|s| Some(json!(s))),
        1 => any::<String>().prop_map(|s| Some(json!(s))),
        1 => json_leaf().prop_map(Some),
    ]
}

fn typ() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        3 => Just(None),
        2 => prop_oneof![Just("JWT"), Just("jwt"), Just("Jwt"), Just("at+jwt"), Just("JOSE")]
            .prop_map(|s| Some(json!(s))),
        1 => json_leaf().prop_map(Some),
    ]
}

/// A `kid` header member: mostly absent, a configured key, an unknown one, or not a key id.
fn kid() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        4 => Just(None),
        2 => prop_oneof![Just("s-cur"), Just("s-old")].prop_map(|s| Some(json!(s))),
        1 => prop_oneof!["[A-Za-z0-9._-]{1,33}", "[ -~]{0,6}", any::<String>()].prop_map(|s| Some(json!(s))),
        1 => json_leaf().prop_map(Some),
    ]
}

/// Which key signs a generated token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signer {
    Current,
    Old,
    Other,
}

/// A NumericDate-ish member around `NOW`, or not a number at all.
fn date(near: i64) -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        4 => (-120i64..=120).prop_map(move |d| Some(json!(near + d))),
        2 => (-120.0f64..=120.0).prop_map(move |d| Some(json!(near as f64 + d))),
        1 => Just(None),
        1 => prop_oneof![
            Just(json!(1e300)), Just(json!(-1e300)), Just(json!(u64::MAX)), Just(json!(i64::MIN)),
            Just(json!(0)), Just(json!("tomorrow")), Just(json!(null)), Just(json!([1]))
        ]
        .prop_map(Some),
        1 => json_leaf().prop_map(Some),
    ]
}

fn sub() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        4 => valid_user().prop_map(|s| Some(json!(s))),
        1 => Just(None),
        1 => prop_oneof!["[A-Za-z0-9 ./,é]{0,70}", any::<String>()].prop_map(|s| Some(json!(s))),
        1 => json_leaf().prop_map(Some),
    ]
}

#[derive(Debug, Clone)]
struct TokenParts {
    header: Map<String, Value>,
    claims: Map<String, Value>,
    signer: Signer,
    now: i64,
    rules: TokenRules,
}

const ISSUER: &str = "https://shop.example";
const AUDIENCE: &str = "flashgate";

/// An `iss` member: the configured issuer, another one, or not a string.
fn iss() -> impl Strategy<Value = Option<Value>> {
    prop::option::weighted(
        0.5,
        prop_oneof![
            3 => Just(json!(ISSUER)),
            1 => prop_oneof![Just("https://shop.example/"), Just("HTTPS://SHOP.EXAMPLE"), Just("")]
                .prop_map(|s| json!(s)),
            1 => Just(json!([ISSUER])),
            1 => json_leaf(),
        ],
    )
}

/// An `aud` member: the configured audience as a string or among an array, others, junk.
fn aud() -> impl Strategy<Value = Option<Value>> {
    prop::option::weighted(
        0.5,
        prop_oneof![
            2 => Just(json!(AUDIENCE)),
            2 => Just(json!(["other", AUDIENCE])),
            1 => prop_oneof![
                Just(json!("Flashgate")), Just(json!(["other"])), Just(json!([])),
                Just(json!([[AUDIENCE]])), Just(json!({"aud": AUDIENCE}))
            ],
            1 => json_leaf(),
        ],
    )
}

/// The token rules of the settings: a lifetime bound around the generated dates (which lie within
/// ±120 s of now, or are absurd), with and without an issuer and audience to match.
fn token_rules() -> impl Strategy<Value = TokenRules> {
    (
        prop_oneof![Just(60u32), Just(120), Just(86_400), 60u32..=300],
        prop::option::weighted(0.3, Just(ISSUER.to_owned())),
        prop::option::weighted(0.3, Just(AUDIENCE.to_owned())),
    )
        .prop_map(|(max_lifetime_secs, issuer, audience)| TokenRules {
            max_lifetime_secs,
            issuer,
            audience,
        })
}

fn object(members: Vec<(&str, Option<Value>)>, extra: Vec<(String, Value)>) -> Map<String, Value> {
    let mut map: Map<String, Value> = extra.into_iter().collect();
    for (k, v) in members {
        match v {
            Some(v) => {
                map.insert(k.to_owned(), v);
            }
            None => {
                map.remove(k);
            }
        }
    }
    map
}

fn token_parts() -> impl Strategy<Value = TokenParts> {
    let extra = || prop::collection::vec(("[a-z]{1,4}", json_leaf()), 0..3);
    (
        (
            alg(),
            typ(),
            prop::option::weighted(0.1, json_leaf()),
            extra(),
            kid(),
        ),
        (
            sub(),
            date(NOW),
            prop::option::weighted(0.4, date(NOW)),
            prop::option::weighted(0.4, date(NOW - 30)),
            (iss(), aud()),
            extra(),
        ),
        prop_oneof![
            6 => Just(Signer::Current),
            3 => Just(Signer::Old),
            1 => Just(Signer::Other),
        ],
        -5i64..=5,
        token_rules(),
    )
        .prop_map(
            |(
                (alg, typ, crit, hx, kid),
                (sub, exp, nbf, iat, (iss, aud), cx),
                signer,
                dnow,
                rules,
            )| {
                TokenParts {
                    header: object(
                        vec![("alg", alg), ("typ", typ), ("crit", crit), ("kid", kid)],
                        hx,
                    ),
                    claims: object(
                        vec![
                            ("sub", sub),
                            ("exp", exp),
                            ("nbf", nbf.flatten()),
                            ("iat", iat.flatten()),
                            ("iss", iss),
                            ("aud", aud),
                        ],
                        cx,
                    ),
                    signer,
                    now: NOW + dnow,
                    rules,
                }
            },
        )
}

/// What the contract says a token with these parts verifies to (edge issue + contract.md:
/// HS256 only, no `crit`, `typ` JWT if present, MAC before claims, `exp` required, `nbf`
/// honoured, a lifetime (`exp` - `iat`, or - now when `iat` is absent or later) of at most
/// `SESSION_MAX_LIFETIME_SECS`, `iss` / `aud` as configured, `sub` a valid user id).
fn model_token(p: &TokenParts, token_len: usize) -> Result<(String, i64), TokenError> {
    if token_len > jwt::MAX_TOKEN_LEN {
        return Err(TokenError::Malformed);
    }
    if p.header.get("alg") != Some(&json!("HS256")) {
        return Err(TokenError::UnsupportedAlgorithm);
    }
    match p.header.get("typ") {
        None => {}
        Some(Value::String(t)) if t.eq_ignore_ascii_case("jwt") => {}
        Some(_) => return Err(TokenError::UnsupportedAlgorithm),
    }
    if p.header.contains_key("crit") {
        return Err(TokenError::UnsupportedAlgorithm);
    }
    // Key selection: a `kid` must be a string naming a configured key (`s-cur`, `s-old`) and
    // only that key is tried; without `kid` either configured key may have signed.
    let verified = match p.header.get("kid") {
        None => matches!(p.signer, Signer::Current | Signer::Old),
        Some(Value::String(k)) if k == "s-cur" => p.signer == Signer::Current,
        Some(Value::String(k)) if k == "s-old" => p.signer == Signer::Old,
        Some(_) => return Err(TokenError::UnknownKey),
    };
    if !verified {
        return Err(TokenError::BadSignature);
    }
    let number = |v: Option<&Value>| v.and_then(Value::as_f64).filter(|f| f.is_finite());
    let exp = number(p.claims.get("exp")).ok_or(TokenError::MissingExpiry)?;
    if p.now as f64 >= exp {
        return Err(TokenError::Expired);
    }
    if let Some(nbf) = p.claims.get("nbf") {
        let nbf = number(Some(nbf)).ok_or(TokenError::Malformed)?;
        if (p.now as f64) < nbf {
            return Err(TokenError::NotYetValid);
        }
    }
    let now = p.now as f64;
    let start = match p.claims.get("iat") {
        None => now,
        Some(iat) => number(Some(iat)).ok_or(TokenError::Malformed)?.min(now),
    };
    if exp - start > f64::from(p.rules.max_lifetime_secs) {
        return Err(TokenError::LifetimeTooLong);
    }
    if let Some(want) = &p.rules.issuer
        && p.claims.get("iss") != Some(&json!(want))
    {
        return Err(TokenError::WrongIssuer);
    }
    if let Some(want) = &p.rules.audience {
        let listed = match p.claims.get("aud") {
            Some(Value::Array(all)) => all.contains(&json!(want)),
            Some(one) => one == &json!(want),
            None => false,
        };
        if !listed {
            return Err(TokenError::WrongAudience);
        }
    }
    let sub = p
        .claims
        .get("sub")
        .and_then(Value::as_str)
        .filter(|s| UserId::parse(s).is_ok())
        .ok_or(TokenError::InvalidSubject)?;
    Ok((sub.to_owned(), exp.floor() as i64))
}

fn mint(p: &TokenParts) -> String {
    let key: &[u8] = match p.signer {
        Signer::Current => SECRET,
        Signer::Old => OLD_SECRET,
        Signer::Other => b"some-other-key",
    };
    jwt::sign_with_header(
        &Value::Object(p.header.clone()),
        &Value::Object(p.claims.clone()),
        key,
    )
}

#[test]
fn jwt_verification_matches_the_model() {
    fuzz("jwt.verify.model", token_parts(), |p| {
        let token = mint(&p);
        let got = jwt::verify_hs256(&token, &session_keys(), &p.rules, p.now)
            .map(|c| (c.sub.to_string(), c.exp));
        prop_assert_eq!(got, model_token(&p, token.len()), "{}", token);
        Ok(())
    });
}

#[test]
fn jwt_a_token_minted_with_the_secret_verifies() {
    let input = (
        valid_user(),
        1i64..=43_200,
        prop::option::of(0i64..=43_200),
        prop::collection::vec(("[a-z]{1,6}", json_leaf()), 0..4),
    );
    fuzz("jwt.valid_verifies", input, |(user, ttl, age, extra)| {
        let mut claims: Map<String, Value> = extra.into_iter().collect();
        // (`iss` / `aud` are not checked by the default rules; any value passes.)
        claims.insert("sub".into(), json!(user));
        claims.insert("exp".into(), json!(NOW + ttl));
        claims.remove("nbf");
        if let Some(age) = age {
            claims.insert("nbf".into(), json!(NOW - age));
            claims.insert("iat".into(), json!(NOW - age));
        }
        let token = jwt::sign_hs256(&Value::Object(claims), SECRET);
        let c = jwt::verify_hs256(&token, &session_keys(), &TokenRules::default(), NOW)
            .map_err(|e| fail(e.detail()))?;
        prop_assert_eq!((c.sub.as_str(), c.exp), (user.as_str(), NOW + ttl));
        // Through the Authorization header too.
        let header = format!("Bearer {token}");
        prop_assert_eq!(jwt::bearer_token(Some(&header)), Ok(token.as_str()));
        Ok(())
    });
}

#[test]
fn jwt_any_alg_but_hs256_is_refused() {
    let other_alg = prop_oneof![
        any::<String>().prop_filter_map("not HS256", |s| (s != "HS256").then(|| json!(s))),
        json_leaf(),
        Just(json!("none")),
        Just(json!("RS256")),
        Just(json!(["HS256"])),
    ];
    fuzz(
        "jwt.other_alg_refused",
        (other_alg, valid_user()),
        |(alg, user)| {
            let claims = json!({"sub": user, "exp": NOW + 60});
            for header in [json!({"alg": alg, "typ": "JWT"}), json!({"alg": alg})] {
                let signed = jwt::sign_with_header(&header, &claims, SECRET);
                prop_assert_eq!(
                    jwt::verify_hs256(&signed, &session_keys(), &TokenRules::default(), NOW),
                    Err(TokenError::UnsupportedAlgorithm)
                );
                // And unsigned (`alg: none` style, empty signature).
                let unsigned = format!("{}.", signed.rsplit_once('.').map_or("", |(si, _)| si));
                prop_assert!(
                    jwt::verify_hs256(&unsigned, &session_keys(), &TokenRules::default(), NOW)
                        .is_err()
                );
            }
            Ok(())
        },
    );
}

#[test]
fn jwt_any_single_change_is_refused() {
    let input = (
        valid_user(),
        any::<usize>(),
        prop_oneof![
            proptest::char::range('A', 'Z'),
            proptest::char::range('a', 'z'),
            proptest::char::range('0', '9'),
            Just('-'),
            Just('_'),
            Just('.'),
            Just('='),
            any::<char>(),
        ],
    );
    fuzz("jwt.single_change", input, |(user, at, with)| {
        let token = jwt::sign_hs256(&json!({"sub": user, "exp": NOW + 60}), SECRET);
        let mut chars: Vec<char> = token.chars().collect();
        let i = at % chars.len();
        if chars[i] != with {
            chars[i] = with;
            let bad: String = chars.iter().collect();
            prop_assert!(
                jwt::verify_hs256(&bad, &session_keys(), &TokenRules::default(), NOW).is_err(),
                "{}",
                bad
            );
        }
        // A wrong key never verifies.
        prop_assert_eq!(
            jwt::verify_hs256(
                &token,
                &SecretRing::single(b"wrong".to_vec()),
                &TokenRules::default(),
                NOW
            ),
            Err(TokenError::BadSignature)
        );
        Ok(())
    });
}

#[test]
fn jwt_never_panics_on_any_string() {
    let seg = || "[A-Za-z0-9_=+/-]{0,40}";
    let input = prop_oneof![
        any::<String>(),
        (seg(), seg(), seg()).prop_map(|(a, b, c)| format!("{a}.{b}.{c}")),
        (json_value(), json_value(), seg()).prop_map(|(h, c, s)| format!(
            "{}.{}.{s}",
            URL_SAFE_NO_PAD.encode(h.to_string()),
            URL_SAFE_NO_PAD.encode(c.to_string())
        )),
        prop::collection::vec(any::<u8>(), 0..64)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        (4090usize..4100).prop_map(|n| "a.b.".to_owned() + &"c".repeat(n)),
    ];
    fuzz("jwt.any_string", input, |t| {
        let got = jwt::verify_hs256(&t, &session_keys(), &TokenRules::default(), NOW);
        if t.split('.').count() != 3 || t.len() > jwt::MAX_TOKEN_LEN {
            prop_assert_eq!(got, Err(TokenError::Malformed));
        }
        Ok(())
    });
}

#[test]
fn bearer_header_parsing() {
    let input = prop_oneof![
        any::<String>(),
        "(Bearer|bearer|BEARER|Basic|Bearer\t)?[ \t]{0,3}[!-~ ]{0,20}",
    ];
    fuzz("jwt.bearer_token", prop::option::of(input), |h| {
        match jwt::bearer_token(h.as_deref()) {
            Ok(t) => {
                prop_assert!(!t.is_empty());
                prop_assert!(!t.starts_with(char::is_whitespace));
                prop_assert!(h.as_deref().is_some_and(|h| h.contains(t)));
            }
            Err(e) => prop_assert_eq!(e, TokenError::Missing),
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// RFC 8941 structured fields: a small checker for the parts the RateLimit fields use.

#[derive(Debug, Clone, PartialEq)]
enum Bare {
    Integer(i64),
    Decimal(String),
    String(String),
    Token(String),
    Boolean(bool),
}

type Params = Vec<(String, Bare)>;

struct Sf<'a> {
    s: &'a [u8],
    i: usize,
}

impl Sf<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn bare(&mut self) -> Result<Bare, String> {
        match self.peek() {
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'"') => self.string(),
            Some(b'?') => {
                self.i += 1;
                let b = self.peek();
                self.i += 1;
                match b {
                    Some(b'0') => Ok(Bare::Boolean(false)),
                    Some(b'1') => Ok(Bare::Boolean(true)),
                    _ => Err("bad boolean".into()),
                }
            }
            Some(c) if c.is_ascii_alphabetic() || c == b'*' => {
                let start = self.i;
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&c))
                {
                    self.i += 1;
                }
                Ok(Bare::Token(
                    String::from_utf8_lossy(&self.s[start..self.i]).into_owned(),
                ))
            }
            _ => Err(format!("no bare item at {}", self.i)),
        }
    }

    fn number(&mut self) -> Result<Bare, String> {
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        let digits_start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        let int_digits = self.i - digits_start;
        if int_digits == 0 {
            return Err("number without digits".into());
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            let frac_start = self.i;
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.i += 1;
            }
            let frac = self.i - frac_start;
            if int_digits > 12 || !(1..=3).contains(&frac) {
                return Err("bad decimal".into());
            }
            return Ok(Bare::Decimal(
                String::from_utf8_lossy(&self.s[start..self.i]).into_owned(),
            ));
        }
        if int_digits > 15 {
            return Err(format!("integer of {int_digits} digits"));
        }
        let text = std::str::from_utf8(&self.s[start..self.i]).map_err(|e| e.to_string())?;
        text.parse().map(Bare::Integer).map_err(|e| e.to_string())
    }

    fn string(&mut self) -> Result<Bare, String> {
        self.i += 1;
        let mut out = String::new();
        loop {
            match self.peek() {
                None => return Err("unterminated string".into()),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(Bare::String(out));
                }
                Some(b'\\') => {
                    self.i += 1;
                    match self.peek() {
                        Some(c @ (b'"' | b'\\')) => out.push(char::from(c)),
                        _ => return Err("bad escape".into()),
                    }
                    self.i += 1;
                }
                Some(c @ 0x20..=0x7e) => {
                    out.push(char::from(c));
                    self.i += 1;
                }
                Some(c) => return Err(format!("byte {c:#x} in string")),
            }
        }
    }

    fn params(&mut self) -> Result<Params, String> {
        let mut out = Vec::new();
        while self.peek() == Some(b';') {
            self.i += 1;
            while self.peek() == Some(b' ') {
                self.i += 1;
            }
            let start = self.i;
            match self.peek() {
                Some(c) if c.is_ascii_lowercase() || c == b'*' => self.i += 1,
                _ => return Err("bad key".into()),
            }
            while self.peek().is_some_and(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-.*".contains(&c)
            }) {
                self.i += 1;
            }
            let key = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
            let value = if self.peek() == Some(b'=') {
                self.i += 1;
                self.bare()?
            } else {
                Bare::Boolean(true)
            };
            out.push((key, value));
        }
        Ok(out)
    }
}

/// Parses an RFC 8941 List of Items (no Inner Lists; the RateLimit fields have none).
fn parse_sf_list(text: &str) -> Result<Vec<(Bare, Params)>, String> {
    let mut p = Sf {
        s: text.as_bytes(),
        i: 0,
    };
    while p.peek() == Some(b' ') {
        p.i += 1;
    }
    let mut members = Vec::new();
    while p.peek().is_some() {
        let item = p.bare()?;
        let params = p.params()?;
        members.push((item, params));
        while matches!(p.peek(), Some(b' ' | b'\t')) {
            p.i += 1;
        }
        match p.peek() {
            None => break,
            Some(b',') => {
                p.i += 1;
                while matches!(p.peek(), Some(b' ' | b'\t')) {
                    p.i += 1;
                }
                if p.peek().is_none() {
                    return Err("trailing comma".into());
                }
            }
            Some(c) => return Err(format!("unexpected {c:#x} at {}", p.i)),
        }
    }
    Ok(members)
}

fn int(params: &Params, key: &str) -> Option<i64> {
    params.iter().find_map(|(k, v)| match v {
        Bare::Integer(n) if k == key => Some(*n),
        _ => None,
    })
}

fn model_policy(name: &str, quota: u32, window: u32) -> Result<(), PolicyError> {
    if !(1..=10_000).contains(&quota) {
        return Err(PolicyError::Quota);
    }
    if !(1..=86_400).contains(&window)
        || u64::from(window) * 1_000_000 < u64::from(quota) * (u64::from(quota) + 1)
    {
        return Err(PolicyError::Window);
    }
    let ok = (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok { Ok(()) } else { Err(PolicyError::Name) }
}

fn policy_input() -> impl Strategy<Value = (String, u32, u32)> {
    (
        prop_oneof![
            4 => "[A-Za-z0-9_-]{1,64}",
            1 => "[A-Za-z0-9_\"\\\\ -]{0,66}",
            1 => any::<String>(),
        ],
        prop_oneof![1u32..=10_000, 1u32..=20, any::<u32>()],
        prop_oneof![1u32..=86_400, 1u32..=60, any::<u32>()],
    )
}

/// Checks the three rate-limit headers for `policy` after `outcome`.
fn check_ratelimit_headers(policy: &Policy, outcome: &RateOutcome) -> Result<(), TestCaseError> {
    let headers = ratelimit_fields::headers(policy, outcome);
    let get = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let pol = get(ratelimit_fields::RATELIMIT_POLICY).ok_or_else(|| fail("no policy field"))?;
    let lim = get(ratelimit_fields::RATELIMIT).ok_or_else(|| fail("no ratelimit field"))?;
    let pol_items = parse_sf_list(&pol).map_err(|e| fail(format!("{pol}: {e}")))?;
    let lim_items = parse_sf_list(&lim).map_err(|e| fail(format!("{lim}: {e}")))?;
    prop_assert_eq!(pol_items.len(), 1);
    prop_assert_eq!(lim_items.len(), 1);
    let (pname, pparams) = &pol_items[0];
    let (lname, lparams) = &lim_items[0];
    prop_assert_eq!(pname, &Bare::String(policy.name().to_owned()));
    prop_assert_eq!(lname, &Bare::String(policy.name().to_owned()));
    prop_assert_eq!(
        pparams.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        vec!["q", "w"]
    );
    prop_assert_eq!(
        lparams.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        vec!["r", "t"]
    );
    prop_assert_eq!(int(pparams, "q"), Some(i64::from(policy.quota())));
    prop_assert_eq!(int(pparams, "w"), Some(i64::from(policy.window_secs())));
    let r = int(lparams, "r").ok_or_else(|| fail("r is not an integer"))?;
    let t = int(lparams, "t").ok_or_else(|| fail("t is not an integer"))?;
    prop_assert!(r >= 0 && t >= 0);
    match *outcome {
        RateOutcome::Allowed { remaining, .. } => {
            prop_assert_eq!(r, i64::from(remaining));
            prop_assert_eq!(get(ratelimit_fields::RETRY_AFTER), None);
        }
        RateOutcome::Limited { retry_after_secs } => {
            prop_assert_eq!(r, 0);
            let ra = get(ratelimit_fields::RETRY_AFTER).ok_or_else(|| fail("no Retry-After"))?;
            // Retry-After is delta-seconds (digits) and at least `t` (contract.md).
            prop_assert!(!ra.is_empty() && ra.bytes().all(|b| b.is_ascii_digit()));
            let ra: u64 = ra.parse().map_err(fail)?;
            prop_assert_eq!(ra, retry_after_secs);
            prop_assert!(ra >= t.unsigned_abs());
        }
    }
    Ok(())
}

#[test]
fn ratelimit_headers_from_the_gcra_are_structured_fields() {
    let input = (
        policy_input(),
        prop_oneof![
            Just(None),
            any::<i64>().prop_map(Some),
            (0i64..=1_000_000_000_000_000).prop_map(Some)
        ],
        prop_oneof![
            0i64..=i64::MAX,
            1_600_000_000_000_000i64..=1_900_000_000_000_000
        ],
    );
    fuzz(
        "ratelimit.gcra_headers",
        input,
        |((name, quota, window), tat, now)| {
            let policy = Policy::new(&name, quota, window);
            let want = model_policy(&name, quota, window);
            prop_assert_eq!(policy.as_ref().err(), want.as_ref().err());
            let Ok(policy) = policy else { return Ok(()) };
            let outcome = match policy.check(tat, now) {
                Decision::Allowed {
                    new_tat_us,
                    remaining,
                    reset_secs,
                } => {
                    prop_assert_eq!(
                        new_tat_us,
                        tat.map_or(now, |t| t.max(now))
                            .saturating_add(i64::from(window) * 1_000_000 / i64::from(quota))
                    );
                    prop_assert!(remaining < quota);
                    prop_assert!(reset_secs <= u64::from(window));
                    RateOutcome::Allowed {
                        remaining,
                        reset_secs,
                    }
                }
                Decision::Limited { retry_after_secs } => {
                    prop_assert!(retry_after_secs >= 1);
                    RateOutcome::Limited { retry_after_secs }
                }
            };
            check_ratelimit_headers(&policy, &outcome)
        },
    );
}

#[test]
fn ratelimit_headers_for_any_outcome_are_structured_fields() {
    let outcome = prop_oneof![
        (any::<u32>(), any::<u64>()).prop_map(|(remaining, reset_secs)| RateOutcome::Allowed {
            remaining,
            reset_secs
        }),
        any::<u64>().prop_map(|retry_after_secs| RateOutcome::Limited { retry_after_secs }),
        (0u64..=100).prop_map(|retry_after_secs| RateOutcome::Limited { retry_after_secs }),
    ];
    fuzz(
        "ratelimit.any_outcome",
        ("[A-Za-z0-9_-]{1,64}", outcome),
        |(name, outcome)| {
            let policy = Policy::new(&name, 5, 10).map_err(fail)?;
            check_ratelimit_headers(&policy, &outcome)
        },
    );
}

#[test]
fn sf_string_output_is_a_valid_sf_string() {
    fuzz("ratelimit.sf_string", any::<String>(), |s| {
        let out = ratelimit_fields::sf_string(&s);
        let items = parse_sf_list(&out).map_err(|e| fail(format!("{out}: {e}")))?;
        let printable: String = s.chars().filter(|c| (' '..='~').contains(c)).collect();
        prop_assert_eq!(items, vec![(Bare::String(printable), vec![])]);
        Ok(())
    });
}

#[test]
fn gcra_a_burst_admits_exactly_the_quota() {
    let input = (1u32..=200, 1u32..=86_400, 0i64..=4_000_000_000_000_000);
    fuzz("gcra.burst", input, |(quota, window, now)| {
        let Ok(p) = Policy::new("purchase", quota, window) else {
            return Ok(());
        };
        let mut tat = None;
        let mut admitted = 0;
        for _ in 0..=quota {
            if let Decision::Allowed { new_tat_us, .. } = p.check(tat, now) {
                tat = Some(new_tat_us);
                admitted += 1;
            }
        }
        prop_assert_eq!(admitted, quota);
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// Purchase checks, in contract order, and the signed forward

fn authorization() -> impl Strategy<Value = (Option<String>, Option<String>)> {
    // (header, the user a valid token names)
    prop_oneof![
        4 => valid_user().prop_map(|u| {
            let t = jwt::sign_hs256(&json!({"sub": u, "exp": NOW + 60}), SECRET);
            (Some(format!("Bearer {t}")), Some(u))
        }),
        1 => valid_user().prop_map(|u| {
            let t = jwt::sign_hs256(&json!({"sub": u, "exp": NOW}), SECRET);
            (Some(format!("Bearer {t}")), None)
        }),
        1 => Just((None, None)),
        1 => any::<String>().prop_map(|s| (Some(s), None)),
    ]
}

fn idempotency_key() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        3 => valid_key().prop_map(Some),
        2 => valid_key().prop_map(|k| Some(sf_encode(&k))),
        1 => Just(None),
        1 => prop_oneof!["[ -~]{0,8}", "\"[ -~]{0,8}", any::<String>(), "[!-~]{256,260}"].prop_map(Some),
    ]
}

fn incoming_body() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        8 => purchase_body(),
        1 => (MAX_BODY_BYTES - 2..=MAX_BODY_BYTES + 2).prop_map(|n| {
            let mut b = br#"{"sku":"A","qty":1,"pad":""#.to_vec();
            b.resize(n.saturating_sub(2), b'x');
            b.extend_from_slice(b"\"}");
            b
        }),
    ]
    .prop_map(Bytes)
}

#[test]
fn purchase_checks_run_in_contract_order() {
    let input = (
        authorization(),
        idempotency_key(),
        incoming_body(),
        -300i64..=300,
    );
    fuzz(
        "purchase.validate",
        input,
        |((auth, user), key, Bytes(body), skew)| {
            let got = purchase::validate(
                Incoming {
                    credential: &edge::session::Credential::from_authorization(auth.as_deref()),
                    idempotency_key: key.as_deref(),
                    body: &body,
                },
                &session_keys(),
                &TokenRules::default(),
                NOW,
            );
            let code =
                |r: &Result<purchase::Purchase, Reply>| r.as_ref().err().and_then(Reply::code);
            if body.len() > MAX_BODY_BYTES {
                prop_assert_eq!(code(&got), Some(ErrorCode::PayloadTooLarge));
                return Ok(());
            }
            let Some(user) = user else {
                prop_assert_eq!(code(&got), Some(ErrorCode::Unauthenticated));
                let reply = got.err().ok_or_else(|| fail("accepted"))?;
                prop_assert_eq!(reply.header("www-authenticate"), Some("Bearer"));
                return Ok(());
            };
            let Some(raw_key) = key else {
                prop_assert_eq!(code(&got), Some(ErrorCode::MissingIdempotencyKey));
                return Ok(());
            };
            let Ok(decoded) = IdempotencyKey::parse(&raw_key) else {
                prop_assert_eq!(code(&got), Some(ErrorCode::InvalidRequest));
                return Ok(());
            };
            let Ok(request) = PurchaseRequest::from_json(&body) else {
                prop_assert_eq!(code(&got), Some(ErrorCode::InvalidRequest));
                return Ok(());
            };
            let p = got.map_err(|r| fail(r.body))?;
            prop_assert_eq!(p.user.as_str(), user.as_str());
            prop_assert_eq!(&p.key, &decoded);
            prop_assert_eq!(&p.raw_key, &raw_key);
            prop_assert_eq!(&p.request, &request);
            prop_assert_eq!(&p.body, &request.to_json());
            prop_assert_eq!(&p.fingerprint, &sha256_hex(request.to_json().as_bytes()));
            prop_assert_eq!(&p.fingerprint, &fingerprint::of(&request));

            // The forwarded request verifies under the origin's rules: it decodes the key header,
            // hashes the body it receives and checks the signature over its own route.
            let edge_keys = SecretRing::parse("e2:edge-shared-secret,e1:old-edge-shared-secret", 1)
                .map_err(|e| fail(e.to_string()))?;
            let headers = forward::signed_headers(&edge_keys, NOW, &p);
            let get = |n: &str| {
                headers
                    .iter()
                    .find(|(k, _)| *k == n)
                    .map(|(_, v)| v.as_str())
            };
            let origin_user = get(shared::headers::USER).ok_or_else(|| fail("no user"))?;
            let origin_key = get(shared::headers::IDEMPOTENCY_KEY)
                .and_then(|k| IdempotencyKey::parse(k).ok())
                .ok_or_else(|| fail("key header"))?;
            prop_assert!(UserId::parse(origin_user).is_ok());
            let parts = SignedParts {
                method: "POST",
                path: forward::PURCHASE_PATH,
                user: origin_user,
                idempotency_key: origin_key.as_str(),
                body: p.body.as_bytes(),
            };
            // v2 with the edge's current key, verified by an origin that holds only that key
            // and no longer takes v1.
            let ring =
                SecretRing::parse("e2:edge-shared-secret", 1).map_err(|e| fail(e.to_string()))?;
            let verifier = signing::Verifier {
                ring: &ring,
                accept_v1: false,
            };
            prop_assert_eq!(
                verifier
                    .verify(get(shared::headers::SIGNATURE), NOW + skew, &parts)
                    .map(|v| (v.version, v.kid.to_string())),
                Ok((signing::Version::V2, "e2".to_owned()))
            );
            Ok(())
        },
    );
}

#[test]
fn content_length_precheck() {
    let input = prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        (16_380u64..=16_390).prop_map(|n| format!(" {n} ")),
        any::<String>(),
    ];
    fuzz("purchase.content_length", prop::option::of(input), |v| {
        let want = v
            .as_deref()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 16 * 1024);
        prop_assert_eq!(purchase::announced_too_large(v.as_deref()), want);
        Ok(())
    });
}

/// A body streamed in chunks of any sizes is kept whole up to the limit and refused at the first
/// chunk that passes it, never holding more than the limit.
#[test]
fn streamed_bodies_are_capped() {
    let chunks = prop::collection::vec(
        prop_oneof![
            0usize..=64,
            0usize..=MAX_BODY_BYTES,
            Just(MAX_BODY_BYTES + 1)
        ],
        0..40,
    );
    fuzz("purchase.capped_body", chunks, |sizes| {
        let mut body = purchase::CappedBody::default();
        let mut total = 0usize;
        let mut refused = false;
        for (i, n) in sizes.iter().enumerate() {
            let chunk = vec![b'a' + (i % 26) as u8; *n];
            match body.push(&chunk) {
                Ok(()) => {
                    total += n;
                    prop_assert!(total <= MAX_BODY_BYTES);
                }
                Err(purchase::BodyTooLarge) => {
                    prop_assert!(total + n > MAX_BODY_BYTES);
                    refused = true;
                    break;
                }
            }
        }
        let kept = body.into_bytes();
        prop_assert_eq!(kept.len(), total);
        prop_assert_eq!(refused, sizes.iter().sum::<usize>() > MAX_BODY_BYTES);
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// The per-user gate and the idempotency state machine

fn facts() -> impl Strategy<Value = SkuFacts> {
    (
        prop::option::of(prop_oneof![-2i64..=200, any::<i64>()]),
        prop::option::of(prop_oneof![0i64..=200, any::<i64>()]),
        prop::option::of(prop_oneof![NOW_MS - 5..=NOW_MS + 5, any::<i64>()]),
        prop::option::of(prop_oneof![NOW_MS - 5..=NOW_MS + 5, any::<i64>()]),
    )
        .prop_map(
            |(stock_bound, max_per_user, raised_ms, viewed_ms)| SkuFacts {
                stock_bound,
                max_per_user,
                raised_ms,
                viewed_ms,
                schedule: None,
                room: None,
                defences: None,
            },
        )
}

/// A unix-ms instant near which the generated facts were raised.
const NOW_MS: i64 = NOW * 1_000;

fn record() -> impl Strategy<Value = Option<Record>> {
    prop::option::of(
        (
            prop_oneof![Just("fp-a".to_owned()), Just("fp-b".to_owned())],
            any::<i64>(),
            prop::option::of((any::<u16>(), any::<String>())),
            prop_oneof![any::<i64>(), 1_700_000_000_000i64..=1_700_000_100_000],
        )
            .prop_map(|(fingerprint, attempt, done, updated_ms)| Record {
                fingerprint,
                attempt,
                state: done.map_or(State::InFlight, |(status, body)| State::Done {
                    status,
                    body,
                }),
                updated_ms,
            }),
    )
}

#[test]
fn gate_begin_decides_consistently() {
    let input = (
        (record(), prop::option::of(any::<i64>()), any::<i64>()),
        (
            prop_oneof![Just("fp-a"), Just("fp-b")],
            1u32..=100,
            facts(),
            1u32..=20,
            1u32..=60,
        ),
        (0i64..=i64::MAX, 1_700_000_000_000i64..=1_700_000_200_000),
        (any::<i64>(), any::<bool>()),
        prop_oneof![any::<i64>(), 1i64..=60_000],
    );
    fuzz(
        "gate.begin",
        input,
        |(
            (record, tat, bought),
            (fp, qty, facts, quota, window),
            (any_now, now),
            (next, new_work_refused),
            timeout,
        )| {
            let Ok(policy) = Policy::new("purchase", quota, window) else {
                return Ok(());
            };
            let snap = Snapshot {
                tat_us: tat,
                record,
                bought,
                counted_ms: Some(now),
                proof_spent: false,
            };
            let req = BeginRequest {
                key: "k".into(),
                fingerprint: fp.into(),
                sku: "A".into(),
                qty,
                facts,
                rate: RateSettings {
                    name: "purchase".into(),
                    quota,
                    window_secs: window,
                },
                in_flight_timeout_ms: timeout,
                count_ttl_ms: 5_000,
                schedule_margin_ms: 2_000,
                proof: None,
                new_work_refused,
            };
            for now_ms in [any_now, now] {
                let bought = gate::counted_units(&snap, now_ms, req.count_ttl_ms);
                let (reply, effects) = gate::begin(&policy, &snap, &req, now_ms, next);
                match &reply.verdict {
                    Verdict::Limited => {
                        let limited = matches!(reply.rate, RateOutcome::Limited { .. });
                        prop_assert!(limited);
                        prop_assert_eq!(effects.record, RecordChange::Keep);
                        prop_assert_eq!(effects.new_tat_us, None);
                    }
                    Verdict::Proceed { .. } | Verdict::Answered { .. } if new_work_refused => {
                        return Err(fail("new work the worker refused went on"));
                    }
                    Verdict::Refused => {
                        // Only new work (no live record of the same request) is refused, and
                        // nothing changes.
                        prop_assert!(new_work_refused);
                        let live = matches!(
                            idempotency::lookup(snap.record.as_ref(), fp, now_ms, timeout),
                            Lookup::Proceed
                        );
                        prop_assert!(live);
                        prop_assert_eq!(&effects, &gate::Effects::default());
                    }
                    Verdict::Proceed { attempt } => {
                        prop_assert_eq!(*attempt, next);
                        prop_assert_eq!(shield::decide(&facts, bought, qty), Shield::Pass);
                        let RecordChange::Put(r) = &effects.record else {
                            return Err(fail("proceed without claiming the key"));
                        };
                        prop_assert_eq!(&r.state, &State::InFlight);
                        prop_assert_eq!((r.attempt, r.fingerprint.as_str()), (next, fp));
                    }
                    Verdict::Answered { status, body } => {
                        let Shield::Answer(code) = shield::decide(&facts, bought, qty) else {
                            return Err(fail("answered without a shield"));
                        };
                        prop_assert_eq!(*status, code.status());
                        prop_assert_eq!(reply::problem_code(body.as_bytes()), Some(code));
                        // Only the origin's decisions are stored with a key.
                        prop_assert_eq!(&effects.record, &RecordChange::Keep);
                    }
                    Verdict::Replay { status, body } => {
                        let Some(Record {
                            state: State::Done { status: s, body: b },
                            fingerprint,
                            ..
                        }) = &snap.record
                        else {
                            return Err(fail("replay without a stored answer"));
                        };
                        prop_assert_eq!((status, body, fingerprint.as_str()), (s, b, fp));
                        prop_assert_eq!(&effects.record, &RecordChange::Keep);
                    }
                    Verdict::InFlight | Verdict::Reused => {
                        prop_assert!(snap.record.is_some());
                        prop_assert_eq!(&effects.record, &RecordChange::Keep);
                    }
                    Verdict::ProofSpent => {
                        return Err(fail("no proof was carried, so none can be spent"));
                    }
                }
                prop_assert_eq!(effects.bought_delta, 0);
            }
            Ok(())
        },
    );
}

fn origin_answer() -> impl Strategy<Value = (u16, String)> {
    let codes = [
        ErrorCode::InvalidRequest,
        ErrorCode::BadSignature,
        ErrorCode::UnknownSku,
        ErrorCode::SoldOut,
        ErrorCode::PurchaseLimit,
        ErrorCode::IdempotencyInFlight,
        ErrorCode::IdempotencyKeyReused,
        ErrorCode::Unavailable,
        ErrorCode::Internal,
    ];
    prop_oneof![
        (0..codes.len(), any::<bool>()).prop_map(move |(i, right_status)| {
            let c = codes[i];
            let status = if right_status { c.status() } else { 409 };
            (status, Problem::new(c, "x").to_json())
        }),
        (any::<u16>(), any::<String>()),
        (0i64..=10, "[a-z]{1,5}").prop_map(|(remaining, sku)| {
            (
                201,
                json!({"order_id": "o", "sku": sku, "qty": 1, "user": "u", "remaining": remaining})
                    .to_string(),
            )
        }),
        (any::<u16>(), json_value().prop_map(|v| v.to_string())),
    ]
}

#[test]
fn gate_finish_stores_only_what_the_contract_stores() {
    let input = (
        record(),
        any::<i64>(),
        1u32..=100,
        origin_answer(),
        any::<i64>(),
    );
    fuzz(
        "gate.finish",
        input,
        |(record, attempt, qty, (status, body), now)| {
            // Half the time, finish the current attempt.
            let attempt = match (&record, attempt % 2 == 0) {
                (Some(r), true) => r.attempt,
                _ => attempt,
            };
            let req = FinishRequest {
                key: "k".into(),
                attempt,
                sku: "A".into(),
                qty,
                status,
                body: body.clone(),
                proof: (attempt % 3 == 0).then(|| "c0ffee".to_owned()),
            };
            let (reply, effects) = gate::finish(record.as_ref(), &req, now);
            let applies = idempotency::finish_applies(record.as_ref(), attempt);
            let store = idempotency::disposition(status, body.as_bytes()) == Disposition::Store;
            prop_assert_eq!(reply.stored, applies && store);
            let code = reply::problem_code(body.as_bytes());
            let want_store = status == 201
                || code.is_some_and(|c| c.is_stored_outcome() && c.status() == status);
            prop_assert_eq!(store, want_store);
            // No answer to trust (a 5xx the origin did not store): the key stays, in doubt.
            let doubt = !store && status >= 500;
            if !applies {
                prop_assert_eq!(&effects.record, &RecordChange::Keep);
            } else if store {
                let done = matches!(
                    &effects.record,
                    RecordChange::Put(Record {
                        state: State::Done { .. },
                        ..
                    })
                );
                prop_assert!(done);
            } else if doubt {
                let RecordChange::Put(Record {
                    state: State::InDoubt { proof },
                    ..
                }) = &effects.record
                else {
                    return Err(fail("a 5xx did not leave the key in doubt"));
                };
                prop_assert_eq!(proof, &req.proof);
                prop_assert!(effects.record.kept());
            } else {
                prop_assert_eq!(&effects.record, &RecordChange::Delete);
            }
            let delta = if reply.stored && status == 201 {
                i64::from(qty)
            } else {
                0
            };
            prop_assert_eq!(effects.bought_delta, delta);
            Ok(())
        },
    );
}

#[test]
fn shields_lower_the_bound_raise_it_only_to_a_reported_remaining_and_decide_in_order() {
    let input = (
        facts(),
        any::<i64>(),
        1u32..=100,
        any::<u32>(),
        any::<i64>(),
        any::<i64>(),
    );
    fuzz(
        "shield.decide",
        input,
        |(facts, bought, qty, sold_out_qty, remaining, now_ms)| {
            let sold = facts.after_sold_out(sold_out_qty);
            if let (Some(before), Some(now)) = (facts.stock_bound, sold.stock_bound) {
                prop_assert!(now <= before);
            }
            let after = sold.after_purchase(remaining, now_ms);
            // A 201's `remaining` above the bound is a return: the bound becomes exactly that,
            // recorded as a raise; otherwise it only lowers.
            match (sold.stock_bound, after.stock_bound) {
                (Some(before), Some(now)) if now > before => {
                    prop_assert_eq!(now, remaining.max(0));
                    prop_assert_eq!(after.raised_ms, Some(now_ms));
                }
                (_, now) => {
                    prop_assert!(now.is_some_and(|n| n <= remaining.max(0)));
                    prop_assert_eq!(after.raised_ms, sold.raised_ms);
                }
            }
            prop_assert_eq!(after.viewed_ms, facts.viewed_ms);
            prop_assert_eq!(after.max_per_user, facts.max_per_user);
            let want = if facts.stock_bound.is_some_and(|b| i64::from(qty) > b) {
                Shield::Answer(ErrorCode::SoldOut)
            } else if facts
                .max_per_user
                .is_some_and(|cap| i128::from(bought) + i128::from(qty) > i128::from(cap))
            {
                Shield::Answer(ErrorCode::PurchaseLimit)
            } else {
                Shield::Pass
            };
            // `bought` saturates at i64::MAX, which is still above any cap.
            prop_assert_eq!(shield::decide(&facts, bought, qty), want);
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// What the edge reads back from the origin

fn origin_body() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        json_value().prop_map(|v| v.to_string().into_bytes()),
        (any::<i64>(), any::<i32>(), prop_oneof![Just("A".to_owned()), "[A-Z]{1,3}"]).prop_map(
            |(stock, cap, sku)| json!({"sku": sku, "name": "n", "price_cents": 1, "stock": stock, "max_per_user": cap})
                .to_string()
                .into_bytes()
        ),
        (MAX_ORIGIN_BODY_LEN - 1..=MAX_ORIGIN_BODY_LEN + 1).prop_map(|n| vec![b'a'; n]),
    ]
    .prop_map(Bytes)
}

const MAX_ORIGIN_BODY_LEN: usize = forward::MAX_ORIGIN_BODY_BYTES;

#[test]
fn origin_answers_are_classified_safely() {
    let input = (
        any::<u16>(),
        origin_body(),
        prop::option::of(prop_oneof![
            any::<String>(),
            any::<u64>().prop_map(|n| n.to_string())
        ]),
        any::<bool>(),
    );
    fuzz(
        "forward.classify",
        input,
        |(status, Bytes(body), retry_after, replayed)| {
            match forward::classify(status, &body, retry_after.as_deref(), replayed) {
                Outcome::Answer {
                    status: s,
                    body: b,
                    replayed: r,
                } => {
                    prop_assert!(matches!(s, 200..=299 | 400..=499) && s != 401);
                    prop_assert_eq!((s, b.as_bytes(), r), (status, &body[..], replayed));
                    prop_assert!(body.len() <= MAX_ORIGIN_BODY_LEN);
                }
                Outcome::Unavailable(reply) => {
                    prop_assert_eq!(reply.status, 503);
                    prop_assert_eq!(reply.code(), Some(ErrorCode::Unavailable));
                    let ra: u64 = reply
                        .header("retry-after")
                        .and_then(|v| v.parse().ok())
                        .ok_or_else(|| fail("no Retry-After"))?;
                    prop_assert!((1..=300).contains(&ra));
                }
            }
            Ok(())
        },
    );
}

#[test]
fn origin_answers_lower_the_bound_and_only_a_201_raises_it() {
    let input = (
        facts(),
        1u32..=100,
        origin_answer(),
        any::<bool>(),
        prop_oneof![NOW_MS - 5..=NOW_MS + 5, any::<i64>()],
        any::<i64>(),
    );
    fuzz(
        "forward.learn",
        input,
        |(facts, qty, (status, body), replayed, sent_ms, arrived_ms)| {
            let answer = forward::Answered {
                qty,
                status,
                body: &body,
                replayed,
                sent_ms,
                arrived_ms,
            };
            if let Some(learned) = forward::learn(facts, &answer) {
                prop_assert!(learned != facts);
                prop_assert!(matches!(status, 201 | 409));
                // Never from a replay, nor from a request sent at or before the last raise.
                prop_assert!(!replayed);
                prop_assert!(facts.raised_ms.is_none_or(|r| sent_ms > r));
                prop_assert_eq!(learned.max_per_user, facts.max_per_user);
                prop_assert_eq!(learned.viewed_ms, facts.viewed_ms);
                match (facts.stock_bound, learned.stock_bound) {
                    // A raise: only a 201 (units came back), recorded at its arrival.
                    (Some(before), Some(after)) if after > before => {
                        prop_assert_eq!(status, 201);
                        prop_assert_eq!(learned.raised_ms, Some(arrived_ms));
                    }
                    _ => prop_assert_eq!(learned.raised_ms, facts.raised_ms),
                }
            }
            Ok(())
        },
    );
}

/// A fresh view folds in as the model says: a rise is always taken (and recorded), anything
/// else only from a view requested after the last raise.
#[test]
fn fresh_views_raise_or_lower_the_bound_as_the_model_says() {
    let input = (
        facts(),
        any::<i64>(),
        any::<i32>(),
        prop_oneof![NOW_MS - 5..=NOW_MS + 5, any::<i64>()],
        any::<i64>(),
    );
    fuzz(
        "shield.with_fresh_view",
        input,
        |(facts, stock, cap, sent_ms, now_ms)| {
            let view = SkuView {
                sku: "A".into(),
                name: "A".into(),
                price_cents: 1,
                stock,
                held: 0,
                max_per_user: cap,
                starts_at: None,
                ends_at: None,
                paused: false,
                waiting_room: None,
                proof_of_work: None,
                network_limits: None,
            };
            let got = facts.with_fresh_view(&view, sent_ms, now_ms);
            // Every view folded in tells whether there is a waiting room and which bot defences
            // the sale has (here: none).
            prop_assert!(got.room.is_some());
            prop_assert!(got.defences.is_some());
            let stock = stock.max(0);
            let current = facts.raised_ms.is_none_or(|r| sent_ms > r);
            let rises = facts.stock_bound.is_none_or(|b| stock > b);
            if rises {
                prop_assert_eq!(got.stock_bound, Some(stock));
                prop_assert_eq!(got.raised_ms, Some(now_ms));
                prop_assert_eq!(got.viewed_ms, Some(now_ms));
            } else if current {
                prop_assert_eq!(got.stock_bound, Some(stock));
                prop_assert_eq!(got.max_per_user, Some(i64::from(cap)));
                prop_assert_eq!(got.raised_ms, facts.raised_ms);
                prop_assert_eq!(got.viewed_ms, Some(now_ms));
            } else {
                let room = facts.room.or(got.room);
                let defences = facts.defences.or(got.defences);
                prop_assert_eq!(
                    got,
                    shield::SkuFacts {
                        room,
                        defences,
                        ..facts
                    }
                );
            }
            Ok(())
        },
    );
}

/// A refusing bound answers only while an origin view confirmed it less than the TTL ago; a
/// claimed refresh keeps the bound and stamps the instant.
#[test]
fn a_refusing_bound_expires_after_the_view_ttl() {
    let input = (facts(), 1u32..=100, any::<i64>(), 1i64..=3_600_000);
    fuzz(
        "shield.needs_refresh",
        input,
        |(facts, qty, now_ms, ttl_ms)| {
            let refuses = shield::decide(&facts, 0, qty) == Shield::Answer(ErrorCode::SoldOut);
            let fresh = facts
                .viewed_ms
                .is_some_and(|v| now_ms.saturating_sub(v) < ttl_ms);
            prop_assert_eq!(facts.needs_refresh(qty, now_ms, ttl_ms), refuses && !fresh);
            let claimed = facts.refresh_claimed(now_ms);
            prop_assert_eq!(claimed.stock_bound, facts.stock_bound);
            prop_assert!(!claimed.needs_refresh(qty, now_ms, ttl_ms));
            Ok(())
        },
    );
}

#[test]
fn origin_views_are_parsed_safely() {
    let input = ("[A-Z]{1,3}", any::<u16>(), origin_body());
    fuzz(
        "cache_policy.classify_view",
        input,
        |(sku, status, Bytes(body))| {
            let sku = Sku::parse(&sku).map_err(fail)?;
            match cache_policy::classify_view(&sku, status, &body) {
                OriginView::Found(view) => {
                    prop_assert_eq!(status, 200);
                    prop_assert_eq!(view.sku.as_str(), sku.as_str());
                    // What the shield learns from it is a bound of at least 0.
                    let learned = SkuFacts::from_warmup(&view, NOW_MS);
                    prop_assert!(learned.stock_bound.is_some_and(|b| b >= 0));
                    let fresh = SkuFacts::default().with_fresh_view(&view, NOW_MS - 1, NOW_MS);
                    prop_assert_eq!(fresh, learned);
                }
                OriginView::Missing => prop_assert_eq!(status, 404),
                OriginView::Unavailable => {}
            }
            Ok(())
        },
    );
}

#[test]
fn problem_codes_are_read_safely() {
    let input = (origin_body(), any::<String>(), any::<u64>());
    fuzz(
        "reply.problem_code",
        input,
        |(Bytes(body), detail, secs)| {
            let _ = reply::problem_code(&body);
            let r = Reply::unavailable(detail.clone(), secs);
            prop_assert_eq!(r.code(), Some(ErrorCode::Unavailable));
            let want = secs.max(1).to_string();
            prop_assert_eq!(r.header("retry-after"), Some(want.as_str()));
            let p = Reply::problem(ErrorCode::SoldOut, detail);
            prop_assert_eq!(p.code(), Some(ErrorCode::SoldOut));
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// Routes, URLs, queries, warmup

#[test]
fn routes_match_any_method_and_path() {
    let input = (
        prop_oneof![
            Just("GET"),
            Just("HEAD"),
            Just("POST"),
            Just("PUT"),
            Just("DELETE"),
            Just("")
        ]
        .prop_map(str::to_owned),
        prop_oneof![
            Just("/v1/purchases".to_owned()),
            Just("/healthz".to_owned()),
            Just("/warmup".to_owned()),
            "/v1/skus/[A-Za-z0-9/._%-]{0,10}",
            any::<String>(),
        ],
    );
    fuzz("routes.route", input, |(method, path)| {
        let r = routes::route(&method, &path);
        if let Route::SkuView(sku) = &r {
            prop_assert_eq!(format!("/v1/skus/{sku}"), path.clone());
            prop_assert!(!sku.is_empty() && !sku.contains('/'));
        }
        if let Some(reply) = routes::static_reply(&r) {
            prop_assert!(matches!(reply.status, 200 | 404 | 405));
        }
        Ok(())
    });
}

fn form_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b' ' => out.push('+'),
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(char::from(b));
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[test]
fn query_strings_round_trip() {
    let input = (
        prop::collection::vec((any::<String>(), any::<String>()), 0..5),
        "[a-z]{1,5}://[a-z0-9.:]{0,12}(/[a-z]{0,5})?",
        "[ -~]{0,12}",
    );
    fuzz("url_parts.form_pairs", input, |(pairs, base, fragment)| {
        let q = pairs
            .iter()
            .map(|(k, v)| format!("{}={}", form_encode(k), form_encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let url = format!("{base}?{q}#{fragment}");
        prop_assert_eq!(url_parts::query(&url), q.as_str());
        prop_assert_eq!(url_parts::form_pairs(url_parts::query(&url)), pairs.clone());
        prop_assert!(url.starts_with(url_parts::origin(&url)));
        Ok(())
    });
}

#[test]
fn url_parts_never_panic() {
    let input = prop_oneof![
        any::<String>(),
        "[a-z]{0,5}(://)?[a-zé0-9.:/?#&=%+]{0,30}",
        "[%0-9a-fA-Fé+&=]{0,20}",
    ];
    fuzz("url_parts.any", input, |url| {
        let o = url_parts::origin(&url);
        prop_assert!(url.starts_with(o));
        let q = url_parts::query(&url);
        prop_assert!(url.contains(q));
        for (name, _) in url_parts::form_pairs(q) {
            // `+` is a space; a decoded `+` can only come from `%2B`.
            prop_assert!(!name.contains('+') || q.to_ascii_uppercase().contains("%2B"));
        }
        let _ = url_parts::form_pairs(&url);
        Ok(())
    });
}

#[test]
fn warmup_query_and_admin_token() {
    let pair = prop_oneof![
        4 => "[A-Za-z0-9._-]{1,8}".prop_map(|v| ("sku".to_owned(), v)),
        1 => any::<String>().prop_map(|v| ("sku".to_owned(), v)),
        1 => (any::<String>(), any::<String>()),
    ];
    let input = (
        prop::collection::vec(pair, 0..60),
        "[!-~]{1,64}",
        prop::option::of(any::<String>()),
    );
    fuzz("warmup.skus_and_token", input, |(pairs, token, header)| {
        match warmup::skus(&pairs) {
            Ok(skus) => {
                prop_assert!((1..=warmup::MAX_SKUS).contains(&skus.len()));
                for (i, s) in skus.iter().enumerate() {
                    prop_assert!(!skus[..i].contains(s));
                    prop_assert!(pairs.iter().any(|(k, v)| k == "sku" && v == s.as_str()));
                }
            }
            Err(r) => prop_assert_eq!(r.code(), Some(ErrorCode::InvalidRequest)),
        }
        // The single-form ADMIN_TOKEN is taken verbatim (commas included).
        let tokens =
            BearerTokens::from_config(None, Some(&token), 1).map_err(|e| fail(e.to_string()))?;
        let right = format!("Bearer {token}");
        prop_assert!(warmup::authorized(Some(&right), &tokens));
        let wrong = format!("Bearer {token}x");
        prop_assert!(!warmup::authorized(Some(&wrong), &tokens));
        prop_assert!(!warmup::authorized(Some(&token), &tokens));
        if let Some(h) = header {
            let expected_token = jwt::bearer_token(Some(&h)).ok();
            prop_assert_eq!(
                warmup::authorized(Some(&h), &tokens),
                expected_token == Some(token.as_str())
            );
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// Settings and the worker <-> Durable Object messages

#[test]
fn settings_from_any_environment() {
    let names = [
        "ORIGIN_URL",
        "RATE_LIMIT_QUOTA",
        "RATE_LIMIT_WINDOW_SECS",
        "IDEMPOTENCY_IN_FLIGHT_TIMEOUT_SECS",
        "IDEMPOTENCY_RETENTION_SECS",
        "ORIGIN_TIMEOUT_MS",
        "SKU_CACHE_TTL_SECS",
        "SKU_FACTS_TTL_SECS",
        "SKU_MISSING_TTL_SECS",
        "SESSION_MAX_LIFETIME_SECS",
        "SESSION_ISSUER",
        "SESSION_AUDIENCE",
        "SESSION_SECRET",
        "SESSION_SECRETS",
        "EDGE_SHARED_SECRET",
        "EDGE_SHARED_SECRETS",
        "ADMIN_TOKENS",
        "ADMIN_TOKEN",
    ];
    let value = prop::option::weighted(
        0.8,
        prop_oneof![
            any::<u32>().prop_map(|n| n.to_string()),
            (0u32..=100_000).prop_map(|n| format!(" {n}")),
            "https?://[a-z0-9.:]{0,12}/{0,2}",
            any::<String>(),
        ],
    );
    let input = prop::collection::vec(value, names.len());
    fuzz("config.from_lookup", input, |values| {
        let get = |name: &str| {
            names
                .iter()
                .position(|n| *n == name)
                .and_then(|i| values[i].clone())
        };
        if let Ok(s) = Settings::from_lookup(get) {
            prop_assert!(
                s.origin_url.starts_with("http://") || s.origin_url.starts_with("https://")
            );
            prop_assert!(!s.origin_url.ends_with('/'));
            prop_assert!(s.retention_secs >= 86_400);
            prop_assert!(s.in_flight_timeout_ms() > i64::from(s.origin_timeout_ms));
            prop_assert!((1..=300).contains(&s.sku_missing_ttl_secs));
            prop_assert!((60..=30 * 86_400).contains(&s.session_rules.max_lifetime_secs));
            // The claims to match: the trimmed setting, unset when blank.
            for (name, got) in [
                ("SESSION_ISSUER", &s.session_rules.issuer),
                ("SESSION_AUDIENCE", &s.session_rules.audience),
            ] {
                let want = get(name)
                    .map(|v| v.trim().to_owned())
                    .filter(|v| !v.is_empty());
                prop_assert_eq!(got, &want, "{}", name);
                if let Some(v) = got {
                    prop_assert!(v.len() <= 256 && !v.chars().any(char::is_control));
                }
            }
            prop_assert!(!s.session_secrets.current().1.is_empty());
            prop_assert!(!s.edge_shared_secrets.current().1.is_empty());
            // Exactly one form of each secret was set, and no secret prints.
            for (list, single) in [
                ("SESSION_SECRETS", "SESSION_SECRET"),
                ("EDGE_SHARED_SECRETS", "EDGE_SHARED_SECRET"),
                ("ADMIN_TOKENS", "ADMIN_TOKEN"),
            ] {
                let set = |n: &str| get(n).is_some_and(|v| !v.is_empty());
                prop_assert!(set(list) != set(single), "{} / {}", list, single);
            }
            prop_assert_eq!(
                format!("{:?}", s.admin_tokens),
                format!("BearerTokens({} accepted, ***)", s.admin_tokens.len())
            );
        }
        Ok(())
    });
}

/// The three rotatable secrets: each is set in exactly one of its two forms, the list form
/// parses as `shared::secrets` says, and the first pair at fault is the one reported.
#[test]
fn secret_settings_take_exactly_one_form() {
    let ring_like = prop_oneof![
        // Secrets on both sides of MIN_SECRET_LEN (16).
        "[a-z0-9]{1,4}:[!-+--~]{10,22}(,[a-z0-9]{1,4}:[!-+--~]{10,22}){0,2}",
        "[a-z0-9:, ]{0,12}",
        any::<String>(),
    ];
    let value = prop::option::weighted(0.5, prop_oneof![ring_like, "[!-~]{1,22}"]);
    let input = prop::collection::vec(value, 6);
    fuzz("config.secret_forms", input, |values| {
        let pairs = [
            ("SESSION_SECRETS", "SESSION_SECRET"),
            ("EDGE_SHARED_SECRETS", "EDGE_SHARED_SECRET"),
            ("ADMIN_TOKENS", "ADMIN_TOKEN"),
        ];
        let get = |name: &str| -> Option<String> {
            if name == "ORIGIN_URL" {
                return Some("http://127.0.0.1:8080".to_owned());
            }
            pairs
                .iter()
                .flat_map(|(l, s)| [*l, *s])
                .position(|n| n == name)
                .and_then(|i| values[i].clone())
        };
        let got = Settings::from_lookup(get);
        // The model: the first pair whose configuration is refused names the error.
        let refused = pairs.iter().find(|(list, single)| {
            let (l, s) = (get(list), get(single));
            if *list == "ADMIN_TOKENS" {
                BearerTokens::from_config(l.as_deref(), s.as_deref(), MIN_SECRET_LEN).is_err()
            } else {
                SecretRing::from_config(l.as_deref(), s.as_deref(), MIN_SECRET_LEN).is_err()
            }
        });
        prop_assert_eq!(
            got.as_ref().err().map(|e| e.name),
            refused.map(|(list, _)| *list)
        );
        if let Ok(s) = got {
            for (list, single) in pairs {
                let set = |n: &str| get(n).is_some_and(|v| !v.is_empty());
                prop_assert!(set(list) != set(single), "{} / {}", list, single);
            }
            // The edge signs with the first key of the list form, or `default`.
            let want = match get("EDGE_SHARED_SECRETS").filter(|v| !v.is_empty()) {
                Some(l) => SecretRing::parse(&l, MIN_SECRET_LEN)
                    .map(|r| r.current().0.clone())
                    .map_err(|e| fail(e.to_string()))?,
                None => KeyId::default_id(),
            };
            prop_assert_eq!(s.edge_shared_secrets.current().0, &want);
        }
        Ok(())
    });
}

#[test]
fn durable_object_messages_parse_safely_and_round_trip() {
    let begin = (
        any::<String>(),
        "[0-9a-f]{64}",
        "[A-Za-z0-9._-]{1,64}",
        any::<u32>(),
        facts(),
        (any::<String>(), any::<u32>(), any::<u32>()),
        any::<i64>(),
    )
        .prop_map(
            |(key, fingerprint, sku, qty, facts, (name, quota, window_secs), t)| BeginRequest {
                key,
                fingerprint,
                sku,
                qty,
                facts,
                rate: RateSettings {
                    name,
                    quota,
                    window_secs,
                },
                in_flight_timeout_ms: t,
                count_ttl_ms: 5_000,
                schedule_margin_ms: 2_000,
                proof: None,
                new_work_refused: false,
            },
        );
    let input = (
        begin,
        origin_body(),
        any::<i64>(),
        any::<u16>(),
        any::<String>(),
    );
    fuzz(
        "protocol.messages",
        input,
        |(b, Bytes(junk), attempt, status, body)| {
            let text = serde_json::to_string(&b).map_err(fail)?;
            prop_assert_eq!(
                serde_json::from_str::<BeginRequest>(&text).ok(),
                Some(b.clone())
            );
            let f = FinishRequest {
                key: b.key.clone(),
                attempt,
                sku: b.sku.clone(),
                qty: b.qty,
                status,
                body,
                proof: (attempt % 2 == 0).then(|| "c0ffee".to_owned()),
            };
            let text = serde_json::to_string(&f).map_err(fail)?;
            prop_assert_eq!(serde_json::from_str::<FinishRequest>(&text).ok(), Some(f));
            let _ = serde_json::from_slice::<BeginRequest>(&junk);
            let _ = serde_json::from_slice::<FinishRequest>(&junk);
            let _ = serde_json::from_slice::<BeginReply>(&junk);
            let _ = serde_json::from_slice::<FinishReply>(&junk);
            let _ = serde_json::from_slice::<SkuView>(&junk);
            let _ = serde_json::from_slice::<SkuFacts>(&junk);
            Ok(())
        },
    );
}
