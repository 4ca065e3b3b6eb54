//! The data plane's one error type and its OpenAI-shaped JSON form.
//!
//! Stages return `AxError`; it becomes HTTP only at the edge (`ingress::error_response`) or, once a
//! stream has started, as one final error event (`AxError::to_body`). Codes are stable and listed
//! in `docs/errors.md`; upstream error bodies are logged, never copied to the caller.

use std::time::Duration;

use http::StatusCode;

#[derive(Debug, Clone, thiserror::Error)]
pub enum AxError {
    #[error("{message}")]
    InvalidRequest { message: String, param: Option<String> },
    #[error("request body is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("parameter '{param}' is not supported by {provider}")]
    UnsupportedParameter { param: String, provider: &'static str },
    #[error("missing API key: send 'Authorization: Bearer <key>'")]
    MissingApiKey,
    #[error("invalid API key")]
    InvalidApiKey,
    #[error("this API key was revoked")]
    ApiKeyRevoked,
    #[error("this API key has expired")]
    ApiKeyExpired,
    #[error("rate limit of the {layer} exceeded: {limit} {}", kind.as_str())]
    RateLimitExceeded { layer: &'static str, kind: LimitKind, limit: u64, remaining: u64, retry_after: Duration },
    /// `scope`: `tenant`, `key` or `group`.
    #[error("the {scope}'s {window} budget of ${} is spent", ax_protocol::price::format_usd(*limit))]
    BudgetExceeded { scope: &'static str, window: &'static str, limit: u64 },
    /// A `fail_closed` budget while Redis cannot be reached and this replica holds none of it.
    #[error(
        "the {scope}'s {window} budget cannot be checked now (the fleet's spend store is unreachable); retry shortly"
    )]
    BudgetUnavailable { scope: &'static str, window: &'static str },
    #[error("the prompt is about {estimated} tokens, over the limit of {limit} for '{alias}'")]
    PromptTooLong { alias: String, estimated: u64, limit: u32 },
    #[error("this key may not use model '{0}'")]
    ModelNotAllowed(String),
    #[error("model '{0}' does not exist")]
    ModelNotFound(String),
    #[error("no route for {0}")]
    NotFound(String),
    #[error("method not allowed: {0}")]
    MethodNotAllowed(String),
    #[error("request body is larger than the limit of {0} bytes")]
    PayloadTooLarge(u64),
    #[error("no upstream of '{alias}' can serve this request: {reason}")]
    NoCapableUpstream { alias: String, reason: String },
    /// `needed`: the prompt estimate plus the output cap; `window`: the largest context window of
    /// the alias's candidates.
    #[error("the prompt (about {estimated} tokens) and max_tokens need about {needed} tokens, more than every context window of '{alias}' (the largest is {window})")]
    ContextLengthExceeded { alias: String, estimated: u64, needed: u64, window: u32 },
    #[error("the request was rejected by the upstream's content filter")]
    ContentFilter,
    #[error("the upstream rejected the request{0}")]
    UpstreamRejected(String),
    #[error("the prompt is longer than the upstream model's context window")]
    UpstreamContextLength,
    #[error("the upstream does not know the configured model")]
    UpstreamNotFound,
    /// Carries the upstream's Retry-After, if any.
    #[error("the upstream is rate limiting requests")]
    UpstreamRateLimited(Option<Duration>),
    #[error("the upstream is overloaded or unavailable")]
    UpstreamUnavailable(Option<Duration>),
    #[error("no upstream of '{alias}' can take the request now: {detail}")]
    NoHealthyUpstream { alias: String, detail: String, retry_after: Duration },
    #[error("the upstream failed{0}")]
    UpstreamFailed(String),
    #[error("the gateway's credentials were refused by the upstream")]
    UpstreamAuth,
    #[error("could not connect to the upstream")]
    UpstreamConnect,
    #[error("connecting to the upstream timed out")]
    UpstreamConnectTimeout,
    #[error("the upstream sent no response headers in time")]
    UpstreamFirstByteTimeout,
    #[error("the upstream went silent mid-response")]
    UpstreamIdleTimeout,
    #[error("the upstream call exceeded its total time limit")]
    UpstreamTimeout,
    #[error("the upstream sent a response the gateway cannot read")]
    UpstreamInvalidResponse,
    /// A call of a `strict` tool whose arguments do not match the tool's schema, from an upstream
    /// without a strict mode of its own (`upstream::strict`).
    #[error("the upstream's call of the strict tool '{tool}' does not match the tool's parameters schema")]
    UpstreamToolArguments { tool: String },
    #[error("the upstream stream ended before the reply was complete")]
    UpstreamStreamTruncated,
    /// The answer (or one stream event) was over the upstream's `max_response_bytes`
    /// (`max_event_bytes`): refused rather than buffered.
    #[error("the upstream's answer is larger than the limit of {0} bytes")]
    UpstreamResponseTooLarge(usize),
    /// A stored response that is not there (or is another tenant's); `param` names the request
    /// field that named it.
    #[error("{message}")]
    ResponseNotFound { message: String, param: Option<&'static str> },
    #[error(
        "the response store cannot be reached; retry, or send the whole conversation in 'input' with store: false"
    )]
    ResponseStoreUnavailable,
    #[error("internal error")]
    Internal,
}

impl AxError {
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidRequest { message: message.into(), param: None }
    }

    pub fn invalid_param(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InvalidRequest { message: message.into(), param: Some(param.into()) }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidRequest { .. }
            | Self::InvalidJson(_)
            | Self::UnsupportedParameter { .. }
            | Self::NoCapableUpstream { .. }
            | Self::ContextLengthExceeded { .. }
            | Self::ContentFilter
            | Self::UpstreamRejected(_)
            | Self::UpstreamContextLength => StatusCode::BAD_REQUEST,
            Self::MissingApiKey | Self::InvalidApiKey | Self::ApiKeyRevoked | Self::ApiKeyExpired => {
                StatusCode::UNAUTHORIZED
            }
            Self::PromptTooLong { .. } => StatusCode::BAD_REQUEST,
            Self::ModelNotAllowed(_) => StatusCode::FORBIDDEN,
            Self::ModelNotFound(_) | Self::NotFound(_) | Self::ResponseNotFound { .. } => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UpstreamRateLimited(_) | Self::RateLimitExceeded { .. } | Self::BudgetExceeded { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            Self::UpstreamFailed(_)
            | Self::UpstreamAuth
            | Self::UpstreamNotFound
            | Self::UpstreamConnect
            | Self::UpstreamInvalidResponse
            | Self::UpstreamToolArguments { .. }
            | Self::UpstreamStreamTruncated
            | Self::UpstreamResponseTooLarge(_) => StatusCode::BAD_GATEWAY,
            Self::UpstreamUnavailable(_)
            | Self::NoHealthyUpstream { .. }
            | Self::ResponseStoreUnavailable
            | Self::BudgetUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::UpstreamConnectTimeout
            | Self::UpstreamFirstByteTimeout
            | Self::UpstreamIdleTimeout
            | Self::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// OpenAI's `error.type` family.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::InvalidRequest { .. }
            | Self::InvalidJson(_)
            | Self::UnsupportedParameter { .. }
            | Self::NoCapableUpstream { .. }
            | Self::ContextLengthExceeded { .. }
            | Self::ContentFilter
            | Self::UpstreamRejected(_)
            | Self::UpstreamContextLength
            | Self::PayloadTooLarge(_)
            | Self::ModelNotFound(_)
            | Self::NotFound(_)
            | Self::ResponseNotFound { .. }
            | Self::MethodNotAllowed(_) => "invalid_request_error",
            Self::MissingApiKey | Self::InvalidApiKey | Self::ApiKeyRevoked | Self::ApiKeyExpired => {
                "authentication_error"
            }
            Self::PromptTooLong { .. } => "invalid_request_error",
            Self::ModelNotAllowed(_) => "permission_error",
            Self::UpstreamRateLimited(_) | Self::RateLimitExceeded { .. } => "rate_limit_error",
            Self::BudgetExceeded { .. } => "insufficient_quota",
            Self::UpstreamFailed(_)
            | Self::UpstreamAuth
            | Self::UpstreamNotFound
            | Self::UpstreamConnect
            | Self::UpstreamConnectTimeout
            | Self::UpstreamFirstByteTimeout
            | Self::UpstreamIdleTimeout
            | Self::UpstreamTimeout
            | Self::UpstreamInvalidResponse
            | Self::UpstreamToolArguments { .. }
            | Self::UpstreamStreamTruncated
            | Self::UpstreamResponseTooLarge(_)
            | Self::UpstreamUnavailable(_)
            | Self::NoHealthyUpstream { .. } => "upstream_error",
            Self::Internal | Self::ResponseStoreUnavailable | Self::BudgetUnavailable { .. } => "server_error",
        }
    }

    /// The stable, documented `error.code`. Also the low-cardinality metric label.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidRequest { .. } => "invalid_request",
            Self::InvalidJson(_) => "invalid_json",
            Self::UnsupportedParameter { .. } => "unsupported_parameter",
            Self::MissingApiKey => "missing_api_key",
            Self::InvalidApiKey => "invalid_api_key",
            Self::ApiKeyRevoked => "api_key_revoked",
            Self::ApiKeyExpired => "api_key_expired",
            Self::PromptTooLong { .. } => "context_length_exceeded",
            Self::ModelNotAllowed(_) => "model_not_allowed",
            Self::ModelNotFound(_) => "model_not_found",
            Self::NotFound(_) => "not_found",
            Self::MethodNotAllowed(_) => "method_not_allowed",
            Self::PayloadTooLarge(_) => "request_too_large",
            Self::NoCapableUpstream { .. } => "no_capable_upstream",
            Self::ContextLengthExceeded { .. } => "context_length_exceeded",
            Self::ContentFilter => "content_filter",
            Self::UpstreamRejected(_) => "upstream_rejected_request",
            Self::UpstreamContextLength => "context_length_exceeded",
            Self::UpstreamNotFound => "upstream_model_not_found",
            Self::UpstreamRateLimited(_) => "upstream_rate_limited",
            Self::RateLimitExceeded { .. } => "rate_limit_exceeded",
            Self::BudgetExceeded { .. } => "budget_exceeded",
            Self::UpstreamUnavailable(_) => "upstream_unavailable",
            Self::NoHealthyUpstream { .. } => "no_healthy_upstream",
            Self::UpstreamFailed(_) => "upstream_error",
            Self::UpstreamAuth => "upstream_auth_failed",
            Self::UpstreamConnect => "upstream_connect_failed",
            Self::UpstreamConnectTimeout => "upstream_connect_timeout",
            Self::UpstreamFirstByteTimeout => "upstream_first_byte_timeout",
            Self::UpstreamIdleTimeout => "upstream_idle_timeout",
            Self::UpstreamTimeout => "upstream_timeout",
            Self::UpstreamInvalidResponse => "upstream_invalid_response",
            Self::UpstreamToolArguments { .. } => "upstream_invalid_tool_call",
            Self::UpstreamStreamTruncated => "upstream_stream_truncated",
            Self::UpstreamResponseTooLarge(_) => "upstream_response_too_large",
            Self::ResponseNotFound { .. } => "response_not_found",
            Self::ResponseStoreUnavailable => "response_store_unavailable",
            Self::BudgetUnavailable { .. } => "budget_unavailable",
            Self::Internal => "internal_error",
        }
    }

    pub fn param(&self) -> Option<&str> {
        match self {
            Self::InvalidRequest { param, .. } => param.as_deref(),
            Self::UnsupportedParameter { param, .. } => Some(param),
            Self::ModelNotAllowed(_) | Self::ModelNotFound(_) => Some("model"),
            Self::ResponseNotFound { param, .. } => *param,
            _ => None,
        }
    }

    /// Whether another candidate could succeed where this attempt failed (read by failover; the
    /// table is in `docs/failover.md`). Client errors (400, 401, 403, 404, 422, content policy)
    /// go back to the caller; a context-length error fails over only to a larger window.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::UpstreamRateLimited(_)
                | Self::UpstreamUnavailable(_)
                | Self::UpstreamFailed(_)
                | Self::UpstreamConnect
                | Self::UpstreamConnectTimeout
                | Self::UpstreamFirstByteTimeout
                | Self::UpstreamIdleTimeout
                | Self::UpstreamTimeout
                | Self::UpstreamInvalidResponse
                | Self::UpstreamToolArguments { .. }
                | Self::UpstreamStreamTruncated
                | Self::UpstreamResponseTooLarge(_)
        )
    }

    /// How this attempt's failure counts for the upstream's circuit breaker.
    pub fn outcome(&self) -> Outcome {
        match self {
            Self::UpstreamRateLimited(ra) => Outcome::RateLimited(*ra),
            Self::UpstreamConnectTimeout
            | Self::UpstreamFirstByteTimeout
            | Self::UpstreamIdleTimeout
            | Self::UpstreamTimeout => Outcome::Timeout,
            Self::UpstreamUnavailable(_)
            | Self::UpstreamFailed(_)
            | Self::UpstreamConnect
            | Self::UpstreamInvalidResponse
            | Self::UpstreamStreamTruncated
            | Self::UpstreamResponseTooLarge(_) => Outcome::Error,
            _ => Outcome::Neutral,
        }
    }

    /// What to tell the caller in `Retry-After`.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::UpstreamRateLimited(ra) | Self::UpstreamUnavailable(ra) => *ra,
            Self::NoHealthyUpstream { retry_after, .. } | Self::RateLimitExceeded { retry_after, .. } => {
                Some(*retry_after)
            }
            Self::BudgetUnavailable { .. } => Some(Duration::from_secs(1)),
            _ => None,
        }
    }

    /// The OpenAI-shaped error body.
    pub fn to_body(&self, request_id: &str) -> Vec<u8> {
        ax_wire::openai::caller::error_body(self, request_id)
    }
}

impl ax_wire::Reported for AxError {
    fn status(&self) -> u16 {
        AxError::status(self).as_u16()
    }
    fn error_type(&self) -> &'static str {
        AxError::error_type(self)
    }
    fn code(&self) -> &'static str {
        AxError::code(self)
    }
    fn param(&self) -> Option<&str> {
        AxError::param(self)
    }
}

/// A codec's error, as the stages carry it: the same variant, the same message.
impl From<ax_wire::Error> for AxError {
    fn from(e: ax_wire::Error) -> Self {
        use ax_wire::Error as W;
        match e {
            W::InvalidRequest { message, param } => Self::InvalidRequest { message, param },
            W::InvalidJson(m) => Self::InvalidJson(m),
            W::UnsupportedParameter { param, provider } => Self::UnsupportedParameter { param, provider },
            W::ContentFilter => Self::ContentFilter,
            W::UpstreamRejected(s) => Self::UpstreamRejected(s),
            W::UpstreamContextLength => Self::UpstreamContextLength,
            W::UpstreamNotFound => Self::UpstreamNotFound,
            W::UpstreamRateLimited(ra) => Self::UpstreamRateLimited(ra),
            W::UpstreamUnavailable(ra) => Self::UpstreamUnavailable(ra),
            W::UpstreamFailed(s) => Self::UpstreamFailed(s),
            W::UpstreamAuth => Self::UpstreamAuth,
            W::UpstreamTimeout => Self::UpstreamTimeout,
            W::UpstreamInvalidResponse => Self::UpstreamInvalidResponse,
            W::UpstreamToolArguments { tool } => Self::UpstreamToolArguments { tool },
            W::UpstreamStreamTruncated => Self::UpstreamStreamTruncated,
            W::UpstreamResponseTooLarge(n) => Self::UpstreamResponseTooLarge(n),
            W::ResponseNotFound { message, param } => Self::ResponseNotFound { message, param },
            W::Internal => Self::Internal,
        }
    }
}

/// How an attempt ended, as the breaker sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// 5xx, 529, an error inside a 200, a reset or refused connection, an unreadable answer.
    Error,
    /// Any timeout: cools down longer than errors.
    Timeout,
    /// 429, with the upstream's Retry-After if it gave one.
    RateLimited(Option<Duration>),
    /// Client errors (4xx) and cancellations: the upstream answered properly; never counted.
    Neutral,
}

impl Outcome {
    pub(crate) fn is_failure(self) -> bool {
        matches!(self, Self::Error | Self::Timeout | Self::RateLimited(_))
    }
}

/// Which limit refused, for the 429 and its headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    Requests,
    Tokens,
    Concurrency,
}

impl LimitKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requests => "requests per minute",
            Self::Tokens => "tokens per minute",
            Self::Concurrency => "concurrent requests",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A codec's error reads the same once it is the data plane's: message, status, type, code,
    /// field, and whether failover tries another upstream.
    #[test]
    fn a_codec_error_says_the_same_as_the_data_planes() {
        use ax_wire::{Error as W, Reported};
        let all = [
            W::invalid_param("messages[0]", "bad"),
            W::InvalidJson("x".into()),
            W::UnsupportedParameter { param: "seed".into(), provider: "anthropic" },
            W::ContentFilter,
            W::UpstreamRejected(" (x)".into()),
            W::UpstreamContextLength,
            W::UpstreamNotFound,
            W::UpstreamRateLimited(Some(Duration::from_secs(3))),
            W::UpstreamUnavailable(None),
            W::UpstreamFailed(String::new()),
            W::UpstreamAuth,
            W::UpstreamTimeout,
            W::UpstreamInvalidResponse,
            W::UpstreamToolArguments { tool: "f".into() },
            W::UpstreamStreamTruncated,
            W::UpstreamResponseTooLarge(10),
            W::ResponseNotFound { message: "gone".into(), param: Some("previous_response_id") },
            W::Internal,
        ];
        for w in all {
            let a = AxError::from(w.clone());
            assert_eq!(a.to_string(), w.to_string());
            assert_eq!(a.status().as_u16(), Reported::status(&w), "{w:?}");
            assert_eq!(a.error_type(), Reported::error_type(&w), "{w:?}");
            assert_eq!(a.code(), Reported::code(&w), "{w:?}");
            assert_eq!(a.param(), Reported::param(&w), "{w:?}");
            assert_eq!(a.is_retryable(), w.is_retryable(), "{w:?}");
        }
    }

    #[test]
    fn body_is_openai_shaped() {
        let e = AxError::UnsupportedParameter { param: "seed".into(), provider: "anthropic" };
        let v: serde_json::Value = serde_json::from_slice(&e.to_body("req-1")).unwrap();
        assert_eq!(v["error"]["code"], "unsupported_parameter");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["param"], "seed");
        assert_eq!(v["request_id"], "req-1");
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn upstream_codes_are_filtered() {}
}
