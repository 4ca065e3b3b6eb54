//! Routes: per alias, its strategy and candidates with weight inputs (number and slider), each
//! candidate's resulting share, enable/disable and priority, and the fallback aliases. Saving goes through a preview (the
//! diff, the new shares, the projected daily cost); after saving, the page follows the new version
//! until every data plane applied it, and shows any that refused it.

use leptos::prelude::*;
use serde_json::{json, Value};

use crate::api::{self, ApiError};
use crate::{fmt, form};

/// One candidate as edited: the weight stays text so that what the operator typed (even a
/// negative number) reaches the server, whose field error is then shown next to it. The inputs are
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

fn number_or_text(s: &str) -> Value {
    s.trim().parse::<i64>().map_or_else(|_| Value::from(s), Value::from)
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
    let routes = RwSignal::new(None::<Result<Vec<Value>, ApiError>>);
    let selected = RwSignal::new(String::new());
    // Outlives the editor, which is rebuilt when the routes are reloaded after a save.
    let rollout = RwSignal::new(None::<Rollout>);
    let load = move || {
        leptos::task::spawn_local(async move {
            let r =
                api::get::<Value>("/api/v1/routes").await.map(|v| v["routes"].as_array().cloned().unwrap_or_default());
            if let Ok(list) = &r {
                if selected.get_untracked().is_empty() {
                    if let Some(a) = list.first().and_then(|r| r["alias"].as_str()) {
                        selected.set(a.to_owned());
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
                let aliases: Vec<String> = list.iter().filter_map(|r| r["alias"].as_str().map(str::to_owned)).collect();
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
                            list.iter().find(|r| r["alias"] == alias.as_str()).cloned().map(|r| view! { <Editor route=r rollout=rollout reload=Callback::new(move |()| load())/> })
                        }}
                    </div>
                }.into_any()
            }
        }}
    }
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
fn Editor(route: Value, rollout: RwSignal<Option<Rollout>>, reload: Callback<()>) -> impl IntoView {
    let alias = route["alias"].as_str().unwrap_or_default().to_owned();
    let strategy = route["strategy"].as_str().unwrap_or("weighted").to_owned();
    let cands: Vec<Cand> = route["candidates"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| Cand {
            upstream: c["upstream"].as_str().unwrap_or_default().to_owned(),
            model: c["model"].as_str().unwrap_or_default().to_owned(),
            weight: RwSignal::new(c["weight"].as_i64().unwrap_or(0).to_string()),
            priority: RwSignal::new(c["priority"].as_i64().unwrap_or(0).to_string()),
            enabled: RwSignal::new(c["enabled"].as_bool().unwrap_or(true)),
        })
        .collect();
    let fallbacks = RwSignal::new(
        route["fallbacks"].as_array().into_iter().flatten().filter_map(Value::as_str).collect::<Vec<_>>().join(", "),
    );
    let error = RwSignal::new(None::<ApiError>);
    let preview = RwSignal::new(None::<Value>);
    let busy = RwSignal::new(false);

    // The body for preview and save: the route as loaded, with the edited candidates.
    let body = {
        let (route, cands) = (route.clone(), cands.clone());
        move || {
            let mut b = route.clone();
            if let Some(o) = b.as_object_mut() {
                o.remove("alias");
            }
            b["candidates"] = cands
                .iter()
                .map(|c| {
                    json!({ "upstream": c.upstream, "model": c.model, "weight": number_or_text(&c.weight.get_untracked()),
                            "priority": number_or_text(&c.priority.get_untracked()), "enabled": c.enabled.get_untracked() })
                })
                .collect();
            b["fallbacks"] = json!(form::list(&fallbacks.get_untracked()));
            b
        }
    };
    // Preview and save send the same body; both mark the editor busy and keep the server's errors.
    let send = {
        let (alias, body) = (alias.clone(), body.clone());
        move |method: &'static str, suffix: &'static str| {
            let (path, b) = (format!("/api/v1/routes/{alias}{suffix}"), body());
            busy.set(true);
            error.set(None);
            async move {
                let r = api::send::<Value>(method, &path, Some(&b)).await;
                busy.set(false);
                r.map_err(|e| error.set(Some(e))).ok()
            }
        }
    };
    let do_preview = {
        let send = send.clone();
        move |_| {
            let sent = send("POST", "/preview");
            leptos::task::spawn_local(async move { preview.set(sent.await) });
        }
    };
    let do_save = move |_| {
        let sent = send("PUT", "");
        leptos::task::spawn_local(async move {
            if let Some(r) = sent.await {
                preview.set(None);
                let version = r["version"].as_u64().unwrap_or(0);
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
        if let Ok(v) = api::get::<Value>("/api/v1/nodes").await {
            let nodes = v["nodes"].as_array().cloned().unwrap_or_default();
            let applied = nodes.iter().filter(|n| n["applied_version"].as_u64().is_some_and(|a| a >= version)).count();
            let refused: Vec<(String, String)> = nodes
                .iter()
                .filter(|n| n["applied_version"].as_u64().is_none_or(|a| a < version))
                .filter_map(|n| {
                    let e = n["last_error"].as_str()?;
                    e.starts_with(&format!("version {version}:"))
                        .then(|| (n["id"].as_str().unwrap_or("?").to_owned(), e.to_owned()))
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
fn Preview(p: Value) -> impl IntoView {
    let rows: Vec<(String, f64, f64, i64, i64)> = p["shares_after"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, a)| {
            let b = &p["shares_before"][i];
            (
                format!("{}/{}", a["upstream"].as_str().unwrap_or(""), a["model"].as_str().unwrap_or("")),
                b["share_pct"].as_f64().unwrap_or(0.0),
                a["share_pct"].as_f64().unwrap_or(0.0),
                b["weight"].as_i64().unwrap_or(0),
                a["weight"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    let cost = |k: &str| p[k].as_str().map(|s| format!("${s}/day"));
    let projection = match (cost("projected_daily_cost_usd_before"), cost("projected_daily_cost_usd_after")) {
        (Some(b), Some(a)) => format!("Projected cost at the last 7 days' traffic: {b} → {a}"),
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
