//! Who sends from where: every honest shopper from a loopback address of its own in a /24 of its
//! own, the farm's accounts spread over a few /24s. On loopback any 127.A.B.C can be bound as a
//! client socket's address, and workerd sets `CF-Connecting-IP` from the socket's peer address as
//! Cloudflare does, so the edge sees each client in the network `127.A.B` (its IPv4 /24).
//!
//! - honest shopper `i`: `127.(100 + i / 250).(i % 250).1` — up to 155 × 250 shoppers, one /24
//!   each;
//! - farm account `j` of a farm of `n` networks: `127.66.(j % n).(2 + j / n)` — round-robin over
//!   the networks `127.66.0` … `127.66.(n − 1)`, up to 253 accounts per network.
//!
//! Neither range meets `127.0.0.0/24`, where the bench's own admin calls come from.

use std::net::Ipv4Addr;

/// Honest shoppers per second octet.
const HONEST_PER_OCTET: usize = 250;
/// First second octet of the honest shoppers' networks.
const HONEST_FIRST: usize = 100;
/// Second octet of the farm's networks.
const FARM_OCTET: u8 = 66;
/// Host parts of a farm network: `.2` … `.254`.
const FARM_HOSTS: usize = 253;

/// The most honest shoppers [`honest`] can place.
pub(super) const MAX_HONEST: usize = (256 - HONEST_FIRST) * HONEST_PER_OCTET;

/// The address of honest shopper `i` (`i < MAX_HONEST`).
pub(super) fn honest(i: usize) -> anyhow::Result<Ipv4Addr> {
    anyhow::ensure!(
        i < MAX_HONEST,
        "at most {MAX_HONEST} honest shoppers have a /24 of their own"
    );
    let b = u8::try_from(HONEST_FIRST + i / HONEST_PER_OCTET)?;
    let c = u8::try_from(i % HONEST_PER_OCTET)?;
    Ok(Ipv4Addr::new(127, b, c, 1))
}

/// The address of farm account `j` of a farm behind `networks` /24s.
pub(super) fn farm(j: usize, networks: usize) -> anyhow::Result<Ipv4Addr> {
    anyhow::ensure!(
        (1..=256).contains(&networks),
        "the farm needs 1..=256 networks"
    );
    anyhow::ensure!(
        j / networks < FARM_HOSTS,
        "at most {FARM_HOSTS} farm accounts per network"
    );
    let c = u8::try_from(j % networks)?;
    let d = u8::try_from(2 + j / networks)?;
    Ok(Ipv4Addr::new(127, FARM_OCTET, c, d))
}

/// The farm network (0-based) of farm account `j`.
pub(super) fn farm_network(j: usize, networks: usize) -> usize {
    j % networks.max(1)
}

/// The /24 of `addr`, as the edge counts it (`127.A.B`).
#[cfg(test)]
fn network(addr: Ipv4Addr) -> [u8; 3] {
    let [a, b, c, _] = addr.octets();
    [a, b, c]
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn a_thousand_honest_shoppers_have_a_thousand_distinct_networks() {
        let addrs: Vec<Ipv4Addr> = (0..1000).map(|i| honest(i).expect("address")).collect();
        let nets: HashSet<[u8; 3]> = addrs.iter().map(|a| network(*a)).collect();
        assert_eq!(nets.len(), 1000);
        assert!(addrs.iter().all(Ipv4Addr::is_loopback));
        assert_eq!(addrs[0], Ipv4Addr::new(127, 100, 0, 1));
        assert_eq!(addrs[999], Ipv4Addr::new(127, 103, 249, 1));
        assert!(honest(MAX_HONEST - 1).is_ok());
        assert!(honest(MAX_HONEST).is_err());
    }

    #[test]
    fn a_thousand_farm_accounts_sit_in_exactly_eight_networks_apart_from_the_honest_ones() {
        let addrs: Vec<Ipv4Addr> = (0..1000).map(|j| farm(j, 8).expect("address")).collect();
        assert_eq!(addrs.iter().collect::<HashSet<_>>().len(), 1000, "distinct");
        let nets: HashSet<[u8; 3]> = addrs.iter().map(|a| network(*a)).collect();
        assert_eq!(nets.len(), 8);
        for (j, addr) in addrs.iter().enumerate() {
            assert_eq!(
                network(*addr),
                [127, 66, u8::try_from(farm_network(j, 8)).expect("octet")]
            );
        }
        // 125 accounts per network.
        for n in 0..8 {
            assert_eq!((0..1000).filter(|j| farm_network(*j, 8) == n).count(), 125);
        }
        let honest_nets: HashSet<[u8; 3]> = (0..MAX_HONEST)
            .map(|i| network(honest(i).expect("a")))
            .collect();
        assert!(nets.is_disjoint(&honest_nets));
        assert!(!nets.contains(&[127, 0, 0]) && !honest_nets.contains(&[127, 0, 0]));
        assert!(farm(8 * 253, 8).is_err() && farm(8 * 253 - 1, 8).is_ok());
        assert!(farm(0, 0).is_err() && farm(0, 257).is_err());
    }
}
