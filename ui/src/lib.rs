//! The ax admin UI. Operators steer traffic (routes and weights, with a preview before saving and
//! the data planes' acknowledgements after), finance reads cost. It talks to the control plane
//! only through the documented admin API (`/api/v1`); the server enforces roles, the UI hides
//! what a role cannot do.
//!
//! Layout: `api` (fetch, CSRF, errors with field paths), `fmt` (numbers for humans), `form`
//! (inputs bound to JSON bodies, field errors), `pages/*`
//! (one module per page), this file (session, navigation, routing).

use leptos::prelude::*;
use leptos_router::components::{Route, Router, Routes, A};
use leptos_router::hooks::use_navigate;
use leptos_router::path;
use serde::Deserialize;
use wasm_bindgen::prelude::wasm_bindgen;

mod api;
mod fmt;
mod form;
mod pages;

/// Who is logged in (`GET /api/v1/session`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Session {
    pub username: String,
    pub role: String,
    pub csrf_token: String,
    /// Logged in with a one-time password: it chooses its own before anything else.
    #[serde(default)]
    pub must_change_password: bool,
}

impl Session {
    /// finance < operator < admin, as on the server.
    pub fn at_least(&self, role: &str) -> bool {
        let rank = |r: &str| match r {
            "admin" => 3,
            "operator" => 2,
            "finance" => 1,
            _ => 0,
        };
        rank(&self.role) >= rank(role)
    }
}

/// The session, for every page: `None` while unknown or logged out.
#[derive(Clone, Copy)]
pub struct Auth(pub RwSignal<Option<Session>>);

thread_local! {
    static CSRF: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// The session's CSRF token (sent on every mutation).
pub fn csrf() -> String {
    CSRF.with(|c| c.borrow().clone())
}

fn set_session(auth: Auth, s: Option<Session>) {
    CSRF.with(|c| *c.borrow_mut() = s.as_ref().map(|s| s.csrf_token.clone()).unwrap_or_default());
    auth.0.set(s);
}

#[wasm_bindgen(start)]
pub fn start() {
    console_error_panic_hook::set_once();
    leptos::mount::mount_to_body(App);
}

#[component]
fn App() -> impl IntoView {
    let auth = Auth(RwSignal::new(None));
    provide_context(auth);
    // Unknown until the first answer: avoids a flash of the login form for a logged-in operator.
    let checked = RwSignal::new(false);
    leptos::task::spawn_local(async move {
        if let Ok(s) = api::get::<Session>("/api/v1/session").await {
            set_session(auth, Some(s));
        }
        checked.set(true);
    });
    view! {
        <Router>
            <Show when=move || checked.get() fallback=|| view! { <p class="loading">"Loading…"</p> }>
                <Show when=move || auth.0.get().is_some() fallback=pages::login::Login>
                    <Show when=move || auth.0.get().is_some_and(|s| !s.must_change_password) fallback=pages::login::ChoosePassword>
                        <Shell/>
                    </Show>
                </Show>
            </Show>
        </Router>
    }
}

/// Navigation and the page for the current URL.
#[component]
fn Shell() -> impl IntoView {
    let auth = expect_context::<Auth>();
    let role = move |r: &'static str| auth.0.get().is_some_and(|s| s.at_least(r));
    // After a logout the next login (maybe another user's) starts at its own home page, not at
    // the page this one left open (a deep link opened while logged out is kept).
    let navigate = use_navigate();
    let logout = move |_| {
        let navigate = navigate.clone();
        leptos::task::spawn_local(async move {
            let _ = api::send_empty::<()>("POST", "/api/v1/logout").await;
            set_session(auth, None);
            navigate("/", Default::default());
        });
    };
    view! {
        <header class="top">
            <span class="brand">"ax"</span>
            <nav aria-label="pages">
                <Show when=move || role("operator")>
                    <A href="/overview">"Overview"</A>
                    <A href="/requests">"Requests"</A>
                    <A href="/routes">"Routes"</A>
                    <A href="/upstreams">"Upstreams"</A>
                    <A href="/nodes">"Data planes"</A>
                    <A href="/versions">"Versions"</A>
                    <A href="/tenants">"Tenants & keys"</A>
                    <A href="/audit">"Audit"</A>
                </Show>
                <Show when=move || role("admin")>
                    <A href="/operators">"Operators"</A>
                </Show>
                <A href="/reports">"Cost"</A>
            </nav>
            <span class="who">
                {move || auth.0.get().map(|s| format!("{} · {}", s.username, s.role))}
                <button class="link" on:click=logout>"Log out"</button>
            </span>
        </header>
        <main>
            <Routes fallback=|| view! { <p>"No such page."</p> }>
                <Route path=path!("/") view=Home/>
                <Route path=path!("/overview") view=move || guarded("operator", pages::overview::Overview)/>
                <Route path=path!("/routes") view=move || guarded("operator", pages::routes::RoutesPage)/>
                <Route path=path!("/audit") view=move || guarded("operator", pages::audit::Audit)/>
                <Route path=path!("/requests") view=move || guarded("operator", pages::requests::Requests)/>
                <Route path=path!("/upstreams") view=move || guarded("operator", pages::upstreams::Upstreams)/>
                <Route path=path!("/nodes") view=move || guarded("operator", pages::nodes::Nodes)/>
                <Route path=path!("/versions") view=move || guarded("operator", pages::versions::Versions)/>
                <Route path=path!("/tenants") view=move || guarded("operator", pages::tenants::Tenants)/>
                <Route path=path!("/operators") view=move || guarded("admin", pages::operators::Operators)/>
                <Route path=path!("/reports") view=pages::reports::Reports/>
            </Routes>
        </main>
    }
}

/// Finance lands on the cost report, everyone else on the overview.
#[component]
fn Home() -> impl IntoView {
    let auth = expect_context::<Auth>();
    let navigate = use_navigate();
    let to = if auth.0.get_untracked().is_some_and(|s| s.at_least("operator")) { "/overview" } else { "/reports" };
    Effect::new(move |_| navigate(to, Default::default()));
}

/// A page's data as it loads: its value, or what the page shows meanwhile ("Loading…", or the
/// server's error).
pub fn loaded<T>(data: Option<Result<T, api::ApiError>>) -> Result<T, AnyView> {
    match data {
        None => Err(view! { <p class="loading">"Loading…"</p> }.into_any()),
        Some(Err(e)) => Err(view! { <p class="error" role="alert">{e.message}</p> }.into_any()),
        Some(Ok(v)) => Ok(v),
    }
}

/// Runs `tick` now and then every `ms` for as long as the calling page is shown. The flag is a
/// plain atomic, not a signal: the loop wakes after the page (and every signal it owned) is
/// gone, and reading a disposed signal panics (a `tick` may still `set` its page's signals: a set
/// on a disposed signal does nothing).
pub fn every<F: std::future::Future<Output = ()> + 'static>(ms: u32, tick: impl Fn() -> F + 'static) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let alive = std::sync::Arc::new(AtomicBool::new(true));
    let ended = alive.clone();
    on_cleanup(move || ended.store(false, Ordering::Relaxed));
    leptos::task::spawn_local(async move {
        while alive.load(Ordering::Relaxed) {
            tick().await;
            if !alive.load(Ordering::Relaxed) {
                break;
            }
            gloo_timers::future::TimeoutFuture::new(ms).await;
        }
    });
}

/// The page if the role allows it; "not allowed" otherwise (the server would answer 403 anyway).
fn guarded<V: IntoView + 'static>(role: &'static str, page: impl Fn() -> V + Send + 'static) -> AnyView {
    let auth = expect_context::<Auth>();
    if auth.0.get_untracked().is_some_and(|s| s.at_least(role)) {
        page().into_any()
    } else {
        view! {
            <section class="denied" role="alert">
                <h1>"Not allowed"</h1>
                <p>{format!("This page needs the {role} role.")}</p>
            </section>
        }
        .into_any()
    }
}
