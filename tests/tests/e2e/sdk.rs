//! The official `openai` Python SDK drives the real binary: non-stream, stream, errors, and a
//! tool-call round trip through an Anthropic-protocol upstream.

use ax_tests::wire::{self, Framing};
use ax_tests::{key_digest, temp_dir, Binary, FakeUpstream, Recorded, Reply, KEY};
use serde_json::{json, Value};

/// A small Anthropic: a tool call when tools are offered and no result is back yet; a reply
/// quoting the tool result once it is.
fn anthropic(r: &Recorded) -> Reply {
    let stream = r.body["stream"] == true;
    let messages = r.body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let tool_result = last["content"]
        .as_array()
        .and_then(|blocks| blocks.iter().find(|b| b["type"] == "tool_result"))
        .map(|b| b["content"].as_str().unwrap_or_default().to_owned());
    let has_tools = r.body["tools"].as_array().is_some_and(|t| !t.is_empty());
    let (text, calls, stop): (Option<String>, Vec<wire::Call<'_>>, &str) = match (tool_result, has_tools) {
        (Some(result), _) => (Some(format!("The weather is {result}.")), vec![], "end_turn"),
        (None, true) => (None, vec![("toolu_01", "get_weather", r#"{"city":"Paris"}"#)], "tool_use"),
        (None, false) => (Some("Hello from Claude, 你好 🙂".to_owned()), vec![], "end_turn"),
    };
    if stream {
        let pieces: Vec<String> =
            text.as_deref().map(|t| t.split_inclusive(' ').map(str::to_owned).collect()).unwrap_or_default();
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        Reply::sse_split(
            &wire::anthropic_stream(&refs, &calls, stop, (10, 5, 0, 0), Framing { crlf: false, keepalive_every: 3 }),
            &[29],
        )
    } else {
        Reply::json(wire::anthropic_response(text.as_deref(), &calls, stop, (10, 5, 0, 0)))
    }
}

/// Runs `tests/sdk/<script>` with `envs` against the running binary `bin`; its stdout, or a
/// failure with both outputs and the gateway's log.
async fn run_script(bin: &Binary, script: &'static str, envs: Vec<(&'static str, String)>) -> String {
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python())
            .arg(format!("{}/sdk/{script}", env!("CARGO_MANIFEST_DIR")))
            .envs(envs)
            .output()
            .expect("run python")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{script} failed\nstdout:\n{stdout}\nstderr:\n{stderr}\ngateway log:\n{}",
        bin.logs()
    );
    stdout
}

fn python() -> String {
    if let Ok(p) = std::env::var("AX_PYTHON") {
        return p;
    }
    ax_tests::venv_bin("python", "the SDK test (the `openai` package; or set AX_PYTHON)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_python_sdk_against_the_binary() {
    let up = FakeUpstream::start(anthropic).await;
    let dir = temp_dir("sdk");
    let path = dir.join("ax.yaml");
    std::fs::write(
        &path,
        format!(
            r#"upstreams:
  - name: claude
    provider: anthropic
    base_url: {}
    api_key: sk-ant-test
    models: [{{ name: claude-real, context_window: 200000, capabilities: [chat, tools, streaming, vision], price_per_mtok: {{ input: 0.5, output: 3 }} }}]
routes:
  - alias: chat
    candidates: [{{ upstream: claude, model: claude-real }}]
tenants:
  - id: t
    keys: [{{ id: k, sha256: "{}" }}]
"#,
            up.url(),
            key_digest(KEY)
        ),
    )
    .unwrap();
    let bin = Binary::start(&path, &dir);
    let url = bin.url.clone();
    let stdout =
        run_script(&bin, "openai_sdk.py", vec![("AX_BASE_URL", format!("{url}/v1")), ("AX_KEY", KEY.to_owned())]).await;
    assert!(stdout.contains("sdk: all checks passed"), "{stdout}");
    // Non-stream + stream + 2 round trips of 2 calls each + error checks that never reach it.
    assert!(up.hits() >= 6, "hits = {}", up.hits());
    let _ = std::fs::remove_dir_all(&dir);
}

/// What a small agent-like upstream answers, whatever its protocol: two tool calls when tools are
/// offered and no results are back; a reply quoting the results once they are; else a greeting.
fn agent_turn(results: &[String], has_tools: bool, who: &str) -> (Option<String>, bool) {
    match (results.is_empty(), has_tools) {
        (false, _) => (Some(format!("It is {} there.", results.join(" and "))), false),
        (true, true) => (None, true),
        (true, false) => (Some(format!("Hello from {who}, 你好 🙂")), false),
    }
}

const CALLS: [wire::Call<'static>; 2] =
    [("call_p", "get_weather", r#"{"city":"Paris"}"#), ("call_l", "get_weather", r#"{"city":"London"}"#)];

fn words(text: &str) -> Vec<String> {
    text.split_inclusive(' ').map(str::to_owned).collect()
}

fn anthropic_agent(r: &Recorded) -> Reply {
    if r.path.ends_with("/count_tokens") {
        return Reply::json(json!({ "input_tokens": 4242 }));
    }
    let last = r.body["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or(Value::Null);
    let results: Vec<String> = last["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| match &b["content"] {
            Value::String(s) => s.clone(),
            Value::Array(blocks) => blocks.iter().filter_map(|x| x["text"].as_str()).collect(),
            _ => String::new(),
        })
        .collect();
    let has_tools = r.body["tools"].as_array().is_some_and(|t| !t.is_empty());
    let (text, calls) = agent_turn(&results, has_tools, "Claude");
    let calls: &[wire::Call<'_>] = if calls { &CALLS } else { &[] };
    let stop = if calls.is_empty() { "end_turn" } else { "tool_use" };
    if r.body["stream"] == true {
        let pieces = text.as_deref().map(words).unwrap_or_default();
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        Reply::sse_split(&wire::anthropic_stream(&refs, calls, stop, (10, 5, 0, 0), Framing::default()), &[31])
    } else {
        Reply::json(wire::anthropic_response(text.as_deref(), calls, stop, (10, 5, 0, 0)))
    }
}

fn openai_agent(r: &Recorded) -> Reply {
    let messages = r.body["messages"].as_array().cloned().unwrap_or_default();
    let results: Vec<String> = messages
        .iter()
        .rev()
        .take_while(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let has_tools = r.body["tools"].as_array().is_some_and(|t| !t.is_empty());
    if r.body["stream"] == true && messages.last().is_some_and(|m| m["content"] == "cut short") {
        // The connection ends after the stream's first text.
        let whole = wire::openai_stream(&["Hel", "lo"], &[], "stop", (10, 5, 0), Framing::default());
        let start = whole.find("Hel").unwrap_or_default();
        return Reply::sse(&whole[..start + whole[start..].find("\n\n").unwrap_or_default() + 2]);
    }
    let (text, calls) = agent_turn(&results, has_tools, "GPT");
    let calls: &[wire::Call<'_>] = if calls { &CALLS } else { &[] };
    let finish = if calls.is_empty() { "stop" } else { "tool_calls" };
    if r.body["stream"] == true {
        let pieces = text.as_deref().map(words).unwrap_or_default();
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        Reply::sse(&wire::openai_stream(&refs, calls, finish, (10, 5, 0), Framing::default()))
    } else {
        Reply::json(wire::openai_response(text.as_deref(), calls, finish, (10, 5, 0)))
    }
}

fn gemini_agent(r: &Recorded) -> Reply {
    if r.path.ends_with(":countTokens") {
        return Reply::json(json!({ "totalTokens": 4242 }));
    }
    let last = r.body["contents"].as_array().and_then(|c| c.last()).cloned().unwrap_or(Value::Null);
    let results: Vec<String> = last["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("functionResponse"))
        .map(|f| f["response"]["content"].as_str().map_or_else(|| f["response"].to_string(), str::to_owned))
        .collect();
    let has_tools = r.body["tools"].as_array().is_some_and(|t| !t.is_empty());
    let (text, calls) = agent_turn(&results, has_tools, "Gemini");
    let calls: Vec<(&str, &str)> = if calls { CALLS.iter().map(|c| (c.1, c.2)).collect() } else { Vec::new() };
    if r.path.ends_with(":streamGenerateContent") {
        let pieces = text.as_deref().map(words).unwrap_or_default();
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        Reply::sse(&wire::gemini_stream(&refs, &calls, "STOP", (10, 5, 0), Framing::default()))
    } else {
        Reply::json(wire::gemini_response(text.as_deref(), &calls, "STOP", (10, 5, 0)))
    }
}

/// Stored responses through two data-plane processes sharing one Redis: a tool conversation
/// begun on one (Anthropic) is continued on the other, where Anthropic is overloaded and Gemini
/// serves the whole stored conversation; retrieve, `input_items`, delete and another tenant's
/// 404 with the real `openai` SDK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_responses_store_across_data_planes() {
    let redis = ax_tests::RedisServer::start();
    // Overloaded whenever a tool's result comes back.
    let claude = FakeUpstream::start(|r: &Recorded| {
        let last = r.body["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or(Value::Null);
        let results = last["content"].as_array().is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"));
        if results {
            Reply::status(529, json!({ "type": "error", "error": { "type": "overloaded_error", "message": "busy" } }))
        } else {
            anthropic_agent(r)
        }
    })
    .await;
    let gem = FakeUpstream::start(gemini_agent).await;
    let caps = "capabilities: [chat, tools, streaming]";
    let config = format!(
        r#"server: {{ redis_url: "redis://127.0.0.1:{}", redis_prefix: "sdk-store-{}" }}
upstreams:
  - {{ name: claude, provider: anthropic, base_url: "{}", api_key: sk-ant-test, models: [{{ name: claude-real, context_window: 200000, {caps} }}] }}
  - {{ name: gem, provider: gemini, base_url: "{}", api_key: g-test, models: [{{ name: gemini-real, context_window: 1000000, {caps} }}] }}
routes:
  - {{ alias: conv, strategy: priority, candidates: [{{ upstream: claude, model: claude-real, priority: 0 }}, {{ upstream: gem, model: gemini-real, priority: 1 }}] }}
tenants:
  - {{ id: t, keys: [{{ id: k, sha256: "{}" }}] }}
  - {{ id: u, keys: [{{ id: k2, sha256: "{}" }}] }}
"#,
        redis.port,
        std::process::id(),
        claude.url(),
        gem.url(),
        key_digest(KEY),
        key_digest("ax-other-tenant-key")
    );
    let dir = temp_dir("responses-store-sdk");
    let (dir_a, dir_b) = (dir.join("a"), dir.join("b"));
    for d in [&dir_a, &dir_b] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("ax.yaml"), &config).unwrap();
    }
    let a = Binary::start(&dir_a.join("ax.yaml"), &dir_a);
    let b = Binary::start(&dir_b.join("ax.yaml"), &dir_b);
    let envs = vec![
        ("AX_URL_A", a.url.clone()),
        ("AX_URL_B", b.url.clone()),
        ("AX_KEY", KEY.to_owned()),
        ("AX_OTHER_KEY", "ax-other-tenant-key".to_owned()),
    ];
    let stdout = run_script(&b, "openai_responses_store.py", envs).await;
    assert!(stdout.contains("responses store sdk: all checks passed"), "{stdout}\n{}", a.logs());
    // Gemini was sent the conversation begun on Anthropic: the question, both calls, both results.
    let sent = gem.last().body;
    let contents = sent["contents"].as_array().unwrap();
    assert_eq!(contents[0]["parts"][0]["text"], "Weather in Paris and London?", "{sent}");
    let calls = contents[1]["parts"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{sent}");
    assert_eq!(calls[0]["functionCall"]["args"], json!({ "city": "Paris" }));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The official `anthropic` Python SDK against `/v1/messages`, for every upstream kind: an
/// Anthropic upstream (forwarded), an OpenAI-compatible one and Gemini (translated), the mock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_python_sdk_against_every_upstream_kind() {
    let claude = FakeUpstream::start(anthropic_agent).await;
    let gpt = FakeUpstream::start(openai_agent).await;
    let gem = FakeUpstream::start(gemini_agent).await;
    let dir = temp_dir("anthropic-sdk");
    let path = dir.join("ax.yaml");
    let caps = "capabilities: [chat, tools, streaming, vision]";
    std::fs::write(
        &path,
        format!(
            r#"upstreams:
  - {{ name: claude, provider: anthropic, base_url: "{}", api_key: sk-ant-test, models: [{{ name: claude-real, context_window: 200000, {caps} }}] }}
  - {{ name: gpt, provider: openai, base_url: "{}/v1", api_key: sk-test, models: [{{ name: gpt-real, context_window: 128000, {caps} }}] }}
  - {{ name: gem, provider: gemini, base_url: "{}", api_key: g-test, models: [{{ name: gemini-real, context_window: 1000000, {caps} }}] }}
  - {{ name: mock, provider: mock, mock: {{ tool_calls: true, tool_arguments: '{{"city":"Paris"}}' }}, models: [{{ name: mock-1, context_window: 32000, {caps} }}] }}
routes:
  - {{ alias: claude, candidates: [{{ upstream: claude, model: claude-real }}] }}
  - {{ alias: gpt, candidates: [{{ upstream: gpt, model: gpt-real }}] }}
  - {{ alias: gem, candidates: [{{ upstream: gem, model: gemini-real }}] }}
  - {{ alias: mock, candidates: [{{ upstream: mock, model: mock-1 }}] }}
  - {{ alias: limited, limits: {{ rpm: 1 }}, candidates: [{{ upstream: claude, model: claude-real }}] }}
tenants:
  - {{ id: t, keys: [{{ id: k, sha256: "{}" }}] }}
"#,
            claude.url(),
            gpt.url(),
            gem.url(),
            key_digest(KEY)
        ),
    )
    .unwrap();
    let bin = Binary::start(&path, &dir);
    let url = bin.url.clone();
    // The mock answers tools with one call of its own: its tool turn is checked in
    // `translation`; here it runs the other checks.
    // Anthropic counts tokens itself; the others get ax's estimate.
    let stdout = run_script(
        &bin,
        "anthropic_sdk.py",
        vec![
            ("AX_BASE_URL", url.clone()),
            ("AX_KEY", KEY.to_owned()),
            ("AX_ALIASES", "claude,gpt,gem,mock".to_owned()),
            ("AX_TEXT_ONLY", "mock".to_owned()),
            ("AX_EXACT_COUNT", "claude=4242".to_owned()),
            ("AX_LIMITED", "limited".to_owned()),
        ],
    )
    .await;
    assert!(stdout.contains("anthropic sdk: all checks passed"), "{stdout}");
    // The Anthropic upstream got the caller's body with only the model replaced, and the beta
    // header the SDK sent (none here): its request names the real model.
    assert!(claude.requests().iter().all(|r| r.body["model"] == "claude-real"));
    let counted = claude.requests().into_iter().find(|r| r.path == "/v1/messages/count_tokens").expect("a count");
    assert_eq!(counted.header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(counted.body["messages"][0]["content"], "hello there");
    assert!(
        gpt.hits() >= 6 && gem.hits() >= 6 && claude.hits() >= 6,
        "{} {} {}",
        gpt.hits(),
        gem.hits(),
        claude.hits()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `openai` SDK's Responses API (`client.responses.create` / `.stream`, function tools with
/// their outputs sent back as items) through the binary to an Anthropic, an OpenAI-compatible and
/// a Gemini upstream, all translated; then the OpenAI Agents SDK runs a tool agent (strict tools,
/// its default) against the Anthropic and the Gemini one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_responses_api_against_every_upstream_kind() {
    let claude = FakeUpstream::start(anthropic_agent).await;
    let gpt = FakeUpstream::start(openai_agent).await;
    let gem = FakeUpstream::start(gemini_agent).await;
    let dir = temp_dir("responses-sdk");
    let path = dir.join("ax.yaml");
    let caps = "capabilities: [chat, tools, streaming, vision, json]";
    std::fs::write(
        &path,
        format!(
            r#"upstreams:
  - {{ name: claude, provider: anthropic, base_url: "{}", api_key: sk-ant-test, models: [{{ name: claude-real, context_window: 200000, {caps} }}] }}
  - {{ name: gpt, provider: openai, base_url: "{}/v1", api_key: sk-test, models: [{{ name: gpt-real, context_window: 128000, {caps} }}] }}
  - {{ name: gem, provider: gemini, base_url: "{}", api_key: g-test, models: [{{ name: gemini-real, context_window: 1000000, {caps} }}] }}
routes:
  - {{ alias: claude, candidates: [{{ upstream: claude, model: claude-real }}] }}
  - {{ alias: gpt, candidates: [{{ upstream: gpt, model: gpt-real }}] }}
  - {{ alias: gem, candidates: [{{ upstream: gem, model: gemini-real }}] }}
tenants:
  - {{ id: t, keys: [{{ id: k, sha256: "{}" }}] }}
"#,
            claude.url(),
            gpt.url(),
            gem.url(),
            key_digest(KEY)
        ),
    )
    .unwrap();
    let bin = Binary::start(&path, &dir);
    let url = bin.url.clone();
    let stdout =
        run_script(&bin, "openai_responses.py", vec![("AX_BASE_URL", format!("{url}/v1")), ("AX_KEY", KEY.to_owned())])
            .await;
    assert!(stdout.contains("responses sdk: all checks passed"), "{stdout}");
    // The OpenAI Agents SDK (its Responses model) runs a tool agent through the same binary, at
    // the default `params: strict`. Its tools are strict: Anthropic takes strict tool use, and on
    // Gemini, which has no strict mode, ax checks each call against the tool's schema.
    let stdout = run_script(
        &bin,
        "agents_sdk.py",
        vec![("AX_BASE_URL", format!("{url}/v1")), ("AX_KEY", KEY.to_owned()), ("AX_ALIASES", "claude,gem".to_owned())],
    )
    .await;
    assert!(stdout.contains("agents sdk: all checks passed"), "{stdout}");
    // Its strict tools reached Anthropic as strict tool use.
    assert!(claude
        .requests()
        .iter()
        .any(|r| r.body["tools"][0]["strict"] == true && r.body["tools"][0]["name"] == "get_weather"));
    // The structured-output schema reached each upstream as its own control.
    assert!(claude
        .requests()
        .iter()
        .any(|r| r.body["output_config"]["format"]["schema"]["required"] == json!(["city"])));
    assert!(gpt.requests().iter().any(|r| r.body["response_format"]["json_schema"]["name"] == "city"));
    assert!(gem.requests().iter().any(|r| r.body["generationConfig"]["responseMimeType"] == "application/json"));
    // The instructions reached each upstream as its system prompt.
    assert!(claude.requests().iter().any(|r| r.body["system"] == "Be brief."));
    assert!(gpt
        .requests()
        .iter()
        .any(|r| r.body["messages"][0] == json!({ "role": "system", "content": "Be brief." })));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The official `google-genai` Python SDK against Gemini's API on ax, for every upstream kind:
/// Anthropic and OpenAI-compatible (translated), Gemini (forwarded), and embeddings from the mock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn google_genai_sdk_against_every_upstream_kind() {
    let claude = FakeUpstream::start(anthropic_agent).await;
    let gpt = FakeUpstream::start(openai_agent).await;
    let gem = FakeUpstream::start(gemini_agent).await;
    let dir = temp_dir("genai-sdk");
    let path = dir.join("ax.yaml");
    let caps = "capabilities: [chat, tools, streaming, vision, json]";
    std::fs::write(
        &path,
        format!(
            r#"upstreams:
  - {{ name: claude, provider: anthropic, base_url: "{}", api_key: sk-ant-test, models: [{{ name: claude-real, context_window: 200000, {caps} }}] }}
  - {{ name: gpt, provider: openai, base_url: "{}/v1", api_key: sk-test, models: [{{ name: gpt-real, context_window: 128000, {caps} }}] }}
  - {{ name: gem, provider: gemini, base_url: "{}", api_key: g-test, models: [{{ name: gemini-real, context_window: 1000000, {caps} }}] }}
  - {{ name: mock, provider: mock, models: [{{ name: mock-emb, context_window: 8000, capabilities: [embeddings] }}] }}
routes:
  - {{ alias: claude, candidates: [{{ upstream: claude, model: claude-real }}] }}
  - {{ alias: gpt, candidates: [{{ upstream: gpt, model: gpt-real }}] }}
  - {{ alias: gem, candidates: [{{ upstream: gem, model: gemini-real }}] }}
  - {{ alias: emb, candidates: [{{ upstream: mock, model: mock-emb }}] }}
tenants:
  - {{ id: t, keys: [{{ id: k, sha256: "{}" }}] }}
"#,
            claude.url(),
            gpt.url(),
            gem.url(),
            key_digest(KEY)
        ),
    )
    .unwrap();
    let bin = Binary::start(&path, &dir);
    let envs = vec![
        ("AX_BASE_URL", bin.url.clone()),
        ("AX_KEY", KEY.to_owned()),
        ("AX_ALIASES", "claude,gpt,gem".to_owned()),
        ("AX_EMBED", "emb".to_owned()),
    ];
    let stdout = run_script(&bin, "gemini_sdk.py", envs).await;
    assert!(stdout.contains("gemini sdk: all checks passed"), "{stdout}");
    // Gemini was sent the SDK's bodies as written, at the real model's URLs, with its own key.
    let sent = gem.requests();
    assert!(
        sent.iter().all(|r| r.path.starts_with("/v1beta/models/gemini-real:")),
        "{:?}",
        sent.iter().map(|r| &r.path).collect::<Vec<_>>()
    );
    assert!(sent.iter().all(|r| r.header("x-goog-api-key") == Some("g-test")));
    assert!(sent.iter().any(|r| r.body["systemInstruction"]["parts"][0]["text"] == "Be brief."));
    // The others were sent the system instruction, the schema as JSON Schema, the image.
    assert!(claude.requests().iter().any(|r| r.body["system"] == "Be brief."));
    assert!(gpt
        .requests()
        .iter()
        .any(|r| r.body["messages"][0] == json!({ "role": "system", "content": "Be brief." })));
    let schema = gpt
        .requests()
        .into_iter()
        .find_map(|r| r.body["response_format"]["json_schema"]["schema"].as_object().cloned());
    assert_eq!(
        schema.map(Value::Object),
        Some(json!({ "type": "object", "properties": { "city": { "type": "string" } } }))
    );
    assert!(gpt.requests().iter().any(|r| r.body["messages"].to_string().contains("data:image/png;base64,")));
    assert!(claude.requests().iter().any(|r| r.body["messages"].to_string().contains("\"media_type\":\"image/png\"")));
    // Gemini counted its own tokens.
    assert!(sent.iter().any(|r| r.path == "/v1beta/models/gemini-real:countTokens"));
    let _ = std::fs::remove_dir_all(&dir);
}
