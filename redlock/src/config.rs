//! Tuning knobs ([`RedlockConfig`]) and the timings derived from them: per-node timeout, clock
//! drift allowance and the restart guard's recovery delay. Everything here is checked once, in
//! [`RedlockConfig::validate`], so the hot path can do its arithmetic without panicking.

use std::time::{Duration, Instant};

use crate::breaker::BreakerConfig;
use crate::error::ConfigError;

/// The longest TTL [`RedlockConfig::max_ttl`] may be set to. Redis takes milliseconds as a
/// signed 64-bit integer; a day is far below that and far above any sensible lock.
const MAX_TTL_CEILING: Duration = Duration::from_secs(24 * 60 * 60);

/// Settings of a [`Redlock`](crate::Redlock). Build it with struct update syntax:
///
/// ```
/// use std::time::Duration;
/// use redlock::RedlockConfig;
///
/// let config = RedlockConfig { max_ttl: Duration::from_secs(5), ..RedlockConfig::default() };
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RedlockConfig {
    /// Prefix of the keys this lock writes per locked resource: `<key_prefix>lock:<key>` and
    /// `<key_prefix>fence:<key>`. The lock adds nothing else to the caller's key, so a caller
    /// that owns a namespace passes it here (the origin: `REDIS_KEY_PREFIX` + `:`) and bare
    /// resource names to `acquire`. Processes sharing locks must share it.
    pub key_prefix: String,
    /// Prefix of the per-node keys of the restart guard (`<node_key_prefix>node:incarnation`,
    /// `<node_key_prefix>node:recovering`). They describe the node, not a caller's resources, so
    /// every lock client using a node should share them (default `redlock:`): the first to meet
    /// a node that came back empty starts the one recovery window everybody then respects.
    pub node_key_prefix: String,
    /// Longest TTL that `acquire` and `extend` accept. It is also the restart guard: a node that
    /// comes back empty refuses to vote for `max_ttl` plus drift, so that every lease it may have
    /// granted before the restart has expired first. Every process using the same nodes must use
    /// the same value (the first process to see a restarted node sets its recovery window).
    pub max_ttl: Duration,
    /// Per-node timeout as a fraction of the TTL (e.g. `0.02` of a 2 s TTL = 40 ms), clamped to
    /// `node_timeout_min..=node_timeout_max`. One slow or dead node cannot stall an operation
    /// beyond this. Must be in `(0, 0.5)`.
    pub node_timeout_ratio: f64,
    /// Lower clamp of the per-node timeout.
    pub node_timeout_min: Duration,
    /// Upper clamp of the per-node timeout; also the per-node timeout of
    /// [`Redlock::release`](crate::Redlock::release) and of the health probes
    /// ([`Redlock::quorum_reachable`](crate::Redlock::quorum_reachable),
    /// [`Redlock::node_states`](crate::Redlock::node_states)).
    pub node_timeout_max: Duration,
    /// Clock drift allowance as a fraction of the TTL (the Redlock spec's `0.01`). Must be in
    /// `[0, 0.5)`.
    pub drift_factor: f64,
    /// Constant part of the drift allowance (the spec's `2 ms`).
    pub drift_constant: Duration,
    /// A lease must have strictly more validity than this left when it is granted, otherwise
    /// the attempt counts as [`ValidityTooShort`](crate::RedlockError::ValidityTooShort).
    pub min_validity: Duration,
    /// Timeout of one TCP connection attempt to a node (reconnects happen in the background).
    pub connect_timeout: Duration,
    /// Consecutive failures (errors or timeouts, not refusals) after which a node's circuit
    /// breaker opens and operations stop contacting it. At least 1.
    pub breaker_failure_threshold: u32,
    /// First back-off of an open breaker; it doubles with every failed probe (jittered), up to
    /// `breaker_max_backoff`. Non-zero.
    pub breaker_base_backoff: Duration,
    /// Longest back-off of an open breaker, i.e. the longest a node that came back stays
    /// skipped before a probe readmits it. At least `breaker_base_backoff`.
    pub breaker_max_backoff: Duration,
    /// How long fewer than a quorum of nodes may be unable to vote (breakers open, or in their
    /// restart recovery window) before acquires stop trying: after that, every acquire fails at
    /// once with [`QuorumLost`](crate::RedlockError::QuorumLost), without contacting a node,
    /// until probes readmit enough nodes (or their recovery windows end). Shorter losses are
    /// blips, which acquires ride out as before. At most 24 h.
    pub quorum_loss_grace: Duration,
}

impl Default for RedlockConfig {
    fn default() -> Self {
        Self {
            key_prefix: "redlock:".to_owned(),
            node_key_prefix: "redlock:".to_owned(),
            max_ttl: Duration::from_secs(10),
            node_timeout_ratio: 0.02,
            node_timeout_min: Duration::from_millis(10),
            node_timeout_max: Duration::from_millis(500),
            drift_factor: 0.01,
            drift_constant: Duration::from_millis(2),
            min_validity: Duration::ZERO,
            connect_timeout: Duration::from_millis(500),
            breaker_failure_threshold: 3,
            breaker_base_backoff: Duration::from_millis(100),
            breaker_max_backoff: Duration::from_secs(2),
            quorum_loss_grace: Duration::from_secs(1),
        }
    }
}

impl RedlockConfig {
    /// Checks every setting; [`Redlock::connect`](crate::Redlock::connect) calls this.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field: &'static str, reason: &'static str| {
            Err(ConfigError::InvalidSetting { field, reason })
        };
        if self.key_prefix.is_empty() {
            return bad("key_prefix", "must not be empty");
        }
        if self.node_key_prefix.is_empty() {
            return bad("node_key_prefix", "must not be empty");
        }
        if self.quorum_loss_grace > MAX_TTL_CEILING {
            return bad("quorum_loss_grace", "must be at most 24 h");
        }
        if self.max_ttl < Duration::from_millis(1) || self.max_ttl > MAX_TTL_CEILING {
            return bad("max_ttl", "must be between 1 ms and 24 h");
        }
        if !(self.node_timeout_ratio.is_finite()
            && self.node_timeout_ratio > 0.0
            && self.node_timeout_ratio < 0.5)
        {
            return bad("node_timeout_ratio", "must be in (0, 0.5)");
        }
        if self.node_timeout_min.is_zero() || self.node_timeout_min > self.node_timeout_max {
            return bad(
                "node_timeout_min",
                "must be non-zero and at most node_timeout_max",
            );
        }
        if self.node_timeout_max > MAX_TTL_CEILING {
            return bad("node_timeout_max", "must be at most 24 h");
        }
        if !(self.drift_factor.is_finite() && self.drift_factor >= 0.0 && self.drift_factor < 0.5) {
            return bad("drift_factor", "must be in [0, 0.5)");
        }
        if self.drift_constant > MAX_TTL_CEILING || self.min_validity > MAX_TTL_CEILING {
            return bad(
                "drift_constant",
                "drift_constant and min_validity must be at most 24 h",
            );
        }
        if self.connect_timeout.is_zero() {
            return bad("connect_timeout", "must be non-zero");
        }
        if self.breaker_failure_threshold == 0 {
            return bad("breaker_failure_threshold", "must be at least 1");
        }
        if self.breaker_base_backoff.is_zero()
            || self.breaker_base_backoff > self.breaker_max_backoff
        {
            return bad(
                "breaker_base_backoff",
                "must be non-zero and at most breaker_max_backoff",
            );
        }
        if self.breaker_max_backoff > MAX_TTL_CEILING {
            return bad("breaker_max_backoff", "must be at most 24 h");
        }
        Ok(())
    }

    /// The circuit breaker settings of every node.
    pub(crate) fn breaker(&self) -> BreakerConfig {
        BreakerConfig {
            failure_threshold: self.breaker_failure_threshold,
            base_backoff: self.breaker_base_backoff,
            max_backoff: self.breaker_max_backoff,
        }
    }

    /// Checks a TTL passed to `acquire` or `extend`: between 1 ms and `max_ttl`. Redis `PX`
    /// takes whole milliseconds, so the TTL is truncated to them, and the truncated value is the
    /// one validity is computed from (never more than what the nodes were told).
    pub(crate) fn check_ttl(&self, ttl: Duration) -> Result<Ttl, ConfigError> {
        let millis = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        if millis == 0 || ttl > self.max_ttl {
            return Err(ConfigError::TtlOutOfRange {
                ttl,
                max: self.max_ttl,
            });
        }
        Ok(Ttl {
            duration: Duration::from_millis(millis),
            millis,
        })
    }

    /// Per-node timeout for an operation on a lock of `ttl`.
    pub(crate) fn node_timeout(&self, ttl: Duration) -> Duration {
        scale(ttl, self.node_timeout_ratio).clamp(self.node_timeout_min, self.node_timeout_max)
    }

    /// Clock drift allowance for a lock of `ttl`: `ttl × drift_factor + drift_constant`.
    pub(crate) fn drift(&self, ttl: Duration) -> Duration {
        scale(ttl, self.drift_factor).saturating_add(self.drift_constant)
    }

    /// End of validity of a lock operation that started (first byte sent) at `start`, judged
    /// at `now`: validity is `ttl − (now − start) − drift`, so the lease ends at
    /// `start + ttl − drift`. `None` unless the validity left is above `min_validity`. Checked
    /// arithmetic throughout: a drift above the TTL, or an operation that outlived it, is
    /// `None`, never an underflow.
    pub(crate) fn validity_end(&self, start: Instant, ttl: Ttl, now: Instant) -> Option<Instant> {
        let horizon = ttl.duration.checked_sub(self.drift(ttl.duration))?;
        let expires_at = start.checked_add(horizon)?;
        let validity = expires_at.checked_duration_since(now)?;
        (validity > self.min_validity).then_some(expires_at)
    }

    /// How long a node that came back empty refuses to vote: `max_ttl` plus its drift.
    pub(crate) fn recovery_delay(&self) -> Duration {
        self.max_ttl.saturating_add(self.drift(self.max_ttl))
    }

    /// The recovery delay in whole milliseconds, rounded up, for Redis `PX`.
    pub(crate) fn recovery_millis(&self) -> u64 {
        let delay = self.recovery_delay();
        let millis = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        if delay.subsec_nanos() % 1_000_000 == 0 {
            millis
        } else {
            millis.saturating_add(1)
        }
    }
}

/// A TTL that passed [`RedlockConfig::check_ttl`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ttl {
    /// The TTL as the nodes see it (whole milliseconds).
    pub(crate) duration: Duration,
    /// The same in milliseconds, for `PX`.
    pub(crate) millis: u64,
}

/// `duration × factor`, saturating instead of panicking (factors are validated finite and
/// non-negative, but this must not be the place where a bad value turns into a panic).
fn scale(duration: Duration, factor: f64) -> Duration {
    Duration::try_from_secs_f64(duration.as_secs_f64() * factor).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert!(RedlockConfig::default().validate().is_ok());
    }

    #[test]
    fn rejects_nonsense() {
        let cases = [
            RedlockConfig {
                key_prefix: String::new(),
                ..RedlockConfig::default()
            },
            RedlockConfig {
                node_key_prefix: String::new(),
                ..RedlockConfig::default()
            },
            RedlockConfig {
                quorum_loss_grace: Duration::from_secs(25 * 3600),
                ..RedlockConfig::default()
            },
            RedlockConfig {
                max_ttl: Duration::ZERO,
                ..RedlockConfig::default()
            },
            RedlockConfig {
                node_timeout_ratio: f64::NAN,
                ..RedlockConfig::default()
            },
            RedlockConfig {
                node_timeout_ratio: 0.5,
                ..RedlockConfig::default()
            },
            RedlockConfig {
                node_timeout_ratio: -0.1,
                ..RedlockConfig::default()
            },
            RedlockConfig {
                drift_factor: f64::INFINITY,
                ..RedlockConfig::default()
            },
            RedlockConfig {
                node_timeout_min: Duration::from_secs(2),
                ..RedlockConfig::default()
            },
            RedlockConfig {
                connect_timeout: Duration::ZERO,
                ..RedlockConfig::default()
            },
            RedlockConfig {
                breaker_failure_threshold: 0,
                ..RedlockConfig::default()
            },
            RedlockConfig {
                breaker_base_backoff: Duration::ZERO,
                ..RedlockConfig::default()
            },
            RedlockConfig {
                breaker_base_backoff: Duration::from_secs(3),
                ..RedlockConfig::default()
            },
        ];
        for config in cases {
            assert!(config.validate().is_err(), "{config:?} should be rejected");
        }
    }

    #[test]
    fn node_timeout_is_a_clamped_fraction_of_the_ttl() {
        let config = RedlockConfig::default();
        assert_eq!(
            config.node_timeout(Duration::from_secs(2)),
            Duration::from_millis(40)
        );
        assert_eq!(
            config.node_timeout(Duration::from_millis(100)),
            config.node_timeout_min
        );
        assert_eq!(
            config.node_timeout(Duration::from_secs(3600)),
            config.node_timeout_max
        );
    }

    #[test]
    fn drift_follows_the_spec() {
        let config = RedlockConfig::default();
        assert_eq!(
            config.drift(Duration::from_secs(10)),
            Duration::from_millis(102)
        );
        assert_eq!(config.drift(Duration::ZERO), Duration::from_millis(2));
    }

    #[test]
    fn recovery_covers_max_ttl_and_its_drift() {
        let config = RedlockConfig {
            max_ttl: Duration::from_millis(1500),
            ..RedlockConfig::default()
        };
        assert_eq!(config.recovery_delay(), Duration::from_millis(1517));
        assert_eq!(config.recovery_millis(), 1517);
        let odd = RedlockConfig {
            drift_constant: Duration::from_micros(2500),
            ..config
        };
        assert_eq!(odd.recovery_millis(), 1518, "rounded up, never down");
    }

    #[test]
    fn validity_is_ttl_minus_elapsed_minus_drift_without_underflow() {
        let config = RedlockConfig::default();
        let ttl = config.check_ttl(Duration::from_secs(2)).expect("in range");
        let start = Instant::now();
        let drift = Duration::from_millis(22); // 2 s × 0.01 + 2 ms
        let end = config.validity_end(start, ttl, start + Duration::from_millis(5));
        assert_eq!(end, Some(start + ttl.duration - drift));
        // The operation took (almost) the whole TTL: no validity, and no panic.
        let late = start + ttl.duration - drift;
        assert_eq!(config.validity_end(start, ttl, late), None);
        assert_eq!(
            config.validity_end(start, ttl, start + Duration::from_secs(60)),
            None
        );
        // TTL below the drift allowance.
        let tiny = config
            .check_ttl(Duration::from_millis(1))
            .expect("in range");
        assert_eq!(config.validity_end(start, tiny, start), None);
        // min_validity is a strict lower bound.
        let picky = RedlockConfig {
            min_validity: Duration::from_secs(1),
            ..config
        };
        let now = start + Duration::from_millis(978); // exactly 1 s left
        assert_eq!(picky.validity_end(start, ttl, now), None);
        assert!(
            picky
                .validity_end(start, ttl, now - Duration::from_millis(1))
                .is_some()
        );
    }

    #[test]
    fn ttl_bounds() {
        let config = RedlockConfig::default();
        assert!(config.check_ttl(Duration::ZERO).is_err());
        assert!(config.check_ttl(Duration::from_micros(999)).is_err());
        assert!(
            config
                .check_ttl(config.max_ttl + Duration::from_millis(1))
                .is_err()
        );
        let ttl = config
            .check_ttl(Duration::from_micros(1_500_700))
            .expect("in range");
        assert_eq!(
            (ttl.duration, ttl.millis),
            (Duration::from_millis(1500), 1500),
            "truncated to whole ms"
        );
    }
}
