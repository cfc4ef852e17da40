//! Which network a shopper's request comes from: the IPv4 /24 or IPv6 /48 of the address that
//! Cloudflare saw, `CF-Connecting-IP`. Cloudflare sets that header itself and overwrites whatever
//! the client sent; `X-Forwarded-For`, `X-Real-IP`, `True-Client-IP` and the like are set by
//! clients and never read.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The only header a network is read from.
pub const CONNECTING_IP_HEADER: &str = "cf-connecting-ip";

/// A network: an IPv4 /24 or an IPv6 /48, written `a.b.c.0/24` or `x:y:z::/48`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Network(String);

impl Network {
    /// The network of `CF-Connecting-IP`. An IPv4-mapped IPv6 address counts as its IPv4
    /// address. A missing or unparsable header (never the case behind Cloudflare) is one network
    /// of its own, [`Network::unknown`], so such requests are bounded together rather than not
    /// at all.
    pub fn of(connecting_ip: Option<&str>) -> Self {
        match connecting_ip
            .map(str::trim)
            .and_then(|ip| ip.parse::<IpAddr>().ok())
        {
            Some(IpAddr::V4(v4)) => Self::v4(v4),
            Some(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                Some(v4) => Self::v4(v4),
                None => Self::v6(v6),
            },
            None => Self::unknown(),
        }
    }

    fn v4(ip: Ipv4Addr) -> Self {
        let [a, b, c, _] = ip.octets();
        Self(format!("{a}.{b}.{c}.0/24"))
    }

    fn v6(ip: Ipv6Addr) -> Self {
        // The first three groups, in hex, without `Ipv6Addr`'s display (a smaller Worker).
        let [a, b, c, ..] = ip.segments();
        Self(format!("{a:x}:{b:x}:{c:x}::/48"))
    }

    /// Requests without a readable `CF-Connecting-IP`.
    pub fn unknown() -> Self {
        Self("unknown".to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_fold_into_their_slash_24_or_slash_48() {
        for (ip, network) in [
            ("203.0.113.7", "203.0.113.0/24"),
            (" 203.0.113.250 ", "203.0.113.0/24"),
            ("127.1.2.3", "127.1.2.0/24"),
            ("::ffff:198.51.100.9", "198.51.100.0/24"),
            ("2001:db8:abcd:12::1", "2001:db8:abcd::/48"),
            ("2001:db8:abcd:ffff:ffff::9", "2001:db8:abcd::/48"),
            ("2001:db8::1", "2001:db8:0::/48"),
            ("::1", "0:0:0::/48"),
        ] {
            assert_eq!(Network::of(Some(ip)).as_str(), network, "{ip}");
        }
        for junk in [
            None,
            Some(""),
            Some("203.0.113"),
            Some("1.2.3.4, 5.6.7.8"),
            Some("x"),
        ] {
            assert_eq!(Network::of(junk), Network::unknown(), "{junk:?}");
        }
        assert_ne!(
            Network::of(Some("203.0.113.7")),
            Network::of(Some("203.0.114.7"))
        );
    }
}
