//! One error type for the admin API, mapped to HTTP in one place: `{"error": {code, message, fields?}}`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// A field-level validation problem: `path` names the field in the request body.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

impl FieldError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self { path: path.into(), message: message.into() }
    }
}

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub fields: Vec<FieldError>,
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), fields: Vec::new(), retry_after: None }
    }
    pub fn unauthorized() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthenticated", "log in first")
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }
    pub fn not_found(what: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", format!("{what} does not exist"))
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }
    pub fn invalid(fields: Vec<FieldError>) -> Self {
        let message = fields.iter().map(|f| format!("{}: {}", f.path, f.message)).collect::<Vec<_>>().join("; ");
        Self { fields, ..Self::new(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed", message) }
    }
    pub fn field(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self::invalid(vec![FieldError::new(path, message)])
    }
    pub fn internal(context: &str, e: impl std::fmt::Display) -> Self {
        tracing::error!(error = %e, context, "internal error");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", "internal error; see the control plane's log")
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        Self::internal("database", e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = serde_json::json!({ "code": self.code, "message": self.message });
        if !self.fields.is_empty() {
            body["fields"] = serde_json::to_value(&self.fields).unwrap_or_default();
        }
        let mut resp = (self.status, axum::Json(serde_json::json!({ "error": body }))).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// Decodes a JSON body into `T`, naming the offending field on failure (422).
pub fn decode<T: serde::de::DeserializeOwned>(body: &[u8]) -> ApiResult<T> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { "(body)".to_owned() } else { path };
        ApiError::field(path, e.into_inner().to_string())
    })
}
