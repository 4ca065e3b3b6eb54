//! Overview: the fleet at a glance, refreshed every 5 s. Requests per minute, error rate, p95
//! latency and time to first token from the data planes' health summaries (their rolling windows,
//! summed over nodes), spend today from the usage rollups, and a row per upstream.

use std::collections::BTreeMap;

use ax_protocol::admin::{CostReport, NodeList};
use ax_protocol::health::{BreakerState, UpstreamStatus};
use leptos::prelude::*;

use crate::api::{self, ApiError};
use crate::fmt;

/// One upstream's health, summed over the nodes (and models) added to it.
#[derive(Default, Clone, PartialEq)]
pub struct Up {
    pub requests: f64,
    pub ok: f64,
    pub per_min: f64,
    pub p95: Option<f64>,
    pub ttft_p95: Option<f64>,
    /// The breaker state on each node.
    pub breakers: Vec<String>,
}

fn max(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

impl Up {
    /// Adds one node's row for this upstream.
    pub fn add(&mut self, u: &UpstreamStatus) {
        let window_min = if u.window_ms > 0 { u.window_ms as f64 / 60_000.0 } else { 1.0 };
        for m in &u.models {
            let r = f64::from(m.requests);
            self.requests += r;
            self.per_min += r / window_min;
            self.ok += r * m.success_rate.unwrap_or(1.0);
            self.p95 = max(self.p95, m.latency_p95_ms);
            self.ttft_p95 = max(self.ttft_p95, m.ttft_p95_ms);
        }
        self.breakers.push(breaker(u.breaker.state).to_owned());
    }

    /// The success rate, "–" without requests.
    pub fn success(&self) -> String {
        if self.requests > 0.0 {
            fmt::pct(self.ok * 100.0 / self.requests)
        } else {
            "–".to_owned()
        }
    }
}

/// How a breaker state reads on the page.
pub fn breaker(s: BreakerState) -> &'static str {
    match s {
        BreakerState::Closed => "closed",
        BreakerState::Open => "open",
        BreakerState::HalfOpen => "half-open",
    }
}

/// The rolling window the data planes' rates and percentiles cover, in words ("60 s"): the
/// longest any node reports (their breaker window).
fn window(nodes: &NodeList) -> Option<String> {
    let ms =
        nodes.nodes.iter().filter_map(|n| n.health.as_ref()).flat_map(|h| &h.upstreams).map(|u| u.window_ms).max()?;
    Some(if ms >= 120_000 { format!("{} min", ms / 60_000) } else { format!("{} s", ms / 1000) })
}

fn fleet(nodes: &NodeList) -> BTreeMap<String, Up> {
    let mut out: BTreeMap<String, Up> = BTreeMap::new();
    for u in nodes.nodes.iter().filter_map(|n| n.health.as_ref()).flat_map(|h| &h.upstreams) {
        out.entry(u.upstream.clone()).or_default().add(u);
    }
    out
}

#[component]
pub fn Overview() -> impl IntoView {
    let nodes = RwSignal::new(None::<Result<NodeList, ApiError>>);
    let spend = RwSignal::new(None::<Result<i64, ApiError>>);
    crate::every(5000, move || async move {
        nodes.set(Some(api::get::<NodeList>("/api/v1/nodes").await));
        let today = js_sys::Date::new_0().to_iso_string().as_string().unwrap_or_default();
        let day = today.get(..10).unwrap_or("").to_owned();
        let r = api::get::<CostReport>(&format!("/api/v1/reports/cost?period=day&from={day}&to={day}")).await;
        spend.set(Some(r.map(|c| c.total_micro_usd)));
    });
    view! {
        <h1>"Overview"</h1>
        {move || match nodes.get() {
            None => view! { <p class="loading">"Loading…"</p> }.into_any(),
            Some(Err(e)) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
            Some(Ok(v)) => {
                let ups = fleet(&v);
                let over = window(&v).map_or_else(String::new, |w| format!(" (last {w})"));
                let total: f64 = ups.values().map(|u| u.requests).sum();
                let ok: f64 = ups.values().map(|u| u.ok).sum();
                let per_min: f64 = ups.values().map(|u| u.per_min).sum();
                let p95 = ups.values().fold(None, |a, u| max(a, u.p95));
                let ttft = ups.values().fold(None, |a, u| max(a, u.ttft_p95));
                let nodes_n = v.nodes.len();
                let connected = v.nodes.iter().filter(|n| n.connected).count();
                view! {
                    <div class="tiles">
                        <div class="tile"><span>{format!("Requests / min{over}")}</span><strong>{fmt::int(per_min.round() as i64)}</strong></div>
                        <div class="tile"><span>{format!("Error rate{over}")}</span><strong>{if total > 0.0 { fmt::pct((total - ok) * 100.0 / total) } else { "–".to_owned() }}</strong></div>
                        <div class="tile"><span>"p95 latency (worst upstream)"</span><strong>{fmt::ms(p95)}</strong></div>
                        <div class="tile"><span>"p95 time to first token"</span><strong>{fmt::ms(ttft)}</strong></div>
                        <div class="tile"><span>"Spend today (UTC)"</span><strong>{move || match spend.get() {
                            Some(Ok(m)) => fmt::usd_micro(m),
                            Some(Err(_)) => "–".to_owned(),
                            None => "…".to_owned(),
                        }}</strong></div>
                        <div class="tile"><span>"Data planes connected"</span><strong>{format!("{connected} of {nodes_n}")}</strong></div>
                    </div>
                    <table class="upstreams">
                        <thead><tr><th>"Upstream"</th><th class="num">"Requests / min"</th><th class="num">"Success"</th><th class="num">"p95 latency"</th><th class="num">"p95 TTFT"</th><th>"Breaker (per node)"</th></tr></thead>
                        <tbody>
                        {ups.into_iter().map(|(name, u)| view! {
                            <tr class:bad=u.breakers.iter().any(|b| b != "closed")>
                                <td>{name}</td>
                                <td class="num">{fmt::int(u.per_min.round() as i64)}</td>
                                <td class="num">{u.success()}</td>
                                <td class="num">{fmt::ms(u.p95)}</td>
                                <td class="num">{fmt::ms(u.ttft_p95)}</td>
                                <td>{u.breakers.join(", ")}</td>
                            </tr>
                        }).collect_view()}
                        </tbody>
                    </table>
                }.into_any()
            }
        }}
    }
}
