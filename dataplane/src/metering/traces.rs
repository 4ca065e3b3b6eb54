//! Traces over OTLP/HTTP (protobuf), with the OpenTelemetry GenAI conventions: a server span per
//! request and a client span per upstream attempt, made from the request's record when it is
//! emitted (so a request costs nothing more until then, and nothing at all with tracing off).
//!
//! The spans of a request go into a bounded queue with `try_send`: a serving thread never waits
//! on the exporter. The `ax-traces` thread batches them (up to `MAX_BATCH` spans, or what came in
//! `BATCH_WAIT`) and exports each batch through `opentelemetry-otlp`'s HTTP exporter (TCP_NODELAY,
//! a timeout per batch). A full queue (the collector slow) and a failed export (the collector
//! down) drop spans, counted in `ax_trace_spans_dropped_total{reason}`; exported spans in
//! `ax_trace_spans_exported_total`. Memory is bounded by the queue.
//!
//! Prompts and completions are never recorded: only the record's figures are.

use std::borrow::Cow;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use ax_protocol::usage::UsageRecord;
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};

use crate::trace::{Sampler, TraceContext};

/// Spans per export.
const MAX_BATCH: usize = 512;
/// How long a batch waits to fill.
const BATCH_WAIT: Duration = Duration::from_millis(500);
/// One export's limit, retries included.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where and how traces go.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The OTLP/HTTP traces URL (`…/v1/traces`); `None`: the standard environment variables'
    /// (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`).
    pub endpoint: Option<String>,
    pub service_name: String,
    pub sampler: Sampler,
    /// Requests whose spans may wait for the exporter; past it they are dropped (counted).
    pub queue: usize,
}

static QUEUE: OnceLock<SyncSender<Vec<SpanData>>> = OnceLock::new();

/// Starts the exporter thread and turns tracing on. Call once, inside no runtime (the thread
/// runs its own).
pub fn install(settings: Settings) -> Result<(), String> {
    let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
    connector.set_nodelay(true);
    let client = opentelemetry_http::hyper::HyperClient::new(connector, EXPORT_TIMEOUT, None);
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_timeout(EXPORT_TIMEOUT);
    if let Some(e) = &settings.endpoint {
        builder = builder.with_endpoint(e.clone());
    }
    let mut exporter = builder.build().map_err(|e| format!("the OTLP trace exporter: {e}"))?;
    exporter.set_resource(
        &opentelemetry_sdk::Resource::builder_empty()
            .with_attributes([
                KeyValue::new("service.name", settings.service_name.clone()),
                KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            ])
            .build(),
    );
    let (tx, rx) = std::sync::mpsc::sync_channel(settings.queue.max(1));
    std::thread::Builder::new()
        .name("ax-traces".to_owned())
        .spawn(move || export_loop(exporter, rx))
        .map_err(|e| format!("the trace exporter thread: {e}"))?;
    metrics::describe_counter!("ax_trace_spans_exported_total", "Trace spans the OTLP collector accepted");
    metrics::describe_counter!(
        "ax_trace_spans_dropped_total",
        "Trace spans dropped: queue_full (the exporter fell behind) or export_failed (the collector refused or was unreachable)"
    );
    for reason in ["queue_full", "export_failed"] {
        metrics::counter!("ax_trace_spans_dropped_total", "reason" => reason).absolute(0);
    }
    metrics::counter!("ax_trace_spans_exported_total").absolute(0);
    let _ = QUEUE.set(tx);
    crate::trace::install(settings.sampler);
    Ok(())
}

fn export_loop(exporter: opentelemetry_otlp::SpanExporter, rx: Receiver<Vec<SpanData>>) {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "the trace exporter has no runtime; spans are dropped");
            return;
        }
    };
    rt.block_on(async {
        while let Ok(mut batch) = rx.recv() {
            let until = Instant::now() + BATCH_WAIT;
            while batch.len() < MAX_BATCH {
                match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                    Ok(mut more) => batch.append(&mut more),
                    Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
                }
            }
            let n = batch.len() as u64;
            match tokio::time::timeout(EXPORT_TIMEOUT, exporter.export(batch)).await {
                Ok(Ok(())) => metrics::counter!("ax_trace_spans_exported_total").increment(n),
                outcome => {
                    let why = match outcome {
                        Ok(Err(e)) => e.to_string(),
                        _ => "timed out".to_owned(),
                    };
                    tracing::warn!(spans = n, error = %why, "trace export failed; the spans are dropped");
                    metrics::counter!("ax_trace_spans_dropped_total", "reason" => "export_failed").increment(n);
                }
            }
        }
    });
}

/// What a request's spans say beyond its record.
#[derive(Debug, Clone, Copy)]
pub struct SpanFacts {
    pub operation: &'static str,
    /// The serving upstream's `gen_ai.provider.name`.
    pub provider: Option<&'static str>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub ttft: Option<Duration>,
    /// How long the request took (its span's length).
    pub elapsed: Duration,
}

/// Whether a finished request's spans are exported: its trace was sampled, or it failed.
pub fn exported(ctx: &TraceContext, r: &UsageRecord) -> bool {
    ctx.sampled || r.error_code.is_some() || r.status >= 500
}

/// Queues the spans of a finished request the meter found `exported`.
pub fn record(ctx: &TraceContext, r: &UsageRecord, facts: &SpanFacts) {
    let Some(queue) = QUEUE.get() else { return };
    let spans = spans(ctx, r, facts, SystemTime::now());
    let n = spans.len() as u64;
    if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = queue.try_send(spans) {
        metrics::counter!("ax_trace_spans_dropped_total", "reason" => "queue_full").increment(n);
    }
}

fn scope() -> InstrumentationScope {
    static SCOPE: OnceLock<InstrumentationScope> = OnceLock::new();
    SCOPE.get_or_init(|| InstrumentationScope::builder("ax").with_version(env!("CARGO_PKG_VERSION")).build()).clone()
}

fn context(trace_id: u128, span: u64) -> SpanContext {
    SpanContext::new(
        TraceId::from_bytes(trace_id.to_be_bytes()),
        SpanId::from_bytes(span.to_be_bytes()),
        TraceFlags::SAMPLED,
        false,
        TraceState::default(),
    )
}

/// One span: its context, its parent (id, whether remote), kind, name, (start, end).
fn span(
    context: SpanContext,
    parent: Option<(u64, bool)>,
    span_kind: SpanKind,
    name: String,
    (start_time, end_time): (SystemTime, SystemTime),
    attributes: Vec<KeyValue>,
    status: Status,
) -> SpanData {
    SpanData {
        span_context: context,
        parent_span_id: parent.map_or(SpanId::INVALID, |p| SpanId::from_bytes(p.0.to_be_bytes())),
        parent_span_is_remote: parent.is_some_and(|p| p.1),
        span_kind,
        name: Cow::Owned(name),
        start_time,
        end_time,
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope(),
    }
}

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The request's span and one per attempt, ending at `end`.
fn spans(ctx: &TraceContext, r: &UsageRecord, f: &SpanFacts, end: SystemTime) -> Vec<SpanData> {
    let start = end.checked_sub(f.elapsed).unwrap_or(end);
    let mut a = vec![
        KeyValue::new("gen_ai.operation.name", f.operation),
        KeyValue::new("gen_ai.request.model", r.alias.clone()),
        KeyValue::new("ax.request_id", r.request_id.clone()),
        KeyValue::new("ax.tenant", r.tenant.clone()),
        KeyValue::new("ax.key_id", r.key_id.clone()),
        KeyValue::new("ax.alias", r.alias.clone()),
        KeyValue::new("ax.attempts", i64::from(r.attempts)),
        KeyValue::new("ax.stream", r.stream),
        KeyValue::new("http.response.status_code", i64::from(r.status)),
    ];
    if let Some(p) = f.provider {
        a.push(KeyValue::new("gen_ai.provider.name", p));
    }
    if !r.upstream.is_empty() {
        a.push(KeyValue::new("ax.upstream", r.upstream.clone()));
        a.push(KeyValue::new("gen_ai.response.model", r.model.clone()));
    }
    if let Some(m) = f.max_tokens {
        a.push(KeyValue::new("gen_ai.request.max_tokens", i64::from(m)));
    }
    if let Some(t) = f.temperature {
        a.push(KeyValue::new("gen_ai.request.temperature", t));
    }
    if r.status == 200 || r.prompt_tokens > 0 || r.completion_tokens > 0 {
        a.push(KeyValue::new("gen_ai.usage.input_tokens", int(r.prompt_tokens)));
        a.push(KeyValue::new("gen_ai.usage.output_tokens", int(r.completion_tokens)));
        a.push(KeyValue::new("gen_ai.usage.cache_read.input_tokens", int(r.cached_prompt_tokens)));
        a.push(KeyValue::new("gen_ai.usage.cache_creation.input_tokens", int(r.cache_write_tokens)));
    }
    if let Some(t) = f.ttft {
        a.push(KeyValue::new("gen_ai.response.time_to_first_chunk", t.as_secs_f64()));
    }
    if let Some(c) = r.cost_micro_usd {
        a.push(KeyValue::new("ax.cost_usd", c as f64 / 1e6));
    }
    if let Some(rt) = &r.retry_of {
        a.push(KeyValue::new("ax.retry_of", rt.clone()));
    }
    if let Some(fb) = &r.fallback {
        a.push(KeyValue::new("ax.fallback", fb.clone()));
    }
    let status = match &r.error_code {
        Some(code) => {
            a.push(KeyValue::new("error.type", code.clone()));
            Status::error(code.clone())
        }
        None => Status::Unset,
    };
    let mut out = Vec::with_capacity(1 + r.attempt_list.len());
    out.push(span(
        context(ctx.trace_id, ctx.span),
        ctx.parent.map(|p| (p, true)),
        SpanKind::Server,
        format!("{} {}", f.operation, r.alias),
        (start, end),
        a,
        status,
    ));
    for (i, at) in r.attempt_list.iter().enumerate() {
        let n = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let begin = start + Duration::from_micros(at.offset_us);
        let mut a = vec![
            KeyValue::new("gen_ai.operation.name", f.operation),
            KeyValue::new("gen_ai.request.model", at.model.clone()),
            KeyValue::new("ax.upstream", at.upstream.clone()),
            KeyValue::new("ax.attempt", i64::from(n)),
            KeyValue::new("ax.attempt_id", at.attempt_id.clone()),
            KeyValue::new("ax.possibly_billed", at.possibly_billed),
        ];
        if !at.provider.is_empty() {
            a.push(KeyValue::new("gen_ai.provider.name", at.provider.clone()));
        }
        if i > 0 {
            a.push(KeyValue::new("ax.retry_of", r.attempt_list[i - 1].attempt_id.clone()));
        }
        let status = match &at.error_code {
            Some(code) => {
                a.push(KeyValue::new("error.type", code.clone()));
                Status::error(code.clone())
            }
            None => {
                a.push(KeyValue::new("gen_ai.response.model", at.model.clone()));
                Status::Unset
            }
        };
        // The attempt that answered lasts as long as its answer (a stream's last event).
        let finish = if at.error_code.is_none() {
            end
        } else {
            (begin + Duration::from_millis(at.latency_ms)).min(end).max(begin)
        };
        out.push(span(
            context(ctx.trace_id, ctx.attempt_span(n)),
            Some((ctx.span, false)),
            SpanKind::Client,
            format!("{} {}", f.operation, at.model),
            (begin, finish),
            a,
            status,
        ));
    }
    out
}
