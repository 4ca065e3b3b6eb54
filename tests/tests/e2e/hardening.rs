//! The control plane against bad input and failing machines (real Postgres, real processes):
//! metering that no caller can poison, atomic login throttling, JSON answers to any input (with a
//! schemathesis property test of every operation in `openapi.json`), graceful shutdown, and two
//! replicas on one Postgres.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ax_tests::cp::{create_node, create_operator, wait_applied, Session, TestDb, ADMIN_PASSWORD};
use ax_tests::Process;
use serde_json::{json, Value};

struct Stack {
    db: TestDb,
    dir: PathBuf,
    cp: Process,
    admin: Session,
}

async fn stack(tag: &str, env: &[(&str, &str)]) -> Stack {
    let db = TestDb::create(tag);
    create_operator(&db, "root", "admin");
    let dir = ax_tests::temp_dir(tag);
    let cp = Process::control_plane_with(&db, &dir, "cp", env);
    let admin = Session::login(&cp.url, "root", ADMIN_PASSWORD).await.unwrap_or_else(|_| panic!("admin login"));
    Stack { db, dir, cp, admin }
}

fn mock_upstream() -> Value {
    json!({
        "provider": "mock",
        "mock": { "reply_tokens": 4 },
        "models": [{ "name": "m", "context_window": 32000, "capabilities": ["chat", "streaming"],
                     "price_per_mtok": { "input": 1.0, "output": 2.0 } }]
    })
}

/// Upstreams `a` and `b`, route `chat` over both, tenant `acme` with a key. Returns the key.
async fn seed(admin: &Session) -> String {
    admin.ok("PUT", "/api/v1/upstreams/a", Some(&mock_upstream())).await;
    admin.ok("PUT", "/api/v1/upstreams/b", Some(&mock_upstream())).await;
    admin
        .ok(
            "PUT",
            "/api/v1/routes/chat",
            Some(&json!({ "candidates": [{ "upstream": "a", "model": "m" }, { "upstream": "b", "model": "m" }] })),
        )
        .await;
    admin.ok("PUT", "/api/v1/tenants/acme", Some(&json!({ "allowed_aliases": ["*"] }))).await;
    let k = admin.ok("POST", "/api/v1/tenants/acme/keys", Some(&json!({}))).await;
    k["key"].as_str().expect("key").to_owned()
}

async fn latest_version(admin: &Session) -> u64 {
    admin.ok("GET", "/api/v1/versions", None).await["versions"][0]["version"].as_u64().unwrap()
}

async fn chat(dp: &str, key: &str, model: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{dp}/v1/chat/completions"))
        .bearer_auth(key)
        .json(&json!({ "model": model, "messages": [{ "role": "user", "content": "hi" }] }))
        .send()
        .await
        .expect("request")
}

async fn wait_rows(db: &TestDb, sql: &str, n: usize, within: Duration) -> usize {
    let start = Instant::now();
    loop {
        let rows: usize = db.query(sql).parse().unwrap();
        if rows >= n || start.elapsed() > within {
            return rows;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The issue's poison request: a model name with a NUL. Its record is stored under the fixed
/// alias (not the name the caller made up), so Postgres takes it, the node's spool keeps
/// draining, and neither the data plane's metrics nor the cost report gain a series or a row per
/// made-up name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_in_a_model_name_does_not_stop_a_nodes_metering() {
    let s = stack("poison", &[]).await;
    let key = seed(&s.admin).await;
    let token = create_node(&s.db, "dp-1");
    let dp = Process::data_plane(&s.cp.url, &token, &s.dir.join("dp1"), "dp");
    wait_applied(&s.admin, "dp-1", latest_version(&s.admin).await, Duration::from_secs(5)).await;

    for model in ["ch\u{0}at", "zzz-random-123", "zzz-random-456"] {
        let r = chat(&dp.url, &key, model).await;
        assert_eq!(r.status(), 404);
        assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "model_not_found");
    }
    for _ in 0..20 {
        assert_eq!(chat(&dp.url, &key, "chat").await.status(), 200);
    }
    let rows = wait_rows(&s.db, "SELECT count(*) FROM usage_events", 23, Duration::from_secs(15)).await;
    assert_eq!(rows, 23, "every request, the poison one included, has its row");
    assert_eq!(s.db.query("SELECT count(*) FROM usage_events WHERE alias = '(unknown)'"), "3");
    assert_eq!(s.db.query("SELECT count(*) FROM usage_dead_letters"), "0", "the data plane made the records safe");
    // More traffic after the poison is metered too: the spool did not stop.
    for _ in 0..5 {
        assert_eq!(chat(&dp.url, &key, "chat").await.status(), 200);
    }
    assert_eq!(wait_rows(&s.db, "SELECT count(*) FROM usage_events", 28, Duration::from_secs(10)).await, 28);

    let metrics = reqwest::get(format!("{}/metrics", dp.url)).await.unwrap().text().await.unwrap();
    assert!(!metrics.contains("zzz-random") && !metrics.contains("ch\\u0000at"), "a made-up name became a label");
    // Every alias label is a configured alias or the fixed one: three made-up names add no series.
    let aliases: std::collections::BTreeSet<&str> =
        metrics.split("alias=\"").skip(1).filter_map(|rest| rest.split('"').next()).collect();
    assert_eq!(aliases, ["(unknown)", "chat"].into_iter().collect(), "alias labels in /metrics");
    let report = s.admin.ok("GET", "/api/v1/reports/cost?by=alias&period=month", None).await;
    let groups: Vec<&str> = report["rows"].as_array().unwrap().iter().filter_map(|r| r["group"].as_str()).collect();
    assert!(groups.iter().all(|g| ["chat", "(unknown)"].contains(g)), "report groups: {groups:?}");
    // The raw name is in the data plane's log line, and only there.
    assert!(dp.logs().contains("zzz-random-123"));
}

/// A batch holding records the control plane cannot store (a NUL, a lone surrogate, a torn line,
/// a time Postgres cannot hold, a tenant longer than an index row) is answered 200: the good
/// records are stored, each bad one is dead-lettered once with its reason and counted (metric and
/// `/nodes`), and offering the same batch again adds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poisoned_usage_batches_are_dead_lettered_and_the_rest_is_stored() {
    let s = stack("deadletter", &[]).await;
    let token = create_node(&s.db, "dp-1");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let record = |id: &str, tenant: &str| {
        json!({ "request_id": id, "started_at_ms": now, "tenant": tenant, "key_id": "k", "alias": "chat",
                "upstream": "a", "model": "m", "status": 200, "prompt_tokens": 3, "completion_tokens": 4,
                "cost_micro_usd": 11 })
        .to_string()
    };
    let lines = [
        record("good-1", "acme"),
        record("nul-alias", "acme").replace("\"chat\"", "\"ch\\u0000at\""),
        "not json at all".to_owned(),
        record("surrogate", "acme").replace("\"acme\"", "\"\\ud800\""),
        record("far-future", "acme")
            .replace(&format!("\"started_at_ms\":{now}"), "\"started_at_ms\":18446744073709551615"),
        // Fits every check but Postgres's index row size (54000 program_limit_exceeded): found
        // by the one-by-one retry of the refused batch.
        record("huge-tenant", &incompressible(5_000)),
        record("good-2", "acme"),
        r#"{"request_id":"torn"#.to_owned(),
    ];
    let body = lines.join("\n") + "\n";
    let post = || {
        reqwest::Client::new()
            .post(format!("{}/api/v1/usage", s.cp.url))
            .bearer_auth(&token)
            .header("content-type", "application/x-ndjson")
            .body(body.clone())
            .send()
    };
    let r = post().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (v["received"].as_u64(), v["inserted"].as_u64(), v["dead_lettered"].as_u64()),
        (Some(8), Some(2), Some(6)),
        "{v}"
    );
    assert_eq!(s.db.query("SELECT string_agg(request_id, ',' ORDER BY request_id) FROM usage_events"), "good-1,good-2");
    let reasons = s.db.query(
        "SELECT string_agg(coalesce(request_id, '-') || ': ' || reason, E'\\n' ORDER BY id) FROM usage_dead_letters",
    );
    for (id, why) in [
        ("nul-alias", "NUL"),
        ("-", "not JSON"),
        ("-", "hex escape"),
        ("far-future", "out of range"),
        ("huge-tenant", "refused by the database"),
    ] {
        assert!(reasons.lines().any(|l| l.starts_with(id) && l.contains(why)), "{id} / {why}:\n{reasons}");
    }
    // Offered again (a node that crashed before deleting its spool): nothing is added twice.
    let v: Value = post().await.unwrap().json().await.unwrap();
    assert_eq!((v["inserted"].as_u64(), v["duplicates"].as_u64()), (Some(0), Some(2)), "{v}");
    assert_eq!(s.db.query("SELECT count(*) FROM usage_dead_letters"), "6");
    assert_eq!(s.db.query("SELECT count(*) FROM usage_events"), "2");

    let nodes = s.admin.ok("GET", "/api/v1/nodes", None).await;
    assert_eq!(nodes["nodes"][0]["dead_letters"], 6, "{nodes}");
    let metrics = reqwest::get(format!("{}/metrics", s.cp.url)).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("ax_usage_dead_letters_total{node=\"dp-1\"} 6"), "{metrics}");
    eprintln!("dead-lettered 6 of 8 records:\n{reasons}");
}

/// Letters that do not compress (so Postgres cannot shrink them into an index row).
fn incompressible(n: usize) -> String {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect()
}

/// 60 wrong passwords at once for one user from one address: the failure slot is taken before
/// the password is checked, so at most the limit (5) are checked against argon2; the rest are
/// throttled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_parallel_wrong_passwords_check_at_most_the_limit() {
    let s = stack("throttle", &[]).await;
    create_operator(&s.db, "fin", "finance");
    let mut tasks = Vec::new();
    for _ in 0..60 {
        let url = s.cp.url.clone();
        tasks.push(tokio::spawn(async move {
            reqwest::Client::new()
                .post(format!("{url}/api/v1/login"))
                .json(&json!({ "username": "fin", "password": "wrong password!!" }))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }));
    }
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for t in tasks {
        *statuses.entry(t.await.unwrap()).or_default() += 1;
    }
    let checked = statuses.get(&401).copied().unwrap_or(0);
    assert!(checked <= 5, "{checked} passwords were checked against a limit of 5: {statuses:?}");
    assert_eq!(checked + statuses.get(&429).copied().unwrap_or(0), 60, "{statuses:?}");
    let logged = s.cp.logs().matches("failed login").count();
    assert_eq!(logged, checked, "one failed-login line per checked password");
    assert_eq!(s.db.query("SELECT count(*) FROM login_failures WHERE username = 'fin'"), checked.to_string());
    eprintln!("60 parallel wrong passwords: {statuses:?}");
}

/// Sends raw bytes to `url`'s host and returns the answer's status line and body.
fn raw(url: &str, request: &[u8]) -> (String, Value) {
    let addr = url.trim_start_matches("http://");
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = tcp.write_all(request);
    let mut out = Vec::new();
    let _ = tcp.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{head}");
    (head.lines().next().unwrap_or_default().to_owned(), serde_json::from_str(body).unwrap_or(Value::Null))
}

/// Every bad input the issue found, and its neighbours, is a JSON 4xx with a stable code; text
/// with a NUL or a lone surrogate is a 422 naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_admin_input_gets_a_json_4xx_with_a_stable_code() {
    let s = stack("badinput", &[]).await;
    seed(&s.admin).await;
    let token = create_node(&s.db, "dp-1");
    let expect = |r: reqwest::Response, status: u16, code: &'static str| async move {
        assert_eq!(r.status(), status, "{code}");
        assert!(r.headers()["content-type"].to_str().unwrap().starts_with("application/json"));
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], code, "{v}");
        v
    };
    let v = expect(
        s.admin.send("PUT", "/api/v1/tenants/acme", Some(&json!({ "allowed_aliases": ["chat", "ch\u{0}at"] }))).await,
        422,
        "validation_failed",
    )
    .await;
    assert_eq!(v["error"]["fields"][0]["path"], "allowed_aliases[1]");
    let surrogate = reqwest::Client::new()
        .put(format!("{}/api/v1/tenants/acme", s.cp.url))
        .header("cookie", s.admin.cookie())
        .header("x-csrf-token", &s.admin.csrf)
        .header("content-type", "application/json")
        .body(r#"{"allowed_aliases":["\ud800"]}"#)
        .send()
        .await
        .unwrap();
    expect(surrogate, 422, "validation_failed").await;
    let v = expect(s.admin.send("GET", "/api/v1/tenants/a%00b/keys", None).await, 422, "validation_failed").await;
    assert_eq!(v["error"]["fields"][0]["path"], "id");
    let v = expect(s.admin.send("GET", "/api/v1/audit?operator=%00", None).await, 422, "validation_failed").await;
    assert_eq!(v["error"]["fields"][0]["path"], "operator");
    expect(s.admin.send("GET", "/api/v1/audit?limit=99999999999999999999", None).await, 400, "invalid_query").await;
    expect(s.admin.send("POST", "/api/v1/versions/abc/rollback", None).await, 400, "invalid_path").await;
    // Times the parser takes but Postgres would refuse.
    let v =
        expect(s.admin.send("GET", "/api/v1/reports/cost?from=-009999-01-01", None).await, 422, "validation_failed")
            .await;
    assert_eq!(v["error"]["fields"][0]["path"], "from");
    let key = json!({ "expires_at": "-009999-01-01T00:00:00Z" });
    let v = expect(s.admin.send("POST", "/api/v1/tenants/acme/keys", Some(&key)).await, 422, "validation_failed").await;
    assert_eq!(v["error"]["fields"][0]["path"], "expires_at");
    expect(s.admin.send("GET", "/api/v1/nope", None).await, 404, "not_found").await;
    let r = s.admin.send("PATCH", "/api/v1/tenants", None).await;
    assert!(r.headers()["allow"].to_str().unwrap().contains("GET"));
    expect(r, 405, "method_not_allowed").await;
    let r = reqwest::Client::new()
        .get(format!("{}/api/v1/nodes/connect", s.cp.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_client_error());
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "websocket_required");
    let big = vec![b' '; ax_controlplane_body_limit() + 1];
    let r = reqwest::Client::new()
        .put(format!("{}/api/v1/tenants/acme", s.cp.url))
        .header("cookie", s.admin.cookie())
        .header("x-csrf-token", &s.admin.csrf)
        .body(big)
        .send()
        .await
        .unwrap();
    expect(r, 413, "payload_too_large").await;

    // What hyper refuses before any handler runs: a 100,000-character path, a 500 KB header, a
    // malformed request line.
    let url = s.cp.url.clone();
    let long = format!("GET /api/v1/{} HTTP/1.1\r\nhost: x\r\n\r\n", "a".repeat(100_000));
    let (status, v) = raw(&url, long.as_bytes());
    assert!(status.contains("414"), "{status}");
    assert_eq!(v["error"]["code"], "uri_too_long");
    let header = format!("GET /api/v1/tenants HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n", "b".repeat(500_000));
    let (status, v) = raw(&url, header.as_bytes());
    assert!(status.contains("431"), "{status}");
    assert_eq!(v["error"]["code"], "headers_too_large");
    // A 100 KB head fits hyper's buffer; the router's own limit refuses it, whether or not the
    // caller is signed in.
    let r = reqwest::Client::new()
        .get(format!("{}/api/v1/tenants", s.cp.url))
        .header("cookie", s.admin.cookie())
        .header("x-big", "c".repeat(100_000))
        .send()
        .await
        .unwrap();
    expect(r, 431, "headers_too_large").await;
    let (status, v) = raw(&url, b"GET /api/v1/tenants HTTP/1.1\r\nhost: x\r\nbad header line\r\n\r\n");
    assert!(status.contains("400"), "{status}");
    assert_eq!(v["error"]["code"], "malformed_request");
    // The control plane is still up and answering.
    assert_eq!(s.admin.send("GET", "/api/v1/tenants", None).await.status(), 200);
    assert!(!s.cp.logs().contains("panicked"));
}

/// The router's body limit (`ax_controlplane::MAX_BODY_BYTES`, not linked here: the tests drive
/// the binary).
fn ax_controlplane_body_limit() -> usize {
    64 * 1024 * 1024
}

/// schemathesis (a maintained property-based API tester) generates requests, valid and junk
/// (NUL bytes included), for every operation in `openapi.json` and checks each answer: never a
/// 5xx, always JSON with an `error.code` when it is an error (`tests/schemathesis/ax_checks.py`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_answers_junk_with_a_json_4xx() {
    let s = stack("schemathesis", &[]).await;
    seed(&s.admin).await;
    let token = create_node(&s.db, "dp-1");
    // Which operations a run takes (schemathesis's `--include-path` / `--exclude-path` arguments).
    let run = |select: &[&str]| {
        let mut cmd = std::process::Command::new(ax_tests::venv_bin("schemathesis", "the admin API's property test"));
        cmd.arg("run")
            .arg(format!("{}/api/openapi.json", s.cp.url))
            .args(["--url", &s.cp.url])
            .args(["-H", &format!("Cookie: {}", s.admin.cookie())])
            .args(["-H", &format!("x-csrf-token: {}", s.admin.csrf)])
            .args(["-H", &format!("Authorization: Bearer {token}")])
            .args(["--checks", "not_a_server_error,json_answers"])
            .args(["--max-examples", "25", "--generation-with-security-parameters", "false"])
            .args(["--request-timeout", "20", "--no-color", "--workers", "2"])
            .env("SCHEMATHESIS_HOOKS", "ax_checks")
            .env("PYTHONPATH", concat!(env!("CARGO_MANIFEST_DIR"), "/schemathesis"))
            .current_dir(&s.dir);
        cmd.args(select);
        let mut out = cmd.output().expect("schemathesis");
        let mut text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        // schemathesis's own generator can fail now and then (hypothesis's `FlakyFailure` while it
        // makes an example, reported as a "Runtime Error" of one operation, with no request sent
        // for it): that run is made once more. A failed check (a 5xx, an answer that is not
        // JSON) is never retried.
        if !out.status.success() && text.contains("Runtime Error") && !text.contains("FAILURES") {
            eprintln!("schemathesis failed inside its generator; once more:\n{text}");
            out = cmd.output().expect("schemathesis");
            text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        }
        assert!(out.status.success(), "schemathesis found answers that are 5xx or not JSON:\n{text}");
        eprintln!(
            "{}",
            text.lines().filter(|l| l.contains("generated") || l.contains("Seed")).collect::<Vec<_>>().join("\n")
        );
    };
    // `PUT /groups/{id}` without schemathesis's coverage phase: in a clean CI run its generator
    // failed for that operation every time, inside CPython (`SystemError: AST constructor
    // recursion depth mismatch` while hypothesis describes a lambda), before any request. Its
    // examples, fuzzing and stateful phases run.
    let groups = "/api/v1/groups/{id}";
    run(&["--exclude-path", "/api/v1/logout", "--exclude-path", groups]);
    run(&["--include-path", groups, "--phases", "examples,fuzzing,stateful"]);
    // Logout ends the session the other operations need: it runs last, on its own.
    run(&["--include-path", "/api/v1/logout"]);
    assert!(!s.cp.logs().contains("panicked"));
}

/// SIGTERM: the control plane stops accepting, finishes the admin request in flight, closes its
/// node websockets with a close frame (1001), and exits 0; the data plane, given both replicas,
/// moves to the other one at once and follows changes made there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_drains_on_sigterm_and_nodes_move_to_the_other_replica() {
    let mut s = stack("drain", &[]).await;
    let key = seed(&s.admin).await;
    let other = Process::control_plane(&s.db, &s.dir, "cp2");
    let token = create_node(&s.db, "dp-1");
    let urls = format!("{},{}", s.cp.url, other.url);
    let dp = Process::data_plane(&urls, &token, &s.dir.join("dp1"), "dp");
    wait_applied(&s.admin, "dp-1", latest_version(&s.admin).await, Duration::from_secs(5)).await;
    assert!(dp.logs().contains(&format!("\"url\":\"{}\"", s.cp.url)), "connected to the first replica first");

    // An admin request whose body is still arriving when the signal comes.
    let body = json!({ "allowed_aliases": ["chat"] }).to_string();
    let head = format!(
        "PUT /api/v1/tenants/late HTTP/1.1\r\nhost: x\r\ncookie: {}\r\nx-csrf-token: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        s.admin.cookie(),
        s.admin.csrf,
        body.len()
    );
    let mut tcp = std::net::TcpStream::connect(s.cp.url.trim_start_matches("http://")).unwrap();
    tcp.write_all(head.as_bytes()).unwrap();
    tcp.write_all(&body.as_bytes()[..5]).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let signalled = Instant::now();
    s.cp.signal("TERM");
    std::thread::sleep(Duration::from_millis(300));
    tcp.write_all(&body.as_bytes()[5..]).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut answer = Vec::new();
    let _ = tcp.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "the request in flight was finished: {answer}");

    // The node moved to the other replica within a second of the close frame.
    let moved = loop {
        if dp.logs().contains(&format!("\"url\":\"{}\"", other.url)) {
            break signalled.elapsed();
        }
        assert!(signalled.elapsed() < Duration::from_secs(5), "the data plane did not move: {}", dp.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let status = s.cp.wait_exit(Duration::from_secs(25)).expect("the control plane exits within the drain");
    assert!(status.success(), "{status:?}");
    assert!(dp.logs().contains("\"code\":1001"), "the node got a close frame: {}", dp.logs());
    eprintln!("node on the other replica {moved:?} after SIGTERM");

    // Changes made on the remaining replica reach it.
    let admin2 = Session::login(&other.url, "root", ADMIN_PASSWORD).await.unwrap_or_else(|_| panic!("login"));
    let v = admin2
        .ok("PUT", "/api/v1/routes/chat", Some(&json!({ "candidates": [{ "upstream": "b", "model": "m" }] })))
        .await["version"]
        .as_u64()
        .unwrap();
    wait_applied(&admin2, "dp-1", v, Duration::from_secs(2)).await;
    let r = chat(&dp.url, &key, "chat").await;
    assert_eq!(r.headers()["x-ax-upstream"], "b");
}

/// The data plane drains on SIGTERM too: a stream in flight ends whole, then the process exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_plane_drains_on_sigterm() {
    let dir = ax_tests::temp_dir("dp-drain");
    let path = dir.join("ax.yaml");
    std::fs::write(
        &path,
        format!(
            r#"
upstreams:
  - {{ name: up, provider: mock, mock: {{ tokens_per_second: 40, reply_tokens: 40 }},
      models: [{{ name: m, context_window: 8000, capabilities: [chat, streaming] }}] }}
routes:
  - {{ alias: chat, candidates: [{{ upstream: up, model: m }}] }}
tenants:
  - {{ id: t, keys: [{{ id: k, sha256: "{}" }}] }}
"#,
            ax_tests::key_digest(ax_tests::KEY)
        ),
    )
    .unwrap();
    let mut bin = ax_tests::Binary::start(&path, &dir);
    let resp = ax_tests::post(
        &bin.url,
        "/v1/chat/completions",
        &json!({ "model": "chat", "stream": true, "messages": [{ "role": "user", "content": "hi" }] }),
    )
    .await;
    assert_eq!(resp.status(), 200);
    bin.signal("TERM");
    let events = ax_tests::sse_events(resp).await;
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "the stream in flight ended whole");
    assert!(ax_tests::assemble(&events).error.is_none());
    let status = bin.wait_exit(Duration::from_secs(10)).expect("exits after the drain");
    assert!(status.success(), "{status:?}");
}

/// Two replicas on one Postgres: a session made on one is valid on the other; `/nodes` counts
/// connections, not node ids (two processes on one token), on every replica; a data plane whose
/// replica dies (kill -9) moves to the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_sessions_and_see_every_connection() {
    let mut s = stack("two_cp", &[]).await;
    let key = seed(&s.admin).await;
    let other = Process::control_plane(&s.db, &s.dir, "cp2");
    // The session cookie of replica 1, used on replica 2.
    let on_other = reqwest::Client::new()
        .get(format!("{}/api/v1/tenants", other.url))
        .header("cookie", s.admin.cookie())
        .send()
        .await
        .unwrap();
    assert_eq!(on_other.status(), 200, "a session is valid on both replicas");
    let token = create_node(&s.db, "dp-1");
    let dp1 = Process::data_plane(&format!("{},{}", s.cp.url, other.url), &token, &s.dir.join("dp1"), "dp1");
    let mut dp2 = Process::data_plane(&other.url, &token, &s.dir.join("dp2"), "dp2");
    let connections = |url: String| {
        let cookie = s.admin.cookie();
        async move {
            let v: Value = reqwest::Client::new()
                .get(format!("{url}/api/v1/nodes"))
                .header("cookie", cookie)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            (v["nodes"][0]["connected"].as_bool().unwrap_or(false), v["nodes"][0]["connections"].as_i64().unwrap_or(0))
        }
    };
    let start = Instant::now();
    while connections(s.cp.url.clone()).await != (true, 2) {
        assert!(start.elapsed() < Duration::from_secs(5), "two processes on one token are two connections");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(connections(other.url.clone()).await, (true, 2), "every replica sees every connection");
    // A change committed on one replica reaches the data plane held by the other, both ways.
    let admin2 = Session::login(&other.url, "root", ADMIN_PASSWORD).await.unwrap_or_else(|_| panic!("login"));
    for (session, dp, upstream) in [(&s.admin, &dp2, "b"), (&admin2, &dp1, "a"), (&s.admin, &dp2, "a")] {
        session
            .ok("PUT", "/api/v1/routes/chat", Some(&json!({ "candidates": [{ "upstream": upstream, "model": "m" }] })))
            .await;
        let start = Instant::now();
        while chat(&dp.url, &key, "chat").await.headers()["x-ax-upstream"] != upstream {
            assert!(start.elapsed() < Duration::from_secs(2), "a change on the other replica did not reach {}", dp.url);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    dp2.kill();
    let start = Instant::now();
    while connections(other.url.clone()).await != (true, 1) {
        assert!(start.elapsed() < Duration::from_secs(5), "one process dropped: still connected, one connection");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Replica 1 dies without a word: its data plane moves to replica 2.
    s.cp.kill();
    let start = Instant::now();
    while !dp1.logs().contains(&format!("\"url\":\"{}\"", other.url)) {
        assert!(start.elapsed() < Duration::from_secs(5), "the data plane did not move: {}", dp1.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let v = admin2
        .ok("PUT", "/api/v1/routes/chat", Some(&json!({ "candidates": [{ "upstream": "b", "model": "m" }] })))
        .await["version"]
        .as_u64()
        .unwrap();
    wait_applied(&admin2, "dp-1", v, Duration::from_secs(2)).await;
    assert_eq!(chat(&dp1.url, &key, "chat").await.headers()["x-ax-upstream"], "b");
}
