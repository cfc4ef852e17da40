//! The waiting room's order, decided without the shopper's help: which shard object holds a
//! shopper ([`shard_of`]), the pre-queue lottery ticket ([`ticket`]: an HMAC of the room secret
//! over the SKU and the user, so nobody can predict or influence it) and the total order of the
//! members ([`Key`]): everyone who joined before `starts_at` by ticket (a uniformly random
//! shuffle), then everyone else by join instant, shard and sequence (first come, first served).

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::SHARDS;

/// The shard object of `user` (uniform over [`SHARDS`]).
pub fn shard_of(user: &str) -> u32 {
    let digest = Sha256::digest(user.as_bytes());
    let n = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
    n % SHARDS
}

/// The pre-queue lottery ticket of `user` in `sku`'s room: HMAC-SHA256 under the room secret,
/// first 8 bytes. Uniform and unpredictable without the secret; the shopper sends nothing that
/// goes into it but who they are.
pub fn ticket(secret: &[u8], sku: &str, user: &str) -> u64 {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return 0;
    };
    mac.update(b"flashgate-room-ticket-v1\n");
    mac.update(sku.as_bytes());
    mac.update(b"\n");
    mac.update(user.as_bytes());
    let out = mac.finalize().into_bytes();
    let mut first = [0u8; 8];
    first.copy_from_slice(&out[..8]);
    u64::from_be_bytes(first)
}

/// A member's place in the total order. Pre-queue members (joined before the start) all come
/// before the others (`Pre` < `Post`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Key {
    /// Joined before `starts_at`: by lottery ticket (the user breaks a tie).
    Pre { ticket: u64, user: String },
    /// Joined from `starts_at` on: by join instant (the shard's clock), shard, sequence.
    Post { join_ms: i64, shard: u32, seq: u64 },
}

/// A shard's next member not yet admitted: its rank in the shard and its key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    pub rank: u64,
    pub key: Key,
}

/// Merges the shards' heads (each shard's list in its own order, which agrees with [`Key`]) and
/// returns the shard of each of the first `limit` members overall, in order.
pub fn merge(heads: &[Vec<Head>], limit: usize) -> Vec<u32> {
    let mut all: Vec<(&Key, u32)> = heads
        .iter()
        .enumerate()
        .flat_map(|(shard, list)| {
            let shard = u32::try_from(shard).unwrap_or(u32::MAX);
            list.iter().map(move |h| (&h.key, shard))
        })
        .collect();
    all.sort();
    all.into_iter()
        .take(limit)
        .map(|(_, shard)| shard)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_and_tickets_are_stable_and_spread() {
        assert_eq!(shard_of("alice"), shard_of("alice"));
        let mut seen = vec![0u32; SHARDS as usize];
        for i in 0..32_000 {
            seen[shard_of(&format!("u{i}")) as usize] += 1;
        }
        assert!(seen.iter().all(|n| (800..1_200).contains(n)), "{seen:?}");
        let a = ticket(b"secret-0123456789", "SKU", "alice");
        assert_eq!(a, ticket(b"secret-0123456789", "SKU", "alice"));
        assert_ne!(a, ticket(b"secret-0123456789", "SKU", "bob"));
        assert_ne!(a, ticket(b"secret-0123456789", "SKU2", "alice"));
        assert_ne!(a, ticket(b"other-secret-0123456", "SKU", "alice"));
    }

    #[test]
    fn the_lottery_order_is_unrelated_to_the_join_order() {
        // Users named in join order; ranked by ticket. Spearman's rho of join index vs lottery
        // rank over 5,000 joiners is near 0.
        let n = 5_000usize;
        let mut by_ticket: Vec<(u64, usize)> = (0..n)
            .map(|i| (ticket(b"secret-0123456789", "S", &format!("user-{i}")), i))
            .collect();
        by_ticket.sort();
        let mut d2 = 0f64;
        for (rank, (_, join)) in by_ticket.iter().enumerate() {
            let d = rank as f64 - *join as f64;
            d2 += d * d;
        }
        let nf = n as f64;
        let rho = 1.0 - 6.0 * d2 / (nf * (nf * nf - 1.0));
        assert!(rho.abs() < 0.05, "rho {rho}");
    }

    #[test]
    fn pre_queue_members_come_first_then_join_order() {
        let pre = |t: u64| Key::Pre {
            ticket: t,
            user: format!("u{t}"),
        };
        let post = |ms: i64, shard: u32, seq: u64| Key::Post {
            join_ms: ms,
            shard,
            seq,
        };
        assert!(pre(u64::MAX) < post(0, 0, 0));
        assert!(post(5, 9, 9) < post(6, 0, 0));
        assert!(post(5, 1, 9) < post(5, 2, 0));
        let heads = vec![
            vec![
                Head {
                    rank: 0,
                    key: pre(7),
                },
                Head {
                    rank: 1,
                    key: post(10, 0, 0),
                },
            ],
            vec![
                Head {
                    rank: 3,
                    key: pre(2),
                },
                Head {
                    rank: 4,
                    key: post(9, 1, 0),
                },
                Head {
                    rank: 5,
                    key: post(11, 1, 1),
                },
            ],
        ];
        assert_eq!(merge(&heads, 10), vec![1, 0, 1, 0, 1]);
        assert_eq!(merge(&heads, 2), vec![1, 0]);
    }
}
