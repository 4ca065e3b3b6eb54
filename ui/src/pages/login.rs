//! Login: the control plane sets the session cookie; a wrong password and the throttling lockout
//! get their own messages. With single sign-on configured the page offers its button (a plain
//! navigation to `/api/v1/sso/login`, which comes back here with `?sso_error=` if it fails), and
//! the password form only if passwords are on.

use ax_protocol::admin::SignInOptions;
use leptos::prelude::*;
use leptos_router::hooks::use_query_map;
use serde_json::json;

use crate::{api, Auth, Session};

/// What a failed single sign-on's `?sso_error=` code means to the operator.
fn sso_message(code: &str) -> &'static str {
    match code {
        "sso_denied" => "The sign-in provider did not sign you in (cancelled or refused). Try again.",
        "sso_no_role" => {
            "Your account at the sign-in provider has no group that gives a role here: ask an admin to grant one."
        }
        "sso_state_invalid" => "The sign-in expired or began in another browser. Try again.",
        "sso_token_invalid" => "The sign-in provider's answer did not verify. Try again, or tell an admin.",
        "sso_provider_unavailable" => "The sign-in provider cannot be reached. Try again later.",
        "operator_disabled" => "Your operator account is disabled: ask an admin.",
        "sso_username_taken" => "An operator with your name already logs in with a password: ask an admin.",
        "sso_username_invalid" => "Your name at the sign-in provider cannot name an operator here: ask an admin.",
        _ => "Single sign-on failed. Try again, or tell an admin.",
    }
}

#[component]
pub fn Login() -> impl IntoView {
    let auth = expect_context::<Auth>();
    let username = RwSignal::new(String::new());
    let password = RwSignal::new(String::new());
    let query = use_query_map();
    let error = RwSignal::new(query.get_untracked().get("sso_error").map(|c| sso_message(&c).to_owned()));
    let busy = RwSignal::new(false);
    // Until the control plane answers: passwords, no button (the usual case, no flash).
    let options = RwSignal::new(SignInOptions { password: true, sso: None });
    leptos::task::spawn_local(async move {
        if let Ok(o) = api::get::<SignInOptions>("/api/v1/sso").await {
            options.set(o);
        }
    });
    // Back to the page the operator opened (a deep link), not to the failed sign-in's URL.
    let next = web_sys::window().and_then(|w| w.location().pathname().ok()).unwrap_or_else(|| "/".to_owned());
    let sso_href = format!("/api/v1/sso/login?next={}", js_sys::encode_uri_component(&next));
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        busy.set(true);
        error.set(None);
        let body = json!({ "username": username.get_untracked(), "password": password.get_untracked() });
        leptos::task::spawn_local(async move {
            match api::send::<Session, _>("POST", "/api/v1/login", &body).await {
                Ok(s) => crate::set_session(auth, Some(s)),
                Err(e) => error.set(Some(match e.code.as_str() {
                    "invalid_credentials" => "Wrong username or password.".to_owned(),
                    "login_throttled" => "Too many failed attempts: login is locked for a few minutes.".to_owned(),
                    _ => e.message,
                })),
            }
            busy.set(false);
        });
    };
    view! {
        <section class="login">
            <h1>"ax"</h1>
            // `rel="external"`: a full page load, not the router's client-side navigation.
            {move || options.get().sso.map(|label| view! {
                <a class="button primary sso" rel="external" href=sso_href.clone()>{label}</a>
            })}
            <Show when=move || options.get().sso.is_some() && options.get().password>
                <p class="or">"or with a password"</p>
            </Show>
            <Show when=move || error.get().is_some() && !options.get().password>
                <p class="error" role="alert">{move || error.get()}</p>
            </Show>
            <Show when=move || options.get().password>
            <form on:submit=submit>
                <label>"Username"
                    <input name="username" autocomplete="username" required
                        prop:value=move || username.get() on:input=move |ev| username.set(event_target_value(&ev))/>
                </label>
                <label>"Password"
                    <input name="password" type="password" autocomplete="current-password" required
                        prop:value=move || password.get() on:input=move |ev| password.set(event_target_value(&ev))/>
                </label>
                <Show when=move || error.get().is_some()>
                    <p class="error" role="alert">{move || error.get()}</p>
                </Show>
                <button type="submit" disabled=move || busy.get()>
                    {move || if busy.get() { "Logging in…" } else { "Log in" }}
                </button>
            </form>
            </Show>
        </section>
    }
}

/// After a login with a one-time password: the operator chooses its own before anything else
/// (the server refuses every other call until then).
#[component]
pub fn ChoosePassword() -> impl IntoView {
    let auth = expect_context::<Auth>();
    let current = RwSignal::new(String::new());
    let new = RwSignal::new(String::new());
    let error = RwSignal::new(None::<api::ApiError>);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let body = json!({ "current_password": current.get_untracked(), "new_password": new.get_untracked() });
        leptos::task::spawn_local(async move {
            match api::send::<(), _>("POST", "/api/v1/session/password", &body).await {
                Ok(()) => {
                    if let Ok(s) = api::get::<Session>("/api/v1/session").await {
                        crate::set_session(auth, Some(s));
                    }
                }
                Err(e) => error.set(Some(e)),
            }
        });
    };
    let field = move |path: &'static str| error.get().and_then(|e| e.field(path));
    view! {
        <section class="login">
            <h1>"Choose your password"</h1>
            <p>"You logged in with a one-time password. Choose your own (12 characters or more) to go on."</p>
            <form on:submit=submit>
                <label>"One-time password"
                    <input name="current_password" type="password" autocomplete="current-password" required
                        prop:value=move || current.get() on:input=move |ev| current.set(event_target_value(&ev))/>
                </label>
                {move || field("current_password").map(|m| view! { <p class="field-error">{m}</p> })}
                <label>"New password"
                    <input name="new_password" type="password" autocomplete="new-password" required minlength="12"
                        prop:value=move || new.get() on:input=move |ev| new.set(event_target_value(&ev))/>
                </label>
                {move || field("new_password").map(|m| view! { <p class="field-error">{m}</p> })}
                {move || error.get().filter(|e| e.fields.is_empty()).map(|e| view! { <p class="error" role="alert">{e.message}</p> })}
                <button type="submit" class="primary">"Save and continue"</button>
            </form>
        </section>
    }
}
