//! A purchase attempt queued on its SKU's combiner ([`Job`]): built by
//! [`PurchaseService::submit`](super::PurchaseService::submit) with the attempt's deadline and
//! the channel its waiting request listens on, answered exactly once by the combiner
//! ([`super::combiner`]) through the shared [`Context`](super::Context).

use std::time::Instant;

use tokio::sync::oneshot;

use super::answer::Answer;
use crate::decision::Attempt;

/// A queued purchase attempt.
#[derive(Debug)]
pub struct Job {
    pub attempt: Attempt,
    pub deadline: Instant,
    /// Where its [`Answer`] goes: the waiting request.
    pub reply: oneshot::Sender<Answer>,
}
