//! The deciders' runtime: a thread of its own, with a single-threaded tokio runtime, on which the
//! per-SKU combiners ([`super::combiner`]) run, with their own Postgres pool and Redis
//! connections (the [`super::Context`] is built on it, see `app.rs`).
//!
//! Why: a combiner is the one task per SKU that everything waits for. On the request runtime,
//! each of its awaits — a statement's answer, a lock vote — queued behind the request tasks its
//! last batch had just woken (a thousand of them, on two workers): under a 1,000-shopper sale
//! Postgres sat idle about half of the time, waiting for the next statement of a transaction
//! (`ClientRead`). Here its wake-ups run at once: the thread has nothing else to do, and the
//! operating system schedules a thread that mostly sleeps ahead of busy ones. Connections it opens
//! register with this runtime's reactor, so their readiness is noticed here too.
//!
//! Requests hand attempts over a channel and get their answers on a oneshot, both of which work
//! across runtimes. The thread ends when the last handle ([`Deciders`]) is dropped; tasks still on
//! it are dropped with it (their waiters see the answer channel closed).

use std::future::Future;
use std::sync::Arc;

use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A handle on the deciders' thread. Cheap to clone; the thread stops when the last clone is
/// dropped.
#[derive(Debug, Clone)]
pub struct Deciders {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    handle: Handle,
    /// Dropped with the last handle: the thread's `block_on` returns and the runtime shuts down.
    _stop: oneshot::Sender<()>,
}

impl Deciders {
    /// Starts the thread.
    pub fn start() -> std::io::Result<Self> {
        let runtime = Builder::new_current_thread().enable_all().build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("flashgate-decide".into())
            .spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })?;
        Ok(Self {
            inner: Arc::new(Inner {
                handle,
                _stop: stop,
            }),
        })
    }

    /// Runs `task` on the deciders' thread.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.inner.handle.spawn(task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tasks_run_on_the_deciders_thread_until_the_last_handle_is_dropped() {
        let deciders = Deciders::start().expect("thread");
        let name = deciders
            .spawn(async { std::thread::current().name().map(str::to_owned) })
            .await
            .expect("task ran");
        assert_eq!(name.as_deref(), Some("flashgate-decide"));
        let forever = deciders.spawn(std::future::pending::<()>());
        drop(deciders);
        let ended = tokio::time::timeout(std::time::Duration::from_secs(5), forever)
            .await
            .expect("the runtime shut down");
        assert!(ended.expect_err("cancelled").is_cancelled());
    }
}
