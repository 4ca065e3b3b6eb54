//! Versions: every committed configuration, newest first; any earlier one can be restored (after a
//! confirmation), which commits it as a new version.

use ax_protocol::admin::{RolledBack, VersionList, VersionView};
use leptos::prelude::*;

use crate::api::{self, ApiError};

#[component]
pub fn Versions() -> impl IntoView {
    let data = RwSignal::new(None::<Result<Vec<VersionView>, ApiError>>);
    let message = RwSignal::new(None::<Result<String, ApiError>>);
    let load = move || {
        leptos::task::spawn_local(async move {
            let r = api::get::<VersionList>("/api/v1/versions").await;
            data.set(Some(r.map(|l| l.versions)));
        });
    };
    load();
    let rollback = move |v: i64| {
        let ok = window()
            .confirm_with_message(&format!("Restore version {v}? It becomes the newest version."))
            .unwrap_or(false);
        if !ok {
            return;
        }
        leptos::task::spawn_local(async move {
            let r = api::send_empty::<RolledBack>("POST", &format!("/api/v1/versions/{v}/rollback")).await;
            message.set(Some(r.map(|x| format!("Version {v} restored as version {}.", x.version))));
            load();
        });
    };
    view! {
        <h1>"Versions"</h1>
        {move || message.get().map(|m| match m {
            Ok(t) => view! { <p class="ok" role="status">{t}</p> }.into_any(),
            Err(e) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
        })}
        {move || match crate::loaded(data.get()) {
            Err(pending) => pending,
            Ok(list) => view! {
                <table class="versions">
                    <thead><tr><th>"Version"</th><th>"When (UTC)"</th><th>"Who"</th><th>"What"</th><th></th></tr></thead>
                    <tbody>
                    {list.into_iter().enumerate().map(|(i, v)| {
                        let n = v.version;
                        view! {
                            <tr>
                                <td>{n}</td>
                                <td>{v.created_at.replace('T', " ")}</td>
                                <td>{v.author}</td>
                                <td>{v.summary}</td>
                                <td>{(i > 0).then(|| view! { <button on:click=move |_| rollback(n)>"Restore"</button> })}</td>
                            </tr>
                        }
                    }).collect_view()}
                    </tbody>
                </table>
            }.into_any(),
        }}
    }
}
