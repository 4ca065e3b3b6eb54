//! What every upstream adapter shares: the call's context (`Ctx`), the classification of an
//! upstream's error (its HTTP status and its protocol's code, onto the classes failover reads),
//! and the pieces of a tool call each protocol spells differently.

use ax_protocol::config::ProviderKind;
use serde_json::Value;

use crate::error::{upstream_code_suffix, Error};

/// What an adapter may read besides the request: plain values of the one call, no live state.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    pub kind: ProviderKind,
    /// The upstream's own name for the model.
    pub model: &'a str,
    /// `max_tokens` for providers that require one when the request sets none: the model's
    /// output cap, else the server's default.
    pub max_tokens: u32,
    /// The model's output cap (`max_output_tokens`), when the configuration gives one.
    pub output_cap: Option<u32>,
    /// The model takes a reasoning control (its `reasoning` capability).
    pub reasoning: bool,
}

/// Maps an upstream HTTP status (or a status carried inside a 200 body) and the provider's
/// error code onto ax's error. Which of these may fail over is `Error::is_retryable`.
pub fn classify(status: u16, code: Option<&str>) -> Error {
    if code.is_some_and(|c| c.contains("content_filter") || c == "content_policy_violation" || c == "refusal") {
        return Error::ContentFilter;
    }
    match status {
        400 | 409 | 413 | 422 => Error::UpstreamRejected(upstream_code_suffix(code)),
        401 | 403 => Error::UpstreamAuth,
        404 => Error::UpstreamNotFound,
        408 | 504 => Error::UpstreamTimeout,
        429 => Error::UpstreamRateLimited(None),
        503 | 529 => Error::UpstreamUnavailable(None),
        _ => Error::UpstreamFailed(upstream_code_suffix(code)),
    }
}

/// Maps a provider's error *type* string (what errors inside a 200 carry) onto a status.
pub fn status_of_error_type(t: &str) -> u16 {
    match t {
        "invalid_request_error" | "invalid_argument" | "INVALID_ARGUMENT" | "FAILED_PRECONDITION" => 400,
        "authentication_error" | "UNAUTHENTICATED" => 401,
        "permission_error" | "PERMISSION_DENIED" => 403,
        "not_found_error" | "NOT_FOUND" => 404,
        "request_too_large" => 413,
        "rate_limit_error" | "rate_limit_exceeded" | "insufficient_quota" | "RESOURCE_EXHAUSTED" => 429,
        "overloaded_error" | "overloaded" | "UNAVAILABLE" => 503,
        "DEADLINE_EXCEEDED" | "timeout" => 504,
        _ => 500,
    }
}

/// The arguments of an assistant's tool call (`messages[i].tool_calls[j]`) as the JSON object
/// Anthropic's `input` and Gemini's `args` need. Empty arguments are `{}`; anything not JSON is
/// the caller's error, named by its path.
pub fn tool_arguments(args: &str, i: usize, j: usize) -> Result<serde_json::Value, Error> {
    if args.trim().is_empty() {
        return Ok(serde_json::Value::Object(serde_json::Map::new()));
    }
    serde_json::from_str(args).map_err(|_| {
        let path = format!("messages[{i}].tool_calls[{j}].function.arguments");
        let message = format!("{path} is not valid JSON");
        Error::invalid_param(path, message)
    })
}

/// Synthesized tool-call id for providers that have none (Gemini, the mock): `call_` + 24
/// random alphanumerics, like OpenAI's.
pub fn synth_call_id() -> String {
    use rand::distr::{Alphanumeric, SampleString};
    format!("call_{}", Alphanumeric.sample_string(&mut rand::rng(), 24))
}

/// Re-reads a body known to carry an error (the rare path) and classifies it.
pub fn error_body(body: &[u8], classify_value: fn(&serde_json::Value) -> Option<Error>) -> Error {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| classify_value(&v))
        .unwrap_or(Error::UpstreamInvalidResponse)
}

/// An `error` object (or vLLM's `"object":"error"`) inside a 2xx body or stream event.
pub fn embedded_error(v: &Value) -> Option<Error> {
    let err = match v.get("error") {
        Some(e) if e.is_object() => e,
        Some(Value::String(_)) => v,
        _ if v.get("object").and_then(Value::as_str) == Some("error") => v,
        _ => return None,
    };
    let code = err.get("code");
    let status = match code {
        Some(Value::Number(n)) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
        Some(Value::String(s)) => s.parse::<u16>().ok(),
        _ => None,
    };
    let code_str = code.and_then(Value::as_str).or_else(|| err.get("type").and_then(Value::as_str));
    let status = status.unwrap_or_else(|| code_str.map_or(500, status_of_error_type));
    Some(classify(status, code_str))
}
