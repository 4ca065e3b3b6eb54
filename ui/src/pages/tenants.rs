//! Tenants and keys: create a tenant (admin), create a key (admin; shown once with a copy button,
//! never again: the control plane keeps only its SHA-256), revoke a key (after a confirmation).

use leptos::prelude::*;
use serde_json::{json, Value};

use crate::api::{self, ApiError};
use crate::Auth;

#[component]
pub fn Tenants() -> impl IntoView {
    let auth = expect_context::<Auth>();
    let admin = move || auth.0.get().is_some_and(|s| s.at_least("admin"));
    let tenants = RwSignal::new(None::<Result<Vec<Value>, ApiError>>);
    let selected = RwSignal::new(String::new());
    let load = move || {
        leptos::task::spawn_local(async move {
            let r = api::get::<Value>("/api/v1/tenants").await;
            tenants.set(Some(r.map(|v| v["tenants"].as_array().cloned().unwrap_or_default())));
        });
    };
    load();
    let new_id = RwSignal::new(String::new());
    let new_aliases = RwSignal::new("*".to_owned());
    let create_error = RwSignal::new(None::<ApiError>);
    let create = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let id = new_id.get_untracked().trim().to_owned();
        let aliases: Vec<String> =
            new_aliases.get_untracked().split(',').map(|a| a.trim().to_owned()).filter(|a| !a.is_empty()).collect();
        leptos::task::spawn_local(async move {
            let body = json!({ "allowed_aliases": aliases });
            match api::send::<Value>("PUT", &format!("/api/v1/tenants/{id}"), Some(&body)).await {
                Ok(_) => {
                    create_error.set(None);
                    new_id.set(String::new());
                    selected.set(id);
                    load();
                }
                Err(e) => create_error.set(Some(e)),
            }
        });
    };
    view! {
        <h1>"Tenants & keys"</h1>
        <Show when=admin>
            <form class="inline-form" on:submit=create aria-label="new tenant">
                <label>"New tenant "
                    <input name="tenant-id" placeholder="id, e.g. acme" prop:value=move || new_id.get()
                        on:input=move |ev| new_id.set(event_target_value(&ev))/></label>
                <label>"Allowed aliases "
                    <input name="tenant-aliases" placeholder="* or chat, embed" prop:value=move || new_aliases.get()
                        on:input=move |ev| new_aliases.set(event_target_value(&ev))/></label>
                <button type="submit">"Create tenant"</button>
                {move || create_error.get().map(|e| {
                    let msg = e.fields.first().map_or(e.message.clone(), |(p, m)| format!("{p}: {m}"));
                    view! { <p class="field-error" role="alert">{msg}</p> }
                })}
            </form>
        </Show>
        {move || match tenants.get() {
            None => view! { <p class="loading">"Loading…"</p> }.into_any(),
            Some(Err(e)) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
            Some(Ok(list)) => view! {
                <table class="tenants">
                    <thead><tr><th>"Tenant"</th><th>"Allowed aliases"</th><th class="num">"Active keys"</th><th></th></tr></thead>
                    <tbody>
                    {list.into_iter().map(|t| {
                        let id = t["id"].as_str().unwrap_or("").to_owned();
                        let aliases: Vec<String> = t["allowed_aliases"].as_array().into_iter().flatten().filter_map(|a| a.as_str().map(str::to_owned)).collect();
                        let pick = id.clone();
                        view! {
                            <tr>
                                <td>{id.clone()}</td>
                                <td>{if aliases.is_empty() { "none".to_owned() } else { aliases.join(", ") }}</td>
                                <td class="num">{t["active_keys"].as_i64().unwrap_or(0)}</td>
                                <td><button on:click=move |_| selected.set(pick.clone())>"Keys"</button></td>
                            </tr>
                        }
                    }).collect_view()}
                    </tbody>
                </table>
            }.into_any(),
        }}
        {move || {
            let t = selected.get();
            (!t.is_empty()).then(|| view! { <Keys tenant=t reload=Callback::new(move |()| load())/> })
        }}
    }
}

#[component]
fn Keys(tenant: String, reload: Callback<()>) -> impl IntoView {
    let auth = expect_context::<Auth>();
    let admin = move || auth.0.get().is_some_and(|s| s.at_least("admin"));
    let keys = RwSignal::new(None::<Result<Vec<Value>, ApiError>>);
    let shown = RwSignal::new(None::<String>);
    let error = RwSignal::new(None::<ApiError>);
    let t = tenant.clone();
    let load = move || {
        let t = t.clone();
        leptos::task::spawn_local(async move {
            let r = api::get::<Value>(&format!("/api/v1/tenants/{t}/keys")).await;
            keys.set(Some(r.map(|v| v["keys"].as_array().cloned().unwrap_or_default())));
        });
    };
    load();
    let create = {
        let (t, load) = (tenant.clone(), load.clone());
        move |_| {
            let (t, load) = (t.clone(), load.clone());
            leptos::task::spawn_local(async move {
                match api::send::<Value>("POST", &format!("/api/v1/tenants/{t}/keys"), Some(&json!({}))).await {
                    Ok(k) => {
                        shown.set(k["key"].as_str().map(str::to_owned));
                        load();
                        reload.run(());
                    }
                    Err(e) => error.set(Some(e)),
                }
            });
        }
    };
    let revoke = {
        let load = load.clone();
        move |id: String| {
            let ok = window()
                .confirm_with_message(&format!("Revoke key {id}? Callers using it are refused at once."))
                .unwrap_or(false);
            if !ok {
                return;
            }
            let load = load.clone();
            leptos::task::spawn_local(async move {
                match api::send::<Value>("POST", &format!("/api/v1/keys/{id}/revoke"), None).await {
                    Ok(_) => {
                        load();
                        reload.run(());
                    }
                    Err(e) => error.set(Some(e)),
                }
            });
        }
    };
    let copy = move |_| {
        if let Some(k) = shown.get_untracked() {
            let _ = window().navigator().clipboard().write_text(&k);
        }
    };
    view! {
        <section class="keys" aria-label=format!("keys of {tenant}")>
            <h2>{format!("Keys of {tenant}")}</h2>
            <Show when=admin>
                <button class="primary" on:click=create.clone()>"Create key"</button>
            </Show>
            {move || shown.get().map(|k| view! {
                <div class="new-key" role="status">
                    <p>"The new key, shown this once (only its SHA-256 is stored):"</p>
                    <code>{k}</code>
                    <button on:click=copy>"Copy"</button>
                    <button on:click=move |_| shown.set(None)>"Done"</button>
                </div>
            })}
            {move || error.get().map(|e| view! { <p class="error" role="alert">{e.message}</p> })}
            {move || match keys.get() {
                None => view! { <p class="loading">"Loading…"</p> }.into_any(),
                Some(Err(e)) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
                Some(Ok(list)) => {
                    let revoke = revoke.clone();
                    view! {
                        <table>
                            <thead><tr><th>"Key"</th><th>"Prefix"</th><th>"Status"</th><th>"Created (UTC)"</th><th>"Expires"</th><th></th></tr></thead>
                            <tbody>
                            {list.into_iter().map(|k| {
                                let id = k["id"].as_str().unwrap_or("").to_owned();
                                let active = k["status"] == "active";
                                let revoke = revoke.clone();
                                let rid = id.clone();
                                view! {
                                    <tr>
                                        <td>{id}</td>
                                        <td><code>{format!("{}…", k["prefix"].as_str().unwrap_or(""))}</code></td>
                                        <td>{k["status"].as_str().unwrap_or("").to_owned()}</td>
                                        <td>{k["created_at"].as_str().unwrap_or("").replace('T', " ")}</td>
                                        <td>{k["expires_at"].as_str().unwrap_or("never").to_owned()}</td>
                                        <td>{(active && admin()).then(|| view! { <button on:click=move |_| revoke(rid.clone())>"Revoke"</button> })}</td>
                                    </tr>
                                }
                            }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any()
                }
            }}
        </section>
    }
}
