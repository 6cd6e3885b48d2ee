//! The one error type every handler returns, and how it reaches the client: a status and a
//! JSON body `{"error": reason}`. A thing the caller may not read is refused exactly as a
//! missing one, so no status or wording tells them apart.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("a valid API token is required (Authorization: Bearer TOKEN)")]
    Unauthenticated,
    /// Missing, or present but not readable by the caller: the same refusal.
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    BadRequest(String),
    /// Well-formed but refused by a rule (a symbolic link in a pack, a budget exceeded).
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    TooLarge(String),
    /// A run token whose run was stopped on the controller: its engine is told to stop
    /// (docs/controller.md, "Engines outside the controller"), never by a plain 401.
    #[error("{0}")]
    Stopped(String),
    #[error("internal error")]
    Internal(#[from] anyhow::Error),
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        ApiError::Internal(e.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = match &self {
            ApiError::Unauthenticated => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Refused(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Stopped(_) => {
                return (
                    StatusCode::GONE,
                    Json(serde_json::json!({ "error": self.to_string(), "stopped": true })),
                )
                    .into_response()
            }
            ApiError::Internal(e) => {
                // The detail stays on the operator's side: it may name paths or the database.
                eprintln!("controller: internal error: {e:#}");
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        (
            status,
            Json(serde_json::json!({ "error": self.to_string() })),
        )
            .into_response()
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
