//! Governance: exact cost, the durable usage spool, keys.

use ax_tests::{key_digest, post, wire, FakeUpstream, Gateway, Reply, KEY};
use serde_json::json;

fn priced(provider: &str, url: &str) -> String {
    format!(
        r#"
upstreams:
  - {{ name: up, provider: {provider}, base_url: "{url}",
      models: [{{ name: m, context_window: 200000, capabilities: [chat, streaming],
                 price_per_mtok: {{ input: 3.0, output: 15.0, cached_input: 0.3, cache_write: 3.75 }} }}] }}
routes:
  - {{ alias: chat, candidates: [{{ upstream: up, model: m }}] }}
tenants:
  - {{ id: t, keys: [{{ id: k, sha256: "{}" }}] }}
"#,
        key_digest(KEY)
    )
}

/// Anthropic usage with cache reads and writes, priced by hand: 1,200 uncached input × $3 +
/// 10,000 cache reads × $0.30 + 2,000 cache writes × $3.75 + 850 output × $15 per Mtok = $0.026850.
#[tokio::test]
async fn cost_with_cache_reads_and_writes_is_exact() {
    let up = FakeUpstream::fixed(Reply::json(wire::anthropic_response(
        Some("x"),
        &[],
        "end_turn",
        (1_200, 850, 2_000, 10_000),
    )))
    .await;
    let gw = Gateway::start(&priced("anthropic", &up.url())).await;
    let resp = post(
        &gw.url,
        "/v1/chat/completions",
        &json!({ "model": "chat", "messages": [{ "role": "user", "content": "hi" }] }),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-ax-cost-usd"], "0.026850");
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(v["usage"]["prompt_tokens"], 13_200);
}
