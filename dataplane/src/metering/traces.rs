//! Traces over OTLP/HTTP (protobuf), with the OpenTelemetry GenAI conventions: a server span per
//! request and a client span per upstream attempt, made from the request's record when it is
//! emitted (so a request costs nothing more until then, and nothing at all with tracing off).
//!
//! A request's spans are written as protobuf (`otlp`) into its serving thread's batch, which goes
//! into a bounded queue with `try_send` once it holds `LOCAL_BYTES`, or when the thread is about
//! to go idle and its oldest spans have waited `LOCAL_AGE` (`flush`, the park hook): one buffer
//! and one hand-off per batch, not per request (a buffer per request, freed by the exporter's
//! thread, took mimalloc's slow path at every allocation). A serving thread never waits on the
//! exporter. The `ax-traces` thread batches
//! them (up to `MAX_BATCH` spans, or what came in `BATCH_WAIT`; the serving threads' buffers sent
//! as they are, one vectored body, never copied) and POSTs each batch to the
//! collector (`http://` or `https://`, TCP_NODELAY, kept alive, the batch retried while the
//! collector answers 429/502/503/504 or cannot be reached, within the export timeout). A full
//! queue (the collector slow) and a failed export (the collector down or refusing) drop spans,
//! counted in `ax_trace_spans_dropped_total{reason}`; exported spans in
//! `ax_trace_spans_exported_total`. Memory is bounded by the queue.
//!
//! Prompts and completions are recorded only for a tenant that asks (`trace_content`), on its
//! sampled requests' spans (`content`); otherwise a span holds only the record's figures.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use ax_protocol::usage::UsageRecord;
use http::{HeaderName, HeaderValue, Uri};

use super::otlp::{self, key, Kind, SpanHead, Value};
use crate::trace::{Hop, Sampler, TraceContext};
use crate::transport;

/// Spans per export (about a thousand requests': at 35,000 requests a second a POST every 30 ms;
/// each POST cost the exporter ~96 µs at 512 spans, session 23).
const MAX_BATCH: usize = 2048;
/// How long a batch waits to fill.
const BATCH_WAIT: Duration = Duration::from_millis(500);
/// What is read, at most, of a collector's answer.
const MAX_ANSWER: usize = 64 * 1024;

/// Where and how traces go.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The OTLP/HTTP traces URL (`…/v1/traces`).
    pub endpoint: String,
    /// Sent with every export (`OTEL_EXPORTER_OTLP_HEADERS`: a collector's credentials). Never
    /// printed.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// PEM certificates trusted besides the Mozilla roots (`OTEL_EXPORTER_OTLP_CERTIFICATE`).
    pub ca_pem: Option<Vec<u8>>,
    /// One export's limit, retries included (`OTEL_EXPORTER_OTLP_TIMEOUT`, default 10 s).
    pub timeout: Duration,
    pub service_name: String,
    pub sampler: Sampler,
    /// Requests whose spans may wait for the exporter; past it they are dropped (counted).
    pub queue: usize,
}

impl Settings {
    /// The settings `server.tracing` and the standard OpenTelemetry variables (read through
    /// `env`) ask for; `None` when tracing stays off: neither asks for it, or
    /// `OTEL_SDK_DISABLED=true`. ax's keys win over the variables; the traces-only variables over
    /// the general ones.
    pub fn resolve(
        spec: Option<&ax_protocol::config::TracingSpec>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, String> {
        let either = |traces: &str, general: &str| {
            env(traces).map(|v| (traces.to_owned(), v)).or_else(|| env(general).map(|v| (general.to_owned(), v)))
        };
        let by_env = either("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT");
        if (spec.is_none() && by_env.is_none())
            || env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        {
            return Ok(None);
        }
        let spec = spec.cloned().unwrap_or_default();
        if let Some((name, p)) = either("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL") {
            if p.trim() != "http/protobuf" {
                return Err(format!("{name}={p}: ax exports traces over OTLP/HTTP with protobuf (http/protobuf) only; point it at the collector's HTTP port (4318)"));
            }
        }
        let endpoint = match (spec.endpoint, by_env) {
            // ax's key, and the general variable, name the collector: the traces path is added.
            (Some(e), _) => with_traces_path(&e),
            (None, Some((name, e))) if name == "OTEL_EXPORTER_OTLP_ENDPOINT" => with_traces_path(&e),
            // The traces variable is the whole URL.
            (None, Some((_, e))) => e.trim().to_owned(),
            (None, None) => "http://localhost:4318/v1/traces".to_owned(),
        };
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(format!("the OTLP traces endpoint {endpoint:?} is not an http:// or https:// URL"));
        }
        let headers = match either("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS") {
            Some((name, v)) => parse_headers(&v).map_err(|e| format!("{name}: {e}"))?,
            None => Vec::new(),
        };
        let timeout = match either("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT") {
            Some((name, v)) => match v.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                _ => return Err(format!("{name}={v}: a timeout in milliseconds")),
            },
            None => Duration::from_secs(10),
        };
        let ca_pem = match either("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE") {
            Some((name, path)) => Some(std::fs::read(path.trim()).map_err(|e| format!("{name}={path}: {e}"))?),
            None => None,
        };
        let sampler = match spec.sample_ratio {
            Some(ratio) => Sampler { ratio, parent_based: true },
            None => {
                let name = env("OTEL_TRACES_SAMPLER");
                Sampler::from_otel(name.as_deref(), env("OTEL_TRACES_SAMPLER_ARG").as_deref()).ok_or_else(|| {
                    format!("OTEL_TRACES_SAMPLER={}: not a sampler ax knows", name.unwrap_or_default())
                })?
            }
        };
        Ok(Some(Self {
            endpoint,
            headers,
            ca_pem,
            timeout,
            service_name: spec
                .service_name
                .or_else(|| env("OTEL_SERVICE_NAME"))
                .unwrap_or_else(|| "ax-dataplane".to_owned()),
            sampler,
            queue: spec.queue.map_or(4096, |q| q as usize),
        }))
    }
}

fn with_traces_path(e: &str) -> String {
    let e = e.trim().trim_end_matches('/');
    if e.ends_with("/v1/traces") {
        e.to_owned()
    } else {
        format!("{e}/v1/traces")
    }
}

/// `OTEL_EXPORTER_OTLP_HEADERS`: `key=value` pairs separated by commas, values percent-encoded
/// (the W3C Baggage format the specification names).
fn parse_headers(v: &str) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
    let mut out = Vec::new();
    for (i, pair) in v.split(',').map(str::trim).filter(|p| !p.is_empty()).enumerate() {
        // (The pair is not echoed: it may be a credential written without its name.)
        let Some((k, val)) = pair.split_once('=') else {
            return Err(format!("pair {} is not key=value", i + 1));
        };
        let name =
            HeaderName::from_bytes(k.trim().as_bytes()).map_err(|_| format!("{:?} is not a header name", k.trim()))?;
        let decoded = percent_encoding::percent_decode_str(val.trim()).decode_utf8_lossy();
        // The value is a credential, often: it is never echoed.
        let value =
            HeaderValue::from_str(&decoded).map_err(|_| format!("the value of {name} is not a header value"))?;
        out.push((name, value));
    }
    Ok(out)
}

/// Spans, encoded: how many, and of how many requests.
struct Spans {
    bytes: Vec<u8>,
    count: u64,
    requests: u64,
}

/// A serving thread hands its spans over once it holds this many bytes (about 20 requests')…
const LOCAL_BYTES: usize = 32 * 1024;
/// …or when it goes idle with spans this old.
const LOCAL_AGE: Duration = Duration::from_millis(100);

/// A serving thread's spans not yet handed over, and when the first of them was written.
struct Local {
    spans: Spans,
    since: Option<std::time::Instant>,
}

thread_local! {
    static LOCAL: std::cell::RefCell<Local> = const {
        std::cell::RefCell::new(Local { spans: Spans { bytes: Vec::new(), count: 0, requests: 0 }, since: None })
    };
}

/// Requests whose spans are queued for the exporter, and how many may be (`Settings::queue`).
static QUEUED: AtomicU64 = AtomicU64::new(0);
static QUEUE_LIMIT: AtomicU64 = AtomicU64::new(4096);

static QUEUE: OnceLock<SyncSender<Spans>> = OnceLock::new();
/// The exporter thread: woken when `WAKE_AT` spans wait (half a batch, or the queue's length in
/// requests when that is less), else it wakes by itself every
/// `BATCH_WAIT`. (A blocking `recv` would have every request's `send` wake it: a futex call and a
/// context switch per request, a third of a traced request's cost in session 20's first try.)
static EXPORTER: OnceLock<std::thread::Thread> = OnceLock::new();
/// Spans queued and not yet taken by the exporter.
static PENDING: AtomicU64 = AtomicU64::new(0);
static WAKE_AT: AtomicU64 = AtomicU64::new(MAX_BATCH as u64 / 2);

/// The collector: where batches go, and the head each starts with.
struct Collector {
    client: transport::Client,
    path: Uri,
    headers: Vec<(HeaderName, HeaderValue)>,
    timeout: Duration,
    resource: Vec<(&'static str, String)>,
}

/// Checks the settings, starts the exporter thread and turns tracing on. Call once, inside no
/// runtime (the thread runs its own).
pub fn install(settings: Settings) -> Result<(), String> {
    let url = reqwest::Url::parse(&settings.endpoint)
        .map_err(|e| format!("the OTLP traces endpoint {:?}: {e}", settings.endpoint))?;
    let path: Uri =
        url[url::Position::BeforePath..].parse().map_err(|e| format!("the OTLP traces endpoint's path: {e}"))?;
    let mut client = transport::Client::new(&url, http::HeaderMap::new(), settings.timeout, 1)
        .map_err(|e| format!("the OTLP traces endpoint {}: {e}", settings.endpoint))?;
    if let Some(pem) = &settings.ca_pem {
        client = client.trusting(pem).map_err(|e| format!("the OTLP certificate: {e}"))?;
    }
    let collector = Collector {
        client,
        path,
        headers: settings.headers,
        timeout: settings.timeout,
        resource: vec![
            ("service.name", settings.service_name),
            ("service.version", env!("CARGO_PKG_VERSION").to_owned()),
            ("telemetry.sdk.name", "ax".to_owned()),
            ("telemetry.sdk.language", "rust".to_owned()),
        ],
    };
    let (tx, rx) = std::sync::mpsc::sync_channel(settings.queue.max(1));
    QUEUE_LIMIT.store(settings.queue.max(1) as u64, Ordering::Relaxed);
    WAKE_AT.store((MAX_BATCH as u64 / 2).min(settings.queue.max(1) as u64), Ordering::Relaxed);
    let exporter = std::thread::Builder::new()
        .name("ax-traces".to_owned())
        .spawn(move || export_loop(&collector, &rx))
        .map_err(|e| format!("the trace exporter thread: {e}"))?;
    let _ = EXPORTER.set(exporter.thread().clone());
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

fn export_loop(collector: &Collector, rx: &Receiver<Spans>) {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "the trace exporter has no runtime; spans are dropped");
            return;
        }
    };
    // The serving threads' buffers as they came, sent as one vectored body: not copied.
    let mut batch: Vec<bytes::Bytes> = Vec::with_capacity(64);
    loop {
        // Sleeps until `WAKE_AT` spans wait or `BATCH_WAIT` passed, unless that many wait already.
        // (Sleeping while fewer than a whole batch waited let spans pile up for `BATCH_WAIT` once
        // the count had passed `WAKE_AT` without reaching `MAX_BATCH`: no hand-off crossed
        // `WAKE_AT` again to wake it, and under full load the queue overflowed.)
        if PENDING.load(Ordering::Relaxed) < WAKE_AT.load(Ordering::Relaxed) {
            std::thread::park_timeout(BATCH_WAIT);
        }
        batch.clear();
        let mut n = 0;
        while n < MAX_BATCH as u64 {
            match rx.try_recv() {
                Ok(more) => {
                    batch.push(bytes::Bytes::from(more.bytes));
                    n += more.count;
                    QUEUED.fetch_sub(more.requests, Ordering::Relaxed);
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return,
            }
        }
        PENDING.fetch_sub(n, Ordering::Relaxed);
        if n == 0 {
            continue;
        }
        match rt.block_on(collector.export(&batch)) {
            Ok(0) => metrics::counter!("ax_trace_spans_exported_total").increment(n),
            Ok(rejected) => {
                let rejected = rejected.min(n);
                tracing::warn!(spans = n, rejected, "the collector rejected some spans");
                metrics::counter!("ax_trace_spans_exported_total").increment(n - rejected);
                metrics::counter!("ax_trace_spans_dropped_total", "reason" => "export_failed").increment(rejected);
            }
            Err(why) => {
                tracing::warn!(spans = n, error = %why, "trace export failed; the spans are dropped");
                metrics::counter!("ax_trace_spans_dropped_total", "reason" => "export_failed").increment(n);
            }
        }
    }
}

impl Collector {
    /// Sends one batch, retrying what OTLP says may be retried until the timeout; the spans
    /// the collector rejected.
    async fn export(&self, spans: &[bytes::Bytes]) -> Result<u64, String> {
        let resource: Vec<(&str, &str)> = self.resource.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let head = otlp::request_head(&resource, spans.iter().map(bytes::Bytes::len).sum());
        let mut body = Vec::with_capacity(spans.len() + 1);
        body.push(bytes::Bytes::from(head));
        body.extend(spans.iter().cloned());
        let until = tokio::time::Instant::now() + self.timeout;
        let mut wait = Duration::from_millis(100);
        loop {
            let tried = tokio::time::timeout_at(until, self.post(body.clone())).await;
            let why = match tried {
                Err(_) => return Err("timed out".to_owned()),
                Ok(Ok(Ok(answer))) => return Ok(otlp::rejected_spans(&answer)),
                Ok(Ok(Err((status, retryable)))) if !retryable => {
                    return Err(format!("the collector answered {status}"))
                }
                Ok(Ok(Err((status, _)))) => format!("the collector answered {status}"),
                Ok(Err(e)) => e.to_string(),
            };
            if tokio::time::Instant::now() + wait >= until {
                return Err(why);
            }
            tokio::time::sleep(wait).await;
            wait *= 2;
        }
    }

    /// One POST: the answer's body on a 2xx, else its status and whether it may be retried.
    async fn post(
        &self,
        body: Vec<bytes::Bytes>,
    ) -> Result<Result<Vec<u8>, (http::StatusCode, bool)>, transport::Error> {
        let hop = Hop::from("");
        let mut resp = self.client.post(&self.path, "application/x-protobuf", body.into(), &self.headers, hop).await?;
        let mut answer = Vec::new();
        // The answer is read to its end so the connection is kept (a long one is cut short).
        while let Ok(Some(chunk)) = resp.chunk().await {
            if answer.len() + chunk.len() > MAX_ANSWER {
                break;
            }
            answer.extend_from_slice(&chunk);
        }
        let status = resp.status;
        if status.is_success() {
            return Ok(Ok(answer));
        }
        let retryable = matches!(status.as_u16(), 429 | 502 | 503 | 504);
        Ok(Err((status, retryable)))
    }
}

/// What a request's spans say beyond its record.
#[derive(Debug, Clone, Copy)]
pub struct SpanFacts<'a> {
    pub operation: &'static str,
    /// The serving upstream's `gen_ai.provider.name`.
    pub provider: Option<&'static str>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub ttft: Option<Duration>,
    /// How long the request took (its span's length).
    pub elapsed: Duration,
    /// The answer's id and finish reasons (`gen_ai.response.*`).
    pub answer: &'a ax_wire::canonical::AnswerFacts,
    /// The prompt and completion, for a tenant that records them.
    pub content: Option<&'a super::content::Recorded>,
}

/// The attributes every request of one (operation, alias, upstream, model) writes alike, encoded
/// once per serving thread (the meter keeps them beside that key's metric handles) and copied
/// into each span: a third of a span's attributes, for the cost of one copy.
pub struct Constants {
    /// The request's span: `gen_ai.operation.name`, `gen_ai.request.model`, `ax.alias`,
    /// `gen_ai.provider.name`, `ax.upstream`, `gen_ai.response.model`.
    request: Vec<u8>,
    /// The span of an attempt at that upstream and model: `gen_ai.operation.name`,
    /// `gen_ai.request.model`, `ax.upstream`, `gen_ai.provider.name`.
    attempt: Vec<u8>,
    /// The same for an attempt that answered, with `gen_ai.response.model`.
    answered: Vec<u8>,
    /// What most requests add: `ax.attempts` 1 and `http.response.status_code` 200 on the
    /// request's span; `ax.attempt` 1 on its attempt's.
    served_at_once: Vec<u8>,
    first_attempt: Vec<u8>,
}

impl Constants {
    pub fn new(operation: &'static str, provider: &'static str, alias: &str, upstream: &str, model: &str) -> Self {
        let a = |b: &mut Vec<u8>, key: &otlp::Key, v: &str| otlp::attribute(b, 9, key, Value::Str(v));
        let mut request = Vec::with_capacity(256);
        a(&mut request, key!("gen_ai.operation.name"), operation);
        a(&mut request, key!("gen_ai.request.model"), alias);
        a(&mut request, key!("ax.alias"), alias);
        a(&mut request, key!("gen_ai.provider.name"), provider);
        a(&mut request, key!("ax.upstream"), upstream);
        a(&mut request, key!("gen_ai.response.model"), model);
        let mut attempt = Vec::with_capacity(160);
        a(&mut attempt, key!("gen_ai.operation.name"), operation);
        a(&mut attempt, key!("gen_ai.request.model"), model);
        a(&mut attempt, key!("ax.upstream"), upstream);
        a(&mut attempt, key!("gen_ai.provider.name"), provider);
        let mut answered = attempt.clone();
        a(&mut answered, key!("gen_ai.response.model"), model);
        let mut served_at_once = Vec::with_capacity(64);
        otlp::attribute(&mut served_at_once, 9, key!("ax.attempts"), Value::Int(1));
        otlp::attribute(&mut served_at_once, 9, key!("http.response.status_code"), Value::Int(200));
        let mut first_attempt = Vec::with_capacity(32);
        otlp::attribute(&mut first_attempt, 9, key!("ax.attempt"), Value::Int(1));
        Self { request, attempt, answered, served_at_once, first_attempt }
    }
}

/// Whether a finished request's spans are exported: its trace was sampled, or it failed.
pub fn exported(ctx: &TraceContext, r: &UsageRecord) -> bool {
    ctx.sampled || r.error_code.is_some() || r.status >= 500
}

/// Writes the spans of a finished request the meter found `exported` into this thread's batch;
/// `constants`, when given, are those of the request's (operation, alias, upstream, model).
pub fn record(ctx: &TraceContext, r: &UsageRecord, facts: &SpanFacts<'_>, constants: Option<&Constants>) {
    if QUEUE.get().is_none() {
        return;
    }
    let full = LOCAL.with(|l| {
        let mut l = l.borrow_mut();
        let l = &mut *l;
        if l.since.is_none() {
            l.since = Some(std::time::Instant::now());
            // Room for the batch and the request that fills it: it never grows.
            l.spans.bytes.reserve(LOCAL_BYTES + 8 * 1024);
        }
        spans(&mut l.spans.bytes, ctx, r, facts, constants, SystemTime::now());
        l.spans.count += 1 + r.attempt_list.len() as u64;
        l.spans.requests += 1;
        l.spans.bytes.len() >= LOCAL_BYTES
    });
    if full {
        hand_over();
    }
}

/// The serving threads' park hook: hands this thread's spans to the exporter when the oldest
/// has waited `LOCAL_AGE` by `now`.
pub fn flush(now: &mut dyn FnMut() -> std::time::Instant) {
    if LOCAL.with(|l| l.borrow().since.is_some_and(|t| now().saturating_duration_since(t) >= LOCAL_AGE)) {
        hand_over();
    }
}

/// Hands this thread's spans to the exporter now (a serving thread that is about to end).
pub fn flush_now() {
    hand_over();
}

/// This thread's batch into the queue, unless the queue holds its limit of requests (then it is
/// dropped, counted).
fn hand_over() {
    let Some(queue) = QUEUE.get() else { return };
    let spans = LOCAL.with(|l| {
        let mut l = l.borrow_mut();
        l.since = None;
        std::mem::replace(&mut l.spans, Spans { bytes: Vec::new(), count: 0, requests: 0 })
    });
    let (count, requests) = (spans.count, spans.requests);
    if requests == 0 {
        return;
    }
    let admitted = QUEUED.fetch_add(requests, Ordering::Relaxed) + requests <= QUEUE_LIMIT.load(Ordering::Relaxed);
    match admitted.then(|| queue.try_send(spans)) {
        Some(Ok(())) => {
            let before = PENDING.fetch_add(count, Ordering::Relaxed);
            let wake_at = WAKE_AT.load(Ordering::Relaxed);
            if before < wake_at && before + count >= wake_at {
                if let Some(t) = EXPORTER.get() {
                    t.unpark();
                }
            }
        }
        None | Some(Err(TrySendError::Full(_) | TrySendError::Disconnected(_))) => {
            QUEUED.fetch_sub(requests, Ordering::Relaxed);
            metrics::counter!("ax_trace_spans_dropped_total", "reason" => "queue_full").increment(count);
        }
    }
}

fn int(v: u64) -> Value<'static> {
    Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
}

fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The request's span and one per attempt, ending at `end`, as `ScopeSpans.spans` entries.
fn spans(
    out: &mut Vec<u8>,
    ctx: &TraceContext,
    r: &UsageRecord,
    f: &SpanFacts<'_>,
    constants: Option<&Constants>,
    end: SystemTime,
) {
    let start = end.checked_sub(f.elapsed).unwrap_or(end);
    let (start_ns, end_ns) = (unix_ns(start), unix_ns(end));
    let head = SpanHead {
        trace_id: ctx.trace_id,
        span_id: ctx.span,
        parent: ctx.parent.map(|p| (p, true)),
        kind: Kind::Server,
        name: [f.operation, " ", &r.alias],
        start_unix_ns: start_ns,
        end_unix_ns: end_ns,
    };
    // The answer's id and finish reasons: on the request's span and the attempt that answered.
    let a = |b: &mut Vec<u8>, key: &otlp::Key, v: Value<'_>| otlp::attribute(b, 9, key, v);
    let answer = |b: &mut Vec<u8>| {
        if let Some(id) = &f.answer.id {
            a(b, key!("gen_ai.response.id"), Value::Str(id));
        }
        if !f.answer.finish_reasons.is_empty() {
            let reasons = f.answer.finish_reasons.iter().map(ax_wire::canonical::FinishReason::name);
            otlp::strings(b, 9, key!("gen_ai.response.finish_reasons"), reasons);
        }
    };
    otlp::span(out, &head, r.error_code.as_deref(), |b| {
        match constants {
            Some(c) => b.extend_from_slice(&c.request),
            None => {
                a(b, key!("gen_ai.operation.name"), Value::Str(f.operation));
                a(b, key!("gen_ai.request.model"), Value::Str(&r.alias));
                a(b, key!("ax.alias"), Value::Str(&r.alias));
                if let Some(p) = f.provider {
                    a(b, key!("gen_ai.provider.name"), Value::Str(p));
                }
                if !r.upstream.is_empty() {
                    a(b, key!("ax.upstream"), Value::Str(&r.upstream));
                    a(b, key!("gen_ai.response.model"), Value::Str(&r.model));
                }
            }
        }
        a(b, key!("ax.request_id"), Value::Str(&r.request_id));
        a(b, key!("ax.tenant"), Value::Str(&r.tenant));
        a(b, key!("ax.key_id"), Value::Str(&r.key_id));
        match constants {
            Some(c) if r.attempts == 1 && r.status == 200 => b.extend_from_slice(&c.served_at_once),
            _ => {
                a(b, key!("ax.attempts"), Value::Int(i64::from(r.attempts)));
                a(b, key!("http.response.status_code"), Value::Int(i64::from(r.status)));
            }
        }
        // (Flags and counts that are mostly false or 0 are written only when they are not.)
        if r.stream {
            a(b, key!("ax.stream"), Value::Bool(true));
        }
        if let Some(m) = f.max_tokens {
            a(b, key!("gen_ai.request.max_tokens"), Value::Int(i64::from(m)));
        }
        if let Some(t) = f.temperature {
            a(b, key!("gen_ai.request.temperature"), Value::F64(t));
        }
        if r.status == 200 || r.prompt_tokens > 0 || r.completion_tokens > 0 {
            a(b, key!("gen_ai.usage.input_tokens"), int(r.prompt_tokens));
            a(b, key!("gen_ai.usage.output_tokens"), int(r.completion_tokens));
            a(b, key!("gen_ai.usage.cache_read.input_tokens"), int(r.cached_prompt_tokens));
            if r.cache_write_tokens > 0 {
                a(b, key!("gen_ai.usage.cache_creation.input_tokens"), int(r.cache_write_tokens));
            }
        }
        if let Some(t) = f.ttft {
            a(b, key!("gen_ai.response.time_to_first_chunk"), Value::F64(t.as_secs_f64()));
        }
        if let Some(c) = r.cost_micro_usd {
            a(b, key!("ax.cost_usd"), Value::F64(c as f64 / 1e6));
        }
        if let Some(rt) = &r.retry_of {
            a(b, key!("ax.retry_of"), Value::Str(rt));
        }
        if let Some(fb) = &r.fallback {
            a(b, key!("ax.fallback"), Value::Str(fb));
        }
        if let Some(code) = &r.error_code {
            a(b, key!("error.type"), Value::Str(code));
        }
        answer(b);
        if let Some(c) = f.content {
            if let Some(input) = &c.input {
                a(b, key!("gen_ai.input.messages"), Value::Str(input));
            }
            if let Some(output) = &c.output {
                a(b, key!("gen_ai.output.messages"), Value::Str(output));
            }
            if c.truncated {
                a(b, key!("ax.content_truncated"), Value::Bool(true));
            }
        }
    });
    for (i, at) in r.attempt_list.iter().enumerate() {
        let n = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let begin = start_ns.saturating_add(at.offset_us.saturating_mul(1000));
        // The attempt that answered lasts as long as its answer (a stream's last event).
        let finish = if at.error_code.is_none() {
            end_ns
        } else {
            begin.saturating_add(at.latency_ms.saturating_mul(1_000_000)).min(end_ns).max(begin)
        };
        let head = SpanHead {
            trace_id: ctx.trace_id,
            span_id: ctx.attempt_span(n),
            parent: Some((ctx.span, false)),
            kind: Kind::Client,
            name: [f.operation, " ", &at.model],
            start_unix_ns: begin,
            end_unix_ns: finish,
        };
        otlp::span(out, &head, at.error_code.as_deref(), |b| {
            let constant = constants.filter(|_| {
                // (The constants' upstream and model are the record's: the attempt's are the same
                // one, so is its provider.)
                at.upstream == r.upstream && at.model == r.model && !at.provider.is_empty()
            });
            match constant {
                Some(c) => b.extend_from_slice(if at.error_code.is_none() { &c.answered } else { &c.attempt }),
                None => {
                    a(b, key!("gen_ai.operation.name"), Value::Str(f.operation));
                    a(b, key!("gen_ai.request.model"), Value::Str(&at.model));
                    a(b, key!("ax.upstream"), Value::Str(&at.upstream));
                    if !at.provider.is_empty() {
                        a(b, key!("gen_ai.provider.name"), Value::Str(&at.provider));
                    }
                }
            }
            match constants {
                Some(c) if n == 1 => b.extend_from_slice(&c.first_attempt),
                _ => a(b, key!("ax.attempt"), Value::Int(i64::from(n))),
            }
            a(b, key!("ax.attempt_id"), Value::Str(&at.attempt_id));
            if at.possibly_billed {
                a(b, key!("ax.possibly_billed"), Value::Bool(true));
            }
            if i > 0 {
                a(b, key!("ax.retry_of"), Value::Str(&r.attempt_list[i - 1].attempt_id));
            }
            match &at.error_code {
                Some(code) => a(b, key!("error.type"), Value::Str(code)),
                None => {
                    if constant.is_none() {
                        a(b, key!("gen_ai.response.model"), Value::Str(&at.model));
                    }
                    answer(b);
                }
            }
        });
    }
}

#[cfg(test)]
mod tests;
