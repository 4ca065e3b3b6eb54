//! Routes: per alias, its strategy and candidates with weight inputs (number and slider), each
//! candidate's resulting share, enable/disable and priority, and the fallback aliases. Saving goes through a preview (the
//! diff, the new shares, the projected daily cost); after saving, the page follows the new version
//! until every data plane applied it, and shows any that refused it.

use ax_protocol::admin::{CandidateIn, NodeList, RouteIn, RouteList, RoutePreview, RouteSaved, RouteView};
use leptos::prelude::*;

use crate::api::{self, ApiError};
use crate::{fmt, form};

/// One candidate as edited: the weight stays text so that what the operator typed (even a
/// negative number) reaches the server, whose field error is then shown next to it (text that is
/// not a whole number is answered here, with the same kind of field error). The inputs are
/// `type="text" inputmode="numeric"`: a number input reports "" while "-" is being typed, and
/// writing that back would swallow the sign.
#[derive(Clone, PartialEq)]
struct Cand {
    upstream: String,
    model: String,
    weight: RwSignal<String>,
    priority: RwSignal<String>,
    enabled: RwSignal<bool>,
}

/// The route as the API takes it, from the route as loaded and the edited inputs; the field
/// errors of inputs that are not whole numbers otherwise.
fn route_in(route: &RouteView, cands: &[Cand], fallbacks: &str) -> Result<RouteIn, ApiError> {
    let mut fields = Vec::new();
    let mut whole = |path: String, text: String| -> i64 {
        text.trim().parse::<i64>().unwrap_or_else(|_| {
            fields.push((path, "a whole number".to_owned()));
            0
        })
    };
    let candidates = cands
        .iter()
        .enumerate()
        .map(|(i, c)| CandidateIn {
            upstream: c.upstream.clone(),
            model: c.model.clone(),
            weight: whole(format!("candidates[{i}].weight"), c.weight.get_untracked()),
            priority: whole(format!("candidates[{i}].priority"), c.priority.get_untracked()),
            enabled: c.enabled.get_untracked(),
        })
        .collect();
    if !fields.is_empty() {
        let message = "Some values are not whole numbers.".to_owned();
        return Err(ApiError { status: 0, code: "invalid_request".into(), message, fields });
    }
    Ok(RouteIn {
        alias: None,
        strategy: route.strategy,
        candidates,
        fallbacks: form::list(fallbacks),
        timeouts: route.timeouts.clone(),
        failover: route.failover.clone(),
        max_prompt_tokens: route.max_prompt_tokens,
        long_context_alias: route.long_context_alias.clone(),
        limits: route.limits,
    })
}

/// Each candidate's share of the alias's traffic, in %, as the data plane would split it.
fn shares(strategy: &str, cands: &[Cand]) -> Vec<f64> {
    let w: Vec<f64> = cands
        .iter()
        .map(|c| if c.enabled.get() { c.weight.get().trim().parse::<f64>().unwrap_or(0.0).max(0.0) } else { 0.0 })
        .collect();
    if strategy == "priority" {
        let prio = |c: &Cand| c.priority.get().trim().parse::<i64>().unwrap_or(0);
        let first = cands.iter().zip(&w).filter(|(_, w)| **w > 0.0).map(|(c, _)| prio(c)).min();
        let mut taken = false;
        return cands
            .iter()
            .zip(&w)
            .map(|(c, w)| {
                if !taken && *w > 0.0 && Some(prio(c)) == first {
                    taken = true;
                    100.0
                } else {
                    0.0
                }
            })
            .collect();
    }
    let total: f64 = w.iter().sum();
    w.iter().map(|x| if total > 0.0 { (x * 1000.0 / total).round() / 10.0 } else { 0.0 }).collect()
}

#[component]
pub fn RoutesPage() -> impl IntoView {
    let routes = RwSignal::new(None::<Result<Vec<RouteView>, ApiError>>);
    let selected = RwSignal::new(String::new());
    // Outlives the editor, which is rebuilt when the routes are reloaded after a save.
    let rollout = RwSignal::new(None::<Rollout>);
    let load = move || {
        leptos::task::spawn_local(async move {
            let r = api::get::<RouteList>("/api/v1/routes").await.map(|l| l.routes);
            if let Ok(list) = &r {
                if selected.get_untracked().is_empty() {
                    if let Some(first) = list.first() {
                        selected.set(first.alias.clone());
                    }
                }
            }
            routes.set(Some(r));
        });
    };
    load();
    view! {
        <h1>"Routes"</h1>
        {move || match routes.get() {
            None => view! { <p class="loading">"Loading routes…"</p> }.into_any(),
            Some(Err(e)) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
            Some(Ok(list)) if list.is_empty() => view! { <p>"No routes yet."</p> }.into_any(),
            Some(Ok(list)) => {
                let aliases: Vec<String> = list.iter().map(|r| r.alias.clone()).collect();
                view! {
                    <div class="split">
                        <ul class="aliases" aria-label="aliases">
                            {aliases.into_iter().map(|a| {
                                let a2 = a.clone();
                                let a3 = a.clone();
                                view! {
                                    <li>
                                        <button class="alias" class:current=move || selected.get() == a2
                                            on:click=move |_| { rollout.set(None); selected.set(a3.clone()); }>{a}</button>
                                    </li>
                                }
                            }).collect_view()}
                        </ul>
                        {move || {
                            let alias = selected.get();
                            list.iter().find(|r| r.alias == alias).cloned().map(|r| view! { <Editor route=r rollout=rollout reload=Callback::new(move |()| load())/> })
                        }}
                    </div>
                }.into_any()
            }
        }}
    }
}

/// The end of a preview or save: the editor is no longer busy; an error is kept to be shown.
fn ended<T>(busy: RwSignal<bool>, error: RwSignal<Option<ApiError>>, r: Result<T, ApiError>) -> Option<T> {
    busy.set(false);
    r.map_err(|e| error.set(Some(e))).ok()
}

/// What happened after a save: the version and how many data planes applied it.
#[derive(Clone, Default, PartialEq)]
struct Rollout {
    version: u64,
    applied: usize,
    nodes: usize,
    refused: Vec<(String, String)>,
}

#[component]
fn Editor(route: RouteView, rollout: RwSignal<Option<Rollout>>, reload: Callback<()>) -> impl IntoView {
    let alias = route.alias.clone();
    let strategy =
        serde_json::to_value(route.strategy).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    let cands: Vec<Cand> = route
        .candidates
        .iter()
        .map(|c| Cand {
            upstream: c.upstream.clone(),
            model: c.model.clone(),
            weight: RwSignal::new(c.weight.to_string()),
            priority: RwSignal::new(c.priority.to_string()),
            enabled: RwSignal::new(c.enabled),
        })
        .collect();
    let fallbacks = RwSignal::new(route.fallbacks.join(", "));
    let error = RwSignal::new(None::<ApiError>);
    let preview = RwSignal::new(None::<RoutePreview>);
    let busy = RwSignal::new(false);

    // The body for preview and save: the route as loaded, with the edited candidates.
    let body = {
        let cands = cands.clone();
        move || route_in(&route, &cands, &fallbacks.get_untracked())
    };
    // Preview and save send the same body; both mark the editor busy and keep the errors (the
    // server's, or the inputs' that are not numbers).
    let start = {
        let (alias, body) = (alias.clone(), body.clone());
        move |suffix: &'static str| -> Option<(String, RouteIn)> {
            error.set(None);
            let b = body().map_err(|e| error.set(Some(e))).ok()?;
            busy.set(true);
            Some((format!("/api/v1/routes/{alias}{suffix}"), b))
        }
    };
    let do_preview = {
        let start = start.clone();
        move |_| {
            let Some((path, b)) = start("/preview") else { return };
            leptos::task::spawn_local(async move {
                preview.set(ended(busy, error, api::send::<RoutePreview, _>("POST", &path, &b).await));
            });
        }
    };
    let do_save = move |_| {
        let Some((path, b)) = start("") else { return };
        leptos::task::spawn_local(async move {
            if let Some(r) = ended(busy, error, api::send::<RouteSaved, _>("PUT", &path, &b).await) {
                preview.set(None);
                let version = u64::try_from(r.version).unwrap_or(0);
                rollout.set(Some(Rollout { version, ..Default::default() }));
                follow(version, rollout).await;
                reload.run(());
            }
        });
    };
    let edit = move || {
        preview.set(None);
        rollout.set(None);
    };
    let cands_view = cands.clone();
    let strategy_view = strategy.clone();
    view! {
        <section class="editor" aria-label=format!("route {alias}")>
            <h2>{alias.clone()} <small>{format!(" · {strategy}")}</small></h2>
            <table class="candidates">
                <thead><tr><th>"Upstream / model"</th><th>"Weight"</th><th>"Share"</th><th>"Priority"</th><th>"Enabled"</th></tr></thead>
                <tbody>
                {cands_view.iter().enumerate().map(|(i, c)| {
                    let c = c.clone();
                    let all = cands.clone();
                    let strategy = strategy_view.clone();
                    let label = format!("{}/{}", c.upstream, c.model);
                    view! {
                        <tr>
                            <td>{label.clone()}</td>
                            <td>
                                <input type="text" inputmode="numeric" class="weight" aria-label=format!("weight of {label}")
                                    prop:value=move || c.weight.get()
                                    on:input=move |ev| { c.weight.set(event_target_value(&ev)); edit(); }/>
                                <input type="range" min="0" max="100" aria-label=format!("weight slider of {label}")
                                    prop:value=move || c.weight.get()
                                    on:input=move |ev| { c.weight.set(event_target_value(&ev)); edit(); }/>
                                {form::error_at(error, format!("candidates[{i}].weight"))}
                            </td>
                            <td class="share">{move || fmt::pct(shares(&strategy, &all)[i])}</td>
                            <td><input type="text" inputmode="numeric" class="priority" aria-label=format!("priority of {label}")
                                prop:value=move || c.priority.get()
                                on:input=move |ev| { c.priority.set(event_target_value(&ev)); edit(); }/>
                                {form::error_at(error, format!("candidates[{i}].priority"))}</td>
                            <td><input type="checkbox" aria-label=format!("{label} enabled")
                                prop:checked=move || c.enabled.get()
                                on:change=move |ev| { c.enabled.set(event_target_checked(&ev)); edit(); }/></td>
                        </tr>
                    }
                }).collect_view()}
                </tbody>
            </table>
            <label class="field wide"><span>"Fallback aliases, tried in order when every candidate failed (comma-separated)"</span>
                <input type="text" name="fallbacks" placeholder="none" prop:value=move || fallbacks.get()
                    on:input=move |ev| { fallbacks.set(event_target_value(&ev)); edit(); }/>
                {form::error_at(error, "fallbacks*".into())}
            </label>
            <Show when=move || error.get().is_some()>
                <div class="error" role="alert">
                    {move || error.get().map(|e| form::unplaced(&e, |p| {
                        p.starts_with("fallbacks") || (p.starts_with("candidates[") && (p.ends_with(".weight") || p.ends_with(".priority")))
                    }))}
                </div>
            </Show>
            <div class="actions">
                <button on:click=do_preview disabled=move || busy.get()>"Preview"</button>
            </div>
            {move || preview.get().map(|p| view! { <Preview p=p/> })}
            <Show when=move || preview.get().is_some()>
                <div class="actions confirm">
                    <span>"Save this change and push it to every data plane?"</span>
                    <button class="primary" on:click=do_save.clone() disabled=move || busy.get()>"Save"</button>
                    <button on:click=move |_| preview.set(None)>"Cancel"</button>
                </div>
            </Show>
            {move || rollout.get().map(|r| view! {
                <div class="rollout" role="status">
                    <strong>{format!("version {} pushed · applied by {} of {} data planes", r.version, r.applied, r.nodes)}</strong>
                    <ul>{r.refused.into_iter().map(|(n, e)| view! { <li class="error">{format!("{n} refused it: {e}")}</li> }).collect_view()}</ul>
                </div>
            })}
        </section>
    }
}

/// Polls the node list until every node applied `version` (or refused it), for up to 30 s.
async fn follow(version: u64, rollout: RwSignal<Option<Rollout>>) {
    for _ in 0..120 {
        if let Ok(list) = api::get::<NodeList>("/api/v1/nodes").await {
            let nodes = list.nodes;
            let has = |n: &ax_protocol::admin::NodeView| {
                n.applied_version.is_some_and(|a| u64::try_from(a).unwrap_or(0) >= version)
            };
            let applied = nodes.iter().filter(|n| has(n)).count();
            let refused: Vec<(String, String)> = nodes
                .iter()
                .filter(|n| !has(n))
                .filter_map(|n| {
                    let e = n.last_error.as_deref()?;
                    e.starts_with(&format!("version {version}:")).then(|| (n.id.clone(), e.to_owned()))
                })
                .collect();
            let done = applied + refused.len() >= nodes.len();
            rollout.set(Some(Rollout { version, applied, nodes: nodes.len(), refused }));
            if done {
                return;
            }
        }
        gloo_timers::future::TimeoutFuture::new(250).await;
    }
}

#[component]
fn Preview(p: RoutePreview) -> impl IntoView {
    let rows: Vec<(String, f64, f64, u32, u32)> = p
        .shares_after
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let b = p.shares_before.get(i);
            (
                format!("{}/{}", a.upstream, a.model),
                b.map_or(0.0, |b| b.share_pct),
                a.share_pct,
                b.map_or(0, |b| b.weight),
                a.weight,
            )
        })
        .collect();
    let cost = |v: &Option<String>| v.as_ref().map(|s| format!("${s}/day"));
    let projection = match (cost(&p.projected_daily_cost_usd_before), cost(&p.projected_daily_cost_usd_after)) {
        (Some(b), Some(a)) => format!(
            "Projected cost at the traffic of {} ({:.0} requests/day): {b} → {a}",
            p.usage_window, p.usage.requests_per_day
        ),
        _ => "Projected cost: no usage in the last 7 days to project from.".to_owned(),
    };
    view! {
        <div class="preview" aria-label="preview">
            <h3>"Preview"</h3>
            <table>
                <thead><tr><th>"Upstream / model"</th><th>"Weight"</th><th>"Share now"</th><th>"Share after"</th></tr></thead>
                <tbody>
                {rows.into_iter().map(|(name, sb, sa, wb, wa)| view! {
                    <tr class:changed=move || wb != wa>
                        <td>{name}</td>
                        <td>{if wb == wa { wa.to_string() } else { format!("{wb} → {wa}") }}</td>
                        <td>{fmt::pct(sb)}</td>
                        <td class="after">{fmt::pct(sa)}</td>
                    </tr>
                }).collect_view()}
                </tbody>
            </table>
            <p class="projection">{projection}</p>
        </div>
    }
}
