//! Metering: Prometheus metrics and exactly one usage record per request.
//!
//! A `Meter` travels with the request (into the response stream, for streams). It emits its
//! record when the call ends (`finish`: before the caller receives the end of the answer) or,
//! if the caller went away first, when it is dropped (marked incomplete, with the tokens generated
//! until then). Records go to the durable spool (`spool`) and to the `ax::usage` log target.

use crate::config::snapshot::{Map, Served};
use std::cell::RefCell;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ax_protocol::usage::{attempt_id, AttemptRecord, UsageRecord};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::error::AxError;
use ax_wire::canonical::Usage;

/// Installs the process-wide Prometheus recorder once and returns its handle.
pub fn prometheus() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let latency = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0];
            // The GenAI semantic conventions' advised boundaries.
            let tokens = [
                1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
                16777216.0, 67108864.0,
            ];
            let operation = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92];
            let first_chunk = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0];
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &latency)
                .ok()?
                .set_buckets_for_metric(Matcher::Full(GENAI_TOKENS.to_owned()), &tokens)
                .ok()?
                .set_buckets_for_metric(Matcher::Full(GENAI_DURATION.to_owned()), &operation)
                .ok()?
                .set_buckets_for_metric(Matcher::Full(GENAI_FIRST_CHUNK.to_owned()), &first_chunk)
                .ok()?
                .install_recorder()
                .ok()?;
            metrics::describe_histogram!(
                GENAI_TOKENS,
                metrics::Unit::Count,
                "gen_ai.client.token.usage: tokens per call by gen_ai_token_type (input, output), OpenTelemetry GenAI conventions"
            );
            metrics::describe_histogram!(
                GENAI_DURATION,
                metrics::Unit::Seconds,
                "gen_ai.client.operation.duration: a call's duration (error_type on failures), OpenTelemetry GenAI conventions"
            );
            metrics::describe_histogram!(
                GENAI_FIRST_CHUNK,
                metrics::Unit::Seconds,
                "gen_ai.client.operation.time_to_first_chunk: a stream's first chunk, OpenTelemetry GenAI conventions"
            );
            metrics::describe_counter!("ax_requests_total", "Requests by alias, upstream and HTTP status");
            metrics::describe_histogram!("ax_request_duration_seconds", "Time from request to last byte");
            metrics::describe_histogram!("ax_time_to_first_token_seconds", "Time from request to first streamed token");
            metrics::describe_counter!("ax_tokens_total", "Tokens by alias, upstream and direction");
            metrics::describe_counter!("ax_upstream_attempts_total", "Upstream attempts by upstream and outcome");
            metrics::describe_gauge!(
                "ax_spool_last_commit_timestamp_seconds",
                "Unix time of the usage spool drain's last acknowledged pass"
            );
            metrics::describe_counter!(
                "ax_spool_drain_failures_total",
                "Usage spool drain passes that failed (retried)"
            );
            metrics::describe_gauge!("ax_config_version", "The configuration version this data plane serves");
            // Alert rules use these before anything failed: present at 0 from the start.
            metrics::counter!("ax_spool_drain_failures_total").absolute(0);
            metrics::describe_counter!(
                "ax_log_lines_dropped_total",
                "Log lines dropped because the log writer thread fell behind (the usage record itself is in the spool)"
            );
            Some(handle)
        })
        .clone()
}

/// `gen_ai.client.token.usage` as Prometheus names it.
pub const GENAI_TOKENS: &str = "gen_ai_client_token_usage";
/// `gen_ai.client.operation.duration`.
pub const GENAI_DURATION: &str = "gen_ai_client_operation_duration_seconds";
/// `gen_ai.client.operation.time_to_first_chunk`.
pub const GENAI_FIRST_CHUNK: &str = "gen_ai_client_operation_time_to_first_chunk_seconds";

/// What a call does, as `gen_ai.operation.name` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Operation {
    #[default]
    Chat,
    Embeddings,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Embeddings => "embeddings",
        }
    }
}

/// A provider as `gen_ai.provider.name` names it (the conventions' well-known values; the
/// built-in mock is ax's own).
pub fn genai_provider(kind: ax_protocol::config::ProviderKind) -> &'static str {
    use ax_protocol::config::ProviderKind;
    match kind {
        ProviderKind::Openai => "openai",
        ProviderKind::AzureOpenai => "azure.ai.openai",
        ProviderKind::Anthropic => "anthropic",
        ProviderKind::Gemini => "gcp.gemini",
        ProviderKind::Mock => "ax.mock",
    }
}

/// The GenAI histograms of one (operation, provider, requested alias, upstream model): the
/// conventions' attribute names as labels, every value from the configuration.
struct GenAi {
    input: metrics::Histogram,
    output: metrics::Histogram,
    duration: metrics::Histogram,
    first_chunk: metrics::Histogram,
    /// The span attributes of this (operation, alias, upstream, model), made when the first of
    /// its requests is traced.
    spans: Option<Box<super::traces::Constants>>,
}

impl GenAi {
    fn labels(operation: Operation, provider: &'static str, alias: &str, model: &str) -> Vec<metrics::Label> {
        vec![
            metrics::Label::new("gen_ai_operation_name", operation.as_str()),
            metrics::Label::new("gen_ai_provider_name", provider),
            metrics::Label::new("gen_ai_request_model", alias.to_owned()),
            metrics::Label::new("gen_ai_response_model", model.to_owned()),
        ]
    }

    fn new(operation: Operation, provider: &'static str, alias: &str, model: &str) -> Self {
        let labels = Self::labels(operation, provider, alias, model);
        let token = |t: &'static str| {
            let mut l = labels.clone();
            l.push(metrics::Label::new("gen_ai_token_type", t));
            metrics::histogram!(GENAI_TOKENS, l)
        };
        Self {
            input: token("input"),
            output: token("output"),
            duration: metrics::histogram!(GENAI_DURATION, labels.clone()),
            first_chunk: metrics::histogram!(GENAI_FIRST_CHUNK, labels),
            spans: None,
        }
    }
}

/// The metric handles of one (alias, upstream) pair. The `counter!` macros look a metric up by
/// its labels on every call (build the key, hash it, compare it, clone it: a tenth of a request's
/// instructions under callgrind); a served request uses these instead. Labels that vary more
/// (non-200 statuses, failed attempts' codes) still go through the macros.
struct Handles {
    ok: metrics::Counter,
    duration: metrics::Histogram,
    ttft: metrics::Histogram,
    /// prompt, completion, cached_prompt.
    tokens: [metrics::Counter; 3],
    attempt_ok: metrics::Counter,
    /// By (operation, model), made on first use (an upstream may serve an alias with more than
    /// one of its models; usually this holds one).
    genai: Vec<(Operation, String, GenAi)>,
}

/// Per serving thread, by alias then upstream: no lock, no cross-thread traffic. Bounded: cleared
/// past `MAX_CACHED` pairs (aliases come and go with configuration).
const MAX_CACHED: usize = 16_384;

#[derive(Default)]
struct Cache {
    by_alias: Map<String, Map<String, Handles>>,
    len: usize,
}

thread_local! {
    static HANDLES: RefCell<Cache> = RefCell::new(Cache::default());
}

impl Handles {
    fn new(alias: &str, upstream: &str) -> Self {
        let labels = |extra: Option<(&'static str, &'static str)>| {
            let mut l = vec![
                metrics::Label::new("alias", alias.to_owned()),
                metrics::Label::new("upstream", upstream.to_owned()),
            ];
            if let Some((k, v)) = extra {
                l.push(metrics::Label::new(k, v));
            }
            l
        };
        let token = |d: &'static str| metrics::counter!("ax_tokens_total", labels(Some(("direction", d))));
        Self {
            ok: metrics::counter!("ax_requests_total", labels(Some(("status", "200")))),
            duration: metrics::histogram!("ax_request_duration_seconds", labels(None)),
            ttft: metrics::histogram!("ax_time_to_first_token_seconds", labels(None)),
            tokens: [token("prompt"), token("completion"), token("cached_prompt")],
            attempt_ok: metrics::counter!(
                "ax_upstream_attempts_total",
                vec![metrics::Label::new("upstream", upstream.to_owned()), metrics::Label::new("outcome", "ok")]
            ),
            genai: Vec::new(),
        }
    }

    /// Runs `f` with this thread's handles of (alias, upstream), made on first use.
    fn with(alias: &str, upstream: &str, f: impl FnOnce(&mut Self)) {
        HANDLES.with(|cell| {
            let mut cache = cell.borrow_mut();
            let Cache { by_alias, len } = &mut *cache;
            if let Some(h) = by_alias.get_mut(alias).and_then(|m| m.get_mut(upstream)) {
                return f(h);
            }
            if *len >= MAX_CACHED {
                by_alias.clear();
                *len = 0;
            }
            *len += 1;
            let h = by_alias
                .entry(alias.to_owned())
                .or_default()
                .entry(upstream.to_owned())
                .or_insert_with(|| Self::new(alias, upstream));
            f(h);
        });
    }
}

/// A traced request: its trace context and what its span says of the request.
struct Traced {
    ctx: crate::trace::TraceContext,
    max_tokens: Option<u32>,
    temperature: Option<f64>,
    /// The answer's id and finish reasons.
    answer: ax_wire::canonical::AnswerFacts,
    /// The prompt and completion, for a tenant that records them.
    content: Option<Box<super::content::Recorded>>,
}

pub struct Meter {
    pub record: UsageRecord,
    start: Instant,
    ttft: Option<Duration>,
    /// Set once the record was emitted; a drop before that means the client went away.
    emitted: bool,
    prices: Option<ax_protocol::price::Prices>,
    /// The serving upstream's `gen_ai.provider.name`, once one was tried.
    provider: Option<&'static str>,
    operation: Operation,
    /// The request's trace, when tracing is on, and what its span says of the request.
    trace: Option<Box<Traced>>,
    /// Whether the provider reported usage; if not, tokens are estimated at the end.
    usage_known: bool,
    /// Prompt tokens as estimated before routing (for records without provider usage).
    prompt_estimate: u64,
    /// Content and tool-call deltas forwarded so far (a stream's completion tokens, estimated).
    deltas: u64,
    /// The answering attempt's byte counts, read when the record is emitted.
    answering: Option<std::sync::Arc<crate::trace::AttemptIo>>,
}

impl Meter {
    pub fn new(request_id: &str, tenant: &str, key_id: &str, alias: &str, stream: bool, start: Instant) -> Self {
        let started_at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .saturating_sub(u64::try_from(start.elapsed().as_millis()).unwrap_or(0));
        Self {
            record: UsageRecord {
                request_id: request_id.to_owned(),
                started_at_ms,
                tenant: tenant.to_owned(),
                key_id: key_id.to_owned(),
                alias: alias.to_owned(),
                stream,
                ..UsageRecord::default()
            },
            start,
            ttft: None,
            emitted: false,
            prices: None,
            provider: None,
            operation: Operation::Chat,
            trace: None,
            usage_known: false,
            prompt_estimate: 0,
            deltas: 0,
            answering: None,
        }
    }

    /// The usage record of a request rejected before any upstream was chosen.
    pub fn rejected(
        request_id: &str,
        caller: Option<(&str, &str)>,
        alias: Option<&str>,
        start: Instant,
        trace: Option<crate::trace::TraceContext>,
        e: &AxError,
    ) {
        let (tenant, key) = caller.unwrap_or_default();
        let mut m = Self::new(request_id, tenant, key, alias.unwrap_or_default(), false, start);
        m.trace(trace, None, None);
        m.finish(e.status().as_u16(), Some(e.code()));
    }

    /// `x-ax-degraded`: a budget sent the request to a cheaper alias.
    pub fn degraded(&mut self, why: Option<String>) {
        self.record.degraded = why;
    }

    pub fn prompt_estimate(&mut self, tokens: u64) {
        self.prompt_estimate = tokens;
    }

    /// The attempt that answered the caller (or the last one, when all failed): its upstream and
    /// model, its number, the fallback alias it served, and the model's prices.
    pub fn served_by(&mut self, s: &Served<'_>) {
        let r = &mut self.record;
        s.up.name.clone_into(&mut r.upstream);
        s.model.name.clone_into(&mut r.model);
        r.attempts = s.attempts;
        r.retry_of = (s.attempts > 1).then(|| attempt_id(&r.request_id, s.attempts - 1));
        r.fallback = s.fallback.map(str::to_owned);
        self.prices = s.model.prices;
        self.provider = Some(genai_provider(s.up.kind));
    }

    /// The request's trace (exported with the record), with its output cap and temperature.
    pub fn trace(
        &mut self,
        ctx: Option<crate::trace::TraceContext>,
        max_tokens: Option<u32>,
        temperature: Option<f64>,
    ) {
        self.trace =
            ctx.map(|ctx| Box::new(Traced { ctx, max_tokens, temperature, answer: Default::default(), content: None }));
    }

    /// The request's span is to carry its prompt and completion (a sampled request of a tenant
    /// that records them), starting with the request's messages.
    pub fn record_content(&mut self, req: &ax_wire::canonical::ChatRequest) {
        if let Some(t) = &mut self.trace {
            let mut c = super::content::Recorded::default();
            c.input(req);
            t.content = Some(Box::new(c));
        }
    }

    /// Whether the request's span carries its content.
    pub fn records_content(&self) -> bool {
        self.trace.as_ref().is_some_and(|t| t.content.is_some())
    }

    /// The completion, for a request whose span carries its content.
    pub fn completion(&mut self, r: &ax_wire::canonical::ChatResponse) {
        if let Some(c) = self.trace.as_mut().and_then(|t| t.content.as_mut()) {
            c.output(r);
        }
    }

    /// Whether the request is traced (its span wants the answer's facts).
    pub fn traced(&self) -> bool {
        self.trace.is_some()
    }

    /// The answer's id and finish reasons, for the request's span.
    pub fn answered(&mut self, facts: ax_wire::canonical::AnswerFacts) {
        if let Some(t) = &mut self.trace {
            t.answer = facts;
        }
    }

    /// `gen_ai.operation.name` of the call (chat unless said otherwise).
    pub fn operation(&mut self, op: Operation) {
        self.operation = op;
    }

    /// Every attempt of the request, in order, and the byte counts of the one that answered.
    pub fn attempts(&mut self, list: Vec<AttemptRecord>, answering: Option<std::sync::Arc<crate::trace::AttemptIo>>) {
        self.record.attempt_list = list;
        self.answering = answering;
    }

    pub fn first_token(&mut self) {
        if self.ttft.is_none() {
            self.ttft = Some(self.start.elapsed());
        }
    }

    /// One more content or tool-call delta went to the caller.
    pub fn delta(&mut self) {
        self.deltas += 1;
    }

    pub fn usage(&mut self, u: &Usage) {
        self.usage_known = true;
        self.set_usage(u);
    }

    fn set_usage(&mut self, u: &Usage) {
        let r = &mut self.record;
        r.prompt_tokens = u.prompt_tokens;
        r.completion_tokens = u.completion_tokens;
        r.cached_prompt_tokens = u.cached_tokens;
        r.cache_write_tokens = u.cache_write_tokens;
        r.cost_micro_usd = self.prices.map(|p| p.cost_micro_usd(u.tokens()));
    }

    pub fn cost_micro_usd(&self) -> Option<u64> {
        self.record.cost_micro_usd
    }

    /// Whether the record's tokens are known: reported by the provider, or estimated once the
    /// record was emitted.
    pub fn tokens_known(&self) -> bool {
        self.usage_known || self.record.estimated
    }

    /// The caller went away before the end: the record is emitted now, marked incomplete.
    pub fn disconnected(&mut self) {
        if !self.emitted {
            self.record.status = 200;
            self.record.incomplete = true;
            self.record.error_code = Some("client_disconnected".to_owned());
            self.emit();
        }
    }

    /// The call ended as the caller saw it: `status`, and the error code if it failed. Emits the
    /// record now, before the caller receives the end of the answer.
    pub fn finish(&mut self, status: u16, error_code: Option<&'static str>) {
        self.record.status = status;
        self.record.error_code = error_code.map(str::to_owned);
        if error_code.is_some() && self.record.stream && status == 200 {
            self.record.incomplete = true;
        }
        self.emit();
    }

    /// Fills tokens the provider did not report (a stream cut short, or a server that sends no
    /// usage): the prompt estimate, and one token per forwarded delta (providers stream about one
    /// token per event). Flagged `estimated`.
    fn estimate_missing(&mut self) {
        let served = !self.record.upstream.is_empty() && (self.deltas > 0 || self.record.status == 200);
        if self.usage_known || !served {
            return;
        }
        let u = Usage { prompt_tokens: self.prompt_estimate, completion_tokens: self.deltas, ..Usage::default() };
        self.set_usage(&u);
        self.record.estimated = true;
    }

    fn emit(&mut self) {
        if self.emitted {
            return;
        }
        self.emitted = true;
        self.estimate_missing();
        let elapsed = self.start.elapsed();
        let r = &mut self.record;
        r.latency_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        r.ttft_ms = self.ttft.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
        // The answering attempt: its whole answer was read by now, and its first token came.
        if let Some(a) = r.attempt_list.iter_mut().rev().find(|a| a.error_code.is_none()) {
            if let Some(io) = self.answering.take() {
                (a.sent_bytes, a.received_bytes) = io.counts();
            }
            a.ttft_ms = self.ttft.map(|t| {
                let t = u64::try_from(t.as_micros()).unwrap_or(u64::MAX).saturating_sub(a.offset_us);
                t / 1000
            });
        }

        let (provider, operation, ttft) = (self.provider, self.operation, self.ttft);
        let traced = self.trace.as_deref().filter(|t| super::traces::exported(&t.ctx, r));
        if let Some(t) = traced {
            r.trace_id = Some(t.ctx.trace_id_hex());
        }
        let r = &*r;
        let span_facts = traced.map(|t| super::traces::SpanFacts {
            operation: operation.as_str(),
            provider,
            max_tokens: t.max_tokens,
            temperature: t.temperature,
            ttft,
            elapsed,
            answer: &t.answer,
            content: t.content.as_deref(),
        });
        // The spans of a served request are written with its key's constants, here.
        let mut spans_due = traced.zip(span_facts.as_ref());
        Handles::with(&r.alias, &r.upstream, |h| {
            if let Some(provider) = provider {
                let g = match h.genai.iter().position(|(op, m, _)| *op == operation && *m == r.model) {
                    Some(i) => &mut h.genai[i].2,
                    None => {
                        h.genai.push((operation, r.model.clone(), GenAi::new(operation, provider, &r.alias, &r.model)));
                        let last = h.genai.len() - 1;
                        &mut h.genai[last].2
                    }
                };
                if let Some((t, f)) = spans_due.take() {
                    let c = g.spans.get_or_insert_with(|| {
                        let c = super::traces::Constants::new(
                            operation.as_str(),
                            provider,
                            &r.alias,
                            &r.upstream,
                            &r.model,
                        );
                        Box::new(c)
                    });
                    super::traces::record(&t.ctx, r, f, Some(c));
                }
                match &r.error_code {
                    None => g.duration.record(elapsed.as_secs_f64()),
                    Some(code) => {
                        let mut l = GenAi::labels(operation, provider, &r.alias, &r.model);
                        l.push(metrics::Label::new("error_type", code.clone()));
                        metrics::histogram!(GENAI_DURATION, l).record(elapsed.as_secs_f64());
                    }
                }
                if r.prompt_tokens > 0 || r.completion_tokens > 0 {
                    g.input.record(r.prompt_tokens as f64);
                    g.output.record(r.completion_tokens as f64);
                }
                if let (true, Some(t)) = (r.stream, ttft) {
                    g.first_chunk.record(t.as_secs_f64());
                }
            }
            if r.status == 200 {
                h.ok.increment(1);
            } else {
                metrics::counter!("ax_requests_total", "alias" => r.alias.clone(), "upstream" => r.upstream.clone(), "status" => r.status.to_string())
                    .increment(1);
            }
            h.duration.record(elapsed.as_secs_f64());
            if let Some(t) = self.ttft {
                h.ttft.record(t.as_secs_f64());
            }
            for (counter, n) in h.tokens.iter().zip([r.prompt_tokens, r.completion_tokens, r.cached_prompt_tokens]) {
                if n > 0 {
                    counter.increment(n);
                }
            }
            for a in &r.attempt_list {
                match &a.error_code {
                    None if a.upstream == r.upstream => h.attempt_ok.increment(1),
                    code => {
                        let outcome = code.clone().unwrap_or_else(|| "ok".to_owned());
                        metrics::counter!("ax_upstream_attempts_total", "upstream" => a.upstream.clone(), "outcome" => outcome)
                            .increment(1);
                    }
                }
            }
        });
        crate::metering::spool::append(r);
        crate::metering::usage_log::line(r);
        if let Some((t, f)) = spans_due {
            super::traces::record(&t.ctx, r, f, None);
        }
    }
}

impl Drop for Meter {
    /// A meter dropped before its record was emitted belongs to a caller that went away.
    fn drop(&mut self) {
        self.disconnected();
    }
}

/// The health table served at `/admin/health` and sent to the control plane.
pub fn health_table(snap: &crate::config::snapshot::Snapshot) -> ax_protocol::health::NodeHealth {
    use ax_protocol::health::{BreakerStatus, NodeHealth, UpstreamStatus};
    let upstreams = snap
        .upstreams
        .iter()
        .map(|u| {
            let (state, reopens_in) = u.health.breaker.state();
            let models = u
                .models
                .iter()
                .map(|m| {
                    let mut row = m.health.snapshot(u.breaker.window_ms);
                    row.model.clone_from(&m.name);
                    row
                })
                .collect();
            UpstreamStatus {
                upstream: u.name.clone(),
                provider: u.kind.as_str().to_owned(),
                in_flight: u.health.in_flight(),
                max_concurrency: u.max_concurrency,
                breaker: BreakerStatus {
                    state,
                    reopens_in_ms: reopens_in.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                },
                window_ms: u.breaker.window_ms,
                models,
            }
        })
        .collect();
    NodeHealth { config_version: snap.version, upstreams }
}

/// Sets the health gauges from the live table; called when `/metrics` is scraped, never per request.
pub fn health_gauges(snap: &crate::config::snapshot::Snapshot) {
    use crate::state::health::BreakerState;
    metrics::gauge!("ax_config_version").set(snap.version as f64);
    if let Some(n) = crate::metering::usage_log::dropped() {
        metrics::counter!("ax_log_lines_dropped_total").absolute(n);
    }
    for u in &snap.upstreams {
        let name = u.name.clone();
        metrics::gauge!("ax_upstream_in_flight", "upstream" => name.clone()).set(f64::from(u.health.in_flight()));
        let state = match u.health.breaker.state().0 {
            BreakerState::Closed => 0.0,
            BreakerState::Open => 1.0,
            BreakerState::HalfOpen => 2.0,
        };
        metrics::gauge!("ax_upstream_breaker_state", "upstream" => name.clone()).set(state);
        for m in &u.models {
            let s = m.health.snapshot(u.breaker.window_ms);
            let labels = [("upstream", name.clone()), ("model", m.name.clone())];
            if let Some(r) = s.success_rate {
                metrics::gauge!("ax_upstream_success_ratio", &labels).set(r);
            }
            for (metric, v) in [
                ("ax_upstream_latency_p50_ms", s.latency_p50_ms),
                ("ax_upstream_latency_p95_ms", s.latency_p95_ms),
                ("ax_upstream_ttft_p50_ms", s.ttft_p50_ms),
                ("ax_upstream_ttft_p95_ms", s.ttft_p95_ms),
            ] {
                if let Some(v) = v {
                    metrics::gauge!(metric, &labels).set(v);
                }
            }
        }
    }
}
