//! Mints a shopper session token (HS256 JWT) for local testing of the edge.
//!
//! ```text
//! cargo run -q -p edge --example mint-token -- --sub alice [--secret S] [--ttl 3600]
//! ```
//!
//! The secret defaults to `$SESSION_SECRET`, then to the `.dev.vars.example` value. Prints the
//! token on stdout, e.g. for `curl -H "Authorization: Bearer $(…)"`.

use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use edge::jwt::sign_hs256;
use shared::UserId;

const DEV_SECRET: &str = "dev-session-secret-change-me";

fn usage() -> ExitCode {
    eprintln!(
        "usage: mint-token --sub <user id> [--secret <SESSION_SECRET>] [--ttl <seconds, default 3600>]"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut sub = None;
    let mut secret = std::env::var("SESSION_SECRET")
        .ok()
        .filter(|s| !s.is_empty());
    let mut ttl: i64 = 3600;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let Some(value) = args.next() else {
            return usage();
        };
        match flag.as_str() {
            "--sub" => sub = Some(value),
            "--secret" => secret = Some(value),
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
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let now = i64::try_from(now).unwrap_or(i64::MAX);
    let claims = serde_json::json!({ "sub": sub, "iat": now, "exp": now.saturating_add(ttl) });
    let secret = secret.unwrap_or_else(|| DEV_SECRET.to_owned());
    println!("{}", sign_hs256(&claims, secret.as_bytes()));
    ExitCode::SUCCESS
}
