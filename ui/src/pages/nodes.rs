//! Data planes: each node, its applied version against the latest, last seen, connections, usage
//! records kept aside (dead letters), last error and its health summary (per upstream: breaker,
//! requests, success rate, p95 latency).
//! Refreshed every 2 s.

use ax_protocol::admin::NodeList;
use leptos::prelude::*;

use crate::api::{self, ApiError};
use crate::fmt;

#[component]
pub fn Nodes() -> impl IntoView {
    let data = RwSignal::new(None::<Result<NodeList, ApiError>>);
    crate::every(2000, move || async move { data.set(Some(api::get::<NodeList>("/api/v1/nodes").await)) });
    view! {
        <h1>"Data planes"</h1>
        {move || match crate::loaded(data.get()) {
            Err(pending) => pending,
            Ok(v) => {
                let latest = v.latest_version;
                let now = js_sys::Date::now();
                let nodes = v.nodes;
                view! {
                    <p>{latest.map(|l| format!("Latest version: {l}"))}</p>
                    <table class="nodes">
                        <thead><tr><th>"Node"</th><th>"Applied"</th><th>"Connected"</th><th>"Dead letters"</th><th>"Last seen"</th><th>"Upstreams"</th><th>"Last error"</th></tr></thead>
                        <tbody>
                        {nodes.into_iter().map(|n| {
                            let applied = n.applied_version;
                            let behind = matches!((applied, latest), (Some(a), Some(l)) if a < l) || applied.is_none();
                            let ups = n.health.map(|h| h.upstreams).unwrap_or_default();
                            let dead_letters = n.dead_letters;
                            view! {
                                <tr class:behind=behind>
                                    <td>{n.id}</td>
                                    <td>{applied.map_or_else(|| "none".to_owned(), |a| a.to_string())}</td>
                                    <td>{match (n.connected, n.connections) {
                                        (false, _) => "no".to_owned(),
                                        (true, c) if c > 1 => format!("yes ({c} processes)"),
                                        (true, _) => "yes".to_owned(),
                                    }}</td>
                                    <td class:error={dead_letters > 0}>{fmt::int(dead_letters)}</td>
                                    <td>{n.last_seen.as_deref().map_or_else(|| "never".to_owned(), |s| fmt::ago(s, now))}</td>
                                    <td>{ups.into_iter().map(|u| {
                                        let mut up = super::overview::Up::default();
                                        up.add(&u);
                                        view! {
                                            <div class="upstream">
                                                {format!("{} · breaker {} · {} req · {} ok · p95 {}",
                                                    u.upstream, up.breakers.join(", "),
                                                    fmt::int(up.requests as i64), up.success(), fmt::ms(up.p95))}
                                            </div>
                                        }
                                    }).collect_view()}</td>
                                    <td class="error">{n.last_error.unwrap_or_default()}</td>
                                </tr>
                            }
                        }).collect_view()}
                        </tbody>
                    </table>
                }.into_any()
            }
        }}
    }
}
