//! `Flashgate-Request-Id`: the id that follows one request from the shopper through the edge to
//! the origin's logs. The edge keeps a caller's id when it is well formed (so a shop's own
//! tracing carries through), otherwise uses Cloudflare's `cf-ray` or a fresh random id; it sends
//! the id to the origin with the forwarded request and echoes it on every answer.

use std::fmt;

/// Longest id kept from a caller.
pub const MAX_LEN: usize = 128;

/// A request id: 1..=128 of `[A-Za-z0-9._:-]` — safe in a header, a log field and a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(String);

impl RequestId {
    /// A caller-supplied id, if well formed.
    pub fn parse(raw: &str) -> Option<Self> {
        let ok = !raw.is_empty()
            && raw.len() <= MAX_LEN
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
        ok.then(|| Self(raw.to_owned()))
    }

    /// The id of a request: the caller's `Flashgate-Request-Id` if well formed, else one made
    /// from Cloudflare's `cf-ray`, else `random` (hex of two 64-bit draws).
    pub fn choose(
        header: Option<&str>,
        cf_ray: Option<&str>,
        random: impl FnOnce() -> [u64; 2],
    ) -> Self {
        if let Some(id) = header.and_then(Self::parse) {
            return id;
        }
        if let Some(id) = cf_ray.and_then(|ray| Self::parse(&format!("cf-{ray}"))) {
            return id;
        }
        let [a, b] = random();
        Self(format!("edge-{a:016x}{b:016x}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_well_formed_caller_id_is_kept() {
        let id = RequestId::choose(Some("shop-trace:42.a_b"), Some("8c1f"), || [1, 2]);
        assert_eq!(id.as_str(), "shop-trace:42.a_b");
    }

    #[test]
    fn a_malformed_or_missing_id_is_replaced() {
        for bad in ["", "has space", "new\nline", "ü", &"x".repeat(MAX_LEN + 1)] {
            let id = RequestId::choose(Some(bad), Some("8c1f2b3a4d-AMS"), || [1, 2]);
            assert_eq!(id.as_str(), "cf-8c1f2b3a4d-AMS", "{bad:?}");
        }
        let id = RequestId::choose(None, None, || [0xabc, 0xdef]);
        assert_eq!(id.as_str(), "edge-0000000000000abc0000000000000def");
        assert!(RequestId::parse(id.as_str()).is_some());
        assert!(RequestId::parse(&"x".repeat(MAX_LEN)).is_some());
    }
}
