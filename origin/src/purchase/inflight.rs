//! In-process registry of purchase attempts being decided, keyed by (user, idempotency key).
//! A second arrival of a pending key is answered at once — 409 `idempotency_in_flight` for the
//! same request, 422 `idempotency_key_reused` for a different one — so a duplicate never queues
//! behind its twin. Across processes the database decides duplicates once (see `store`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use shared::{IdempotencyKey, PurchaseRequest, UserId};

type Key = (UserId, IdempotencyKey);

/// The registry; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct InFlight {
    // A std mutex: held only for a map lookup, never across an `.await`.
    pending: Arc<Mutex<HashMap<Key, PurchaseRequest>>>,
}

/// Why an attempt cannot start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    /// The same request with this key is being decided.
    SameRequest,
    /// A different request with this key is being decided.
    OtherRequest,
}

/// Removes its key from the registry when dropped (answered, failed or cancelled).
#[derive(Debug)]
pub struct InFlightGuard {
    registry: InFlight,
    key: Option<Key>,
}

impl InFlight {
    /// Registers the attempt, or says why it cannot start.
    pub fn begin(
        &self,
        user: &UserId,
        key: &IdempotencyKey,
        request: &PurchaseRequest,
    ) -> Result<InFlightGuard, Busy> {
        let id = (user.clone(), key.clone());
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = pending.get(&id) {
            return Err(if existing == request {
                Busy::SameRequest
            } else {
                Busy::OtherRequest
            });
        }
        pending.insert(id.clone(), request.clone());
        Ok(InFlightGuard {
            registry: self.clone(),
            key: Some(id),
        })
    }

    /// Number of attempts being decided.
    pub fn len(&self) -> usize {
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.registry
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(qty: i64) -> PurchaseRequest {
        PurchaseRequest {
            sku: shared::Sku::parse("A").expect("sku"),
            qty: shared::Quantity::new(qty).expect("qty"),
        }
    }

    #[test]
    fn duplicate_is_busy_until_the_guard_drops() {
        let reg = InFlight::default();
        let (u, k) = (
            UserId::parse("u").expect("user"),
            IdempotencyKey::parse("k").expect("key"),
        );
        let guard = reg.begin(&u, &k, &req(1)).expect("first");
        assert_eq!(reg.begin(&u, &k, &req(1)).err(), Some(Busy::SameRequest));
        assert_eq!(reg.begin(&u, &k, &req(2)).err(), Some(Busy::OtherRequest));
        let other_user = UserId::parse("v").expect("user");
        assert!(
            reg.begin(&other_user, &k, &req(1)).is_ok(),
            "keys are scoped per user"
        );
        drop(guard);
        assert!(reg.begin(&u, &k, &req(1)).is_ok());
    }
}
