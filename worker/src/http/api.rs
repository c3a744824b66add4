//! Route handlers. Request bodies are parsed here (not by an extractor) so
//! that every malformed body gets the same JSON error shape.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, Stream, StreamExt};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{ApiError, AppState};
use crate::pipeline::{JobId, JobStatus, Stage, SubmitError};
use crate::service::{format_scalar, PartitionRequest, RequestError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProveRequest {
    circuit: String,
    partitions: Vec<PartitionRequest>,
}

#[derive(Deserialize)]
pub struct ProveQuery {
    #[serde(default)]
    wait: bool,
}

pub async fn prove(
    State(state): State<Arc<AppState>>,
    Query(q): Query<ProveQuery>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    if state.draining.load(Ordering::Acquire) {
        return Err(RequestError::Submit(SubmitError::ShuttingDown).into());
    }
    let body = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "request body over {} bytes (server.max_body_bytes)",
                    state.service.config.server.max_body_bytes
                ),
            )
        } else {
            ApiError::bad_request(format!("cannot read the request body: {e}"))
        }
    })?;
    let req: ProveRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "invalid request: {e}; expected {{\"circuit\": \"bench-14\", \"partitions\": [{{\"seed\": 1}}]}}"
        ))
    })?;
    let service = state.service.clone();
    let id = tokio::task::spawn_blocking(move || service.submit(&req.circuit, req.partitions))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    if q.wait {
        let service = state.service.clone();
        let status = tokio::task::spawn_blocking(move || service.engine.wait(id, None))
            .await
            .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
            .ok_or_else(|| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "job vanished"))?;
        return Ok((StatusCode::OK, Json(job_json(&status))).into_response());
    }
    let body = json!({ "job_id": id.to_string(), "status_url": format!("/v1/jobs/{id}") });
    Ok((StatusCode::ACCEPTED, [(header::LOCATION, format!("/v1/jobs/{id}"))], Json(body)).into_response())
}

fn parse_id(id: &str) -> Result<JobId, ApiError> {
    id.parse()
        .map_err(|_| ApiError::new(StatusCode::NOT_FOUND, format!("no job '{id}' (job ids are numbers)")))
}

fn unknown(id: JobId) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("no job {id} (unknown, or its result has expired)"))
}

pub async fn job(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&id)?;
    let status = state.service.engine.status(id).ok_or_else(|| unknown(id))?;
    Ok(Json(job_json(&status)))
}

pub async fn cancel(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&id)?;
    if !state.service.engine.cancel(id) {
        return Err(unknown(id));
    }
    let status = state.service.engine.status(id).ok_or_else(|| unknown(id))?;
    Ok(Json(job_json(&status)))
}

/// The job document: state, per-partition stages and timings, proofs.
pub fn job_json(s: &JobStatus) -> Value {
    job_value(s, true)
}

/// A job without its proofs and public inputs, for the live view's table.
pub fn job_summary(s: &JobStatus) -> Value {
    job_value(s, false)
}

fn job_value(s: &JobStatus, results: bool) -> Value {
    let state = match s.outcome {
        Some(o) => o.name(),
        None if s.partitions.iter().all(|p| p.stage == Stage::Queued) => "queued",
        None => "running",
    };
    let partitions: Vec<Value> = s
        .partitions
        .iter()
        .map(|p| {
            let mut v = json!({ "stage": p.stage, "seconds": p.times, "error": p.error });
            if results {
                v["proof"] = json!(p.proof.as_ref().map(|pr| hex::encode(pr.to_bytes())));
                v["public_inputs"] = json!((!p.public_inputs.is_empty()).then(|| p
                    .public_inputs
                    .iter()
                    .map(format_scalar)
                    .collect::<Vec<_>>()));
            }
            v
        })
        .collect();
    json!({
        "id": s.id.to_string(),
        "circuit": s.circuit,
        "state": state,
        "error": s.error,
        "elapsed_seconds": s.elapsed_seconds,
        "partitions": partitions,
    })
}

pub async fn circuits(State(state): State<Arc<AppState>>) -> Json<Value> {
    let list: Vec<Value> = state
        .service
        .circuits
        .iter()
        .map(|(name, c)| {
            json!({
                "name": name,
                "constraints": c.circuit.constraints(),
                "domain_size": c.key.domain_size(),
                "public_inputs": c.key.vk.num_public_inputs(),
                "srs_bytes": c.key.resident_bytes(),
                "partition_estimate_bytes": crate::pipeline::Footprint::of(&c.key).total(),
            })
        })
        .collect();
    Json(json!({ "circuits": list }))
}

pub async fn status(State(state): State<Arc<AppState>>) -> Json<Value> {
    let service = state.service.clone();
    let snap = tokio::task::spawn_blocking(move || service.snapshot()).await.ok();
    Json(json!({
        "snapshot": snap,
        "backends": state.service.backends,
        "draining": state.draining.load(Ordering::Acquire),
        "config": { "partition_permits": state.service.config.pipeline.partition_permits,
                    "gpu_queue_capacity": state.service.config.pipeline.gpu_queue_capacity },
    }))
}

/// Server-Sent Events: the recent history first (event "history"), then one
/// snapshot per second (event "snapshot") with the recent jobs; ends on shutdown.
pub async fn events(
    State(state): State<Arc<AppState>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
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
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let service = state.service.clone();
    let _ = tokio::task::spawn_blocking(move || service.gpu_memory()).await; // refreshes their gauges
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        state.service.engine.metrics().render(),
    )
        .into_response()
}

pub async fn healthz() -> Json<Value> {
    Json(json!({ "ok": true }))
}

/// Ready when not draining and the queue has room: a load balancer stops
/// routing to a full worker.
pub async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    let queued = state.service.engine.queued_partitions();
    let limit = state.service.config.server.max_queued_partitions;
    if state.draining.load(Ordering::Acquire) {
        return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
    }
    if queued >= limit {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("queue full ({queued}/{limit} partitions)"),
        )
        .retry_after(5)
        .into_response();
    }
    Json(json!({ "ready": true, "queued_partitions": queued })).into_response()
}
