//! Request extractors with the admin API's JSON errors. axum's own `Path`, `Query` and `Bytes`
//! reject in plain text; these answer `{"error": …}` with a stable code, and refuse text that
//! Postgres cannot store (a NUL character) as a 422 naming the parameter.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, RawPathParamsRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, RawPathParams, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// Path parameters: 400 `invalid_path` when they do not parse, 422 naming the parameter when one
/// is not UTF-8 or holds a NUL.
pub struct ApiPath<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match RawPathParams::from_request_parts(parts, state).await {
            Ok(raw) => {
                if let Some((key, _)) = raw.iter().find(|(_, v)| v.contains('\0')) {
                    return Err(ApiError::field(key, "must not contain a NUL character"));
                }
            }
            Err(RawPathParamsRejection::InvalidUtf8InPathParam(e)) => {
                return Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed", e.body_text()));
            }
            Err(e) => return Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_path", e.body_text())),
        }
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(v)) => Ok(Self(v)),
            Err(PathRejection::FailedToDeserializePathParams(e)) => {
                Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_path", e.body_text()))
            }
            Err(e) => Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_path", e.body_text())),
        }
    }
}

/// Query parameters: 400 `invalid_query` when they do not parse, 422 naming the parameter whose
/// value (or name) holds a NUL (`%00`; a raw NUL cannot be in a request line).
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or_default();
        if let Some(pair) = query.split('&').find(|p| p.contains("%00")) {
            // The name as sent (still percent-encoded, so printable).
            let name = pair.split('=').next().unwrap_or_default();
            return Err(ApiError::field(name, "must not contain a NUL character"));
        }
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(v)) => Ok(Self(v)),
            Err(e) => Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", e.body_text())),
        }
    }
}

/// The whole request body: 413 `payload_too_large` past the router's body limit.
pub struct ApiBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for ApiBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match Bytes::from_request(req, state).await {
            Ok(b) => Ok(Self(b)),
            Err(BytesRejection::FailedToBufferBody(e)) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", e.body_text()))
            }
            Err(e) => Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", e.body_text())),
        }
    }
}
