//! The waiting room's order, decided without the shopper's help: which shard object holds a
//! shopper ([`shard_of`]), the pre-queue lottery ticket ([`ticket`]: an HMAC of the room secret
//! over the SKU and the user, so nobody can predict or influence it) and the total order of the
//! members ([`Key`]): everyone who joined before `starts_at` by ticket (a uniformly random
//! shuffle), then everyone else by join instant, shard and sequence (first come, first served).

use hmac::{Hmac, Mac};
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

/// A member's place in the total order, compared field by field: pre-queue members (joined
/// before `starts_at`, `post == false`) all come first, by lottery ticket (the user breaks a
/// tie); then the others by the **epoch** in which the coordinator's tick first saw them settled
/// (joined more than [`super::admission::HORIZON_MS`] before it: issue 36), then by join instant
/// (the shard's clock), shard and sequence. The epoch makes the order final once a member is
/// settled — nobody can later be placed ahead of them — so each member's place can be numbered
/// exactly ([`merge_ranked`]). A flat struct (not an enum) keeps the Worker small.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub post: bool,
    pub epoch: u64,
    pub ticket: u64,
    pub user: String,
    pub join_ms: i64,
    pub shard: u32,
    pub seq: u64,
}

impl Key {
    /// A pre-queue member's key.
    pub fn pre(ticket: u64, user: &str) -> Self {
        Self {
            post: false,
            epoch: 0,
            ticket,
            user: user.to_owned(),
            join_ms: 0,
            shard: 0,
            seq: 0,
        }
    }

    /// The key of a member who joined from the start on, settled in `epoch`.
    pub fn post(epoch: u64, join_ms: i64, shard: u32, seq: u64) -> Self {
        Self {
            post: true,
            epoch,
            ticket: 0,
            user: String::new(),
            join_ms,
            shard,
            seq,
        }
    }
}

/// A shard's next member not yet admitted: its rank in the shard and its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub rank: u64,
    pub key: Key,
}

impl Head {
    /// `rank,post,ticket,join_ms,seq,epoch,user` (user ids have no comma); the shard is where
    /// it came from.
    pub fn encode(&self) -> String {
        let k = &self.key;
        format!(
            "{},{},{},{},{},{},{}",
            self.rank,
            u8::from(k.post),
            k.ticket,
            k.join_ms,
            k.seq,
            k.epoch,
            k.user
        )
    }

    pub fn decode(text: &str, shard: u32) -> Option<Self> {
        let f: Vec<&str> = text.splitn(7, ',').collect();
        if f.len() != 7 {
            return None;
        }
        let key = if f[1] == "1" {
            Key::post(
                f[5].parse().ok()?,
                f[3].parse().ok()?,
                shard,
                f[4].parse().ok()?,
            )
        } else {
            Key::pre(f[2].parse().ok()?, f[6])
        };
        Some(Self {
            rank: f[0].parse().ok()?,
            key,
        })
    }
}

/// Merges the shards' heads (each shard's list in its own order, which agrees with [`Key`]) and
/// returns the shard of each of the first `limit` members overall, in order.
pub fn merge(heads: &[Vec<Head>], limit: usize) -> Vec<u32> {
    merge_ranked(heads)
        .into_iter()
        .take(limit)
        .map(|(shard, _)| shard)
        .collect()
}

/// Merges the shards' lists into the total order: (shard, rank in the shard) of each member.
pub fn merge_ranked(heads: &[Vec<Head>]) -> Vec<(u32, u64)> {
    let mut all: Vec<(&Key, u32, u64)> = heads
        .iter()
        .enumerate()
        .flat_map(|(shard, list)| {
            let shard = u32::try_from(shard).unwrap_or(u32::MAX);
            list.iter().map(move |h| (&h.key, shard, h.rank))
        })
        .collect();
    all.sort();
    all.into_iter()
        .map(|(_, shard, rank)| (shard, rank))
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
        let pre = |t: u64| Key::pre(t, &format!("u{t}"));
        let post = |join_ms, shard, seq| Key::post(1, join_ms, shard, seq);
        assert!(pre(u64::MAX) < post(0, 0, 0));
        assert!(post(5, 9, 9) < post(6, 0, 0));
        assert!(post(5, 1, 9) < post(5, 2, 0));
        // A later epoch comes after, whatever its join instant (a shard's clock behind).
        assert!(Key::post(1, 900, 3, 0) < Key::post(2, 100, 0, 0));
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
        for (shard, list) in heads.iter().enumerate() {
            for h in list {
                let shard = shard as u32;
                let back = Head::decode(&h.encode(), shard).expect("decodes");
                assert_eq!(back.rank, h.rank);
                assert_eq!(back.key.post, h.key.post);
                if h.key.post {
                    assert_eq!(
                        (back.key.epoch, back.key.join_ms, back.key.seq),
                        (h.key.epoch, h.key.join_ms, h.key.seq)
                    );
                } else {
                    assert_eq!(
                        (back.key.ticket, &back.key.user),
                        (h.key.ticket, &h.key.user)
                    );
                }
            }
        }
        assert!(Head::decode("1,0,x,0,0,0,u", 0).is_none());
        assert_eq!(merge(&heads, 2), vec![1, 0]);
        assert_eq!(
            merge_ranked(&heads),
            vec![(1, 3), (0, 0), (1, 4), (0, 1), (1, 5)]
        );
    }
}
