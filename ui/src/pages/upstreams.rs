//! Upstreams: provider, base URL, timeouts, limits, and per model its capabilities and prices. The
//! API key is write-only: the page shows whether one is stored, and an admin can replace it (a
//! password field, cleared after saving); no API ever returns it.

use leptos::prelude::*;
use serde_json::Value;

use crate::api::{self, ApiError};
use crate::{fmt, Auth};

#[component]
pub fn Upstreams() -> impl IntoView {
    let data = RwSignal::new(None::<Result<Vec<Value>, ApiError>>);
    let load = move || {
        leptos::task::spawn_local(async move {
            let r = api::get::<Value>("/api/v1/upstreams").await;
            data.set(Some(r.map(|v| v["upstreams"].as_array().cloned().unwrap_or_default())));
        });
    };
    load();
    view! {
        <h1>"Upstreams"</h1>
        {move || match data.get() {
            None => view! { <p class="loading">"Loading…"</p> }.into_any(),
            Some(Err(e)) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
            Some(Ok(list)) if list.is_empty() => view! { <p>"No upstreams yet."</p> }.into_any(),
            Some(Ok(list)) => list.into_iter().map(|u| view! { <Upstream u=u/> }).collect_view().into_any(),
        }}
    }
}

#[component]
fn Upstream(u: Value) -> impl IntoView {
    let auth = expect_context::<Auth>();
    let admin = move || auth.0.get().is_some_and(|s| s.at_least("admin"));
    let name = u["name"].as_str().unwrap_or("").to_owned();
    let editing = RwSignal::new(false);
    let new_key = RwSignal::new(String::new());
    let result = RwSignal::new(None::<Result<String, ApiError>>);
    let has_key = RwSignal::new(u["has_key"].as_bool() == Some(true));
    let save = {
        let (u, name) = (u.clone(), name.clone());
        move |ev: leptos::ev::SubmitEvent| {
            ev.prevent_default();
            let key = new_key.get_untracked();
            if key.trim().is_empty() {
                return;
            }
            let ok = window()
                .confirm_with_message(&format!("Replace the API key of {name}? Data planes switch to it at once."))
                .unwrap_or(false);
            if !ok {
                return;
            }
            let mut body = u.clone();
            if let Some(o) = body.as_object_mut() {
                o.remove("has_key");
                o.insert("api_key".into(), Value::from(key));
            }
            let name = name.clone();
            leptos::task::spawn_local(async move {
                let r = api::send::<Value>("PUT", &format!("/api/v1/upstreams/{name}"), Some(&body)).await;
                new_key.set(String::new());
                editing.set(false);
                if r.is_ok() {
                    has_key.set(true);
                }
                result.set(Some(r.map(|v| format!("Key replaced (version {}).", v["version"]))));
            });
        }
    };
    let timeouts = &u["timeouts"];
    let limits = &u["limits"];
    let detail = [
        ("connect", timeouts["connect_ms"].as_u64().map(|v| format!("{} ms", fmt::int(v as i64)))),
        ("first byte", timeouts["first_byte_ms"].as_u64().map(|v| format!("{} ms", fmt::int(v as i64)))),
        ("total", timeouts["total_ms"].as_u64().map(|v| format!("{} ms", fmt::int(v as i64)))),
        ("rpm", limits["rpm"].as_u64().map(|v| fmt::int(v as i64))),
        ("tpm", limits["tpm"].as_u64().map(|v| fmt::int(v as i64))),
        ("max concurrency", u["max_concurrency"].as_u64().map(|v| fmt::int(v as i64))),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| format!("{k} {v}")))
    .collect::<Vec<_>>()
    .join(" · ");
    let models = u["models"].as_array().cloned().unwrap_or_default();
    let price =
        |m: &Value, k: &str| m["price_per_mtok"][k].as_f64().map_or_else(|| "–".to_owned(), |p| format!("${p}"));
    view! {
        <section class="upstream-card" aria-label=format!("upstream {name}")>
            <h2>{name.clone()} <small>{format!(" · {}", u["provider"].as_str().unwrap_or(""))}</small></h2>
            <p class="muted">{u["base_url"].as_str().unwrap_or("(provider default URL)").to_owned()}
                {(!detail.is_empty()).then(|| format!(" · {detail}"))}</p>
            <p>"API key: " <strong class="key-state">{move || if has_key.get() { "stored (write-only) ••••••••" } else { "none" }}</strong>
                <Show when=move || admin() && !editing.get()>
                    <button class="link" on:click=move |_| { result.set(None); editing.set(true); }>"Replace key"</button>
                </Show>
            </p>
            <Show when=move || editing.get()>
                <form class="inline-form" on:submit=save.clone()>
                    <label>"New key " <input type="password" name="api-key" autocomplete="off"
                        prop:value=move || new_key.get() on:input=move |ev| new_key.set(event_target_value(&ev))/></label>
                    <button type="submit" class="primary">"Save key"</button>
                    <button type="button" on:click=move |_| { new_key.set(String::new()); editing.set(false); }>"Cancel"</button>
                </form>
            </Show>
            {move || result.get().map(|r| match r {
                Ok(t) => view! { <p class="ok" role="status">{t}</p> }.into_any(),
                Err(e) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
            })}
            <table class="models">
                <thead><tr><th>"Model"</th><th class="num">"Context"</th><th>"Capabilities"</th><th class="num">"Input / Mtok"</th><th class="num">"Output / Mtok"</th></tr></thead>
                <tbody>
                {models.into_iter().map(|m| {
                    let caps: Vec<String> = m["capabilities"].as_array().into_iter().flatten().filter_map(|c| c.as_str().map(str::to_owned)).collect();
                    view! {
                        <tr>
                            <td>{m["name"].as_str().unwrap_or("").to_owned()}</td>
                            <td class="num">{m["context_window"].as_i64().map_or_else(|| "–".to_owned(), fmt::int)}</td>
                            <td>{caps.join(", ")}</td>
                            <td class="num">{price(&m, "input")}</td>
                            <td class="num">{price(&m, "output")}</td>
                        </tr>
                    }
                }).collect_view()}
                </tbody>
            </table>
        </section>
    }
}
