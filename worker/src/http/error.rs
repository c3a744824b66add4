//! Errors as clients see them: a status and a JSON body with a message a
//! person can act on (and Retry-After when waiting will help).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::service::{Refusal, RequestError, VkError};

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self { status, message: message.into(), retry_after: None }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 503: this worker is draining.
    pub fn shutting_down() -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "provd is shutting down; send the job to another worker")
            .retry_after(10)
    }

    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }
}

impl From<RequestError> for ApiError {
    fn from(e: RequestError) -> Self {
        match e.refusal() {
            Refusal::BadInput => Self::bad_request(e.to_string()),
            Refusal::TooLarge => Self::new(StatusCode::PAYLOAD_TOO_LARGE, e.to_string()),
            Refusal::UnsupportedBody => Self::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, e.to_string()),
            Refusal::Conflict => Self::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
            Refusal::Busy => Self::new(StatusCode::TOO_MANY_REQUESTS, e.to_string()).retry_after(5),
            Refusal::Unavailable => Self::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()).retry_after(10),
            Refusal::ShuttingDown => Self::shutting_down(),
        }
    }
}

impl From<crate::service::Unavailable> for ApiError {
    fn from(e: crate::service::Unavailable) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()).retry_after(5)
    }
}

impl From<VkError> for ApiError {
    fn from(e: VkError) -> Self {
        match &e {
            VkError::UnknownCircuit(_) => Self::new(StatusCode::NOT_FOUND, e.to_string()),
            VkError::Encoding(_) => Self::bad_request(e.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = super::wire::ErrorBody { error: self.message, status: self.status.as_u16() };
        let mut res = (self.status, axum::Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            res.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        res
    }
}
