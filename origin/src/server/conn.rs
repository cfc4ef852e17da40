//! One HTTP/1.1 connection: what phase it is in, since when, and what happens when it has been
//! there too long.
//!
//! | phase | entered when | limit | then |
//! |---|---|---|---|
//! | `Fresh` | accepted | header read timeout (from the accept) | dropped, no answer |
//! | `Silent` | fresh, and everything it sent has been read without completing a head | header read timeout (from the accept) | dropped, no answer (slowloris); evictable at the connection cap |
//! | `Head` | the first byte of a request on an idle connection | header read timeout | dropped, no answer |
//! | `Request` | the head is complete (the service is called) | request timeout + header read timeout | dropped (the answer is not being read) |
//! | `Idle` | the answer's body is done | keep-alive timeout | closed gracefully; reclaimable at the connection cap |
//! | `Closing` | reclaimed at the cap | header read timeout | dropped |
//! | `Evicted` | silent, evicted at the cap | none | dropped at once |
//!
//! `Fresh` and `Silent` are the connections that have not completed a request yet: at the cap
//! they make room first (see `server`), so a flood of sockets that send nothing, or trickle a
//! head, cannot push out connections that have been serving requests.
//!
//! The phase and its start time live in one atomic word, updated by the socket wrapper
//! ([`TrackedIo`]: bytes arrived, or everything sent has been read), the service
//! ([`ConnService`]: head complete) and the answer's body ([`TrackedBody`]: answer done), and
//! read by the connection's driver ([`drive`]), which sleeps until the current phase's deadline
//! and re-checks — so a connection costs one timer.
//!
//! On the HTTPS listener the socket wrapper sits *under* TLS, so the phases see the bytes on the
//! wire: a client that connects and sends no handshake (or trickles one) is `Fresh`/`Silent`
//! like one that sends no head, and [`handshake`] runs the handshake under the same header
//! deadline, eviction and shutdown before [`drive`] serves the connection.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;
use tower::ServiceExt as _;

use crate::metrics::Metrics;

/// The phases of a connection (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Phase {
    Fresh = 0,
    Silent = 1,
    Head = 2,
    Request = 3,
    Idle = 4,
    Closing = 5,
    Evicted = 6,
}

impl Phase {
    fn from_bits(b: u64) -> Self {
        match b {
            0 => Self::Fresh,
            1 => Self::Silent,
            2 => Self::Head,
            3 => Self::Request,
            4 => Self::Idle,
            6 => Self::Evicted,
            _ => Self::Closing,
        }
    }
}

/// The server's time limits for one connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub(crate) header_read: Duration,
    pub(crate) request: Duration,
    pub(crate) keepalive: Duration,
}

/// Milliseconds since the server started: the clock of every phase.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock(Instant);

impl Clock {
    pub(crate) fn new() -> Self {
        Self(Instant::now())
    }

    fn now_ms(self) -> u64 {
        u64::try_from(self.0.elapsed().as_millis()).unwrap_or(SINCE_MASK)
    }

    fn at(self, ms: u64) -> Instant {
        self.0 + Duration::from_millis(ms)
    }
}

const PHASE_SHIFT: u32 = 56;
const SINCE_MASK: u64 = (1 << PHASE_SHIFT) - 1;

fn pack(phase: Phase, since_ms: u64) -> u64 {
    ((phase as u64) << PHASE_SHIFT) | (since_ms & SINCE_MASK)
}

fn unpack(word: u64) -> (Phase, u64) {
    (Phase::from_bits(word >> PHASE_SHIFT), word & SINCE_MASK)
}

/// What the driver does when a phase's deadline passes (with the reason it counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// Let hyper finish what it is doing and close.
    Close(&'static str),
    /// Drop the connection now.
    Drop(&'static str),
}

impl Action {
    fn reason(self) -> &'static str {
        match self {
            Self::Close(r) | Self::Drop(r) => r,
        }
    }
}

/// Shared state of one connection.
#[derive(Debug)]
pub(crate) struct ConnState {
    clock: Clock,
    /// Phase (top byte) and the millisecond it began (the rest): one word, so readers never see
    /// a phase with another phase's start.
    word: AtomicU64,
    /// Asks the driver to close gracefully (reclaimed at the cap, or server shutdown).
    close: Notify,
    /// Asks the driver to drop the connection now (evicted at the cap).
    evict: Notify,
    /// The server's "room can be made" signal: a connection became idle (reclaimable) or silent
    /// (evictable). Wakes an accept waiting at the cap, so it can make room without polling.
    room: Arc<Notify>,
}

impl ConnState {
    pub(crate) fn new(clock: Clock, room: Arc<Notify>) -> Self {
        Self {
            clock,
            word: AtomicU64::new(pack(Phase::Fresh, clock.now_ms())),
            close: Notify::new(),
            evict: Notify::new(),
            room,
        }
    }

    /// The current phase and when it began.
    pub(crate) fn phase(&self) -> (Phase, u64) {
        unpack(self.word.load(Ordering::Acquire))
    }

    /// Moves `from` → `to` (starting now) if the connection is in `from`.
    fn transition(&self, from: Phase, to: Phase) -> bool {
        let now = self.clock.now_ms();
        self.word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                (unpack(w).0 == from).then_some(pack(to, now))
            })
            .is_ok()
    }

    /// Bytes arrived: on an idle connection, a new request head begins.
    fn on_bytes(&self) {
        if self.phase().0 == Phase::Idle {
            self.transition(Phase::Idle, Phase::Head);
        }
    }

    /// Everything the client sent has been read and more is awaited: a fresh connection whose
    /// head is not complete is silent from now on (its header deadline still counts from the
    /// accept).
    fn on_drained(&self) {
        if self.phase().0 != Phase::Fresh {
            return;
        }
        let silent = self
            .word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                let (phase, since) = unpack(w);
                (phase == Phase::Fresh).then_some(pack(Phase::Silent, since))
            })
            .is_ok();
        if silent {
            self.room.notify_one();
        }
    }

    /// The head is complete and the request is being served (unless the connection was just
    /// evicted: it is being dropped).
    fn on_request(&self) {
        let now = self.clock.now_ms();
        let _ = self
            .word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                (unpack(w).0 != Phase::Evicted).then_some(pack(Phase::Request, now))
            });
    }

    /// The answer is done; the connection waits for the next request.
    fn on_answered(&self) {
        if self.transition(Phase::Request, Phase::Idle) {
            self.room.notify_one();
        }
    }

    /// At the connection cap: claims this connection for dropping if it is silent.
    pub(crate) fn evict(&self) -> bool {
        let claimed = self.transition(Phase::Silent, Phase::Evicted);
        if claimed {
            self.evict.notify_one();
        }
        claimed
    }

    /// At the connection cap: claims this connection for closing if it is idle.
    pub(crate) fn reclaim(&self) -> bool {
        let claimed = self.transition(Phase::Idle, Phase::Closing);
        if claimed {
            self.close.notify_one();
        }
        claimed
    }

    /// Asks the connection to close once it has answered what it is serving (shutdown).
    pub(crate) fn request_close(&self) {
        self.close.notify_one();
    }

    /// The deadline of the current phase, and what happens then. `closing_since`: when the
    /// driver started a graceful close (an idle connection then has one header timeout to go).
    fn due(&self, t: &Timeouts, closing_since: Option<u64>) -> (u64, Action) {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(SINCE_MASK);
        let (phase, since) = self.phase();
        match (phase, closing_since) {
            (Phase::Fresh | Phase::Silent | Phase::Head, _) => {
                (since + ms(t.header_read), Action::Drop("header_timeout"))
            }
            (Phase::Request, _) => (
                since + ms(t.request) + ms(t.header_read),
                Action::Drop("stalled"),
            ),
            (Phase::Idle, None) => (since + ms(t.keepalive), Action::Close("keepalive_timeout")),
            (Phase::Idle, Some(c)) => (c + ms(t.header_read), Action::Drop("stalled")),
            (Phase::Closing, _) => (since + ms(t.header_read), Action::Drop("stalled")),
            (Phase::Evicted, _) => (since, Action::Drop("evicted")),
        }
    }
}

/// The socket, reporting arriving bytes to the connection's phase.
#[derive(Debug)]
pub(crate) struct TrackedIo {
    stream: TcpStream,
    state: Arc<ConnState>,
}

impl TrackedIo {
    pub(crate) fn new(stream: TcpStream, state: Arc<ConnState>) -> Self {
        Self { stream, state }
    }
}

impl AsyncRead for TrackedIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut me.stream).poll_read(cx, buf);
        match polled {
            Poll::Ready(Ok(())) if buf.filled().len() > before => me.state.on_bytes(),
            Poll::Pending => me.state.on_drained(),
            _ => {}
        }
        polled
    }
}

impl AsyncWrite for TrackedIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// An answer's body; when hyper is done with it the connection becomes idle.
#[derive(Debug)]
pub(crate) struct TrackedBody {
    inner: Body,
    state: Arc<ConnState>,
}

impl Drop for TrackedBody {
    fn drop(&mut self) {
        self.state.on_answered();
    }
}

impl http_body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The router as one connection's hyper service.
#[derive(Debug, Clone)]
pub(crate) struct ConnService {
    pub(crate) router: Router,
    pub(crate) state: Arc<ConnState>,
}

type Answer = Result<Response<TrackedBody>, Infallible>;

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response<TrackedBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Answer> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        self.state.on_request();
        let state = self.state.clone();
        let answer = self.router.clone().oneshot(req.map(Body::new));
        Box::pin(async move {
            let res = answer.await?;
            Ok(res.map(|inner| TrackedBody { inner, state }))
        })
    }
}

/// A served connection over `I`: the socket ([`TrackedIo`]) or TLS over it.
pub(crate) type Connection<I> = http1::Connection<TokioIo<I>, ConnService>;

/// The TLS handshake of a connection on the HTTPS listener, bounded like a request head: by the
/// header read timeout from the accept, by eviction at the cap (a silent socket) and by shutdown.
/// `None` when the connection is dropped instead (counted under its reason).
pub(crate) async fn handshake(
    acceptor: tokio_rustls::TlsAcceptor,
    io: TrackedIo,
    state: &ConnState,
    t: Timeouts,
    metrics: &Metrics,
) -> Option<tokio_rustls::server::TlsStream<TrackedIo>> {
    let clock = state.clock;
    let mut accept = std::pin::pin!(acceptor.accept(io));
    loop {
        let (deadline, action) = state.due(&t, None);
        tokio::select! {
            done = accept.as_mut() => {
                return match done {
                    Ok(tls) => Some(tls),
                    Err(e) => {
                        metrics.count_close("tls_handshake");
                        tracing::debug!(error = %e, "TLS handshake failed");
                        None
                    }
                };
            }
            () = state.evict.notified() => {
                metrics.count_close("evicted");
                tracing::debug!("silent connection evicted at the connection cap");
                return None;
            }
            // Shutdown: nothing is being served yet.
            () = state.close.notified() => return None,
            () = tokio::time::sleep_until(clock.at(deadline)) => {
                if clock.now_ms() < state.due(&t, None).0 {
                    continue;
                }
                metrics.count_close(action.reason());
                tracing::debug!(reason = action.reason(), "connection dropped during the TLS handshake");
                return None;
            }
        }
    }
}

/// Drives `conn` to its end under the phase limits, closing gracefully when asked (reclaimed,
/// shutdown), dropping it when evicted or when a phase overstays.
pub(crate) async fn drive<I>(
    conn: Connection<I>,
    state: Arc<ConnState>,
    t: Timeouts,
    metrics: &Metrics,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let clock = state.clock;
    let mut conn = std::pin::pin!(conn);
    let mut closing_since: Option<u64> = None;
    loop {
        let (deadline, _) = state.due(&t, closing_since);
        tokio::select! {
            ended = conn.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            () = state.evict.notified() => {
                metrics.count_close("evicted");
                tracing::debug!("silent connection evicted at the connection cap");
                return;
            }
            () = state.close.notified(), if closing_since.is_none() => {
                conn.as_mut().graceful_shutdown();
                closing_since = Some(clock.now_ms());
            }
            () = tokio::time::sleep_until(clock.at(deadline)) => {
                let (deadline, action) = state.due(&t, closing_since);
                if clock.now_ms() < deadline {
                    continue; // the phase moved on meanwhile
                }
                metrics.count_close(action.reason());
                match action {
                    // Returning drops hyper's connection and closes the socket.
                    Action::Drop(reason) => {
                        tracing::debug!(reason, "connection dropped");
                        return;
                    }
                    Action::Close(_) => {
                        conn.as_mut().graceful_shutdown();
                        closing_since = Some(clock.now_ms());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Unit tests of `server::conn`: phase packing and the per-connection state machine.

    use super::*;

    #[test]
    fn phase_word_round_trips() {
        for phase in [Phase::Head, Phase::Request, Phase::Idle, Phase::Closing] {
            assert_eq!(unpack(pack(phase, 123_456)), (phase, 123_456));
        }
    }

    #[tokio::test]
    async fn phases_move_only_along_the_allowed_edges() {
        let state = ConnState::new(Clock::new(), Arc::default());
        let t = Timeouts {
            header_read: Duration::from_millis(100),
            request: Duration::from_millis(1000),
            keepalive: Duration::from_millis(5000),
        };
        assert_eq!(state.phase().0, Phase::Fresh);
        assert!(
            !state.reclaim(),
            "a connection reading its head is not reclaimable"
        );
        assert!(!state.evict(), "nor evictable before it has been read");
        assert_eq!(state.due(&t, None).1, Action::Drop("header_timeout"));
        let accepted = state.phase().1;
        state.on_bytes(); // a first byte of a head
        state.on_drained(); // and nothing more yet
        assert_eq!(
            state.phase(),
            (Phase::Silent, accepted),
            "silent since the accept"
        );
        assert_eq!(state.due(&t, None).1, Action::Drop("header_timeout"));
        state.on_request();
        state.on_bytes(); // body bytes do not start a new head
        assert_eq!(state.phase().0, Phase::Request);
        state.on_answered();
        assert_eq!(state.phase().0, Phase::Idle);
        assert_eq!(state.due(&t, None).1, Action::Close("keepalive_timeout"));
        state.on_bytes();
        assert_eq!(state.phase().0, Phase::Head);
        state.on_request();
        state.on_answered();
        assert!(state.reclaim());
        assert_eq!(state.phase().0, Phase::Closing);
        state.on_bytes();
        assert_eq!(
            state.phase().0,
            Phase::Closing,
            "a reclaimed connection stays closing"
        );
    }

    #[tokio::test]
    async fn only_silent_connections_are_evictable_and_eviction_sticks() {
        let state = ConnState::new(Clock::new(), Arc::default());
        state.on_drained();
        assert_eq!(state.phase().0, Phase::Silent);
        assert!(state.evict());
        assert_eq!(state.phase().0, Phase::Evicted);
        state.on_request(); // a head completing at the same moment
        assert_eq!(
            state.phase().0,
            Phase::Evicted,
            "an evicted connection is dropped"
        );
        assert!(!state.evict(), "evicted once");

        let used = ConnState::new(Clock::new(), Arc::default());
        used.on_request();
        used.on_answered();
        used.on_bytes(); // the next head begins...
        used.on_drained(); // ...slowly
        assert_eq!(used.phase().0, Phase::Head);
        assert!(
            !used.evict(),
            "a connection that completed a request is never evicted"
        );
    }
}
