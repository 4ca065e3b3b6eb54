//! Failover against a controllable fake upstream: for each failure the caller sees an answer from
//! the healthy upstream (or the right error), with `x-ax-attempts`; the breaker opens, probes once
//! and closes; saturation gives a fast 503; streams never repeat or lose bytes.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ax_tests::wire::{self, Framing};
use ax_tests::{assemble, key_digest, post, refused_url, split, sse_events, FakeUpstream, Gateway, Reply, KEY};
use bytes::Bytes;
use serde_json::{json, Value};

const ADMIN: &str = "admin-token-0123456789";

/// `primary` (priority 0) and `backup` (priority 1) behind the alias `chat`; extra settings are
/// spliced into each upstream's and the route's flow maps.
fn cfg(primary: &str, backup: &str, primary_extra: &str, backup_extra: &str, route_extra: &str) -> String {
    format!(
        r#"
server: {{ admin_token: "{ADMIN}" }}
upstreams:
  - {{ name: primary, provider: openai, base_url: "{primary}",
      timeouts: {{ first_byte_ms: 400, idle_ms: 400 }},
      breaker: {{ failures: 2, cooldown_ms: 400, timeout_cooldown_ms: 800, max_cooldown_ms: 5000 }},
      models: [{{ name: p-model, context_window: 8000, capabilities: [chat, streaming] }}] {primary_extra} }}
  - {{ name: backup, provider: openai, base_url: "{backup}",
      timeouts: {{ first_byte_ms: 2000, idle_ms: 2000 }},
      models: [{{ name: b-model, context_window: 8000, capabilities: [chat, streaming] }}] {backup_extra} }}
routes:
  - {{ alias: chat, strategy: priority,
      candidates: [{{ upstream: primary, model: p-model, priority: 0 }}, {{ upstream: backup, model: b-model, priority: 1 }}]
      {route_extra} }}
tenants:
  - {{ id: t, keys: [{{ id: k, sha256: "{}" }}] }}
"#,
        key_digest(KEY)
    )
}

fn ok(text: &str) -> Reply {
    Reply::json(wire::openai_response(Some(text), &[], "stop", (5, 3, 0)))
}

fn ok_stream(text: &str) -> Reply {
    let pieces: Vec<&str> = text.split_inclusive(' ').collect();
    Reply::sse(&wire::openai_stream(&pieces, &[], "stop", (5, 3, 0), Framing::default()))
}

fn chat(stream: bool) -> Value {
    json!({ "model": "chat", "stream": stream, "messages": [{ "role": "user", "content": "hi" }] })
}

async fn send(url: &str, stream: bool) -> (u16, String, String, Value) {
    let resp = post(url, "/v1/chat/completions", &chat(stream)).await;
    let status = resp.status().as_u16();
    let h = |n: &str| resp.headers().get(n).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let (upstream, attempts) = (h("x-ax-upstream"), h("x-ax-attempts"));
    let body = if stream && status == 200 {
        let a = assemble(&sse_events(resp).await);
        json!({ "text": a.text, "error": a.error, "done": a.done, "finish": a.finish_reason })
    } else {
        resp.json().await.unwrap()
    };
    (status, upstream, attempts, body)
}

async fn health(url: &str) -> Value {
    reqwest::Client::new()
        .get(format!("{url}/admin/health"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn breaker_state(h: &Value, upstream: &str) -> String {
    h["upstreams"].as_array().unwrap().iter().find(|u| u["upstream"] == upstream).unwrap()["breaker"]["state"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn non_stream_fails_over_on_every_retryable_failure() {
    let error_in_200 = json!({ "error": { "message": "boom", "type": "server_error" } });
    let cases: Vec<(&str, Option<Reply>)> = vec![
        ("refused", None),
        ("500", Some(Reply::status(500, json!({})))),
        ("502", Some(Reply::status(502, json!({})))),
        ("503", Some(Reply::status(503, json!({})))),
        ("529", Some(Reply::status(529, json!({})))),
        ("429", Some(Reply::WithHeaders { status: 429, headers: vec![("retry-after", "30".into())], body: json!({}) })),
        ("hang before headers", Some(Reply::Hang)),
        ("error inside 200", Some(Reply::json(error_in_200))),
        ("reset mid-body", Some(Reply::SseThenReset(vec![Bytes::from_static(b"{\"id\":")]))),
    ];
    for (name, reply) in cases {
        let primary = match &reply {
            Some(r) => Some(FakeUpstream::fixed(r.clone()).await),
            None => None,
        };
        let purl = match &primary {
            Some(p) => p.url(),
            None => refused_url().await,
        };
        let backup = FakeUpstream::fixed(ok("from backup")).await;
        let gw = Gateway::start(&cfg(&purl, &backup.url(), "", "", "")).await;
        let started = Instant::now();
        let (status, upstream, attempts, body) = send(&gw.url, false).await;
        assert_eq!((status, upstream.as_str(), attempts.as_str()), (200, "backup", "2"), "{name}: {body}");
        assert_eq!(body["choices"][0]["message"]["content"], "from backup", "{name}");
        if name == "hang before headers" {
            assert!(started.elapsed() < Duration::from_millis(1500), "first-byte timeout (400 ms) bounds the wait");
        }
        if name == "429" {
            // Retry-After opened the primary's breaker: the next request does not touch it.
            let (status, upstream, attempts, _) = send(&gw.url, false).await;
            assert_eq!((status, upstream.as_str(), attempts.as_str()), (200, "backup", "1"));
            assert_eq!(primary.as_ref().unwrap().hits(), 1);
            assert_eq!(breaker_state(&health(&gw.url).await, "primary"), "open");
        }
    }
}

#[tokio::test]
async fn stream_fails_over_before_the_first_byte() {
    let error_event = format!("data: {}\n\n", json!({ "error": { "message": "overloaded", "type": "server_error" } }));
    let cases = vec![
        ("error event first", Reply::sse(&error_event)),
        ("stall before first event", Reply::SseThenStall(vec![Bytes::from_static(b": keep-alive\n\n")])),
        ("reset before first event", Reply::SseThenReset(vec![])),
        ("503", Reply::status(503, json!({}))),
    ];
    for (name, reply) in cases {
        let primary = FakeUpstream::fixed(reply).await;
        let backup = FakeUpstream::fixed(ok_stream("streamed from backup")).await;
        let gw = Gateway::start(&cfg(&primary.url(), &backup.url(), "", "", "")).await;
        let (status, upstream, attempts, body) = send(&gw.url, true).await;
        assert_eq!((status, upstream.as_str(), attempts.as_str()), (200, "backup", "2"), "{name}: {body}");
        assert_eq!(body["text"], "streamed from backup", "{name}");
        assert!(body["error"].is_null() && body["done"] == true, "{name}: {body}");
    }
}

/// A stream that drips slowly but steadily (every gap under `idle_ms`) is healthy: it stays on
/// its upstream and completes.
#[tokio::test]
async fn slow_drip_within_idle_is_not_a_failure() {
    let pieces: Vec<String> = (0..8).map(|i| format!("drip{i} ")).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let events: Vec<String> = wire::openai_stream(&refs, &[], "stop", (1, 8, 0), Framing::default())
        .split_inclusive("\n\n")
        .map(str::to_owned)
        .collect();
    let primary = FakeUpstream::fixed(Reply::sse_paced(events, Duration::from_millis(150))).await;
    let backup = FakeUpstream::fixed(ok_stream("never used")).await;
    let gw = Gateway::start(&cfg(&primary.url(), &backup.url(), "", "", "")).await;
    let (status, upstream, attempts, body) = send(&gw.url, true).await;
    assert_eq!((status, upstream.as_str(), attempts.as_str()), (200, "primary", "1"));
    assert_eq!(body["text"], pieces.concat());
    assert!(body["error"].is_null());
    assert_eq!(backup.hits(), 0);
}

/// After 100 forwarded tokens an upstream failure ends the stream with one error event: no
/// failover (bytes were sent), nothing repeated, nothing lost.
#[tokio::test]
async fn stream_failure_after_100_tokens_ends_with_one_error_event() {
    let pieces: Vec<String> = (0..100).map(|i| format!("tok{i}·你好 ")).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let expected = pieces.concat();
    let full = wire::openai_stream(&refs, &[], "stop", (1, 100, 0), Framing::default());
    // The wire up to and including the 100th content event (no finish, no [DONE]).
    let cut = full.find(&format!("\"content\":\"{}\"", pieces[99])).unwrap();
    let head = &full[..cut + full[cut..].find("\n\n").unwrap() + 2];
    let error_event = format!("data: {}\n\n", json!({ "error": { "message": "died", "type": "server_error" } }));
    let cases = vec![
        ("error event", Reply::sse_split(&format!("{head}{error_event}"), &[41]), "upstream_error"),
        ("reset", Reply::SseThenReset(split(head.as_bytes(), &[97])), "upstream_stream_truncated"),
        ("stall", Reply::SseThenStall(split(head.as_bytes(), &[97])), "upstream_idle_timeout"),
    ];
    for (name, reply, code) in cases {
        let primary = FakeUpstream::fixed(reply).await;
        let backup = FakeUpstream::fixed(ok_stream("never used")).await;
        let gw = Gateway::start(&cfg(&primary.url(), &backup.url(), "", "", "")).await;
        let resp = post(&gw.url, "/v1/chat/completions", &chat(true)).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["x-ax-upstream"], "primary");
        assert_eq!(resp.headers()["x-ax-attempts"], "1");
        let events = sse_events(resp).await;
        let a = assemble(&events);
        assert!(a.text == expected, "{name}: the caller's text differs from the 100 tokens sent");
        assert_eq!(a.error.as_ref().unwrap()["code"], code, "{name}");
        assert_eq!(events.iter().filter(|e| e.contains("\"error\"")).count(), 1, "{name}: exactly one error event");
        assert_eq!(events.last().unwrap(), "[DONE]");
        assert_eq!(backup.hits(), 0, "{name}: no failover after the first byte");
    }
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    for (upstream_status, status, code) in [
        (400, 400, "upstream_rejected_request"),
        (401, 502, "upstream_auth_failed"),
        (403, 502, "upstream_auth_failed"),
        (404, 502, "upstream_model_not_found"),
        (422, 400, "upstream_rejected_request"),
    ] {
        let primary =
            FakeUpstream::fixed(Reply::status(upstream_status, json!({ "error": { "message": "no" } }))).await;
        let backup = FakeUpstream::fixed(ok("from backup")).await;
        let gw = Gateway::start(&cfg(&primary.url(), &backup.url(), "", "", "")).await;
        let (s, upstream, attempts, body) = send(&gw.url, false).await;
        assert_eq!((s, upstream.as_str(), attempts.as_str()), (status, "primary", "1"), "{upstream_status}");
        assert_eq!(body["error"]["code"], code);
        assert_eq!(backup.hits(), 0);
    }
    // Client errors never count toward the breaker.
    let primary = FakeUpstream::fixed(Reply::status(400, json!({}))).await;
    let backup = FakeUpstream::fixed(ok("b")).await;
    let gw = Gateway::start(&cfg(&primary.url(), &backup.url(), "", "", "")).await;
    for _ in 0..5 {
        send(&gw.url, false).await;
    }
    assert_eq!(breaker_state(&health(&gw.url).await, "primary"), "closed");
    assert_eq!(primary.hits(), 5);
}

#[tokio::test]
async fn breaker_opens_skips_probes_once_and_closes() {
    let healthy = Arc::new(AtomicBool::new(false));
    let h = healthy.clone();
    let primary =
        FakeUpstream::start(
            move |_| {
                if h.load(Ordering::SeqCst) {
                    ok("from primary")
                } else {
                    Reply::status(500, json!({}))
                }
            },
        )
        .await;
    let backup = FakeUpstream::fixed(ok("from backup")).await;
    let gw = Gateway::start(&cfg(&primary.url(), &backup.url(), "", "", "")).await;
    for _ in 0..2 {
        let (s, up, attempts, _) = send(&gw.url, false).await;
        assert_eq!((s, up.as_str(), attempts.as_str()), (200, "backup", "2"));
    }
    // Two failures within the window: open. The primary is skipped without a call.
    let h = health(&gw.url).await;
    assert_eq!(breaker_state(&h, "primary"), "open");
    let (_, up, attempts, _) = send(&gw.url, false).await;
    assert_eq!((up.as_str(), attempts.as_str()), ("backup", "1"));
    assert_eq!(primary.hits(), 2);
    // After the 400 ms cooldown, one probe; it fails: reopen with the cooldown doubled.
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_eq!(breaker_state(&health(&gw.url).await, "primary"), "half_open");
    let (_, up, attempts, _) = send(&gw.url, false).await;
    assert_eq!((up.as_str(), attempts.as_str()), ("backup", "2"), "the probe failed over");
    assert_eq!(primary.hits(), 3);
    let reopen = health(&gw.url).await["upstreams"][0]["breaker"]["reopens_in_ms"].as_u64().unwrap();
    assert!(reopen > 450 && reopen <= 800, "cooldown doubled to 800 ms, got {reopen}");
    // Healthy again: the next probe closes the breaker.
    healthy.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(850)).await;
    let (_, up, attempts, _) = send(&gw.url, false).await;
    assert_eq!((up.as_str(), attempts.as_str()), ("primary", "1"));
    let h = health(&gw.url).await;
    assert_eq!(breaker_state(&h, "primary"), "closed");
    let row = &h["upstreams"][0]["models"][0];
    assert!(row["success_rate"].as_f64().is_some() && row["latency_p50_ms"].as_f64().is_some(), "{row}");
}

#[tokio::test]
async fn half_open_admits_exactly_one_probe_among_100_concurrent_requests() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let primary = FakeUpstream::start(move |_| {
        if c.fetch_add(1, Ordering::SeqCst) < 2 {
            Reply::status(500, json!({}))
        } else {
            Reply::Delayed(Duration::from_millis(300), Box::new(ok("probe")))
        }
    })
    .await;
    let backup = FakeUpstream::fixed(ok("from backup")).await;
    let gw = Gateway::start(&cfg(&primary.url(), &backup.url(), "", "", "")).await;
    send(&gw.url, false).await;
    send(&gw.url, false).await;
    tokio::time::sleep(Duration::from_millis(450)).await;
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let url = gw.url.clone();
        tasks.push(tokio::spawn(async move { send(&url, false).await }));
    }
    let mut by_primary = 0;
    for t in tasks {
        let (s, up, _, _) = t.await.unwrap();
        assert_eq!(s, 200);
        by_primary += usize::from(up == "primary");
    }
    assert_eq!(primary.hits(), 3, "exactly one probe reached the half-open primary");
    assert_eq!(by_primary, 1);
}

#[tokio::test]
async fn saturated_backup_gets_a_fast_503_not_a_queue() {
    let backup = FakeUpstream::fixed(Reply::Delayed(Duration::from_millis(600), Box::new(ok("slow backup")))).await;
    let purl = refused_url().await;
    let yaml = cfg(&purl, &backup.url(), "", ", max_concurrency: 2", "")
        .replace("breaker: { failures: 2, cooldown_ms: 400,", "breaker: { failures: 1, cooldown_ms: 60000,");
    let gw = Gateway::start(&yaml).await;
    // The first request opens the primary's breaker (connection refused) and is served by the backup.
    let (s, up, attempts, _) = send(&gw.url, false).await;
    assert_eq!((s, up.as_str(), attempts.as_str()), (200, "backup", "2"));
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let url = gw.url.clone();
        tasks.push(tokio::spawn(async move {
            let started = Instant::now();
            let resp = post(&url, "/v1/chat/completions", &chat(false)).await;
            let retry_after = resp.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
            let status = resp.status().as_u16();
            let body: Value = resp.json().await.unwrap();
            (status, started.elapsed(), retry_after, body)
        }));
    }
    let (mut ok_count, mut fast_503) = (0, 0);
    for t in tasks {
        let (status, took, retry_after, body) = t.await.unwrap();
        match status {
            200 => ok_count += 1,
            503 => {
                assert_eq!(body["error"]["code"], "no_healthy_upstream");
                let msg = body["error"]["message"].as_str().unwrap();
                assert!(msg.contains("breaker open") && msg.contains("at max_concurrency"), "{msg}");
                assert!(retry_after.is_some(), "503 carries Retry-After");
                assert!(took < Duration::from_millis(300), "503 within milliseconds, took {took:?}");
                fast_503 += 1;
            }
            other => panic!("unexpected status {other}: {body}"),
        }
    }
    assert_eq!((ok_count, fast_503), (2, 8));
    assert!(backup.max_in_flight() <= 2, "backup in flight reached {}", backup.max_in_flight());
}

#[tokio::test]
async fn same_upstream_retry_honours_retry_after() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let primary = FakeUpstream::start(move |_| {
        if c.fetch_add(1, Ordering::SeqCst) == 0 {
            Reply::WithHeaders { status: 429, headers: vec![("retry-after-ms", "300".into())], body: json!({}) }
        } else {
            ok("after the wait")
        }
    })
    .await;
    // Only the primary: the backup's weight is 0.
    let mut yaml = cfg(&primary.url(), &refused_url().await, "", "", "");
    yaml = yaml.replace(
        "{ upstream: backup, model: b-model, priority: 1 }",
        "{ upstream: backup, model: b-model, weight: 0 }",
    );
    let gw = Gateway::start(&yaml).await;
    let started = Instant::now();
    let (s, up, attempts, body) = send(&gw.url, false).await;
    assert_eq!((s, up.as_str(), attempts.as_str()), (200, "primary", "2"), "{body}");
    assert!(started.elapsed() >= Duration::from_millis(300), "waited for Retry-After");
    assert_eq!(body["choices"][0]["message"]["content"], "after the wait");
}

#[tokio::test]
async fn context_errors_fail_over_only_to_larger_windows() {
    let small = FakeUpstream::fixed(Reply::status(
        400,
        json!({ "error": { "message": "too long", "type": "invalid_request_error", "code": "context_length_exceeded" } }),
    ))
    .await;
    let smaller = FakeUpstream::fixed(ok("smaller")).await;
    let large = FakeUpstream::fixed(ok("large")).await;
    let yaml = format!(
        r#"
upstreams:
  - {{ name: small, provider: openai, base_url: "{}", models: [{{ name: m, context_window: 8000, capabilities: [chat] }}] }}
  - {{ name: smaller, provider: openai, base_url: "{}", models: [{{ name: m, context_window: 4000, capabilities: [chat] }}] }}
  - {{ name: large, provider: openai, base_url: "{}", models: [{{ name: m, context_window: 128000, capabilities: [chat] }}] }}
routes:
  - {{ alias: chat, strategy: priority, candidates: [
      {{ upstream: small, model: m, priority: 0 }}, {{ upstream: smaller, model: m, priority: 1 }}, {{ upstream: large, model: m, priority: 2 }}] }}
tenants:
  - {{ id: t, keys: [{{ id: k, sha256: "{}" }}] }}
"#,
        small.url(),
        smaller.url(),
        large.url(),
        key_digest(KEY)
    );
    let gw = Gateway::start(&yaml).await;
    let (s, up, attempts, _) = send(&gw.url, false).await;
    assert_eq!((s, up.as_str(), attempts.as_str()), (200, "large", "2"));
    assert_eq!(smaller.hits(), 0, "a smaller window is not tried");
    // Switched off: the context error goes back to the caller.
    let gw = Gateway::start(&yaml.replace(
        "{ alias: chat, strategy: priority,",
        "{ alias: chat, strategy: priority, failover: { larger_window_on_context_error: false },",
    ))
    .await;
    let (s, _, attempts, body) = send(&gw.url, false).await;
    assert_eq!((s, attempts.as_str()), (400, "1"));
    assert_eq!(body["error"]["code"], "context_length_exceeded");
}

#[tokio::test]
async fn fallback_alias_serves_and_says_so() {
    let primary = FakeUpstream::fixed(Reply::status(500, json!({}))).await;
    let backup = FakeUpstream::fixed(ok("from the fallback")).await;
    let yaml = format!(
        r#"
upstreams:
  - {{ name: pro, provider: openai, base_url: "{}", models: [{{ name: m, context_window: 8000, capabilities: [chat] }}] }}
  - {{ name: std, provider: openai, base_url: "{}", models: [{{ name: m, context_window: 8000, capabilities: [chat] }}] }}
routes:
  - {{ alias: chat, candidates: [{{ upstream: pro, model: m }}], fallbacks: [chat-standard] }}
  - {{ alias: chat-standard, candidates: [{{ upstream: std, model: m }}] }}
tenants:
  - {{ id: t, keys: [{{ id: k, sha256: "{}" }}] }}
"#,
        primary.url(),
        backup.url(),
        key_digest(KEY)
    );
    let gw = Gateway::start(&yaml).await;
    let resp = post(&gw.url, "/v1/chat/completions", &chat(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-ax-fallback"], "chat-standard");
    assert_eq!(resp.headers()["x-ax-upstream"], "std");
    assert_eq!(resp.headers()["x-ax-attempts"], "2");
}

#[tokio::test]
async fn attempt_cap_and_admin_auth() {
    let a = FakeUpstream::fixed(Reply::status(500, json!({}))).await;
    let b = FakeUpstream::fixed(Reply::status(502, json!({}))).await;
    let gw = Gateway::start(&cfg(&a.url(), &b.url(), "", "", ", failover: { max_attempts: 1 }")).await;
    let (s, up, attempts, body) = send(&gw.url, false).await;
    assert_eq!((s, up.as_str(), attempts.as_str()), (502, "primary", "1"), "{body}");
    assert_eq!(b.hits(), 0);
    let client = reqwest::Client::new();
    let url = format!("{}/admin/health", gw.url);
    assert_eq!(client.get(&url).send().await.unwrap().status(), 401);
    assert_eq!(client.get(&url).bearer_auth("wrong-token-0000000").send().await.unwrap().status(), 401);
    assert_eq!(client.get(&url).bearer_auth(KEY).send().await.unwrap().status(), 401, "tenant keys are not admin");
    let m = client.get(format!("{}/metrics", gw.url)).send().await.unwrap().text().await.unwrap();
    assert!(m.contains("ax_upstream_breaker_state{upstream=\"primary\"}"), "{m}");
    assert!(m.contains("ax_upstream_attempts_total"), "{m}");
}

/// Finance sees every attempt: the request's one usage record lists them, marks the timed-out
/// one as possibly billed, and `retry_of` points from the answering attempt back to it (the real
/// binary's JSON usage log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_record_lists_attempts_with_retry_of() {
    let primary = FakeUpstream::fixed(Reply::Hang).await;
    let backup = FakeUpstream::fixed(ok("from backup")).await;
    let dir = ax_tests::temp_dir("retry-of");
    let path = dir.join("ax.yaml");
    std::fs::write(&path, cfg(&primary.url(), &backup.url(), "", "", "")).unwrap();
    let bin = ax_tests::Binary::start(&path, &dir);
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", bin.url))
        .bearer_auth(KEY)
        .header("x-request-id", "req-finance-1")
        .json(&chat(false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-ax-attempts"], "2");
    // Usage lines leave a serving thread in batches: within about a second.
    let usage_lines = || -> Vec<Value> {
        bin.logs()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["target"] == "ax::usage")
            .map(|v| v["fields"].clone())
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while usage_lines().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let records = usage_lines();
    assert_eq!(records.len(), 1, "exactly one record per request: {records:?}");
    let r = &records[0];
    assert_eq!(r["upstream"], "backup");
    assert_eq!(r["retry_of"], "req-finance-1#1");
    assert_eq!(r["attempts"], 2);
    assert_eq!(r["prompt_tokens"], 5);
    assert_eq!(r["tenant"], "t");
    // The request's warning lines carry its id; lines outside a request carry none.
    let lines: Vec<Value> = bin.logs().lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let failed =
        lines.iter().find(|v| v["fields"]["message"] == "attempt failed").expect("the failed attempt is logged");
    assert_eq!(failed["request_id"], "req-finance-1", "{failed}");
    let listening = lines.iter().find(|v| v["fields"]["message"] == "listening").expect("the start is logged");
    assert!(listening.get("request_id").is_none(), "{listening}");
    let _ = std::fs::remove_dir_all(&dir);
}
