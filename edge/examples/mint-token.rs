//! Mints a shopper session token (HS256 JWT) for local testing of the edge.
//!
//! ```text
//! cargo run -q -p edge --example mint-token -- --sub alice [--secret S] [--kid K] [--ttl 3600] \
//!     [--iss ISSUER] [--aud AUDIENCE]
//! ```
//!
//! The secret defaults to `$SESSION_SECRET`, then to the `.dev.vars.example` value. With `--kid`
//! the token's header names the session key (`SESSION_SECRETS="K:S,…"` on the edge); without it
//! the edge tries every configured session key. `--iss` / `--aud` set those claims, for an edge
//! with `SESSION_ISSUER` / `SESSION_AUDIENCE`; the edge refuses a `--ttl` above its
//! `SESSION_MAX_LIFETIME_SECS` (one day by default). Prints the token on stdout, e.g. for
//! `curl -H "Authorization: Bearer $(…)"`.

use std::process::ExitCode;

use edge::jwt::{sign_hs256, sign_hs256_kid};
use shared::{KeyId, UserId};

const DEV_SECRET: &str = "dev-session-secret-change-me";

fn usage() -> ExitCode {
    eprintln!(
        "usage: mint-token --sub <user id> [--secret <session secret>] [--kid <its key id>] [--ttl <seconds, default 3600>] [--iss <issuer>] [--aud <audience>]"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut sub = None;
    let mut secret = std::env::var("SESSION_SECRET")
        .ok()
        .filter(|s| !s.is_empty());
    let mut ttl: i64 = 3600;
    let mut kid = None;
    let mut iss = None;
    let mut aud = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let Some(value) = args.next() else {
            return usage();
        };
        match flag.as_str() {
            "--sub" => sub = Some(value),
            "--secret" => secret = Some(value),
            "--kid" => match KeyId::parse(&value) {
                Some(k) => kid = Some(k),
                None => {
                    eprintln!("--kid: 1..=32 characters of [A-Za-z0-9._-]");
                    return ExitCode::from(2);
                }
            },
            "--iss" => iss = Some(value),
            "--aud" => aud = Some(value),
            "--ttl" => match value.parse() {
                Ok(v) => ttl = v,
                Err(_) => return usage(),
            },
            _ => return usage(),
        }
    }
    let Some(sub) = sub else { return usage() };
    if let Err(e) = UserId::parse(&sub) {
        eprintln!("--sub: {e}");
        return ExitCode::from(2);
    }
    let now = shared::Timestamp::now().unix_secs();
    let mut claims = serde_json::json!({ "sub": sub, "iat": now, "exp": now.saturating_add(ttl) });
    for (name, value) in [("iss", iss), ("aud", aud)] {
        if let (Some(value), Some(claims)) = (value, claims.as_object_mut()) {
            claims.insert(name.to_owned(), serde_json::Value::String(value));
        }
    }
    let secret = secret.unwrap_or_else(|| DEV_SECRET.to_owned());
    let token = match kid {
        Some(kid) => sign_hs256_kid(&claims, &kid, secret.as_bytes()),
        None => sign_hs256(&claims, secret.as_bytes()),
    };
    println!("{token}");
    ExitCode::SUCCESS
}
