//! Reading request bodies with a hard size limit and a deadline, so an oversized or endless body
//! is a 413 problem+json (checked before anything else), a body that trickles in too slowly is a
//! 408 problem+json, and neither is ever unbounded memory or an unbounded wait.
//!
//! The deadline is attached to every request body by `routes::envelope` ([`DeadlineBody`]); any
//! reader of the body sees [`BodyReadTimeout`] once it passes, and [`read_limited`] turns that
//! into 408 `request_timeout`.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::BoxError;
use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use shared::ErrorCode;
use tokio::time::{Instant, Sleep};

use crate::problem::ApiError;

/// Largest accepted request body: 16 KiB.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// The body did not arrive whole before its deadline.
#[derive(Debug, thiserror::Error)]
#[error("request body not received within {0:?}")]
pub struct BodyReadTimeout(pub Duration);

/// A request body that fails with [`BodyReadTimeout`] once `timeout` has passed since it was
/// wrapped (when the request head arrived). The timer is only armed when a reader waits.
#[derive(Debug)]
pub struct DeadlineBody {
    inner: Body,
    timeout: Duration,
    deadline: Instant,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl DeadlineBody {
    pub fn new(inner: Body, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            deadline: Instant::now() + timeout,
            sleep: None,
        }
    }
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(frame) => return Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending => {}
        }
        let deadline = self.deadline;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyReadTimeout(self.timeout))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The `T` in `e`'s source chain, if any.
fn find<'a, T: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(t) = err.downcast_ref::<T>() {
            return Some(t);
        }
        cur = err.source();
    }
    None
}

/// Reads the whole body, refusing more than [`MAX_BODY_BYTES`] with 413 `payload_too_large` and
/// a body slower than its deadline with 408 `request_timeout`.
pub async fn read_limited(body: Body) -> Result<Bytes, ApiError> {
    read_at_most(body, MAX_BODY_BYTES).await
}

/// [`read_limited`] with another size limit (the payment webhook's events are larger).
pub async fn read_at_most(body: Body, max_bytes: usize) -> Result<Bytes, ApiError> {
    let e = match Limited::new(body, max_bytes).collect().await {
        Ok(collected) => return Ok(collected.to_bytes()),
        Err(e) => e,
    };
    if find::<LengthLimitError>(&*e).is_some() {
        return Err(ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("request body is larger than {max_bytes} bytes"),
        ));
    }
    if let Some(timeout) = find::<BodyReadTimeout>(&*e) {
        return Err(ApiError::new(
            ErrorCode::RequestTimeout,
            format!("{timeout}; send the whole body promptly"),
        ));
    }
    Err(ApiError::new(
        ErrorCode::InvalidRequest,
        "request body could not be read",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_body_that_never_ends_times_out_with_408() {
        let (_tx, rx) = futures::channel::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
        let body = Body::new(DeadlineBody::new(
            Body::from_stream(rx),
            Duration::from_millis(50),
        ));
        let err = read_limited(body).await.expect_err("times out");
        assert_eq!(err.code(), ErrorCode::RequestTimeout);
    }

    #[tokio::test]
    async fn a_prompt_body_is_read_and_a_large_one_is_413() {
        let ok = Body::new(DeadlineBody::new(Body::from("abc"), Duration::from_secs(5)));
        assert_eq!(read_limited(ok).await.expect("read"), "abc");
        let big = Body::new(DeadlineBody::new(
            Body::from(vec![b'x'; MAX_BODY_BYTES + 1]),
            Duration::from_secs(5),
        ));
        let err = read_limited(big).await.expect_err("too large");
        assert_eq!(err.code(), ErrorCode::PayloadTooLarge);
    }
}
