//! Errors as clients see them: a status and a JSON body with a message a
//! person can act on (and Retry-After when waiting will help).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::service::{RequestError, VkError};

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

    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }
}

impl From<RequestError> for ApiError {
    fn from(e: RequestError) -> Self {
        use crate::pipeline::SubmitError;
        match &e {
            RequestError::UnknownCircuit { .. } | RequestError::Invalid(_) => {
                Self::bad_request(e.to_string())
            }
            RequestError::QueueFull { .. } => {
                Self::new(StatusCode::TOO_MANY_REQUESTS, e.to_string()).retry_after(5)
            }
            RequestError::Submit(SubmitError::KeyReused { .. }) => {
                Self::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string())
            }
            RequestError::Submit(SubmitError::NeverFits { .. })
            | RequestError::Submit(SubmitError::Empty) => Self::bad_request(e.to_string()),
            RequestError::Witness(crate::pipeline::WitnessDoesNotFit::Never { .. }) => {
                Self::new(StatusCode::PAYLOAD_TOO_LARGE, e.to_string())
            }
            RequestError::Witness(crate::pipeline::WitnessDoesNotFit::NotNow { .. }) => {
                Self::new(StatusCode::TOO_MANY_REQUESTS, e.to_string()).retry_after(5)
            }
            RequestError::UnsupportedBody(_) => Self::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, e.to_string()),
            RequestError::TooLarge(_) => Self::new(StatusCode::PAYLOAD_TOO_LARGE, e.to_string()),
            RequestError::Submit(SubmitError::Journal(_)) => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()).retry_after(10)
            }
            RequestError::Submit(SubmitError::ShuttingDown) => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "provd is shutting down; send the job to another worker",
            )
            .retry_after(10),
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
            VkError::UnknownCircuit { .. } => Self::new(StatusCode::NOT_FOUND, e.to_string()),
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
