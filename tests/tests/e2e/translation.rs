//! What each upstream receives: the request translated into its protocol, with its auth.

use ax_tests::wire::{self};
use ax_tests::{key_digest, post, post_messages, FakeUpstream, Gateway, Reply, KEY, UPSTREAM_KEY};
use serde_json::{json, Value};

use crate::config;

/// A conversation with every message kind: system, developer, user (text + image), an assistant
/// turn with two parallel tool calls, two tool results, and a follow-up user message.
fn conversation() -> Value {
    json!({
        "model": "chat",
        "temperature": 1.2,
        "top_p": 0.9,
        "max_tokens": 300,
        "stop": ["END"],
        "user": "user-7",
        "messages": [
            { "role": "system", "content": "You are terse." },
            { "role": "developer", "content": "Answer in French." },
            { "role": "user", "content": [
                { "type": "text", "text": "What is in this image, and the weather?" },
                { "type": "image_url", "image_url": { "url": "data:image/png;base64,iVBORw0KGgo=" } } ] },
            { "role": "assistant", "content": null, "tool_calls": [
                { "id": "call_1", "type": "function", "function": { "name": "get_weather", "arguments": "{\"city\":\"Paris\"}" } },
                { "id": "call_2", "type": "function", "function": { "name": "get_time", "arguments": "{}" } } ] },
            { "role": "tool", "tool_call_id": "call_1", "content": "{\"temp\":21}" },
            { "role": "tool", "tool_call_id": "call_2", "content": "14:00" },
            { "role": "user", "content": "Thanks. Summarize." }
        ],
        "tools": [
            { "type": "function", "function": { "name": "get_weather", "parameters": { "type": "object" } } },
            { "type": "function", "function": { "name": "get_time" } } ],
        "tool_choice": "required"
    })
}

#[tokio::test]
async fn anthropic_request_translation() {
    let up =
        FakeUpstream::fixed(Reply::json(wire::anthropic_response(Some("ok"), &[], "end_turn", (1, 1, 0, 0)))).await;
    let gw = Gateway::start(&config("anthropic", &up.url(), "strict")).await;
    let resp = post(&gw.url, "/v1/chat/completions", &conversation()).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    let r = up.last();
    assert_eq!(r.path, "/v1/messages");
    assert_eq!(r.header("x-api-key"), Some(UPSTREAM_KEY));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert!(r.header("x-request-id").is_some_and(|id| id.starts_with("req_")), "request id forwarded");
    assert!(r.header("authorization").is_none());
    let b = r.body;
    assert_eq!(b["model"], "real-model");
    assert_eq!(b["system"], "You are terse.\n\nAnswer in French.", "system and developer hoisted");
    assert_eq!(b["max_tokens"], 300);
    assert_eq!(b["temperature"], 1.0, "as given, clamped into Anthropic's 0..1");
    assert_eq!(b["stop_sequences"], json!(["END"]));
    assert_eq!(b["metadata"]["user_id"], "user-7");
    assert_eq!(b["tool_choice"], json!({ "type": "any" }));
    assert_eq!(b["tools"][1]["input_schema"]["type"], "object", "a default schema for a tool without parameters");
    let m = b["messages"].as_array().unwrap();
    assert_eq!(m.len(), 3, "user, assistant, user (tool results and the follow-up merged): {m:?}");
    assert_eq!(m[0]["role"], "user");
    assert_eq!(
        m[0]["content"][1]["source"],
        json!({ "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo=" })
    );
    assert_eq!(m[1]["role"], "assistant");
    assert_eq!(
        m[1]["content"][0],
        json!({ "type": "tool_use", "id": "call_1", "name": "get_weather", "input": { "city": "Paris" } })
    );
    assert_eq!(m[1]["content"][1]["input"], json!({}));
    assert_eq!(m[2]["role"], "user");
    assert_eq!(
        m[2]["content"][0],
        json!({ "type": "tool_result", "tool_use_id": "call_1", "content": "{\"temp\":21}" })
    );
    assert_eq!(m[2]["content"][1]["tool_use_id"], "call_2");
    assert_eq!(m[2]["content"][2], json!({ "type": "text", "text": "Thanks. Summarize." }));

    // Without max_tokens, the required field still goes out (server default 4096).
    let mut req = conversation();
    req.as_object_mut().unwrap().remove("max_tokens");
    post(&gw.url, "/v1/chat/completions", &req).await;
    assert_eq!(up.last().body["max_tokens"], 4096);
}

#[tokio::test]
async fn gemini_request_translation() {
    let up = FakeUpstream::fixed(Reply::json(wire::gemini_response(Some("ok"), &[], "STOP", (1, 1, 0)))).await;
    let gw = Gateway::start(&config("gemini", &up.url(), "strict")).await;
    let mut req = conversation();
    req["response_format"] =
        json!({ "type": "json_schema", "json_schema": { "name": "s", "schema": { "type": "object" } } });
    req["seed"] = json!(7);
    req.as_object_mut().unwrap().remove("user"); // Gemini has no user field: strict mode would refuse it
    let resp = post(&gw.url, "/v1/chat/completions", &req).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    let r = up.last();
    assert_eq!(r.path, "/v1beta/models/real-model:generateContent");
    assert_eq!(r.header("x-goog-api-key"), Some(UPSTREAM_KEY));
    let b = r.body;
    assert_eq!(b["systemInstruction"]["parts"][0]["text"], "You are terse.\n\nAnswer in French.");
    let g = &b["generationConfig"];
    assert_eq!(g["temperature"], 1.2);
    assert_eq!(g["maxOutputTokens"], 300);
    assert_eq!(g["stopSequences"], json!(["END"]));
    assert_eq!(g["seed"], 7);
    assert_eq!(g["responseMimeType"], "application/json");
    assert_eq!(g["responseJsonSchema"], json!({ "type": "object" }));
    assert_eq!(b["toolConfig"]["functionCallingConfig"]["mode"], "ANY");
    let c = b["contents"].as_array().unwrap();
    assert_eq!(c.len(), 3, "{c:?}");
    assert_eq!(c[0]["parts"][1]["inlineData"], json!({ "mimeType": "image/png", "data": "iVBORw0KGgo=" }));
    assert_eq!(c[1]["role"], "model");
    assert_eq!(c[1]["parts"][0]["functionCall"], json!({ "name": "get_weather", "args": { "city": "Paris" } }));
    // Gemini 3 refuses a tool loop whose step has no thought signature: a call from another
    // protocol carries the one Google documents for conversations brought from elsewhere.
    assert_eq!(c[1]["parts"][0]["thoughtSignature"], "skip_thought_signature_validator");
    assert!(c[1]["parts"][1].get("thoughtSignature").is_none(), "the step's first call only");
    assert_eq!(c[2]["role"], "user");
    // Tool results find their function names through the assistant's tool calls.
    assert_eq!(c[2]["parts"][0]["functionResponse"], json!({ "name": "get_weather", "response": { "temp": 21 } }));
    assert_eq!(c[2]["parts"][1]["functionResponse"], json!({ "name": "get_time", "response": { "content": "14:00" } }));
    assert_eq!(c[2]["parts"][2]["text"], "Thanks. Summarize.");

    // Streams go to streamGenerateContent with alt=sse.
    let up =
        FakeUpstream::fixed(Reply::sse(&wire::gemini_stream(&["a"], &[], "STOP", (1, 1, 0), Default::default()))).await;
    let gw = Gateway::start(&config("gemini", &up.url(), "strict")).await;
    let mut req = json!({ "model": "chat", "stream": true, "messages": [{ "role": "user", "content": "x" }] });
    post(&gw.url, "/v1/chat/completions", &req).await.bytes().await.unwrap();
    let r = up.last();
    assert_eq!(r.path, "/v1beta/models/real-model:streamGenerateContent");
    assert_eq!(r.query.as_deref(), Some("alt=sse"));
    // A tool result that matches no earlier call is the caller's error, named precisely.
    req["stream"] = json!(false);
    req["messages"] =
        json!([{ "role": "user", "content": "x" }, { "role": "tool", "tool_call_id": "call_zzz", "content": "1" }]);
    let resp = post(&gw.url, "/v1/chat/completions", &req).await;
    assert_eq!(resp.status(), 400);
    assert_eq!(resp.json::<Value>().await.unwrap()["error"]["param"], "messages[1].tool_call_id");
}

#[tokio::test]
async fn openai_request_passes_through_with_real_model() {
    let up = FakeUpstream::fixed(Reply::json(wire::openai_response(Some("ok"), &[], "stop", (1, 1, 0)))).await;
    let gw = Gateway::start(&config("openai", &format!("{}/v1", up.url()), "strict")).await;
    let mut req = conversation();
    req["seed"] = json!(3);
    req["logit_bias"] = json!({ "50256": -100 });
    req["max_completion_tokens"] = json!(200);
    let resp = post(&gw.url, "/v1/chat/completions", &req).await;
    assert_eq!(resp.status(), 200);
    let r = up.last();
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.header("authorization"), Some(format!("Bearer {UPSTREAM_KEY}").as_str()));
    let b = r.body;
    assert_eq!(b["model"], "real-model");
    // The same protocol on both sides: the caller's bytes, with only the model replaced.
    let sent = serde_json::to_vec(&req).unwrap();
    let want = String::from_utf8(sent).unwrap().replacen(r#""model":"chat""#, r#""model":"real-model""#, 1);
    assert_eq!(String::from_utf8_lossy(&r.raw), want);
    assert_eq!(b["messages"], req["messages"]);
    assert_eq!(b["temperature"], 1.2, "OpenAI keeps 0..2");
    assert_eq!(b["seed"], 3);
    assert_eq!(b["logit_bias"], json!({ "50256": -100 }));
    assert_eq!(b["max_tokens"], 300);
    assert_eq!(b["max_completion_tokens"], 200);
    assert!(b.get("stream").is_none());
}

#[tokio::test]
async fn azure_openai_url_and_key() {
    let up = FakeUpstream::fixed(Reply::json(wire::openai_response(Some("ok"), &[], "stop", (1, 1, 0)))).await;
    let gw = Gateway::start(&config("azure_openai", &up.url(), "strict")).await;
    let resp = post(
        &gw.url,
        "/v1/chat/completions",
        &json!({ "model": "chat", "messages": [{ "role": "user", "content": "x" }] }),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let r = up.last();
    assert_eq!(r.path, "/openai/deployments/real-model/chat/completions");
    assert_eq!(r.query.as_deref(), Some("api-version=2024-10-21"));
    assert_eq!(r.header("api-key"), Some(UPSTREAM_KEY));
    assert!(r.header("authorization").is_none());
}

/// An Anthropic caller's turn whose tool results hold images (Claude Code's `Read` of a PNG, a
/// screenshot tool): one result with a text and a base64 image, one with only an image URL.
fn tool_images_turn() -> Value {
    json!({
        "model": "chat",
        "max_tokens": 100,
        "messages": [
            { "role": "user", "content": "Look at both." },
            { "role": "assistant", "content": [
                { "type": "tool_use", "id": "t1", "name": "Read", "input": { "file_path": "a.png" } },
                { "type": "tool_use", "id": "t2", "name": "shot", "input": {} } ] },
            { "role": "user", "content": [
                { "type": "tool_result", "tool_use_id": "t1", "content": [
                    { "type": "text", "text": "a.png:" },
                    { "type": "image", "source": { "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo=" } } ] },
                { "type": "tool_result", "tool_use_id": "t2", "is_error": true, "content": [
                    { "type": "image", "source": { "type": "url", "url": "https://example.com/s.png" } } ] },
                { "type": "text", "text": "Describe them." } ] }
        ]
    })
}

/// The body an upstream speaking `provider` received for `body` POSTed to `path` (`/v1/messages`
/// as the Anthropic SDKs send it), which ax answered with 200.
async fn upstream_got(provider: &str, path: &str, body: &Value) -> Value {
    let reply = match provider {
        "openai" => wire::openai_response(Some("ok"), &[], "stop", (1, 1, 0)),
        "gemini" => wire::gemini_response(Some("ok"), &[], "STOP", (1, 1, 0)),
        _ => wire::anthropic_response(Some("ok"), &[], "end_turn", (1, 1, 0, 0)),
    };
    let up = FakeUpstream::fixed(Reply::json(reply)).await;
    let gw = Gateway::start(&config(provider, &up.url(), "strict")).await;
    let resp =
        if path == "/v1/messages" { post_messages(&gw.url, body).await } else { post(&gw.url, path, body).await };
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    up.last().body
}

/// Temperature is the same quantity in every API (the logits are divided by it): a caller's value
/// reaches every upstream as given, clamped only into the target's range (Anthropic's stops at 1).
#[tokio::test]
async fn temperature_reaches_every_upstream_as_given() {
    let messages = |t: f64| json!({ "model": "chat", "max_tokens": 10, "temperature": t, "messages": [{ "role": "user", "content": "hi" }] });
    let chat = |t: f64| json!({ "model": "chat", "temperature": t, "messages": [{ "role": "user", "content": "hi" }] });
    let responses = |t: f64| json!({ "model": "chat", "temperature": t, "input": "hi" });
    for t in [0.0, 0.5, 1.0] {
        assert_eq!(upstream_got("openai", "/v1/messages", &messages(t)).await["temperature"], t);
        assert_eq!(upstream_got("gemini", "/v1/messages", &messages(t)).await["generationConfig"]["temperature"], t);
        assert_eq!(upstream_got("anthropic", "/v1/chat/completions", &chat(t)).await["temperature"], t);
        assert_eq!(upstream_got("anthropic", "/v1/responses", &responses(t)).await["temperature"], t);
    }
    // Past Anthropic's range: its hottest; Gemini's range is OpenAI's.
    assert_eq!(upstream_got("anthropic", "/v1/chat/completions", &chat(1.5)).await["temperature"], 1.0);
    assert_eq!(
        upstream_got("gemini", "/v1/chat/completions", &chat(1.5)).await["generationConfig"]["temperature"],
        1.5
    );
    // An Anthropic caller's value past Anthropic's range is refused, as Anthropic would.
    let up = FakeUpstream::fixed(Reply::json(wire::openai_response(Some("ok"), &[], "stop", (1, 1, 0)))).await;
    let gw = Gateway::start(&config("openai", &up.url(), "strict")).await;
    let resp = post_messages(&gw.url, &messages(1.5)).await;
    assert_eq!(resp.status(), 400);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("temperature"), "{e}");
    assert_eq!(up.hits(), 0);
}

#[tokio::test]
async fn images_a_tool_returned_reach_upstreams_of_other_protocols() {
    let mark = "[image: attached after the tool results]";
    // OpenAI's tool messages hold only text: the images follow the results in a user message.
    let m = upstream_got("openai", "/v1/messages", &tool_images_turn()).await["messages"].as_array().cloned().unwrap();
    assert_eq!(m.len(), 6, "{m:#?}");
    assert_eq!(m[2], json!({ "role": "tool", "content": format!("a.png:\n{mark}"), "tool_call_id": "t1" }));
    assert_eq!(m[3], json!({ "role": "tool", "content": format!("Error:\n{mark}"), "tool_call_id": "t2" }));
    assert_eq!(
        m[4],
        json!({ "role": "user", "content": [
            { "type": "text", "text": "Images returned by tool call t1:" },
            { "type": "image_url", "image_url": { "url": "data:image/png;base64,iVBORw0KGgo=" } },
            { "type": "text", "text": "Images returned by tool call t2:" },
            { "type": "image_url", "image_url": { "url": "https://example.com/s.png" } } ] })
    );
    assert_eq!(m[5], json!({ "role": "user", "content": "Describe them." }));
    // A PDF a tool returned (Claude Code's `Read` of one) only Anthropic reads: the result says
    // it was left out, rather than losing it silently; a text document is its text.
    let mut turn = tool_images_turn();
    turn["messages"][2]["content"] = json!([
        { "type": "tool_result", "tool_use_id": "t1", "content": [
            { "type": "text", "text": "PDF file read: a.pdf" },
            { "type": "document", "source": { "type": "base64", "media_type": "application/pdf", "data": "JVBERi0=" } } ] },
        { "type": "tool_result", "tool_use_id": "t2", "content": [
            { "type": "document", "source": { "type": "text", "media_type": "text/plain", "data": "plain words" } } ] } ]);
    let m = upstream_got("openai", "/v1/messages", &turn).await["messages"].as_array().cloned().unwrap();
    assert_eq!(
        m[2]["content"],
        "PDF file read: a.pdf\n[document (application/pdf) left out: only an Anthropic upstream reads PDF and file documents]"
    );
    assert_eq!(m[3]["content"], "plain words");

    // Gemini: the images join the turn after its function responses.
    let c = upstream_got("gemini", "/v1/messages", &tool_images_turn()).await["contents"].as_array().cloned().unwrap();
    assert_eq!(c.len(), 3, "{c:#?}");
    assert_eq!(
        c[2]["parts"],
        json!([
            { "functionResponse": { "name": "Read", "response": { "content": format!("a.png:\n{mark}") } } },
            { "functionResponse": { "name": "shot", "response": { "content": format!("Error:\n{mark}") } } },
            { "inlineData": { "mimeType": "image/png", "data": "iVBORw0KGgo=" } },
            { "fileData": { "mimeType": "image/png", "fileUri": "https://example.com/s.png" } },
            { "text": "Describe them." } ])
    );

    // A Responses caller's function output with an image (Codex's `view_image`), to OpenAI.
    let body = json!({ "model": "chat", "store": false, "input": [
        { "role": "user", "content": "Look." },
        { "type": "function_call", "call_id": "c1", "name": "view_image", "arguments": "{}" },
        { "type": "function_call_output", "call_id": "c1", "output": [
            { "type": "input_text", "text": "shown" },
            { "type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=" } ] } ] });
    let m = upstream_got("openai", "/v1/responses", &body).await["messages"].as_array().cloned().unwrap();
    assert_eq!(m.len(), 4, "{m:#?}");
    assert_eq!(m[2]["content"], format!("shown\n{mark}"));
    assert_eq!(m[3]["content"][1]["image_url"]["url"], "data:image/png;base64,iVBORw0KGgo=");

    // An OpenAI caller's tool message with an image part, to Anthropic: a tool_result's blocks.
    let body = json!({ "model": "chat", "messages": [
        { "role": "user", "content": "Look." },
        { "role": "assistant", "tool_calls": [{ "id": "c1", "type": "function", "function": { "name": "shot", "arguments": "{}" } }] },
        { "role": "tool", "tool_call_id": "c1", "content": [
            { "type": "text", "text": "shown" },
            { "type": "image_url", "image_url": { "url": "data:image/png;base64,iVBORw0KGgo=" } } ] } ] });
    let m = upstream_got("anthropic", "/v1/chat/completions", &body).await["messages"].as_array().cloned().unwrap();
    assert_eq!(
        m[2]["content"][0],
        json!({ "type": "tool_result", "tool_use_id": "c1", "content": [
            { "type": "text", "text": "shown" },
            { "type": "image", "source": { "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo=" } } ] })
    );
}

/// `strict: true` on a tool is honoured on Gemini, which has no strict mode: each call of a strict
/// tool is checked against its schema; a call that does not match fails over to the next
/// candidate, and with none left is a 502 `upstream_invalid_tool_call` (whole answers and
/// streams). A tool that is not strict is not checked. Before, `strict` on a Gemini route was a
/// 400 in strict mode (the Agents SDK's every tool) and dropped in lenient mode.
#[tokio::test]
async fn strict_tools_are_checked_on_gemini_and_a_bad_call_fails_over() {
    // A stream that says something first ("say"), when the caller's message asks for it.
    let call = |args: &'static str| {
        move |r: &ax_tests::Recorded| {
            if r.path.ends_with(":streamGenerateContent") {
                let say: &[&str] = if r.raw.windows(3).any(|w| w == b"say") { &["Let me check."] } else { &[] };
                Reply::sse(&wire::gemini_stream(say, &[("get_weather", args)], "STOP", (5, 5, 0), Default::default()))
            } else {
                Reply::json(wire::gemini_response(None, &[("get_weather", args)], "STOP", (5, 5, 0)))
            }
        }
    };
    let bad = FakeUpstream::start(call(r#"{"town":"Paris"}"#)).await;
    let good = FakeUpstream::start(call(r#"{"city":"Paris"}"#)).await;
    let caps = "capabilities: [chat, tools, streaming]";
    let gw = Gateway::start(&format!(
        r#"server: {{ params: strict }}
upstreams:
  - {{ name: bad, provider: gemini, base_url: "{}", api_key: k, models: [{{ name: g, context_window: 100000, {caps} }}] }}
  - {{ name: good, provider: gemini, base_url: "{}", api_key: k, models: [{{ name: g, context_window: 100000, {caps} }}] }}
routes:
  - {{ alias: chat, strategy: priority, candidates: [{{ upstream: bad, model: g, priority: 0 }}, {{ upstream: good, model: g, priority: 1 }}] }}
  - {{ alias: only-bad, candidates: [{{ upstream: bad, model: g }}] }}
tenants:
  - {{ id: t, keys: [{{ id: k, sha256: "{}" }}] }}
"#,
        bad.url(),
        good.url(),
        key_digest(KEY)
    ))
    .await;
    let ask = |alias: &str, strict: bool, stream: bool| {
        json!({ "model": alias, "stream": stream, "messages": [{ "role": "user", "content": "Weather in Paris?" }],
            "tools": [{ "type": "function", "function": { "name": "get_weather", "strict": strict,
                "parameters": { "type": "object", "properties": { "city": { "type": "string" } },
                    "required": ["city"], "additionalProperties": false } } }] })
    };
    // The bad call fails over; the good one is served.
    for stream in [false, true] {
        let resp = post(&gw.url, "/v1/chat/completions", &ask("chat", true, stream)).await;
        assert_eq!(resp.status(), 200, "stream {stream}");
        assert_eq!(resp.headers()["x-ax-upstream"], "good");
        assert_eq!(resp.headers()["x-ax-attempts"], "2");
        let args = if stream {
            ax_tests::assemble(&ax_tests::sse_events(resp).await).tool_calls[0].2.clone()
        } else {
            let r: Value = resp.json().await.unwrap();
            r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].as_str().unwrap().to_owned()
        };
        assert_eq!(serde_json::from_str::<Value>(&args).unwrap(), json!({ "city": "Paris" }));
    }
    // With nothing left: a clear error, before the stream's first byte as for a whole answer.
    for stream in [false, true] {
        let resp = post(&gw.url, "/v1/chat/completions", &ask("only-bad", true, stream)).await;
        assert_eq!(resp.status(), 502, "stream {stream}");
        let e: Value = resp.json().await.unwrap();
        assert_eq!(e["error"]["code"], "upstream_invalid_tool_call", "{e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("get_weather"), "{e}");
    }
    // Text already sent: the stream ends with the error event instead of the call.
    let mut req = ask("only-bad", true, true);
    req["messages"][0]["content"] = json!("Weather in Paris? (say something first)");
    let resp = post(&gw.url, "/v1/chat/completions", &req).await;
    assert_eq!(resp.status(), 200);
    let got = ax_tests::assemble(&ax_tests::sse_events(resp).await);
    assert_eq!(got.text, "Let me check.");
    assert!(got.tool_calls.is_empty(), "{got:?}");
    assert_eq!(got.error.unwrap()["code"], "upstream_invalid_tool_call");
    // Not strict: not checked, the call goes to the caller as the model wrote it.
    let resp = post(&gw.url, "/v1/chat/completions", &ask("only-bad", false, false)).await;
    assert_eq!(resp.status(), 200);
    // The schema never reached Gemini as a strict flag it does not know.
    assert!(bad.last().body["tools"][0]["functionDeclarations"][0].get("strict").is_none());
}
