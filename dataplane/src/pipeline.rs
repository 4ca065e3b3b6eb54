//! The request pipeline: the stages every model call passes, in this order, whatever wire
//! protocol the caller spoke. Ingress hands in the caller's key, a way to read the body and the
//! protocol's decoder; it gets back an [`Ended`], which it turns into HTTP.
//!
//! 1. authenticate — key → SHA-256 → tenant (`Snapshot::authenticate`): 401.
//! 2. read         — the body under `server.max_body_bytes`: 413.
//! 3. decode       — the codec's decoder, into the canonical request: 400.
//! 4. admit        — the alias exists (404) and the key may use it (403); the request is valid,
//!    fits the alias's context budget or moves to its long-context alias.
//! 5. guard        — budgets (may downgrade), then rate limits (`governance::guard`): 429.
//! 6. route        — the ordered attempt plan (`routing::plan`), walked by `routing::failover`.
//! 7. dispatch     — one upstream call per attempt (`upstream::call`), with the request as that
//!    provider can honour it.
//! 8. stream       — a streamed answer becomes the codec's events (`stream::EgressStream`).
//! 9. meter        — one usage record (`metering::meter`); the guard's reservations settle to it
//!    (`Ledger`).
//!
//! A request refused at stages 1–5 still gets its record (`Meter::rejected`).

pub mod ops;
pub mod stream;

use std::borrow::Cow;
use std::future::Future;
use std::time::Instant;

use ax_protocol::config::ParamsMode;
use ax_protocol::usage::UNKNOWN_ALIAS;
use bytes::Bytes;

use crate::config::snapshot::{KeyRef, Route, Snapshot, Tenant, Upstream};
use crate::error::{AxError, Outcome};
use crate::governance::guard::{self, Demand, Reservations};
use crate::metering::meter::Meter;
use crate::routing::failover::{self, AttemptCtx, Served};
use crate::routing::plan;
use crate::trace::{Hop, TraceContext, Traceparent};
use crate::upstream::call::{self, ChatOutcome};
use crate::App;
use ax_wire::canonical::{
    ChatRequest, ChatResponse, EmbeddingsRequest, EmbeddingsResponse, Protocol, RawChat, Skim, Usage,
};
use stream::{EgressStream, StreamEncoder};

/// How a call ended, for ingress to answer.
pub enum Ended<'s, R> {
    /// An upstream answered.
    Answered(Answer<'s, R>),
    /// Every attempt failed, or none could be made; `served` is the last attempt, if any.
    Failed { error: AxError, served: Option<ServedBy<'s>> },
    /// Refused before any upstream was chosen.
    Rejected(AxError),
}

/// An answer and what the gateway says of it (its `x-ax-*` headers).
pub struct Answer<'s, R> {
    pub reply: R,
    pub served: ServedBy<'s>,
    /// Micro-USD, when the serving model has prices.
    pub cost: Option<u64>,
    /// The long-context alias the request moved to.
    pub long_context: Option<&'s str>,
    /// `x-ax-degraded`, when a budget sent the request to a cheaper alias.
    pub degraded: Option<String>,
    /// `x-ax-budget-warning`, past a budget's threshold.
    pub warning: Option<String>,
}

/// Who served a call (the last attempt), as the answer's `x-ax-*` headers say it.
#[derive(Clone, Copy)]
pub struct ServedBy<'s> {
    /// The upstream's name, as a header value made when the snapshot was built.
    pub upstream: &'s http::HeaderValue,
    /// The upstream's name for the model, and the same as a header value.
    pub model: &'s str,
    pub model_header: &'s http::HeaderValue,
    /// Attempts made, the successful one included.
    pub attempts: u32,
    /// The fallback alias that served, when the requested alias failed.
    pub fallback: Option<&'s str>,
}

impl<'s> From<&Served<'s>> for ServedBy<'s> {
    fn from(s: &Served<'s>) -> Self {
        Self {
            upstream: &s.up.name_header,
            model: &s.model.name,
            model_header: &s.model.name_header,
            attempts: s.attempts,
            fallback: s.fallback,
        }
    }
}

/// A chat answer: whole (canonical, or in the caller's protocol as the upstream sent it), or a
/// stream the caller reads as it comes.
pub enum ChatReply<E> {
    Full(ChatResponse),
    Forward { body: Bytes, usage: Option<Usage>, facts: ax_wire::canonical::AnswerFacts },
    Stream(Box<EgressStream<E>>),
}

/// The request's meter with the guard's reservations: when the record is written (at the end, or
/// as the caller goes away) the reservations settle to what it says.
pub struct Ledger {
    pub meter: Meter,
    reservations: Reservations,
}

impl Ledger {
    /// Emits the record with the caller's `status` and settles the reservations to it.
    pub fn finish(&mut self, status: u16, error_code: Option<&'static str>) {
        self.meter.finish(status, error_code);
        self.reservations.settle(&self.meter.record, self.meter.tokens_known());
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        self.meter.disconnected();
        self.reservations.settle(&self.meter.record, self.meter.tokens_known());
    }
}

/// The request as ingress hands it in: its id, when it arrived, the caller's key, the body still
/// to read (given the size limit and the authenticated caller's tenant id), and the codec's
/// decoder.
pub struct Inbound<'h, B, D> {
    pub request_id: &'h str,
    pub start: Instant,
    /// The request's trace, when tracing is on (`trace_of`).
    pub trace: Option<TraceContext>,
    pub key: Option<&'h str>,
    pub body: B,
    pub decode: D,
}

/// A decoded request that names the alias it wants.
pub trait ModelRequest {
    fn alias(&self) -> &str;
}

impl ModelRequest for ChatRequest {
    fn alias(&self) -> &str {
        &self.model
    }
}

impl ModelRequest for EmbeddingsRequest {
    fn alias(&self) -> &str {
        &self.model
    }
}

/// Who is calling: the tenant behind the key.
struct Caller<'s> {
    tenant: &'s Tenant,
    key: &'s KeyRef,
}

/// A request refused before any upstream was chosen, with what is known of it for its record.
struct Rejection {
    error: AxError,
    alias: Option<String>,
    /// (tenant, key id), once the key was checked.
    caller: Option<(String, String)>,
}

impl Rejection {
    fn anonymous(error: AxError) -> Self {
        Self { error, alias: None, caller: None }
    }

    /// The names are copied only if the request is refused.
    fn of<'a>(caller: &'a Caller<'_>, alias: Option<&'a str>) -> impl FnOnce(AxError) -> Self + 'a {
        move |error| Self {
            error,
            alias: alias.map(str::to_owned),
            caller: Some((caller.tenant.id.clone(), caller.key.key_id.clone())),
        }
    }

    /// Writes the refused request's record.
    fn record<'s, R>(self, request_id: &str, start: Instant, trace: Option<TraceContext>) -> Ended<'s, R> {
        let caller = self.caller.as_ref().map(|(t, k)| (t.as_str(), k.as_str()));
        Meter::rejected(request_id, caller, self.alias.as_deref(), start, trace, &self.error);
        Ended::Rejected(self.error)
    }
}

fn authenticate<'s>(snap: &'s Snapshot, key: Option<&str>) -> Result<Caller<'s>, AxError> {
    let (tenant, key) = snap.authenticate(key.ok_or(AxError::MissingApiKey)?)?;
    Ok(Caller { tenant, key })
}

/// Stages 1–2: the caller, and the body under the size limit.
async fn admit_body<'s, B, Fut>(
    snap: &'s Snapshot,
    key: Option<&str>,
    body: B,
) -> Result<(Caller<'s>, Bytes), Rejection>
where
    B: FnOnce(u64, &'s str) -> Fut,
    Fut: Future<Output = Result<Bytes, AxError>>,
{
    let caller = authenticate(snap, key).map_err(Rejection::anonymous)?;
    let bytes = body(snap.max_body_bytes, &caller.tenant.id).await.map_err(Rejection::of(&caller, None))?;
    Ok((caller, bytes))
}

/// Stages 1–4 every model call shares: authenticate, read, decode, the alias exists and is allowed.
async fn admit<'s, T, B, Fut, D>(
    snap: &'s Snapshot,
    inbound: Inbound<'_, B, D>,
) -> Result<(Caller<'s>, T, &'s Route), Rejection>
where
    T: ModelRequest,
    B: FnOnce(u64, &'s str) -> Fut,
    Fut: Future<Output = Result<Bytes, AxError>>,
    D: FnOnce(&[u8], ParamsMode) -> Result<T, AxError>,
{
    let (caller, bytes) = admit_body(snap, inbound.key, inbound.body).await?;
    let req: T = (inbound.decode)(&bytes, snap.params).map_err(Rejection::of(&caller, None))?;
    drop(bytes);
    let route = route_of(snap, &caller, req.alias())?;
    Ok((caller, req, route))
}

/// Stage 4's check: the alias exists and the key may use it.
#[expect(clippy::result_large_err, reason = "a refusal is the rare path, and returned once")]
fn route_of<'s>(snap: &'s Snapshot, caller: &Caller<'_>, alias: &str) -> Result<&'s Route, Rejection> {
    let route = snap.route_for(caller.tenant, alias).map_err(|e| {
        // A name the caller made up is never a metric label or a report group: its record counts
        // under one fixed alias, and the raw name is only in the log line.
        let alias = if matches!(e, AxError::ModelNotFound(_)) { UNKNOWN_ALIAS } else { alias };
        Rejection::of(caller, Some(alias))(e)
    })?;
    Ok(route)
}

/// The request as this upstream should see it: in lenient mode, without the parameters it cannot
/// honour (strict mode already kept such candidates out of the plan), and without the fields ax
/// does not know unless it passes them through.
fn for_provider<'r>(req: &'r ChatRequest, params: &[&'static str], up: &Upstream) -> Cow<'r, ChatRequest> {
    let kind = up.kind;
    let dropped: Vec<&str> = params.iter().copied().filter(|p| !ax_wire::upstream::supports(kind, p)).collect();
    let foreign = req.extra.iter().any(|(n, _)| !up.passthrough.allows(n));
    if dropped.is_empty() && !foreign {
        return Cow::Borrowed(req);
    }
    let mut r = req.clone();
    if foreign {
        r.extra.retain(|(n, _)| up.passthrough.allows(n));
        tracing::warn!(upstream = up.name, "dropped unknown request fields the upstream does not pass through");
    }
    if dropped.is_empty() {
        return Cow::Owned(r);
    }
    tracing::warn!(provider = kind.as_str(), params = ?dropped, "dropped parameters the provider does not support");
    for p in dropped {
        r.clear_param(p);
    }
    Cow::Owned(r)
}

/// The meter's view of who served.
fn served<'s>(s: &Served<'s>) -> crate::metering::meter::Served<'s> {
    crate::metering::meter::Served {
        upstream: &s.up.name,
        model: &s.model.name,
        attempts: s.attempts,
        fallback: s.fallback,
        prices: s.model.prices,
        provider: crate::metering::meter::genai_provider(s.up.kind),
    }
}

/// Every attempt failed (or none could be made): the record says so.
fn failed<'s, R>(error: AxError, mut ledger: Ledger, served_by: Option<Served<'s>>) -> Ended<'s, R> {
    if let Some(s) = &served_by {
        ledger.meter.served_by(served(s));
    }
    ledger.finish(error.status().as_u16(), Some(error.code()));
    Ended::Failed { error, served: served_by.as_ref().map(ServedBy::from) }
}

/// How callers of a codec are served by upstreams of their own protocol (the same-protocol fast
/// path): the protocol, and the codec's skim of a body (what the stages need of it, without
/// decoding it).
pub struct Forwarding<S> {
    pub protocol: Protocol,
    pub skim: S,
}

/// A codec's skim as a plain function.
pub type Skimmer = fn(Bytes, &dyn Fn(&str) -> bool) -> Result<Skim, AxError>;

/// For a protocol no upstream speaks natively: every request is decoded.
pub const NO_FORWARDING: Option<Forwarding<Skimmer>> = None;

/// A chat request as the stages carry it: the caller's bytes with what the gateway read of them
/// (every upstream of the caller's protocol is sent those), or decoded into the canonical model.
#[expect(clippy::large_enum_variant, reason = "one per request, held in the request's own future")]
enum Request {
    Forward(RawChat),
    Canonical(ChatRequest),
}

impl Request {
    fn stream(&self) -> bool {
        match self {
            Self::Forward(r) => r.stream,
            Self::Canonical(r) => r.stream,
        }
    }

    fn include_usage(&self) -> bool {
        match self {
            Self::Forward(r) => r.include_usage,
            Self::Canonical(r) => r.include_usage(),
        }
    }
}

/// A chat completion. `decode` is the codec's full decoder; `forwarding`, when the codec has
/// one, lets upstreams of the caller's protocol be sent the caller's bytes; `events` makes the
/// codec's stream encoder (whether the caller asked for usage, the name of the model that
/// serves).
pub async fn chat<'s, B, Fut, D, S, E>(
    app: &App,
    snap: &'s Snapshot,
    inbound: Inbound<'_, B, D>,
    forwarding: Option<Forwarding<S>>,
    events: impl Fn(bool, &str) -> E,
) -> Ended<'s, ChatReply<E>>
where
    B: FnOnce(u64, &'s str) -> Fut,
    Fut: Future<Output = Result<Bytes, AxError>>,
    D: Fn(&Bytes, ParamsMode) -> Result<ChatRequest, AxError>,
    S: FnOnce(Bytes, &dyn Fn(&str) -> bool) -> Result<Skim, AxError>,
    E: StreamEncoder,
{
    let (rid, start, trace) = (inbound.request_id, inbound.start, inbound.trace);
    recorded(chat_stages(app, snap, inbound, forwarding, events).await, rid, start, trace)
}

/// A call's end, with the record of a refusal written.
fn recorded<'s, R>(
    stages: Result<Ended<'s, R>, Rejection>,
    request_id: &str,
    start: Instant,
    trace: Option<TraceContext>,
) -> Ended<'s, R> {
    stages.unwrap_or_else(|r| r.record(request_id, start, trace))
}

/// The request's trace context when tracing is on: the caller's `traceparent` continued, or a
/// new trace; `None` (and no work) with tracing off.
pub fn trace_of(headers: &http::HeaderMap) -> Option<TraceContext> {
    if !crate::trace::enabled() {
        return None;
    }
    static TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");
    crate::trace::begin(headers.get(&TRACEPARENT).map(http::HeaderValue::as_bytes))
}

/// The canonical request from the caller's bytes: decoded (its texts kept as slices of the
/// bytes) and validated.
fn canonical<D>(decode: &D, bytes: &Bytes, mode: ParamsMode) -> Result<ChatRequest, AxError>
where
    D: Fn(&Bytes, ParamsMode) -> Result<ChatRequest, AxError>,
{
    let req = decode(bytes, mode)?;
    req.validate()?;
    Ok(req)
}

/// The canonical request and its route: decoded (field paths, strict checks), the alias checked,
/// validated: every reason to refuse it before any quota is taken.
#[expect(clippy::result_large_err, reason = "a refusal is the rare path, and returned once")]
fn decoded_request<'s, D>(
    snap: &'s Snapshot,
    caller: &Caller<'_>,
    decode: &D,
    bytes: &Bytes,
) -> Result<(Request, &'s Route), Rejection>
where
    D: Fn(&Bytes, ParamsMode) -> Result<ChatRequest, AxError>,
{
    let mut req = decode(bytes, snap.params).map_err(Rejection::of(caller, None))?;
    let route = route_of(snap, caller, &req.model)?;
    let alias = Some(route.alias.as_str());
    req.validate().map_err(AxError::from).map_err(Rejection::of(caller, alias))?;
    if !req.extra.is_empty() {
        unknown_fields(snap, route, &mut req).map_err(Rejection::of(caller, alias))?;
    }
    Ok((Request::Canonical(req), route))
}

/// Fields ax does not know: kept when a candidate of the route passes them all through (strict
/// mode then plans only such candidates), else refused (strict) or dropped (lenient).
fn unknown_fields(snap: &Snapshot, route: &Route, req: &mut ChatRequest) -> Result<(), AxError> {
    let passes = route.candidates.iter().any(|c| {
        let up = snap.upstream_model(c).0;
        req.extra.iter().all(|(n, _)| up.passthrough.allows(n))
    });
    if passes {
        return Ok(());
    }
    match snap.params {
        ParamsMode::Strict => {
            let param = req.extra.first().map(|(n, _)| n.clone()).unwrap_or_default();
            Err(AxError::UnsupportedParameter { param, provider: "ax" })
        }
        ParamsMode::Lenient => {
            let names: Vec<&str> = req.extra.iter().map(|(n, _)| n.as_str()).collect();
            tracing::warn!(params = ?names, "dropped unknown request parameters");
            req.extra.clear();
            Ok(())
        }
    }
}

async fn chat_stages<'s, B, Fut, D, S, E>(
    app: &App,
    snap: &'s Snapshot,
    inbound: Inbound<'_, B, D>,
    forwarding: Option<Forwarding<S>>,
    events: impl Fn(bool, &str) -> E,
) -> Result<Ended<'s, ChatReply<E>>, Rejection>
where
    B: FnOnce(u64, &'s str) -> Fut,
    Fut: Future<Output = Result<Bytes, AxError>>,
    D: Fn(&Bytes, ParamsMode) -> Result<ChatRequest, AxError>,
    S: FnOnce(Bytes, &dyn Fn(&str) -> bool) -> Result<Skim, AxError>,
    E: StreamEncoder,
{
    let Inbound { request_id: rid, start, trace, key, body, decode } = inbound;
    let (caller, bytes) = admit_body(snap, key, body).await?;
    // With forwarding, the skim names the alias and the route decides: a route every candidate
    // of which speaks the caller's protocol is served from the caller's bytes; any other is
    // decoded here, before any quota is taken, as before the fast path.
    // A snapshot in which no route forwards the caller's protocol decodes at once.
    let forwarding = forwarding.filter(|f| snap.forwarded.has(f.protocol));
    let protocol = forwarding.as_ref().map(|f| f.protocol);
    let speaks = |protocols: ax_wire::canonical::Protocols| protocol.is_some_and(|p| protocols.has(p));
    let (req, route) = match forwarding {
        Some(f) => {
            let forwards = |alias: &str| snap.routes.get(alias).is_some_and(|r| speaks(r.protocols));
            match (f.skim)(bytes, &forwards).map_err(Rejection::of(&caller, None))? {
                Skim::Forward(raw) => {
                    let route = route_of(snap, &caller, &raw.model)?;
                    if speaks(route.protocols) {
                        (Request::Forward(raw), route)
                    } else {
                        decoded_request(snap, &caller, &decode, &raw.body)?
                    }
                }
                Skim::Decode(bytes) => decoded_request(snap, &caller, &decode, &bytes)?,
            }
        }
        None => decoded_request(snap, &caller, &decode, &bytes)?,
    };
    let alias = route.alias.as_str();
    let needs = match &req {
        Request::Forward(r) => plan::forward_needs(r, snap.default_max_tokens),
        Request::Canonical(r) => plan::chat_needs(r, snap.default_max_tokens),
    };
    // Context budget: a prompt over the alias's limit goes to its long-context alias, if any.
    let (route, long_context) = match route.max_prompt_tokens {
        Some(limit) if needs.prompt_estimate > u64::from(limit) => match &route.long_context_alias {
            Some(l) => (snap.routes.get(l).unwrap_or(route), Some(l.as_str())),
            None => {
                let e = AxError::PromptTooLong { alias: alias.to_owned(), estimated: needs.prompt_estimate, limit };
                return Err(Rejection::of(&caller, Some(alias))(e));
            }
        },
        _ => (route, None),
    };
    // Budgets (may downgrade to a cheaper alias), then the requested alias's rate limits:
    // checked after every other reason to refuse, so a refused request uses no one's quota.
    let requested = snap.routes.get(alias).unwrap_or(route);
    let demand = Demand { prompt_tokens: needs.prompt_estimate, reserve_tokens: needs.reserve_tokens };
    let passed = guard::run(app.fleet.as_ref(), snap, caller.tenant, caller.key, requested, route, demand)
        .await
        .map_err(Rejection::of(&caller, Some(alias)))?;
    let guard::Passed { route, reservations, degraded, warning } = passed;
    let mut meter = Meter::new(rid, &caller.tenant.id, &caller.key.key_id, alias, req.stream(), start);
    // A forwarded request that meets an upstream of another protocol (a long-context or
    // downgrade alias that translates) is decoded then, once; or here, when its content is
    // recorded.
    let decoded: std::sync::OnceLock<ChatRequest> = std::sync::OnceLock::new();
    if let Some(t) = &trace {
        let (max_tokens, temperature) = match &req {
            Request::Forward(r) => (r.max_output, r.temperature),
            Request::Canonical(c) => (c.max_completion_tokens.or(c.max_tokens), c.temperature),
        };
        meter.trace(trace, max_tokens, temperature);
        // The tenant's prompts and completions go into its sampled requests' spans.
        if t.sampled && caller.tenant.trace_content {
            match &req {
                Request::Canonical(c) => meter.record_content(c),
                Request::Forward(raw) => {
                    if let Ok(c) = canonical(&decode, &raw.body, snap.params) {
                        meter.record_content(decoded.get_or_init(|| c));
                    }
                }
            }
        }
    }
    let records_content = meter.records_content();
    meter.prompt_estimate(needs.prompt_estimate);
    meter.degraded(degraded.clone());
    let mut ledger = Ledger { meter, reservations };
    let mut attempt_log = failover::AttemptLog::default();
    let include_usage = req.include_usage();
    let (req, needs, events, decoded, decode) = (&req, &needs, &events, &decoded, &decode);
    let trace = trace.as_ref();
    let origin = failover::Origin { request_id: rid, start, fleet: app.fleet.as_ref() };
    // Boxed: the attempts' state (~4.5 KiB) is built once in its box, not inline in every future
    // that holds this one (each of which is moved whole, so copied, before it first runs).
    let result = Box::pin(failover::run(snap, route, needs, origin, &mut attempt_log, |a| async move {
        let AttemptCtx { up, model, deadlines, guard, attempt, io } = a;
        let traceparent = trace.map(|t| t.traceparent(attempt));
        let hop = Hop { request_id: rid, traceparent: traceparent.as_ref().map(Traceparent::as_bytes), io: Some(&io) };
        let outcome = match req {
            Request::Forward(raw) if up.speaks.has(raw.protocol) => {
                call::chat_forward(up, model, raw, hop, deadlines).await
            }
            Request::Forward(raw) => {
                let canon = match decoded.get() {
                    Some(c) => Ok(c),
                    None => canonical(decode, &raw.body, snap.params).map(|c| decoded.get_or_init(|| c)),
                };
                match canon {
                    Ok(c) => {
                        let c = for_provider(c, &needs.params, up);
                        call::chat(up, model, &c, snap.default_max_tokens, hop, deadlines).await
                    }
                    Err(e) => Err(e),
                }
            }
            Request::Canonical(c) => {
                let c = for_provider(c, &needs.params, up);
                call::chat(up, model, &c, snap.default_max_tokens, hop, deadlines).await
            }
        };
        match outcome {
            Err(e) => Err((e, guard)),
            Ok(ChatOutcome::Full(r)) => {
                let mut guard = guard;
                if let Some(u) = &r.usage {
                    guard.usage(u.total());
                }
                guard.finish(Outcome::Success);
                Ok(ChatReply::Full(r))
            }
            Ok(ChatOutcome::Forward { body, usage, facts }) => {
                let mut guard = guard;
                if let Some(u) = &usage {
                    guard.usage(u.total());
                }
                guard.finish(Outcome::Success);
                Ok(ChatReply::Forward { body, usage, facts })
            }
            Ok(ChatOutcome::Stream(mut us)) => {
                if records_content {
                    us.record_content(up.kind);
                }
                let n = match req {
                    Request::Canonical(c) => c.n.unwrap_or(1),
                    Request::Forward(_) => decoded.get().and_then(|c| c.n).unwrap_or(1),
                };
                let enc = events(include_usage, &model.name);
                EgressStream::open(us, enc, n, guard).await.map(ChatReply::Stream)
            }
        }
    }))
    .await;
    ledger.meter.attempts(attempt_log.list, attempt_log.answering);
    let (reply, served_by) = match result {
        Ok(x) => x,
        Err((e, s)) => return Ok(failed(e, ledger, s)),
    };
    ledger.meter.served_by(served(&served_by));
    let mut cost = None;
    let reply = match reply {
        ChatReply::Full(r) => {
            if let Some(u) = &r.usage {
                ledger.meter.usage(u);
            }
            if ledger.meter.traced() {
                ledger.meter.answered(ax_wire::canonical::AnswerFacts::of(&r));
                ledger.meter.completion(&r);
            }
            cost = ledger.meter.cost_micro_usd();
            ledger.finish(200, None);
            ChatReply::Full(r)
        }
        ChatReply::Forward { body, usage, facts } => {
            if let Some(u) = &usage {
                ledger.meter.usage(u);
            }
            ledger.meter.answered(facts);
            if let (true, Request::Forward(raw)) = (ledger.meter.records_content(), req) {
                let kind = served_by.up.kind;
                if let Some(answer) = crate::metering::content::forwarded_answer(kind, raw.protocol, &body) {
                    ledger.meter.completion(&answer);
                }
            }
            cost = ledger.meter.cost_micro_usd();
            ledger.finish(200, None);
            ChatReply::Forward { body, usage, facts: Default::default() }
        }
        ChatReply::Stream(mut s) => {
            s.attach(ledger);
            ChatReply::Stream(s)
        }
    };
    let served = ServedBy::from(&served_by);
    Ok(Ended::Answered(Answer { reply, served, cost, long_context, degraded, warning }))
}

/// An embeddings call.
pub async fn embeddings<'s, B, Fut, D>(
    app: &App,
    snap: &'s Snapshot,
    inbound: Inbound<'_, B, D>,
) -> Ended<'s, (EmbeddingsResponse, EmbeddingsRequest)>
where
    B: FnOnce(u64, &'s str) -> Fut,
    Fut: Future<Output = Result<Bytes, AxError>>,
    D: FnOnce(&[u8], ParamsMode) -> Result<EmbeddingsRequest, AxError>,
{
    let (rid, start, trace) = (inbound.request_id, inbound.start, inbound.trace);
    recorded(embeddings_stages(app, snap, inbound).await, rid, start, trace)
}

async fn embeddings_stages<'s, B, Fut, D>(
    app: &App,
    snap: &'s Snapshot,
    inbound: Inbound<'_, B, D>,
) -> Result<Ended<'s, (EmbeddingsResponse, EmbeddingsRequest)>, Rejection>
where
    B: FnOnce(u64, &'s str) -> Fut,
    Fut: Future<Output = Result<Bytes, AxError>>,
    D: FnOnce(&[u8], ParamsMode) -> Result<EmbeddingsRequest, AxError>,
{
    let (rid, start, trace) = (inbound.request_id, inbound.start, inbound.trace);
    let (caller, req, route) = admit::<EmbeddingsRequest, _, _, _>(snap, inbound).await?;
    let alias = route.alias.as_str();
    let needs = plan::embeddings_needs(&req);
    let demand = Demand { prompt_tokens: needs.prompt_estimate, reserve_tokens: needs.reserve_tokens };
    let passed = guard::run(app.fleet.as_ref(), snap, caller.tenant, caller.key, route, route, demand)
        .await
        .map_err(Rejection::of(&caller, Some(alias)))?;
    let guard::Passed { route, reservations, degraded, .. } = passed;
    let mut meter = Meter::new(rid, &caller.tenant.id, &caller.key.key_id, alias, false, start);
    meter.operation(crate::metering::meter::Operation::Embeddings);
    meter.trace(trace, None, None);
    meter.prompt_estimate(needs.prompt_estimate);
    meter.degraded(degraded);
    let mut ledger = Ledger { meter, reservations };
    let mut attempt_log = failover::AttemptLog::default();
    let req_ref = &req;
    let trace = trace.as_ref();
    let origin = failover::Origin { request_id: rid, start, fleet: app.fleet.as_ref() };
    let result = failover::run(snap, route, &needs, origin, &mut attempt_log, |a| async move {
        let AttemptCtx { up, model, deadlines, guard, attempt, io } = a;
        let traceparent = trace.map(|t| t.traceparent(attempt));
        let hop = Hop { request_id: rid, traceparent: traceparent.as_ref().map(Traceparent::as_bytes), io: Some(&io) };
        match call::embeddings(up, model, req_ref, hop, deadlines).await {
            Ok(resp) => {
                let mut guard = guard;
                guard.usage(resp.prompt_tokens);
                guard.finish(Outcome::Success);
                Ok(resp)
            }
            Err(e) => Err((e, guard)),
        }
    })
    .await;
    ledger.meter.attempts(attempt_log.list, attempt_log.answering);
    let (mut resp, served_by) = match result {
        Ok(x) => x,
        Err((e, s)) => return Ok(failed(e, ledger, s)),
    };
    if resp.model.is_empty() || resp.model == req.model {
        resp.model.clone_from(&served_by.model.name);
    }
    ledger.meter.served_by(served(&served_by));
    ledger.meter.usage(&ax_wire::canonical::Usage { prompt_tokens: resp.prompt_tokens, ..Default::default() });
    let cost = ledger.meter.cost_micro_usd();
    ledger.finish(200, None);
    // Embeddings answers carry no budget headers (the record says whether a budget downgraded it).
    let served = ServedBy::from(&served_by);
    let answer = Answer { reply: (resp, req), served, cost, long_context: None, degraded: None, warning: None };
    Ok(Ended::Answered(answer))
}
