//! Traces over OTLP: the real data plane binary exports to a real OTLP/HTTP receiver built on
//! the official `opentelemetry-proto` package (`tests/otlp/receiver.py`), configured only by the
//! standard OpenTelemetry environment variables.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ax_tests::wire::{self, Framing};
use ax_tests::{key_digest, FakeUpstream, Process, Reply, KEY};
use serde_json::{json, Value};

/// The receiver, killed on drop.
struct Receiver {
    url: String,
    child: Child,
}

impl Receiver {
    fn start(dir: &Path) -> Self {
        Self::serving(dir, None)
    }

    /// With `tls`, (certificate chain, key): over HTTPS at `https://localhost:<port>`.
    fn serving(dir: &Path, tls: Option<(&Path, &Path)>) -> Self {
        let port_file = dir.join("otlp.port");
        let _ = std::fs::remove_file(&port_file);
        let mut cmd = Command::new(ax_tests::venv_bin("python", "the OTLP receiver"));
        cmd.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/otlp/receiver.py")).arg(&port_file);
        if let Some((chain, key)) = tls {
            cmd.arg(chain).arg(key);
        }
        let child = cmd.stdout(Stdio::null()).stderr(Stdio::inherit()).spawn().expect("receiver");
        let mut receiver = Self { url: String::new(), child };
        for _ in 0..400 {
            if let Ok(p) = std::fs::read_to_string(&port_file) {
                receiver.url = match tls {
                    None => format!("http://127.0.0.1:{}", p.trim()),
                    Some(_) => format!("https://localhost:{}", p.trim()),
                };
                return receiver;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        receiver.kill();
        panic!("the OTLP receiver did not start");
    }

    async fn spans(&self) -> Vec<Value> {
        // (The test reads an HTTPS receiver without checking its certificate: ax is what must.)
        let client = reqwest::Client::builder().danger_accept_invalid_certs(true).build().unwrap();
        let v: Value = client.get(format!("{}/spans", self.url)).send().await.unwrap().json().await.unwrap();
        v.as_array().unwrap().clone()
    }

    /// The spans, once `done` says they are all there (at most 15 s).
    async fn wait(&self, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let start = Instant::now();
        loop {
            let s = self.spans().await;
            if done(&s) {
                return s;
            }
            assert!(start.elapsed() < Duration::from_secs(15), "spans so far: {s:#?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.kill();
    }
}

fn config(up: &str, down: &str, queue: u32) -> String {
    let digest = key_digest(KEY);
    format!(
        r#"
server: {{ tracing: {{ queue: {queue} }} }}
upstreams:
  - {{ name: down, provider: openai, base_url: "{down}/v1", api_key: sk-down,
      models: [{{ name: m-down, context_window: 100000, capabilities: [chat, streaming] }}] }}
  - {{ name: up, provider: openai, base_url: "{up}/v1", api_key: sk-up,
      models: [{{ name: m-up, context_window: 100000, capabilities: [chat, streaming],
                 price_per_mtok: {{ input: 1, output: 2 }} }}] }}
routes:
  - {{ alias: chat, strategy: priority, candidates: [{{ upstream: down, model: m-down, priority: 0 }}, {{ upstream: up, model: m-up, priority: 1 }}] }}
  - {{ alias: direct, candidates: [{{ upstream: up, model: m-up }}] }}
tenants:
  - {{ id: acme, keys: [{{ id: k1, sha256: "{digest}" }}] }}
"#
    )
}

fn data_plane(dir: &Path, config: &str, collector: &str) -> Process {
    data_plane_with(dir, config, &[("OTEL_EXPORTER_OTLP_ENDPOINT", collector)])
}

/// The data plane with these OpenTelemetry variables (and no others from the test's own).
fn data_plane_with(dir: &Path, config: &str, env: &[(&str, &str)]) -> Process {
    let path = dir.join("ax.yaml");
    std::fs::write(&path, config).unwrap();
    let mut cmd = Command::new(ax_tests::built("ax-dataplane"));
    cmd.arg("--config").arg(&path);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("OTEL_")) {
        cmd.env_remove(k);
    }
    cmd.env("OTEL_SERVICE_NAME", "ax-e2e").envs(env.iter().copied());
    Process::spawn(cmd, dir, "ax")
}

fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

/// A request that fails over once and one that streams: a server span per request and a client
/// span per attempt, children of it; the caller's `traceparent` continued (same trace, its span
/// the parent) and passed to each upstream with that attempt's span; the GenAI conventions'
/// attributes and ax's own; the failed attempt marked as an error with its class.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_and_a_stream_are_traced_with_genai_attributes_and_propagated_context() {
    let dir = ax_tests::temp_dir("traces");
    let receiver = Receiver::start(&dir);
    let stream = wire::openai_stream(&["Hel", "lo"], &[], "stop", (12, 3, 5), Framing::default());
    let up = FakeUpstream::start(move |r| {
        if r.body["stream"] == true {
            Reply::sse(&stream)
        } else {
            Reply::json(wire::openai_response(Some("hi"), &[], "stop", (11, 2, 4)))
        }
    })
    .await;
    let down = ax_tests::refused_url().await;
    let dp = data_plane(&dir, &config(&up.url(), &down, 4096), &receiver.url);
    let client = reqwest::Client::new();
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let r = client
        .post(format!("{}/v1/chat/completions", dp.url))
        .bearer_auth(KEY)
        .header("traceparent", format!("00-{caller_trace}-{caller_span}-01"))
        .header("x-request-id", "req-failover")
        .json(&json!({ "model": "chat", "max_tokens": 50, "temperature": 0.3,
                       "messages": [{ "role": "user", "content": "hi" }] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap();
    let r = client
        .post(format!("{}/v1/chat/completions", dp.url))
        .bearer_auth(KEY)
        .header("x-request-id", "req-stream")
        .json(&json!({ "model": "direct", "stream": true, "messages": [{ "role": "user", "content": "hi" }] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("[DONE]"));

    let spans = receiver.wait(|s| s.len() >= 5).await;
    let by_request = |rid: &str| -> Vec<&Value> {
        spans
            .iter()
            .filter(|s| {
                s["attributes"]["ax.request_id"] == rid
                    || s["attributes"]["ax.attempt_id"].as_str().is_some_and(|a| a.starts_with(&format!("{rid}#")))
            })
            .collect()
    };
    // The failed-over request: its server span continues the caller's trace.
    let failover = by_request("req-failover");
    assert_eq!(failover.len(), 3, "{failover:#?}");
    let server = failover.iter().find(|s| s["kind"] == 2).expect("a server span");
    assert_eq!(server["trace_id"], caller_trace);
    assert_eq!(server["parent_span_id"], caller_span);
    assert_eq!(server["name"], "chat chat");
    assert_eq!(server["resource"]["service.name"], "ax-e2e");
    assert_eq!(server["scope"], "ax");
    assert_eq!(server["scope_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(server["content_type"], "application/x-protobuf");
    // Sampled, and the parent known to be remote (the caller's): SpanFlags 0x301.
    assert_eq!(server["flags"], 0x301);
    for (k, v) in [
        ("gen_ai.operation.name", json!("chat")),
        ("gen_ai.provider.name", json!("openai")),
        ("gen_ai.request.model", json!("chat")),
        ("gen_ai.response.model", json!("m-up")),
        ("gen_ai.request.max_tokens", json!(50)),
        ("gen_ai.request.temperature", json!(0.3)),
        ("gen_ai.usage.input_tokens", json!(11)),
        ("gen_ai.usage.output_tokens", json!(2)),
        ("gen_ai.usage.cache_read.input_tokens", json!(4)),
        ("ax.tenant", json!("acme")),
        ("ax.key_id", json!("k1")),
        ("ax.alias", json!("chat")),
        ("ax.upstream", json!("up")),
        ("ax.attempts", json!(2)),
        ("ax.retry_of", json!("req-failover#1")),
        ("http.response.status_code", json!(200)),
        ("gen_ai.response.id", json!("chatcmpl-upstream-1")),
        ("gen_ai.response.finish_reasons", json!(["stop"])),
    ] {
        assert_eq!(attr(server, k), &v, "{k} in {server:#}");
    }
    assert!(attr(server, "ax.cost_usd").as_f64().is_some_and(|c| c > 0.0), "{server:#}");
    assert!(attr(server, "error.type").is_null(), "{server:#}");
    // Its attempts: client spans under it, in order, the first failed with its class.
    let mut attempts: Vec<&&Value> = failover.iter().filter(|s| s["kind"] == 3).collect();
    attempts.sort_by_key(|s| attr(s, "ax.attempt").as_i64());
    assert_eq!(attempts.len(), 2);
    for a in &attempts {
        assert_eq!(a["trace_id"], caller_trace);
        assert_eq!(a["parent_span_id"], server["span_id"]);
        assert_eq!(a["flags"], 0x101, "a local parent");
        assert!(
            a["start_ns"].as_u64() >= server["start_ns"].as_u64() && a["end_ns"].as_u64() <= server["end_ns"].as_u64()
        );
    }
    assert_eq!(attr(attempts[0], "ax.upstream"), "down");
    assert_eq!(attr(attempts[0], "gen_ai.request.model"), "m-down");
    assert_eq!(attr(attempts[0], "error.type"), "upstream_connect_failed");
    assert_eq!(attempts[0]["status"], 2, "STATUS_CODE_ERROR");
    assert_eq!(attr(attempts[1], "ax.upstream"), "up");
    assert_eq!(attr(attempts[1], "gen_ai.response.model"), "m-up");
    assert_eq!(attr(attempts[1], "ax.retry_of"), "req-failover#1");
    assert!(attr(attempts[1], "error.type").is_null());
    // The answer's id and finish on the attempt that answered, not on the one that failed.
    assert_eq!(attr(attempts[1], "gen_ai.response.id"), "chatcmpl-upstream-1");
    assert_eq!(attr(attempts[1], "gen_ai.response.finish_reasons"), &json!(["stop"]));
    assert!(attr(attempts[0], "gen_ai.response.id").is_null());
    // The upstream that answered got the trace, with its attempt's span as the parent.
    let sent = up.requests().into_iter().find(|r| r.header("x-request-id") == Some("req-failover")).unwrap();
    assert_eq!(
        sent.header("traceparent"),
        Some(format!("00-{caller_trace}-{}-01", attempts[1]["span_id"].as_str().unwrap()).as_str())
    );

    // The stream: a new trace (no traceparent came), its time to first chunk, its tokens.
    let streamed = by_request("req-stream");
    assert_eq!(streamed.len(), 2, "{streamed:#?}");
    let server = streamed.iter().find(|s| s["kind"] == 2).unwrap();
    assert_ne!(server["trace_id"], caller_trace);
    assert_eq!(server["parent_span_id"], "");
    assert_eq!(attr(server, "ax.stream"), true);
    assert_eq!(attr(server, "gen_ai.usage.input_tokens"), 12);
    assert_eq!(attr(server, "gen_ai.usage.output_tokens"), 3);
    assert_eq!(attr(server, "gen_ai.response.id"), "chatcmpl-up");
    assert_eq!(attr(server, "gen_ai.response.finish_reasons"), &json!(["stop"]));
    assert!(attr(server, "gen_ai.response.time_to_first_chunk").as_f64().is_some_and(|t| t > 0.0), "{server:#}");
    let attempt = streamed.iter().find(|s| s["kind"] == 3).unwrap();
    assert_eq!(attempt["parent_span_id"], server["span_id"]);
    assert_eq!(attempt["end_ns"], server["end_ns"], "the answering attempt lasts as long as its stream");
    let sent = up.requests().into_iter().find(|r| r.header("x-request-id") == Some("req-stream")).unwrap();
    assert_eq!(
        sent.header("traceparent"),
        Some(
            format!("00-{}-{}-01", server["trace_id"].as_str().unwrap(), attempt["span_id"].as_str().unwrap()).as_str()
        )
    );
    // Nothing of the prompt or the answer is in any span.
    let text = serde_json::to_string(&spans).unwrap();
    assert!(!text.contains("\"hi\"") && !text.contains("Hel"), "content in spans: {text}");
    let m = reqwest::get(format!("{}/metrics", dp.url)).await.unwrap().text().await.unwrap();
    assert!(m.lines().any(|l| l.starts_with("ax_trace_spans_exported_total ") && !l.ends_with(" 0")), "{m}");
    // The usage record names its trace, for the request explorer.
    // (Usage lines are handed to the log writer in batches: within about a second.)
    let start = Instant::now();
    let usage = loop {
        let logs = dp.logs();
        let usage = |l: &&str| l.contains("\"target\":\"ax::usage\"") && l.contains("\"request_id\":\"req-failover\"");
        if let Some(l) = logs.lines().find(usage) {
            break l.to_owned();
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no usage line for req-failover:\n{logs}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(usage.contains(&format!("\"trace_id\":\"{caller_trace}\"")), "{usage}");
    // Each attempt's bytes: the refused one sent nothing, the answering one its request.
    let record: Value = serde_json::from_str(&usage).unwrap();
    let list = &record["fields"]["attempt_list"];
    assert_eq!(list[0]["sent_bytes"], 0, "{usage}");
    assert!(list[1]["sent_bytes"].as_u64().is_some_and(|n| n > 100), "{usage}");
    assert!(list[1]["received_bytes"].as_u64().is_some_and(|n| n > 100), "{usage}");
}

/// Requests, (count, p50, p99 in µs) at concurrency 8.
async fn load(url: &str, n: usize) -> (usize, u128, u128) {
    let client = reqwest::Client::new();
    let mut lat = Vec::with_capacity(n);
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..8 {
        let (client, url) = (client.clone(), url.to_owned());
        tasks.spawn(async move {
            let mut out = Vec::new();
            for i in (w..n).step_by(8) {
                let t = Instant::now();
                let r = client
                    .post(format!("{url}/v1/chat/completions"))
                    .bearer_auth(KEY)
                    .json(&json!({ "model": "direct", "messages": [{ "role": "user", "content": format!("hi {i}") }] }))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
                r.bytes().await.unwrap();
                out.push(t.elapsed().as_micros());
            }
            out
        });
    }
    while let Some(r) = tasks.join_next().await {
        lat.extend(r.unwrap());
    }
    lat.sort_unstable();
    (lat.len(), lat[lat.len() / 2], lat[lat.len() * 99 / 100])
}

fn counter(metrics: &str, line_start: &str) -> u64 {
    metrics
        .lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// A collector that stalls, then one that is gone: requests take as long as with a healthy one,
/// the spans that cannot wait are dropped and counted by reason, and memory stays bounded by the
/// queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_or_dead_collector_costs_requests_nothing_and_drops_are_counted() {
    let dir = ax_tests::temp_dir("traces-drop");
    let mut receiver = Receiver::start(&dir);
    let up = FakeUpstream::fixed(Reply::json(wire::openai_response(Some("hi"), &[], "stop", (5, 1, 0)))).await;
    let down = ax_tests::refused_url().await;
    // Exports give up after 3 s (retries included): the standard variable, read.
    let dp = data_plane_with(
        &dir,
        &config(&up.url(), &down, 64),
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url), ("OTEL_EXPORTER_OTLP_TIMEOUT", "3000")],
    );
    let metrics = || async { reqwest::get(format!("{}/metrics", dp.url)).await.unwrap().text().await.unwrap() };

    load(&dp.url, 300).await; // warm-up
    let healthy = load(&dp.url, 3000).await;
    // (With a 64-request queue even a healthy collector misses some under this load.)
    let exported = receiver.wait(|s| !s.is_empty()).await.len();
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Stalled: each export hangs 30 s; the 64-request queue fills and the rest is dropped.
    reqwest::Client::new().post(format!("{}/stall", receiver.url)).send().await.unwrap();
    let stalled = load(&dp.url, 3000).await;
    let m = metrics().await;
    let full = counter(&m, "ax_trace_spans_dropped_total{reason=\"queue_full\"}");
    assert!(full >= 2 * (3000 - 64 - 512) as u64, "queue_full drops: {full}\n{m}");

    // Gone: exports fail at once (connection refused) and their spans are counted.
    receiver.kill();
    let dead = load(&dp.url, 3000).await;
    let start = Instant::now();
    let failed = loop {
        let m = metrics().await;
        let failed = counter(&m, "ax_trace_spans_dropped_total{reason=\"export_failed\"}");
        if failed > 0 {
            break failed;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no export_failed drops\n{m}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    eprintln!(
        "p50/p99 µs: healthy {healthy:?}, stalled {stalled:?}, dead {dead:?}; exported {exported}+, dropped queue_full {full}, export_failed {failed}"
    );
    for (what, (_, p50, p99)) in [("stalled", stalled), ("dead", dead)] {
        assert!(p50 <= healthy.1 * 2 + 2_000, "{what}: p50 {p50} µs against {} µs healthy", healthy.1);
        assert!(p99 <= healthy.2 * 3 + 10_000, "{what}: p99 {p99} µs against {} µs healthy", healthy.2);
    }
    // Bounded: the queue holds at most 64 requests' spans, whatever stalls.
    assert!(dp.rss_kib() < 200 * 1024, "RSS {} KiB", dp.rss_kib());
    assert!(!dp.logs().contains("panicked"));
}

/// A private CA's certificate, and a server certificate it signed for `localhost` and 127.0.0.1
/// (made with the `openssl` command): (CA, chain, key) paths.
fn certificates(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(dir).output().expect("the openssl command");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    run(&[
        &["req", "-x509"][..],
        &ec,
        &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=ax test CA"],
    ]
    .concat());
    run(&[&["req"][..], &ec, &["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"]].concat());
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
    (dir.join("ca.pem"), dir.join("server.pem"), dir.join("server.key"))
}

/// An HTTPS collector whose certificate a private CA signed, trusted through
/// `OTEL_EXPORTER_OTLP_CERTIFICATE`, with its credentials in `OTEL_EXPORTER_OTLP_HEADERS`: the
/// spans arrive with the header, and the credential is in no log line. Without the CA, the same
/// collector is not trusted: the spans are dropped as `export_failed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_collector_with_a_private_ca_and_credentials_gets_the_spans() {
    let dir = ax_tests::temp_dir("traces-https");
    let (ca, chain, key) = certificates(&dir);
    let receiver = Receiver::serving(&dir, Some((&chain, &key)));
    let up = FakeUpstream::fixed(Reply::json(wire::openai_response(Some("hi"), &[], "stop", (5, 1, 0)))).await;
    let down = ax_tests::refused_url().await;
    let endpoint = format!("{}/v1/traces", receiver.url);
    let ca = ca.to_str().unwrap();
    let dp = data_plane_with(
        &dir,
        &config(&up.url(), &down, 64),
        &[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", ca),
            ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20otlp-s3cret, x-scope=ops"),
        ],
    );
    let send = |url: String, id: &'static str| async move {
        let r = reqwest::Client::new()
            .post(format!("{url}/v1/chat/completions"))
            .bearer_auth(KEY)
            .header("x-request-id", id)
            .json(&json!({ "model": "direct", "messages": [{ "role": "user", "content": "hi" }] }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    };
    send(dp.url.clone(), "req-https").await;
    let spans = receiver.wait(|s| s.len() >= 2).await;
    assert!(spans.iter().any(|s| s["attributes"]["ax.request_id"] == "req-https"), "{spans:#?}");
    assert!(spans.iter().all(|s| s["authorization"] == "Bearer otlp-s3cret"), "{spans:#?}");
    assert!(!dp.logs().contains("s3cret"), "the collector's credential is never logged");

    // The same collector without its CA: not trusted, nothing sent, the drop counted.
    let untrusting = data_plane_with(
        &ax_tests::temp_dir("traces-https-untrusted"),
        &config(&up.url(), &down, 64),
        &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint), ("OTEL_EXPORTER_OTLP_TIMEOUT", "1000")],
    );
    send(untrusting.url.clone(), "req-untrusted").await;
    let start = Instant::now();
    loop {
        let m = reqwest::get(format!("{}/metrics", untrusting.url)).await.unwrap().text().await.unwrap();
        if counter(&m, "ax_trace_spans_dropped_total{reason=\"export_failed\"}") >= 2 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no export_failed drops\n{m}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!receiver.spans().await.iter().any(|s| s["attributes"]["ax.request_id"] == "req-untrusted"));
    assert!(untrusting.logs().contains("trace export failed"), "{}", untrusting.logs());
}

/// A tenant that opts in (`trace_content`) gets its prompts and completions in its requests'
/// spans, in the GenAI conventions' shape, whichever path the request took: forwarded whole and
/// streamed (OpenAI to OpenAI, Anthropic to Anthropic), translated (OpenAI caller, Anthropic
/// upstream). Another tenant's spans carry none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_that_opts_in_gets_its_prompts_and_completions_in_its_spans() {
    let dir = ax_tests::temp_dir("traces-content");
    let receiver = Receiver::start(&dir);
    let openai_stream = wire::openai_stream(&["Hel", "lo"], &[], "stop", (12, 3, 0), Framing::default());
    let openai = FakeUpstream::start(move |r| {
        if r.body["stream"] == true {
            Reply::sse(&openai_stream)
        } else {
            Reply::json(wire::openai_response(Some("Hi from OpenAI"), &[], "stop", (11, 2, 0)))
        }
    })
    .await;
    let anthropic_stream = wire::anthropic_stream(&["Bon", "jour"], &[], "end_turn", (7, 2, 0, 0), Framing::default());
    let anthropic = FakeUpstream::start(move |r| {
        if r.body["stream"] == true {
            Reply::sse(&anthropic_stream)
        } else {
            Reply::json(wire::anthropic_response(
                Some("Hi from Claude"),
                &[("toolu_1", "look", "{\"at\":\"sky\"}")],
                "tool_use",
                (9, 4, 0, 0),
            ))
        }
    })
    .await;
    let other = "ax-other-key";
    let config = format!(
        r#"
upstreams:
  - {{ name: up, provider: openai, base_url: "{}/v1", api_key: sk-up,
      models: [{{ name: m-up, context_window: 100000, capabilities: [chat, streaming, tools] }}] }}
  - {{ name: an, provider: anthropic, base_url: "{}", api_key: sk-an,
      models: [{{ name: m-an, context_window: 100000, capabilities: [chat, streaming, tools] }}] }}
routes:
  - {{ alias: direct, candidates: [{{ upstream: up, model: m-up }}] }}
  - {{ alias: claude, candidates: [{{ upstream: an, model: m-an }}] }}
tenants:
  - {{ id: acme, trace_content: true, keys: [{{ id: k1, sha256: "{}" }}] }}
  - {{ id: plain, keys: [{{ id: k2, sha256: "{}" }}] }}
"#,
        openai.url(),
        anthropic.url(),
        key_digest(KEY),
        key_digest(other)
    );
    let dp = data_plane(&dir, &config, &receiver.url);
    let client = reqwest::Client::new();
    let chat = |key: &'static str, rid: &'static str, body: Value| {
        let (client, url) = (client.clone(), dp.url.clone());
        async move {
            let r = client
                .post(format!("{url}/v1/chat/completions"))
                .bearer_auth(key)
                .header("x-request-id", rid)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{rid}");
            r.text().await.unwrap()
        }
    };
    let ask = |model: &str, text: &str, stream: bool| {
        json!({ "model": model, "stream": stream, "messages": [
            { "role": "system", "content": "Be brief." }, { "role": "user", "content": text }] })
    };
    chat(KEY, "c-whole", ask("direct", "Say hi", false)).await;
    chat(KEY, "c-stream", ask("direct", "Say hello", true)).await;
    chat(KEY, "c-translated", ask("claude", "Look up", false)).await;
    chat(other, "c-other", ask("direct", "Secret prompt", false)).await;
    let r = client
        .post(format!("{}/v1/messages", dp.url))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .header("x-request-id", "c-messages")
        .json(&json!({ "model": "claude", "max_tokens": 50, "stream": true, "system": "Be French.",
                       "messages": [{ "role": "user", "content": "Greet me" }] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.text().await.unwrap();

    let spans = receiver.wait(|s| s.iter().filter(|s| s["kind"] == 2).count() >= 5).await;
    let server = |rid: &str| -> Value {
        let s = spans.iter().find(|s| s["kind"] == 2 && s["attributes"]["ax.request_id"] == rid);
        s.unwrap_or_else(|| panic!("no span for {rid}: {spans:#?}")).clone()
    };
    let messages = |s: &Value, key: &str| -> Value {
        let text = attr(s, key).as_str().unwrap_or_else(|| panic!("no {key} in {s:#}"));
        serde_json::from_str(text).unwrap()
    };
    let system = json!({ "role": "system", "parts": [{ "type": "text", "content": "Be brief." }] });
    let user = |t: &str| json!({ "role": "user", "parts": [{ "type": "text", "content": t }] });
    let said = |t: &str, finish: &str| json!([{ "role": "assistant", "parts": [{ "type": "text", "content": t }], "finish_reason": finish }]);
    let s = server("c-whole");
    assert_eq!(messages(&s, "gen_ai.input.messages"), json!([system, user("Say hi")]));
    assert_eq!(messages(&s, "gen_ai.output.messages"), said("Hi from OpenAI", "stop"));
    let s = server("c-stream");
    assert_eq!(messages(&s, "gen_ai.input.messages"), json!([system, user("Say hello")]));
    assert_eq!(messages(&s, "gen_ai.output.messages"), said("Hello", "stop"));
    let s = server("c-translated");
    assert_eq!(messages(&s, "gen_ai.input.messages"), json!([system, user("Look up")]));
    assert_eq!(
        messages(&s, "gen_ai.output.messages"),
        json!([{ "role": "assistant", "finish_reason": "tool_calls", "parts": [
            { "type": "text", "content": "Hi from Claude" },
            { "type": "tool_call", "id": "toolu_1", "name": "look", "arguments": { "at": "sky" } }] }])
    );
    let s = server("c-messages");
    assert_eq!(
        messages(&s, "gen_ai.input.messages"),
        json!([{ "role": "system", "parts": [{ "type": "text", "content": "Be French." }] }, user("Greet me")])
    );
    assert_eq!(messages(&s, "gen_ai.output.messages"), said("Bonjour", "stop"));
    assert!(attr(&s, "ax.content_truncated").is_null());
    // The tenant that did not opt in: no content anywhere in its spans.
    let s = server("c-other");
    assert!(attr(&s, "gen_ai.input.messages").is_null() && attr(&s, "gen_ai.output.messages").is_null(), "{s:#}");
    let text = serde_json::to_string(&spans).unwrap();
    assert!(!text.contains("Secret prompt"), "{text}");
}
