//! The HTTP surface: jobs, circuits and their verifying keys, status, live events,
//! Prometheus metrics, health, and graceful shutdown.

mod api;
mod connections;
mod dashboard;
mod error;
mod extract;
mod starting;
mod strict_json;
pub mod wire;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use subtle::ConstantTimeEq;
use tokio::sync::{broadcast, watch};

pub use error::ApiError;
pub use starting::answer_while_starting;

#[cfg(test)]
mod tests;

use crate::service::Service;

/// What every handler shares.
pub struct AppState {
    pub service: Arc<Service>,
    token: Option<String>,
    draining: AtomicBool,
    /// Each tick's "snapshot" event data (the snapshot and the recent jobs),
    /// encoded once for every event stream.
    ticks: broadcast::Sender<Arc<String>>,
    /// Flips to true when streams must end (shutdown).
    closing: watch::Sender<bool>,
    /// `/v1/events` streams open now (at most `server.max_event_streams`).
    event_streams: Arc<std::sync::atomic::AtomicUsize>,
}

impl AppState {
    pub fn new(service: Arc<Service>, token: Option<String>) -> Arc<Self> {
        let (ticks, _) = broadcast::channel(16);
        let (closing, _) = watch::channel(false);
        Arc::new(Self {
            service,
            token,
            draining: AtomicBool::new(false),
            ticks,
            closing,
            event_streams: Default::default(),
        })
    }
}

/// The routes: the API and /metrics behind the bearer-token check (when one
/// is set), health and the live view's files outside it.
pub fn router(state: Arc<AppState>) -> Router {
    let limit = state.service.config.server.max_body_bytes;
    Router::new()
        .route("/v1/prove", post(api::prove))
        .route("/v1/jobs/{id}", get(api::job).delete(api::cancel))
        .route("/v1/circuits", get(api::circuits))
        .route("/v1/circuits/{name}/verifying-key", get(api::verifying_key))
        .route("/v1/status", get(api::status))
        .route("/v1/events", get(api::events))
        .route("/metrics", get(api::metrics))
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth))
        .route("/healthz", get(api::healthz))
        .route("/readyz", get(api::readyz))
        .route("/runbook", get(dashboard::runbook))
        .fallback(dashboard::asset)
        .method_not_allowed_fallback(api::method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(state.clone(), same_origin))
        .layer(axum::middleware::from_fn_with_state(state.clone(), body_timeout))
        .layer(tower_http::trace::TraceLayer::new_for_http().on_failure(log_failure))
        .with_state(state)
}

/// The metrics listener's routes (`server.metrics_listen`): the Prometheus
/// exposition and liveness, no token, nothing else.
pub fn metrics_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/metrics", get(api::metrics))
        .route("/healthz", get(api::healthz))
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "this listener (server.metrics_listen) serves /metrics and /healthz only",
            )
        })
        .layer(tower_http::trace::TraceLayer::new_for_http().on_failure(log_failure))
        .with_state(state)
}

/// Logs a request that failed: at ERROR, except a 503 (draining, full, or a
/// store away: an answer the worker meant to give, with Retry-After).
fn log_failure(
    class: tower_http::classify::ServerErrorsFailureClass,
    latency: Duration,
    _span: &tracing::Span,
) {
    use tower_http::classify::ServerErrorsFailureClass::StatusCode as Status;
    match class {
        Status(StatusCode::SERVICE_UNAVAILABLE) => {
            tracing::info!(latency_ms = latency.as_millis() as u64, "answered 503 (unavailable for now)")
        }
        class => tracing::error!(latency_ms = latency.as_millis() as u64, %class, "request failed"),
    }
}

/// Bounds how long a request body may stall between its bytes
/// (`server.body_read_timeout_seconds`): a client that sends its headers
/// and then trickles or stops would otherwise hold its connection, and the
/// budget held for a binary witness, for as long as it likes.
async fn body_timeout(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let stall = Duration::from_secs(state.service.config.server.body_read_timeout_seconds.max(1));
    next.run(req.map(|body| axum::body::Body::new(tower_http::timeout::TimeoutBody::new(stall, body)))).await
}

/// Whether reading a body failed because it stalled ([`body_timeout`]).
pub(crate) fn stalled(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(e) = cause {
        if e.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        cause = e.source();
    }
    false
}

/// The 408 for a body that stalled.
pub(crate) fn stalled_body(state: &AppState) -> ApiError {
    ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        format!(
            "the request body sent nothing for {} s (server.body_read_timeout_seconds)",
            state.service.config.server.body_read_timeout_seconds
        ),
    )
}

/// Keeps browsers from driving a worker on behalf of another site: a request
/// whose `Origin` is not this worker's own address is refused (CSRF), and a
/// worker on loopback answers only requests addressed to a loopback name, so
/// a page on a domain rebound to 127.0.0.1 gets nothing (DNS rebinding).
async fn same_origin(
    State(state): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    check_origin(state.service.config.server.listen.ip().is_loopback(), req.headers())?;
    Ok(next.run(req).await)
}

fn check_origin(on_loopback: bool, headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    let get = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    let host = get(header::HOST);
    if on_loopback {
        if let Some(h) = host.filter(|h| !is_loopback_host(h)) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!("Host '{h}' is not a loopback name; this worker listens on loopback only"),
            ));
        }
    }
    if let Some(origin) = get(header::ORIGIN) {
        let origin_host = origin.split_once("://").map(|(_, rest)| rest.trim_end_matches('/'));
        if origin_host.is_none() || origin_host != host {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!("cross-origin request from '{origin}' refused: provd serves its own page only"),
            ));
        }
    }
    Ok(())
}

/// "localhost", "127.0.0.1:8080", "[::1]:80", with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':')
            .map_or(host, |(n, port)| if port.bytes().all(|b| b.is_ascii_digit()) { n } else { host })
    };
    name.eq_ignore_ascii_case("localhost")
        || name.to_ascii_lowercase().ends_with(".localhost")
        || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Bearer-token check in constant time; the token is never logged.
async fn auth(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Result<Response, ApiError> {
    if !authorized(&state, req.headers()) {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token: send 'Authorization: Bearer <token>'",
        ));
    }
    Ok(next.run(req).await)
}

/// Whether a request may see the API: no token is set, or it carries it
/// (compared in constant time).
pub(crate) fn authorized(state: &AppState, headers: &axum::http::HeaderMap) -> bool {
    let Some(token) = &state.token else { return true };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map_or("", |(_, t)| t.trim());
    bool::from(given.as_bytes().ct_eq(token.as_bytes()))
}

/// Serves until SIGTERM or SIGINT, then drains: stops accepting, lets
/// accepted jobs finish within the grace period (cancelling what is left),
/// closes event streams, and returns.
pub async fn serve(
    service: Arc<Service>,
    listener: tokio::net::TcpListener,
    token: Option<String>,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    let state = AppState::new(service.clone(), token);
    // One snapshot a second, into the history and to every event stream.
    let ticker = {
        let state = state.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(1));
            loop {
                every.tick().await;
                let s = state.clone();
                let data = tokio::task::spawn_blocking(move || {
                    let snapshot = s.service.tick();
                    let jobs: Vec<_> = s
                        .service
                        .recent_jobs(20)
                        .iter()
                        .map(|j| wire::JobView::new(j, &s.service, false))
                        .collect();
                    serde_json::json!({ "snapshot": snapshot, "jobs": jobs }).to_string()
                });
                if let Ok(data) = data.await {
                    let _ = state.ticks.send(Arc::new(data));
                }
            }
        })
    };
    let out = crate::telemetry::logging::stdout_line;
    // Bound before the first line, so that a taken port fails the start.
    let metrics_listener = match service.config.server.metrics_listen {
        Some(at) => Some(
            tokio::net::TcpListener::bind(at)
                .await
                .map_err(|e| anyhow::anyhow!("cannot listen on {at} (server.metrics_listen): {e}"))?,
        ),
        None => None,
    };
    out(&format!("provd listening on http://{addr}"));
    if let Some(listener) = metrics_listener {
        out(&format!("  metrics on http://{}/metrics (no token)", listener.local_addr()?));
        let mut closing = state.closing.subscribe();
        let (routes, limits, metrics) =
            (metrics_router(state.clone()), service.config.server.clone(), service.metrics().clone());
        tokio::spawn(async move {
            let stop = async move {
                let _ = closing.wait_for(|c| *c).await;
            };
            // Its connections end with the process.
            drop(connections::accept_until(&listener, routes, &limits, metrics, stop).await);
        });
    }
    for (name, c) in service.circuits() {
        out(&format!(
            "  serving {name} ({} kind, {} constraints, key: {})",
            c.kind(),
            c.constraints(),
            match c.key_source() {
                crate::circuits::KeySource::File { path } => path.display().to_string(),
                crate::circuits::KeySource::GeneratedTestOnly { path } =>
                    format!("{} (TEST-ONLY)", path.display()),
            }
        ));
    }
    out(&format!("  on backend {}", service.backend_names()));
    tracing::info!(%addr, auth = state.token.is_some(), "serving");
    let shutdown_state = state.clone();
    // Stops accepting once the signal came and every accepted job has ended
    // (until then, clients still fetch results; new jobs get 503).
    let drained = async move {
        shutdown_signal().await;
        tracing::info!("shutting down: no new jobs; draining accepted ones (a second signal exits at once)");
        tokio::spawn(async {
            shutdown_signal().await;
            tracing::warn!("second signal: exiting now, without waiting for accepted jobs");
            std::process::exit(130);
        });
        shutdown_state.draining.store(true, Ordering::Release);
        let grace = Duration::from_secs(shutdown_state.service.config.server.shutdown_grace_seconds);
        let s = shutdown_state.clone();
        let (done, cancelled) =
            tokio::task::spawn_blocking(move || s.service.drain(grace)).await.unwrap_or((0, 0));
        tracing::info!(done, cancelled, "accepted jobs ended");
        let _ = shutdown_state.closing.send(true);
    };
    let connections = connections::accept_until(
        &listener,
        router(state.clone()),
        &service.config.server,
        service.metrics().clone(),
        drained,
    )
    .await;
    // Connections get a moment to finish; one that does not (a client holding
    // a half-sent request) is dropped, so that shutdown ends within the grace
    // whatever clients do.
    tokio::select! {
        () = connections.shutdown() => {}
        () = tokio::time::sleep(CONNECTIONS_GRACE) => tracing::warn!(
            "connections still open {} s after the last job ended; closing them", CONNECTIONS_GRACE.as_secs()
        ),
    }
    ticker.abort();
    Ok(())
}

/// How long open connections may outlive the last accepted job at shutdown.
const CONNECTIONS_GRACE: Duration = Duration::from_secs(5);

/// SIGTERM or SIGINT (Ctrl-C), whichever comes first.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
