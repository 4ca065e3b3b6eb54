//! Metering: Prometheus metrics and one usage record per call.
//!
//! A `Meter` travels with the request (into the response stream, for streams) and reports when
//! dropped, so a call is metered exactly once however it ends: completed, failed, or cut off by
//! a client disconnect (then marked incomplete).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ax_protocol::usage::UsageRecord;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::canonical::Usage;
use crate::error::AxError;
use crate::failover::Served;

/// Installs the process-wide Prometheus recorder once and returns its handle.
pub fn prometheus() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let latency = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0];
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &latency)
                .ok()?
                .install_recorder()
                .ok()?;
            metrics::describe_counter!("ax_requests_total", "Requests by alias, upstream and HTTP status");
            metrics::describe_histogram!("ax_request_duration_seconds", "Time from request to last byte");
            metrics::describe_histogram!("ax_time_to_first_token_seconds", "Time from request to first streamed token");
            metrics::describe_counter!("ax_tokens_total", "Tokens by alias, upstream and direction");
            metrics::describe_counter!("ax_upstream_attempts_total", "Upstream attempts by upstream and outcome");
            Some(handle)
        })
        .clone()
}

pub struct Meter {
    pub record: UsageRecord,
    start: Instant,
    ttft: Option<Duration>,
    /// Set once the call reached its end; a drop before that means the client went away.
    done: bool,
    prices: Option<crate::cost::Prices>,
}

impl Meter {
    pub fn new(request_id: &str, tenant: &str, key_id: &str, alias: &str, stream: bool, start: Instant) -> Self {
        Self {
            record: UsageRecord {
                request_id: request_id.to_owned(),
                tenant: tenant.to_owned(),
                key_id: key_id.to_owned(),
                alias: alias.to_owned(),
                stream,
                ..UsageRecord::default()
            },
            start,
            ttft: None,
            done: false,
            prices: None,
        }
    }

    /// The attempt that answered the caller.
    pub fn served_by(&mut self, s: &Served<'_>) {
        let r = &mut self.record;
        s.up.name.clone_into(&mut r.upstream);
        s.model.name.clone_into(&mut r.model);
        r.attempts = s.attempts;
        r.attempt_id = attempt_id(&r.request_id, s.attempts);
        r.retry_of = (s.attempts > 1).then(|| attempt_id(&r.request_id, s.attempts - 1));
        r.fallback = s.fallback.map(str::to_owned);
        self.prices = s.model.prices;
    }

    /// The template for this request's other usage records (failed attempts).
    pub fn template(&self) -> &UsageRecord {
        &self.record
    }

    pub fn first_token(&mut self) {
        if self.ttft.is_none() {
            self.ttft = Some(self.start.elapsed());
        }
    }

    pub fn usage(&mut self, u: &Usage) {
        let r = &mut self.record;
        r.prompt_tokens = u.prompt_tokens;
        r.completion_tokens = u.completion_tokens;
        r.cached_prompt_tokens = u.cached_tokens;
        r.cache_write_tokens = u.cache_write_tokens;
        r.cost_micro_usd = self.prices.map(|p| p.cost_micro_usd(u));
    }

    pub fn cost_micro_usd(&self) -> Option<u64> {
        self.record.cost_micro_usd
    }

    /// The call ended as the caller saw it: `status`, and the error code if it failed.
    pub fn finish(&mut self, status: u16, error_code: Option<&'static str>) {
        self.record.status = status;
        self.record.error_code = error_code.map(str::to_owned);
        if error_code.is_some() && self.record.stream && status == 200 {
            self.record.incomplete = true;
        }
        self.done = true;
    }
}

/// The health table served at `/admin/health`.
pub fn health_table(snap: &crate::snapshot::Snapshot) -> serde_json::Value {
    let upstreams: Vec<serde_json::Value> = snap
        .upstreams
        .iter()
        .map(|u| {
            let (state, reopens_in) = u.health.breaker.state();
            let models: Vec<serde_json::Value> = u
                .models
                .iter()
                .map(|m| {
                    let mut row = serde_json::to_value(m.health.snapshot(u.breaker.window_ms)).unwrap_or_default();
                    row["model"] = serde_json::Value::from(m.name.as_str());
                    row
                })
                .collect();
            serde_json::json!({
                "upstream": u.name,
                "provider": u.kind.as_str(),
                "in_flight": u.health.in_flight(),
                "max_concurrency": u.max_concurrency,
                "breaker": { "state": state, "reopens_in_ms": reopens_in.map(|d| d.as_millis() as u64) },
                "models": models,
            })
        })
        .collect();
    serde_json::json!({ "config_version": snap.version, "upstreams": upstreams })
}

/// Sets the health gauges from the live table; called when `/metrics` is scraped, never per request.
pub fn health_gauges(snap: &crate::snapshot::Snapshot) {
    use crate::health::BreakerState;
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

fn attempt_id(request_id: &str, n: u32) -> String {
    format!("{request_id}#{n}")
}

/// The usage record of an attempt that failed and was followed by another (or by the error the
/// caller saw). Its tokens are unknown (0); `retry_of` links it to the attempt before, so an
/// upstream call that timed out after being sent, and may have been billed, is visible to finance.
pub fn failed_attempt(template: &UsageRecord, s: &Served<'_>, e: &AxError, elapsed: Duration) {
    metrics::counter!("ax_upstream_attempts_total", "upstream" => s.up.name.clone(), "outcome" => e.code())
        .increment(1);
    tracing::info!(
        target: "ax::usage",
        attempt_id = %attempt_id(&template.request_id, s.attempts),
        retry_of = (s.attempts > 1).then(|| attempt_id(&template.request_id, s.attempts - 1)),
        tenant = %template.tenant,
        key_id = %template.key_id,
        alias = %template.alias,
        fallback = s.fallback,
        upstream = %s.up.name,
        model = %s.model.name,
        stream = template.stream,
        status = e.status().as_u16(),
        error_code = e.code(),
        incomplete = true,
        latency_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        attempts = s.attempts,
        "usage"
    );
}

impl Drop for Meter {
    fn drop(&mut self) {
        if !self.done {
            self.record.incomplete = true;
            self.record.status = 200;
            self.record.error_code = Some("client_disconnected".to_owned());
        }
        let elapsed = self.start.elapsed();
        let r = &mut self.record;
        r.latency_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        r.ttft_ms = self.ttft.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));

        let alias = r.alias.clone();
        let upstream = r.upstream.clone();
        metrics::counter!("ax_requests_total", "alias" => alias.clone(), "upstream" => upstream.clone(), "status" => r.status.to_string())
            .increment(1);
        metrics::histogram!("ax_request_duration_seconds", "alias" => alias.clone(), "upstream" => upstream.clone())
            .record(elapsed.as_secs_f64());
        if let Some(t) = self.ttft {
            metrics::histogram!("ax_time_to_first_token_seconds", "alias" => alias.clone(), "upstream" => upstream.clone())
                .record(t.as_secs_f64());
        }
        for (direction, n) in [
            ("prompt", r.prompt_tokens),
            ("completion", r.completion_tokens),
            ("cached_prompt", r.cached_prompt_tokens),
        ] {
            if n > 0 {
                metrics::counter!("ax_tokens_total", "alias" => alias.clone(), "upstream" => upstream.clone(), "direction" => direction)
                    .increment(n);
            }
        }
        if !r.upstream.is_empty() {
            let outcome = r.error_code.clone().unwrap_or_else(|| "ok".to_owned());
            metrics::counter!("ax_upstream_attempts_total", "upstream" => upstream, "outcome" => outcome).increment(1);
            tracing::info!(
                target: "ax::usage",
                attempt_id = %r.attempt_id,
                retry_of = r.retry_of.as_deref(),
                fallback = r.fallback.as_deref(),
                tenant = %r.tenant,
                key_id = %r.key_id,
                alias = %r.alias,
                upstream = %r.upstream,
                model = %r.model,
                stream = r.stream,
                status = r.status,
                error_code = r.error_code.as_deref(),
                incomplete = r.incomplete,
                prompt_tokens = r.prompt_tokens,
                completion_tokens = r.completion_tokens,
                cached_prompt_tokens = r.cached_prompt_tokens,
                cache_write_tokens = r.cache_write_tokens,
                cost_micro_usd = r.cost_micro_usd,
                latency_ms = r.latency_ms,
                ttft_ms = r.ttft_ms,
                attempts = r.attempts,
                "usage"
            );
        }
    }
}
