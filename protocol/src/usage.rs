//! The usage record: exactly one per request (served, failed or rejected), written by the data
//! plane to its durable spool before the caller sees the end of the answer.

use serde::{Deserialize, Serialize};

/// The alias of a record whose requested model does not exist: a name a caller made up never
/// becomes a metric label or a report group (the raw name is only in the data plane's log line).
/// No configuration may name an alias so (the data plane's compiler refuses it).
pub const UNKNOWN_ALIAS: &str = "(unknown)";

/// `<request_id>#<n>`.
pub fn attempt_id(request_id: &str, n: u32) -> String {
    let mut id = String::with_capacity(request_id.len() + 4);
    id.push_str(request_id);
    id.push('#');
    match char::from_digit(n, 10) {
        Some(d) => id.push(d),
        None => id.push_str(&n.to_string()),
    }
    id
}

/// Fields missing when read (a record from an older data plane) take their defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct UsageRecord {
    /// Unique per request; sinks deduplicate on it.
    pub request_id: String,
    /// Unix time in milliseconds when the request arrived.
    pub started_at_ms: u64,
    /// Empty when the request was rejected before its key was known.
    pub tenant: String,
    pub key_id: String,
    /// The alias the caller asked for (empty if rejected before it was read).
    pub alias: String,
    /// The fallback alias that served, when the requested alias failed.
    pub fallback: Option<String>,
    /// The upstream and real model of the attempt that answered (or of the last attempt).
    pub upstream: String,
    pub model: String,
    pub stream: bool,
    /// HTTP status the caller saw (200 for a stream that started, even if it ended in error).
    pub status: u16,
    /// Stable error code when the call failed.
    pub error_code: Option<String>,
    /// The stream ended before the upstream finished (upstream failure or client disconnect).
    pub incomplete: bool,
    /// `budget; from=<alias>; to=<alias>` when a budget downgraded the request.
    pub degraded: Option<String>,
    /// Token counts were estimated (the provider reported none, or the stream was cut).
    pub estimated: bool,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_prompt_tokens: u64,
    pub cache_write_tokens: u64,
    /// Cost in integer micro-USD (`None` when the model has no price).
    pub cost_micro_usd: Option<u64>,
    pub latency_ms: u64,
    pub ttft_ms: Option<u64>,
    /// Number of upstream attempts.
    pub attempts: u32,
    /// The attempt the answering one retried (`<request_id>#<n>`): an earlier attempt that may
    /// have been billed too.
    pub retry_of: Option<String>,
    /// Every upstream attempt, in order.
    pub attempt_list: Vec<AttemptRecord>,
    /// The W3C trace id (32 hex digits) of the request's exported spans, when it was traced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// One upstream attempt of a request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// `<request_id>#<n>`.
    pub attempt_id: String,
    pub upstream: String,
    pub model: String,
    /// `None` for the attempt that answered; else the error code.
    pub error_code: Option<String>,
    /// The request reached the upstream before it failed (e.g. a timeout): the provider may
    /// have billed it.
    pub possibly_billed: bool,
    pub latency_ms: u64,
    /// When the attempt began, in microseconds after the request arrived (its trace span's start).
    #[serde(default)]
    pub offset_us: u64,
    /// The upstream's provider as the OpenTelemetry GenAI conventions name it (`openai`,
    /// `anthropic`, `gcp.gemini`, `azure.ai.openai`, `ax.mock`).
    #[serde(default, skip_serializing_if = "str::is_empty")]
    pub provider: std::borrow::Cow<'static, str>,
    /// The answering attempt's time to its first token, from when the attempt began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<u64>,
    /// What the attempt wrote to the upstream (request head and body) and read back (response
    /// head and body): 0 sent when it never reached the upstream.
    #[serde(default)]
    pub sent_bytes: u64,
    #[serde(default)]
    pub received_bytes: u64,
}
