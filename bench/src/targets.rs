//! What `bench compare` measures, parsed once from its command line: the targets (the origin
//! in batches and in batches of one, the origin exporting traces, the redis-lua baseline, the
//! HTTP ceiling), the connection modes
//! (cold: opened when the sale opens; warm: opened before it), and the order of the runs.

use std::fmt;

/// One kind of server the shoppers buy from, each started in its own private cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub(crate) enum Target {
    /// The origin with its per-SKU combiner, as configured by default.
    Combiner,
    /// The same origin deciding one purchase per Redlock lease and per transaction
    /// (`BATCH_MAX=1`, `LOCK_MAX_HOLD_MS=0`): what batching buys.
    Baseline,
    /// The origin with its combiner and traces on: every purchase sampled
    /// (`OTEL_TRACES_SAMPLER=always_on`), its spans exported with OTLP over HTTP to a sink in the
    /// bench process ([`crate::otlp_sink`]) — what traces cost (issue 38).
    Traced,
    /// `bench serve-redis-lua`: stock in one Redis node behind a Lua check-and-decrement, then a
    /// Postgres transaction per purchase.
    RedisLua,
    /// `bench serve-ceiling`: signature check and a canned 201.
    Ceiling,
}

impl Target {
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Self::Combiner => "combiner",
            Self::Baseline => "baseline",
            Self::Traced => "traced",
            Self::RedisLua => "redis-lua",
            Self::Ceiling => "ceiling",
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// When the shoppers' connections are opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub(crate) enum Connections {
    /// When the sale opens, inside the measured latency (the headline).
    Cold,
    /// Before the sale opens (`GET /healthz` on each).
    Warm,
}

impl Connections {
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Self::Cold => "cold",
            Self::Warm => "warm",
        }
    }
}

impl fmt::Display for Connections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why the runs cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PlanError {
    #[error("no target left to run (--targets / --no-baseline)")]
    NoTarget,
    #[error("no connection mode to run (--connections)")]
    NoConnections,
}

/// The runs in order: for each connection mode (as given), each target (as given); duplicates
/// dropped, and the baseline dropped with `--no-baseline`.
pub(crate) fn plan(
    targets: &[Target],
    connections: &[Connections],
    no_baseline: bool,
) -> Result<Vec<(Connections, Target)>, PlanError> {
    let targets = dedup(
        targets
            .iter()
            .copied()
            .filter(|t| !(no_baseline && *t == Target::Baseline)),
    );
    let connections = dedup(connections.iter().copied());
    if targets.is_empty() {
        return Err(PlanError::NoTarget);
    }
    if connections.is_empty() {
        return Err(PlanError::NoConnections);
    }
    Ok(connections
        .iter()
        .flat_map(|c| targets.iter().map(move |t| (*c, *t)))
        .collect())
}

fn dedup<T: PartialEq>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use Connections::{Cold, Warm};
    use Target::{Baseline, Ceiling, Combiner, RedisLua};

    #[test]
    fn runs_go_mode_by_mode_in_the_given_order_without_duplicates() {
        assert_eq!(
            plan(&[Ceiling, Combiner, Ceiling], &[Cold, Warm, Cold], false),
            Ok(vec![
                (Cold, Ceiling),
                (Cold, Combiner),
                (Warm, Ceiling),
                (Warm, Combiner)
            ])
        );
    }

    #[test]
    fn no_baseline_drops_only_the_baseline() {
        assert_eq!(
            plan(&[Combiner, Baseline, RedisLua], &[Cold], true),
            Ok(vec![(Cold, Combiner), (Cold, RedisLua)])
        );
        assert_eq!(plan(&[Baseline], &[Cold], true), Err(PlanError::NoTarget));
        assert_eq!(plan(&[], &[Cold], false), Err(PlanError::NoTarget));
        assert_eq!(plan(&[Combiner], &[], false), Err(PlanError::NoConnections));
    }

    #[test]
    fn names_are_the_command_line_values() {
        use clap::ValueEnum;
        for t in Target::value_variants() {
            assert_eq!(Target::from_str(t.name(), false), Ok(*t));
        }
        for c in Connections::value_variants() {
            assert_eq!(Connections::from_str(c.name(), false), Ok(*c));
        }
    }
}
