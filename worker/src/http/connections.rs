//! Connection slots: how many clients may hold a connection, for how long a
//! client that stops reading may hold one, and who gives way when all are
//! taken.
//!
//! Every connection has a slot (`server.max_connections`). A slot is held by
//! a client doing nothing as surely as by one being served, so two rules keep
//! a flood of such clients from taking the worker offline:
//!
//! - **Write deadline.** A write that makes no progress for
//!   `server.write_timeout_seconds` (the client does not read what it asked
//!   for) fails, and the connection closes. This holds at the connection,
//!   whatever the route: a pipelined flood of answers, a large proof, an
//!   event stream.
//! - **Displacement.** When every slot is taken, a new connection takes the
//!   slot of the one that has waited longest on its client: blocked writing to
//!   a client that does not read, or with no request in flight (idle between
//!   requests, or still sending its headers). A connection being served (a
//!   request running, a body arriving, a response being read) is never
//!   displaced. Only when none can give way is the new one closed.
//!
//! So a liveness probe gets its answer while a thousand clients sit on their
//! connections, and the clients that do read are never cut off for them.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use tower::ServiceExt;

use crate::config::ServerConfig;
use crate::telemetry::Metrics;

/// The open connections and the slots they hold.
pub(super) struct Slots {
    open: Arc<tokio::sync::Semaphore>,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
    /// The zero of every connection's timestamps.
    epoch: Instant,
    write_timeout: Duration,
}

/// What the slots know of one connection: whether it is waiting on its
/// client, and since when.
struct Conn {
    /// Milliseconds since the epoch, plus one, at which a write started to
    /// make no progress; 0 while writes go through.
    blocked_since: AtomicU64,
    /// Requests whose answers are not yet fully written.
    in_flight: AtomicUsize,
    /// Milliseconds since the epoch at which the last request ended (or the
    /// connection opened).
    idle_since: AtomicU64,
    /// Set once this connection is chosen to give way (so it is not chosen twice).
    displaced: AtomicBool,
    /// Wakes the connection's task to close it.
    close: tokio::sync::Notify,
}

impl Conn {
    /// Since when the connection has waited on its client, if it has: blocked
    /// writing, or with nothing in flight.
    fn waiting_since(&self) -> Option<u64> {
        match self.blocked_since.load(Ordering::Acquire) {
            0 if self.in_flight.load(Ordering::Acquire) == 0 => Some(self.idle_since.load(Ordering::Acquire)),
            0 => None,
            blocked => Some(blocked - 1),
        }
    }
}

/// Why a connection was closed by the worker rather than by its client.
#[derive(Clone, Copy, Debug)]
enum Closed {
    WriteTimeout,
    Displaced,
}

impl Closed {
    fn label(self) -> &'static str {
        match self {
            Closed::WriteTimeout => "write_timeout",
            Closed::Displaced => "displaced",
        }
    }
}

impl Slots {
    pub(super) fn new(limits: &ServerConfig) -> Arc<Self> {
        Arc::new(Self {
            open: Arc::new(tokio::sync::Semaphore::new(limits.max_connections)),
            conns: Mutex::default(),
            next_id: AtomicU64::new(0),
            epoch: Instant::now(),
            write_timeout: Duration::from_secs(limits.write_timeout_seconds.max(1)),
        })
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// A slot for a new connection: a free one, or the one a waiting
    /// connection gives up. None when every connection is being served.
    async fn acquire(&self, metrics: &Metrics) -> Option<tokio::sync::OwnedSemaphorePermit> {
        if let Ok(permit) = self.open.clone().try_acquire_owned() {
            return Some(permit);
        }
        self.displace_one(metrics)?;
        // The displaced connection's task drops its slot as soon as it runs.
        tokio::time::timeout(DISPLACED_WITHIN, self.open.clone().acquire_owned()).await.ok()?.ok()
    }

    /// Asks the connection that has waited longest on its client to close.
    fn displace_one(&self, metrics: &Metrics) -> Option<()> {
        let conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        let victim = conns
            .values()
            .filter(|c| !c.displaced.load(Ordering::Acquire))
            .filter_map(|c| Some((c.waiting_since()?, c)))
            .min_by_key(|(since, _)| *since)
            .map(|(_, c)| c.clone())?;
        drop(conns);
        victim.displaced.store(true, Ordering::Release);
        victim.close.notify_one();
        metrics.connections_closed.with_label_values(&[Closed::Displaced.label()]).inc();
        Some(())
    }

    fn open_conn(self: &Arc<Self>) -> (u64, Arc<Conn>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            blocked_since: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(self.now_ms()),
            displaced: AtomicBool::new(false),
            close: tokio::sync::Notify::new(),
        });
        self.conns.lock().unwrap_or_else(|e| e.into_inner()).insert(id, conn.clone());
        (id, conn)
    }

    fn close_conn(&self, id: u64) {
        self.conns.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    }
}

/// How long a new connection waits for a displaced one to give up its slot.
const DISPLACED_WITHIN: Duration = Duration::from_secs(1);

/// At most one warning per this long for connections refused over the cap.
const REFUSALS_LOGGED_EVERY: Duration = Duration::from_secs(10);

/// Serves connections from `listener` until `stop` completes; returns the
/// connections still open, to be shut down gracefully. Each connection has
/// `server.header_read_timeout_seconds` to send a request's headers (idle
/// kept-alive connections included) and `server.write_timeout_seconds` for
/// each write to make progress; beyond `server.max_connections`, a waiting
/// connection gives way (see the module's doc) or the new one is closed,
/// counted and logged at most every [`REFUSALS_LOGGED_EVERY`] (a flood of
/// them must not flood the log too).
pub(super) async fn accept_until(
    listener: &tokio::net::TcpListener,
    app: Router,
    limits: &ServerConfig,
    metrics: Arc<Metrics>,
    stop: impl std::future::Future<Output = ()>,
) -> hyper_util::server::graceful::GracefulShutdown {
    let mut unlogged = 0u64;
    let mut logged_at: Option<Instant> = None;
    let slots = Slots::new(limits);
    let header_timeout = Duration::from_secs(limits.header_read_timeout_seconds.max(1));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(stop);
    loop {
        let (stream, _peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, say: wait a little rather than spin.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => return graceful,
        };
        let Some(permit) = slots.acquire(&metrics).await else {
            drop(stream);
            metrics.connections_refused.inc();
            unlogged += 1;
            if logged_at.is_none_or(|t| t.elapsed() >= REFUSALS_LOGGED_EVERY) {
                tracing::warn!(
                    limit = limits.max_connections,
                    refused = unlogged,
                    "connections refused: too many open (server.max_connections), none waiting on its \
                     client; provd_connections_refused_total counts them all"
                );
                (unlogged, logged_at) = (0, Some(Instant::now()));
            }
            continue;
        };
        let (id, conn) = slots.open_conn();
        let io = WriteDeadline::new(stream, slots.clone(), conn.clone());
        let service =
            hyper_util::service::TowerToHyperService::new(counted(app.clone(), slots.clone(), conn.clone()));
        let served = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(header_timeout)
            .serve_connection(hyper_util::rt::TokioIo::new(io), service);
        let served = graceful.watch(served);
        let (slots, metrics) = (slots.clone(), metrics.clone());
        tokio::spawn(async move {
            tokio::select! {
                result = served => {
                    if result.as_ref().err().and_then(|e| io_kind(e)) == Some(io::ErrorKind::TimedOut) {
                        metrics.connections_closed.with_label_values(&[Closed::WriteTimeout.label()]).inc();
                    }
                }
                // Dropping the connection closes it.
                () = conn.close.notified() => {}
            }
            slots.close_conn(id);
            drop(permit);
        });
    }
}

/// The io error kind under a connection's error, if any.
fn io_kind(e: &(dyn std::error::Error + 'static)) -> Option<io::ErrorKind> {
    let mut cause = Some(e);
    while let Some(e) = cause {
        if let Some(e) = e.downcast_ref::<io::Error>() {
            return Some(e.kind());
        }
        cause = e.source();
    }
    None
}

/// The router, counting this connection's requests in flight until their
/// answers are written (or dropped), so that the slots know when it is idle.
fn counted(
    app: Router,
    slots: Arc<Slots>,
    conn: Arc<Conn>,
) -> impl tower::Service<
    axum::http::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = impl Send,
> + Clone {
    tower::service_fn(move |req: axum::http::Request<hyper::body::Incoming>| {
        let in_flight = InFlight::start(slots.clone(), conn.clone());
        let app = app.clone();
        async move {
            let response = app.oneshot(req.map(Body::new)).await?;
            Ok(response.map(|body| {
                Body::new(body.map_frame(move |frame| {
                    let _counted = &in_flight;
                    frame
                }))
            }))
        }
    })
}

/// One request in flight on a connection, until dropped.
struct InFlight {
    slots: Arc<Slots>,
    conn: Arc<Conn>,
}

impl InFlight {
    fn start(slots: Arc<Slots>, conn: Arc<Conn>) -> Self {
        conn.in_flight.fetch_add(1, Ordering::AcqRel);
        Self { slots, conn }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.conn.idle_since.store(self.slots.now_ms(), Ordering::Release);
        self.conn.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection's socket whose writes fail with `TimedOut` once they have
/// made no progress for the write timeout (and that tells the slots while
/// they are blocked).
struct WriteDeadline<S = TcpStream> {
    stream: S,
    slots: Arc<Slots>,
    conn: Arc<Conn>,
    /// Armed while a write is blocked: when it fires, the write fails.
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteDeadline<S> {
    fn new(stream: S, slots: Arc<Slots>, conn: Arc<Conn>) -> Self {
        Self { stream, slots, conn, deadline: None }
    }

    /// Passes a write's outcome through, arming the deadline when it is
    /// blocked and failing it when the deadline has passed.
    fn watch<T>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            if self.deadline.take().is_some() {
                self.conn.blocked_since.store(0, Ordering::Release);
            }
            return polled;
        }
        let deadline = self.deadline.get_or_insert_with(|| {
            self.conn.blocked_since.store(self.slots.now_ms() + 1, Ordering::Release);
            Box::pin(tokio::time::sleep(self.slots.write_timeout))
        });
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the client read nothing for {} s (server.write_timeout_seconds)",
                    self.slots.write_timeout.as_secs()
                ),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.watch(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.stream).poll_flush(cx);
        self.watch(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.stream).poll_shutdown(cx);
        self.watch(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    fn slots(write_timeout_seconds: u64, max_connections: usize) -> Arc<Slots> {
        Slots::new(&ServerConfig { write_timeout_seconds, max_connections, ..ServerConfig::default() })
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_the_client_never_reads_fails_after_the_timeout() {
        let slots = slots(3, 4);
        let (_id, conn) = slots.open_conn();
        // A peer that reads nothing: its 64-byte buffer fills and writes block.
        let (near, _far) = tokio::io::duplex(64);
        let mut io = WriteDeadline::new(near, slots.clone(), conn.clone());
        let started = Instant::now();
        let err = io.write_all(&[0u8; 4096]).await.expect_err("the write cannot finish");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        assert!(err.to_string().contains("server.write_timeout_seconds"), "{err}");
        assert_eq!(started.elapsed(), Duration::from_secs(3));
        assert!(conn.waiting_since().is_some(), "blocked: the slots may displace it meanwhile");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_that_keeps_reading_is_not_cut_off() {
        use tokio::io::AsyncReadExt;
        let slots = slots(3, 4);
        let (_id, conn) = slots.open_conn();
        let (near, mut far) = tokio::io::duplex(64);
        let mut io = WriteDeadline::new(near, slots, conn.clone());
        // 64 bytes every 2 s: each wait is under the 3 s timeout, the whole write far over it.
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 64];
            let mut got = 0;
            while got < 4096 {
                tokio::time::sleep(Duration::from_secs(2)).await;
                got += far.read(&mut buf).await.unwrap();
            }
        });
        io.write_all(&[0u8; 4096]).await.expect("a reader that makes progress is served");
        reader.await.unwrap();
        assert_eq!(conn.blocked_since.load(Ordering::Acquire), 0, "no longer blocked");
    }

    #[tokio::test]
    async fn the_connection_waiting_longest_on_its_client_gives_way_and_one_being_served_never() {
        let metrics = Arc::new(Metrics::new());
        let slots = slots(30, 3);
        let held: Vec<_> = (0..3).map(|_| slots.open.clone().try_acquire_owned().unwrap()).collect();
        let (_, served) = slots.open_conn();
        let (_, idle) = slots.open_conn();
        let (_, blocked) = slots.open_conn();
        served.in_flight.store(1, Ordering::Release);
        served.idle_since.store(0, Ordering::Release);
        idle.idle_since.store(500, Ordering::Release);
        blocked.in_flight.store(1, Ordering::Release);
        blocked.blocked_since.store(100 + 1, Ordering::Release);
        // Blocked since 100 ms waited longer than idle since 500 ms; the one
        // being served (its request in flight since 0) is never chosen.
        slots.displace_one(&metrics).unwrap();
        assert!(blocked.displaced.load(Ordering::Acquire));
        slots.displace_one(&metrics).unwrap();
        assert!(idle.displaced.load(Ordering::Acquire));
        assert!(slots.displace_one(&metrics).is_none(), "none left waiting on its client");
        assert!(!served.displaced.load(Ordering::Acquire));
        assert_eq!(metrics.connections_closed.with_label_values(&["displaced"]).get(), 2);
        // A displaced connection's slot goes to the one that asked for it.
        let (_, late) = slots.open_conn();
        let waiter = tokio::spawn({
            let (slots, metrics) = (slots.clone(), metrics.clone());
            async move { slots.acquire(&metrics).await.is_some() }
        });
        while !late.displaced.load(Ordering::Acquire) {
            tokio::task::yield_now().await;
        }
        drop(held); // the displaced connection's task lets its slot go
        assert!(waiter.await.unwrap());
    }
}
