//! Tenants, keys and groups: create a tenant (admin); edit its allowed aliases, limits, budgets
//! and groups (operator), each budget shown with its current burn; create a key (admin; shown once
//! with a copy button, never again: the control plane keeps only its SHA-256), edit a key's
//! limits, per-alias limits and budgets (operator), revoke a key (after a confirmation); groups of
//! tenants with their pooled budgets (create: admin; edit: operator).

use ax_protocol::admin::{
    BudgetBurn, BudgetReport, GroupList, GroupSaved, GroupView, KeyCreated, KeyIn, KeyList, KeyPolicySaved, KeyRevoked,
    KeyView, TenantIn, TenantList, TenantSaved, TenantView,
};
use ax_protocol::config::{BudgetAction, BudgetSpec, LimitsSpec, PlainBudgetAction, RedisDown};
use leptos::prelude::*;
use serde_json::{json, Value};

use crate::api::{self, ApiError};
use crate::{fmt, form, Auth};

#[component]
pub fn Tenants() -> impl IntoView {
    let auth = expect_context::<Auth>();
    let admin = move || auth.0.get().is_some_and(|s| s.at_least("admin"));
    let tenants = RwSignal::new(None::<Result<Vec<TenantView>, ApiError>>);
    let burn = RwSignal::new(Vec::<BudgetBurn>::new());
    let selected = RwSignal::new(String::new());
    let editing = RwSignal::new(String::new());
    let load = move || {
        leptos::task::spawn_local(async move {
            // The burn first: the table reads it when the tenants arrive.
            if let Ok(b) = api::get::<BudgetReport>("/api/v1/reports/budgets").await {
                burn.set(b.budgets);
            }
            let r = api::get::<TenantList>("/api/v1/tenants").await;
            tenants.set(Some(r.map(|l| l.tenants)));
        });
    };
    load();
    let new_id = RwSignal::new(String::new());
    let new_aliases = RwSignal::new("*".to_owned());
    let create_error = RwSignal::new(None::<ApiError>);
    let create = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let id = new_id.get_untracked().trim().to_owned();
        let aliases = form::list(&new_aliases.get_untracked());
        leptos::task::spawn_local(async move {
            let body = TenantIn {
                id: None,
                allowed_aliases: aliases,
                limits: LimitsSpec::default(),
                budgets: Vec::new(),
                groups: Vec::new(),
                trace_content: false,
            };
            match api::send::<TenantSaved, _>("PUT", &format!("/api/v1/tenants/{id}"), &body).await {
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
        {move || match crate::loaded(tenants.get()) {
            Err(pending) => pending,
            Ok(list) => view! {
                <table class="tenants">
                    <thead><tr><th>"Tenant"</th><th>"Allowed aliases"</th><th>"Limits"</th><th>"Budgets (spent of cap)"</th><th class="num">"Active keys"</th><th></th></tr></thead>
                    <tbody>
                    {list.into_iter().map(|t| {
                        let (pick, edit) = (t.id.clone(), t.id.clone());
                        // The tenant's own budgets, then those of the groups it is in.
                        let burns: Vec<BudgetBurn> = burn
                            .get_untracked()
                            .into_iter()
                            .filter(|b| (b.scope == "tenant" && b.tenant == t.id) || (b.scope == "group" && b.subject.as_ref().is_some_and(|g| t.groups.contains(g))))
                            .collect();
                        let none = t.budgets.is_empty() && burns.is_empty();
                        view! {
                            <tr>
                                <td class="tenant-id">{t.id.clone()}</td>
                                <td data-label="aliases">{if t.allowed_aliases.is_empty() { "none".to_owned() } else { t.allowed_aliases.join(", ") }}</td>
                                <td data-label="limits">{limits_text(&t.limits)}</td>
                                <td class="burns" data-label="budgets">
                                    {none.then_some("none")}
                                    {burns.into_iter().map(|b| view! { <Burn b=b/> }).collect_view()}
                                </td>
                                <td class="num" data-label="active keys">{t.active_keys}</td>
                                <td class="row-actions">
                                    <button on:click=move |_| { editing.set(edit.clone()); }>"Edit"</button>
                                    <button class="keys" on:click=move |_| selected.set(pick.clone())>"Keys"</button>
                                </td>
                            </tr>
                        }
                    }).collect_view()}
                    </tbody>
                </table>
            }.into_any(),
        }}
        {move || {
            let id = editing.get();
            let t = tenants.get().and_then(|r| r.ok()).and_then(|l| l.into_iter().find(|t| t.id == id))?;
            Some(view! { <TenantEditor t=t close=Callback::new(move |saved: bool| { editing.set(String::new()); if saved { load(); } })/> })
        }}
        {move || {
            let t = selected.get();
            (!t.is_empty()).then(|| view! { <Keys tenant=t burn=burn reload=Callback::new(move |()| load())/> })
        }}
        <Groups burn=burn reload=Callback::new(move |()| load())/>
    }
}

fn limits_text(l: &LimitsSpec) -> String {
    let parts: Vec<String> = [("rpm", l.rpm), ("tpm", l.tpm), ("in flight", l.concurrency)]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| format!("{} {k}", fmt::int(i64::from(v)))))
        .collect();
    if parts.is_empty() {
        "unlimited".to_owned()
    } else if l.exact {
        format!("{} (exact)", parts.join(" · "))
    } else {
        parts.join(" · ")
    }
}

fn action_text(a: &BudgetAction) -> String {
    match a {
        BudgetAction::DowngradeTo { downgrade_to } => format!("downgrade to {downgrade_to}"),
        BudgetAction::Plain(PlainBudgetAction::Reject) => "reject".to_owned(),
        BudgetAction::Plain(PlainBudgetAction::Warn) => "warn".to_owned(),
    }
}

/// One budget's burn: what its current day, week or month spent against its cap, as a meter that is
/// green below the warning threshold and red past it.
#[component]
fn Burn(b: BudgetBurn) -> impl IntoView {
    let scope = b.alias.as_deref().map_or_else(String::new, |a| format!(" ({a})"));
    let whose = match (b.scope.as_str(), &b.subject) {
        ("group", Some(g)) => format!("group {g} · "),
        _ => String::new(),
    };
    let label = format!(
        "{whose}{}{scope}: {} of {} · {} · {}",
        b.window,
        fmt::usd_micro(b.spent_micro_usd),
        usd_text(&b.cap_usd),
        fmt::pct(b.used_pct),
        action_text(&b.action)
    );
    view! {
        <div class="burn">
            <meter min="0" max="100" low=b.warn_at * 100.0 high=b.warn_at * 100.0 optimum="0"
                value=b.used_pct.min(100.0) aria-label=label.clone()></meter>
            <span>{label}</span>
        </div>
    }
}

/// `"50.000000"` → `$50.00`.
fn usd_text(decimal: &str) -> String {
    decimal.parse::<f64>().map_or_else(|_| decimal.to_owned(), |d| fmt::usd_micro((d * 1e6).round() as i64))
}

/// One budget as edited (text, so that what was typed reaches the server and its field error).
#[derive(Clone, Copy)]
struct BudgetRow {
    id: usize,
    window: RwSignal<String>,
    usd: RwSignal<String>,
    alias: RwSignal<String>,
    action: RwSignal<String>,
    downgrade_to: RwSignal<String>,
    warn_pct: RwSignal<String>,
    exact: RwSignal<bool>,
    /// `fail_closed` or `fail_open`.
    redis_down: RwSignal<String>,
}

impl BudgetRow {
    fn new(id: usize, b: Option<&BudgetSpec>) -> Self {
        let (action, to) = match b.map(|b| &b.action) {
            Some(BudgetAction::DowngradeTo { downgrade_to }) => ("downgrade", downgrade_to.clone()),
            Some(BudgetAction::Plain(PlainBudgetAction::Warn)) => ("warn", String::new()),
            _ => ("reject", String::new()),
        };
        Self {
            id,
            window: RwSignal::new(b.map_or("day", |b| b.window.name()).to_owned()),
            usd: RwSignal::new(b.map_or_else(String::new, |b| b.usd.to_string())),
            alias: RwSignal::new(b.and_then(|b| b.alias.clone()).unwrap_or_default()),
            action: RwSignal::new(action.to_owned()),
            downgrade_to: RwSignal::new(to),
            warn_pct: RwSignal::new(b.map_or(80.0, |b| (b.warn_at * 1000.0).round() / 10.0).to_string()),
            exact: RwSignal::new(b.is_some_and(|b| b.exact)),
            redis_down: RwSignal::new(
                if b.is_some_and(|b| b.on_redis_down == RedisDown::FailOpen) { "fail_open" } else { "fail_closed" }
                    .to_owned(),
            ),
        }
    }

    fn body(&self) -> Value {
        let mut b = json!({ "window": self.window.get_untracked() });
        form::put(&mut b, "usd", form::typed(&self.usd.get_untracked()));
        form::put(
            &mut b,
            "alias",
            form::typed(&self.alias.get_untracked()).map(|_| Value::from(self.alias.get_untracked().trim())),
        );
        let action = match self.action.get_untracked().as_str() {
            "downgrade" => json!({ "downgrade_to": self.downgrade_to.get_untracked().trim() }),
            other => Value::from(other),
        };
        b["action"] = action;
        let warn = form::typed(&self.warn_pct.get_untracked()).map(|v| match v.as_f64() {
            Some(p) => Value::from(p / 100.0),
            None => v,
        });
        form::put(&mut b, "warn_at", warn);
        if self.exact.get_untracked() {
            b["exact"] = Value::Bool(true);
        }
        if self.redis_down.get_untracked() == "fail_open" {
            b["on_redis_down"] = Value::from("fail_open");
        }
        b
    }
}

/// An editor's save: `PUT` the body, then close the editor (saved) or show the server's error;
/// `busy` while it is under way.
fn put_and_close<T: serde::de::DeserializeOwned + 'static>(
    url: String,
    body: Value,
    busy: RwSignal<bool>,
    error: RwSignal<Option<ApiError>>,
    close: Callback<bool>,
) {
    busy.set(true);
    leptos::task::spawn_local(async move {
        let r = api::send::<T, _>("PUT", &url, &body).await;
        busy.set(false);
        match r {
            Ok(_) => close.run(true),
            Err(e) => error.set(Some(e)),
        }
    });
}

/// An editor's last lines: the server's errors that no input shows (`placed` says which paths
/// an input shows), then save and cancel.
#[component]
fn EditorEnd(
    error: RwSignal<Option<ApiError>>,
    busy: RwSignal<bool>,
    close: Callback<bool>,
    save: &'static str,
    placed: fn(&str) -> bool,
) -> impl IntoView {
    view! {
        {move || error.get().map(|e| view! { <p class="error" role="alert">{form::unplaced(&e, placed)}</p> })}
        <div class="actions">
            <button type="submit" class="primary" disabled=move || busy.get()>{save}</button>
            <button type="button" on:click=move |_| close.run(false)>"Cancel"</button>
        </div>
    }
}

/// The budgets of one subject (tenant, key, group) as edited, with the server's errors at their
/// inputs (paths `budgets[i].…` of the body).
#[component]
fn BudgetsEditor(budgets: RwSignal<Vec<BudgetRow>>, error: RwSignal<Option<ApiError>>) -> impl IntoView {
    let next = StoredValue::new(budgets.get_untracked().iter().map(|b| b.id + 1).max().unwrap_or(0));
    view! {
        {move || {
            let rows = budgets.get();
            if rows.is_empty() {
                return view! { <p class="muted">"No budget: spend is not capped."</p> }.into_any();
            }
            rows.into_iter().enumerate().map(|(i, r)| {
                let rid = r.id;
                view! {
                    <div class="budget-row fields" aria-label=format!("budget {}", i + 1)>
                        <label class="field"><span>"Window"</span>
                            <select name="budget-window" prop:value=move || r.window.get() on:change=move |ev| r.window.set(event_target_value(&ev))>
                                <option value="day">"per day"</option>
                                <option value="week">"per week (Mon-Sun)"</option>
                                <option value="month">"per month"</option>
                            </select></label>
                        <label class="field"><span>"Cap (USD)"</span>
                            <input type="text" inputmode="decimal" name="budget-usd" prop:value=move || r.usd.get() on:input=move |ev| r.usd.set(event_target_value(&ev))/>
                            {form::error_at(error, format!("budgets[{i}].usd"))}</label>
                        <label class="field"><span>"Alias (blank: all)"</span>
                            <input type="text" name="budget-alias" prop:value=move || r.alias.get() on:input=move |ev| r.alias.set(event_target_value(&ev))/>
                            {form::error_at(error, format!("budgets[{i}].alias"))}</label>
                        <label class="field"><span>"When spent"</span>
                            <select name="budget-action" prop:value=move || r.action.get() on:change=move |ev| r.action.set(event_target_value(&ev))>
                                <option value="reject">"reject"</option>
                                <option value="warn">"warn only"</option>
                                <option value="downgrade">"downgrade to alias"</option>
                            </select></label>
                        <Show when=move || r.action.get() == "downgrade">
                            <label class="field"><span>"Downgrade to"</span>
                                <input type="text" name="budget-downgrade" prop:value=move || r.downgrade_to.get() on:input=move |ev| r.downgrade_to.set(event_target_value(&ev))/>
                                {form::error_at(error, format!("budgets[{i}].action.downgrade_to"))}</label>
                        </Show>
                        <label class="field"><span>"Warn at (%)"</span>
                            <input type="text" inputmode="decimal" name="budget-warn" prop:value=move || r.warn_pct.get() on:input=move |ev| r.warn_pct.set(event_target_value(&ev))/>
                            {form::error_at(error, format!("budgets[{i}].warn_at"))}</label>
                        <label class="field"><span>"Across replicas"</span>
                            <span class="check"><input type="checkbox" name="budget-exact" prop:checked=move || r.exact.get()
                                on:change=move |ev| r.exact.set(event_target_checked(&ev))/>" exact"</span></label>
                        <label class="field"><span>"If Redis is down"</span>
                            <select name="budget-redis-down" prop:value=move || r.redis_down.get() on:change=move |ev| r.redis_down.set(event_target_value(&ev))>
                                <option value="fail_closed">"refuse past what is held"</option>
                                <option value="fail_open">"spend a local share"</option>
                            </select></label>
                        <button type="button" class="link" on:click=move |_| budgets.update(|l| l.retain(|b| b.id != rid))>"Remove"</button>
                        {form::error_at(error, format!("budgets[{i}]"))}
                    </div>
                }
            }).collect_view().into_any()
        }}
        <button type="button" on:click=move |_| {
            let id = next.get_value();
            next.set_value(id + 1);
            budgets.update(|l| l.push(BudgetRow::new(id, None)));
        }>"Add budget"</button>
    }
}

/// Budget rows of `list`, for an editor.
fn budget_rows(list: &[BudgetSpec]) -> RwSignal<Vec<BudgetRow>> {
    RwSignal::new(list.iter().enumerate().map(|(i, b)| BudgetRow::new(i, Some(b))).collect())
}

/// A tenant's allowed aliases, limits and budgets (operator); the server validates the result
/// against the whole configuration and names the field it refuses.
#[component]
fn TenantEditor(t: TenantView, close: Callback<bool>) -> impl IntoView {
    let error = RwSignal::new(None::<ApiError>);
    let busy = RwSignal::new(false);
    let limits = json!({ "limits": t.limits });
    let fields = [
        form::Field::new(&limits, "limits.rpm", "Requests per minute"),
        form::Field::new(&limits, "limits.tpm", "Tokens per minute"),
        form::Field::new(&limits, "limits.concurrency", "In flight"),
    ];
    let exact = RwSignal::new(t.limits.exact);
    let aliases = RwSignal::new(t.allowed_aliases.join(", "));
    let budgets = budget_rows(&t.budgets);
    let groups = RwSignal::new(t.groups.join(", "));
    let trace_content = RwSignal::new(t.trace_content);
    let id = t.id.clone();
    let save = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let mut body = json!({ "allowed_aliases": form::list(&aliases.get_untracked()), "limits": {} });
        for f in &fields {
            f.apply(&mut body);
        }
        if exact.get_untracked() {
            body["limits"]["exact"] = Value::Bool(true);
        }
        body["budgets"] = budgets.get_untracked().iter().map(BudgetRow::body).collect();
        body["groups"] = form::list(&groups.get_untracked()).into();
        body["trace_content"] = Value::Bool(trace_content.get_untracked());
        put_and_close::<TenantSaved>(format!("/api/v1/tenants/{id}"), body, busy, error, close);
    };
    view! {
        <form class="editor tenant-editor" on:submit=save aria-label=format!("edit tenant {}", t.id)>
            <h2>{format!("Tenant {}", t.id)}</h2>
            <label class="field wide"><span>"Allowed aliases (comma-separated, * for all)"</span>
                <input type="text" name="allowed-aliases" prop:value=move || aliases.get() on:input=move |ev| aliases.set(event_target_value(&ev))/>
                {form::error_at(error, "allowed_aliases".into())}
            </label>
            <fieldset><legend>"Limits (blank: unlimited)"</legend>
                <div class="fields">{fields.map(|f| f.view(error, "")).collect_view()}
                    <label class="field"><span>"Across replicas"</span>
                        <span class="check"><input type="checkbox" name="limits-exact" prop:checked=move || exact.get()
                            on:change=move |ev| exact.set(event_target_checked(&ev))/>" exact (a Redis call per request)"</span></label>
                </div>
            </fieldset>
            <label class="field wide"><span>"Groups (comma-separated; their budgets pool this tenant's spend)"</span>
                <input type="text" name="tenant-groups" prop:value=move || groups.get() on:input=move |ev| groups.set(event_target_value(&ev))/>
                {form::error_at(error, "groups*".into())}
            </label>
            <fieldset><legend>"Budgets"</legend>
                <BudgetsEditor budgets=budgets error=error/>
            </fieldset>
            <label class="field wide"><span>"Traces"</span>
                <span class="check"><input type="checkbox" name="trace-content" prop:checked=move || trace_content.get()
                    on:change=move |ev| trace_content.set(event_target_checked(&ev))/>" record prompts and completions in this tenant's trace spans"</span></label>
            <EditorEnd error=error busy=busy close=close save="Save tenant" placed=|p| p == "allowed_aliases" || p.starts_with("limits.") || p.starts_with("budgets[") || p.starts_with("groups")/>
        </form>
    }
}

#[component]
fn Keys(tenant: String, burn: RwSignal<Vec<BudgetBurn>>, reload: Callback<()>) -> impl IntoView {
    let auth = expect_context::<Auth>();
    let admin = move || auth.0.get().is_some_and(|s| s.at_least("admin"));
    let operator = move || auth.0.get().is_some_and(|s| s.at_least("operator"));
    let keys = RwSignal::new(None::<Result<Vec<KeyView>, ApiError>>);
    let editing = RwSignal::new(String::new());
    let shown = RwSignal::new(None::<String>);
    let error = RwSignal::new(None::<ApiError>);
    let t = tenant.clone();
    let load = move || {
        let t = t.clone();
        leptos::task::spawn_local(async move {
            let r = api::get::<KeyList>(&format!("/api/v1/tenants/{t}/keys")).await;
            keys.set(Some(r.map(|l| l.keys)));
        });
    };
    // Loaded now, and again whenever the burn is (after every save): the rows read it.
    Effect::new({
        let load = load.clone();
        move |_| {
            burn.track();
            load();
        }
    });
    let create = {
        let (t, load) = (tenant.clone(), load.clone());
        move |_| {
            let (t, load) = (t.clone(), load.clone());
            leptos::task::spawn_local(async move {
                match api::send::<KeyCreated, _>("POST", &format!("/api/v1/tenants/{t}/keys"), &KeyIn::default()).await
                {
                    Ok(k) => {
                        shown.set(Some(k.key));
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
                match api::send_empty::<KeyRevoked>("POST", &format!("/api/v1/keys/{id}/revoke")).await {
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
            {move || match crate::loaded(keys.get()) {
                Err(pending) => pending,
                Ok(list) => {
                    let revoke = revoke.clone();
                    view! {
                        <table>
                            <thead><tr><th>"Key"</th><th>"Prefix"</th><th>"Status"</th><th>"Limits & budgets"</th><th>"Created (UTC)"</th><th>"Expires"</th><th></th></tr></thead>
                            <tbody>
                            {list.into_iter().map(|k| {
                                let id = k.id.clone();
                                let active = k.status == "active";
                                let revoke = revoke.clone();
                                let (rid, eid) = (id.clone(), id.clone());
                                let burns: Vec<BudgetBurn> = burn
                                    .get_untracked()
                                    .into_iter()
                                    .filter(|b| b.scope == "key" && b.subject.as_deref() == Some(id.as_str()))
                                    .collect();
                                let per_alias = k.alias_limits.iter().map(|(a, l)| format!("{a}: {}", limits_text(l))).collect::<Vec<_>>();
                                view! {
                                    <tr>
                                        <td>{id.clone()}</td>
                                        <td><code>{format!("{}…", k.prefix)}</code></td>
                                        <td>{k.status.clone()}</td>
                                        <td class="burns" data-label="limits & budgets">
                                            <div>{limits_text(&k.limits)}</div>
                                            {(!per_alias.is_empty()).then(|| view! { <div class="muted">{per_alias.join(" · ")}</div> })}
                                            {burns.into_iter().map(|b| view! { <Burn b=b/> }).collect_view()}
                                        </td>
                                        <td>{k.created_at.replace('T', " ")}</td>
                                        <td>{k.expires_at.clone().unwrap_or_else(|| "never".to_owned())}</td>
                                        <td class="row-actions">
                                            {operator().then(|| view! { <button class="edit-key" on:click=move |_| editing.set(eid.clone())>"Edit"</button> })}
                                            {(active && admin()).then(|| view! { <button on:click=move |_| revoke(rid.clone())>"Revoke"</button> })}
                                        </td>
                                    </tr>
                                }
                            }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any()
                }
            }}
            {move || {
                let id = editing.get();
                let k = keys.get().and_then(|r| r.ok()).and_then(|l| l.into_iter().find(|k| k.id == id))?;
                let load = load.clone();
                Some(view! { <KeyEditor k=k close=Callback::new(move |saved: bool| {
                    editing.set(String::new());
                    if saved { load(); reload.run(()); }
                })/> })
            }}
        </section>
    }
}

/// One per-alias limit of a key as edited.
#[derive(Clone, Copy)]
struct AliasLimitRow {
    id: usize,
    alias: RwSignal<String>,
    rpm: RwSignal<String>,
    tpm: RwSignal<String>,
    concurrency: RwSignal<String>,
}

impl AliasLimitRow {
    fn new(id: usize, alias: &str, l: &LimitsSpec) -> Self {
        let text = |v: Option<u32>| RwSignal::new(v.map(|v| v.to_string()).unwrap_or_default());
        Self {
            id,
            alias: RwSignal::new(alias.to_owned()),
            rpm: text(l.rpm),
            tpm: text(l.tpm),
            concurrency: text(l.concurrency),
        }
    }
}

/// A key's limits, its limits per alias and its own budgets (operator), saved whole with
/// `PUT /keys/{id}`.
#[component]
fn KeyEditor(k: KeyView, close: Callback<bool>) -> impl IntoView {
    let error = RwSignal::new(None::<ApiError>);
    let busy = RwSignal::new(false);
    let limits = json!({ "limits": k.limits });
    let fields = [
        form::Field::new(&limits, "limits.rpm", "Requests per minute"),
        form::Field::new(&limits, "limits.tpm", "Tokens per minute"),
        form::Field::new(&limits, "limits.concurrency", "In flight"),
    ];
    let rows: Vec<AliasLimitRow> =
        k.alias_limits.iter().enumerate().map(|(i, (a, l))| AliasLimitRow::new(i, a, l)).collect();
    let next = StoredValue::new(rows.len());
    let per_alias = RwSignal::new(rows);
    let budgets = budget_rows(&k.budgets);
    let id = k.id.clone();
    let save = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let mut body = json!({ "limits": {}, "alias_limits": {} });
        for f in &fields {
            f.apply(&mut body);
        }
        for r in per_alias.get_untracked() {
            let mut l = json!({});
            form::put(&mut l, "rpm", form::typed(&r.rpm.get_untracked()));
            form::put(&mut l, "tpm", form::typed(&r.tpm.get_untracked()));
            form::put(&mut l, "concurrency", form::typed(&r.concurrency.get_untracked()));
            body["alias_limits"][r.alias.get_untracked().trim()] = l;
        }
        body["budgets"] = budgets.get_untracked().iter().map(BudgetRow::body).collect();
        put_and_close::<KeyPolicySaved>(format!("/api/v1/keys/{id}"), body, busy, error, close);
    };
    view! {
        <form class="editor key-editor" on:submit=save aria-label=format!("edit key {}", k.id)>
            <h2>{format!("Key {}", k.id)}</h2>
            <fieldset><legend>"Limits (blank: unlimited; on top of the tenant's)"</legend>
                <div class="fields">{fields.map(|f| f.view(error, "")).collect_view()}</div>
                {form::error_at(error, "limits".into())}
            </fieldset>
            <fieldset><legend>"Limits per alias"</legend>
                {move || per_alias.get().into_iter().map(|r| {
                    let rid = r.id;
                    let input = |name: &'static str, label: &'static str, v: RwSignal<String>| view! {
                        <label class="field"><span>{label}</span>
                            <input type="text" name=name prop:value=move || v.get() on:input=move |ev| v.set(event_target_value(&ev))/></label>
                    };
                    view! {
                        <div class="alias-limit-row fields">
                            {input("alias-limit-alias", "Alias", r.alias)}
                            {input("alias-limit-rpm", "Requests per minute", r.rpm)}
                            {input("alias-limit-tpm", "Tokens per minute", r.tpm)}
                            {input("alias-limit-concurrency", "In flight", r.concurrency)}
                            <button type="button" class="link" on:click=move |_| per_alias.update(|l| l.retain(|x| x.id != rid))>"Remove"</button>
                        </div>
                    }
                }).collect_view()}
                <div>{form::error_at(error, "alias_limits*".into())}</div>
                <button type="button" class="add-alias-limit" on:click=move |_| {
                    let id = next.get_value();
                    next.set_value(id + 1);
                    per_alias.update(|l| l.push(AliasLimitRow::new(id, "", &LimitsSpec::default())));
                }>"Add alias limit"</button>
            </fieldset>
            <fieldset><legend>"Budgets (on top of the tenant's)"</legend>
                <BudgetsEditor budgets=budgets error=error/>
            </fieldset>
            <EditorEnd error=error busy=busy close=close save="Save key" placed=|p| p.starts_with("limits") || p.starts_with("alias_limits") || p.starts_with("budgets[")/>
        </form>
    }
}

/// Groups of tenants (an organization, a department) and their pooled budgets with the burn.
#[component]
fn Groups(burn: RwSignal<Vec<BudgetBurn>>, reload: Callback<()>) -> impl IntoView {
    let auth = expect_context::<Auth>();
    let admin = move || auth.0.get().is_some_and(|s| s.at_least("admin"));
    let operator = move || auth.0.get().is_some_and(|s| s.at_least("operator"));
    let groups = RwSignal::new(None::<Result<Vec<GroupView>, ApiError>>);
    let editing = RwSignal::new(String::new());
    let load = move || {
        leptos::task::spawn_local(async move {
            let r = api::get::<GroupList>("/api/v1/groups").await;
            groups.set(Some(r.map(|l| l.groups)));
        });
    };
    // Loaded now, and again whenever the burn is (after a tenant joins or leaves a group).
    Effect::new(move |_| {
        burn.track();
        load();
    });
    let new_id = RwSignal::new(String::new());
    let create_error = RwSignal::new(None::<ApiError>);
    let create = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let id = new_id.get_untracked().trim().to_owned();
        leptos::task::spawn_local(async move {
            match api::send::<GroupSaved, _>("PUT", &format!("/api/v1/groups/{id}"), &json!({ "budgets": [] })).await {
                Ok(_) => {
                    create_error.set(None);
                    new_id.set(String::new());
                    editing.set(id);
                    load();
                }
                Err(e) => create_error.set(Some(e)),
            }
        });
    };
    view! {
        <section class="groups" aria-label="groups">
            <h2>"Groups"</h2>
            <p class="muted">"A group's budgets pool the spend of every tenant that names it (Edit a tenant to add it)."</p>
            <Show when=admin>
                <form class="inline-form" on:submit=create aria-label="new group">
                    <label>"New group "
                        <input name="group-id" placeholder="id, e.g. research" prop:value=move || new_id.get()
                            on:input=move |ev| new_id.set(event_target_value(&ev))/></label>
                    <button type="submit">"Create group"</button>
                    {move || create_error.get().map(|e| {
                        let msg = e.fields.first().map_or(e.message.clone(), |(p, m)| format!("{p}: {m}"));
                        view! { <p class="field-error" role="alert">{msg}</p> }
                    })}
                </form>
            </Show>
            {move || match crate::loaded(groups.get()) {
                Err(pending) => pending,
                Ok(list) if list.is_empty() => view! { <p class="muted">"No group yet."</p> }.into_any(),
                Ok(list) => view! {
                    <table class="group-list">
                        <thead><tr><th>"Group"</th><th>"Tenants"</th><th>"Budgets (spent of cap)"</th><th></th></tr></thead>
                        <tbody>
                        {list.into_iter().map(|g| {
                            let edit = g.id.clone();
                            let burns: Vec<BudgetBurn> = burn
                                .get_untracked()
                                .into_iter()
                                .filter(|b| b.scope == "group" && b.subject.as_deref() == Some(g.id.as_str()))
                                .collect();
                            view! {
                                <tr>
                                    <td>{g.id.clone()}</td>
                                    <td data-label="tenants">{if g.tenants.is_empty() { "none".to_owned() } else { g.tenants.join(", ") }}</td>
                                    <td class="burns" data-label="budgets">
                                        {g.budgets.is_empty().then_some("none")}
                                        {burns.into_iter().map(|b| view! { <Burn b=b/> }).collect_view()}
                                    </td>
                                    <td class="row-actions">
                                        {operator().then(|| view! { <button on:click=move |_| editing.set(edit.clone())>"Edit"</button> })}
                                    </td>
                                </tr>
                            }
                        }).collect_view()}
                        </tbody>
                    </table>
                }.into_any(),
            }}
            {move || {
                let id = editing.get();
                let g = groups.get().and_then(|r| r.ok()).and_then(|l| l.into_iter().find(|g| g.id == id))?;
                Some(view! { <GroupEditor g=g close=Callback::new(move |saved: bool| {
                    editing.set(String::new());
                    if saved { load(); reload.run(()); }
                })/> })
            }}
        </section>
    }
}

#[component]
fn GroupEditor(g: GroupView, close: Callback<bool>) -> impl IntoView {
    let error = RwSignal::new(None::<ApiError>);
    let busy = RwSignal::new(false);
    let budgets = budget_rows(&g.budgets);
    let id = g.id.clone();
    let save = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let body = json!({ "budgets": budgets.get_untracked().iter().map(BudgetRow::body).collect::<Vec<_>>() });
        put_and_close::<GroupSaved>(format!("/api/v1/groups/{id}"), body, busy, error, close);
    };
    view! {
        <form class="editor group-editor" on:submit=save aria-label=format!("edit group {}", g.id)>
            <h2>{format!("Group {}", g.id)}</h2>
            <fieldset><legend>"Pooled budgets"</legend>
                <BudgetsEditor budgets=budgets error=error/>
            </fieldset>
            <EditorEnd error=error busy=busy close=close save="Save group" placed=|p| p.starts_with("budgets[")/>
        </form>
    }
}
