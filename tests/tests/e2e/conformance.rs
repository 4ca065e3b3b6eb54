//! One conformance suite for every provider: plain replies, tool calls (single and parallel,
//! non-stream and stream), a long stream split anywhere, finish reasons, errors inside HTTP 200,
//! and usage with cached tokens.

use std::time::Duration;

use ax_tests::wire::{self, Framing};
use ax_tests::{assemble, post, sse_events, FakeUpstream, Gateway, Reply};
use serde_json::{json, Value};

use crate::{config, ALL, P};

async fn gateway_for(p: P, upstream: &FakeUpstream) -> Gateway {
    Gateway::start(&config(p.provider(), &upstream.url(), "strict")).await
}

fn chat(stream: bool) -> Value {
    json!({ "model": "chat", "stream": stream, "messages": [{ "role": "user", "content": "hello" }] })
}

fn tools_request(stream: bool) -> Value {
    json!({
        "model": "chat", "stream": stream,
        "messages": [{ "role": "user", "content": "weather in Paris and Tokyo?" }],
        "tools": [{ "type": "function", "function": { "name": "get_weather", "description": "Weather",
                    "parameters": { "type": "object", "properties": { "city": { "type": "string" } } } } },
                  { "type": "function", "function": { "name": "get_time", "parameters": { "type": "object" } } }]
    })
}

/// A non-stream reply in `p`'s protocol.
fn plain(p: P, text: Option<&str>, calls: &[(&str, &str, &str)], finish: &str, cached: u64) -> Reply {
    let gcalls: Vec<(&str, &str)> = calls.iter().map(|(_, n, a)| (*n, *a)).collect();
    Reply::json(match p {
        P::OpenAi => wire::openai_response(text, calls, finish, (100, 20, cached)),
        P::Anthropic => wire::anthropic_response(text, calls, finish, (70, 20, 10, cached)),
        P::Gemini => wire::gemini_response(text, &gcalls, finish, (100, 20, cached)),
    })
}

/// A stream reply in `p`'s protocol, split into pieces of `sizes` bytes.
fn streamed(p: P, pieces: &[&str], calls: &[(&str, &str, &str)], finish: &str, f: Framing, sizes: &[usize]) -> Reply {
    let gcalls: Vec<(&str, &str)> = calls.iter().map(|(_, n, a)| (*n, *a)).collect();
    let text = match p {
        P::OpenAi => wire::openai_stream(pieces, calls, finish, (100, 20, 30), f),
        P::Anthropic => wire::anthropic_stream(pieces, calls, finish, (70, 20, 0, 30), f),
        P::Gemini => wire::gemini_stream(pieces, &gcalls, finish, (100, 20, 30), f),
    };
    Reply::sse_split(&text, sizes)
}

/// The provider's name for a plain stop, and for a tool-call stop.
fn stop_of(p: P) -> (&'static str, &'static str) {
    match p {
        P::OpenAi => ("stop", "tool_calls"),
        P::Anthropic => ("end_turn", "tool_use"),
        P::Gemini => ("STOP", "STOP"),
    }
}

#[tokio::test]
async fn plain_reply_every_provider() {
    for p in ALL {
        let up = FakeUpstream::fixed(plain(p, Some("Hello there"), &[], stop_of(p).0, 0)).await;
        let gw = gateway_for(p, &up).await;
        let resp = post(&gw.url, "/v1/chat/completions", &chat(false)).await;
        assert_eq!(resp.status(), 200, "{p:?}");
        assert_eq!(resp.headers()["x-ax-upstream"], "up");
        assert_eq!(resp.headers()["x-ax-model"], "real-model");
        assert_eq!(resp.headers()["x-ax-attempts"], "1");
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["choices"][0]["message"]["role"], "assistant");
        assert_eq!(v["choices"][0]["message"]["content"], "Hello there", "{p:?}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{p:?}");
        assert_eq!(up.hits(), 1);
    }
}

#[tokio::test]
async fn tool_calls_non_stream_every_provider() {
    let single = [("call_a", "get_weather", r#"{"city":"Paris"}"#)];
    let parallel = [("call_a", "get_weather", r#"{"city":"Paris"}"#), ("call_b", "get_time", r#"{"tz":"Asia/Tokyo"}"#)];
    for p in ALL {
        for calls in [&single[..], &parallel[..]] {
            let up = FakeUpstream::fixed(plain(p, None, calls, stop_of(p).1, 0)).await;
            let gw = gateway_for(p, &up).await;
            let v: Value = post(&gw.url, "/v1/chat/completions", &tools_request(false)).await.json().await.unwrap();
            let choice = &v["choices"][0];
            assert_eq!(choice["finish_reason"], "tool_calls", "{p:?}: {v}");
            let got = choice["message"]["tool_calls"].as_array().unwrap();
            assert_eq!(got.len(), calls.len(), "{p:?}");
            for (tc, (id, name, args)) in got.iter().zip(calls) {
                assert_eq!(tc["type"], "function");
                assert_eq!(tc["function"]["name"], *name);
                let a: Value = serde_json::from_str(tc["function"]["arguments"].as_str().unwrap()).unwrap();
                assert_eq!(a, serde_json::from_str::<Value>(args).unwrap(), "{p:?}");
                if p == P::Gemini {
                    assert!(tc["id"].as_str().unwrap().starts_with("call_"), "synthesized id");
                } else {
                    assert_eq!(tc["id"], *id);
                }
            }
            if p == P::Gemini && got.len() == 2 {
                assert_ne!(got[0]["id"], got[1]["id"], "synthesized ids are unique");
            }
            // The tools reached the upstream in its own shape.
            let sent = up.last().body;
            match p {
                P::OpenAi => assert_eq!(sent["tools"][0]["function"]["name"], "get_weather"),
                P::Anthropic => assert_eq!(sent["tools"][0]["input_schema"]["properties"]["city"]["type"], "string"),
                P::Gemini => assert_eq!(sent["tools"][0]["functionDeclarations"][1]["name"], "get_time"),
            }
        }
    }
}

#[tokio::test]
async fn tool_calls_stream_every_provider() {
    let calls = [("call_a", "get_weather", r#"{"city":"Paris"}"#), ("call_b", "get_time", r#"{"tz":"Asia/Tokyo"}"#)];
    for p in ALL {
        let up =
            FakeUpstream::fixed(streamed(p, &["Let me check."], &calls, stop_of(p).1, Framing::default(), &[37])).await;
        let gw = gateway_for(p, &up).await;
        let resp = post(&gw.url, "/v1/chat/completions", &tools_request(true)).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        let a = assemble(&sse_events(resp).await);
        assert_eq!(a.role.as_deref(), Some("assistant"));
        assert_eq!(a.text, "Let me check.", "{p:?}");
        assert_eq!(a.finish_reason.as_deref(), Some("tool_calls"), "{p:?}");
        assert_eq!(a.tool_calls.len(), 2, "{p:?}: {a:?}");
        for ((id, name, args), (eid, ename, eargs)) in a.tool_calls.iter().zip(&calls) {
            assert_eq!(name, ename);
            assert_eq!(
                serde_json::from_str::<Value>(args).unwrap(),
                serde_json::from_str::<Value>(eargs).unwrap(),
                "{p:?}"
            );
            if p == P::Gemini {
                assert!(id.starts_with("call_"));
            } else {
                assert_eq!(id, eid);
            }
        }
        assert!(a.done && a.error.is_none(), "{p:?}");
    }
}

/// 3,000+ tokens of mixed ASCII, CJK and emoji; the upstream's socket writes split events,
/// lines, `\r\n` pairs and multi-byte characters; keep-alive comments are interleaved.
#[tokio::test]
async fn long_stream_split_anywhere_every_provider() {
    let vocab = ["Hello", " 世界", "🙂", " naïve", " café", "\n", " 日本語のテキスト", " 👩‍💻", " ok", "—", " “quotes”"];
    let pieces: Vec<String> = (0..3200).map(|i| format!("{}{}", vocab[i % vocab.len()], i % 7)).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let expected: String = pieces.concat();
    for p in ALL {
        for (crlf, sizes) in [(true, &[1usize, 2, 3, 5, 7, 11, 64, 3][..]), (false, &[4096, 13, 1, 997][..])] {
            let f = Framing { crlf, keepalive_every: 50 };
            let up = FakeUpstream::fixed(streamed(p, &refs, &[], stop_of(p).0, f, sizes)).await;
            let gw = gateway_for(p, &up).await;
            let mut req = chat(true);
            req["stream_options"] = json!({ "include_usage": true });
            let resp = post(&gw.url, "/v1/chat/completions", &req).await;
            assert_eq!(resp.status(), 200);
            let events = sse_events(resp).await;
            let a = assemble(&events);
            assert!(
                a.text == expected,
                "{p:?} crlf={crlf}: assembled text differs (len {} vs {})",
                a.text.len(),
                expected.len()
            );
            assert_eq!(a.finish_reason.as_deref(), Some("stop"));
            assert!(a.done && a.error.is_none());
            assert!(events.len() > 3000, "events are forwarded one by one, not batched");
            let usage = a.usage.expect("usage chunk with include_usage");
            assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 30, "{p:?}");
        }
    }
}

#[tokio::test]
async fn usage_chunk_only_when_asked() {
    for p in ALL {
        let up =
            FakeUpstream::fixed(streamed(p, &["a", "b"], &[], stop_of(p).0, Framing::default(), &[usize::MAX])).await;
        let gw = gateway_for(p, &up).await;
        let a = assemble(&sse_events(post(&gw.url, "/v1/chat/completions", &chat(true)).await).await);
        assert_eq!(a.text, "ab");
        assert!(a.usage.is_none(), "{p:?}: no usage chunk unless include_usage");
        if p == P::OpenAi {
            // Metering still asks the upstream for usage.
            assert_eq!(up.last().body["stream_options"]["include_usage"], true);
        }
    }
}

#[tokio::test]
async fn finish_reason_table_every_provider() {
    // (provider value, OpenAI finish_reason or None, raw value kept in provider_finish_reason)
    let table: &[(P, &str, Option<&str>, Option<&str>)] = &[
        (P::OpenAi, "stop", Some("stop"), None),
        (P::OpenAi, "length", Some("length"), None),
        (P::OpenAi, "tool_calls", Some("tool_calls"), None),
        (P::OpenAi, "function_call", Some("tool_calls"), None),
        (P::OpenAi, "content_filter", Some("content_filter"), None),
        (P::Anthropic, "end_turn", Some("stop"), None),
        (P::Anthropic, "stop_sequence", Some("stop"), None),
        (P::Anthropic, "max_tokens", Some("length"), None),
        (P::Anthropic, "tool_use", Some("tool_calls"), None),
        (P::Anthropic, "refusal", Some("content_filter"), None),
        (P::Anthropic, "pause_turn", None, Some("pause_turn")),
        (P::Gemini, "STOP", Some("stop"), None),
        (P::Gemini, "MAX_TOKENS", Some("length"), None),
        (P::Gemini, "SAFETY", Some("content_filter"), None),
        (P::Gemini, "RECITATION", Some("content_filter"), None),
        (P::Gemini, "BLOCKLIST", Some("content_filter"), None),
        (P::Gemini, "PROHIBITED_CONTENT", Some("content_filter"), None),
        (P::Gemini, "SPII", Some("content_filter"), None),
        (P::Gemini, "LANGUAGE", None, Some("LANGUAGE")),
        (P::Gemini, "MALFORMED_FUNCTION_CALL", None, Some("MALFORMED_FUNCTION_CALL")),
        (P::Gemini, "OTHER", None, Some("OTHER")),
    ];
    for &(p, raw, want, want_raw) in table {
        // Non-stream.
        let up = FakeUpstream::fixed(plain(p, Some("x"), &[], raw, 0)).await;
        let gw = gateway_for(p, &up).await;
        let v: Value = post(&gw.url, "/v1/chat/completions", &chat(false)).await.json().await.unwrap();
        assert_eq!(v["choices"][0]["finish_reason"].as_str(), want, "{p:?} {raw}");
        assert_eq!(v["choices"][0]["provider_finish_reason"].as_str(), want_raw, "{p:?} {raw}");
        // Stream.
        let up = FakeUpstream::fixed(streamed(p, &["x"], &[], raw, Framing::default(), &[usize::MAX])).await;
        let gw = gateway_for(p, &up).await;
        let a = assemble(&sse_events(post(&gw.url, "/v1/chat/completions", &chat(true)).await).await);
        assert_eq!(a.finish_reason.as_deref(), want, "{p:?} {raw} (stream)");
        assert_eq!(a.provider_finish_reason.as_deref(), want_raw, "{p:?} {raw} (stream)");
        assert!(a.done);
    }
    // Gemini: STOP with a functionCall part is a tool call.
    let up = FakeUpstream::fixed(plain(P::Gemini, None, &[("", "get_weather", "{}")], "STOP", 0)).await;
    let gw = gateway_for(P::Gemini, &up).await;
    let v: Value = post(&gw.url, "/v1/chat/completions", &tools_request(false)).await.json().await.unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
}

/// HTTP 200 is not success: an error object in the body, or in a stream event, is an upstream
/// error, and the upstream's message never reaches the caller.
#[tokio::test]
async fn error_inside_200_every_provider() {
    let secret_msg = "internal shard db-7 exploded (org-42)";
    for p in ALL {
        let (body, event) = match p {
            P::OpenAi => (
                json!({ "error": { "message": secret_msg, "type": "server_error", "code": null } }),
                format!("data: {}\n\n", json!({ "error": { "message": secret_msg, "type": "server_error" } })),
            ),
            P::Anthropic => (
                json!({ "type": "error", "error": { "type": "overloaded_error", "message": secret_msg } }),
                format!(
                    "event: error\ndata: {}\n\n",
                    json!({ "type": "error", "error": { "type": "overloaded_error", "message": secret_msg } })
                ),
            ),
            P::Gemini => (
                json!({ "error": { "code": 503, "message": secret_msg, "status": "UNAVAILABLE" } }),
                format!(
                    "data: {}\n\n",
                    json!({ "error": { "code": 503, "message": secret_msg, "status": "UNAVAILABLE" } })
                ),
            ),
        };
        let want_status = if p == P::OpenAi { 502 } else { 503 };

        // Non-stream: error body with status 200.
        let up = FakeUpstream::fixed(Reply::json(body)).await;
        let gw = gateway_for(p, &up).await;
        let resp = post(&gw.url, "/v1/chat/completions", &chat(false)).await;
        assert_eq!(resp.status(), want_status, "{p:?}");
        let text = resp.text().await.unwrap();
        assert!(!text.contains(secret_msg), "{p:?}: upstream message leaked: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(v["error"]["code"].as_str().unwrap().starts_with("upstream_"), "{v}");
        assert!(v["request_id"].as_str().is_some());

        // Stream whose first event is an error: nothing was sent yet, so an HTTP error.
        let up = FakeUpstream::fixed(Reply::sse(&event)).await;
        let gw = gateway_for(p, &up).await;
        let resp = post(&gw.url, "/v1/chat/completions", &chat(true)).await;
        assert_eq!(resp.status(), want_status, "{p:?} stream");
        assert!(!resp.text().await.unwrap().contains(secret_msg));

        // Error in the middle of a stream: one final error event, then [DONE]; nothing repeated.
        let mut wire_text = match p {
            P::OpenAi => wire::openai_stream(&["one ", "two "], &[], "stop", (1, 1, 0), Framing::default()),
            P::Anthropic => {
                wire::anthropic_stream(&["one ", "two "], &[], "end_turn", (1, 1, 0, 0), Framing::default())
            }
            P::Gemini => wire::gemini_stream(&["one ", "two "], &[], "STOP", (1, 1, 0), Framing::default()),
        };
        // Cut the stream after the text and append the error event.
        let cut = wire_text.find("two ").unwrap();
        let cut = cut + wire_text[cut..].find("\n\n").unwrap() + 2;
        wire_text.truncate(cut);
        wire_text.push_str(&event);
        let up = FakeUpstream::fixed(Reply::sse(&wire_text)).await;
        let gw = gateway_for(p, &up).await;
        let resp = post(&gw.url, "/v1/chat/completions", &chat(true)).await;
        assert_eq!(resp.status(), 200);
        let events = sse_events(resp).await;
        let a = assemble(&events);
        assert_eq!(a.text, "one two ", "{p:?}");
        let err = a.error.expect("final error event");
        assert!(err["code"].as_str().unwrap().starts_with("upstream_"));
        assert!(a.done, "[DONE] after the error");
        assert_eq!(events.last().unwrap(), "[DONE]");
        assert!(!events.concat().contains(secret_msg));
    }
}

/// Upstream connections are kept: sequential requests, streamed or not, share one connection
/// (a stream's connection is kept although its last event arrives before its body's end).
#[tokio::test]
async fn sequential_requests_share_one_upstream_connection() {
    for p in ALL {
        for stream in [true, false] {
            let up = if stream {
                streamed(p, &["one ", "two "], &[], stop_of(p).0, Framing::default(), &[7, 64])
            } else {
                plain(p, Some("one two "), &[], stop_of(p).0, 0)
            };
            let up = FakeUpstream::fixed(up).await;
            let gw = gateway_for(p, &up).await;
            for i in 0..3 {
                let resp = post(&gw.url, "/v1/chat/completions", &chat(stream)).await;
                assert_eq!(resp.status(), 200, "{p:?} stream={stream} #{i}");
                let text = if stream {
                    assemble(&sse_events(resp).await).text
                } else {
                    let v: Value = resp.json().await.unwrap();
                    v["choices"][0]["message"]["content"].as_str().unwrap().to_owned()
                };
                assert_eq!(text, "one two ", "{p:?} stream={stream} #{i}");
                // The background read of a stream's end takes a moment.
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            assert_eq!(up.hits(), 3);
            assert_eq!(up.connections(), 1, "{p:?} stream={stream}: one connection for three requests");
        }
    }
}

#[tokio::test]
async fn stream_cut_without_end_is_an_error_not_a_success() {
    for p in [P::OpenAi, P::Anthropic] {
        let mut text = match p {
            P::OpenAi => wire::openai_stream(&["one ", "two "], &[], "stop", (1, 1, 0), Framing::default()),
            _ => wire::anthropic_stream(&["one ", "two "], &[], "end_turn", (1, 1, 0, 0), Framing::default()),
        };
        let cut = text.find("two ").unwrap();
        text.truncate(cut + text[cut..].find("\n\n").unwrap() + 2);
        let up = FakeUpstream::fixed(Reply::sse(&text)).await;
        let gw = gateway_for(p, &up).await;
        let a = assemble(&sse_events(post(&gw.url, "/v1/chat/completions", &chat(true)).await).await);
        assert_eq!(a.text, "one two ");
        assert_eq!(a.error.unwrap()["code"], "upstream_stream_truncated", "{p:?}");
        assert!(a.finish_reason.is_none());
    }
}

#[tokio::test]
async fn usage_with_cached_tokens_every_provider() {
    for p in ALL {
        let up = FakeUpstream::fixed(plain(p, Some("x"), &[], stop_of(p).0, 40)).await;
        let gw = gateway_for(p, &up).await;
        let v: Value = post(&gw.url, "/v1/chat/completions", &chat(false)).await.json().await.unwrap();
        let u = &v["usage"];
        // Anthropic: input 70 + cache write 10 + cache read 40 = 120 prompt tokens.
        let prompt = if p == P::Anthropic { 120 } else { 100 };
        assert_eq!(u["prompt_tokens"], prompt, "{p:?}: {u}");
        assert_eq!(u["completion_tokens"], 20);
        assert_eq!(u["total_tokens"], prompt + 20);
        assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 40, "{p:?}");
        if p == P::Anthropic {
            assert_eq!(u["prompt_tokens_details"]["cache_write_tokens"], 10);
        }
    }
}

#[tokio::test]
async fn upstream_http_errors_are_classified_and_not_echoed() {
    let cases = [
        (429, 429, "upstream_rate_limited"),
        (500, 502, "upstream_error"),
        (503, 503, "upstream_unavailable"),
        (529, 503, "upstream_unavailable"),
        (401, 502, "upstream_auth_failed"),
        (400, 400, "upstream_rejected_request"),
        (504, 504, "upstream_timeout"),
    ];
    for (upstream_status, status, code) in cases {
        let up = FakeUpstream::fixed(Reply::status(
            upstream_status,
            json!({ "error": { "message": "raw upstream detail sk-live-XYZ", "type": "x", "code": "quota_thing" } }),
        ))
        .await;
        let gw = gateway_for(P::OpenAi, &up).await;
        let resp = post(&gw.url, "/v1/chat/completions", &chat(false)).await;
        assert_eq!(resp.status(), status, "upstream {upstream_status}");
        let text = resp.text().await.unwrap();
        assert!(!text.contains("sk-live-XYZ") && !text.contains("raw upstream detail"), "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["code"], code, "upstream {upstream_status}");
    }
    // Nothing listening: a connection error.
    let gw = Gateway::start(&config("openai", "http://127.0.0.1:9", "strict")).await;
    let resp = post(&gw.url, "/v1/chat/completions", &chat(false)).await;
    assert_eq!(resp.status(), 502);
    assert_eq!(resp.json::<Value>().await.unwrap()["error"]["code"], "upstream_connect_failed");
}

#[tokio::test]
async fn gemini_safety_blocked_prompt() {
    let blocked = json!({ "promptFeedback": { "blockReason": "SAFETY" }, "usageMetadata": { "promptTokenCount": 5 } });
    let up = FakeUpstream::fixed(Reply::json(blocked.clone())).await;
    let gw = gateway_for(P::Gemini, &up).await;
    let resp = post(&gw.url, "/v1/chat/completions", &chat(false)).await;
    assert_eq!(resp.status(), 400);
    assert_eq!(resp.json::<Value>().await.unwrap()["error"]["code"], "content_filter");
    let up = FakeUpstream::fixed(Reply::sse(&format!("data: {blocked}\r\n\r\n"))).await;
    let gw = gateway_for(P::Gemini, &up).await;
    let resp = post(&gw.url, "/v1/chat/completions", &chat(true)).await;
    assert_eq!(resp.status(), 400);
    assert_eq!(resp.json::<Value>().await.unwrap()["error"]["code"], "content_filter");
}

/// A client that goes away mid-stream cancels the upstream request at once.
#[tokio::test]
async fn client_disconnect_cancels_upstream() {
    for p in ALL {
        let pieces: Vec<String> = (0..200).map(|i| format!("w{i} ")).collect();
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        let text = match p {
            P::OpenAi => wire::openai_stream(&refs, &[], "stop", (1, 1, 0), Framing::default()),
            P::Anthropic => wire::anthropic_stream(&refs, &[], "end_turn", (1, 1, 0, 0), Framing::default()),
            P::Gemini => wire::gemini_stream(&refs, &[], "STOP", (1, 1, 0), Framing::default()),
        };
        let events: Vec<String> = text.split_inclusive("\n\n").map(str::to_owned).collect();
        let up = FakeUpstream::fixed(Reply::sse_paced(events, Duration::from_millis(20))).await;
        let gw = gateway_for(p, &up).await;
        let mut resp = post(&gw.url, "/v1/chat/completions", &chat(true)).await;
        let first = resp.chunk().await.unwrap().unwrap();
        assert!(first.starts_with(b"data: "));
        drop(resp);
        let mut cancelled = false;
        for _ in 0..100 {
            if up.cancelled() == 1 {
                cancelled = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(cancelled, "{p:?}: the upstream stream was not cancelled within 2 s");
    }
}

#[tokio::test]
async fn embeddings_openai_and_gemini() {
    let up = FakeUpstream::fixed(Reply::json(json!({ "object": "list", "model": "text-embedding-real",
        "data": [{ "object": "embedding", "index": 1, "embedding": [0.5, -0.25] },
                 { "object": "embedding", "index": 0, "embedding": [0.125, 1.0] }],
        "usage": { "prompt_tokens": 6, "total_tokens": 6 } })))
    .await;
    let gw = gateway_for(P::OpenAi, &up).await;
    let v: Value =
        post(&gw.url, "/v1/embeddings", &json!({ "model": "chat", "input": ["a", "b"] })).await.json().await.unwrap();
    assert_eq!(v["data"][0]["embedding"], json!([0.125, 1.0]), "sorted by index");
    assert_eq!(v["usage"]["prompt_tokens"], 6);
    assert_eq!(up.last().body["model"], "real-model");
    // base64: little-endian f32s.
    let v: Value =
        post(&gw.url, "/v1/embeddings", &json!({ "model": "chat", "input": "a", "encoding_format": "base64" }))
            .await
            .json()
            .await
            .unwrap();
    assert_eq!(v["data"][0]["embedding"], "AAAAPgAAgD8=");

    let up =
        FakeUpstream::fixed(Reply::json(json!({ "embeddings": [{ "values": [0.1, 0.2] }, { "values": [0.3, 0.4] }] })))
            .await;
    let gw = gateway_for(P::Gemini, &up).await;
    let v: Value = post(&gw.url, "/v1/embeddings", &json!({ "model": "chat", "input": ["a", "b"], "dimensions": 2 }))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["data"][1]["embedding"], json!([0.3, 0.4]));
    let sent = up.last();
    assert!(sent.path.ends_with("/v1beta/models/real-model:batchEmbedContents"), "{}", sent.path);
    assert_eq!(sent.body["requests"][1]["content"]["parts"][0]["text"], "b");
    assert_eq!(sent.body["requests"][0]["outputDimensionality"], 2);
    assert_eq!(sent.header("x-goog-api-key"), Some(ax_tests::UPSTREAM_KEY));
}
