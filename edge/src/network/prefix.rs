//! Which network a shopper's request comes from: the IPv4 /24 or IPv6 /48 of the address that
//! Cloudflare saw, `CF-Connecting-IP`. An IPv6 address that embeds an IPv4 one — IPv4-mapped
//! (`::ffff:a.b.c.d`), 6to4 (`2002:AABB:CCDD::/16`: the site's IPv4 `AA.BB.CC.DD`), Teredo
//! (`2001:0::/32`: the client's public IPv4, inverted, in the last 32 bits) or the NAT64
//! well-known prefix (`64:ff9b::/96`) — is that IPv4 address's /24: otherwise one /24 with a
//! 6to4 relay would be 257 networks (itself and one /48 per IPv4 address it holds). Cloudflare sets that header itself and overwrites whatever
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
    /// The network of `CF-Connecting-IP`. An IPv6 address that embeds an IPv4 address (mapped,
    /// 6to4, Teredo, NAT64) counts as that IPv4 address ([`embedded_v4`]). A missing or unparsable header (never the case behind Cloudflare) is one network
    /// of its own, [`Network::unknown`], so such requests are bounded together rather than not
    /// at all.
    pub fn of(connecting_ip: Option<&str>) -> Self {
        match connecting_ip
            .map(str::trim)
            .and_then(|ip| ip.parse::<IpAddr>().ok())
        {
            Some(IpAddr::V4(v4)) => Self::v4(v4),
            Some(IpAddr::V6(v6)) => match embedded_v4(v6) {
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

/// The IPv4 address an IPv6 address stands for, if it embeds one: IPv4-mapped `::ffff:0:0/96`,
/// 6to4 `2002::/16` (RFC 3056: bits 16..48), Teredo `2001:0::/32` (RFC 4380: the client's public
/// address, bit-inverted, in the last 32 bits) and NAT64's well-known `64:ff9b::/96` (RFC 6052).
pub fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = ip.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        [0x2002, hi, lo, ..] => Some(v4(hi, lo)),
        [0x2001, 0, .., hi, lo] => Some(v4(!hi, !lo)),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(v4(hi, lo)),
        _ => None,
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

    /// Issue 35: 6to4 addresses embed an IPv4 address; they were one /48 each, so one /24 behind a
    /// 6to4 relay was 257 networks.
    #[test]
    fn addresses_that_embed_an_ipv4_address_fold_into_its_slash_24() {
        for (ip, network) in [
            // 6to4 of 203.0.113.7 (cb00:7107), any subnet and host of it.
            ("2002:cb00:7107::1", "203.0.113.0/24"),
            ("2002:cb00:7107:ffff:1:2:3:4", "203.0.113.0/24"),
            // …and of 203.0.113.250: the same /24, not another network.
            ("2002:cb00:71fa:1::9", "203.0.113.0/24"),
            ("2002:c633:6401::", "198.51.100.0/24"),
            // Teredo: server 65.54.227.120, client 192.0.2.45 inverted (3fff:fdd2).
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "192.0.2.0/24"),
            // NAT64's well-known prefix.
            ("64:ff9b::203.0.113.9", "203.0.113.0/24"),
        ] {
            assert_eq!(Network::of(Some(ip)).as_str(), network, "{ip}");
        }
        // Every 6to4 address of one /24 is one network.
        let all: std::collections::HashSet<Network> = (0..=255u16)
            .map(|host| Network::of(Some(&format!("2002:cb00:71{host:02x}:{host:x}::1"))))
            .collect();
        assert_eq!(all.len(), 1);
        // Neighbours of those prefixes are plain IPv6.
        for (ip, network) in [
            ("2003:cb00:7107::1", "2003:cb00:7107::/48"),
            ("2001:1:4136::1", "2001:1:4136::/48"),
            ("64:ff9b:1::1", "64:ff9b:1::/48"),
        ] {
            assert_eq!(Network::of(Some(ip)).as_str(), network, "{ip}");
        }
    }
}
