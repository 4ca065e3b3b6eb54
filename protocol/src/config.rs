//! The snapshot schema: upstreams, their capability matrix and prices, routes, tenants and keys.
//!
//! Every struct denies unknown fields so a typo in a config file is an error naming its path,
//! not a silently ignored setting. Field docs here are mirrored in `docs/config.md`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

mod tenant;
pub use tenant::*;

/// Leaves defaults out of serialized documents (what the control plane stores and pushes): a
/// route is ~130 bytes instead of ~590. Reading is unaffected: every skipped field has a default.
fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// One whole gateway configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigSpec {
    #[serde(default)]
    pub server: ServerSpec,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstreams: Vec<UpstreamSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tenants: Vec<TenantSpec>,
    /// Pooled budgets shared by several tenants (an organization, a department).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupSpec>,
    #[serde(default)]
    pub metering: MeteringSpec,
}

/// A group of tenants (an organization, a department) whose budgets pool the spend of every
/// member: a tenant joins by naming the group in its `groups`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupSpec {
    pub id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<BudgetSpec>,
}

/// Where usage records go (read at start). Without a spool, records are only logged.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeteringSpec {
    /// Durable local spool directory (one segment file per serving thread).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spool_dir: Option<String>,
    /// The standalone sink: a JSONL file, one record per request, deduplicated by request id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jsonl: Option<String>,
}

/// Process-level settings. `listen` is read once at start; the rest follows reloads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSpec {
    #[serde(default = "default_listen")]
    pub listen: String,
    #[serde(default)]
    pub params: ParamsMode,
    /// Largest accepted request body in bytes; larger bodies get 413 `request_too_large`.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: u64,
    /// `max_tokens` sent to providers that require one (Anthropic) when neither the request nor
    /// the model's `max_output_tokens` gives one.
    #[serde(default = "default_max_tokens")]
    pub default_max_tokens: u32,
    /// Bearer token for `/admin/*` (normally a `${ENV}` reference); admin endpoints are off without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_token: Option<String>,
    /// IANA time zone in which budget days and months begin (default UTC).
    #[serde(default = "default_tz")]
    pub budget_timezone: String,
    /// Share rate limits across replicas through this Redis (read at start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis_url: Option<String>,
    /// `redis_url` names a Redis Cluster: one or more of its nodes, comma-separated
    /// (`redis://10.0.0.1:7000,redis://10.0.0.2:7000`); the client finds the rest and follows
    /// failovers. Rate limits and budgets use it; the Responses API's store stays in each process.
    #[serde(default, skip_serializing_if = "is_default")]
    pub redis_cluster: bool,
    /// `redis_url` names Redis Sentinels (comma-separated) watching the master of this name; the
    /// data plane asks them for the master and follows its failovers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis_sentinel: Option<String>,
    /// Prefix of every Redis key (several fleets can share one Redis).
    #[serde(default = "default_redis_prefix")]
    pub redis_prefix: String,
    /// Replicas in the fleet: when Redis is unreachable, each enforces limit ÷ replicas locally.
    #[serde(default = "default_replicas")]
    pub replicas: u32,
    /// Where the Responses API keeps responses (`store`, `previous_response_id`): the Redis of
    /// `redis_url` when set, else a bounded store in this process (read at start).
    #[serde(default)]
    pub response_store: ResponseStoreSpec,
    /// Traces over OTLP/HTTP (read at start). Off unless this is set or the standard
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing: Option<TracingSpec>,
}

/// `server.tracing`: where spans go and how many; unset fields fall back to the standard
/// OpenTelemetry environment variables, then to the defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracingSpec {
    /// The collector's OTLP/HTTP address (`http://collector:4318`; `/v1/traces` is added unless
    /// the path already ends with it). Else `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`, else `http://localhost:4318/v1/traces`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Head sampling: the share of new traces kept, 0 to 1 (a caller's `traceparent` decides for
    /// its own trace; failed requests are always kept). Else `OTEL_TRACES_SAMPLER(_ARG)`, else 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_ratio: Option<f64>,
    /// `service.name`; else `OTEL_SERVICE_NAME`, else `ax-dataplane`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// Requests whose spans may wait for the exporter (default 4096); past it spans are dropped
    /// and counted, never waited for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<u32>,
}

/// The response store's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResponseStoreSpec {
    /// How long a stored response is kept, in days (1–400).
    #[serde(default = "default_retention_days")]
    pub retention_days: u32,
    /// The largest response kept (its input and output, in bytes); a larger one is answered but
    /// not kept, and a later `previous_response_id` naming it says so.
    #[serde(default = "default_store_max_bytes")]
    pub max_response_bytes: u64,
    /// Without Redis: the most the process keeps in all (oldest evicted first).
    #[serde(default = "default_local_max_bytes")]
    pub local_max_bytes: u64,
}

fn default_retention_days() -> u32 {
    30
}
fn default_store_max_bytes() -> u64 {
    8 * 1024 * 1024
}
fn default_local_max_bytes() -> u64 {
    64 * 1024 * 1024
}

impl Default for ResponseStoreSpec {
    fn default() -> Self {
        Self {
            retention_days: default_retention_days(),
            max_response_bytes: default_store_max_bytes(),
            local_max_bytes: default_local_max_bytes(),
        }
    }
}

fn default_redis_prefix() -> String {
    "ax".to_owned()
}

fn default_replicas() -> u32 {
    1
}

fn default_tz() -> String {
    "UTC".to_owned()
}

impl Default for ServerSpec {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            params: ParamsMode::default(),
            max_body_bytes: default_max_body_bytes(),
            default_max_tokens: default_max_tokens(),
            admin_token: None,
            budget_timezone: default_tz(),
            redis_url: None,
            redis_cluster: false,
            redis_sentinel: None,
            redis_prefix: default_redis_prefix(),
            replicas: default_replicas(),
            response_store: ResponseStoreSpec::default(),
            tracing: None,
        }
    }
}

fn default_listen() -> String {
    "127.0.0.1:8080".to_owned()
}
fn default_max_body_bytes() -> u64 {
    10 * 1024 * 1024
}
fn default_max_tokens() -> u32 {
    4096
}

/// What happens to a request parameter the chosen provider cannot honour.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ParamsMode {
    /// 400 `unsupported_parameter` naming the parameter.
    #[default]
    Strict,
    /// Drop the parameter and log a warning.
    Lenient,
}

/// The wire protocol an upstream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// Any OpenAI-compatible API: OpenAI, DeepSeek, Qwen, vLLM, Ollama, LM Studio.
    Openai,
    /// Azure OpenAI: deployment URLs, `api-version`, `api-key` header.
    AzureOpenai,
    Anthropic,
    Gemini,
    /// The built-in deterministic upstream (no network).
    Mock,
}

impl ProviderKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::AzureOpenai => "azure_openai",
            Self::Anthropic => "anthropic",
            Self::Gemini => "gemini",
            Self::Mock => "mock",
        }
    }
}

/// One upstream instance (one base URL + one credential).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamSpec {
    pub name: String,
    pub provider: ProviderKind,
    /// Required for every provider but `mock`. `${ENV}` references are expanded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The upstream credential, normally a `${ENV}` reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// Azure OpenAI `api-version` query parameter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Extra headers sent on every upstream request (values may be `${ENV}` references).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub timeouts: TimeoutsSpec,
    /// Requests in flight to this upstream at most; a saturated upstream is skipped, not queued.
    #[serde(default = "default_max_concurrency")]
    pub max_concurrency: u32,
    #[serde(default)]
    pub breaker: BreakerSpec,
    /// Protects the provider's quota (set below its official RPM/TPM): a full upstream is skipped,
    /// not refused. Concurrency is `max_concurrency`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub limits: LimitsSpec,
    pub models: Vec<ModelSpec>,
    /// Largest answer accepted from this upstream, in bytes (default 32 MiB): a larger one is
    /// refused with `upstream_response_too_large` (and fails over) instead of being buffered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_response_bytes: Option<u64>,
    /// Largest single stream event (or line of one) accepted, in bytes (default 8 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_event_bytes: Option<u64>,
    /// Behaviour of a `mock` upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mock: Option<MockSpec>,
    /// Chat request fields ax does not know (vLLM's `top_k`, Qwen's `enable_thinking`), sent to
    /// this OpenAI-compatible upstream as the caller wrote them on routes that translate: `true`
    /// for any, or a list of names. Off by default (strict mode refuses them, lenient drops them).
    #[serde(default, skip_serializing_if = "Passthrough::is_off")]
    pub passthrough: Passthrough,
    /// The upstream offers OpenAI's Responses API (`POST {base_url}/responses`): Responses callers
    /// of a route whose upstreams all offer it are forwarded as they wrote (only `model` replaced).
    /// Default: on for OpenAI's own API (`api.openai.com`), off for other OpenAI-compatible servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responses_api: Option<bool>,
}

impl UpstreamSpec {
    /// Whether the upstream offers the Responses API (`responses_api`, else its default).
    pub fn offers_responses(&self) -> bool {
        self.provider == ProviderKind::Openai
            && self.responses_api.unwrap_or_else(|| {
                self.base_url.as_deref().is_some_and(|u| {
                    u.strip_prefix("https://").is_some_and(|rest| rest.split('/').next() == Some("api.openai.com"))
                })
            })
    }
}

/// Which unknown request fields an upstream is sent (`UpstreamSpec::passthrough`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Passthrough {
    All(bool),
    Fields(Vec<String>),
}

impl Default for Passthrough {
    fn default() -> Self {
        Self::All(false)
    }
}

impl Passthrough {
    pub fn is_off(&self) -> bool {
        match self {
            Self::All(on) => !on,
            Self::Fields(f) => f.is_empty(),
        }
    }

    /// Whether the field `name` is sent on.
    pub fn allows(&self, name: &str) -> bool {
        match self {
            Self::All(on) => *on,
            Self::Fields(f) => f.iter().any(|x| x == name),
        }
    }
}

fn default_max_concurrency() -> u32 {
    1024
}

/// Upstream timeouts. Each expiry has its own error code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeoutsSpec {
    /// TCP (and TLS) connect.
    #[serde(default = "default_connect_ms")]
    pub connect_ms: u64,
    /// From sending the request to the response headers.
    #[serde(default = "default_first_byte_ms")]
    pub first_byte_ms: u64,
    /// Longest gap between two stream events (or body reads).
    #[serde(default = "default_idle_ms")]
    pub idle_ms: u64,
    /// Ceiling on a whole upstream call, including a stream.
    #[serde(default = "default_total_ms")]
    pub total_ms: u64,
}

impl Default for TimeoutsSpec {
    fn default() -> Self {
        Self {
            connect_ms: default_connect_ms(),
            first_byte_ms: default_first_byte_ms(),
            idle_ms: default_idle_ms(),
            total_ms: default_total_ms(),
        }
    }
}

/// Per-route overrides of the upstream timeouts (connect stays per upstream: it belongs to the pool).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeoutOverrides {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_byte_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_ms: Option<u64>,
}

fn default_connect_ms() -> u64 {
    3_000
}
fn default_first_byte_ms() -> u64 {
    60_000
}
fn default_idle_ms() -> u64 {
    60_000
}
fn default_total_ms() -> u64 {
    600_000
}

/// The circuit breaker of one upstream instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerSpec {
    /// Opens after this many failures within `window_ms`…
    #[serde(default = "default_failures")]
    pub failures: u32,
    /// …or when the failure ratio reaches `failure_ratio` over at least `min_requests` in the window.
    #[serde(default = "default_failure_ratio")]
    pub failure_ratio: f64,
    #[serde(default = "default_min_requests")]
    pub min_requests: u32,
    #[serde(default = "default_window_ms")]
    pub window_ms: u64,
    /// First cooldown after errors (5xx, errors in 200, resets); doubled on every failed probe.
    #[serde(default = "default_cooldown_ms")]
    pub cooldown_ms: u64,
    /// First cooldown after timeouts (longer: a hung upstream costs callers the most).
    #[serde(default = "default_timeout_cooldown_ms")]
    pub timeout_cooldown_ms: u64,
    #[serde(default = "default_max_cooldown_ms")]
    pub max_cooldown_ms: u64,
}

impl Default for BreakerSpec {
    fn default() -> Self {
        Self {
            failures: default_failures(),
            failure_ratio: default_failure_ratio(),
            min_requests: default_min_requests(),
            window_ms: default_window_ms(),
            cooldown_ms: default_cooldown_ms(),
            timeout_cooldown_ms: default_timeout_cooldown_ms(),
            max_cooldown_ms: default_max_cooldown_ms(),
        }
    }
}

fn default_failures() -> u32 {
    5
}
fn default_failure_ratio() -> f64 {
    0.5
}
fn default_min_requests() -> u32 {
    20
}
fn default_window_ms() -> u64 {
    10_000
}
fn default_cooldown_ms() -> u64 {
    5_000
}
fn default_timeout_cooldown_ms() -> u64 {
    15_000
}
fn default_max_cooldown_ms() -> u64 {
    300_000
}

/// A real model served by an upstream: its capability matrix and prices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    pub name: String,
    pub context_window: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    pub capabilities: Vec<Capability>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_per_mtok: Option<PriceSpec>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    Chat,
    Tools,
    Streaming,
    Vision,
    Json,
    Embeddings,
    /// Takes a reasoning control (OpenAI `reasoning_effort`, Gemini's thinking budget,
    /// Anthropic's extended thinking); a request's reasoning reaches only such models.
    Reasoning,
}

impl Capability {
    /// Its name in a configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Tools => "tools",
            Self::Streaming => "streaming",
            Self::Vision => "vision",
            Self::Json => "json",
            Self::Embeddings => "embeddings",
            Self::Reasoning => "reasoning",
        }
    }
}

/// USD per million tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceSpec {
    pub input: f64,
    pub output: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
    /// Cache writes kept an hour (Anthropic's `ephemeral_1h_input_tokens`, twice the input
    /// price where `cache_write`'s five-minute writes are 1.25 times); `cache_write` when not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_1h: Option<f64>,
}

/// Behaviour of the built-in mock upstream. Every reply is a pure function of the request and
/// these settings, so tests and benchmarks are repeatable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MockSpec {
    /// Delay before a non-stream reply, in milliseconds.
    #[serde(default)]
    pub latency_ms: u64,
    /// Delay before the first stream event, in milliseconds.
    #[serde(default)]
    pub ttft_ms: u64,
    /// Stream pace; 0 sends every token at once.
    #[serde(default, skip_serializing_if = "is_default")]
    pub tokens_per_second: u32,
    /// Number of words in a generated reply.
    #[serde(default = "default_reply_tokens")]
    pub reply_tokens: u32,
    /// A fixed reply instead of the generated one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    /// When the request offers tools, call the first one (or the one `tool_choice` names)
    /// unless the conversation already ends with a tool result.
    #[serde(default)]
    pub tool_calls: bool,
    /// The arguments (a JSON object) of a mock tool call.
    #[serde(default = "default_tool_arguments")]
    pub tool_arguments: String,
    /// Inject a failure into every n-th request (1 = every request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_every: Option<u32>,
    #[serde(default)]
    pub fail_mode: MockFailMode,
    /// HTTP status of an injected `status` failure.
    #[serde(default = "default_fail_status")]
    pub fail_status: u16,
}

impl Default for MockSpec {
    fn default() -> Self {
        Self {
            latency_ms: 0,
            ttft_ms: 0,
            tokens_per_second: 0,
            reply_tokens: default_reply_tokens(),
            reply: None,
            tool_calls: false,
            tool_arguments: default_tool_arguments(),
            fail_every: None,
            fail_mode: MockFailMode::default(),
            fail_status: default_fail_status(),
        }
    }
}

fn default_reply_tokens() -> u32 {
    16
}
fn default_tool_arguments() -> String {
    "{}".to_owned()
}
fn default_fail_status() -> u16 {
    503
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MockFailMode {
    /// Answer with `fail_status`.
    #[default]
    Status,
    /// Answer 200 with an error object in the body (or as the first stream event).
    ErrorIn200,
    /// Stream half the reply, then an error event.
    MidStream,
}

/// A logical model (alias) and the real models that can serve it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSpec {
    pub alias: String,
    #[serde(default)]
    pub strategy: Strategy,
    pub candidates: Vec<CandidateSpec>,
    /// Aliases to try, in order, when every candidate of this one failed or was skipped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub timeouts: TimeoutOverrides,
    #[serde(default, skip_serializing_if = "is_default")]
    pub failover: FailoverSpec,
    /// Context budget: a prompt estimated above this many tokens goes to `long_context_alias`,
    /// or is refused with 400 `context_length_exceeded` when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_prompt_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub long_context_alias: Option<String>,
    /// Limits of this alias across all tenants.
    #[serde(default, skip_serializing_if = "is_default")]
    pub limits: LimitsSpec,
}

/// How hard one request tries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailoverSpec {
    /// Upstream attempts per request at most, fallback aliases and same-upstream retries included.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// Retries of a 429 or 503 on the same upstream (with backoff, honouring Retry-After).
    #[serde(default = "default_max_retries_same")]
    pub max_retries_same: u32,
    /// First backoff before a same-upstream retry; doubled each time, with jitter.
    #[serde(default = "default_backoff_ms")]
    pub backoff_ms: u64,
    /// A same-upstream retry waits at most this long (a longer Retry-After moves on instead).
    #[serde(default = "default_max_backoff_ms")]
    pub max_backoff_ms: u64,
    /// Overall deadline of one request across all attempts.
    #[serde(default = "default_deadline_ms")]
    pub deadline_ms: u64,
    /// After an upstream says the context is too long, try only candidates with a larger window.
    #[serde(default = "default_true")]
    pub larger_window_on_context_error: bool,
}

impl Default for FailoverSpec {
    fn default() -> Self {
        Self {
            max_attempts: default_max_attempts(),
            max_retries_same: default_max_retries_same(),
            backoff_ms: default_backoff_ms(),
            max_backoff_ms: default_max_backoff_ms(),
            deadline_ms: default_deadline_ms(),
            larger_window_on_context_error: true,
        }
    }
}

fn default_max_attempts() -> u32 {
    4
}
fn default_max_retries_same() -> u32 {
    1
}
fn default_backoff_ms() -> u64 {
    100
}
fn default_max_backoff_ms() -> u64 {
    2_000
}
fn default_deadline_ms() -> u64 {
    600_000
}
fn default_true() -> bool {
    true
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Random order, each candidate drawn with probability proportional to its weight.
    #[default]
    Weighted,
    /// Tiers by ascending `priority`; weighted within a tier.
    Priority,
    /// Faster time to first token gets more traffic (weight ∝ weight / EWMA²), with a small
    /// exploration share so a recovered upstream gets traffic back.
    Latency,
    /// Cheapest first by the request's estimated price; weighted among equal prices.
    Cost,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CandidateSpec {
    pub upstream: String,
    pub model: String,
    /// 0 disables the candidate.
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Lower is tried first (strategy `priority`).
    #[serde(default, skip_serializing_if = "is_default")]
    pub priority: u32,
}

fn default_weight() -> u32 {
    1
}
