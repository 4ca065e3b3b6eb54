//! Audit log: who changed what, before and after, when; filtered by operator and target.

use ax_protocol::admin::{AuditEntry, AuditList};
use leptos::prelude::*;
use serde_json::Value;

use crate::api::{self, ApiError};

#[component]
pub fn Audit() -> impl IntoView {
    let operator = RwSignal::new(String::new());
    let target = RwSignal::new(String::new());
    let data = RwSignal::new(None::<Result<Vec<AuditEntry>, ApiError>>);
    Effect::new(move |_| {
        let mut q = "limit=200".to_owned();
        for (k, v) in [("operator", operator.get()), ("target", target.get())] {
            if !v.trim().is_empty() {
                q.push_str(&format!("&{k}={}", js_sys::encode_uri_component(v.trim())));
            }
        }
        leptos::task::spawn_local(async move {
            let r = api::get::<AuditList>(&format!("/api/v1/audit?{q}")).await;
            data.set(Some(r.map(|l| l.entries)));
        });
    });
    let pretty = |v: &Option<Value>| {
        v.as_ref()
            .filter(|v| !v.is_null())
            .map_or_else(|| "—".to_owned(), |v| serde_json::to_string_pretty(v).unwrap_or_default())
    };
    view! {
        <h1>"Audit log"</h1>
        <form class="filters" on:submit=|ev| ev.prevent_default()>
            <label>"Operator " <input name="operator" prop:value=move || operator.get() on:change=move |ev| operator.set(event_target_value(&ev))/></label>
            <label>"Target " <input name="target" placeholder="alias, tenant, key…" prop:value=move || target.get() on:change=move |ev| target.set(event_target_value(&ev))/></label>
        </form>
        {move || match crate::loaded(data.get()) {
            Err(pending) => pending,
            Ok(list) if list.is_empty() => view! { <p>"Nothing recorded for these filters."</p> }.into_any(),
            Ok(list) => view! {
                <table class="audit">
                    <thead><tr><th>"When (UTC)"</th><th>"Who"</th><th>"What"</th><th>"Target"</th><th>"Before → after"</th></tr></thead>
                    <tbody>
                    {list.into_iter().map(|e| view! {
                        <tr>
                            <td>{e.at.replace('T', " ")}</td>
                            <td>{e.operator.clone()}</td>
                            <td>{e.action.clone()}</td>
                            <td>{e.target.clone()}</td>
                            <td>
                                <details>
                                    <summary>"show"</summary>
                                    <div class="diff">
                                        <pre>{pretty(&e.before)}</pre>
                                        <pre>{pretty(&e.after)}</pre>
                                    </div>
                                </details>
                            </td>
                        </tr>
                    }).collect_view()}
                    </tbody>
                </table>
            }.into_any(),
        }}
    }
}
