//! The Lua scripts run on each node, and the decoding of their replies. Each script is atomic on
//! its node, which is what makes compare-and-delete, compare-and-pexpire and "set the lock and
//! bump the fence counter together" correct. Scripts are sent by SHA (`EVALSHA`) with redis-rs
//! falling back to loading them, so a node restarted empty just costs one extra round trip.
//!
//! Fence values are passed and compared as Lua numbers: exact below 2^53, and the largest value
//! this module produces is a microsecond Unix time (about 2^51 until the year 2100) plus one per
//! acquisition.

use std::sync::LazyLock;

use redis::Script;

/// Acquire one node's vote.
///
/// `KEYS`: lock, fence counter, incarnation marker, recovery flag.
/// `ARGV`: token, TTL (ms), recovery delay (ms), fence floor (µs since the Unix epoch).
///
/// Replies `{0, fence}` (granted), `{1, pttl}` (held by another owner) or `{2, pttl}` (the node
/// came back empty and is in its recovery window for `pttl` more ms).
///
/// A node without the incarnation marker has never been seen or has lost its data (restart
/// without persistence, `FLUSHALL`): it sets the marker and refuses to vote for the recovery
/// delay, so that every lease it may have granted before has expired before it grants again.
/// The fence counter is bumped only when the lock is granted, atomically with it; a missing
/// counter starts at the caller's floor (see the module docs for why).
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('SET', KEYS[3], '1')
  redis.call('SET', KEYS[4], '1', 'PX', ARGV[3])
end
local recovering = redis.call('PTTL', KEYS[4])
if recovering > 0 then
  return {2, recovering}
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('PTTL', KEYS[1])}
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {0, redis.call('INCR', KEYS[2])}
end
redis.call('SET', KEYS[2], ARGV[4])
return {0, redis.call('INCRBY', KEYS[2], 0)}
",
    )
});

/// Raise a node's fence counter to at least the quorum's fence (never lowers it), and report
/// whether this node still holds the lock with our token: `KEYS` lock, fence counter; `ARGV`
/// token, fence. Replies 1 (counter ≥ fence while our lock is held here) or 0.
pub(crate) static RAISE_FENCE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
if current == nil or current < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return 1
end
return 0
",
    )
});

/// Compare-and-delete: `KEYS` lock; `ARGV` token. Replies 1 if our lock was deleted, 0 if the
/// key was absent or someone else's (then it is left alone).
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
",
    )
});

/// Compare-and-pexpire: `KEYS` lock; `ARGV` token, TTL (ms). Replies 1 if our lock now lives
/// TTL more, 0 if it is gone or someone else's.
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
",
    )
});

/// Health probe that also starts the restart guard on a fresh node: `KEYS` incarnation
/// marker, recovery flag; `ARGV` recovery delay (ms). Replies 0 (able to vote) or the ms of
/// recovery left.
pub(crate) static HEALTH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SET', KEYS[1], '1')
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
end
local recovering = redis.call('PTTL', KEYS[2])
if recovering > 0 then
  return recovering
end
return 0
",
    )
});

/// One node's answer to [`ACQUIRE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// Lock set with our token; the node's fence counter is now `fence`.
    Granted { fence: u64 },
    /// Another owner's lock is there.
    Held,
    /// The node is in its restart recovery window for `remaining_ms` more.
    Recovering { remaining_ms: u64 },
}

impl AcquireReply {
    /// Decodes the `{code, value}` reply; `None` for anything else.
    pub(crate) fn decode(reply: (i64, i64)) -> Option<Self> {
        match reply {
            (0, fence) => u64::try_from(fence)
                .ok()
                .map(|fence| Self::Granted { fence }),
            (1, _) => Some(Self::Held),
            (2, pttl) => Some(Self::Recovering {
                remaining_ms: u64::try_from(pttl).unwrap_or(0),
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_acquire_replies() {
        assert_eq!(
            AcquireReply::decode((0, 42)),
            Some(AcquireReply::Granted { fence: 42 })
        );
        assert_eq!(AcquireReply::decode((1, 900)), Some(AcquireReply::Held));
        assert_eq!(
            AcquireReply::decode((2, 10)),
            Some(AcquireReply::Recovering { remaining_ms: 10 })
        );
        assert_eq!(
            AcquireReply::decode((0, -1)),
            None,
            "negative fence is a protocol error"
        );
        assert_eq!(AcquireReply::decode((3, 0)), None);
    }
}
