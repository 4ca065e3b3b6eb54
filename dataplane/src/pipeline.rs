//! The request pipeline: the stages every model call passes, in this order, whatever wire
//! protocol the caller spoke. Ingress hands in the caller's key, a way to read the body and the
//! caller's protocol (a [`codec::Codec`]); it gets back an [`Ended`], which it turns into HTTP.
//! A chat call's stages are functions of their own (`chat_stages` calls them in order):
//!
//! 1. admit     — key → SHA-256 → tenant (`Snapshot::authenticate`): 401; the body under
//!    `server.max_body_bytes`: 413; the codec's work once the caller is known (`prepare`).
//! 2. choose    — forward or translate: the codec's skim names the alias; a route every
//!    candidate of which speaks the caller's protocol is sent the caller's bytes, any other
//!    request is decoded into the canonical model (400), its alias checked (404, 403).
//! 3. budget    — the alias's context budget (may move to its long-context alias), budgets (may
//!    downgrade), then rate limits (`governance::guard`): 429. The meter starts.
//! 4. attempts  — the ordered plan (`routing::plan`) walked by `routing::failover`, one upstream
//!    call per attempt (`upstream::call`) with the request as that provider can honour it; a
//!    streamed answer becomes the codec's events (`stream::EgressStream`).
//! 5. settle    — one usage record (`metering::meter`); the guard's reservations settle to it
//!    (`Ledger`).
//!
//! A request refused at stages 1–3 still gets its record (`Meter::rejected`).

pub mod codec;
pub mod ops;
pub mod responses;
pub mod stream;

use std::borrow::Cow;
use std::future::Future;
use std::time::Instant;

use ax_protocol::config::ParamsMode;
use ax_protocol::usage::UNKNOWN_ALIAS;
use bytes::Bytes;

pub use crate::config::snapshot::Served;
use crate::config::snapshot::{KeyRef, Route, Snapshot, Tenant, Upstream};
use crate::error::{AxError, Outcome};
use crate::governance::guard::{self, Demand, Reservations};
use crate::metering::meter::Meter;
use crate::routing::failover::{self, AttemptCtx};
use crate::routing::plan;
use crate::trace::{Hop, TraceContext, Traceparent};
use crate::upstream::call::{self, ChatOutcome};
use crate::App;
use ax_wire::canonical::{ChatRequest, ChatResponse, EmbeddingsRequest, EmbeddingsResponse, RawChat, Skim, Usage};
use codec::Codec;
use stream::{EgressStream, StreamEncoder};

/// How a call ended, for ingress to answer.
pub enum Ended<'s, R> {
    /// An upstream answered.
    Answered(Answer<'s, R>),
    /// Every attempt failed, or none could be made; `served` is the last attempt, if any.
    Failed { error: AxError, served: Option<Served<'s>> },
    /// Refused before any upstream was chosen.
    Rejected(AxError),
}

/// An answer and what the gateway says of it (its `x-ax-*` headers).
pub struct Answer<'s, R> {
    pub reply: R,
    pub served: Served<'s>,
    /// Micro-USD, when the serving model has prices.
    pub cost: Option<u64>,
    /// The long-context alias the request moved to.
    pub long_context: Option<&'s str>,
    /// `x-ax-degraded`, when a budget sent the request to a cheaper alias.
    pub degraded: Option<String>,
    /// `x-ax-budget-warning`, past a budget's threshold.
    pub warning: Option<String>,
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

/// The request as ingress hands it in: its id, when it arrived, the caller's key, and the body
/// still to read (given the size limit and the authenticated caller's tenant id).
pub struct Inbound<'h, B> {
    pub request_id: &'h str,
    pub start: Instant,
    /// The request's trace, when tracing is on (`trace_of`).
    pub trace: Option<TraceContext>,
    pub key: Option<&'h str>,
    pub body: B,
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

/// An embeddings call's admission: authenticate, read, decode, the alias exists and is allowed.
async fn admit<'s, T, B, Fut, D>(
    snap: &'s Snapshot,
    inbound: Inbound<'_, B>,
    decode: D,
) -> Result<(Caller<'s>, T, &'s Route), Rejection>
where
    T: ModelRequest,
    B: FnOnce(u64, &'s str) -> Fut,
    Fut: Future<Output = Result<Bytes, AxError>>,
    D: FnOnce(&[u8], ParamsMode) -> Result<T, AxError>,
{
    let (caller, bytes) = admit_body(snap, inbound.key, inbound.body).await?;
    let req: T = decode(&bytes, snap.params).map_err(Rejection::of(&caller, None))?;
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

/// Every attempt failed (or none could be made): the record says so.
fn failed<'s, R>(error: AxError, mut ledger: Ledger, served: Option<Served<'s>>) -> Ended<'s, R> {
    if let Some(s) = &served {
        ledger.meter.served_by(s);
    }
    ledger.finish(error.status().as_u16(), Some(error.code()));
    Ended::Failed { error, served }
}

/// A chat request as the stages carry it: the caller's bytes with what the gateway read of them
/// (every upstream of the caller's protocol is sent those), or decoded into the canonical model.
enum Request {
    /// `decoded`: the canonical request too, when an upstream of another protocol may serve it
    /// (a long-context or downgrade alias that translates) or its content is recorded.
    Forward {
        raw: RawChat,
        decoded: Option<ChatRequest>,
    },
    Canonical(ChatRequest),
}

impl Request {
    fn stream(&self) -> bool {
        match self {
            Self::Forward { raw, .. } => raw.stream,
            Self::Canonical(r) => r.stream,
        }
    }

    fn include_usage(&self) -> bool {
        match self {
            Self::Forward { raw, .. } => raw.include_usage,
            Self::Canonical(r) => r.include_usage(),
        }
    }

    /// The canonical request, when there is one.
    fn canonical(&self) -> Option<&ChatRequest> {
        match self {
            Self::Forward { decoded, .. } => decoded.as_ref(),
            Self::Canonical(c) => Some(c),
        }
    }

    /// A forwarded request decoded too (once), for an upstream of another protocol or a span's
    /// content.
    fn decode<C: Codec>(&mut self, codec: &mut C, mode: ParamsMode) -> Result<(), AxError> {
        if let Self::Forward { raw, decoded: decoded @ None } = self {
            *decoded = Some(canonical(codec, &raw.body, mode)?);
        }
        Ok(())
    }
}

/// A chat completion, in the protocol of `codec`: its stages, and the record of a refusal.
pub async fn chat<'s, B, Fut, C>(
    app: &App,
    snap: &'s Snapshot,
    inbound: Inbound<'_, B>,
    codec: &mut C,
) -> Ended<'s, ChatReply<C::Events>>
where
    B: FnOnce(u64, &'s str) -> Fut,
    Fut: Future<Output = Result<Bytes, AxError>>,
    C: Codec,
{
    let (rid, start, trace) = (inbound.request_id, inbound.start, inbound.trace);
    recorded(chat_stages(app, snap, inbound, codec).await, rid, start, trace)
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
fn canonical<C: Codec>(codec: &mut C, bytes: &Bytes, mode: ParamsMode) -> Result<ChatRequest, AxError> {
    let req = codec.decode(bytes, mode)?;
    req.validate()?;
    Ok(req)
}

/// The canonical request and its route: decoded (field paths, strict checks), the alias checked,
/// validated: every reason to refuse it before any quota is taken.
#[expect(clippy::result_large_err, reason = "a refusal is the rare path, and returned once")]
fn decoded_request<'s, C: Codec>(
    snap: &'s Snapshot,
    caller: &Caller<'_>,
    codec: &mut C,
    bytes: &Bytes,
) -> Result<(Request, &'s Route), Rejection> {
    let mut req = codec.decode(bytes, snap.params).map_err(Rejection::of(caller, None))?;
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

/// Stage 1–3 of a chat call: the caller, its body, the codec's work on it.
async fn admit_chat<'s, B, Fut, C>(
    snap: &'s Snapshot,
    key: Option<&str>,
    body: B,
    codec: &mut C,
) -> Result<(Caller<'s>, Bytes), Rejection>
where
    B: FnOnce(u64, &'s str) -> Fut,
    Fut: Future<Output = Result<Bytes, AxError>>,
    C: Codec,
{
    let (caller, bytes) = admit_body(snap, key, body).await?;
    codec.prepare(snap, &caller.tenant.id, &bytes).await.map_err(Rejection::of(&caller, None))?;
    Ok((caller, bytes))
}

/// Stage 4: forward or translate. With a protocol some route forwards, the codec's skim names
/// the alias and the route decides: a route every candidate of which speaks the caller's
/// protocol is served from the caller's bytes; any other is decoded here, before any quota is
/// taken. A snapshot in which no route forwards the caller's protocol decodes at once.
#[expect(clippy::result_large_err, reason = "a refusal is the rare path, and returned once")]
fn choose<'s, C: Codec>(
    snap: &'s Snapshot,
    caller: &Caller<'_>,
    codec: &mut C,
    bytes: Bytes,
) -> Result<(Request, &'s Route), Rejection> {
    let Some(protocol) = C::FORWARDS.filter(|p| snap.forwarded.has(*p)) else {
        return decoded_request(snap, caller, codec, &bytes);
    };
    let forwards = |alias: &str| snap.route(alias).is_some_and(|r| r.protocols.has(protocol));
    match codec.skim(bytes, &forwards).map_err(Rejection::of(caller, None))? {
        Skim::Forward(raw) => {
            let route = route_of(snap, caller, &raw.model)?;
            if route.protocols.has(protocol) {
                Ok((Request::Forward { raw, decoded: None }, route))
            } else {
                decoded_request(snap, caller, codec, &raw.body)
            }
        }
        Skim::Decode(bytes) => decoded_request(snap, caller, codec, &bytes),
    }
}

/// What the budget stage lets through: the route to serve, the request's ledger, what the
/// answer says of budgets.
struct Budgeted<'s> {
    route: &'s Route,
    long_context: Option<&'s str>,
    ledger: Ledger,
    degraded: Option<String>,
    warning: Option<String>,
}

/// Stage 5: the context budget (a prompt over the alias's limit goes to its long-context alias,
/// if any), then budgets (may downgrade to a cheaper alias), then the requested alias's rate
/// limits: checked after every other reason to refuse, so a refused request uses no one's quota.
/// The request's meter starts here.
async fn budget<'s>(
    app: &App,
    snap: &'s Snapshot,
    caller: &Caller<'s>,
    route: &'s Route,
    needs: &plan::Needs,
    stream: bool,
    (request_id, start): (&str, Instant),
) -> Result<Budgeted<'s>, Rejection> {
    let alias = route.alias.as_str();
    let (served_route, long_context) = match route.max_prompt_tokens {
        Some(limit) if needs.prompt_estimate > u64::from(limit) => match &route.long_context_alias {
            Some(l) => (snap.routes.get(l).unwrap_or(route), Some(l.as_str())),
            None => {
                let e = AxError::PromptTooLong { alias: alias.to_owned(), estimated: needs.prompt_estimate, limit };
                return Err(Rejection::of(caller, Some(alias))(e));
            }
        },
        _ => (route, None),
    };
    let demand = Demand { prompt_tokens: needs.prompt_estimate, reserve_tokens: needs.reserve_tokens };
    let passed = guard::run(app.fleet.as_ref(), snap, caller.tenant, caller.key, route, served_route, demand)
        .await
        .map_err(Rejection::of(caller, Some(alias)))?;
    let guard::Passed { route, reservations, degraded, warning } = passed;
    let mut meter = Meter::new(request_id, &caller.tenant.id, &caller.key.key_id, alias, stream, start);
    meter.prompt_estimate(needs.prompt_estimate);
    meter.degraded(degraded.clone());
    Ok(Budgeted { route, long_context, ledger: Ledger { meter, reservations }, degraded, warning })
}

/// The request's trace on its meter, and (for a sampled request of a tenant that records them)
/// its prompt, decoding a forwarded request for it.
fn traced<C: Codec>(
    meter: &mut Meter,
    trace: Option<TraceContext>,
    req: &mut Request,
    codec: &mut C,
    snap: &Snapshot,
    records: bool,
) {
    let Some(t) = &trace else { return };
    let sampled = t.sampled;
    let (max_tokens, temperature) = match &*req {
        Request::Forward { raw, .. } => (raw.max_output, raw.temperature),
        Request::Canonical(c) => (c.max_completion_tokens.or(c.max_tokens), c.temperature),
    };
    meter.trace(trace, max_tokens, temperature);
    if sampled && records && req.decode(codec, snap.params).is_ok() {
        if let Some(c) = req.canonical() {
            meter.record_content(c);
        }
    }
}

/// Stage 6: one attempt, on the upstream failover chose.
async fn attempt<'s, C: Codec>(
    snap: &'s Snapshot,
    req: &Request,
    needs: &plan::Needs,
    codec: &C,
    (rid, trace, records_content): (&str, Option<&TraceContext>, bool),
    a: AttemptCtx<'s>,
) -> Result<ChatReply<C::Events>, (AxError, failover::AttemptHealth)> {
    let AttemptCtx { up, model, deadlines, guard, attempt, io } = a;
    let traceparent = trace.map(|t| t.traceparent(attempt));
    let hop = Hop { request_id: rid, traceparent: traceparent.as_ref().map(Traceparent::as_bytes), io: Some(&io) };
    let outcome = match req {
        Request::Forward { raw, .. } if up.speaks.has(raw.protocol) => {
            call::chat_forward(up, model, raw, hop, deadlines).await
        }
        _ => match req.canonical() {
            Some(c) => {
                let c = for_provider(c, &needs.params, up);
                call::chat(up, model, &c, snap.default_max_tokens, hop, deadlines).await
            }
            // Not reached: a request whose route has an upstream of another protocol is decoded
            // before its attempts.
            None => Err(AxError::Internal),
        },
    };
    let mut guard = guard;
    match outcome {
        Err(e) => Err((e, guard)),
        Ok(ChatOutcome::Full(r)) => {
            if let Some(u) = &r.usage {
                guard.usage(u.total());
            }
            guard.finish(Outcome::Success);
            Ok(ChatReply::Full(r))
        }
        Ok(ChatOutcome::Forward { body, usage, facts }) => {
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
            let n = req.canonical().and_then(|c| c.n).unwrap_or(1);
            let enc = codec.events(req.include_usage(), &model.name);
            EgressStream::open(us, enc, n, guard).await.map(ChatReply::Stream)
        }
    }
}

/// Stage 7: the answer's usage and cost on the record; a whole answer's record is written now,
/// a stream's when it ends (its ledger goes with it).
fn settle<'s, E>(reply: ChatReply<E>, served: Served<'s>, req: &Request, b: Budgeted<'s>) -> Ended<'s, ChatReply<E>>
where
    E: StreamEncoder,
{
    let Budgeted { long_context, mut ledger, degraded, warning, .. } = b;
    ledger.meter.served_by(&served);
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
            if let (true, Request::Forward { raw, .. }) = (ledger.meter.records_content(), req) {
                let kind = served.up.kind;
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
    Ended::Answered(Answer { reply, served, cost, long_context, degraded, warning })
}

/// The stages of a chat call, in order: admit → forward or translate → budget → attempts →
/// settle.
async fn chat_stages<'s, B, Fut, C>(
    app: &App,
    snap: &'s Snapshot,
    inbound: Inbound<'_, B>,
    codec: &mut C,
) -> Result<Ended<'s, ChatReply<C::Events>>, Rejection>
where
    B: FnOnce(u64, &'s str) -> Fut,
    Fut: Future<Output = Result<Bytes, AxError>>,
    C: Codec,
{
    let Inbound { request_id: rid, start, trace, key, body } = inbound;
    let (caller, bytes) = admit_chat(snap, key, body, codec).await?;
    let (mut req, route) = choose(snap, &caller, codec, bytes)?;
    let needs = match &req {
        Request::Forward { raw, .. } => plan::forward_needs(raw, snap.default_max_tokens),
        Request::Canonical(r) => plan::chat_needs(r, snap.default_max_tokens),
    };
    let mut b = budget(app, snap, &caller, route, &needs, req.stream(), (rid, start)).await?;
    let records = caller.tenant.trace_content;
    traced(&mut b.ledger.meter, trace, &mut req, codec, snap, records);
    // A forwarded request whose route (a long-context or downgrade alias) has an upstream of
    // another protocol is decoded now, once.
    if let Request::Forward { raw, .. } = &req {
        if !b.route.protocols.has(raw.protocol) {
            if let Err(e) = req.decode(codec, snap.params) {
                return Ok(failed(e, b.ledger, None));
            }
        }
    }
    let records_content = b.ledger.meter.records_content();
    let mut attempt_log = failover::AttemptLog::default();
    let origin = failover::Origin { request_id: rid, start, fleet: app.fleet.as_ref() };
    let (req_ref, needs_ref, codec_ref, trace_ref) = (&req, &needs, &*codec, trace.as_ref());
    // Boxed: the attempts' state (~4.5 KiB) is built once in its box, not inline in every future
    // that holds this one (each of which is moved whole, so copied, before it first runs).
    let result = Box::pin(failover::run(snap, b.route, needs_ref, origin, &mut attempt_log, |a| {
        attempt(snap, req_ref, needs_ref, codec_ref, (rid, trace_ref, records_content), a)
    }))
    .await;
    b.ledger.meter.attempts(attempt_log.list, attempt_log.answering);
    match result {
        Ok((reply, served)) => Ok(settle(reply, served, &req, b)),
        Err((e, served)) => Ok(failed(e, b.ledger, served)),
    }
}

/// An embeddings call.
pub async fn embeddings<'s, B, Fut, D>(
    app: &App,
    snap: &'s Snapshot,
    inbound: Inbound<'_, B>,
    decode: D,
) -> Ended<'s, (EmbeddingsResponse, EmbeddingsRequest)>
where
    B: FnOnce(u64, &'s str) -> Fut,
    Fut: Future<Output = Result<Bytes, AxError>>,
    D: FnOnce(&[u8], ParamsMode) -> Result<EmbeddingsRequest, AxError>,
{
    let (rid, start, trace) = (inbound.request_id, inbound.start, inbound.trace);
    recorded(embeddings_stages(app, snap, inbound, decode).await, rid, start, trace)
}

async fn embeddings_stages<'s, B, Fut, D>(
    app: &App,
    snap: &'s Snapshot,
    inbound: Inbound<'_, B>,
    decode: D,
) -> Result<Ended<'s, (EmbeddingsResponse, EmbeddingsRequest)>, Rejection>
where
    B: FnOnce(u64, &'s str) -> Fut,
    Fut: Future<Output = Result<Bytes, AxError>>,
    D: FnOnce(&[u8], ParamsMode) -> Result<EmbeddingsRequest, AxError>,
{
    let (rid, start, trace) = (inbound.request_id, inbound.start, inbound.trace);
    let (caller, req, route) = admit::<EmbeddingsRequest, _, _, _>(snap, inbound, decode).await?;
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
    ledger.meter.served_by(&served_by);
    ledger.meter.usage(&ax_wire::canonical::Usage { prompt_tokens: resp.prompt_tokens, ..Default::default() });
    let cost = ledger.meter.cost_micro_usd();
    ledger.finish(200, None);
    // Embeddings answers carry no budget headers (the record says whether a budget downgraded it).
    let answer =
        Answer { reply: (resp, req), served: served_by, cost, long_context: None, degraded: None, warning: None };
    Ok(Ended::Answered(answer))
}
