//! The usage record: one per call, emitted by the data plane when the call ends.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRecord {
    pub request_id: String,
    /// `<request_id>#<attempt>`: unique per upstream attempt.
    pub attempt_id: String,
    pub tenant: String,
    pub key_id: String,
    pub alias: String,
    pub upstream: String,
    pub model: String,
    pub stream: bool,
    /// HTTP status the caller saw (200 for a stream that started, even if it ended in error).
    pub status: u16,
    /// Stable error code when the call failed.
    pub error_code: Option<String>,
    /// The stream ended before the upstream finished (upstream error or client disconnect).
    pub incomplete: bool,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_prompt_tokens: u64,
    pub cache_write_tokens: u64,
    /// Cost in integer micro-USD (`None` when the model has no price).
    pub cost_micro_usd: Option<u64>,
    pub latency_ms: u64,
    pub ttft_ms: Option<u64>,
    /// Attempts made for this request so far (this record's attempt is number `attempts`).
    pub attempts: u32,
    /// The id of the attempt this one retried (`<request_id>#<n>`), so finance can see an
    /// upstream call that may have been billed twice.
    pub retry_of: Option<String>,
    /// The fallback alias that served the request, if the requested alias failed.
    pub fallback: Option<String>,
}
