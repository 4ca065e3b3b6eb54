//! Upstreams: provider, base URL, timeouts, limits, and per model its capabilities and prices; an
//! admin creates and edits them here. The API key is write-only: the page shows whether one is
//! stored, and an admin can replace it (a password field, cleared after saving); no API ever
//! returns it.

use ax_protocol::admin::{UpstreamList, UpstreamSaved, UpstreamView};
use ax_protocol::config::ModelSpec;
use leptos::prelude::*;
use serde_json::{json, Value};

use crate::api::{self, ApiError};
use crate::{fmt, form, Auth};

#[component]
pub fn Upstreams() -> impl IntoView {
    let data = RwSignal::new(None::<Result<Vec<UpstreamView>, ApiError>>);
    let load = move || {
        leptos::task::spawn_local(async move {
            let r = api::get::<UpstreamList>("/api/v1/upstreams").await;
            data.set(Some(r.map(|l| l.upstreams)));
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
            <UpstreamEditor u=None close=Callback::new(move |saved: bool| {
                creating.set(false);
                if saved { load(); }
            })/>
        </Show>
        {move || match crate::loaded(data.get()) {
            Err(pending) => pending,
            Ok(list) if list.is_empty() => view! { <p>"No upstreams yet."</p> }.into_any(),
            Ok(list) => list.into_iter().map(|u| view! { <Upstream u=u reload=reload/> }).collect_view().into_any(),
        }}
    }
}

const PROVIDERS: [&str; 5] = ["openai", "azure_openai", "anthropic", "gemini", "mock"];
const CAPABILITIES: [&str; 7] = ["chat", "tools", "streaming", "vision", "json", "embeddings", "reasoning"];

/// One model as edited.
#[derive(Clone, Copy)]
struct ModelRow {
    id: usize,
    name: RwSignal<String>,
    context_window: RwSignal<String>,
    max_output_tokens: RwSignal<String>,
    caps: [RwSignal<bool>; CAPABILITIES.len()],
    input: RwSignal<String>,
    output: RwSignal<String>,
    cached_input: RwSignal<String>,
}

impl ModelRow {
    /// A row for `m`, or an empty one (chat and streaming ticked) for a new model.
    fn new(id: usize, m: Option<&ModelSpec>) -> Self {
        let has = |c: &str| m.is_some_and(|m| m.capabilities.iter().any(|x| x.as_str() == c));
        let text = |v: Option<String>| RwSignal::new(v.unwrap_or_default());
        let price = |f: fn(&ax_protocol::config::PriceSpec) -> Option<f64>| {
            text(m.and_then(|m| m.price_per_mtok.as_ref()).and_then(f).map(|p| p.to_string()))
        };
        Self {
            id,
            name: text(m.map(|m| m.name.clone())),
            context_window: text(m.map(|m| m.context_window.to_string())),
            max_output_tokens: text(m.and_then(|m| m.max_output_tokens).map(|t| t.to_string())),
            caps: CAPABILITIES
                .map(|c| RwSignal::new(if m.is_none() { c == "chat" || c == "streaming" } else { has(c) })),
            input: price(|p| Some(p.input)),
            output: price(|p| Some(p.output)),
            cached_input: price(|p| p.cached_input),
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

/// Create (`u` is `None`) or edit an upstream (admin): everything but the key, which has its own
/// write-only field (required here only for a new upstream of a provider that needs one). The
/// body sent is the upstream's spec as JSON with the inputs written in as typed (`form`), so the
/// server's field error answers what the operator entered.
#[component]
fn UpstreamEditor(u: Option<UpstreamView>, close: Callback<bool>) -> impl IntoView {
    let is_new = u.is_none();
    let name = RwSignal::new(u.as_ref().map(|u| u.spec.name.clone()).unwrap_or_default());
    let provider = RwSignal::new(u.as_ref().map_or("openai", |u| u.spec.provider.as_str()).to_owned());
    let models_in: Vec<ModelSpec> = u.as_ref().map(|u| u.spec.models.clone()).unwrap_or_default();
    let u = u.map_or_else(
        || json!({ "provider": "openai", "models": [] }),
        |u| serde_json::to_value(&u.spec).unwrap_or_default(),
    );
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
    // Unknown request fields sent on: "" none, "*" all, else the names (OpenAI-compatible only).
    let passthrough = RwSignal::new(match &u["passthrough"] {
        Value::Bool(true) => "*".to_owned(),
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "),
        _ => String::new(),
    });
    let responses = RwSignal::new(u["responses_api"] == Value::Bool(true));
    let key = RwSignal::new(String::new());
    let next = StoredValue::new(models_in.len());
    let models =
        RwSignal::new(models_in.iter().enumerate().map(|(i, m)| ModelRow::new(i, Some(m))).collect::<Vec<_>>());
    let error = RwSignal::new(None::<ApiError>);
    let busy = RwSignal::new(false);
    let base = StoredValue::new(u);
    let save = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let mut body = base.get_value();
        if let Some(o) = body.as_object_mut() {
            o.remove("name");
        }
        body["provider"] = Value::from(provider.get_untracked());
        for f in &fields {
            f.apply(&mut body);
        }
        body["models"] = models.get_untracked().iter().map(ModelRow::body).collect();
        let fields_on = match passthrough.get_untracked().trim() {
            "" => None,
            "*" => Some(Value::Bool(true)),
            names => Some(form::list(names).into_iter().map(Value::from).collect()),
        };
        form::put(&mut body, "passthrough", fields_on);
        form::put(&mut body, "responses_api", responses.get_untracked().then_some(Value::Bool(true)));
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
            let path = format!("/api/v1/upstreams/{}", js_sys::encode_uri_component(&n));
            let r = api::send::<UpstreamSaved, _>("PUT", &path, &body).await;
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
            <div class="fields">
                <label class="field wide"><span>"Unknown fields sent on (OpenAI-compatible: * for all, or names)"</span>
                    <input type="text" name="passthrough" placeholder="none" prop:value=move || passthrough.get()
                        on:input=move |ev| passthrough.set(event_target_value(&ev))/>
                    {err_at("passthrough*".into())}</label>
                <label class="field"><span>"Responses API"</span>
                    <span class="check"><input type="checkbox" name="responses_api" prop:checked=move || responses.get()
                        on:change=move |ev| responses.set(event_target_checked(&ev))/>" forward /v1/responses as it is (openai only)"</span>
                    {err_at("responses_api".into())}</label>
            </div>
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
                    models.update(|l| l.push(ModelRow::new(id, None)));
                }>"Add model"</button>
            </fieldset>
            {move || error.get().map(|e| {
                let text = form::unplaced(&e, |p| {
                    ["name", "provider", "responses_api"].contains(&p)
                        || p.starts_with("models[")
                        || p.starts_with("passthrough")
                        || fields.iter().any(|f| f.path == p)
                });
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
fn Upstream(u: UpstreamView, reload: Callback<()>) -> impl IntoView {
    let auth = expect_context::<Auth>();
    let admin = move || auth.0.get().is_some_and(|s| s.at_least("admin"));
    let name = u.spec.name.clone();
    let editing = RwSignal::new(false);
    let editing_spec = RwSignal::new(false);
    let spec = StoredValue::new(u.clone());
    let new_key = RwSignal::new(String::new());
    let result = RwSignal::new(None::<Result<String, ApiError>>);
    let has_key = RwSignal::new(u.has_key);
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
            let mut spec = u.spec.clone();
            spec.api_key = Some(key);
            let body = serde_json::to_value(&spec).unwrap_or_default();
            let name = name.clone();
            leptos::task::spawn_local(async move {
                let r = api::send::<UpstreamSaved, _>("PUT", &format!("/api/v1/upstreams/{name}"), &body).await;
                new_key.set(String::new());
                editing.set(false);
                if r.is_ok() {
                    has_key.set(true);
                }
                result.set(Some(r.map(|s| format!("Key replaced (version {}).", s.version))));
            });
        }
    };
    let (timeouts, limits) = (&u.spec.timeouts, &u.spec.limits);
    let ms = |v: u64| format!("{} ms", fmt::int(v as i64));
    let detail = [
        ("connect", Some(ms(timeouts.connect_ms))),
        ("first byte", Some(ms(timeouts.first_byte_ms))),
        ("total", Some(ms(timeouts.total_ms))),
        ("rpm", limits.rpm.map(|v| fmt::int(i64::from(v)))),
        ("tpm", limits.tpm.map(|v| fmt::int(i64::from(v)))),
        ("max concurrency", Some(fmt::int(i64::from(u.spec.max_concurrency)))),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| format!("{k} {v}")))
    .collect::<Vec<_>>()
    .join(" · ");
    let models = u.spec.models.clone();
    let price = |p: Option<f64>| p.map_or_else(|| "–".to_owned(), |p| format!("${p}"));
    view! {
        <section class="upstream-card" aria-label=format!("upstream {name}")>
            <h2>{name.clone()} <small>{format!(" · {}", u.spec.provider.as_str())}</small></h2>
            <p class="muted">{u.spec.base_url.clone().unwrap_or_else(|| "(provider default URL)".to_owned())}
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
                <UpstreamEditor u=Some(spec.get_value()) close=Callback::new(move |saved: bool| {
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
                    let caps: Vec<&str> = m.capabilities.iter().map(|c| c.as_str()).collect();
                    let prices = m.price_per_mtok.as_ref();
                    view! {
                        <tr>
                            <td>{m.name.clone()}</td>
                            <td class="num">{fmt::int(i64::from(m.context_window))}</td>
                            <td>{caps.join(", ")}</td>
                            <td class="num">{price(prices.map(|p| p.input))}</td>
                            <td class="num">{price(prices.map(|p| p.output))}</td>
                        </tr>
                    }
                }).collect_view()}
                </tbody>
            </table>
        </section>
    }
}
