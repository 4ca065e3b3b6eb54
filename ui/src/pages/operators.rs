//! Operator accounts (admin): who may use this UI and the admin API, and with which role. A new
//! operator, or one whose password is reset, gets a one-time password shown here once; the last
//! enabled admin cannot be demoted or disabled (the server says so).

use ax_protocol::admin::{OperatorList, OperatorPassword, OperatorView};
use leptos::prelude::*;
use serde_json::json;

use crate::api::{self, ApiError};

const ROLES: [&str; 3] = ["admin", "operator", "finance"];

#[component]
pub fn Operators() -> impl IntoView {
    let data = RwSignal::new(None::<Result<Vec<OperatorView>, ApiError>>);
    let error = RwSignal::new(None::<ApiError>);
    // (username, one-time password), shown once.
    let shown = RwSignal::new(None::<(String, String)>);
    let username = RwSignal::new(String::new());
    let role = RwSignal::new("operator".to_owned());
    let load = move || {
        leptos::task::spawn_local(async move {
            let r = api::get::<OperatorList>("/api/v1/operators").await;
            data.set(Some(r.map(|l| l.operators)));
        });
    };
    load();
    let create = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let body = json!({ "username": username.get_untracked().trim(), "role": role.get_untracked() });
        leptos::task::spawn_local(async move {
            match api::send::<OperatorPassword, _>("POST", "/api/v1/operators", &body).await {
                Ok(p) => {
                    shown.set(Some((p.operator.username, p.one_time_password)));
                    username.set(String::new());
                    error.set(None);
                    load();
                }
                Err(e) => error.set(Some(e)),
            }
        });
    };
    let change = move |name: String, body: serde_json::Value| {
        leptos::task::spawn_local(async move {
            match api::send::<OperatorView, _>("PUT", &format!("/api/v1/operators/{name}"), &body).await {
                Ok(_) => error.set(None),
                Err(e) => error.set(Some(e)),
            }
            load();
        });
    };
    // A refused role change (the last admin) puts the select back to the role the server kept.
    let set_role = move |name: String, prev: String, select: web_sys::HtmlSelectElement| {
        leptos::task::spawn_local(async move {
            let body = json!({ "role": select.value() });
            match api::send::<OperatorView, _>("PUT", &format!("/api/v1/operators/{name}"), &body).await {
                Ok(_) => error.set(None),
                Err(e) => {
                    select.set_value(&prev);
                    error.set(Some(e));
                }
            }
            load();
        });
    };
    let reset = move |name: String| {
        let ok = window()
            .confirm_with_message(&format!("Give {name} a new one-time password? Its sessions end now."))
            .unwrap_or(false);
        if !ok {
            return;
        }
        leptos::task::spawn_local(async move {
            match api::send_empty::<OperatorPassword>("POST", &format!("/api/v1/operators/{name}/reset-password")).await
            {
                Ok(p) => {
                    shown.set(Some((name, p.one_time_password)));
                    error.set(None);
                    load();
                }
                Err(e) => error.set(Some(e)),
            }
        });
    };
    view! {
        <h1>"Operators"</h1>
        <form class="filters" aria-label="new operator" on:submit=create>
            <label>"Username " <input name="username" required prop:value=move || username.get() on:input=move |ev| username.set(event_target_value(&ev))/></label>
            <label>"Role "
                <select name="role" on:change=move |ev| role.set(event_target_value(&ev))>
                    {ROLES.iter().map(|r| view! { <option value=*r selected=*r == "operator">{*r}</option> }).collect_view()}
                </select>
            </label>
            <button type="submit" class="primary">"Create operator"</button>
        </form>
        {move || error.get().map(|e| view! {
            <p class="error" role="alert">{e.field("username").map_or(e.message.clone(), |m| format!("Username: {m}"))}</p>
        })}
        {move || shown.get().map(|(name, password)| view! {
            <div class="new-key" role="status">
                <p>{format!("One-time password for {name}, shown this once: give it to them; at their first login they choose their own.")}</p>
                <code class="one-time-password">{password}</code>
                <button on:click=move |_| shown.set(None)>"Done"</button>
            </div>
        })}
        {move || match crate::loaded(data.get()) {
            Err(pending) => pending,
            Ok(list) => view! {
                <table class="operators">
                    <thead><tr><th>"Operator"</th><th>"Signs in with"</th><th>"Role"</th><th>"State"</th><th>"Sessions"</th><th>"Created (UTC)"</th><th></th></tr></thead>
                    <tbody>
                    {list.into_iter().map(|o| {
                        let (name, name2, name3) = (o.username.clone(), o.username.clone(), o.username.clone());
                        let (current, prev) = (o.role.clone(), o.role.clone());
                        let state = match (o.disabled, o.must_change_password) {
                            (true, _) => "disabled",
                            (false, true) => "one-time password pending",
                            (false, false) => "active",
                        };
                        let disabled = o.disabled;
                        let sso = o.sso;
                        view! {
                            <tr data-operator=o.username.clone()>
                                <td>{o.username.clone()}</td>
                                <td>{if sso { "single sign-on" } else { "password" }}</td>
                                <td>
                                    <select aria-label=format!("role of {}", o.username) on:change=move |ev| set_role(name.clone(), prev.clone(), event_target::<web_sys::HtmlSelectElement>(&ev))>
                                        {ROLES.iter().map(|r| view! { <option value=*r selected=*r == current>{*r}</option> }).collect_view()}
                                    </select>
                                </td>
                                <td class=if disabled { "bad" } else { "" }>{state}</td>
                                <td class="num">{o.sessions}</td>
                                <td>{o.created_at.replace('T', " ")}</td>
                                <td>
                                    <button on:click=move |_| change(name2.clone(), json!({ "disabled": !disabled }))>
                                        {if disabled { "Enable" } else { "Disable" }}
                                    </button>
                                    <Show when=move || !sso>
                                        <button on:click={let n = name3.clone(); move |_| reset(n.clone())}>"Reset password"</button>
                                    </Show>
                                </td>
                            </tr>
                        }
                    }).collect_view()}
                    </tbody>
                </table>
            }.into_any(),
        }}
    }
}
