//! Extractors whose rejections are the API's JSON errors, so that a
//! malformed body, query or path gets the same shape as every other error.

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::{ApiError, AppState};

/// A JSON body (`Content-Type: application/json`), or a 400/413/415 JSON error.
pub struct Json<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Arc<AppState>> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, ApiError> {
        // A body declared larger than the limit is refused before any of it
        // is read (not after waiting for bytes that will be refused anyway).
        let limit = state.service.config.server.max_body_bytes;
        let declared = req
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(too_large(limit));
        }
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(Json(v)),
            Err(JsonRejection::BytesRejection(e)) if super::stalled(&e) => Err(super::stalled_body(state)),
            Err(e) => Err(json_rejection(e, state.service.config.server.max_body_bytes)),
        }
    }
}

fn json_rejection(e: JsonRejection, limit: usize) -> ApiError {
    match &e {
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send the body as JSON with 'Content-Type: application/json'",
        ),
        _ if e.status() == StatusCode::PAYLOAD_TOO_LARGE => too_large(limit),
        _ => ApiError::bad_request(format!("invalid request body: {}", e.body_text())),
    }
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body over {limit} bytes (server.max_body_bytes)"),
    )
}

/// A query string, or a 400 JSON error naming the bad parameter.
pub struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(v)| Query(v))
            .map_err(|e: QueryRejection| ApiError::bad_request(format!("invalid query: {}", e.body_text())))
    }
}

/// Path parameters, or a 400 JSON error (bad percent-encoding, say).
pub struct Path<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(v)| Path(v))
            .map_err(|e| ApiError::bad_request(format!("invalid path: {}", e.body_text())))
    }
}
