//! Cost (the finance role lands here): cost by day or month as a chart and a table, for a date
//! range and optional tenant, alias and model filters, grouped by tenant, alias, model or key.
//! A group's name drills down one level (tenant → alias → model → key) and the trail above the
//! chart climbs back. Amounts show in cents, and exactly (to the micro-dollar) on hover and in the
//! total, which matches the usage rows; the CSV link is the server's CSV of exactly this query.
//! Requests that failed before they had a tenant (a bad key) are one labeled group that does not
//! drill down. At 390 px the table scrolls sideways with its cost column kept in view.

use ax_protocol::admin::{CostReport, CostRow};
use leptos::prelude::*;

use crate::api::{self, ApiError};
use crate::fmt;

/// The drill-down order: each level groups by the next.
const LEVELS: [&str; 4] = ["tenant", "alias", "model", "key"];

#[derive(Clone, Copy)]
struct Query {
    period: RwSignal<String>,
    from: RwSignal<String>,
    to: RwSignal<String>,
    by: RwSignal<String>,
    /// Filters by tenant, alias, model (in `LEVELS` order).
    filters: [RwSignal<String>; 3],
}

impl Query {
    fn string(&self) -> String {
        let mut q = format!("period={}&by={}", self.period.get(), self.by.get());
        let named = [("from", self.from.get()), ("to", self.to.get())]
            .into_iter()
            .chain(LEVELS.iter().zip(&self.filters).map(|(k, f)| (*k, f.get())));
        for (k, v) in named {
            let v = v.trim().to_owned();
            if !v.is_empty() {
                q.push_str(&format!("&{k}={}", js_sys::encode_uri_component(&v)));
            }
        }
        q
    }

    /// Whether a date or a group filter narrows the report.
    fn filtered(&self) -> bool {
        [self.from, self.to].iter().chain(&self.filters).any(|f| !f.get_untracked().trim().is_empty())
    }

    /// Shows `value`'s rows one level down.
    fn drill(&self, value: &str) {
        let Some(level) = LEVELS.iter().position(|l| *l == self.by.get_untracked()) else { return };
        if let (Some(filter), Some(next)) = (self.filters.get(level), LEVELS.get(level + 1)) {
            filter.set(value.to_owned());
            self.by.set((*next).to_owned());
        }
    }

    /// Back up to `level`: its filter and those below it are cleared.
    fn climb(&self, level: usize) {
        for f in self.filters.iter().skip(level) {
            f.set(String::new());
        }
        self.by.set(LEVELS[level].to_owned());
    }
}

#[component]
pub fn Reports() -> impl IntoView {
    let q = Query {
        period: RwSignal::new("day".to_owned()),
        from: RwSignal::new(String::new()),
        to: RwSignal::new(String::new()),
        by: RwSignal::new("tenant".to_owned()),
        filters: [RwSignal::new(String::new()), RwSignal::new(String::new()), RwSignal::new(String::new())],
    };
    let data = RwSignal::new(None::<Result<CostReport, ApiError>>);
    Effect::new(move |_| {
        let query = q.string();
        leptos::task::spawn_local(async move {
            data.set(Some(api::get::<CostReport>(&format!("/api/v1/reports/cost?{query}")).await));
        });
    });
    let filter_input = move |i: usize, label: &'static str| {
        let f = q.filters[i];
        view! {
            <label>{label}" "
                <input type="text" name=format!("filter-{}", LEVELS[i]) placeholder="all" size="10"
                    prop:value=move || f.get() on:change=move |ev| f.set(event_target_value(&ev))/></label>
        }
    };
    view! {
        <h1>"Cost"</h1>
        <form class="filters" on:submit=|ev| ev.prevent_default() aria-label="report filters">
            <label>"Period "
                <select name="period" on:change=move |ev| q.period.set(event_target_value(&ev)) prop:value=move || q.period.get()>
                    <option value="day">"by day"</option>
                    <option value="month">"by month"</option>
                </select>
            </label>
            <label>"From " <input type="date" name="from" prop:value=move || q.from.get() on:change=move |ev| q.from.set(event_target_value(&ev))/></label>
            <label>"To " <input type="date" name="to" prop:value=move || q.to.get() on:change=move |ev| q.to.set(event_target_value(&ev))/></label>
            {filter_input(0, "Tenant")}
            {filter_input(1, "Alias")}
            {filter_input(2, "Model")}
            <label>"Group by "
                <select name="by" on:change=move |ev| q.by.set(event_target_value(&ev)) prop:value=move || q.by.get()>
                    {LEVELS.map(|l| view! { <option value=l>{l}</option> }).collect_view()}
                </select>
            </label>
            <a class="button" download="ax-cost.csv" href=move || format!("/api/v1/reports/cost?{}&format=csv", q.string())>"Download CSV"</a>
        </form>
        <Trail q=q/>
        {move || match crate::loaded(data.get()) {
            Err(pending) => pending,
            Ok(r) if r.rows.is_empty() => view! { <Empty filtered=q.filtered()/> }.into_any(),
            Ok(r) => view! { <Chart r=r.clone()/> <Table r=r q=q/> }.into_any(),
        }}
    }
}

/// No usage to show: why, and what to do.
#[component]
fn Empty(filtered: bool) -> impl IntoView {
    view! {
        <div class="empty" role="status">
            <p><strong>"No usage in this range yet."</strong></p>
            {if filtered {
                view! { <p>"A filter or the dates narrow this report: widen the dates or clear the filters to see more."</p> }.into_any()
            } else {
                view! {
                    <p>"Costs appear here a few seconds after requests pass through a data plane (each one reports its usage every few seconds)."</p>
                    <p>"To see some: give a tenant a key (Tenants & keys), point an OpenAI or Anthropic client at a data plane with it, and send a request. "
                       "The README's quickstart does all of this with " <code>"bash deploy/local.sh"</code> "."</p>
                }.into_any()
            }}
        </div>
    }
}

/// What a group with no value stands for: requests refused before they had a tenant (a missing or
/// wrong key), or without an alias, model or key.
fn label(by: &str, group: &str) -> String {
    match (by, group) {
        (_, g) if !g.is_empty() => g.to_owned(),
        ("tenant", _) => "(unauthenticated)".to_owned(),
        (by, _) => format!("(no {by})"),
    }
}

/// "All tenants › acme › chat": where the drill-down is, each step a way back up.
#[component]
fn Trail(q: Query) -> impl IntoView {
    move || {
        let set: Vec<(usize, String)> =
            q.filters.iter().enumerate().map(|(i, f)| (i, f.get())).filter(|(_, v)| !v.trim().is_empty()).collect();
        (!set.is_empty()).then(|| {
            view! {
                <nav class="trail" aria-label="drill-down">
                    <button class="link" on:click=move |_| q.climb(0)>"All tenants"</button>
                    {set.into_iter().map(|(i, v)| view! {
                        " › "
                        <button class="link" on:click=move |_| q.climb(i + 1)>{format!("{} {v}", LEVELS[i])}</button>
                    }).collect_view()}
                </nav>
            }
        })
    }
}

#[component]
fn Table(r: CostReport, q: Query) -> impl IntoView {
    let group = r.by.clone();
    let sum = |f: fn(&CostRow) -> i64| r.rows.iter().map(f).sum::<i64>();
    let (requests, errors) = (sum(|x| x.requests), sum(|x| x.errors));
    let tokens = sum(|x| x.prompt_tokens + x.completion_tokens);
    view! {
        <div class="report-scroll">
        <table class="report">
            <thead><tr><th>"Period"</th><th>{group}</th><th class="num">"Requests"</th><th class="num">"Errors"</th><th class="num">"Tokens"</th><th class="num cost">"Cost"</th></tr></thead>
            <tbody>
            {r.rows.into_iter().map(|row| {
                let tokens = row.prompt_tokens + row.completion_tokens;
                let name = row.group.clone();
                let shown = label(&r.by, &row.group);
                // The last level, and a group with no value (nothing to filter by), stop here.
                let drills = r.by != "key" && !row.group.is_empty();
                view! {
                    <tr>
                        <td>{row.period}</td>
                        <td>{if drills {
                            view! { <button class="link drill" title="show this one level down" on:click=move |_| q.drill(&name)>{shown}</button> }.into_any()
                        } else {
                            view! { <span class="group">{shown}</span> }.into_any()
                        }}</td>
                        <td class="num">{fmt::int(row.requests)}</td>
                        <td class="num">{fmt::int(row.errors)}</td>
                        <td class="num">{fmt::int(tokens)}</td>
                        <td class="num cost" title=fmt::usd_exact(row.cost_micro_usd)>{fmt::usd_micro(row.cost_micro_usd)}</td>
                    </tr>
                }
            }).collect_view()}
            </tbody>
            <tfoot><tr>
                <th colspan="2">"Total"</th>
                <th class="num">{fmt::int(requests)}</th>
                <th class="num">{fmt::int(errors)}</th>
                <th class="num">{fmt::int(tokens)}</th>
                <th class="num cost total" title=fmt::usd_micro(r.total_micro_usd)>{fmt::usd_exact(r.total_micro_usd)}</th>
            </tr></tfoot>
        </table>
        </div>
    }
}

/// Colours of the chart's series (CSS classes `s0`…`s5`); the sixth is "other".
const SERIES: usize = 6;

/// Cost per period as stacked bars, one colour per group (the five costliest, then "other"). An
/// SVG drawn here: a chart library would weigh more than this whole page.
#[component]
fn Chart(r: CostReport) -> impl IntoView {
    let (periods, groups, cells) = stack(&r.rows);
    let groups: Vec<String> = groups.iter().map(|g| label(&r.by, g)).collect();
    let max = periods.iter().map(|p| cells.iter().filter(|c| c.0 == *p).map(|c| c.2).sum::<i64>()).max().unwrap_or(0);
    // Drawn at the window's width, one SVG unit per CSS pixel: text keeps its size on a phone.
    let width = window().inner_width().ok().and_then(|v| v.as_f64()).unwrap_or(1280.0);
    let (w, h, left, bottom) = ((width - 40.0).clamp(320.0, 1160.0), 220.0_f64, 64.0_f64, 24.0_f64);
    let slot = (w - left) / periods.len().max(1) as f64;
    let bar = (slot * 0.7).min(48.0);
    let y = |micro: i64| if max > 0 { (h - bottom) * micro as f64 / max as f64 } else { 0.0 };
    let mut bars = Vec::new();
    for (i, p) in periods.iter().enumerate() {
        let mut top = h - bottom;
        for (g, name) in groups.iter().enumerate() {
            let v: i64 = cells.iter().filter(|c| c.0 == *p && c.1 == g).map(|c| c.2).sum();
            if v == 0 {
                continue;
            }
            let height = y(v).max(1.0);
            top -= height;
            let x = left + i as f64 * slot + (slot - bar) / 2.0;
            let tip = format!("{p} · {name}: {}", fmt::usd_exact(v));
            bars.push(view! {
                <rect class=format!("s{g}") x=format!("{x:.1}") y=format!("{top:.1}") width=format!("{bar:.1}") height=format!("{height:.1}")><title>{tip}</title></rect>
            });
        }
    }
    // Period labels: one per 56 px at most, so they never overlap.
    let every = periods.len().div_ceil(((w - left) / 56.0).max(1.0) as usize).max(1);
    let labels = periods
        .iter()
        .enumerate()
        .filter(|(i, _)| i % every == 0)
        .map(|(i, p)| {
            let x = left + i as f64 * slot + slot / 2.0;
            let text = if r.period == "month" { p.get(..7).unwrap_or(p).to_owned() } else { p.get(5..).unwrap_or(p).to_owned() };
            view! { <text class="axis" x=format!("{x:.1}") y=format!("{:.1}", h - 6.0) text-anchor="middle">{text}</text> }
        })
        .collect_view();
    let summary = format!("Cost by {} and {}: total {}", r.period, r.by, fmt::usd_micro(r.total_micro_usd));
    view! {
        <figure class="chart">
            <svg class="plot" viewBox=format!("0 0 {w} {h}") role="img" aria-label=summary>
                <line class="grid" x1=left y1="4" x2=w y2="4"/>
                <line class="grid" x1=left y1=h - bottom x2=w y2=h - bottom/>
                <text class="axis" x=left - 6.0 y="14" text-anchor="end">{fmt::usd_micro(max)}</text>
                <text class="axis" x=left - 6.0 y=h - bottom text-anchor="end">"$0"</text>
                {bars}
                {labels}
            </svg>
            <figcaption class="legend">
                {groups.into_iter().enumerate().map(|(g, name)| view! {
                    <span class="series"><svg class="swatch" viewBox="0 0 10 10" aria-hidden="true"><rect class=format!("s{g}") width="10" height="10"/></svg>{name}</span>
                }).collect_view()}
            </figcaption>
        </figure>
    }
}

/// One bar segment: period, series, micro-USD.
type Cell = (String, usize, i64);

/// The periods in order, the series (the costliest groups, then "other"), and each cell.
fn stack(rows: &[CostRow]) -> (Vec<String>, Vec<String>, Vec<Cell>) {
    let mut periods: Vec<String> = rows.iter().map(|r| r.period.clone()).collect();
    periods.dedup();
    let mut totals: Vec<(String, i64)> = Vec::new();
    for r in rows {
        match totals.iter_mut().find(|t| t.0 == r.group) {
            Some(t) => t.1 += r.cost_micro_usd,
            None => totals.push((r.group.clone(), r.cost_micro_usd)),
        }
    }
    totals.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let mut groups: Vec<String> = totals.iter().take(SERIES - 1).map(|t| t.0.clone()).collect();
    if totals.len() > SERIES - 1 {
        groups.push("other".to_owned());
    }
    let cells = rows
        .iter()
        .map(|r| {
            let g = groups.iter().position(|g| *g == r.group).unwrap_or(SERIES - 1);
            (r.period.clone(), g, r.cost_micro_usd)
        })
        .collect();
    (periods, groups, cells)
}
