//! The errors of the lock ([`RedlockError`]) and of its configuration ([`ConfigError`]). They are
//! shaped for callers' decisions: `Contended` means wait or queue, `Unreachable` means 503 (or
//! retry within a deadline: it may be a blip), `QuorumLost` means 503 now, and
//! `ValidityTooShort` / `Lost` mean the protected work must not start or go on.

use std::time::Duration;

/// Why a lock operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedlockError {
    /// Another owner holds the lock on enough nodes that no quorum could be formed. Waiting
    /// (or queueing) helps.
    #[error("the lock is held by another owner")]
    Contended,
    /// Too few nodes could vote: they timed out, failed, or are in their restart recovery
    /// window. Waiting for another owner would not help; answer 503.
    #[error("only {available} of {nodes} Redis nodes could vote, {quorum} needed")]
    Unreachable {
        /// Nodes that answered and were able to vote (granted, refused or confirmed).
        available: usize,
        /// Configured nodes.
        nodes: usize,
        /// Votes needed.
        quorum: usize,
    },
    /// Fewer than a quorum of nodes have been unable to vote (circuit breakers open, or in
    /// their restart recovery window) for longer than
    /// [`RedlockConfig::quorum_loss_grace`](crate::RedlockConfig::quorum_loss_grace): the loss
    /// is known, not a blip, so the acquire was refused at once without contacting any node.
    /// Retrying before probes readmit enough nodes cannot help; answer 503.
    #[error(
        "only {voting} of {nodes} Redis nodes can vote, {quorum} needed, and it has been so for {lost_for:?}"
    )]
    QuorumLost {
        /// Nodes able to vote now, as far as the lock knows.
        voting: usize,
        /// Configured nodes.
        nodes: usize,
        /// Votes needed.
        quorum: usize,
        /// How long fewer than a quorum have been able to vote.
        lost_for: Duration,
    },
    /// A quorum granted the lock, but by the time it did, too little validity was left (the
    /// attempt took most of the TTL). The partial acquisition was released.
    #[error("the lock was granted with too little validity left")]
    ValidityTooShort,
    /// The lease is gone: its validity ran out, or a quorum of nodes no longer holds its token.
    /// Work done under it may have overlapped another holder's; the fencing token exists so that
    /// the database can reject such work.
    #[error("the lease was lost: its validity ran out or a quorum no longer holds it")]
    Lost,
    /// The configuration, a URL, a key or a TTL is invalid.
    #[error("invalid Redlock configuration: {0}")]
    InvalidConfig(#[from] ConfigError),
}

/// What is wrong with a configuration or an argument. Never contains a URL (they may carry
/// passwords): nodes are named by their index in the URL list.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The URL list is empty.
    #[error("no Redis nodes configured")]
    NoNodes,
    /// A URL does not parse as a Redis URL.
    #[error("Redis URL #{index} is invalid")]
    InvalidUrl {
        /// Position in the URL list.
        index: usize,
        /// The parser's complaint.
        #[source]
        source: redis::RedisError,
    },
    /// Two URLs name the same node (same address and database); it would vote twice.
    #[error("Redis URL #{index} names the same node as URL #{first}")]
    DuplicateNode {
        /// Position of the duplicate.
        index: usize,
        /// Position of the first occurrence.
        first: usize,
    },
    /// A [`RedlockConfig`](crate::RedlockConfig) field is out of range.
    #[error("{field} {reason}")]
    InvalidSetting {
        /// The field's name.
        field: &'static str,
        /// What the field must be.
        reason: &'static str,
    },
    /// A TTL passed to `acquire`/`extend` is below 1 ms or above `max_ttl`.
    #[error("TTL {ttl:?} is outside 1 ms..={max:?}")]
    TtlOutOfRange {
        /// The TTL passed.
        ttl: Duration,
        /// The configured `max_ttl`.
        max: Duration,
    },
    /// An empty lock key.
    #[error("lock key must not be empty")]
    EmptyKey,
}
