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
    /// A database that cannot be reached is 503 `database_unavailable` (try again); anything else
    /// the database says is a 500 (logged; no input may cause one).
    fn from(e: sqlx::Error) -> Self {
        match e {
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) | sqlx::Error::Tls(_) => {
                tracing::error!(error = %e, "database unavailable");
                let mut a = Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "database_unavailable",
                    "the database cannot be reached; try again",
                );
                a.retry_after = Some(2);
                a
            }
            e => Self::internal("database", e),
        }
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

/// Decodes a JSON body into `T`, naming the offending field on failure (422): a field of the
/// wrong shape, a lone surrogate (`\ud800`, which is not text), or a NUL character (`\u0000`,
/// which Postgres refuses in text and jsonb).
pub fn decode<T: serde::de::DeserializeOwned>(body: &[u8]) -> ApiResult<T> {
    // JSON carries a NUL only as this escape; a body without one needs no walk.
    if body.windows(6).any(|w| w == b"\\u0000") {
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
            if let Some(path) = nul_at(&v, &mut String::new()) {
                return Err(ApiError::field(path, "must not contain a NUL character"));
            }
        }
    }
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { "(body)".to_owned() } else { path };
        ApiError::field(path, e.into_inner().to_string())
    })
}

/// The path (`routes[0].alias`, `(body)` for the root) of the first string or object key in `v`
/// that holds a NUL character. `path` is the path of `v` itself.
pub fn nul_at(v: &serde_json::Value, path: &mut String) -> Option<String> {
    use serde_json::Value;
    let here = |p: &str| if p.is_empty() { "(body)".to_owned() } else { p.to_owned() };
    match v {
        Value::String(s) => s.contains('\0').then(|| here(path)),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, x)| {
            let len = path.len();
            path.push_str(&format!("[{i}]"));
            let found = nul_at(x, path);
            path.truncate(len);
            found
        }),
        Value::Object(fields) => fields.iter().find_map(|(k, x)| {
            let len = path.len();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(&k.replace('\0', "\\u0000"));
            let found = if k.contains('\0') { Some(path.clone()) } else { nul_at(x, path) };
            path.truncate(len);
            found
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nul_anywhere_is_a_field_error_at_its_path() {
        #[derive(serde::Deserialize, Debug)]
        struct T {
            #[allow(dead_code)]
            allowed_aliases: Vec<String>,
        }
        let e = decode::<T>(br#"{"allowed_aliases":["ok","ch\u0000at"]}"#).unwrap_err();
        assert_eq!((e.status.as_u16(), e.fields[0].path.as_str()), (422, "allowed_aliases[1]"));
        let e = decode::<serde_json::Value>(br#"{"a":{"b\u0000":1}}"#).unwrap_err();
        assert_eq!(e.fields[0].path, "a.b\\u0000");
        let e = decode::<T>(br#"{"allowed_aliases":["\ud800"]}"#).unwrap_err();
        assert_eq!(e.status.as_u16(), 422, "a lone surrogate is not text");
        // An escaped backslash before "u0000" is not a NUL.
        assert!(decode::<T>(br#"{"allowed_aliases":["\\u0000"]}"#).is_ok());
    }
}
