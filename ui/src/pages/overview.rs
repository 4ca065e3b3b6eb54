//! Overview: the fleet at a glance, refreshed every 5 s. Requests, their rate, the error rate and
//! the p95 latency and time to first token over the last 15 minutes, from the usage records (a
//! window long enough to read: 200 requests a minute ago still show); the live rates, success and
//! breakers from the data planes' health summaries (their rolling windows, summed over nodes, each
//! labeled with its window); spend today from the usage rollups; and a row per upstream with both.

use std::collections::BTreeMap;

use ax_protocol::admin::{CostReport, NodeList, RecentTraffic};
use ax_protocol::health::{BreakerState, UpstreamStatus};
use leptos::prelude::*;
use leptos_router::components::A;

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

/// The window of the request counts and rates.
const RECENT_MINUTES: i64 = 15;

/// Requests per minute: one decimal under 10 (3 requests in 15 minutes read 0.2, not 0).
fn per_minute(requests: i64, minutes: i64) -> String {
    let r = requests as f64 / minutes.max(1) as f64;
    if r > 0.0 && r < 10.0 {
        format!("{r:.1}")
    } else {
        fmt::int(r.round() as i64)
    }
}

/// The request explorer's URL for the requests that failed in the last `minutes`.
fn failed_since(minutes: i64) -> String {
    let from = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(js_sys::Date::now() - minutes as f64 * 60_000.0));
    let iso = from.to_iso_string().as_string().unwrap_or_default();
    format!("/requests?error=any&from={}", js_sys::encode_uri_component(&iso))
}

#[component]
pub fn Overview() -> impl IntoView {
    let nodes = RwSignal::new(None::<Result<NodeList, ApiError>>);
    let spend = RwSignal::new(None::<Result<i64, ApiError>>);
    let recent = RwSignal::new(None::<Result<RecentTraffic, ApiError>>);
    crate::every(5000, move || async move {
        nodes.set(Some(api::get::<NodeList>("/api/v1/nodes").await));
        recent.set(Some(api::get::<RecentTraffic>(&format!("/api/v1/reports/recent?minutes={RECENT_MINUTES}")).await));
        let today = js_sys::Date::new_0().to_iso_string().as_string().unwrap_or_default();
        let day = today.get(..10).unwrap_or("").to_owned();
        let r = api::get::<CostReport>(&format!("/api/v1/reports/cost?period=day&from={day}&to={day}")).await;
        spend.set(Some(r.map(|c| c.total_micro_usd)));
    });
    view! {
        <h1>"Overview"</h1>
        {move || match crate::loaded(nodes.get()) {
            Err(pending) => pending,
            Ok(v) => {
                let ups = fleet(&v);
                let over = window(&v).map_or_else(String::new, |w| format!(" (last {w})"));
                let last = format!(" (last {RECENT_MINUTES} min)");
                let traffic = move || recent.get().and_then(Result::ok);
                let nodes_n = v.nodes.len();
                let connected = v.nodes.iter().filter(|n| n.connected).count();
                view! {
                    <div class="tiles">
                        <div class="tile requests"><span>{format!("Requests{last}")}</span><strong>{move || traffic().map_or_else(|| "…".to_owned(), |t| fmt::int(t.requests))}</strong></div>
                        <div class="tile"><span>{format!("Requests / min{last}")}</span><strong>{move || traffic().map_or_else(|| "…".to_owned(), |t| per_minute(t.requests, t.minutes))}</strong></div>
                        <div class="tile errors"><span>{format!("Error rate{last}")}</span><strong>{move || match traffic() {
                            Some(t) if t.requests > 0 => fmt::pct(t.errors as f64 * 100.0 / t.requests as f64),
                            Some(_) => "–".to_owned(),
                            None => "…".to_owned(),
                        }}</strong>
                            <A href=failed_since(RECENT_MINUTES)>{move || traffic().map_or_else(String::new, |t| format!("{} failed →", fmt::int(t.errors)))}</A>
                        </div>
                        <div class="tile"><span>{format!("p95 latency, worst upstream{last}")}</span><strong>{move || {
                            fmt::ms(traffic().and_then(|t| t.upstreams.iter().fold(None, |a, u| max(a, u.latency_p95_ms))))
                        }}</strong></div>
                        <div class="tile"><span>{format!("p95 time to first token{last}")}</span><strong>{move || {
                            fmt::ms(traffic().and_then(|t| t.upstreams.iter().fold(None, |a, u| max(a, u.ttft_p95_ms))))
                        }}</strong></div>
                        <div class="tile"><span>"Spend today (UTC)"</span><strong>{move || match spend.get() {
                            Some(Ok(m)) => fmt::usd_micro(m),
                            Some(Err(_)) => "–".to_owned(),
                            None => "…".to_owned(),
                        }}</strong></div>
                        <div class="tile"><span>"Data planes connected"</span><strong>{format!("{connected} of {nodes_n}")}</strong></div>
                    </div>
                    <table class="upstreams">
                        <thead><tr><th>"Upstream"</th><th class="num">{format!("Requests{last}")}</th><th class="num">{format!("Requests / min{over}")}</th><th class="num">{format!("Success{over}")}</th><th class="num">{format!("p95 latency{over}")}</th><th class="num">{format!("p95 TTFT{over}")}</th><th>"Breaker (per node)"</th><th></th></tr></thead>
                        <tbody>
                        {ups.into_iter().map(|(name, u)| {
                            let n = name.clone();
                            let counted = move || traffic().map_or_else(|| "…".to_owned(), |t| {
                                fmt::int(t.upstreams.iter().find(|x| x.upstream == n).map_or(0, |x| x.requests))
                            });
                            view! {
                            <tr class:bad=u.breakers.iter().any(|b| b != "closed")>
                                <td>{name.clone()}</td>
                                <td class="num">{counted}</td>
                                <td class="num">{fmt::int(u.per_min.round() as i64)}</td>
                                <td class="num">{u.success()}</td>
                                <td class="num">{fmt::ms(u.p95)}</td>
                                <td class="num">{fmt::ms(u.ttft_p95)}</td>
                                <td>{u.breakers.join(", ")}</td>
                                <td><A href=format!("{}&upstream={}", failed_since(RECENT_MINUTES), js_sys::encode_uri_component(&name))>"failed requests"</A></td>
                            </tr>
                        }}).collect_view()}
                        </tbody>
                    </table>
                }.into_any()
            }
        }}
    }
}
