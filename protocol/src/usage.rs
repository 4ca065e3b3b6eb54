//! The usage record: one per call, emitted by the data plane when the call ends.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRecord {
    pub request_id: String,
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
    pub latency_ms: u64,
    pub ttft_ms: Option<u64>,
    pub attempts: u32,
}
