//! Overview: the fleet at a glance, refreshed every 5 s. Requests per minute, error rate, p95
//! latency and time to first token from the data planes' health summaries (their rolling windows,
//! summed over nodes), spend today from the usage rollups, and a row per upstream.

use std::collections::BTreeMap;

use leptos::prelude::*;
use serde_json::Value;

use crate::api::{self, ApiError};
use crate::fmt;

/// One upstream over every node's window.
#[derive(Default, Clone, PartialEq)]
struct Up {
    requests: f64,
    ok: f64,
    per_min: f64,
    p95: Option<f64>,
    ttft_p95: Option<f64>,
    breakers: Vec<String>,
}

fn max(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn fleet(nodes: &Value) -> BTreeMap<String, Up> {
    let mut out: BTreeMap<String, Up> = BTreeMap::new();
    for n in nodes["nodes"].as_array().into_iter().flatten() {
        for u in n["health"]["upstreams"].as_array().into_iter().flatten() {
            let e = out.entry(u["upstream"].as_str().unwrap_or("?").to_owned()).or_default();
            let window_min = u["window_ms"].as_f64().filter(|w| *w > 0.0).unwrap_or(60_000.0) / 60_000.0;
            for m in u["models"].as_array().into_iter().flatten() {
                let r = m["requests"].as_f64().unwrap_or(0.0);
                e.requests += r;
                e.per_min += r / window_min;
                e.ok += r * m["success_rate"].as_f64().unwrap_or(1.0);
                e.p95 = max(e.p95, m["latency_p95_ms"].as_f64());
                e.ttft_p95 = max(e.ttft_p95, m["ttft_p95_ms"].as_f64());
            }
            e.breakers.push(u["breaker"]["state"].as_str().unwrap_or("?").to_owned());
        }
    }
    out
}

#[component]
pub fn Overview() -> impl IntoView {
    let nodes = RwSignal::new(None::<Result<Value, ApiError>>);
    let spend = RwSignal::new(None::<Result<i64, ApiError>>);
    let alive = RwSignal::new(true);
    on_cleanup(move || alive.set(false));
    leptos::task::spawn_local(async move {
        while alive.get_untracked() {
            nodes.set(Some(api::get::<Value>("/api/v1/nodes").await));
            let today = js_sys::Date::new_0().to_iso_string().as_string().unwrap_or_default();
            let day = today.get(..10).unwrap_or("").to_owned();
            let r = api::get::<Value>(&format!("/api/v1/reports/cost?period=day&from={day}&to={day}")).await;
            spend.set(Some(r.map(|v| v["total_micro_usd"].as_i64().unwrap_or(0))));
            gloo_timers::future::TimeoutFuture::new(5000).await;
        }
    });
    view! {
        <h1>"Overview"</h1>
        {move || match nodes.get() {
            None => view! { <p class="loading">"Loading…"</p> }.into_any(),
            Some(Err(e)) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
            Some(Ok(v)) => {
                let ups = fleet(&v);
                let total: f64 = ups.values().map(|u| u.requests).sum();
                let ok: f64 = ups.values().map(|u| u.ok).sum();
                let per_min: f64 = ups.values().map(|u| u.per_min).sum();
                let p95 = ups.values().fold(None, |a, u| max(a, u.p95));
                let ttft = ups.values().fold(None, |a, u| max(a, u.ttft_p95));
                let ms = |x: Option<f64>| x.map_or_else(|| "–".to_owned(), |x| if x < 10.0 { format!("{x:.1} ms") } else { format!("{x:.0} ms") });
                let nodes_n = v["nodes"].as_array().map_or(0, Vec::len);
                let connected = v["nodes"].as_array().into_iter().flatten().filter(|n| n["connected"] == true).count();
                view! {
                    <div class="tiles">
                        <div class="tile"><span>"Requests / min"</span><strong>{fmt::int(per_min.round() as i64)}</strong></div>
                        <div class="tile"><span>"Error rate"</span><strong>{if total > 0.0 { fmt::pct((total - ok) * 100.0 / total) } else { "–".to_owned() }}</strong></div>
                        <div class="tile"><span>"p95 latency (worst upstream)"</span><strong>{ms(p95)}</strong></div>
                        <div class="tile"><span>"p95 time to first token"</span><strong>{ms(ttft)}</strong></div>
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
                                <td class="num">{if u.requests > 0.0 { fmt::pct(u.ok * 100.0 / u.requests) } else { "–".to_owned() }}</td>
                                <td class="num">{ms(u.p95)}</td>
                                <td class="num">{ms(u.ttft_p95)}</td>
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
