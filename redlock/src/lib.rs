//! Redlock: a distributed lock over N independent Redis masters, with fencing tokens.
//!
//! On Flashgate's purchase path it sits under the origin's per-SKU combiner
//! (`origin/src/purchase/combiner.rs`), which holds one lease per SKU while a batch of purchases
//! commits and presents the lease's fence to the SKU row; nothing here knows about SKUs, HTTP or
//! the database. The caller chooses the retry policy ([`RetryPolicy`]), the key namespace
//! ([`RedlockConfig::key_prefix`]) and where audit events go ([`Redlock::with_audit`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), redlock::RedlockError> {
//! use std::time::{Duration, Instant};
//! use redlock::{Redlock, RedlockConfig, RedlockError, RedlockMetrics, RetryPolicy};
//!
//! // The caller chooses how to wait: here the spec's random pauses, for up to 2 s.
//! const RETRY: RetryPolicy =
//!     RetryPolicy::jittered(Duration::from_millis(5), Duration::from_millis(100));
//!
//! let urls = vec!["redis://10.0.0.1:6379".to_owned(), "redis://10.0.0.2:6379".to_owned(), "redis://10.0.0.3:6379".to_owned()];
//! let lock = Redlock::connect(&urls, RedlockConfig::default(), RedlockMetrics::default()).await?;
//! let deadline = Instant::now() + Duration::from_secs(2);
//! match lock.acquire("sku:42", Duration::from_secs(2), &RETRY, deadline).await {
//!     Ok(lease) => {
//!         // … write to the database, presenting lease.fence(), within lease.remaining() …
//!         lock.release(lease).await?;
//!     }
//!     Err(RedlockError::Contended) => { /* still held by someone else at the deadline */ }
//!     Err(RedlockError::Unreachable { .. }) => { /* too few nodes: answer 503 */ }
//!     Err(RedlockError::QuorumLost { .. }) => { /* known to be down for a while: 503 now */ }
//!     Err(other) => return Err(other),
//! }
//! # Ok(()) }
//! ```
//!
//! # The algorithm
//!
//! The quorum is `N / 2 + 1`. Each node is reached over one long-lived multiplexed connection
//! (redis-rs `ConnectionManager`), created lazily and re-made in the background, so a node that
//! is down costs a fast "no" and never a connection per command.
//!
//! * **Acquire** sends one Lua script to every node at once: `SET lock token NX PX ttl` and, if
//!   set, bump the key's fence counter. The attempt is decided the moment the outcome is known:
//!   as soon as a quorum granted, or as soon as the nodes that refused or failed make a quorum
//!   impossible and the reason (contended or unreachable) is certain. Each node call has a timeout derived from the TTL
//!   ([`RedlockConfig::node_timeout_ratio`], clamped), so one slow or paused node cannot stall
//!   an acquire. Validity is `ttl − elapsed − drift` with `drift = ttl × 0.01 + 2 ms`, measured
//!   on the monotonic clock from before the first send, computed with checked arithmetic (no
//!   underflow: "negative" validity is simply [`RedlockError::ValidityTooShort`]).
//! * **Nodes that keep failing are skipped** (a per-node circuit breaker, `breaker.rs`): after
//!   [`RedlockConfig::breaker_failure_threshold`] consecutive failures (errors or timeouts, not
//!   refusals) a node is no longer contacted — its vote counts as a "no", which is always safe —
//!   for an exponential, jittered, capped back-off; then one background probe (the health
//!   script) readmits it or extends the back-off. So a dead or black-holed node costs acquires
//!   nothing. Exception: when the open breakers leave fewer than a quorum of nodes, every node
//!   is contacted (skipping could only turn every attempt into a certain failure; a
//!   machine-wide stall would otherwise become an outage for a whole back-off). Openings are
//!   logged as warnings, closings as info, and exported as `redlock_node_breaker_open` and
//!   `redlock_node_breaker_transitions_total`.
//! * **A known quorum loss fails fast** (`standing.rs`): a node can vote when its breaker is
//!   closed and it is not in its restart recovery window (which it reports, with the time left,
//!   to acquires and probes). Once fewer than a quorum have been unable to vote for longer than
//!   [`RedlockConfig::quorum_loss_grace`] (default 1 s), every acquire fails at once with
//!   [`RedlockError::QuorumLost`], contacting no node, until probes readmit enough nodes and
//!   their recovery windows are over; a shorter loss is a blip, ridden out by the retries as
//!   before. [`Redlock::quorum_status`] tells where things stand; the start and the end of such a
//!   loss are logged once (warning, info) and exported as `redlock_quorum_lost`.
//! * **A failed attempt cleans up before retrying**: compare-and-delete on every node that
//!   granted (waited for), and, in the background, on every node that failed or had not
//!   answered (a timed-out command may still have run; on the same connection the delete runs
//!   after it).
//! * **Retries** are the caller's choice, made per call: a [`RetryPolicy`] says how long to
//!   pause after a contended attempt and after one that lacked votes (a [`Pause`]: stop,
//!   uniform polling, or decorrelated jitter), and the call's deadline says when to give up.
//!   [`Redlock::acquire`] owns the one retry loop; callers do not write a second around it.
//!   With decorrelated jitter, raise the cap with the number of processes contending for one
//!   key: contenders that retry too often split the votes among themselves.
//! * Not re-entrant: acquiring a key the same process holds is [`RedlockError::Contended`].
//! * **Release / extend** are compare-and-delete / compare-and-pexpire scripts on every node: a
//!   lease never deletes or prolongs another holder's lock. Extend succeeds only if a quorum
//!   confirms within the lease's current validity.
//! * **Errors** say what to do: [`RedlockError::Contended`] (enough nodes voted, others' locks
//!   took the votes: wait), [`RedlockError::Unreachable`] (fewer than a quorum of nodes could
//!   vote: 503, or retry within a deadline), [`RedlockError::QuorumLost`] (too few nodes for
//!   longer than the grace: 503 now), [`RedlockError::ValidityTooShort`], [`RedlockError::Lost`].
//!
//! # Fencing tokens
//!
//! A lock alone cannot stop a holder that paused (GC, swap, a stalled VM) past its validity from
//! writing after the next holder started. [`Lease::fence`] lets the store refuse such writes: it
//! strictly increases across successive holders of a key.
//!
//! Each node keeps a counter per key, incremented by the acquire script atomically with the
//! `SET NX`. The lease's fence `F` is the maximum over the granting nodes. If fewer than a quorum
//! of granting nodes are already at `F`, the attempt raises the others to `F` (a "max" write,
//! never lowering) and only succeeds once a quorum of nodes confirm `counter ≥ F` *while still
//! holding our lock*. So when a lease is returned, a quorum `W` of nodes had `counter ≥ F` while
//! they held it. The next holder's granting quorum intersects `W` in some node; that node granted
//! it only after our lock there was gone, hence after the raise, so its increment yields more
//! than `F`. In steady state all nodes agree and the raise costs nothing (one round trip per
//! acquire); it runs only after some node missed acquisitions.
//!
//! # Nodes restarted empty
//!
//! A node that restarts without persistence forgets the locks it granted; with a second
//! acquirer it could then form a quorum while the first still holds a valid lease. The Redlock
//! spec's answer is to keep a restarted node out of the game for a bit more than the longest
//! TTL. This module enforces that *on the node itself*, so no operator step can forget it:
//!
//! * every node carries an incarnation marker (`<node_key_prefix>node:incarnation`, no TTL).
//!   The acquire and health scripts, finding it missing (first use, restart without persistence,
//!   `FLUSHALL`), create it together with a recovery flag that expires after
//!   `max_ttl + drift(max_ttl)` ([`RedlockConfig::max_ttl`]);
//! * while the flag lives the node answers "recovering" and does not vote (it counts as
//!   unable to vote, so a quorum of such nodes yields [`RedlockError::Unreachable`], and
//!   [`Redlock::quorum_reachable`] reports not ready);
//! * `acquire`/`extend` refuse TTLs above `max_ttl`, so any lease the node granted before it lost
//!   its data has expired before it votes again. All processes sharing nodes must use the same
//!   `max_ttl` (the first one to touch a restarted node sets its window).
//!
//! The cost: a brand-new set of nodes (first deployment, each test's fresh `redis-server`) is not
//! usable for `max_ttl` after first contact. [`Redlock::connect`] probes every node in the
//! background to start that clock early; [`Redlock::node_states`] shows it.
//!
//! The fence survives restarts too. A restarted node has lost its counters; if it is the only
//! node shared by the previous holder's confirmation quorum and the next holder's quorum, the
//! intersection argument above breaks. So a counter that does not exist yet starts at the
//! acquirer's wall clock in microseconds since the epoch (a "floor") rather than at 1: every
//! fence ever issued for a key is at most its first floor plus one per acquisition, and an
//! acquisition takes far more than a microsecond, so fences stay below "now in microseconds".
//! A restarted node votes only after its recovery window (at least `max_ttl` after it lost the
//! counter), so its new floor exceeds every earlier fence as long as the clocks of the machines
//! running the lock's clients agree within `max_ttl / 2` and do not step back by more than that.
//! This is the one place wall clocks matter; it matters only after a node lost its data. Fences
//! are therefore large numbers (around 2^51), still far inside `i64`.
//!
//! A store that refuses a lease's fence as stale because it has seen a higher one that these
//! counters did not issue (counters under other key names after an upgrade or a rollback, a
//! counter recreated by a client whose clock ran behind) would refuse every later fence too:
//! [`Redlock::raise_fence`] lets the holder raise the key's counters to the store's fence (never
//! lowering them, so always safe), and the next holder's fence is above it.
//!
//! # Deployment notes
//!
//! * Nodes must be independent masters (no replication between them), Redis ≥ 5 (scripts are
//!   replicated by effect). Keys used: `<key_prefix>lock:<key>` (with TTL) and
//!   `<key_prefix>fence:<key>` (one small counter per key, no TTL) — the lock adds nothing else
//!   to the caller's key, so a caller with its own namespace passes it as
//!   [`RedlockConfig::key_prefix`] and bare resource names (the origin: `flashgate:` and
//!   `sku:<SKU>`, giving `flashgate:lock:sku:<SKU>`) — and the restart guard's per-node
//!   `<node_key_prefix>node:incarnation` and `…node:recovering` (default `redlock:`, shared by
//!   every client of the node: they describe the node). Use an eviction policy that cannot
//!   evict keys without TTL (`noeviction` or `volatile-*`): an evicted counter or marker is
//!   handled as a restart, which is safe but costs a recovery window.
//! * URLs naming the same node twice are rejected; two different names for one node (e.g.
//!   `localhost` and `127.0.0.1`) cannot be detected and would break the quorum.
//! * Nodes are named by their index in the URL list in errors, logs and metrics (breaker logs
//!   and metrics add the node's `host:port`, never credentials).
//! * TLS: `rediss://` URLs; for a private CA or client certificates build the clients with
//!   `redis::Client::build_with_tls` and use [`Redlock::connect_clients`].
//!
//! # Metrics
//!
//! `redlock_acquire_total{result="acquired|contended|unreachable|validity_too_short"}`,
//! `redlock_acquire_attempts_total`, `redlock_acquire_seconds` (histogram),
//! `redlock_node_errors_total{node="<index>"}`, `redlock_extend_failures_total`,
//! `redlock_release_validity_remaining_seconds` (histogram),
//! `redlock_node_breaker_open{node,addr}` (gauge),
//! `redlock_node_breaker_transitions_total{node,addr,to="open|closed"}`, `redlock_quorum_lost`
//! (gauge). A [`RedlockError::QuorumLost`] is counted as `result="unreachable"`. See
//! [`RedlockMetrics`].
//!
//! # Audit trail
//!
//! Every acquire, extend, release and fence raise call is one [`AuditEvent`] (resource, result,
//! fence, attempts, granted nodes, validity, elapsed time) handed to the caller's
//! [`AuditSink`] ([`Redlock::with_audit`]); [`tracing_audit!`] declares a sink that writes
//! `tracing` events under the caller's target. The default, [`TracingAudit`], uses
//! [`AUDIT_TARGET`] (`redlock::audit`). See `audit.rs` for the fields.

mod audit;
mod breaker;
mod client;
mod config;
mod error;
mod lease;
mod metrics;
mod node;
mod retry;
mod scripts;
mod standing;
mod tally;

pub use audit::{AUDIT_TARGET, AuditEvent, AuditSink, NodeList, TracingAudit};
pub use client::{NodeState, QuorumStatus, Redlock};
pub use config::RedlockConfig;
pub use error::{ConfigError, RedlockError};
pub use lease::Lease;
pub use metrics::RedlockMetrics;
pub use retry::{Pause, RetryPolicy};

/// For [`tracing_audit!`]'s expansion only.
#[doc(hidden)]
pub mod __private {
    pub use tracing;
}
