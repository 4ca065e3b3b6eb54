//! What a codec can say went wrong, and how any error is reported to a caller.
//!
//! `Error` is the codecs' own: a request a caller got wrong (400s, with the field's path) and an
//! upstream's answer classified (its status and its protocol's error code mapped onto the classes
//! failover reads). The data plane turns it into its `Error`, variant for variant, with the
//! same messages. `Reported` is what every protocol's error writers read of an error, whichever
//! crate made it, so that an error event in a stream and an error answer say the same thing.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("{message}")]
    InvalidRequest { message: String, param: Option<String> },
    #[error("request body is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("parameter '{param}' is not supported by {provider}")]
    UnsupportedParameter { param: String, provider: &'static str },
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
    #[error("the upstream failed{0}")]
    UpstreamFailed(String),
    #[error("the gateway's credentials were refused by the upstream")]
    UpstreamAuth,
    #[error("the upstream call exceeded its total time limit")]
    UpstreamTimeout,
    #[error("the upstream sent a response the gateway cannot read")]
    UpstreamInvalidResponse,
    /// A call of a `strict` tool whose arguments do not match the tool's schema (`strict`).
    #[error("the upstream's call of the strict tool '{tool}' does not match the tool's parameters schema")]
    UpstreamToolArguments { tool: String },
    #[error("the upstream stream ended before the reply was complete")]
    UpstreamStreamTruncated,
    /// One stream event over the upstream's limit: refused rather than buffered.
    #[error("the upstream's answer is larger than the limit of {0} bytes")]
    UpstreamResponseTooLarge(usize),
    /// A stored response that cannot be read; `param` names the request field that named it.
    #[error("{message}")]
    ResponseNotFound { message: String, param: Option<&'static str> },
    #[error("internal error")]
    Internal,
}

impl Error {
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidRequest { message: message.into(), param: None }
    }

    pub fn invalid_param(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InvalidRequest { message: message.into(), param: Some(param.into()) }
    }

    /// Whether another upstream could succeed where this answer failed (the data plane's failover
    /// reads the same classes, `docs/failover.md`): a transient failure of the upstream, not the
    /// caller's request.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::UpstreamRateLimited(_)
                | Self::UpstreamUnavailable(_)
                | Self::UpstreamFailed(_)
                | Self::UpstreamTimeout
                | Self::UpstreamInvalidResponse
                | Self::UpstreamToolArguments { .. }
                | Self::UpstreamStreamTruncated
                | Self::UpstreamResponseTooLarge(_)
        )
    }
}

impl Reported for Error {
    fn status(&self) -> u16 {
        match self {
            Self::InvalidRequest { .. }
            | Self::InvalidJson(_)
            | Self::UnsupportedParameter { .. }
            | Self::ContentFilter
            | Self::UpstreamRejected(_)
            | Self::UpstreamContextLength => 400,
            Self::ResponseNotFound { .. } => 404,
            Self::UpstreamRateLimited(_) => 429,
            Self::UpstreamNotFound
            | Self::UpstreamFailed(_)
            | Self::UpstreamAuth
            | Self::UpstreamInvalidResponse
            | Self::UpstreamToolArguments { .. }
            | Self::UpstreamStreamTruncated
            | Self::UpstreamResponseTooLarge(_) => 502,
            Self::UpstreamUnavailable(_) => 503,
            Self::UpstreamTimeout => 504,
            Self::Internal => 500,
        }
    }

    fn error_type(&self) -> &'static str {
        match self.status() {
            400 | 404 => "invalid_request_error",
            429 => "rate_limit_error",
            500 => "server_error",
            _ => "upstream_error",
        }
    }

    fn code(&self) -> &'static str {
        match self {
            Self::InvalidRequest { .. } => "invalid_request",
            Self::InvalidJson(_) => "invalid_json",
            Self::UnsupportedParameter { .. } => "unsupported_parameter",
            Self::ContentFilter => "content_filter",
            Self::UpstreamRejected(_) => "upstream_rejected_request",
            Self::UpstreamContextLength => "context_length_exceeded",
            Self::UpstreamNotFound => "upstream_model_not_found",
            Self::UpstreamRateLimited(_) => "upstream_rate_limited",
            Self::UpstreamUnavailable(_) => "upstream_unavailable",
            Self::UpstreamFailed(_) => "upstream_error",
            Self::UpstreamAuth => "upstream_auth_failed",
            Self::UpstreamTimeout => "upstream_timeout",
            Self::UpstreamInvalidResponse => "upstream_invalid_response",
            Self::UpstreamToolArguments { .. } => "upstream_invalid_tool_call",
            Self::UpstreamStreamTruncated => "upstream_stream_truncated",
            Self::UpstreamResponseTooLarge(_) => "upstream_response_too_large",
            Self::ResponseNotFound { .. } => "response_not_found",
            Self::Internal => "internal_error",
        }
    }

    fn param(&self) -> Option<&str> {
        match self {
            Self::InvalidRequest { param, .. } => param.as_deref(),
            Self::UnsupportedParameter { param, .. } => Some(param),
            Self::ResponseNotFound { param, .. } => *param,
            _ => None,
        }
    }
}

/// An error as a caller is told it: what the protocols' error writers (`openai::error_body`,
/// `anthropic::error_body`, the stream encoders' `fail`) read of it.
pub trait Reported: std::fmt::Display {
    /// The HTTP status it answers with.
    fn status(&self) -> u16;
    /// OpenAI's `error.type` family.
    fn error_type(&self) -> &'static str;
    /// ax's stable, documented code (`docs/errors.md`).
    fn code(&self) -> &'static str;
    /// The request field at fault.
    fn param(&self) -> Option<&str>;
}

/// Describes an upstream's own error code for the caller without copying its body: only a short
/// token made of `[a-z0-9_.]` passes (e.g. `context_length_exceeded`), anything else is dropped.
pub fn upstream_code_suffix(code: Option<&str>) -> String {
    match code {
        Some(c)
            if !c.is_empty()
                && c.len() <= 64
                && c.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.') =>
        {
            format!(" ({c})")
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_code_passes_only_as_a_short_token() {
        assert_eq!(upstream_code_suffix(Some("context_length_exceeded")), " (context_length_exceeded)");
        assert_eq!(upstream_code_suffix(Some("sk-abc Secret")), "");
        assert_eq!(upstream_code_suffix(None), "");
    }
}
