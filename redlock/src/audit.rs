//! The lock's audit trail: one [`AuditEvent`] per acquire, extend, release and fence raise call,
//! handed to the caller's [`AuditSink`] ([`Redlock::with_audit`](crate::Redlock::with_audit)),
//! so that an incident can be reconstructed — who held which resource, with which fencing token,
//! when, and how each call ended.
//!
//! The usual sink writes `tracing` events under a target of the caller's choosing; tracing
//! targets are compile-time constants, so [`tracing_audit!`](crate::tracing_audit) declares such
//! a sink in the caller's crate (the origin: `flashgate::audit`). Without one, the lock uses
//! [`TracingAudit`], target [`AUDIT_TARGET`] (`redlock::audit`). Either way the events can be
//! filtered (`RUST_LOG=redlock::audit=off` silences them).
//!
//! Fields: `op` (`acquire`, `extend`, `release`, `raise_fence`), `resource` (the lock key as
//! passed by the caller, e.g. `sku:42`), `result`, `fence` (when known; for `raise_fence` the
//! fence the counters were raised to), `elapsed_ms`, and per operation: `attempts`, `granted`
//! (indices of the nodes that granted the last attempt), `validity_ms` (validity after an acquire
//! or extend, or left at a release). Never tokens or URLs.

use std::fmt;
use std::time::Duration;

/// The `tracing` target of [`TracingAudit`], the sink used when the caller chose none.
pub const AUDIT_TARGET: &str = "redlock::audit";

/// What one lock call did.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct AuditEvent<'a> {
    /// `acquire`, `extend`, `release` or `raise_fence`.
    pub op: &'static str,
    /// The lock key as passed by the caller (without the key prefix).
    pub resource: &'a str,
    /// `acquired`, `extended`, `released`, `raised`, or the error's kind: `contended`,
    /// `unreachable`, `quorum_lost`, `validity_too_short`, `lost`, `invalid`.
    pub result: &'static str,
    /// The lease's fencing token (for `raise_fence`, the fence the counters were raised to);
    /// `None` for an acquire that failed.
    pub fence: Option<u64>,
    /// Acquire: attempts made.
    pub attempts: Option<u32>,
    /// Acquire: indices of the nodes that granted the last attempt.
    pub granted: Option<NodeList<'a>>,
    /// Validity after an acquire or extend, or left at a release.
    pub validity: Option<Duration>,
    /// How long the call took.
    pub elapsed: Duration,
}

impl AuditEvent<'_> {
    /// A contended acquire (the lock is someone else's; nothing changed): routine while waiting,
    /// so the tracing sinks log it at `debug`, every other outcome at `info`.
    pub fn is_routine(&self) -> bool {
        self.result == "contended"
    }

    /// [`AuditEvent::validity`] in whole milliseconds.
    pub fn validity_ms(&self) -> Option<u64> {
        self.validity.map(millis)
    }

    /// [`AuditEvent::elapsed`] in whole milliseconds.
    pub fn elapsed_ms(&self) -> u64 {
        millis(self.elapsed)
    }
}

/// Where a [`Redlock`](crate::Redlock) sends its [`AuditEvent`]s. Called on the request path:
/// keep it cheap and never block.
pub trait AuditSink: Send + Sync + fmt::Debug + 'static {
    /// Records one event.
    fn record(&self, event: &AuditEvent<'_>);
}

/// Declares a unit struct implementing [`AuditSink`] that writes each event as one `tracing`
/// event under `target` (`debug` for [`AuditEvent::is_routine`] ones, else `info`), with the
/// fields listed in the module docs.
///
/// ```
/// redlock::tracing_audit!(
///     /// The lock's audit events, under the service's audit target.
///     pub struct LockAudit => "myservice::audit"
/// );
/// # let _ = LockAudit;
/// ```
#[macro_export]
macro_rules! tracing_audit {
    ($(#[$meta:meta])* $vis:vis struct $name:ident => $target:literal) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, Default)]
        $vis struct $name;

        impl $crate::AuditSink for $name {
            fn record(&self, event: &$crate::AuditEvent<'_>) {
                if event.is_routine() {
                    $crate::__audit_event!(debug, $target, event);
                } else {
                    $crate::__audit_event!(info, $target, event);
                }
            }
        }
    };
}

/// One audit event at `level` (a `tracing` macro name); for [`tracing_audit!`].
#[doc(hidden)]
#[macro_export]
macro_rules! __audit_event {
    ($level:ident, $target:literal, $event:ident) => {
        $crate::__private::tracing::$level!(
            target: $target,
            op = $event.op,
            resource = $event.resource,
            result = $event.result,
            fence = $event.fence,
            attempts = $event.attempts,
            granted = $event.granted.map($crate::__private::tracing::field::display),
            validity_ms = $event.validity_ms(),
            elapsed_ms = $event.elapsed_ms(),
            "lock {}",
            $event.op
        )
    };
}

tracing_audit!(
    /// The sink used unless [`Redlock::with_audit`](crate::Redlock::with_audit) chose another:
    /// `tracing` events under [`AUDIT_TARGET`].
    pub struct TracingAudit => "redlock::audit"
);

/// Node indices, displayed as `0,2`.
#[derive(Debug, Clone, Copy)]
pub struct NodeList<'a>(pub &'a [usize]);

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
