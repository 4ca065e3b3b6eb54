//! Cost: per-tenant cost by day or month (the finance role lands here), with a date range, a
//! total that matches the usage rows to the cent, and a CSV download of exactly this table (the
//! server's CSV for the same query).

use leptos::prelude::*;
use serde_json::Value;

use crate::api::{self, ApiError};
use crate::fmt;

#[component]
pub fn Reports() -> impl IntoView {
    let period = RwSignal::new("day".to_owned());
    let from = RwSignal::new(String::new());
    let to = RwSignal::new(String::new());
    let data = RwSignal::new(None::<Result<Value, ApiError>>);
    let query = move || {
        let mut q = format!("period={}&by=tenant", period.get());
        for (k, v) in [("from", from.get()), ("to", to.get())] {
            if !v.is_empty() {
                q.push_str(&format!("&{k}={v}"));
            }
        }
        q
    };
    Effect::new(move |_| {
        let q = query();
        leptos::task::spawn_local(async move {
            data.set(Some(api::get::<Value>(&format!("/api/v1/reports/cost?{q}")).await));
        });
    });
    view! {
        <h1>"Cost"</h1>
        <form class="filters" on:submit=|ev| ev.prevent_default()>
            <label>"Period "
                <select on:change=move |ev| period.set(event_target_value(&ev)) prop:value=move || period.get()>
                    <option value="day">"by day"</option>
                    <option value="month">"by month"</option>
                </select>
            </label>
            <label>"From " <input type="date" prop:value=move || from.get() on:change=move |ev| from.set(event_target_value(&ev))/></label>
            <label>"To " <input type="date" prop:value=move || to.get() on:change=move |ev| to.set(event_target_value(&ev))/></label>
            <a class="button" download="ax-cost.csv" href=move || format!("/api/v1/reports/cost?{}&format=csv", query())>"Download CSV"</a>
        </form>
        {move || match data.get() {
            None => view! { <p class="loading">"Loading…"</p> }.into_any(),
            Some(Err(e)) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
            Some(Ok(v)) => {
                let rows = v["rows"].as_array().cloned().unwrap_or_default();
                let total = v["total_micro_usd"].as_i64().unwrap_or(0);
                view! {
                    <table class="report">
                        <thead><tr><th>"Period"</th><th>"Tenant"</th><th class="num">"Requests"</th><th class="num">"Tokens"</th><th class="num">"Cost"</th></tr></thead>
                        <tbody>
                        {rows.into_iter().map(|r| {
                            let tokens = r["prompt_tokens"].as_i64().unwrap_or(0) + r["completion_tokens"].as_i64().unwrap_or(0);
                            view! {
                                <tr>
                                    <td>{r["period"].as_str().unwrap_or("").to_owned()}</td>
                                    <td>{r["tenant"].as_str().unwrap_or("").to_owned()}</td>
                                    <td class="num">{fmt::int(r["requests"].as_i64().unwrap_or(0))}</td>
                                    <td class="num">{fmt::int(tokens)}</td>
                                    <td class="num">{fmt::usd_micro(r["cost_micro_usd"].as_i64().unwrap_or(0))}</td>
                                </tr>
                            }
                        }).collect_view()}
                        </tbody>
                        <tfoot><tr><th colspan="4">"Total"</th><th class="num total">{fmt::usd_micro(total)}</th></tr></tfoot>
                    </table>
                }.into_any()
            }
        }}
    }
}
