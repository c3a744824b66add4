//! What a worker answers before it has started: the listener is bound in
//! the first second, while the service loads its keys and compiles its
//! kernels (minutes for a large key), so that a liveness probe sees a live
//! process and a readiness probe is told what is going on.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

use super::{connections, ApiError};

/// Answers on `listener` while `starting` runs (the service loading its
/// keys and compiling its kernels: seconds, or minutes for a large key), and
/// returns its output: `/healthz` is 200, so that a liveness probe sees a
/// live process, and `/readyz` (every other route too) 503, saying what
/// start-up is doing and for how long. Connections still open when it ends
/// are closed.
pub async fn answer_while_starting<T>(
    listener: &tokio::net::TcpListener,
    limits: &crate::config::ServerConfig,
    progress: &crate::service::StartProgress,
    starting: impl std::future::Future<Output = T>,
) -> T {
    let progress = progress.clone();
    let unready = move || {
        let said = progress.describe();
        async move { ApiError::new(StatusCode::SERVICE_UNAVAILABLE, said).retry_after(5) }
    };
    let routes = Router::new()
        .route(
            "/healthz",
            get(|| async { axum::Json(serde_json::json!({"status": "ok", "starting": true})) }),
        )
        .fallback(unready);
    let metrics = Arc::new(crate::telemetry::Metrics::new());
    let (done, out) = tokio::sync::oneshot::channel();
    let starting = async move {
        let _ = done.send(starting.await);
    };
    let open = connections::accept_until(listener, routes, limits, metrics, starting).await;
    // A kept-alive connection must not go on answering "starting": each is
    // closed once its answer is out (a second at most).
    let _ = tokio::time::timeout(Duration::from_secs(1), open.shutdown()).await;
    out.await.expect("start-up ends before its listener stops")
}
