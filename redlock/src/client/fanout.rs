//! One script run on many nodes at once ([`Redlock::confirm`]): in parallel, each call bounded by
//! its timeout, decided as soon as enough answers are in or that has become impossible, and what
//! becomes of the calls still in flight then ([`Stragglers`]). Every operation of the lock
//! (`acquire`, `held`) reaches its nodes through here.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redis::{FromRedisValue, ScriptInvocation};

use super::{Keys, Redlock};
use crate::scripts;
use crate::tally::{Answer, Confirmations};

/// What happens to node calls still in flight once an outcome is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stragglers {
    /// Drop them: a command already sent still runs on its node; one not yet sent never will.
    Drop,
    /// Let them run to completion (or their timeout) in a background task, so that e.g. a
    /// release reaches every reachable node without the caller waiting for the slowest.
    Finish,
    /// Wait for them too (each is bounded by its timeout).
    Await,
}

impl Redlock {
    /// Sends compare-and-delete of `token` to `targets` without waiting for answers.
    pub(super) fn release_in_background(
        &self,
        keys: &Keys,
        token: &str,
        timeout: Duration,
        targets: impl Iterator<Item = usize>,
    ) {
        let invocation = Arc::new({
            let mut invocation = scripts::RELEASE.prepare_invoke();
            invocation.key(&keys.lock).arg(token);
            invocation
        });
        let calls: FuturesUnordered<_> = targets
            .filter_map(|index| self.inner.nodes.get(index).cloned())
            .map(|node| {
                let invocation = Arc::clone(&invocation);
                async move { node.run::<i64>(&invocation, timeout).await }
            })
            .collect();
        if !calls.is_empty() {
            tokio::spawn(drain(calls));
        }
    }

    /// Runs `invocation` on `targets` in parallel until `needed` answers are judged
    /// [`Answer::Yes`], or that has become impossible.
    pub(super) async fn confirm<T: FromRedisValue + Send + 'static>(
        &self,
        targets: impl IntoIterator<Item = usize>,
        needed: usize,
        invocation: ScriptInvocation<'static>,
        timeout: Duration,
        judge: impl Fn(T) -> Answer,
        stragglers: Stragglers,
    ) -> Confirmations {
        let invocation = Arc::new(invocation);
        let mut calls: FuturesUnordered<_> = targets
            .into_iter()
            .filter_map(|index| self.inner.nodes.get(index).cloned())
            .map(|node| {
                let invocation = Arc::clone(&invocation);
                async move { node.run::<T>(&invocation, timeout).await }
            })
            .collect();
        let mut confirmations = Confirmations::new(calls.len(), needed);
        while confirmations.outcome().is_none() {
            let Some(result) = calls.next().await else {
                break;
            };
            confirmations.record(result.map_or(Answer::Failed, &judge));
        }
        match stragglers {
            Stragglers::Drop => {}
            Stragglers::Finish if calls.is_empty() => {}
            Stragglers::Finish => {
                tokio::spawn(drain(calls));
            }
            Stragglers::Await => while calls.next().await.is_some() {},
        }
        confirmations
    }
}

/// Runs node calls to completion, ignoring results (each is bounded by its timeout, and errors
/// are counted by the node).
async fn drain<F: Future>(mut calls: FuturesUnordered<F>) {
    while calls.next().await.is_some() {}
}

/// Any reply counts (release: deleted, or already gone).
pub(super) fn answer_any(_: i64) -> Answer {
    Answer::Yes
}

/// `1` is yes, anything else no (extend, fence raise).
pub(super) fn answer_one(reply: i64) -> Answer {
    if reply == 1 { Answer::Yes } else { Answer::No }
}
