//! Route handlers: each takes typed input from the extractors, asks the
//! [`Service`](crate::service::Service), and answers with a wire type or an
//! [`ApiError`].

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{FromRequest, Request, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream, StreamExt};

use super::extract::{Json, Path, Query};
use super::wire::{
    Accepted, CircuitsView, Health, JobView, ProveQuery, ProveRequest, Ready, StatusConfig, StatusView,
    VkQuery,
};
use super::{ApiError, AppState};
use crate::pipeline::{Door, JobId};
use crate::service::{RequestKey, SubmitOptions, Waited, Witnesses};

/// Runs blocking service work off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("internal error: {e}")))
}

/// The `Idempotency-Key` header: 1 to 255 visible ASCII characters, one
/// request per key (a different request under it is refused).
fn idempotency_key(headers: &axum::http::HeaderMap) -> Result<Option<RequestKey>, ApiError> {
    let Some(v) = headers.get("idempotency-key") else { return Ok(None) };
    let key = v
        .to_str()
        .ok()
        .map(str::trim)
        .filter(|k| (1..=255).contains(&k.len()) && k.bytes().all(|b| b.is_ascii_graphic()));
    key.map(|k| Some(RequestKey::Idempotency(k.to_string())))
        .ok_or_else(|| ApiError::bad_request("Idempotency-Key must be 1 to 255 visible ASCII characters"))
}

/// `POST /v1/prove`: a JSON job (`{"circuit", "partitions"}`), or one
/// partition's witness as a binary body (`Content-Type:
/// application/octet-stream`, `?circuit=NAME`) for kinds whose witnesses are
/// large; the binary body's limit is the circuit's witness size, and its
/// bytes are held against the memory budget before the body is read.
pub async fn prove(
    State(state): State<Arc<AppState>>,
    Query(q): Query<ProveQuery>,
    req: Request,
) -> Result<Response, ApiError> {
    let submitted = submit(&state, &q, req).await;
    state.service.count_request(Door::Http, submitted.as_ref().ok());
    let submitted = submitted?;
    let (id, replayed) = (submitted.id(), matches!(submitted, crate::service::Submitted::Existing(_)));
    if q.wait {
        let status = match state.service.ended(id, None).await? {
            Waited::Ended(status) => status,
            Waited::Unknown | Waited::TimedOut => {
                return Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "job vanished"))
            }
        };
        let res = (StatusCode::OK, axum::Json(JobView::new(&status, &state.service, true))).into_response();
        return Ok(mark_replayed(res, replayed));
    }
    let body = Accepted { job_id: id.to_string(), status_url: format!("/v1/jobs/{id}") };
    let res = (StatusCode::ACCEPTED, [(header::LOCATION, body.status_url.clone())], axum::Json(body))
        .into_response();
    Ok(mark_replayed(res, replayed))
}

/// Reads a `POST /v1/prove` request (JSON or a binary witness) and submits it.
async fn submit(
    state: &Arc<AppState>,
    q: &ProveQuery,
    req: Request,
) -> Result<crate::service::Submitted, ApiError> {
    if state.draining.load(Ordering::Acquire) {
        return Err(ApiError::shutting_down());
    }
    let key = idempotency_key(req.headers())?;
    let service = state.service.clone();
    let submitted = if is_binary(req.headers()) {
        let circuit = q.circuit.clone().ok_or_else(|| {
            ApiError::bad_request(
                "a binary witness names its circuit in the query: POST /v1/prove?circuit=NAME",
            )
        })?;
        let (limit, held) = service.hold_binary_witness(&circuit)?;
        let too_large = || {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is larger than a witness of {circuit} ({limit} bytes)"),
            )
        };
        let declared =
            req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit) {
            return Err(too_large());
        }
        // Read into one buffer of the witness's size (already held against the budget).
        let mut body = Vec::with_capacity(declared.unwrap_or(limit).min(limit) as usize);
        let mut chunks = req.into_body().into_data_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| match super::stalled(&e) {
                true => super::stalled_body(state),
                false => ApiError::bad_request(format!("reading the body: {e}")),
            })?;
            if (body.len() + chunk.len()) as u64 > limit {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        let witnesses = Witnesses::Binary { bytes: body, held };
        let options = SubmitOptions { priority: q.priority, key, door: Door::Http };
        blocking(move || service.submit_witnesses(&circuit, witnesses, options)).await??
    } else {
        if q.circuit.is_some() || q.priority.is_some() {
            return Err(ApiError::bad_request(
                "?circuit= and ?priority= are for binary witness bodies; a JSON body gives them inside \
                 (\"circuit\", \"priority\")",
            ));
        }
        let Json(req) = Json::<ProveRequest>::from_request(req, state).await?;
        let circuit = req.circuit.clone();
        let options = SubmitOptions { priority: req.priority, key, door: Door::Http };
        let job = req.job().map_err(ApiError::bad_request)?;
        blocking(move || service.submit_job(&circuit, job, options)).await??
    };
    Ok(submitted)
}

/// Whether the body is a binary witness (`application/octet-stream`).
fn is_binary(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/octet-stream"))
}

/// `Idempotent-Replayed: true` on the answer to a retry.
fn mark_replayed(mut res: Response, replayed: bool) -> Response {
    if replayed {
        res.headers_mut().insert("idempotent-replayed", header::HeaderValue::from_static("true"));
    }
    res
}

fn parse_id(id: &str) -> Result<JobId, ApiError> {
    id.parse().map_err(|_| ApiError::new(StatusCode::NOT_FOUND, format!("no job '{id}' (job ids are UUIDs)")))
}

fn unknown(id: JobId) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("no job {id} (unknown, or its result has expired)"))
}

pub async fn job(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<axum::Json<JobView>, ApiError> {
    let id = parse_id(&id)?;
    let service = state.service.clone();
    let status = blocking(move || service.job(id)).await??.ok_or_else(|| unknown(id))?;
    Ok(axum::Json(JobView::new(&status, &state.service, true)))
}

pub async fn cancel(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<axum::Json<JobView>, ApiError> {
    let id = parse_id(&id)?;
    let service = state.service.clone();
    let status = blocking(move || service.cancel(id)).await??.ok_or_else(|| unknown(id))?;
    Ok(axum::Json(JobView::new(&status, &state.service, true)))
}

pub async fn circuits(State(state): State<Arc<AppState>>) -> axum::Json<CircuitsView> {
    axum::Json(CircuitsView::new(&state.service))
}

/// The verifying key, in the circuit kind's encodings (`?encoding=`).
pub async fn verifying_key(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    Query(q): Query<VkQuery>,
) -> Result<Response, ApiError> {
    let (encoding, bytes) = state.service.verifying_key(&name, q.encoding.as_deref())?;
    let disposition = format!("attachment; filename=\"{name}.{}\"", encoding.extension());
    Ok((
        [
            (header::CONTENT_TYPE, encoding.content_type().to_string()),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        bytes,
    )
        .into_response())
}

pub async fn status(State(state): State<Arc<AppState>>) -> Result<axum::Json<StatusView>, ApiError> {
    let service = state.service.clone();
    let snapshot = blocking(move || service.snapshot()).await?;
    let p = &state.service.config.pipeline;
    Ok(axum::Json(StatusView {
        snapshot,
        backends: state.service.backends(),
        draining: state.draining.load(Ordering::Acquire),
        config: StatusConfig {
            partition_permits: p.partition_permits,
            critical_permits: p.critical_permits,
            gpu_queue_capacity: p.gpu_queue_capacity,
            priority_aging_secs: p.priority_aging_secs,
            verify_proofs: p.verify_proofs,
        },
    }))
}

/// Server-Sent Events: the recent history first (event "history"), then one
/// snapshot per second (event "snapshot") with the recent jobs; ends on shutdown.
/// One open `/v1/events` stream, counted until it is dropped.
struct OpenStream(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

pub async fn events(
    State(state): State<Arc<AppState>>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let limit = state.service.config.server.max_event_streams;
    let open = OpenStream(state.event_streams.clone());
    if open.0.fetch_add(1, Ordering::AcqRel) >= limit {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{limit} event streams are open (server.max_event_streams); retry later"),
        )
        .retry_after(10));
    }
    let history = state.service.history();
    let first = Event::default().event("history").json_data(&history).unwrap_or_default();
    let rx = state.ticks.subscribe();
    let mut closing = state.closing.subscribe();
    // The ticker encodes each snapshot once for every stream.
    let ticks = tokio_stream::wrappers::BroadcastStream::new(rx).filter_map(|data| async move {
        Some(Ok(Event::default().event("snapshot").data(data.ok()?.as_str())))
    });
    let stream = stream::once(async move { Ok(first) }).chain(ticks).take_until(async move {
        let _ = closing.wait_for(|c| *c).await;
    });
    // The stream carries its count: closing it (the client leaving) frees its place.
    let stream = stream.map(move |event| {
        let _counted = &open;
        event
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

pub async fn metrics(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    let service = state.service.clone();
    let text = blocking(move || service.metrics_text()).await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response())
}

pub async fn healthz() -> axum::Json<Health> {
    axum::Json(Health { ok: true })
}

/// Ready when not draining and the critical class's queue has room. Each
/// class has its own queue bound, and a full queue of sealing work must not
/// take the worker out of rotation while it still takes a WinningPoSt: such
/// work is refused with 429 and `Retry-After` instead.
/// The reason it is not ready in full (database errors, paths) only to a
/// caller with the token, where one is set: the route is unauthenticated.
pub async fn readyz(
    State(state): State<Arc<AppState>>,
    headers: axum::http::HeaderMap,
) -> Result<axum::Json<Ready>, ApiError> {
    let queued = state.service.queued_partitions();
    let limit = state.service.config.server.max_queued_partitions;
    if state.draining.load(Ordering::Acquire) {
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting down"));
    }
    if let Some(why) = state.service.unready() {
        let why = match super::authorized(&state, &headers) {
            true => why.to_string(),
            false => why.summary().to_string(),
        };
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, why).retry_after(5));
    }
    let critical = state.service.queued_of(crate::pipeline::Priority::Critical);
    if critical >= limit {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("queue full ({critical}/{limit} critical partitions waiting)"),
        )
        .retry_after(5));
    }
    Ok(axum::Json(Ready { ready: true, queued_partitions: queued }))
}

/// A method the route does not take: 405 with the JSON error.
pub async fn method_not_allowed() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "this route does not take that method (see docs/API.md)")
}
