//! Upstreams: provider, base URL, timeouts, limits, and per model its capabilities and prices; an
//! admin creates and edits them here. The API key is write-only: the page shows whether one is
//! stored, and an admin can replace it (a password field, cleared after saving); no API ever
//! returns it.

use leptos::prelude::*;
use serde_json::{json, Value};

use crate::api::{self, ApiError};
use crate::{fmt, form, Auth};

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
    let auth = expect_context::<Auth>();
    let admin = move || auth.0.get().is_some_and(|s| s.at_least("admin"));
    let creating = RwSignal::new(false);
    let reload = Callback::new(move |()| load());
    view! {
        <h1>"Upstreams"</h1>
        <Show when=move || admin() && !creating.get()>
            <div class="actions"><button on:click=move |_| creating.set(true)>"New upstream"</button></div>
        </Show>
        <Show when=move || creating.get()>
            <UpstreamEditor u=json!({ "provider": "openai", "models": [] }) close=Callback::new(move |saved: bool| {
                creating.set(false);
                if saved { load(); }
            })/>
        </Show>
        {move || match data.get() {
            None => view! { <p class="loading">"Loading…"</p> }.into_any(),
            Some(Err(e)) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
            Some(Ok(list)) if list.is_empty() => view! { <p>"No upstreams yet."</p> }.into_any(),
            Some(Ok(list)) => list.into_iter().map(|u| view! { <Upstream u=u reload=reload/> }).collect_view().into_any(),
        }}
    }
}

const PROVIDERS: [&str; 5] = ["openai", "azure_openai", "anthropic", "gemini", "mock"];
const CAPABILITIES: [&str; 6] = ["chat", "tools", "streaming", "vision", "json", "embeddings"];

/// One model as edited.
#[derive(Clone, Copy)]
struct ModelRow {
    id: usize,
    name: RwSignal<String>,
    context_window: RwSignal<String>,
    max_output_tokens: RwSignal<String>,
    caps: [RwSignal<bool>; 6],
    input: RwSignal<String>,
    output: RwSignal<String>,
    cached_input: RwSignal<String>,
}

impl ModelRow {
    fn new(id: usize, m: &Value) -> Self {
        let has = |c: &str| m["capabilities"].as_array().is_some_and(|l| l.iter().any(|x| x == c));
        let t = |path: &str| RwSignal::new(form::text(form::get(m, path)));
        Self {
            id,
            name: t("name"),
            context_window: t("context_window"),
            max_output_tokens: t("max_output_tokens"),
            caps: CAPABILITIES
                .map(|c| RwSignal::new(if m.is_null() { c == "chat" || c == "streaming" } else { has(c) })),
            input: t("price_per_mtok.input"),
            output: t("price_per_mtok.output"),
            cached_input: t("price_per_mtok.cached_input"),
        }
    }

    fn body(&self) -> Value {
        let caps: Vec<&str> =
            CAPABILITIES.iter().zip(&self.caps).filter(|(_, on)| on.get_untracked()).map(|(c, _)| *c).collect();
        let mut m = json!({ "capabilities": caps });
        form::put(&mut m, "name", Some(Value::from(self.name.get_untracked().trim())));
        for (path, v) in [("context_window", self.context_window), ("max_output_tokens", self.max_output_tokens)] {
            form::put(&mut m, path, form::typed(&v.get_untracked()));
        }
        let prices = [("input", self.input), ("output", self.output), ("cached_input", self.cached_input)];
        if prices.iter().any(|(_, v)| !v.get_untracked().trim().is_empty()) {
            for (k, v) in prices {
                form::put(&mut m, &format!("price_per_mtok.{k}"), form::typed(&v.get_untracked()));
            }
        }
        m
    }
}

/// Create or edit an upstream (admin): everything but the key, which has its own write-only field
/// (required here only for a new upstream of a provider that needs one).
#[component]
fn UpstreamEditor(u: Value, close: Callback<bool>) -> impl IntoView {
    let is_new = u["name"].is_null();
    let name = RwSignal::new(form::text(&u["name"]));
    let provider = RwSignal::new(form::text(&u["provider"]));
    let fields = [
        form::Field::new(&u, "base_url", "Base URL"),
        form::Field::new(&u, "api_version", "API version (Azure)"),
        form::Field::new(&u, "timeouts.connect_ms", "Connect timeout (ms)"),
        form::Field::new(&u, "timeouts.first_byte_ms", "First byte (ms)"),
        form::Field::new(&u, "timeouts.idle_ms", "Idle between events (ms)"),
        form::Field::new(&u, "timeouts.total_ms", "Total (ms)"),
        form::Field::new(&u, "max_concurrency", "Max in flight"),
        form::Field::new(&u, "limits.rpm", "Requests per minute"),
        form::Field::new(&u, "limits.tpm", "Tokens per minute"),
    ];
    let key = RwSignal::new(String::new());
    let models_in = u["models"].as_array().cloned().unwrap_or_default();
    let next = StoredValue::new(models_in.len());
    let models = RwSignal::new(models_in.iter().enumerate().map(|(i, m)| ModelRow::new(i, m)).collect::<Vec<_>>());
    let error = RwSignal::new(None::<ApiError>);
    let busy = RwSignal::new(false);
    let base = StoredValue::new(u);
    let save = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let mut body = base.get_value();
        if let Some(o) = body.as_object_mut() {
            o.remove("has_key");
            o.remove("name");
        }
        body["provider"] = Value::from(provider.get_untracked());
        for f in &fields {
            f.apply(&mut body);
        }
        body["models"] = models.get_untracked().iter().map(ModelRow::body).collect();
        let k = key.get_untracked();
        if !k.trim().is_empty() {
            body["api_key"] = Value::from(k);
        }
        let n = name.get_untracked().trim().to_owned();
        if n.is_empty() {
            error.set(Some(ApiError {
                status: 0,
                code: "invalid".into(),
                message: "Name the upstream.".into(),
                fields: vec![("name".into(), "required".into())],
            }));
            return;
        }
        busy.set(true);
        leptos::task::spawn_local(async move {
            let r = api::send::<Value>(
                "PUT",
                &format!("/api/v1/upstreams/{}", js_sys::encode_uri_component(&n)),
                Some(&body),
            )
            .await;
            busy.set(false);
            key.set(String::new());
            match r {
                Ok(_) => close.run(true),
                Err(e) => error.set(Some(e)),
            }
        });
    };
    let err_at = move |path: String| form::error_at(error, path);
    view! {
        <form class="upstream-editor" on:submit=save aria-label=if is_new { "new upstream".to_owned() } else { format!("edit upstream {}", name.get_untracked()) }>
            <h2>{if is_new { "New upstream".to_owned() } else { format!("Edit {}", name.get_untracked()) }}</h2>
            <div class="fields">
                <Show when=move || is_new>
                    <label class="field"><span>"Name"</span>
                        <input type="text" name="name" prop:value=move || name.get() on:input=move |ev| name.set(event_target_value(&ev))/>
                        {err_at("name".into())}</label>
                </Show>
                <label class="field"><span>"Provider"</span>
                    <select name="provider" prop:value=move || provider.get() on:change=move |ev| provider.set(event_target_value(&ev))>
                        {PROVIDERS.map(|p| view! { <option value=p>{p}</option> }).collect_view()}
                    </select>
                    {err_at("provider".into())}</label>
                <Show when=move || is_new>
                    <label class="field"><span>"API key (write-only)"</span>
                        <input type="password" name="new-api-key" autocomplete="off" prop:value=move || key.get() on:input=move |ev| key.set(event_target_value(&ev))/></label>
                </Show>
            </div>
            <div class="fields">{fields.map(|f| f.view(error, "")).collect_view()}</div>
            <fieldset><legend>"Models: capabilities and prices (USD per million tokens)"</legend>
                {move || models.get().into_iter().enumerate().map(|(i, m)| {
                    let mid = m.id;
                    let at = move |f: &str| format!("models[{i}].{f}");
                    let text = move |label: &'static str, f: &'static str, v: RwSignal<String>| view! {
                        <label class="field"><span>{label}</span>
                            <input type="text" name=format!("model-{f}") prop:value=move || v.get() on:input=move |ev| v.set(event_target_value(&ev))/>
                            {err_at(at(f))}</label>
                    };
                    view! {
                        <div class="model-row fields" aria-label=format!("model {}", i + 1)>
                            {text("Model", "name", m.name)}
                            {text("Context window", "context_window", m.context_window)}
                            {text("Max output", "max_output_tokens", m.max_output_tokens)}
                            {text("Input $", "price_per_mtok.input", m.input)}
                            {text("Output $", "price_per_mtok.output", m.output)}
                            {text("Cached input $", "price_per_mtok.cached_input", m.cached_input)}
                            <span class="caps" role="group" aria-label="capabilities">
                                {CAPABILITIES.iter().zip(m.caps).map(|(c, on)| view! {
                                    <label><input type="checkbox" name=format!("cap-{c}") prop:checked=move || on.get() on:change=move |ev| on.set(event_target_checked(&ev))/>{*c}</label>
                                }).collect_view()}
                            </span>
                            <button type="button" class="link" on:click=move |_| models.update(|l| l.retain(|x| x.id != mid))>"Remove model"</button>
                            {err_at(format!("models[{i}]"))}
                        </div>
                    }
                }).collect_view()}
                <button type="button" on:click=move |_| {
                    let id = next.get_value();
                    next.set_value(id + 1);
                    models.update(|l| l.push(ModelRow::new(id, &Value::Null)));
                }>"Add model"</button>
            </fieldset>
            {move || error.get().map(|e| {
                let text = form::unplaced(&e, |p| p == "name" || p == "provider" || p.starts_with("models[") || fields.iter().any(|f| f.path == p));
                view! { <p class="error" role="alert">{text}</p> }
            })}
            <div class="actions">
                <button type="submit" class="primary" disabled=move || busy.get()>"Save upstream"</button>
                <button type="button" on:click=move |_| close.run(false)>"Cancel"</button>
            </div>
        </form>
    }
}

#[component]
fn Upstream(u: Value, reload: Callback<()>) -> impl IntoView {
    let auth = expect_context::<Auth>();
    let admin = move || auth.0.get().is_some_and(|s| s.at_least("admin"));
    let name = u["name"].as_str().unwrap_or("").to_owned();
    let editing = RwSignal::new(false);
    let editing_spec = RwSignal::new(false);
    let spec = StoredValue::new(u.clone());
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
            <Show when=move || admin() && !editing_spec.get()>
                <button on:click=move |_| editing_spec.set(true)>"Edit"</button>
            </Show>
            {move || editing_spec.get().then(|| view! {
                <UpstreamEditor u=spec.get_value() close=Callback::new(move |saved: bool| {
                    editing_spec.set(false);
                    if saved { reload.run(()); }
                })/>
            })}
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
