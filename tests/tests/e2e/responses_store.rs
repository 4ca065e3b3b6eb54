//! The Responses API's stored responses: `previous_response_id` continues a conversation on
//! another data plane sharing Redis and on another provider after a failover; retrieve, delete
//! and `input_items`; a response belongs to its tenant; `store: false` keeps nothing; without
//! Redis a process keeps its own.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ax_tests::{key_digest, wire, FakeUpstream, Gateway, Reply, KEY};
use serde_json::{json, Value};

const OTHER: &str = "ax-other-tenant-key";

fn config(server: &str, upstreams: &str, route: &str) -> String {
    format!(
        r#"server: {{ {server} }}
upstreams:
{upstreams}
routes:
  - {route}
tenants:
  - {{ id: t, keys: [{{ id: k, sha256: "{}" }}] }}
  - {{ id: u, keys: [{{ id: k2, sha256: "{}" }}] }}
"#,
        key_digest(KEY),
        key_digest(OTHER)
    )
}

async fn call(method: reqwest::Method, url: &str, key: &str, body: Option<&Value>) -> (u16, Value, String) {
    let mut r = reqwest::Client::new().request(method, url).bearer_auth(key);
    if let Some(b) = body {
        r = r.json(b);
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null), text)
}

/// Scripts run (walks) and `MULTI`s executed (writes) by a Redis server so far. A script's first
/// `EVALSHA` on a server fails (`NOSCRIPT`) and is sent again as `EVAL`: one walk.
fn redis_calls(port: u16) -> (u64, u64) {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string(), "info", "commandstats"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let stat = |name: &str, field: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:")))
            .and_then(|rest| rest.split(',').find_map(|kv| kv.strip_prefix(&format!("{field}="))))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (stat("evalsha", "calls") - stat("evalsha", "failed_calls") + stat("eval", "calls"), stat("exec", "calls"))
}

async fn create(gw: &str, key: &str, body: &Value) -> (u16, Value, String) {
    call(reqwest::Method::POST, &format!("{gw}/v1/responses"), key, Some(body)).await
}

/// The `response.completed` event's response, from a stream's text.
fn completed(text: &str) -> Value {
    text.split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .find(|e| e["type"] == "response.completed")
        .map(|e| e["response"].clone())
        .unwrap_or_else(|| panic!("no response.completed in {text}"))
}

/// Turn 1 on data plane A, served by Anthropic; turn 2 on data plane B (same Redis), where
/// Anthropic now fails and Gemini serves, with the whole stored conversation translated for it.
#[tokio::test]
async fn a_conversation_continues_on_another_data_plane_and_another_provider() {
    let redis = ax_tests::RedisServer::start();
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let an = FakeUpstream::start(move |_| {
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            Reply::json(wire::anthropic_response(Some("Paris is sunny."), &[], "end_turn", (12, 4, 0, 0)))
        } else {
            Reply::status(503, json!({ "type": "error", "error": { "type": "overloaded_error", "message": "busy" } }))
        }
    })
    .await;
    let ge = FakeUpstream::fixed(Reply::sse(&wire::gemini_stream(
        &["Bring ", "sunglasses."],
        &[],
        "STOP",
        (30, 3, 0),
        wire::Framing::default(),
    )))
    .await;
    let model = "{ name: real, context_window: 100000, capabilities: [chat, tools, streaming] }";
    let upstreams = format!(
        "  - {{ name: an, provider: anthropic, base_url: \"{}\", api_key: k, models: [{model}] }}\n  - {{ name: ge, provider: gemini, base_url: \"{}\", api_key: k, models: [{model}] }}",
        an.url(),
        ge.url()
    );
    let route = "{ alias: chat, strategy: priority, candidates: [{ upstream: an, model: real, priority: 0 }, { upstream: ge, model: real, priority: 1 }] }";
    let server =
        format!("redis_url: \"redis://127.0.0.1:{}\", redis_prefix: \"conv-{}\"", redis.port, std::process::id());
    let yaml = config(&server, &upstreams, route);
    let a = Gateway::start(&yaml).await;
    let b = Gateway::start(&yaml).await;
    // Each follows the fleet's deletes before it remembers what it writes.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;

    let (status, first, text) =
        create(&a.url, KEY, &json!({ "model": "chat", "instructions": "Be brief.", "input": "Weather in Paris?" }))
            .await;
    assert_eq!(status, 200, "{text}");
    let id1 = first["id"].as_str().unwrap().to_owned();
    assert_eq!(
        (first["store"].as_bool(), first["output"][0]["content"][0]["text"].as_str()),
        (Some(true), Some("Paris is sunny."))
    );

    let turn2 = json!({ "model": "chat", "previous_response_id": id1, "stream": true,
        "input": [{ "role": "user", "content": [{ "type": "input_text", "text": "What should I bring?" }] }] });
    let (status, _, text) = create(&b.url, KEY, &turn2).await;
    assert_eq!(status, 200, "{text}");
    let second = completed(&text);
    assert_eq!(second["previous_response_id"], json!(id1));
    assert_eq!(second["output"][0]["content"][0]["text"], "Bring sunglasses.");
    // Gemini saw the whole conversation in its own shape (instructions are not carried over).
    let sent = ge.last().body;
    let turns: Vec<(String, String)> = sent["contents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["role"].as_str().unwrap().to_owned(), c["parts"][0]["text"].as_str().unwrap().to_owned()))
        .collect();
    let want = [("user", "Weather in Paris?"), ("model", "Paris is sunny."), ("user", "What should I bring?")];
    assert_eq!(turns, want.map(|(r, t)| (r.to_owned(), t.to_owned())), "{sent}");
    assert!(sent.get("systemInstruction").is_none(), "{sent}");
    let id2 = second["id"].as_str().unwrap().to_owned();
    assert_ne!(id1, id2);
    // A turn continued on the data plane that served the one before it reads nothing from Redis:
    // one round trip, its write.
    let scripts = || redis_calls(redis.port);
    // Turn 2 read its conversation from Redis, so its write went behind its answer: landed by now.
    let landed = std::time::Instant::now();
    while scripts().1 < 2 {
        assert!(landed.elapsed() < std::time::Duration::from_secs(5), "turn 2's write never reached Redis");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let before = scripts();
    let turn3 =
        json!({ "model": "chat", "previous_response_id": id2, "stream": true, "store": true, "input": "Thanks." });
    let (status, _, text) = create(&b.url, KEY, &turn3).await;
    assert_eq!(status, 200, "{text}");
    let after = scripts();
    assert_eq!((after.0 - before.0, after.1 - before.1), (0, 1), "walks and writes of a turn continued where it began");

    // Retrieved from the other data plane, as it was streamed.
    let (status, got, _) = call(reqwest::Method::GET, &format!("{}/v1/responses/{id2}", a.url), KEY, None).await;
    assert_eq!(status, 200);
    assert_eq!(got, second);
    // Every item the second turn was made from, oldest first, with ids; paged.
    let items_url = format!("{}/v1/responses/{id2}/input_items", a.url);
    let (status, items, text) = call(reqwest::Method::GET, &format!("{items_url}?order=asc"), KEY, None).await;
    assert_eq!(status, 200, "{text}");
    let texts: Vec<&str> =
        items["data"].as_array().unwrap().iter().map(|i| i["content"][0]["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["Weather in Paris?", "Paris is sunny.", "What should I bring?"]);
    assert!(items["data"].as_array().unwrap().iter().all(|i| i["id"].is_string()));
    let (_, page, _) = call(reqwest::Method::GET, &format!("{items_url}?limit=2"), KEY, None).await;
    assert_eq!(page["data"][0]["content"][0]["text"], "What should I bring?");
    assert_eq!((page["data"].as_array().unwrap().len(), page["has_more"].as_bool()), (2, Some(true)));
    let after = page["last_id"].as_str().unwrap();
    let (_, rest, _) = call(reqwest::Method::GET, &format!("{items_url}?limit=2&after={after}"), KEY, None).await;
    assert_eq!(
        (rest["data"][0]["content"][0]["text"].as_str(), rest["has_more"].as_bool()),
        (Some("Weather in Paris?"), Some(false))
    );
    let (status, bad, _) = call(reqwest::Method::GET, &format!("{items_url}?limit=500"), KEY, None).await;
    assert_eq!((status, bad["error"]["param"].as_str()), (400, Some("limit")));

    // Another tenant's id is a 404, whether read, listed, deleted or continued.
    for (method, path) in [
        (reqwest::Method::GET, format!("/v1/responses/{id2}")),
        (reqwest::Method::GET, format!("/v1/responses/{id2}/input_items")),
        (reqwest::Method::DELETE, format!("/v1/responses/{id2}")),
    ] {
        let (status, e, _) = call(method, &format!("{}{path}", b.url), OTHER, None).await;
        assert_eq!((status, e["error"]["code"].as_str()), (404, Some("response_not_found")), "{path}");
    }
    let (status, e, _) =
        create(&b.url, OTHER, &json!({ "model": "chat", "previous_response_id": id2, "input": "hi" })).await;
    assert_eq!((status, e["error"]["param"].as_str()), (404, Some("previous_response_id")), "{e}");
    let (status, ..) = call(reqwest::Method::GET, &format!("{}/v1/responses/resp_nope", a.url), KEY, None).await;
    assert_eq!(status, 404);
    let (status, ..) = call(reqwest::Method::GET, &format!("{}/v1/responses/{id2}", a.url), "wrong-key", None).await;
    assert_eq!(status, 401);

    // Deleting the first turn: the second is still there, but can no longer be continued.
    let (status, deleted, _) = call(reqwest::Method::DELETE, &format!("{}/v1/responses/{id1}", b.url), KEY, None).await;
    assert_eq!((status, deleted), (200, json!({ "id": id1, "object": "response", "deleted": true })));
    let (status, ..) = call(reqwest::Method::GET, &format!("{}/v1/responses/{id2}", a.url), KEY, None).await;
    assert_eq!(status, 200);
    let (status, e, _) =
        create(&a.url, KEY, &json!({ "model": "chat", "previous_response_id": id2, "input": "and?" })).await;
    assert_eq!(status, 404);
    assert!(e["error"]["message"].as_str().unwrap().contains("deleted or has expired"), "{e}");

    // store: false keeps nothing.
    let (status, _, text) =
        create(&a.url, KEY, &json!({ "model": "chat", "store": false, "stream": true, "input": "x" })).await;
    let r = completed(&text);
    assert_eq!((status, r["store"].as_bool()), (200, Some(false)));
    let (status, ..) =
        call(reqwest::Method::GET, &format!("{}/v1/responses/{}", a.url, r["id"].as_str().unwrap()), KEY, None).await;
    assert_eq!(status, 404);
}

/// A turn waits on Redis at most once. One that continues a conversation this data plane does not
/// remember reads it (the walk) and sends its own write behind its answer: with Redis refusing
/// writes for 1.5 s (`CLIENT PAUSE WRITE`, shorter than ax's 2 s store timeout) after the upstream got the request, the answer still
/// comes at once, and the write lands when Redis takes writes again. A turn continued where the
/// previous one ran (no walk) waits for its write before its answer ends.
#[tokio::test]
async fn a_turn_that_read_its_conversation_does_not_wait_for_its_write() {
    let redis = ax_tests::RedisServer::start();
    let up = FakeUpstream::fixed(Reply::Delayed(
        std::time::Duration::from_millis(300),
        Box::new(Reply::json(wire::anthropic_response(Some("Noted."), &[], "end_turn", (5, 2, 0, 0)))),
    ))
    .await;
    let upstreams = format!(
        "  - {{ name: an, provider: anthropic, base_url: \"{}\", api_key: k, models: [{{ name: real, context_window: 100000, capabilities: [chat, streaming] }}] }}",
        up.url()
    );
    let route = "{ alias: chat, candidates: [{ upstream: an, model: real }] }";
    let server =
        format!("redis_url: \"redis://127.0.0.1:{}\", redis_prefix: \"pause-{}\"", redis.port, std::process::id());
    let yaml = config(&server, &upstreams, route);
    let a = Gateway::start(&yaml).await;
    let b = Gateway::start(&yaml).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let pause = |ms: u64| {
        let out = std::process::Command::new("redis-cli")
            .args(["-p", &redis.port.to_string(), "client", "pause", &ms.to_string(), "write"])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "OK");
    };
    // A turn sent on `gw`; Redis holds writes for 1.5 s from the moment the upstream has it.
    // Returns the response and how long after the pause it came.
    let paused_turn = |gw: String, body: Value| {
        let seen = up.requests().len();
        let up = &up;
        async move {
            let call = tokio::spawn(async move { create(&gw, KEY, &body).await });
            while up.requests().len() == seen {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            pause(1500);
            let paused = std::time::Instant::now();
            let (status, r, text) = call.await.unwrap();
            assert_eq!(status, 200, "{text}");
            (r, paused.elapsed())
        }
    };

    let (status, first, text) = create(&a.url, KEY, &json!({ "model": "chat", "input": "Remember 7." })).await;
    assert_eq!(status, 200, "{text}");
    let id1 = first["id"].as_str().unwrap().to_owned();
    let (walks, writes) = redis_calls(redis.port);

    // On b, which does not remember turn 1: one walk, and the answer does not wait for the write.
    let (second, waited) =
        paused_turn(b.url.clone(), json!({ "model": "chat", "previous_response_id": id1, "input": "And 8." })).await;
    assert!(waited < std::time::Duration::from_millis(1000), "the answer waited {waited:?} for its write");
    assert_eq!(redis_calls(redis.port).0, walks + 1);
    // Its write lands once Redis takes writes again, and a, which never saw turn 2, continues it.
    let landed = std::time::Instant::now();
    while redis_calls(redis.port).1 == writes {
        assert!(landed.elapsed() < std::time::Duration::from_secs(5), "turn 2's write never reached Redis");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let id2 = second["id"].as_str().unwrap().to_owned();
    let (status, third, text) =
        create(&a.url, KEY, &json!({ "model": "chat", "previous_response_id": id2, "input": "Sum?" })).await;
    assert_eq!(status, 200, "{text}");
    let sent = up.last().body;
    let said: Vec<&str> =
        sent["messages"].as_array().unwrap().iter().filter_map(|m| m["content"][0]["text"].as_str()).collect();
    assert_eq!(said, ["Remember 7.", "Noted.", "And 8.", "Noted.", "Sum?"], "{sent}");

    // On a again, which remembers turn 3: no walk, and the answer waits for its write.
    let id3 = third["id"].as_str().unwrap().to_owned();
    let before = redis_calls(redis.port);
    let (_, waited) =
        paused_turn(a.url.clone(), json!({ "model": "chat", "previous_response_id": id3, "input": "Thanks." })).await;
    assert!(
        waited >= std::time::Duration::from_millis(1000),
        "the answer came {waited:?} after the pause, before its write"
    );
    let after = redis_calls(redis.port);
    assert_eq!((after.0 - before.0, after.1 - before.1), (0, 1), "walks and writes of a turn continued where it began");
}

/// Without Redis a data plane keeps responses itself: a tool call's round trip continues from
/// the stored call, and the upstream gets the assistant's call before the tool's output.
#[tokio::test]
async fn a_tool_round_trip_continues_from_the_stored_call_without_redis() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let oa = FakeUpstream::start(move |_| {
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            Reply::json(wire::openai_response(
                None,
                &[("call_7", "get_weather", r#"{"city":"Paris"}"#)],
                "tool_calls",
                (9, 5, 0),
            ))
        } else {
            Reply::json(wire::openai_response(Some("It is 21 C."), &[], "stop", (20, 4, 0)))
        }
    })
    .await;
    let model = "{ name: real, context_window: 100000, capabilities: [chat, tools, streaming] }";
    let upstreams =
        format!("  - {{ name: oa, provider: openai, base_url: \"{}/v1\", api_key: k, models: [{model}] }}", oa.url());
    let gw =
        Gateway::start(&config("", &upstreams, "{ alias: chat, candidates: [{ upstream: oa, model: real }] }")).await;
    let tools = json!([{ "type": "function", "name": "get_weather", "parameters": { "type": "object" } }]);
    let (status, first, text) =
        create(&gw.url, KEY, &json!({ "model": "chat", "input": "Weather?", "tools": tools })).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(first["output"][0]["type"], "function_call");
    let (status, second, text) = create(
        &gw.url,
        KEY,
        &json!({ "model": "chat", "previous_response_id": first["id"], "tools": tools,
            "input": [{ "type": "function_call_output", "call_id": "call_7", "output": "21 C" }] }),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(second["output"][0]["content"][0]["text"], "It is 21 C.");
    let sent = oa.last().body;
    let msgs = sent["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3, "{sent}");
    assert_eq!(msgs[1]["tool_calls"][0]["id"], "call_7");
    assert_eq!((msgs[2]["role"].as_str(), msgs[2]["tool_call_id"].as_str()), (Some("tool"), Some("call_7")));
    // A data plane without Redis does not know another's ids.
    let other =
        Gateway::start(&config("", &upstreams, "{ alias: chat, candidates: [{ upstream: oa, model: real }] }")).await;
    let (status, ..) =
        create(&other.url, KEY, &json!({ "model": "chat", "previous_response_id": second["id"], "input": "x" })).await;
    assert_eq!(status, 404);
}

/// Input items are listed as OpenAI lists them, whatever shape the caller sent: a message's
/// `content` a list of typed parts (`input_text`; `output_text` for the assistant's), each message
/// with a `status`. A string content was listed as the string, so an SDK iterating
/// `item.content` got its characters.
#[tokio::test]
async fn input_items_list_a_messages_content_as_typed_parts() {
    let oa = FakeUpstream::fixed(Reply::json(wire::openai_response(Some("Ciao."), &[], "stop", (9, 2, 0)))).await;
    let model = "{ name: real, context_window: 100000, capabilities: [chat, tools, streaming] }";
    let upstreams =
        format!("  - {{ name: oa, provider: openai, base_url: \"{}/v1\", api_key: k, models: [{model}] }}", oa.url());
    let gw =
        Gateway::start(&config("", &upstreams, "{ alias: chat, candidates: [{ upstream: oa, model: real }] }")).await;
    let input = json!([
        { "role": "developer", "content": "Be brief." },
        { "role": "user", "content": "Say hello." },
        { "type": "message", "role": "assistant", "content": "Hello!" },
        { "role": "user", "content": [{ "type": "input_text", "text": "In Italian." }] }
    ]);
    let (status, r, text) = create(&gw.url, KEY, &json!({ "model": "chat", "input": input })).await;
    assert_eq!(status, 200, "{text}");
    let url = format!("{}/v1/responses/{}/input_items?order=asc", gw.url, r["id"].as_str().unwrap());
    let (status, items, text) = call(reqwest::Method::GET, &url, KEY, None).await;
    assert_eq!(status, 200, "{text}");
    let listed: Vec<(&str, &str, &str)> = items["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            assert_eq!((i["type"].as_str(), i["status"].as_str()), (Some("message"), Some("completed")), "{i}");
            assert!(i["id"].as_str().is_some_and(|id| id.starts_with("msg_")), "{i}");
            let part = &i["content"].as_array().unwrap_or_else(|| panic!("content is not a list: {i}"))[0];
            (i["role"].as_str().unwrap(), part["type"].as_str().unwrap(), part["text"].as_str().unwrap())
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("developer", "input_text", "Be brief."),
            ("user", "input_text", "Say hello."),
            ("assistant", "output_text", "Hello!"),
            ("user", "input_text", "In Italian."),
        ]
    );
    assert_eq!(items["data"][2]["content"][0]["annotations"], json!([]));
}
