//! The benchmark baseline (`SINGLE_FLIGHT=false`): no combiner — every attempt takes its SKU's
//! lease and runs its own transaction. Kept to measure what the combiner buys
//! (`bench compare`); same guarantees, far lower throughput under contention.

use std::time::Instant;

use uuid::Uuid;

use super::answer::{Answer, BatchRef, Refusal};
use super::context::{Context, lock_refusal, log_lock_failure, store_refusal};
use super::knowledge::{Sale, SaleKnowledge};
use crate::decision::Attempt;
use crate::lease::LeaseError;
use crate::store::StoreError;

/// The baseline without single-flight: one lock acquisition and one transaction per attempt.
pub async fn decide_alone(ctx: &Context, attempt: Attempt, deadline: Instant) -> Answer {
    let sku = attempt.request.sku.clone();
    match ctx.knowledge.check(&sku, &ctx.pool).await {
        Ok(Sale::SoldOut { buyers, .. })
            if SaleKnowledge::answers(&buyers, &attempt.user, &attempt.key) =>
        {
            ctx.metrics.sold_out_fast_path.inc();
            return Answer::sold_out_known(&sku);
        }
        Ok(Sale::Unknown) => {
            match ctx
                .decide_unknown(&sku, std::slice::from_ref(&attempt))
                .await
            {
                Ok(Some((res, batch))) => {
                    return res
                        .decisions
                        .into_iter()
                        .next()
                        .map_or(Refusal::Internal.into(), |d| Answer::decided(d, batch));
                }
                Ok(None) => {} // created meanwhile: under the lease
                Err(e) => return store_refusal(&e).into(),
            }
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(sku = %sku, error = %e, "could not read the sku");
            return Refusal::Unavailable.into();
        }
    }
    let attempts = [attempt];
    let decided = ctx
        .locks
        .run(&sku, deadline, async |lease| {
            let batch = BatchRef {
                id: Uuid::now_v7(),
                fence: lease.fence(),
            };
            let observed_at = Instant::now();
            let res = ctx.decide(&sku, &attempts, Some(lease), batch).await?;
            Ok::<_, StoreError>((res, batch, observed_at))
        })
        .await;
    match decided {
        Ok((res, batch, observed_at)) => {
            ctx.knowledge
                .learn_batch(&sku, observed_at, &res, &ctx.pool)
                .await;
            res.decisions
                .into_iter()
                .next()
                .map_or(Refusal::Internal.into(), |d| Answer::decided(d, batch))
        }
        Err(LeaseError::Lock(e)) => {
            log_lock_failure(&sku, &e);
            lock_refusal(&e).into()
        }
        Err(LeaseError::Work(e)) => store_refusal(&e).into(),
    }
}
