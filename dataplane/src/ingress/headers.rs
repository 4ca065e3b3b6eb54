//! What ingress reads of a caller's headers besides its body: the key (OpenAI's `Authorization:
//! Bearer`; Anthropic's `x-api-key`, or a bearer token), Anthropic's required version header, and
//! the headers an upstream of the caller's protocol gets as they are.

use http::{header, HeaderMap};

use crate::error::AxError;

/// The caller's key: `Authorization: Bearer <key>`.
pub fn bearer_key(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    v.get(..7).filter(|scheme| scheme.eq_ignore_ascii_case("bearer ")).map(|_| v[7..].trim()).filter(|k| !k.is_empty())
}

/// The caller's key: `x-api-key`, or `Authorization: Bearer` (the SDK's `auth_token`).
pub fn anthropic_key(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .or_else(|| bearer_key(headers))
}

/// `anthropic-version`, which Anthropic requires on every call.
pub fn anthropic_version(headers: &HeaderMap) -> Result<(), AxError> {
    match headers.get("anthropic-version").and_then(|v| v.to_str().ok()) {
        Some(v) if !v.trim().is_empty() => Ok(()),
        _ => Err(AxError::invalid_param("anthropic-version", "the anthropic-version header is required")),
    }
}

/// The caller's headers an Anthropic upstream gets as they are: `anthropic-beta` (an open set of
/// feature flags, e.g. Claude Code's `claude-code-20250219,interleaved-thinking-2025-05-14`).
pub fn anthropic_forwarded(headers: &HeaderMap) -> Vec<(http::HeaderName, http::HeaderValue)> {
    headers
        .get_all("anthropic-beta")
        .iter()
        .map(|v| (http::HeaderName::from_static("anthropic-beta"), v.clone()))
        .collect()
}
