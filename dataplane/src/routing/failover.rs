//! Failover: walk the attempt plan (then the fallback aliases' plans) until one attempt succeeds.
//!
//! For each candidate, in plan order: skip it when its breaker is open (or half-open with the
//! probe already out) or it is at `max_concurrency`: never wait in a queue. Otherwise attempt it
//! and feed the outcome to its breaker and statistics. A retryable failure (see
//! `AxError::is_retryable`, table in `docs/failover.md`) moves on to the next candidate; a client
//! error goes straight back to the caller; a context-length error moves on only to larger windows.
//! A 429 or 503 candidate may be retried `max_retries_same` times, but only after the other
//! candidates had their turn and after its Retry-After (or exponential backoff with jitter):
//! a healthy backup answers first. Attempts are capped and share one deadline. When nothing could
//! even be attempted, the answer is a fast 503 `no_healthy_upstream` with `Retry-After`.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ax_protocol::config::BreakerSpec;
use ax_protocol::usage::AttemptRecord;
use rand::Rng;
use tokio::time::Instant;

use crate::config::snapshot::{Candidate, Model, Route, Served, Snapshot, Upstream};
use crate::error::AxError;
use crate::error::Outcome;
use crate::governance::fleet::Fleet;
use crate::governance::guard::{self, Holds};
use crate::routing::plan::{self, Needs};
use crate::state::health::{Admission, ModelHealth, Permit, UpstreamHealth};
use crate::trace::AttemptIo;
use crate::upstream::call::Deadlines;

/// Everything one attempt needs.
pub struct AttemptCtx<'s> {
    pub up: &'s Upstream,
    pub model: &'s Model,
    pub deadlines: Deadlines,
    pub guard: AttemptHealth,
    /// The attempt's number, from 1 (its trace span and `traceparent`).
    pub attempt: u32,
    /// Its bytes, counted by the transport (`Hop::io`).
    pub io: Arc<AttemptIo>,
}

/// The attempts of a request, in order, and the byte counts of the one that answered (its body
/// is read after `run` returns: the meter reads the counts when the request ends).
#[derive(Default)]
pub struct AttemptLog {
    pub list: Vec<AttemptRecord>,
    pub answering: Option<Arc<AttemptIo>>,
}

/// One attempt's bookkeeping: its concurrency permit, whether it is the breaker's probe, and its
/// timing. It reports the outcome to the breaker and the model's statistics exactly once:
/// through `finish`, or on drop (a caller that went away counts as neutral).
pub struct AttemptHealth {
    upstream: Arc<UpstreamHealth>,
    model: Arc<ModelHealth>,
    breaker: BreakerSpec,
    probe: bool,
    started: Instant,
    ttft: Option<Duration>,
    done: bool,
    _permit: Permit,
    /// The upstream rate-limit reservation of this attempt.
    hold: Holds,
}

impl AttemptHealth {
    fn new(up: &Upstream, model: &Model, probe: bool, permit: Permit, hold: Holds) -> Self {
        Self {
            upstream: up.health.clone(),
            model: model.health.clone(),
            breaker: up.breaker.clone(),
            probe,
            started: Instant::now(),
            ttft: None,
            done: false,
            _permit: permit,
            hold,
        }
    }

    /// The attempt's actual token usage: settles the upstream's token reservation.
    pub fn usage(&mut self, tokens: u64) {
        self.hold.settle(tokens);
    }

    pub fn first_token(&mut self) {
        if self.ttft.is_none() {
            self.ttft = Some(self.started.elapsed());
        }
    }

    pub fn finish(mut self, outcome: Outcome) {
        self.report(outcome);
    }

    fn report(&mut self, outcome: Outcome) {
        if self.done {
            return;
        }
        self.done = true;
        if outcome != Outcome::Success {
            // The request counted against the provider's RPM; its tokens were not used.
            self.usage(0);
        }
        self.upstream.breaker.record(outcome, self.probe, &self.breaker);
        self.model.record(outcome, self.started.elapsed(), self.ttft);
    }
}

impl Drop for AttemptHealth {
    /// An attempt that never reported (the caller went away mid-call) proves nothing: a probe
    /// gives its slot back (the breaker stays half-open and the next request probes), any other
    /// attempt counts as neutral.
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if self.probe {
            self.done = true;
            self.upstream.breaker.release_probe();
        } else {
            self.report(Outcome::Neutral);
        }
    }
}

/// Why a candidate was not attempted (logged, and summarized in `no_healthy_upstream`).
struct Skip {
    upstream: String,
    reason: &'static str,
    reopens_in: Option<Duration>,
}

/// One candidate to attempt: from a plan, or a deferred retry of a rate-limited or unavailable one.
struct Item<'s> {
    cand: Candidate,
    route: &'s Route,
    fallback: Option<&'s str>,
    /// A retry waits until then (its Retry-After or backoff).
    not_before: Option<Instant>,
    retries: u32,
}

/// The request whose attempts `run` makes: its id and arrival (each attempt's record), and the
/// fleet that holds the upstreams' rate limits across replicas (with Redis).
#[derive(Clone, Copy)]
pub struct Origin<'a> {
    pub request_id: &'a str,
    pub start: std::time::Instant,
    pub fleet: Option<&'a Arc<Fleet>>,
}

/// Runs attempts until one succeeds. `attempt` gets each attempt's context; on failure it hands
/// the guard back with the error so the outcome is recorded here.
pub async fn run<'s, T, F, Fut>(
    snap: &'s Snapshot,
    route: &'s Route,
    needs: &Needs,
    origin: Origin<'_>,
    log: &mut AttemptLog,
    mut attempt: F,
) -> Result<(T, Served<'s>), (AxError, Option<Served<'s>>)>
where
    F: FnMut(AttemptCtx<'s>) -> Fut,
    Fut: Future<Output = Result<T, (AxError, AttemptHealth)>>,
{
    let Origin { request_id, start: request_start, fleet } = origin;
    let fo = &route.failover;
    // The clock is read once per attempt where it can be (a read is ~60 ns in a VM): the first
    // attempt's deadline check uses the read the deadline was made from.
    let now = Instant::now();
    let deadline = now + Duration::from_millis(fo.deadline_ms);
    let mut clock = Some(now);
    let mut attempts = 0u32;
    let mut skips: Vec<Skip> = Vec::new();
    let mut last: Option<(AxError, Served<'s>)> = None;
    let mut min_window: Option<u32> = None;
    // Work, in order: the current alias's plan; then the next fallback alias's plan; then the
    // deferred same-upstream retries, earliest first.
    let mut queue: VecDeque<Item<'s>> = VecDeque::new();
    let mut later: Vec<Item<'s>> = Vec::new();
    let mut chain = std::iter::once(route).chain(route.fallbacks.iter().filter_map(|a| snap.routes.get(a))).enumerate();
    loop {
        let item = if let Some(item) = queue.pop_front() {
            item
        } else if let Some((k, r)) = chain.next() {
            match plan::plan(snap, r, needs, &mut rand::rng()) {
                Ok(plan) => {
                    let fallback = (k > 0).then_some(r.alias.as_str());
                    queue.extend(plan.into_iter().map(|cand| Item {
                        cand,
                        route: r,
                        fallback,
                        not_before: None,
                        retries: 0,
                    }));
                }
                Err(e) if k == 0 => return Err((e, None)),
                Err(e) => tracing::info!(fallback = %r.alias, reason = %e, "fallback alias cannot serve this request"),
            }
            continue;
        } else if let Some(i) = (0..later.len()).min_by_key(|&i| later[i].not_before) {
            later.swap_remove(i)
        } else {
            break;
        };
        if attempts >= fo.max_attempts || clock.take().unwrap_or_else(Instant::now) >= deadline {
            break;
        }
        if let Some(t) = item.not_before {
            if t >= deadline {
                continue;
            }
            tokio::time::sleep_until(t).await;
        }
        let (up, model) = snap.upstream_model(&item.cand);
        if min_window.is_some_and(|w| model.context_window <= w) {
            skips.push(Skip { upstream: up.name.clone(), reason: "context window not larger", reopens_in: None });
            continue;
        }
        let Some(guard) = admit(fleet, up, model, needs.reserve_tokens, &mut skips).await else { continue };
        attempts += 1;
        let served = Served { up, model, attempts, fallback: item.fallback };
        let io = Arc::new(AttemptIo::default());
        let started = Instant::now();
        let ctx = AttemptCtx {
            up,
            model,
            deadlines: Deadlines::new(up, item.route, deadline, started),
            guard,
            attempt: attempts,
            io: io.clone(),
        };
        let timing =
            |started: Instant| (started.into_std().saturating_duration_since(request_start), started.elapsed());
        let e = match attempt(ctx).await {
            Ok(v) => {
                log.list.push(attempt_record(request_id, &served, None, timing(started), &io));
                log.answering = Some(io);
                return Ok((v, served));
            }
            Err((e, guard)) => {
                guard.finish(e.outcome());
                log_failed(&served, &e, started.elapsed());
                log.list.push(attempt_record(request_id, &served, Some(&e), timing(started), &io));
                e
            }
        };
        if matches!(e, AxError::UpstreamContextLength) && fo.larger_window_on_context_error {
            min_window = Some(min_window.map_or(model.context_window, |w| w.max(model.context_window)));
        } else if !e.is_retryable() {
            return Err((e, Some(served)));
        } else if matches!(e, AxError::UpstreamRateLimited(_) | AxError::UpstreamUnavailable(_))
            && item.retries < fo.max_retries_same
        {
            let wait = e.retry_after().unwrap_or_else(|| backoff(fo.backoff_ms, item.retries));
            if wait <= Duration::from_millis(fo.max_backoff_ms) {
                later.push(Item { not_before: Some(Instant::now() + wait), retries: item.retries + 1, ..item });
            }
        }
        last = Some((e, served));
    }

    if let Some((e, served)) = last {
        return Err((e, Some(served)));
    }
    for s in &skips {
        tracing::warn!(upstream = %s.upstream, reason = s.reason, reopens_in_ms = s.reopens_in.map(|d| d.as_millis() as u64), "candidate skipped");
    }
    let retry_after = skips
        .iter()
        .filter_map(|s| s.reopens_in)
        .filter(|d| !d.is_zero())
        .min()
        .unwrap_or(Duration::from_secs(1))
        .max(Duration::from_secs(1));
    let detail = if skips.is_empty() {
        "the attempt limit or deadline was reached".to_owned()
    } else {
        skips.iter().map(|s| format!("{}: {}", s.upstream, s.reason)).collect::<Vec<_>>().join("; ")
    };
    Err((AxError::NoHealthyUpstream { alias: route.alias.clone(), detail, retry_after }, None))
}

/// The breaker, concurrency and rate-limit checks; `None` (with the reason recorded) when the
/// candidate must be skipped.
async fn admit(
    fleet: Option<&Arc<Fleet>>,
    up: &Upstream,
    model: &Model,
    tokens: u64,
    skips: &mut Vec<Skip>,
) -> Option<AttemptHealth> {
    let probe = match up.health.breaker.admit() {
        Admission::Pass => false,
        Admission::Probe => true,
        Admission::Reject { reopens_in } => {
            let reason = if reopens_in.is_zero() { "breaker half-open, probe in flight" } else { "breaker open" };
            skips.push(Skip { upstream: up.name.clone(), reason, reopens_in: Some(reopens_in) });
            return None;
        }
    };
    let release = |skips: &mut Vec<Skip>, reason, reopens_in| {
        if probe {
            up.health.breaker.release_probe();
        }
        skips.push(Skip { upstream: up.name.clone(), reason, reopens_in });
        None
    };
    let Some(permit) = up.health.try_acquire(up.max_concurrency) else {
        return release(skips, "at max_concurrency", None);
    };
    let hold = match guard::upstream_limits(fleet, &up.name, &up.limiter, tokens).await {
        Ok(h) => h,
        Err(retry_after) => return release(skips, "at its rate limit", Some(retry_after)),
    };
    Some(AttemptHealth::new(up, model, probe, permit, hold))
}

/// Exponential backoff with full jitter: uniform in [base·2^n / 2, base·2^n].
fn backoff(base_ms: u64, n: u32) -> Duration {
    let ceiling = base_ms.saturating_mul(1 << n.min(16)).max(1);
    Duration::from_millis(rand::rng().random_range(ceiling / 2..=ceiling))
}

fn log_failed(served: &Served<'_>, e: &AxError, elapsed: Duration) {
    tracing::warn!(
        attempt = served.attempts,
        upstream = %served.up.name,
        model = %served.model.name,
        outcome = e.code(),
        duration_ms = elapsed.as_millis() as u64,
        "attempt failed"
    );
}

/// `(offset, elapsed)`: when the attempt began after the request arrived, and how long it took.
fn attempt_record(
    request_id: &str,
    served: &Served<'_>,
    e: Option<&AxError>,
    (offset, elapsed): (Duration, Duration),
    io: &AttemptIo,
) -> AttemptRecord {
    let (sent_bytes, received_bytes) = io.counts();
    AttemptRecord {
        attempt_id: ax_protocol::usage::attempt_id(request_id, served.attempts),
        upstream: served.up.name.clone(),
        model: served.model.name.clone(),
        error_code: e.map(|e| e.code().to_owned()),
        // Failures after the request reached the upstream may still be billed by the provider.
        possibly_billed: e.is_some_and(|e| {
            matches!(
                e,
                AxError::UpstreamFirstByteTimeout
                    | AxError::UpstreamIdleTimeout
                    | AxError::UpstreamTimeout
                    | AxError::UpstreamStreamTruncated
            )
        }),
        latency_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        offset_us: u64::try_from(offset.as_micros()).unwrap_or(u64::MAX),
        provider: crate::metering::meter::genai_provider(served.up.kind).into(),
        ttft_ms: None,
        sent_bytes,
        received_bytes,
    }
}
