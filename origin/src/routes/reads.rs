//! The public reads' share of the database pool, taken in front of the query of
//! `GET /v1/skus/{sku}`. That route needs no credentials: unbounded, hundreds of concurrent
//! reads would hold every pool connection and purchases would wait out `DB_ACQUIRE_TIMEOUT_MS`
//! into 503s. A read first takes one of `DB_READ_MAX_CONNECTIONS` permits, waiting at most
//! `DB_ACQUIRE_TIMEOUT_MS` (then 503 `unavailable` with `Retry-After`), so at most that many pool
//! connections ever serve reads and the rest stay for purchases and the admin API.
//!
//! (`/readyz` runs at most one probe at a time, see `health`; `/metrics` does not touch the
//! database.)

use std::sync::Arc;
use std::time::Duration;

use shared::ErrorCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::problem::ApiError;

/// Admits at most `max` public reads to the database at once; see the module docs.
#[derive(Debug, Clone)]
pub struct ReadGate {
    permits: Arc<Semaphore>,
    wait: Duration,
}

impl ReadGate {
    pub fn new(max: u32, wait: Duration) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max.max(1) as usize)),
            wait,
        }
    }

    /// A permit to use the database for one read (hold it until the query is done), or 503
    /// `unavailable` after waiting `wait` for one.
    pub async fn enter(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        match tokio::time::timeout(self.wait, self.permits.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            // Never closed; time out like a full pool would.
            Ok(Err(_)) | Err(_) => {
                tracing::debug!(wait = ?self.wait, "public read refused: every read slot busy");
                Err(ApiError::new(
                    ErrorCode::Unavailable,
                    "too many concurrent reads; retry after the Retry-After delay",
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_beyond_the_share_wait_then_are_refused_with_503() {
        let gate = ReadGate::new(2, Duration::from_millis(50));
        let a = gate.enter().await.expect("first");
        let _b = gate.enter().await.expect("second");
        let refused = gate.enter().await.expect_err("third waits, then 503");
        assert_eq!(refused.code(), ErrorCode::Unavailable);
        drop(a);
        assert!(gate.enter().await.is_ok(), "a freed slot is taken again");
    }
}
