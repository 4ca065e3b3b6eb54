//! The request explorer: requests newest first, narrowed by id, tenant, key, alias, upstream,
//! status, error code and time; one request opens to its attempts (upstream, model, outcome,
//! latency, time to first token, bytes sent and received), tokens and cost. The filters live in the URL (`/requests?error=any`), so the
//! overview's error figures link here and a search can be shared.

use ax_protocol::admin::{RequestDetail, RequestList, RequestRow};
use leptos::prelude::*;
use leptos_router::hooks::{use_navigate, use_query_map};

use crate::api::{self, ApiError};
use crate::fmt;

/// The filters, as query parameters and their labels.
const FILTERS: [(&str, &str, &str); 9] = [
    ("request_id", "Request id", ""),
    ("tenant", "Tenant", ""),
    ("key", "Key id", ""),
    ("alias", "Alias", ""),
    ("upstream", "Upstream", ""),
    ("status", "Status", "e.g. 502"),
    ("error", "Error code", "any, or a code"),
    ("from", "From (UTC)", "2026-12-03T09:00"),
    ("to", "To (UTC)", ""),
];

/// The query string of the filters that have a value.
fn query_of(values: &[(String, String)]) -> String {
    values
        .iter()
        .filter(|(_, v)| !v.trim().is_empty())
        .map(|(k, v)| format!("{k}={}", js_sys::encode_uri_component(v.trim())))
        .collect::<Vec<_>>()
        .join("&")
}

#[component]
pub fn Requests() -> impl IntoView {
    let query = use_query_map();
    let navigate = use_navigate();
    // The filters as typed; a search puts them in the URL, which drives the list.
    let typed: Vec<RwSignal<String>> =
        FILTERS.iter().map(|(k, _, _)| RwSignal::new(query.get_untracked().get(k).unwrap_or_default())).collect();
    let pages = RwSignal::new(Vec::<RequestRow>::new());
    let next = RwSignal::new(None::<String>);
    let status = RwSignal::new(None::<Result<(), ApiError>>);
    let open = RwSignal::new(None::<String>);
    let search = move |before: Option<String>| {
        let q = query.get();
        let mut params: Vec<(String, String)> =
            FILTERS.iter().map(|(k, _, _)| ((*k).to_owned(), q.get(k).unwrap_or_default())).collect();
        params.push(("limit".to_owned(), "50".to_owned()));
        let more = before.is_some();
        if let Some(b) = before {
            params.push(("before".to_owned(), b));
        }
        let url = format!("/api/v1/requests?{}", query_of(&params));
        leptos::task::spawn_local(async move {
            match api::get::<RequestList>(&url).await {
                Ok(list) => {
                    if more {
                        pages.update(|p| p.extend(list.requests));
                    } else {
                        pages.set(list.requests);
                    }
                    next.set(list.next);
                    status.set(Some(Ok(())));
                }
                Err(e) => status.set(Some(Err(e))),
            }
        });
    };
    Effect::new(move |_| {
        query.track();
        // A search that names one request opens it.
        open.set(query.get_untracked().get("request_id").filter(|s| !s.trim().is_empty()));
        search(None);
    });
    let submit = {
        let typed = typed.clone();
        move |ev: leptos::ev::SubmitEvent| {
            ev.prevent_default();
            let values: Vec<(String, String)> =
                FILTERS.iter().zip(&typed).map(|((k, _, _), s)| ((*k).to_owned(), s.get_untracked())).collect();
            navigate(&format!("/requests?{}", query_of(&values)), Default::default());
        }
    };
    view! {
        <h1>"Requests"</h1>
        <form class="filters explorer" on:submit=submit>
            {FILTERS.iter().zip(typed.clone()).map(|((k, label, hint), s)| view! {
                <label>{*label} " "
                    <input name=*k placeholder=*hint prop:value=move || s.get() on:input=move |ev| s.set(event_target_value(&ev))/>
                </label>
            }).collect_view()}
            <button type="submit" class="primary">"Search"</button>
        </form>
        {move || open.get().map(|id| view! { <RequestView id=id close=move || open.set(None)/> })}
        {move || match status.get() {
            None => view! { <p class="loading">"Loading…"</p> }.into_any(),
            Some(Err(e)) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
            Some(Ok(())) if pages.with(Vec::is_empty) => view! { <p>"No request matches these filters."</p> }.into_any(),
            Some(Ok(())) => view! {
                <table class="requests">
                    <thead><tr>
                        <th>"When (UTC)"</th><th>"Request"</th><th>"Tenant"</th><th>"Key"</th><th>"Alias"</th>
                        <th>"Upstream / model"</th><th class="num">"Status"</th><th>"Error"</th><th class="num">"Attempts"</th>
                        <th class="num">"Latency"</th><th class="num">"TTFT"</th><th class="num">"Tokens in / out"</th><th class="num">"Cost"</th>
                    </tr></thead>
                    <tbody>
                    {move || pages.get().into_iter().map(|r| {
                        let id = r.request_id.clone();
                        let failed = r.error_code.is_some();
                        view! {
                        <tr class:bad=failed>
                            <td>{r.started_at.replace('T', " ").trim_end_matches('Z').to_owned()}</td>
                            <td><button class="link request-id" on:click=move |_| open.set(Some(id.clone()))>{r.request_id.clone()}</button></td>
                            <td>{r.tenant}</td>
                            <td>{r.key_id}</td>
                            <td>{r.alias}</td>
                            <td>{format!("{} / {}", r.upstream, r.model)}</td>
                            <td class="num">{r.status}</td>
                            <td>{r.error_code.unwrap_or_default()}</td>
                            <td class="num">{r.attempts}</td>
                            <td class="num">{fmt::ms(Some(r.latency_ms as f64))}</td>
                            <td class="num">{fmt::ms(r.ttft_ms.map(|t| t as f64))}</td>
                            <td class="num">{format!("{} / {}", fmt::int(r.prompt_tokens), fmt::int(r.completion_tokens))}</td>
                            <td class="num">{fmt::usd_micro(r.cost_micro_usd)}</td>
                        </tr>
                    }}).collect_view()}
                    </tbody>
                </table>
                <Show when=move || next.get().is_some()>
                    <button class="more" on:click=move |_| search(next.get_untracked())>"Older requests"</button>
                </Show>
            }.into_any(),
        }}
    }
}

/// One request: its record's figures and every attempt in order.
#[component]
fn RequestView(id: String, close: impl Fn() + 'static + Copy + Send + Sync) -> impl IntoView {
    let data = RwSignal::new(None::<Result<RequestDetail, ApiError>>);
    let url = format!("/api/v1/requests/{}", js_sys::encode_uri_component(&id));
    leptos::task::spawn_local(async move { data.set(Some(api::get::<RequestDetail>(&url).await)) });
    view! {
        <section class="request" aria-label="request">
            <h2>{format!("Request {id}")} <button class="link" on:click=move |_| close()>"close"</button></h2>
            {move || match crate::loaded(data.get()) {
                Err(pending) => pending,
                Ok(d) => {
                    let r = d.record;
                    let outcome = r.error_code.clone().map_or_else(|| format!("{} ok", r.status), |c| format!("{} {c}", r.status));
                    view! {
                        <dl class="facts">
                            <dt>"When (UTC)"</dt><dd>{d.started_at.replace('T', " ")}</dd>
                            <dt>"Data plane"</dt><dd>{d.node}</dd>
                            <dt>"Trace"</dt><dd class="trace-id">{r.trace_id.clone().unwrap_or_else(|| "not traced".to_owned())}</dd>
                            <dt>"Tenant / key"</dt><dd>{format!("{} / {}", r.tenant, r.key_id)}</dd>
                            <dt>"Alias"</dt><dd>{r.fallback.as_ref().map_or_else(|| r.alias.clone(), |f| format!("{} → fallback {f}", r.alias))}</dd>
                            <dt>"Outcome"</dt><dd class="outcome">{outcome}</dd>
                            <dt>"Served by"</dt><dd>{format!("{} / {}", r.upstream, r.model)}</dd>
                            <dt>"Latency / TTFT"</dt><dd>{format!("{} / {}", fmt::ms(Some(r.latency_ms as f64)), fmt::ms(r.ttft_ms.map(|t| t as f64)))}</dd>
                            <dt>"Tokens"</dt><dd>{format!(
                                "{} in ({} cached, {} cache write), {} out{}",
                                r.prompt_tokens, r.cached_prompt_tokens, r.cache_write_tokens, r.completion_tokens,
                                if r.estimated { ", estimated" } else { "" }
                            )}</dd>
                            <dt>"Cost"</dt><dd>{r.cost_micro_usd.map_or_else(|| "no price".to_owned(), |c| fmt::usd_exact(c as i64))}</dd>
                            <dt>"Stream"</dt><dd>{if r.stream { if r.incomplete { "yes, cut short" } else { "yes" } } else { "no" }}</dd>
                        </dl>
                        <table class="attempts">
                            <thead><tr><th>"Attempt"</th><th>"Upstream"</th><th>"Model"</th><th>"Outcome"</th><th class="num">"Latency"</th><th class="num">"TTFT"</th><th class="num">"Sent"</th><th class="num">"Received"</th><th>"Possibly billed"</th></tr></thead>
                            <tbody>
                            {r.attempt_list.into_iter().map(|a| { let failed = a.error_code.is_some(); view! {
                                <tr class:bad=failed class:answered=!failed>
                                    <td>{a.attempt_id}</td>
                                    <td>{a.upstream}</td>
                                    <td>{a.model}</td>
                                    <td>{a.error_code.clone().unwrap_or_else(|| "answered".to_owned())}</td>
                                    <td class="num">{fmt::ms(Some(a.latency_ms as f64))}</td>
                                    <td class="num">{fmt::ms(a.ttft_ms.map(|t| t as f64))}</td>
                                    <td class="num sent">{fmt::bytes(a.sent_bytes)}</td>
                                    <td class="num received">{fmt::bytes(a.received_bytes)}</td>
                                    <td>{if a.possibly_billed { "yes" } else { "no" }}</td>
                                </tr>
                            }}).collect_view()}
                            </tbody>
                        </table>
                    }.into_any()
                }
            }}
        </section>
    }
}
