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

fn spooled(dir: &std::path::Path, mock: &str) -> String {
    format!(
        r#"
metering: {{ spool_dir: "{spool}", jsonl: "{sink}" }}
upstreams:
  - {{ name: up, provider: mock, mock: {{ {mock} }},
      models: [{{ name: m, context_window: 200000, capabilities: [chat, streaming],
                 price_per_mtok: {{ input: 1.0, output: 2.0 }} }}] }}
routes:
  - {{ alias: chat, candidates: [{{ upstream: up, model: m }}] }}
tenants:
  - {{ id: t, keys: [{{ id: k, sha256: "{}" }}] }}
"#,
        key_digest(KEY),
        spool = dir.join("spool").display(),
        sink = dir.join("usage.jsonl").display(),
    )
}

fn sink_records(dir: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("usage.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("sink lines are JSON"))
        .collect()
}

async fn wait_for_records(dir: &std::path::Path, n: usize) -> Vec<serde_json::Value> {
    for _ in 0..100 {
        let r = sink_records(dir);
        if r.len() >= n {
            return r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    sink_records(dir)
}

/// Run requests, `kill -9` the data plane in the middle, restart it: every request the client saw
/// answered has exactly one usage record in the sink, and no request has two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metering_survives_kill_9_without_loss_or_duplicates() {
    use std::sync::{Arc, Mutex};
    let dir = ax_tests::temp_dir("crash");
    let path = dir.join("ax.yaml");
    std::fs::write(&path, spooled(&dir, "latency_ms: 5, reply_tokens: 8")).unwrap();
    let bin = ax_tests::Binary::start(&path, &dir);
    let answered = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut workers = Vec::new();
    for w in 0..4 {
        let (url, answered) = (bin.url.clone(), answered.clone());
        workers.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            for i in 0..200 {
                let id = format!("crash-{w}-{i}");
                let resp = client
                    .post(format!("{url}/v1/chat/completions"))
                    .bearer_auth(KEY)
                    .header("x-request-id", &id)
                    .json(&json!({ "model": "chat", "messages": [{ "role": "user", "content": "hi" }] }))
                    .send()
                    .await;
                let Ok(resp) = resp else { break };
                if resp.status() == 200 && resp.bytes().await.is_ok() {
                    answered.lock().unwrap().push(id);
                } else {
                    break;
                }
            }
        }));
    }
    // Let some requests through, then kill -9 mid-traffic.
    while answered.lock().unwrap().len() < 150 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let logs_before = bin.logs();
    drop(bin); // SIGKILL
    for w in workers {
        let _ = w.await;
    }
    let answered = answered.lock().unwrap().clone();
    assert!(answered.len() >= 150 && answered.len() < 800, "killed mid-run: {}", answered.len());

    let bin = ax_tests::Binary::start(&path, &dir);
    let records = wait_for_records(&dir, answered.len()).await;
    let mut count = std::collections::HashMap::<String, usize>::new();
    for r in &records {
        *count.entry(r["request_id"].as_str().unwrap().to_owned()).or_default() += 1;
    }
    assert!(count.values().all(|&n| n == 1), "duplicate records in the sink");
    for id in &answered {
        assert_eq!(count.get(id), Some(&1), "answered request {id} has no usage record");
    }
    // The drain reports its last acknowledged pass, for alerting on a stuck spool. The gauge is
    // set once the pass that delivered the records above has returned: polled, not read once.
    let mut last_commit = None;
    for _ in 0..100 {
        let metrics = reqwest::get(format!("{}/metrics", bin.url)).await.unwrap().text().await.unwrap();
        last_commit = metrics
            .lines()
            .find_map(|l| l.strip_prefix("ax_spool_last_commit_timestamp_seconds "))
            .map(|v| v.parse::<f64>().unwrap());
        if last_commit.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let last_commit = last_commit.expect("spool gauge in /metrics");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!((now - last_commit).abs() < 5.0, "last commit {last_commit} vs now {now}");
    // Keys never reach logs.
    let logs = format!("{logs_before}{}", bin.logs());
    assert!(!logs.contains(KEY), "a caller key leaked into the logs");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A client that disconnects at token 50 of 500 still produces its one record, with the tokens
/// generated until the cancel (estimated, flagged) and the cost of those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_mid_stream_yields_one_record_with_tokens_so_far() {
    let dir = ax_tests::temp_dir("disconnect");
    let path = dir.join("ax.yaml");
    std::fs::write(&path, spooled(&dir, "tokens_per_second: 200, reply_tokens: 500")).unwrap();
    let bin = ax_tests::Binary::start(&path, &dir);
    let mut resp = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", bin.url))
        .bearer_auth(KEY)
        .header("x-request-id", "cut-at-50")
        .json(&json!({ "model": "chat", "stream": true, "messages": [{ "role": "user", "content": "hi" }] }))
        .send()
        .await
        .unwrap();
    let mut text = String::new();
    let mut tokens = 0;
    while tokens < 50 {
        let chunk = resp.chunk().await.unwrap().unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
        tokens = text.matches("\"content\":\"").count().saturating_sub(1); // minus the role chunk's ""
    }
    drop(resp);
    let records = wait_for_records(&dir, 1).await;
    assert_eq!(records.len(), 1, "{records:?}");
    let r = &records[0];
    assert_eq!(r["request_id"], "cut-at-50");
    assert_eq!(r["error_code"], "client_disconnected");
    assert_eq!(r["incomplete"], true);
    assert_eq!(r["estimated"], true);
    let completion = r["completion_tokens"].as_u64().unwrap();
    assert!((50..120).contains(&completion), "tokens generated until the cancel: {completion}");
    // 1 prompt token estimate aside, cost = completion × $2 / Mtok, rounded once.
    assert!(r["cost_micro_usd"].as_u64().is_some());
    drop(bin);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Rejected requests are metered too: one record each, with what was known.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_requests_get_records() {
    let dir = ax_tests::temp_dir("rejected");
    let path = dir.join("ax.yaml");
    std::fs::write(&path, spooled(&dir, "")).unwrap();
    let bin = ax_tests::Binary::start(&path, &dir);
    let client = reqwest::Client::new();
    let url = format!("{}/v1/chat/completions", bin.url);
    let body = json!({ "model": "nope", "messages": [{ "role": "user", "content": "hi" }] });
    client.post(&url).header("x-request-id", "no-key").json(&body).send().await.unwrap();
    client.post(&url).bearer_auth(KEY).header("x-request-id", "no-model").json(&body).send().await.unwrap();
    let records = wait_for_records(&dir, 2).await;
    let by_id = |id: &str| records.iter().find(|r| r["request_id"] == id).cloned().unwrap();
    assert_eq!(by_id("no-key")["status"], 401);
    assert_eq!(by_id("no-key")["tenant"], "");
    let r = by_id("no-model");
    assert_eq!(
        (r["status"].as_u64(), r["error_code"].as_str(), r["tenant"].as_str()),
        (Some(404), Some("model_not_found"), Some("t"))
    );
    drop(bin);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn context_budget_routes_long_prompts_or_refuses_them() {
    let yaml = format!(
        r#"
upstreams:
  - {{ name: small, provider: mock, models: [{{ name: s, context_window: 8000, capabilities: [chat] }}] }}
  - {{ name: large, provider: mock, models: [{{ name: l, context_window: 1000000, capabilities: [chat] }}] }}
routes:
  - {{ alias: chat, candidates: [{{ upstream: small, model: s }}], max_prompt_tokens: 100, long_context_alias: chat-long }}
  - {{ alias: chat-long, candidates: [{{ upstream: large, model: l }}] }}
  - {{ alias: strict, candidates: [{{ upstream: small, model: s }}], max_prompt_tokens: 100 }}
tenants:
  - {{ id: t, keys: [{{ id: k, sha256: "{}" }}, {{ id: old, sha256: "{}", status: revoked }}] }}
"#,
        key_digest(KEY),
        key_digest("ax-revoked-key")
    );
    let gw = Gateway::start(&yaml).await;
    let long = "word ".repeat(200); // ~334 estimated tokens
    let ask = |model: &str, text: &str| json!({ "model": model, "messages": [{ "role": "user", "content": text }] });
    let short = post(&gw.url, "/v1/chat/completions", &ask("chat", "hi")).await;
    assert_eq!(short.headers()["x-ax-upstream"], "small");
    assert!(short.headers().get("x-ax-long-context").is_none());
    let r = post(&gw.url, "/v1/chat/completions", &ask("chat", &long)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ax-upstream"], "large");
    assert_eq!(r.headers()["x-ax-long-context"], "chat-long");
    let r = post(&gw.url, "/v1/chat/completions", &ask("strict", &long)).await;
    assert_eq!(r.status(), 400);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("over the limit of 100") && msg.contains("about 3"), "{msg}");
    // A revoked key is refused with its own code.
    let r = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", gw.url))
        .bearer_auth("ax-revoked-key")
        .json(&ask("chat", "hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["error"]["code"], "api_key_revoked");
}

fn limited(
    primary: &str,
    backup: &str,
    tenant_limits: &str,
    key_limits: &str,
    alias_limits: &str,
    up_limits: &str,
) -> String {
    format!(
        r#"
upstreams:
  - {{ name: primary, provider: openai, base_url: "{primary}", limits: {{ {up_limits} }},
      models: [{{ name: m, context_window: 100000, capabilities: [chat, streaming] }}] }}
  - {{ name: backup, provider: openai, base_url: "{backup}",
      models: [{{ name: m, context_window: 100000, capabilities: [chat, streaming] }}] }}
routes:
  - {{ alias: chat, strategy: priority, limits: {{ {alias_limits} }},
      candidates: [{{ upstream: primary, model: m, priority: 0 }}, {{ upstream: backup, model: m, priority: 1 }}] }}
tenants:
  - {{ id: t, limits: {{ {tenant_limits} }}, keys: [{{ id: k, sha256: "{}", limits: {{ {key_limits} }} }}] }}
"#,
        key_digest(KEY)
    )
}

fn hello() -> serde_json::Value {
    json!({ "model": "chat", "max_tokens": 10, "messages": [{ "role": "user", "content": "hi" }] })
}

#[tokio::test]
async fn tenant_and_key_limits_refuse_with_openai_headers() {
    let up = FakeUpstream::fixed(Reply::json(wire::openai_response(Some("ok"), &[], "stop", (1, 1, 0)))).await;
    let gw = Gateway::start(&limited(&up.url(), &up.url(), "rpm: 3", "", "", "")).await;
    for _ in 0..3 {
        assert_eq!(post(&gw.url, "/v1/chat/completions", &hello()).await.status(), 200);
    }
    let r = post(&gw.url, "/v1/chat/completions", &hello()).await;
    assert_eq!(r.status(), 429);
    let h = r.headers().clone();
    assert!(h["retry-after"].to_str().unwrap().parse::<u64>().unwrap() >= 1);
    assert_eq!(h["x-ratelimit-limit-requests"], "3");
    assert_eq!(h["x-ratelimit-remaining-requests"], "0");
    assert!(h["x-ratelimit-reset-requests"].to_str().unwrap().ends_with('s'));
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");
    assert!(v["error"]["message"].as_str().unwrap().contains("tenant"), "{v}");
    assert_eq!(up.hits(), 3, "refused requests never reach an upstream");

    let gw = Gateway::start(&limited(&up.url(), &up.url(), "", "rpm: 1", "", "")).await;
    assert_eq!(post(&gw.url, "/v1/chat/completions", &hello()).await.status(), 200);
    let v: serde_json::Value = post(&gw.url, "/v1/chat/completions", &hello()).await.json().await.unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("rate limit of the key"), "{v}");
}

/// TPM with large prompts: each request reserves its prompt estimate + max_tokens up front, so a
/// burst cannot overshoot; the reservation is settled to the actual usage afterwards.
#[tokio::test]
async fn alias_tpm_reserves_large_prompts() {
    // The upstream reports 100 prompt + 10 completion tokens per call.
    let up = FakeUpstream::fixed(Reply::json(wire::openai_response(Some("ok"), &[], "stop", (100, 10, 0)))).await;
    let gw = Gateway::start(&limited(&up.url(), &up.url(), "", "", "tpm: 3000", "")).await;
    // ~1,700 estimated prompt tokens (5,000 bytes / 3) + 10: the second would overshoot 3,000.
    let big =
        json!({ "model": "chat", "max_tokens": 10, "messages": [{ "role": "user", "content": "x".repeat(5_000) }] });
    assert_eq!(post(&gw.url, "/v1/chat/completions", &big).await.status(), 200);
    // Settled to 110 actual tokens: a second big one now fits…
    assert_eq!(post(&gw.url, "/v1/chat/completions", &big).await.status(), 200);
    // …but two in flight at once could not both reserve.
    let r = post(
        &gw.url,
        "/v1/chat/completions",
        &json!({ "model": "chat", "max_tokens": 2000,
        "messages": [{ "role": "user", "content": "x".repeat(5_000) }] }),
    )
    .await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["x-ratelimit-limit-tokens"], "3000");
    let v: serde_json::Value = r.json().await.unwrap();
    assert!(
        v["error"]["message"].as_str().unwrap().contains("alias")
            && v["error"]["message"].as_str().unwrap().contains("tokens")
    );
}

/// A full upstream layer skips that candidate instead of refusing the request.
#[tokio::test]
async fn upstream_limit_skips_the_candidate() {
    let primary = FakeUpstream::fixed(Reply::json(wire::openai_response(Some("p"), &[], "stop", (1, 1, 0)))).await;
    let backup = FakeUpstream::fixed(Reply::json(wire::openai_response(Some("b"), &[], "stop", (1, 1, 0)))).await;
    let gw = Gateway::start(&limited(&primary.url(), &backup.url(), "", "", "", "rpm: 2")).await;
    let mut served = Vec::new();
    for _ in 0..4 {
        let r = post(&gw.url, "/v1/chat/completions", &hello()).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["x-ax-attempts"], "1", "skipped, not attempted");
        served.push(r.headers()["x-ax-upstream"].to_str().unwrap().to_owned());
    }
    assert_eq!(served, vec!["primary", "primary", "backup", "backup"]);
    assert_eq!(primary.hits(), 2);
}

/// A tenant's concurrency cap holds under 200 simultaneous streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_cap_holds_under_200_simultaneous_streams() {
    let pieces: Vec<String> = (0..10).map(|i| format!("p{i} ")).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let events: Vec<String> = wire::openai_stream(&refs, &[], "stop", (1, 10, 0), wire::Framing::default())
        .split_inclusive("\n\n")
        .map(str::to_owned)
        .collect();
    let up = FakeUpstream::fixed(Reply::sse_paced(events, std::time::Duration::from_millis(30))).await;
    let gw = Gateway::start(&limited(&up.url(), &up.url(), "concurrency: 20", "", "", "")).await;
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let url = gw.url.clone();
        tasks.push(tokio::spawn(async move {
            let r = post(
                &url,
                "/v1/chat/completions",
                &json!({ "model": "chat", "stream": true,
                "messages": [{ "role": "user", "content": "hi" }] }),
            )
            .await;
            let status = r.status().as_u16();
            let body = r.text().await.unwrap();
            (status, body)
        }));
    }
    let (mut ok, mut refused) = (0, 0);
    for t in tasks {
        let (status, body) = t.await.unwrap();
        match status {
            200 => {
                assert!(body.ends_with("data: [DONE]\n\n"));
                ok += 1;
            }
            429 => {
                assert!(body.contains("concurrent requests"), "{body}");
                refused += 1;
            }
            other => panic!("{other}: {body}"),
        }
    }
    assert!(up.max_in_flight() <= 20, "in flight reached {}", up.max_in_flight());
    assert!(ok >= 20 && ok + refused == 200, "ok {ok}, refused {refused}");
}

fn budgeted(full: &str, mini: &str, action: &str) -> String {
    format!(
        r#"
server: {{ budget_timezone: "Europe/Berlin" }}
upstreams:
  - {{ name: full, provider: openai, base_url: "{full}",
      models: [{{ name: big, context_window: 100000, capabilities: [chat], price_per_mtok: {{ input: 1.0, output: 2.0 }} }}] }}
  - {{ name: mini, provider: openai, base_url: "{mini}",
      models: [{{ name: small, context_window: 100000, capabilities: [chat], price_per_mtok: {{ input: 0.1, output: 0.2 }} }}] }}
routes:
  - {{ alias: chat, candidates: [{{ upstream: full, model: big }}] }}
  - {{ alias: chat-mini, candidates: [{{ upstream: mini, model: small }}] }}
tenants:
  - {{ id: t, keys: [{{ id: k, sha256: "{}" }}],
      budgets: [{{ window: day, usd: 0.005, action: {action} }}] }}
"#,
        key_digest(KEY)
    )
}

fn micro(h: &reqwest::header::HeaderMap) -> u64 {
    let (whole, frac) = h["x-ax-cost-usd"].to_str().unwrap().split_once('.').unwrap();
    whole.parse::<u64>().unwrap() * 1_000_000 + frac.parse::<u64>().unwrap()
}

/// A $0.005 daily budget; each call costs exactly $0.002 (1,000 prompt × $1 + 500 output × $2
/// per Mtok). Two calls fit; the third would overspend: downgraded (cheaper alias, with headers)
/// or rejected.
#[tokio::test]
async fn budgets_downgrade_or_reject_and_warn() {
    let body = || Reply::json(wire::openai_response(Some("ok"), &[], "stop", (1_000, 500, 0)));
    let full = FakeUpstream::fixed(body()).await;
    let mini = FakeUpstream::fixed(body()).await;
    let ask = json!({ "model": "chat", "max_tokens": 600, "messages": [{ "role": "user", "content": "hi" }] });

    let gw = Gateway::start(&budgeted(&full.url(), &mini.url(), "{ downgrade_to: chat-mini }")).await;
    for _ in 0..2 {
        let r = post(&gw.url, "/v1/chat/completions", &ask).await;
        assert_eq!(r.status(), 200);
        assert_eq!(micro(r.headers()), 2_000);
        assert!(r.headers().get("x-ax-degraded").is_none());
    }
    let r = post(&gw.url, "/v1/chat/completions", &ask).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ax-upstream"], "mini");
    assert_eq!(r.headers()["x-ax-degraded"], "budget; from=chat; to=chat-mini");
    let warning = r.headers()["x-ax-budget-warning"].to_str().unwrap().to_owned();
    assert!(warning.starts_with("day; spent=0.004") && warning.ends_with("limit=0.005000"), "{warning}");
    assert_eq!(micro(r.headers()), 200, "the cheaper model's cost");
    assert_eq!((full.hits(), mini.hits()), (2, 1));

    let gw = Gateway::start(&budgeted(&full.url(), &mini.url(), "reject")).await;
    for _ in 0..2 {
        assert_eq!(post(&gw.url, "/v1/chat/completions", &ask).await.status(), 200);
    }
    let r = post(&gw.url, "/v1/chat/completions", &ask).await;
    assert_eq!(r.status(), 429);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "budget_exceeded");
    assert!(v["error"]["message"].as_str().unwrap().contains("day budget of $0.005000"), "{v}");

    // `warn`: past the cap the request is still served, and says so.
    let gw = Gateway::start(&budgeted(&full.url(), &mini.url(), "warn")).await;
    for _ in 0..2 {
        assert_eq!(post(&gw.url, "/v1/chat/completions", &ask).await.status(), 200);
    }
    let before = full.hits();
    let r = post(&gw.url, "/v1/chat/completions", &ask).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ax-budget-warning"], "day; exceeded; limit=0.005000");
    assert!(r.headers().get("x-ax-degraded").is_none());
    assert_eq!(full.hits(), before + 1, "served by the budgeted alias's own upstream");
}

/// Costs of a known mix of requests add up exactly: 3 × (1,000 + 500 × 2) + 2 × (333 + 77 × 2)
/// micro-USD at $1/$2 per Mtok = 6,000 + 974 = 6,974.
#[tokio::test]
async fn costs_of_a_known_mix_add_up_exactly() {
    let a = FakeUpstream::fixed(Reply::json(wire::openai_response(Some("a"), &[], "stop", (1_000, 500, 0)))).await;
    let b = FakeUpstream::fixed(Reply::json(wire::openai_response(Some("b"), &[], "stop", (333, 77, 0)))).await;
    let yaml = budgeted(&a.url(), &b.url(), "reject")
        .replace("input: 0.1, output: 0.2", "input: 1.0, output: 2.0")
        .replace("usd: 0.005", "usd: 100");
    let gw = Gateway::start(&yaml).await;
    let mut total = 0;
    for model in ["chat", "chat", "chat-mini", "chat", "chat-mini"] {
        let r = post(
            &gw.url,
            "/v1/chat/completions",
            &json!({ "model": model, "messages": [{ "role": "user", "content": "hi" }] }),
        )
        .await;
        total += micro(r.headers());
    }
    assert_eq!(total, 6_974);
}

/// Two data-plane processes against one real Redis admit together within 10% of one fleet-wide
/// limit; with Redis killed mid-test, traffic continues on local limits without errors or waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_one_limit_through_redis_and_survive_its_death() {
    let mut redis = ax_tests::RedisServer::start();
    let port = redis.port;
    let dir = ax_tests::temp_dir("fleet");
    let (da, db) = (dir.join("a"), dir.join("b"));
    std::fs::create_dir_all(&da).unwrap();
    std::fs::create_dir_all(&db).unwrap();
    let path = dir.join("ax.yaml");
    std::fs::write(
        &path,
        format!(
            r#"
server: {{ redis_url: "redis://127.0.0.1:{port}", replicas: 2, redis_prefix: "fleet-{}" }}
upstreams:
  - {{ name: up, provider: mock, models: [{{ name: m, context_window: 8000, capabilities: [chat] }}] }}
routes:
  - {{ alias: chat, candidates: [{{ upstream: up, model: m }}] }}
tenants:
  - {{ id: t, limits: {{ rpm: 40 }}, keys: [{{ id: k, sha256: "{}" }}] }}
"#,
            std::process::id(),
            key_digest(KEY)
        ),
    )
    .unwrap();
    let a = ax_tests::Binary::start(&path, &da);
    let b = ax_tests::Binary::start(&path, &db);
    let client = reqwest::Client::new();
    let ask = json!({ "model": "chat", "max_tokens": 5, "messages": [{ "role": "user", "content": "hi" }] });
    // All traffic to replica A first: a fleet-wide limit lets A alone use about 40 (a per-replica
    // fallback share would stop it at 20); then replica B finds the limit already used.
    let count = |url: String, n: usize| {
        let (client, ask) = (client.clone(), ask.clone());
        async move {
            let mut ok = 0;
            for _ in 0..n {
                let r =
                    client.post(format!("{url}/v1/chat/completions")).bearer_auth(KEY).json(&ask).send().await.unwrap();
                match r.status().as_u16() {
                    200 => ok += 1,
                    429 => {}
                    other => panic!("unexpected {other}"),
                }
            }
            ok
        }
    };
    let on_a = count(a.url.clone(), 80).await;
    let on_b = count(b.url.clone(), 40).await;
    assert!((36..=44).contains(&(on_a + on_b)), "two replicas admitted {on_a} + {on_b} against one limit of 40");
    assert!(on_a >= 36, "replica A alone used the fleet-wide limit: {on_a}");
    assert!(on_b <= 4, "replica B saw the limit already used: {on_b}");
    assert!(!a.logs().contains("redis unavailable") && !b.logs().contains("redis unavailable"));

    // Redis dies: local limits (40 / 2 replicas = 20 each) take over; nobody waits on Redis.
    // (A subject Redis refused is not asked again for up to a second: its refusal stands that
    // long, Redis or not.)
    redis.kill();
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    for url in [&a.url, &b.url] {
        for _ in 0..10 {
            let started = std::time::Instant::now();
            let r = client.post(format!("{url}/v1/chat/completions")).bearer_auth(KEY).json(&ask).send().await.unwrap();
            assert_eq!(r.status(), 200, "local fallback admits within its share");
            assert!(started.elapsed() < std::time::Duration::from_millis(500), "no stall: {:?}", started.elapsed());
        }
    }
    assert!(a.logs().contains("redis unavailable"), "the fallback is logged");
    drop((a, b));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same known mix, summed from the usage records the real binary writes to its sink:
/// 6,974 micro-USD exactly, one record per request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_records_of_a_known_mix_sum_exactly() {
    let a = FakeUpstream::fixed(Reply::json(wire::openai_response(Some("a"), &[], "stop", (1_000, 500, 0)))).await;
    let b = FakeUpstream::fixed(Reply::json(wire::openai_response(Some("b"), &[], "stop", (333, 77, 0)))).await;
    let dir = ax_tests::temp_dir("mix");
    let path = dir.join("ax.yaml");
    let yaml = budgeted(&a.url(), &b.url(), "reject")
        .replace("input: 0.1, output: 0.2", "input: 1.0, output: 2.0")
        .replace("usd: 0.005", "usd: 100")
        .replace(
            "server: {",
            &format!(
                "metering: {{ spool_dir: \"{}\", jsonl: \"{}\" }}\nserver: {{",
                dir.join("spool").display(),
                dir.join("usage.jsonl").display()
            ),
        );
    std::fs::write(&path, yaml).unwrap();
    let bin = ax_tests::Binary::start(&path, &dir);
    for model in ["chat", "chat", "chat-mini", "chat", "chat-mini"] {
        let r = post(
            &bin.url,
            "/v1/chat/completions",
            &json!({ "model": model, "messages": [{ "role": "user", "content": "hi" }] }),
        )
        .await;
        assert_eq!(r.status(), 200);
    }
    let records = wait_for_records(&dir, 5).await;
    assert_eq!(records.len(), 5);
    let total: u64 = records.iter().map(|r| r["cost_micro_usd"].as_u64().unwrap()).sum();
    assert_eq!(total, 6_974);
    drop(bin);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Budget spend is fleet-wide through Redis: with a $0.007 day budget and $0.002 calls (each
/// reserving ~$0.0012 up front) alternating between two replicas, the fourth call is refused:
/// the fleet has spent $0.006. Per-replica spend, even at half the budget each ($0.0035), would
/// admit all four.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_one_budget_through_redis() {
    let mut redis = ax_tests::RedisServer::start();
    let port = redis.port;
    let up = FakeUpstream::fixed(Reply::json(wire::openai_response(Some("ok"), &[], "stop", (1_000, 500, 0)))).await;
    let dir = ax_tests::temp_dir("fleet-budget");
    let (da, db) = (dir.join("a"), dir.join("b"));
    std::fs::create_dir_all(&da).unwrap();
    std::fs::create_dir_all(&db).unwrap();
    let path = dir.join("ax.yaml");
    let yaml = budgeted(&up.url(), &up.url(), "reject").replace("usd: 0.005", "usd: 0.007").replace(
        "server: { budget_timezone: \"Europe/Berlin\" }",
        &format!(
            "server: {{ budget_timezone: \"Europe/Berlin\", redis_url: \"redis://127.0.0.1:{port}\", replicas: 2, redis_prefix: \"budget-{}\" }}",
            std::process::id()
        ),
    );
    std::fs::write(&path, yaml).unwrap();
    let a = ax_tests::Binary::start(&path, &da);
    let b = ax_tests::Binary::start(&path, &db);
    let ask = json!({ "model": "chat", "max_tokens": 600, "messages": [{ "role": "user", "content": "hi" }] });
    let mut statuses = Vec::new();
    for url in [&a.url, &b.url, &a.url, &b.url] {
        statuses.push(post(url, "/v1/chat/completions", &ask).await.status().as_u16());
        // The settle (reservation → actual cost) is sent to Redis off the request path.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(statuses, vec![200, 200, 200, 429], "the fleet spent $0.006 of $0.007; a fourth call does not fit");
    assert!(!a.logs().contains("redis unavailable") && !b.logs().contains("redis unavailable"));
    redis.kill();
    drop((a, b));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Budgets at every level in one configuration: tenants `a` and `b` pool a $0.006 day budget in
/// group `org`; key `a1` of `a` has its own $0.004 week budget, key `a2` none. Each call costs
/// exactly $0.002. `a1` is stopped by its own budget after two calls (with its key's warning
/// first), `a2` spends the group's third $0.002, and then `b`, which has spent nothing itself,
/// is refused by the group it shares.
#[tokio::test]
async fn key_and_group_budgets_cap_their_own_spend() {
    let up = FakeUpstream::fixed(Reply::json(wire::openai_response(Some("ok"), &[], "stop", (1_000, 500, 0)))).await;
    let (a1, a2, b1) = ("ax-key-a1-0123456789", "ax-key-a2-0123456789", "ax-key-b1-0123456789");
    let yaml = format!(
        r#"
upstreams:
  - {{ name: up, provider: openai, base_url: "{}",
      models: [{{ name: m, context_window: 100000, capabilities: [chat], price_per_mtok: {{ input: 1.0, output: 2.0 }} }}] }}
routes:
  - {{ alias: chat, candidates: [{{ upstream: up, model: m }}] }}
groups:
  - {{ id: org, budgets: [{{ window: day, usd: 0.006 }}] }}
tenants:
  - {{ id: a, groups: [org], keys: [
        {{ id: a1, sha256: "{}", budgets: [{{ window: week, usd: 0.004 }}] }},
        {{ id: a2, sha256: "{}" }} ] }}
  - {{ id: b, groups: [org], keys: [{{ id: b1, sha256: "{}" }}] }}
"#,
        up.url(),
        key_digest(a1),
        key_digest(a2),
        key_digest(b1)
    );
    let gw = Gateway::start(&yaml).await;
    let client = reqwest::Client::new();
    let ask = json!({ "model": "chat", "max_tokens": 600, "messages": [{ "role": "user", "content": "hi" }] });
    let call = |key: &'static str| {
        let (client, ask, url) = (client.clone(), ask.clone(), gw.url.clone());
        async move { client.post(format!("{url}/v1/chat/completions")).bearer_auth(key).json(&ask).send().await.unwrap() }
    };
    let r = call(a1).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("x-ax-budget-warning").is_none());
    let r = call(a1).await;
    assert_eq!(r.status(), 200);
    // $0.002 spent and this call's maximum cost (600 output tokens at $2 + the prompt) reserved.
    let warning = r.headers()["x-ax-budget-warning"].to_str().unwrap().to_owned();
    assert!(
        warning.starts_with("week; spent=0.0032") && warning.ends_with("; limit=0.004000; scope=key:a1"),
        "{warning}"
    );
    let r = call(a1).await;
    assert_eq!(r.status(), 429);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "budget_exceeded");
    assert_eq!(v["error"]["message"], "the key's week budget of $0.004000 is spent");

    let r = call(a2).await;
    assert_eq!(r.status(), 200, "a2 has no key budget; the group has $0.002 left");
    let warning = r.headers()["x-ax-budget-warning"].to_str().unwrap().to_owned();
    assert!(
        warning.starts_with("day; spent=0.00") && warning.ends_with("; limit=0.006000; scope=group:org"),
        "{warning}"
    );
    let r = call(b1).await;
    assert_eq!(r.status(), 429, "tenant b spent nothing, but the group it shares is spent");
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["message"], "the group's day budget of $0.006000 is spent");
    assert_eq!(up.hits(), 3);
}

/// A key's limit for one alias: `k` may call `chat` twice a minute and `chat-mini` freely;
/// another key of the same tenant is not held by it.
#[tokio::test]
async fn a_key_limit_per_alias_refuses_only_that_alias() {
    let other = "ax-other-key-0123456789";
    let yaml = format!(
        r#"
upstreams:
  - {{ name: up, provider: mock, models: [{{ name: m, context_window: 8000, capabilities: [chat] }}] }}
routes:
  - {{ alias: chat, candidates: [{{ upstream: up, model: m }}] }}
  - {{ alias: chat-mini, candidates: [{{ upstream: up, model: m }}] }}
tenants:
  - {{ id: t, keys: [
        {{ id: k, sha256: "{}", alias_limits: {{ chat: {{ rpm: 2 }} }} }},
        {{ id: o, sha256: "{}" }} ] }}
"#,
        key_digest(KEY),
        key_digest(other)
    );
    let gw = Gateway::start(&yaml).await;
    let ask =
        |model: &str| json!({ "model": model, "max_tokens": 5, "messages": [{ "role": "user", "content": "hi" }] });
    for _ in 0..2 {
        assert_eq!(post(&gw.url, "/v1/chat/completions", &ask("chat")).await.status(), 200);
    }
    let r = post(&gw.url, "/v1/chat/completions", &ask("chat")).await;
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");
    assert!(v["error"]["message"].as_str().unwrap().starts_with("rate limit of the key's alias exceeded: 2"), "{v}");
    for _ in 0..3 {
        assert_eq!(post(&gw.url, "/v1/chat/completions", &ask("chat-mini")).await.status(), 200);
    }
    let client = reqwest::Client::new();
    let r = client.post(format!("{}/v1/chat/completions", gw.url)).bearer_auth(other).json(&ask("chat")).send().await;
    assert_eq!(r.unwrap().status(), 200, "the limit is k's alone");
}
