//! The HTTP/1.1 server: the accept loop, the connection cap, per-connection time limits and
//! graceful shutdown. It replaces `axum::serve`, which has neither a header read timeout nor a
//! connection cap, so one slow or idle client could hold memory and a socket forever.
//!
//! Bounds, per `HttpSettings`:
//! - **Connections**: at most `HTTP_MAX_CONNECTIONS` are served. At the cap the server makes
//!   room for a new connection, in this order:
//!   1. it drops the oldest *silent* connection: one that has not completed a request head since
//!      it was accepted, and has nothing more to read (it sends nothing, or trickles a head);
//!   2. while a just-accepted connection has not been read yet (it will soon be silent or
//!      serving), it waits for that;
//!   3. it closes the longest-idle keep-alive connection (as nginx does);
//!   4. otherwise it waits until a connection ends, becomes idle or silent (it is woken, not
//!      polled).
//!
//!   So a flood of silent or trickling sockets only ever pushes out its own kind: connections
//!   that have completed a request (the edge's pooled ones) are never closed for it, and new
//!   clients are served at once instead of waiting out the header timeout. (A per-peer cap
//!   would not do: behind a load balancer, or in tests, every peer is the same address.)
//!   Beyond the cap the server holds at most one accepted socket, never a task or a buffer per
//!   waiting client; the rest wait in the kernel's listen backlog, which [`bind`] makes
//!   [`LISTEN_BACKLOG`] deep so a burst of clients is queued rather than dropped (a dropped SYN
//!   costs the client a 1, 3, 7… second retransmission; with the standard library's 128, 1,000
//!   simultaneous connects beyond the cap took over two minutes).
//! - **Time**: each connection's phase has a limit (`conn`): a head must arrive within
//!   `HTTP_HEADER_READ_TIMEOUT_MS` (slowloris), a body within `HTTP_BODY_READ_TIMEOUT_MS` (408),
//!   an answer within `HTTP_REQUEST_TIMEOUT_MS` (503), an idle connection lives
//!   `HTTP_KEEPALIVE_TIMEOUT_SECS`.
//! - **Heads**: the HTTP parser buffers at most 2 × `HTTP_MAX_HEADER_BYTES` of head and 100 header
//!   fields; beyond either it answers a bare `431 Request Header Fields Too Large` (no body: hyper
//!   writes it) and closes. Between the limit and twice it, `routes::limits` answers 431
//!   problem+json.
//!
//! Shutdown: stop accepting, close idle connections, let every request in progress finish (each
//! is bounded by the limits above), return when the last connection has ended.
//!
//! Listeners: the plain one (`LISTEN_ADDR`) and, when configured, the HTTPS one
//! (`TLS_LISTEN_ADDR`, `tls`). One accept loop serves both, so every bound above holds on both
//! and `HTTP_MAX_CONNECTIONS` counts their connections together; an HTTPS connection's TLS
//! handshake is bounded like a request head (`conn::handshake`).

pub(crate) mod conn;
pub(crate) mod tls;

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{Notify, Semaphore};

use crate::metrics::Metrics;
use crate::settings::HttpSettings;
use conn::{Clock, ConnService, ConnState, Phase, Timeouts, TrackedIo};
use tls::ServerTls;

/// Header fields hyper parses per request (its default; more is a bare 431).
const MAX_HEADER_FIELDS: usize = 100;
/// hyper's smallest allowed read buffer.
const MIN_BUF: usize = 8192;
/// Connections the kernel queues for `accept` (capped by `net.core.somaxconn`, 4096 on current
/// Linux).
pub(crate) const LISTEN_BACKLOG: u32 = 4096;
/// Pause after a failed accept (e.g. out of file descriptors) before trying again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The open connections, for making room at the cap and for shutdown.
#[derive(Debug, Default, Clone)]
struct Registry {
    table: Arc<Mutex<Table>>,
    next_id: Arc<AtomicU64>,
    /// Signalled when a connection finishes an answer and idles, or turns silent (see
    /// `ConnState`).
    room: Arc<Notify>,
}

#[derive(Debug, Default)]
struct Table {
    conns: HashMap<u64, Arc<ConnState>>,
    /// Ids of connections not yet known to have completed a head, oldest first. Entries whose
    /// connection has moved on are dropped when met (a connection never becomes fresh again),
    /// and the queue is compacted when it outgrows the table, so it costs O(1) per connection.
    fresh: VecDeque<u64>,
}

/// What the server did to make room at the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Room {
    /// A connection was evicted or reclaimed; its slot is about to be free.
    Made,
    /// Nothing to close now; wait for a connection to end, idle or turn silent.
    Wait,
}

/// Removes its connection from the registry and the open-connections gauge when dropped.
struct Registered {
    registry: Registry,
    id: u64,
    metrics: Arc<Metrics>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.registry.lock().conns.remove(&self.id);
        self.metrics.http_connections.dec();
    }
}

fn is_fresh(phase: Phase) -> bool {
    matches!(phase, Phase::Fresh | Phase::Silent)
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn register(&self, state: Arc<ConnState>, metrics: Arc<Metrics>) -> Registered {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut table = self.lock();
        table.conns.insert(id, state);
        table.fresh.push_back(id);
        if table.fresh.len() > 2 * table.conns.len() + 64 {
            let Table { conns, fresh } = &mut *table;
            fresh.retain(|id| conns.get(id).is_some_and(|c| is_fresh(c.phase().0)));
        }
        drop(table);
        metrics.http_connections.inc();
        Registered {
            registry: self.clone(),
            id,
            metrics,
        }
    }

    /// At the cap: evicts the oldest silent connection; failing that, unless a just-accepted
    /// connection is still unread, closes the longest-idle one (see the module docs).
    fn make_room(&self, metrics: &Metrics) -> Room {
        let mut table = self.lock();
        let Table { conns, fresh } = &mut *table;
        let (mut i, mut unread) = (0, 0);
        while let Some(id) = fresh.get(i).copied() {
            match conns.get(&id) {
                Some(c) if c.phase().0 == Phase::Fresh => {
                    unread += 1;
                    i += 1;
                }
                Some(c) if c.phase().0 == Phase::Silent => {
                    fresh.remove(i);
                    // It may have completed its head since the check; then look further.
                    if c.evict() {
                        return Room::Made;
                    }
                }
                _ => {
                    fresh.remove(i);
                }
            }
        }
        if unread > 0 {
            return Room::Wait;
        }
        if Self::reclaim_idle(conns, metrics) {
            Room::Made
        } else {
            Room::Wait
        }
    }

    /// Closes the connection idle the longest, if any; returns whether one was reclaimed.
    fn reclaim_idle(conns: &HashMap<u64, Arc<ConnState>>, metrics: &Metrics) -> bool {
        let mut idle: Vec<(u64, &Arc<ConnState>)> = conns
            .values()
            .filter_map(|c| match c.phase() {
                (Phase::Idle, since) => Some((since, c)),
                _ => None,
            })
            .collect();
        idle.sort_by_key(|(since, _)| *since);
        // The phase may change between the scan and the claim; try the next one then.
        for (_, c) in idle {
            if c.reclaim() {
                metrics.count_close("reclaimed");
                return true;
            }
        }
        false
    }

    fn close_all(&self) {
        for c in self.lock().conns.values() {
            c.request_close();
        }
    }
}

/// A bound listener: plain HTTP, or HTTPS with the listener's (reloadable) TLS configuration.
#[derive(Debug)]
pub(crate) struct Listener {
    pub(crate) tcp: TcpListener,
    pub(crate) tls: Option<Arc<ServerTls>>,
}

/// Accepts from whichever listener has a connection, starting the scan one listener further on
/// each call so that a flood on one cannot starve the other.
fn poll_accept(
    listeners: &[Listener],
    next: &mut usize,
    cx: &mut Context<'_>,
) -> Poll<(usize, std::io::Result<TcpStream>)> {
    let count = listeners.len();
    for offset in 0..count {
        let i = (*next + offset) % count;
        if let Poll::Ready(accepted) = listeners[i].tcp.poll_accept(cx) {
            *next = (i + 1) % count;
            return Poll::Ready((i, accepted.map(|(stream, _peer)| stream)));
        }
    }
    Poll::Pending
}

/// Binds `addr` with a [`LISTEN_BACKLOG`]-deep accept queue (`TcpListener::bind` has 128).
pub(crate) fn bind(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Serves `router` on `listeners` under `limits` until `shutdown` resolves; see the module docs.
pub(crate) async fn serve(
    listeners: Vec<Listener>,
    router: Router,
    limits: &HttpSettings,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) {
    let max = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let permits = Arc::new(Semaphore::new(max as usize));
    let registry = Registry::default();
    let clock = Clock::new();
    let timeouts = Timeouts {
        header_read: limits.header_read_timeout,
        request: limits.request_timeout,
        keepalive: limits.keepalive_timeout,
    };
    let head_cap = (2 * limits.max_header_bytes).max(MIN_BUF);
    let mut builder = http1::Builder::new();
    builder
        // Time limits are ours (`conn`): hyper's header timer also runs while a connection idles.
        .header_read_timeout(None)
        .keep_alive(true)
        .max_headers(MAX_HEADER_FIELDS)
        .max_header_size(head_cap)
        .max_buf_size(head_cap);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut next = 0;
    loop {
        let (index, stream) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            (index, accepted) = std::future::poll_fn(|cx| poll_accept(&listeners, &mut next, cx)) => match accepted {
                Ok(stream) => (index, stream),
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        let permit = match permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => match wait_for_room(&permits, &registry, &metrics, &mut shutdown).await {
                Some(p) => p,
                None => break, // shutting down
            },
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        let state = Arc::new(ConnState::new(clock, registry.room.clone()));
        let registered = registry.register(state.clone(), metrics.clone());
        let service = ConnService {
            router: router.clone(),
            state: state.clone(),
        };
        let io = TrackedIo::new(stream, state.clone());
        let metrics = metrics.clone();
        match &listeners[index].tls {
            None => {
                let conn = builder.serve_connection(TokioIo::new(io), service);
                tokio::spawn(async move {
                    let _permit = permit;
                    let _registered = registered;
                    conn::drive(conn, state, timeouts, &metrics).await;
                });
            }
            Some(tls) => {
                let (acceptor, builder) = (tls.acceptor(), builder.clone());
                tokio::spawn(async move {
                    let _permit = permit;
                    let _registered = registered;
                    let Some(io) = conn::handshake(acceptor, io, &state, timeouts, &metrics).await
                    else {
                        return;
                    };
                    let conn = builder.serve_connection(TokioIo::new(io), service);
                    conn::drive(conn, state, timeouts, &metrics).await;
                });
            }
        }
    }
    drop(listeners);
    registry.close_all();
    // Every connection holds a permit until it has ended.
    let _all_ended = permits.acquire_many(max).await;
}

/// At the cap: makes room (see the module docs), or waits until a connection ends, becomes idle
/// or turns silent (then makes room). `None` when the server shuts down first.
async fn wait_for_room(
    permits: &Arc<Semaphore>,
    registry: &Registry,
    metrics: &Metrics,
    shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    loop {
        if registry.make_room(metrics) == Room::Made {
            // An evicted connection is dropped at once; a reclaimed one closes at once (at worst
            // it is dropped after a header timeout). Either hands back its permit.
            return tokio::select! {
                biased;
                () = shutdown.as_mut() => None,
                p = permits.clone().acquire_owned() => p.ok(),
            };
        }
        tokio::select! {
            biased;
            () = shutdown.as_mut() => return None,
            p = permits.clone().acquire_owned() => return p.ok(),
            () = registry.room.notified() => {}
        }
    }
}
