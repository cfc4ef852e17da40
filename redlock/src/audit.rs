//! The lock's audit trail: one structured `tracing` event per acquire, extend, release and fence
//! raise call, under the target [`TARGET`] (`flashgate::audit`), so that an incident can be
//! reconstructed — who held which resource, with which fencing token, when, and how each call
//! ended — and so that the events can be filtered (`RUST_LOG=flashgate::audit=off` silences
//! them, `RUST_LOG=warn,flashgate::audit=info` keeps only them and warnings).
//!
//! Fields: `op` (`acquire`, `extend`, `release`, `raise_fence`), `resource` (the lock key as
//! passed by the caller, e.g. the SKU's), `result`, `fence` (when known; for `raise_fence` the
//! fence the counters were raised to), `batch_id` (when the caller gave one, see
//! [`Redlock::with_batch_id`](crate::Redlock::with_batch_id)), `elapsed_ms`, and per operation:
//! `attempts`, `granted` (indices of the nodes that granted the last attempt), `validity_ms`
//! (validity after an acquire or extend, or left at a release). Never tokens or URLs.

use std::fmt;
use std::time::Duration;

/// The `tracing` target of every audit event.
pub const TARGET: &str = "flashgate::audit";

/// What one `acquire`/`acquire_until`/`try_acquire` call did.
#[derive(Debug)]
pub(crate) struct AcquireRecord<'a> {
    pub(crate) resource: &'a str,
    pub(crate) batch_id: Option<&'a str>,
    pub(crate) result: &'static str,
    pub(crate) fence: Option<u64>,
    pub(crate) attempts: u32,
    pub(crate) granted: &'a [usize],
    pub(crate) validity: Option<Duration>,
    pub(crate) elapsed: Duration,
}

/// What one `extend` or `release` call did.
#[derive(Debug)]
pub(crate) struct LeaseRecord<'a> {
    pub(crate) op: &'static str,
    pub(crate) resource: &'a str,
    pub(crate) batch_id: Option<&'a str>,
    pub(crate) result: &'static str,
    pub(crate) fence: u64,
    pub(crate) validity: Duration,
    pub(crate) elapsed: Duration,
}

/// A contended try (the lock is someone else's; nothing changed) is a `debug` event: a waiting
/// combiner polls every few milliseconds, and an `info` line per poll would flood the trail
/// during a flash sale. Every other outcome is `info`.
pub(crate) fn acquire(record: &AcquireRecord<'_>) {
    macro_rules! event {
        ($level:ident) => {
            tracing::$level!(
                target: TARGET,
                op = "acquire",
                resource = record.resource,
                result = record.result,
                fence = record.fence,
                attempts = record.attempts,
                granted = %NodeList(record.granted),
                validity_ms = record.validity.map(millis),
                elapsed_ms = millis(record.elapsed),
                batch_id = record.batch_id,
                "lock acquire"
            )
        };
    }
    if record.result == "contended" {
        event!(debug);
    } else {
        event!(info);
    }
}

pub(crate) fn lease(record: &LeaseRecord<'_>) {
    tracing::info!(
        target: TARGET,
        op = record.op,
        resource = record.resource,
        result = record.result,
        fence = record.fence,
        validity_ms = millis(record.validity),
        elapsed_ms = millis(record.elapsed),
        batch_id = record.batch_id,
        "lock {}",
        record.op
    );
}

/// Node indices as `0,2`.
struct NodeList<'a>(&'a [usize]);

impl fmt::Display for NodeList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, node) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{node}")?;
        }
        Ok(())
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
