//! Gemini's API on ax, over plain HTTP: the paths (`/v1beta` and `/v1`, the colon encoded or
//! not), the three ways of giving the key, errors in Google's shape with ax's code, glob aliases
//! (exact first, then the longest glob; on every ingress; in allow-lists), the model list in
//! Gemini's shape, pass-through to a Gemini upstream byte for byte, and one usage record a call.

use ax_tests::wire::{self, Framing};
use ax_tests::{key_digest, temp_dir, Binary, FakeUpstream, Gateway, Recorded, Reply, KEY};
use serde_json::{json, Value};

/// Answers as Gemini, naming in its text the upstream it is (`who`) and the model in its path.
fn gemini(who: &'static str) -> impl Fn(&Recorded) -> Reply + Send + Sync + 'static {
    move |r: &Recorded| {
        let model = r.path.trim_start_matches("/v1beta/models/").split(':').next().unwrap_or_default().to_owned();
        let text = format!("{who} {model}");
        if r.path.ends_with(":streamGenerateContent") {
            Reply::sse(&wire::gemini_stream(&["Hi ", &text], &[], "STOP", (3, 2, 0), Framing::default()))
        } else {
            Reply::json(wire::gemini_response(Some(&text), &[], "STOP", (3, 2, 0)))
        }
    }
}

fn openai(r: &Recorded) -> Reply {
    let text = format!("gpt {}", r.body["model"].as_str().unwrap_or_default());
    Reply::json(wire::openai_response(Some(&text), &[], "stop", (3, 2, 0)))
}

/// Exact `gemini-pro`, globs `gemini-*` and `gemini-*-lite` (each on its own upstream), `gpt`
/// (OpenAI); tenant `t` may use everything, tenant `g` only what `gemini-*` names (a glob in its
/// allow-list).
async fn bench() -> (Gateway, [FakeUpstream; 4]) {
    let ups = [
        FakeUpstream::start(gemini("exact")).await,
        FakeUpstream::start(gemini("glob")).await,
        FakeUpstream::start(gemini("lite")).await,
        FakeUpstream::start(openai).await,
    ];
    let caps = "capabilities: [chat, tools, streaming, json, vision]";
    let gw = Gateway::start(&format!(
        r#"upstreams:
  - {{ name: exact, provider: gemini, base_url: "{}", api_key: g-exact, models: [{{ name: pro-real, context_window: 2000000, max_output_tokens: 65536, {caps} }}] }}
  - {{ name: glob, provider: gemini, base_url: "{}", api_key: g-glob, models: [{{ name: glob-real, context_window: 1000000, {caps} }}] }}
  - {{ name: lite, provider: gemini, base_url: "{}", api_key: g-lite, models: [{{ name: lite-real, context_window: 1000000, {caps} }}] }}
  - {{ name: gpt, provider: openai, base_url: "{}/v1", api_key: sk, models: [{{ name: gpt-real, context_window: 128000, {caps} }}] }}
routes:
  - {{ alias: gemini-pro, candidates: [{{ upstream: exact, model: pro-real }}] }}
  - {{ alias: "gemini-*", candidates: [{{ upstream: glob, model: glob-real }}] }}
  - {{ alias: "gemini-*-lite", candidates: [{{ upstream: lite, model: lite-real }}] }}
  - {{ alias: gpt, candidates: [{{ upstream: gpt, model: gpt-real }}] }}
tenants:
  - {{ id: t, keys: [{{ id: k, sha256: "{}" }}] }}
  - {{ id: g, allowed_aliases: ["gemini-*"], keys: [{{ id: kg, sha256: "{}" }}] }}
"#,
        ups[0].url(),
        ups[1].url(),
        ups[2].url(),
        ups[3].url(),
        key_digest(KEY),
        key_digest("ax-glob-only")
    ))
    .await;
    (gw, ups)
}

fn hello() -> Value {
    json!({ "contents": [{ "role": "user", "parts": [{ "text": "hi" }] }] })
}

async fn generate(gw: &Gateway, model: &str, key: &str) -> (u16, reqwest::header::HeaderMap, Value) {
    let r = reqwest::Client::new()
        .post(format!("{}/v1beta/models/{model}:generateContent", gw.url))
        .header("x-goog-api-key", key)
        .json(&hello())
        .send()
        .await
        .unwrap();
    let (status, headers) = (r.status().as_u16(), r.headers().clone());
    (status, headers, r.json().await.unwrap_or(Value::Null))
}

fn text(v: &Value) -> &str {
    v["candidates"][0]["content"]["parts"][0]["text"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn the_exact_alias_then_the_longest_glob_serves_a_name() {
    let (gw, _ups) = bench().await;
    for (model, want) in [
        ("gemini-pro", "exact pro-real"),
        ("gemini-3-flash-preview", "glob glob-real"),
        ("gemini-2.5-flash-lite", "lite lite-real"),
        ("gemini-*", "glob glob-real"),
    ] {
        let (status, headers, body) = generate(&gw, model, KEY).await;
        assert_eq!(status, 200, "{model}: {body}");
        assert_eq!(text(&body), want, "{model}");
        assert!(headers.contains_key("x-request-id"));
        assert_eq!(headers["x-ax-model"], want.split(' ').nth(1).unwrap());
    }
    // Globs serve every ingress.
    let r = ax_tests::post(
        &gw.url,
        "/v1/chat/completions",
        &json!({ "model": "gemini-x", "messages": [{ "role": "user", "content": "hi" }] }),
    )
    .await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "glob glob-real");
    // A name no route matches is Google's NOT_FOUND, ax's code inside.
    let (status, headers, body) = generate(&gw, "claude-x", KEY).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["status"], "NOT_FOUND");
    assert_eq!(body["error"]["details"][0]["reason"], "model_not_found");
    assert_eq!(headers["x-ax-error-code"], "model_not_found");
}

#[tokio::test]
async fn an_allow_list_glob_allows_what_it_matches() {
    let (gw, _ups) = bench().await;
    let (status, _, body) = generate(&gw, "gemini-3-pro", "ax-glob-only").await;
    assert_eq!(status, 200, "{body}");
    // `gemini-*` matches the alias `gemini-*-lite` and `gemini-pro` too.
    assert_eq!(generate(&gw, "gemini-2.5-flash-lite", "ax-glob-only").await.0, 200);
    assert_eq!(generate(&gw, "gemini-pro", "ax-glob-only").await.0, 200);
    let r = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", gw.url))
        .bearer_auth("ax-glob-only")
        .json(&json!({ "model": "gpt", "messages": [{ "role": "user", "content": "hi" }] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "gpt is not in the tenant's allow-list");
}

#[tokio::test]
async fn paths_keys_and_errors_the_way_google_clients_send_them() {
    let (gw, ups) = bench().await;
    let c = reqwest::Client::new();
    // `/v1/`, the colon percent-encoded, the key in the query.
    let r = c
        .post(format!("{}/v1/models/gemini-pro%3AgenerateContent?key={KEY}", gw.url))
        .json(&hello())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(text(&r.json::<Value>().await.unwrap()), "exact pro-real");
    // A bearer token.
    let r = c
        .post(format!("{}/v1beta/models/gemini-pro:generateContent", gw.url))
        .bearer_auth(KEY)
        .json(&hello())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // The upstream got its own key and the real model's path; never the caller's key.
    let sent = ups[0].last();
    assert_eq!(sent.path, "/v1beta/models/pro-real:generateContent");
    assert_eq!(sent.header("x-goog-api-key"), Some("g-exact"));
    assert!(sent.query.as_deref().is_none_or(|q| !q.contains(KEY)), "{:?}", sent.query);
    // No key, a wrong key, a body that is not JSON, an unknown method, a GET on a model call.
    let cases = [
        (
            c.post(format!("{}/v1beta/models/gemini-pro:generateContent", gw.url)).json(&hello()),
            401,
            "UNAUTHENTICATED",
            "missing_api_key",
        ),
        (
            c.post(format!("{}/v1beta/models/gemini-pro:generateContent?key=ax-nope", gw.url)).json(&hello()),
            401,
            "UNAUTHENTICATED",
            "invalid_api_key",
        ),
        (
            c.post(format!("{}/v1beta/models/gemini-pro:generateContent", gw.url))
                .header("x-goog-api-key", KEY)
                .body("{\"contents\":"),
            400,
            "INVALID_ARGUMENT",
            "invalid_json",
        ),
        (
            c.post(format!("{}/v1beta/models/gemini-pro:predict", gw.url)).header("x-goog-api-key", KEY).json(&hello()),
            404,
            "NOT_FOUND",
            "not_found",
        ),
    ];
    for (req, status, word, code) in cases {
        let r = req.send().await.unwrap();
        assert_eq!(r.status().as_u16(), status, "{code}");
        assert_eq!(r.headers()["x-ax-error-code"], code);
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            (v["error"]["code"].as_u64(), v["error"]["status"].as_str()),
            (Some(u64::from(status)), Some(word)),
            "{v}"
        );
        assert!(v["error"]["message"].as_str().unwrap().contains(code), "{v}");
    }
    let r = c.get(format!("{}/v1beta/models/gemini-pro:generateContent", gw.url)).send().await.unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "POST");
}

#[tokio::test]
async fn the_model_list_in_geminis_shape_for_gemini_callers() {
    let (gw, _ups) = bench().await;
    let c = reqwest::Client::new();
    let v: Value = c
        .get(format!("{}/v1beta/models", gw.url))
        .header("x-goog-api-key", KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = v["models"].as_array().unwrap().iter().filter_map(|m| m["name"].as_str()).collect();
    assert_eq!(names, ["models/gemini-*", "models/gemini-*-lite", "models/gemini-pro", "models/gpt"]);
    let pro = &v["models"][2];
    assert_eq!((pro["inputTokenLimit"].as_u64(), pro["outputTokenLimit"].as_u64()), (Some(2_000_000), Some(65_536)));
    // `/v1/models` keeps OpenAI's shape unless the caller authenticates the Gemini way.
    let v: Value = c.get(format!("{}/v1/models", gw.url)).bearer_auth(KEY).send().await.unwrap().json().await.unwrap();
    assert_eq!(v["object"], "list");
    let v: Value = c.get(format!("{}/v1/models?key={KEY}", gw.url)).send().await.unwrap().json().await.unwrap();
    assert!(v["models"].is_array(), "{v}");
    // One model, by a name a glob serves.
    let v: Value = c
        .get(format!("{}/v1beta/models/gemini-3-flash", gw.url))
        .header("x-goog-api-key", KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["name"], "models/gemini-3-flash");
    let r = c.get(format!("{}/v1beta/models/claude", gw.url)).header("x-goog-api-key", KEY).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["status"], "NOT_FOUND");
}

/// A Gemini upstream gets the caller's bytes (fields ax does not know, signatures, safety
/// settings) at the real model's URL; the caller gets the upstream's answer byte for byte; every
/// call is one usage record, under the route's alias (a glob: names the caller makes up mint no
/// labels), the stream's too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_upstream_gets_the_callers_bytes_and_each_call_is_metered_once() {
    let answer = wire::gemini_response(Some("Hello"), &[], "STOP", (7, 3, 0)).to_string();
    let fixed = answer.clone();
    let up = FakeUpstream::start(move |r: &Recorded| {
        if r.path.ends_with(":streamGenerateContent") {
            Reply::sse(&wire::gemini_stream(
                &["Hel", "lo"],
                &[],
                "STOP",
                (7, 3, 0),
                Framing { crlf: true, keepalive_every: 2 },
            ))
        } else {
            Reply::Raw { status: 200, content_type: "application/json", body: fixed.clone().into() }
        }
    })
    .await;
    let dir = temp_dir("gemini-pass");
    let path = dir.join("ax.yaml");
    std::fs::write(
        &path,
        format!(
            r#"upstreams:
  - {{ name: gem, provider: gemini, base_url: "{}", api_key: g-test, models: [{{ name: gemini-real, context_window: 1000000, capabilities: [chat, tools, streaming], price_per_mtok: {{ input: 1, output: 2 }} }}] }}
routes:
  - {{ alias: "gemini-*", candidates: [{{ upstream: gem, model: gemini-real }}] }}
tenants:
  - {{ id: t, keys: [{{ id: k, sha256: "{}" }}] }}
"#,
            up.url(),
            key_digest(KEY)
        ),
    )
    .unwrap();
    let bin = Binary::start(&path, &dir);
    let body = r#"{"contents":[{"role":"user","parts":[{"text":"hi \u00e9"}]},{"role":"model","parts":[{"functionCall":{"name":"f","args":{}},"thoughtSignature":"c2ln"}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]}],"safetySettings":[{"category":"HARM_CATEGORY_HARASSMENT","threshold":"BLOCK_NONE"}],"futureField":{"x":[1,2]},"generationConfig":{"temperature":0.2,"mediaResolution":"MEDIA_RESOLUTION_LOW"}}"#;
    let c = reqwest::Client::new();
    let r = c
        .post(format!("{}/v1beta/models/gemini-made-up-1:generateContent", bin.url))
        .header("x-goog-api-key", KEY)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().contains_key("x-ax-cost-usd"));
    assert_eq!(r.text().await.unwrap(), answer, "the answer as the upstream wrote it");
    let sent = up.last();
    assert_eq!(sent.path, "/v1beta/models/gemini-real:generateContent");
    assert_eq!(&sent.raw[..], body.as_bytes(), "the caller's bytes");
    // The stream, event for event (the keep-alive comments aside), in its one JSON array too.
    let r = c
        .post(format!("{}/v1beta/models/gemini-made-up-2:streamGenerateContent?alt=sse", bin.url))
        .header("x-goog-api-key", KEY)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let events = ax_tests::sse_events(r).await;
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(events[0].contains("\"Hel\"") && events[2].contains("\"finishReason\":\"STOP\""));
    assert!(events[2].contains("\"ax\":{"), "ax's facts in the finishing event: {}", events[2]);
    assert_eq!(up.last().query.as_deref(), Some("alt=sse"));
    let r = c
        .post(format!("{}/v1beta/models/gemini-made-up-3:streamGenerateContent", bin.url))
        .header("x-goog-api-key", KEY)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "application/json");
    let array: Vec<Value> = r.json().await.unwrap();
    let joined: String = array.iter().map(text).collect();
    assert_eq!(joined, "Hello");
    // Three calls, three records, all under `gemini-*`, with the upstream's usage.
    let mut records = Vec::new();
    for _ in 0..100 {
        records = bin
            .logs()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["target"] == "ax::usage")
            .collect();
        if records.len() >= 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(records.len(), 3, "{}", bin.logs());
    for r in &records {
        let f = &r["fields"];
        assert_eq!((f["alias"].as_str(), f["status"].as_u64()), (Some("gemini-*"), Some(200)), "{r}");
        assert_eq!((f["prompt_tokens"].as_u64(), f["completion_tokens"].as_u64()), (Some(7), Some(3)), "{r}");
    }
    assert!(!bin.logs().contains("gemini-made-up"), "a made-up name is no label");
    let _ = std::fs::remove_dir_all(dir);
}
