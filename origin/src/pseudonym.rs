//! Pseudonyms for logs: shoppers' ids and idempotency keys never appear in plain text in a log
//! line or a metric label. Logs carry a keyed hash instead — HMAC-SHA256 under `LOG_HASH_KEY`,
//! cut to 64 bits and printed as `u:<16 hex>` (user) or `k:<16 hex>` (key) — so one shopper's
//! requests can be followed through an incident, and an operator holding the key can compute the
//! pseudonym of a given user to search for, but a log reader cannot reverse it or guess it from
//! a list of likely ids without the key.

use std::fmt;
use std::sync::Arc;

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Makes pseudonyms under one key. Cheap to clone; `Debug` never shows the key.
#[derive(Clone)]
pub struct Pseudonyms {
    mac: Arc<HmacSha256>,
}

impl fmt::Debug for Pseudonyms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Pseudonyms(***)")
    }
}

impl Pseudonyms {
    /// Pseudonyms under `key` (any length; `LOG_HASH_KEY`).
    pub fn new(key: &[u8]) -> Self {
        // HMAC takes keys of any length.
        let mac = HmacSha256::new_from_slice(key).unwrap_or_else(|_| unreachable!());
        Self { mac: Arc::new(mac) }
    }

    /// Pseudonyms under a random key: safe, but they differ between processes and restarts.
    pub fn random() -> Self {
        Self::new(&rand::random::<[u8; 32]>())
    }

    /// The pseudonym of a shopper: `u:<16 hex>`.
    pub fn user(&self, user: &str) -> Pseudonym {
        self.make('u', &[user.as_bytes()])
    }

    /// The pseudonym of a shopper's idempotency key: `k:<16 hex>`. Keys are scoped per user, so
    /// the pseudonym is too.
    pub fn key(&self, user: &str, key: &str) -> Pseudonym {
        self.make('k', &[user.as_bytes(), key.as_bytes()])
    }

    fn make(&self, kind: char, parts: &[&[u8]]) -> Pseudonym {
        let mut mac = (*self.mac).clone();
        mac.update(&[kind as u8]);
        for part in parts {
            // Length-prefixed, so ("ab", "c") and ("a", "bc") differ.
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        let digest = mac.finalize().into_bytes();
        let mut short = [0u8; 8];
        short.copy_from_slice(&digest[..8]);
        Pseudonym { kind, hash: short }
    }
}

/// A keyed hash standing for a user id or a key in logs.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pseudonym {
    kind: char,
    hash: [u8; 8],
}

impl fmt::Display for Pseudonym {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind, hex::encode(self.hash))
    }
}

impl fmt::Debug for Pseudonym {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pseudonyms_are_stable_per_key_and_hide_the_value() {
        let a = Pseudonyms::new(b"k1");
        let p = a.user("alice").to_string();
        assert_eq!(p, a.user("alice").to_string());
        assert!(p.starts_with("u:") && p.len() == 18, "{p}");
        assert!(!p.contains("alice"));
        assert_ne!(p, a.user("bob").to_string());
        assert_ne!(p, Pseudonyms::new(b"k2").user("alice").to_string());
    }

    #[test]
    fn keys_are_scoped_per_user_and_unambiguous() {
        let a = Pseudonyms::new(b"k");
        assert_ne!(a.key("alice", "k1"), a.key("bob", "k1"));
        assert_ne!(a.key("a.b", "c"), a.key("a", "b.c"));
        assert!(a.key("a", "x").to_string().starts_with("k:"));
    }
}
