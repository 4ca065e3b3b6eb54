//! The ingress contract: each rejection has its documented status and code, request ids are
//! echoed, unsupported parameters follow strict or lenient mode, and metrics are exposed.

use ax_tests::{post, wire, FakeUpstream, Gateway, Reply, KEY};
use serde_json::{json, Value};

use crate::config;

async fn setup(params: &str) -> (FakeUpstream, Gateway) {
    let up =
        FakeUpstream::fixed(Reply::json(wire::anthropic_response(Some("ok"), &[], "end_turn", (1, 1, 0, 0)))).await;
    let gw = Gateway::start(&config("anthropic", &up.url(), params)).await;
    (up, gw)
}

async fn expect_error(resp: reqwest::Response, status: u16, code: &str) -> Value {
    assert_eq!(resp.status(), status, "expected {code}");
    assert_eq!(resp.headers()["content-type"], "application/json");
    let rid = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], code, "{v}");
    assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert!(v["error"]["type"].as_str().is_some());
    assert_eq!(v["request_id"], rid.as_str(), "error body carries the request id");
    v
}

fn hello(model: &str) -> Value {
    json!({ "model": model, "messages": [{ "role": "user", "content": "hi" }] })
}

#[tokio::test]
async fn documented_rejections() {
    let (up, gw) = setup("strict").await;
    let client = reqwest::Client::new();
    let url = format!("{}/v1/chat/completions", gw.url);

    // Unknown alias → 404 model_not_found.
    let v = expect_error(post(&gw.url, "/v1/chat/completions", &hello("nope")).await, 404, "model_not_found").await;
    assert_eq!(v["error"]["param"], "model");
    // Missing key → 401; wrong key → 401.
    expect_error(client.post(&url).json(&hello("chat")).send().await.unwrap(), 401, "missing_api_key").await;
    expect_error(
        client.post(&url).bearer_auth("ax-wrong").json(&hello("chat")).send().await.unwrap(),
        401,
        "invalid_api_key",
    )
    .await;
    // The auth scheme is case-insensitive.
    let resp =
        client.post(&url).header("authorization", format!("BEARER {KEY}")).json(&hello("chat")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    // An alias the tenant may not use → 403.
    expect_error(post(&gw.url, "/v1/chat/completions", &hello("other")).await, 403, "model_not_allowed").await;
    // Oversize body (limit 65536 in the test config) → 413, declared or streamed.
    let big = json!({ "model": "chat", "messages": [{ "role": "user", "content": "x".repeat(70_000) }] });
    expect_error(post(&gw.url, "/v1/chat/completions", &big).await, 413, "request_too_large").await;
    let body = serde_json::to_vec(&big).unwrap();
    let chunked = reqwest::Body::wrap_stream(futures_util::stream::iter(
        body.chunks(8192).map(|c| Ok::<_, std::io::Error>(c.to_vec())).collect::<Vec<_>>(),
    ));
    expect_error(client.post(&url).bearer_auth(KEY).body(chunked).send().await.unwrap(), 413, "request_too_large")
        .await;
    // Broken JSON and wrong types → 400 invalid_json naming the field.
    expect_error(client.post(&url).bearer_auth(KEY).body("{nope").send().await.unwrap(), 400, "invalid_json").await;
    let v = expect_error(
        post(
            &gw.url,
            "/v1/chat/completions",
            &json!({ "model": "chat", "messages": [{ "role": "robot", "content": "x" }] }),
        )
        .await,
        400,
        "invalid_json",
    )
    .await;
    assert!(v["error"]["message"].as_str().unwrap().contains("messages[0].role"), "{v}");
    // Semantic validation → 400 invalid_request with the param.
    let v = expect_error(
        post(
            &gw.url,
            "/v1/chat/completions",
            &json!({ "model": "chat", "temperature": 3, "messages": [{ "role": "user", "content": "x" }] }),
        )
        .await,
        400,
        "invalid_request",
    )
    .await;
    assert_eq!(v["error"]["param"], "temperature");
    // Unknown path → 404 not_found.
    expect_error(client.get(format!("{}/v1/nothing", gw.url)).send().await.unwrap(), 404, "not_found").await;
    expect_error(client.get(&url).send().await.unwrap(), 405, "method_not_allowed").await;
    assert_eq!(up.hits(), 1, "only the accepted request reached the upstream");
}

#[tokio::test]
async fn unsupported_parameters_strict_and_lenient() {
    // Strict: `seed` has no Anthropic equivalent → 400 naming it; an unknown field too.
    let (up, gw) = setup("strict").await;
    let mut req = hello("chat");
    req["seed"] = json!(42);
    let v = expect_error(post(&gw.url, "/v1/chat/completions", &req).await, 400, "unsupported_parameter").await;
    assert_eq!(v["error"]["param"], "seed");
    assert!(v["error"]["message"].as_str().unwrap().contains("anthropic"));
    let mut req = hello("chat");
    req["frobnicate"] = json!(true);
    let v = expect_error(post(&gw.url, "/v1/chat/completions", &req).await, 400, "unsupported_parameter").await;
    assert_eq!(v["error"]["param"], "frobnicate");
    assert_eq!(up.hits(), 0);

    // Lenient: both dropped (with a warning), the call succeeds, nothing of them goes upstream.
    let (up, gw) = setup("lenient").await;
    let mut req = hello("chat");
    req["seed"] = json!(42);
    req["frobnicate"] = json!(true);
    req["temperature"] = json!(0.5);
    let resp = post(&gw.url, "/v1/chat/completions", &req).await;
    assert_eq!(resp.status(), 200);
    let sent = up.last().body;
    assert!(sent.get("seed").is_none() && sent.get("frobnicate").is_none(), "{sent}");
    assert_eq!(sent["temperature"], 0.5, "supported parameters still sent, as given");
}

#[tokio::test]
async fn request_id_is_echoed_or_generated() {
    let (_up, gw) = setup("strict").await;
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", gw.url))
        .bearer_auth(KEY)
        .header("x-request-id", "caller-abc-123")
        .json(&hello("chat"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-request-id"], "caller-abc-123");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["id"], "msg_01");
    let resp = post(&gw.url, "/v1/chat/completions", &hello("chat")).await;
    let rid = resp.headers()["x-request-id"].to_str().unwrap();
    assert!(rid.starts_with("req_") && rid.len() == 36, "{rid}");
}

#[tokio::test]
async fn models_health_and_metrics() {
    let (_up, gw) = setup("strict").await;
    let client = reqwest::Client::new();
    let v: Value =
        client.get(format!("{}/v1/models", gw.url)).bearer_auth(KEY).send().await.unwrap().json().await.unwrap();
    let ids: Vec<&str> = v["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec!["chat"], "only the aliases this tenant may use");
    assert_eq!(client.get(format!("{}/v1/models", gw.url)).send().await.unwrap().status(), 401);
    assert_eq!(client.get(format!("{}/healthz", gw.url)).send().await.unwrap().status(), 200);
    let ready: Value = client.get(format!("{}/readyz", gw.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(ready["config_version"], 1);

    for _ in 0..3 {
        post(&gw.url, "/v1/chat/completions", &hello("chat")).await.bytes().await.unwrap();
    }
    let m = client.get(format!("{}/metrics", gw.url)).send().await.unwrap().text().await.unwrap();
    // Served requests count through cached handles: every one is counted, under the same labels.
    for line in [
        r#"ax_requests_total{alias="chat",upstream="up",status="200"} 3"#,
        r#"ax_upstream_attempts_total{upstream="up",outcome="ok"} 3"#,
        r#"ax_request_duration_seconds_count{alias="chat",upstream="up"} 3"#,
    ] {
        assert!(m.lines().any(|l| l == line), "{line} in {m}");
    }
    assert!(m.contains(r#"ax_tokens_total{alias="chat",upstream="up",direction="completion"}"#), "{m}");
    // The OpenTelemetry GenAI histograms, under the conventions' attribute names (the upstream
    // reported 1 input and 1 output token per call).
    let genai = r#"gen_ai_operation_name="chat",gen_ai_provider_name="anthropic",gen_ai_request_model="chat",gen_ai_response_model="real-model""#;
    for line in [
        format!("gen_ai_client_operation_duration_seconds_count{{{genai}}} 3"),
        format!(r#"gen_ai_client_token_usage_sum{{{genai},gen_ai_token_type="input"}} 3"#),
        format!(r#"gen_ai_client_token_usage_bucket{{{genai},gen_ai_token_type="output",le="1"}} 3"#),
        format!(r#"gen_ai_client_token_usage_bucket{{{genai},gen_ai_token_type="output",le="+Inf"}} 3"#),
    ] {
        assert!(m.lines().any(|l| l == line), "{line} in {m}");
    }
    assert!(m.contains("# TYPE gen_ai_client_operation_duration_seconds histogram"), "{m}");
}

#[tokio::test]
async fn mock_upstream_quickstart_config_serves() {
    let yaml =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/examples/quickstart.yaml")).unwrap();
    let gw = Gateway::start(&yaml).await;
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", gw.url))
        .bearer_auth("ax-quickstart-key")
        .json(&json!({ "model": "chat-pro", "messages": [{ "role": "user", "content": "hi" }] }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-ax-upstream"], "mock-large", "priority 0 first");
    let v: Value = resp.json().await.unwrap();
    assert!(v["choices"][0]["message"]["content"].as_str().unwrap().split(' ').count() == 40);
}
