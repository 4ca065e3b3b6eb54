//! Control plane against a real Postgres: admin API security, live snapshot push to real
//! data-plane processes, last-known-good, replicas in step, usage ingestion exactly once.

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

async fn stack(tag: &str) -> Stack {
    let db = TestDb::create(tag);
    create_operator(&db, "root", "admin");
    let dir = ax_tests::temp_dir(tag);
    let cp = Process::control_plane(&db, &dir, "cp");
    let admin = Session::login(&cp.url, "root", ADMIN_PASSWORD).await.unwrap_or_else(|_| panic!("admin login"));
    Stack { db, dir, cp, admin }
}

fn mock_upstream(latency_ms: u64) -> Value {
    json!({
        "provider": "mock",
        "mock": { "latency_ms": latency_ms, "reply_tokens": 4 },
        "models": [{ "name": "m", "context_window": 32000, "capabilities": ["chat", "streaming"],
                     "price_per_mtok": { "input": 1.0, "output": 2.0 } }]
    })
}

/// Two mock upstreams, route `chat` at 80/20, tenant `acme` with a key. Returns the key.
async fn seed(admin: &Session) -> String {
    admin.ok("PUT", "/api/v1/upstreams/a", Some(&mock_upstream(0))).await;
    admin.ok("PUT", "/api/v1/upstreams/b", Some(&mock_upstream(0))).await;
    set_weights(admin, 80, 20).await;
    admin.ok("PUT", "/api/v1/tenants/acme", Some(&json!({ "allowed_aliases": ["*"] }))).await;
    let k = admin.ok("POST", "/api/v1/tenants/acme/keys", Some(&json!({}))).await;
    k["key"].as_str().expect("key").to_owned()
}

/// The route `chat` over upstreams `a` and `b` at these weights.
fn chat_route(a: i64, b: i64) -> Value {
    json!({ "strategy": "weighted", "candidates": [
        { "upstream": "a", "model": "m", "weight": a }, { "upstream": "b", "model": "m", "weight": b } ] })
}

async fn set_weights(admin: &Session, a: i64, b: i64) -> u64 {
    let r = admin.ok("PUT", "/api/v1/routes/chat", Some(&chat_route(a, b))).await;
    r["version"].as_u64().expect("version")
}

async fn chat(dp: &str, key: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{dp}/v1/chat/completions"))
        .bearer_auth(key)
        .json(&json!({ "model": "chat", "messages": [{ "role": "user", "content": "hi" }] }))
        .send()
        .await
        .expect("request")
}

/// Requests `n` answers and counts them by upstream.
async fn split(dp: &str, key: &str, n: usize) -> (usize, usize) {
    let mut a = 0;
    for _ in 0..n {
        let r = chat(dp, key).await;
        assert_eq!(r.status(), 200, "{:?}", r.text().await);
        if r.headers()["x-ax-upstream"] == "a" {
            a += 1;
        }
    }
    (a, n - a)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_routes_need_a_session_the_right_role_and_csrf_and_keys_stay_encrypted() {
    let s = stack("auth").await;
    create_operator(&s.db, "fin", "finance");
    let finance = Session::login(&s.cp.url, "fin", ADMIN_PASSWORD).await.unwrap_or_else(|_| panic!("finance login"));
    assert_eq!(finance.role, "finance");

    let mutations: &[(&str, &str, Value)] = &[
        ("PUT", "/api/v1/tenants/x", json!({})),
        ("POST", "/api/v1/tenants/acme/keys", json!({})),
        ("POST", "/api/v1/keys/k/revoke", json!({})),
        ("PUT", "/api/v1/upstreams/u", mock_upstream(0)),
        ("DELETE", "/api/v1/upstreams/u", json!({})),
        ("PUT", "/api/v1/routes/r", json!({ "candidates": [] })),
        ("DELETE", "/api/v1/routes/r", json!({})),
        ("POST", "/api/v1/routes/r/preview", json!({ "candidates": [] })),
        ("POST", "/api/v1/versions/1/rollback", json!({})),
        ("POST", "/api/v1/nodes", json!({ "id": "n" })),
        ("POST", "/api/v1/logout", json!({})),
    ];
    let reads = [
        "/api/v1/tenants",
        "/api/v1/tenants/acme/keys",
        "/api/v1/upstreams",
        "/api/v1/routes",
        "/api/v1/routes/r",
        "/api/v1/versions",
        "/api/v1/nodes",
        "/api/v1/audit",
        "/api/v1/reports/cost",
        "/api/v1/session",
    ];
    let anon = reqwest::Client::new();
    for (m, p, body) in mutations {
        let r = anon.request(m.parse().unwrap(), format!("{}{p}", s.cp.url)).json(body).send().await.unwrap();
        assert_eq!(r.status(), 401, "{m} {p} without a session");
    }
    for p in reads {
        assert_eq!(
            anon.get(format!("{}{p}", s.cp.url)).send().await.unwrap().status(),
            401,
            "GET {p} without a session"
        );
    }
    for (m, p, body) in mutations.iter().filter(|(_, p, _)| !p.ends_with("logout")) {
        let r = finance.send(m, p, Some(body)).await;
        assert_eq!(r.status(), 403, "{m} {p} as finance");
        let r = s.admin.send_with(m, p, Some(body), false).await;
        assert_eq!(r.status(), 403, "{m} {p} without CSRF");
        assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "csrf_failed");
    }
    for p in reads.iter().filter(|p| !p.contains("reports") && !p.contains("session")) {
        assert_eq!(finance.send("GET", p, None).await.status(), 403, "GET {p} as finance");
    }
    assert_eq!(finance.send("GET", "/api/v1/reports/cost", None).await.status(), 200);

    // A plaintext upstream key goes in and is never seen again: not in the API, not in the dump.
    let secret = "sk-live-PLAINTEXT-never-on-disk-4242";
    let mut up = mock_upstream(0);
    up["api_key"] = json!(secret);
    let created = s.admin.ok("PUT", "/api/v1/upstreams/secretive", Some(&up)).await;
    assert_eq!(created["upstream"]["has_key"], true);
    assert!(!created.to_string().contains(secret));
    assert!(!s.admin.ok("GET", "/api/v1/upstreams", None).await.to_string().contains(secret));
    assert!(!s.admin.ok("GET", "/api/v1/audit", None).await.to_string().contains(secret));
    let dump = s.db.dump();
    assert!(dump.contains("secretive"), "the dump holds the upstream");
    assert!(
        !dump.contains(secret) && !dump.contains("PLAINTEXT"),
        "a database dump holds the upstream key in plaintext"
    );
    assert!(!s.cp.logs().contains(secret), "the key reached the log");

    // Bad passwords: 401 each, then throttled with 429 and Retry-After.
    for _ in 0..5 {
        let r = Session::login(&s.cp.url, "fin", "wrong password!").await.err().expect("refused");
        assert_eq!(r.status(), 401);
    }
    let r = Session::login(&s.cp.url, "fin", ADMIN_PASSWORD).await.err().expect("throttled");
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "login_throttled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_route_input_is_a_field_error_and_changes_nothing() {
    let s = stack("valid").await;
    seed(&s.admin).await;
    let versions = s.admin.ok("GET", "/api/v1/versions", None).await["versions"].as_array().unwrap().len();
    let cases = [
        (
            json!([{ "upstream": "a", "model": "m", "weight": -5 }, { "upstream": "b", "model": "m", "weight": 1 }]),
            "candidates[0].weight",
        ),
        (
            json!([{ "upstream": "a", "model": "m", "enabled": false }, { "upstream": "b", "model": "m", "weight": 0 }]),
            "candidates",
        ),
        (json!([{ "upstream": "nope", "model": "m" }]), "candidates[0].upstream"),
    ];
    for (cands, path) in cases {
        let r = s.admin.send("PUT", "/api/v1/routes/chat", Some(&json!({ "candidates": cands }))).await;
        assert_eq!(r.status(), 422);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "validation_failed");
        assert!(body["error"]["fields"].as_array().unwrap().iter().any(|f| f["path"] == path), "{path}: {body}");
    }
    let route = s.admin.ok("GET", "/api/v1/routes/chat", None).await;
    assert_eq!(route["candidates"][0]["weight"], 80, "unchanged");
    let after = s.admin.ok("GET", "/api/v1/versions", None).await["versions"].as_array().unwrap().len();
    assert_eq!(after, versions, "no version was made");

    // The preview shows new shares and commits nothing.
    let p = s.admin.ok("POST", "/api/v1/routes/chat/preview", Some(&chat_route(20, 80))).await;
    assert_eq!(p["shares_before"][0]["share_pct"], 80.0);
    assert_eq!(p["shares_after"][1]["share_pct"], 80.0);
    assert_eq!(s.admin.ok("GET", "/api/v1/routes/chat", None).await["candidates"][0]["weight"], 80);
}

/// A PUT with several bad fields names every one of them in one 422 (paths relative to the body),
/// and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_field_error_of_a_put_comes_back_at_once() {
    let s = stack("fields").await;
    seed(&s.admin).await;
    let versions = s.admin.ok("GET", "/api/v1/versions", None).await["versions"].as_array().unwrap().len();
    let paths = |body: &Value| -> Vec<String> {
        body["error"]["fields"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap().to_owned()).collect()
    };
    let tenant = json!({ "allowed_aliases": ["chat", "nope"], "limits": { "rpm": 0 },
        "budgets": [{ "window": "day", "usd": 5.0, "warn_at": 1.5, "action": { "downgrade_to": "missing" } }] });
    let r = s.admin.send("PUT", "/api/v1/tenants/acme", Some(&tenant)).await;
    assert_eq!(r.status(), 422);
    let body: Value = r.json().await.unwrap();
    let got = paths(&body);
    for want in ["allowed_aliases[1]", "budgets[0].warn_at", "budgets[0].action.downgrade_to", "limits"] {
        assert!(got.iter().any(|p| p == want), "{want} missing from {got:?}: {body}");
    }
    let upstream = json!({ "provider": "openai", "base_url": "ftp://example.test", "max_concurrency": 0,
        "models": [{ "name": "m", "context_window": 0, "capabilities": [] },
                   { "name": "m", "context_window": 8000, "capabilities": ["chat"] }] });
    let r = s.admin.send("PUT", "/api/v1/upstreams/c", Some(&upstream)).await;
    assert_eq!(r.status(), 422);
    let body: Value = r.json().await.unwrap();
    let got = paths(&body);
    for want in ["base_url", "max_concurrency", "models[0].context_window", "models[0].capabilities", "models[1].name"]
    {
        assert!(got.iter().any(|p| p == want), "{want} missing from {got:?}: {body}");
    }
    assert_eq!(got.iter().filter(|p| *p == "base_url").count(), 1, "one problem, said once: {got:?}");
    let after = s.admin.ok("GET", "/api/v1/versions", None).await["versions"].as_array().unwrap().len();
    assert_eq!(after, versions, "no version was made");
}

/// Single sign-on's settings: with `AX_PASSWORD_LOGIN=0` a password login is refused with its own
/// code and the login page learns it has only the SSO button; without an issuer, or with roles
/// that do not parse, `serve` stops at once and says why. (The sign-in itself is tested in
/// Chromium against a real provider: `ui::operators_sign_in_with_single_sign_on`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_logins_can_be_turned_off_for_single_sign_on() {
    let db = TestDb::create("sso_only");
    create_operator(&db, "root", "admin");
    let dir = ax_tests::temp_dir("sso-only");
    // Discovery waits for the first sign-in: no provider needs to run for these answers.
    let sso = [
        ("AX_OIDC_ISSUER", "http://127.0.0.1:9/"),
        ("AX_OIDC_CLIENT_ID", "ax"),
        ("AX_OIDC_ROLES", "ax-admins=admin"),
        ("AX_OIDC_LABEL", "Company SSO"),
    ];
    let env: Vec<(&str, &str)> = sso.iter().copied().chain([("AX_PASSWORD_LOGIN", "0")]).collect();
    let cp = Process::control_plane_with(&db, &dir, "cp", &env);
    let options: Value = reqwest::get(format!("{}/api/v1/sso", cp.url)).await.unwrap().json().await.unwrap();
    assert_eq!(options, json!({ "password": false, "sso": "Company SSO" }));
    let r = Session::login(&cp.url, "root", ADMIN_PASSWORD).await.err().expect("refused");
    assert_eq!(r.status(), 403);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "password_login_disabled");
    // The provider is down: the button leads back to the login page, which says so.
    let no_redirects = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = no_redirects.get(format!("{}/api/v1/sso/login?next=/routes", cp.url)).send().await.unwrap();
    assert_eq!(
        (r.status().as_u16(), r.headers()["location"].to_str().unwrap()),
        (303, "/?sso_error=sso_provider_unavailable")
    );
    drop(cp);

    let serve = |env: &[(&str, &str)]| {
        let out = std::process::Command::new(ax_tests::built("ax-controlplane"))
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("DATABASE_URL", &db.url)
            .env("AX_MASTER_KEY", ax_tests::cp::MASTER_KEY)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, err) = serve(&[("AX_PASSWORD_LOGIN", "0")]);
    assert!(!ok && err.contains("no way to log in"), "{err}");
    let (ok, err) = serve(&[sso[0], sso[1], ("AX_OIDC_ROLES", "ax-admins=superuser")]);
    assert!(!ok && err.contains("'superuser' is not a role"), "{err}");
}

/// The metric names a scrape serves (`name{labels} value` lines).
fn served(scrape: &str) -> std::collections::BTreeSet<String> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next().map(str::to_owned))
        .collect()
}

/// `deploy/grafana/ax-dashboard.json` and `deploy/prometheus/alerts.yml` name only metrics that a
/// running control plane and data plane serve (a renamed metric fails here, not in a silent
/// dashboard), and both files have the shape their tools load: panels with queries, rule groups
/// whose alerts each have an expression, a severity and a summary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_and_alerts_use_metrics_that_exist() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dashboard = std::fs::read_to_string(repo.join("deploy/grafana/ax-dashboard.json")).unwrap();
    let alerts = std::fs::read_to_string(repo.join("deploy/prometheus/alerts.yml")).unwrap();
    let d: Value = serde_json::from_str(&dashboard).unwrap();
    for p in d["panels"].as_array().unwrap() {
        let targets = p["targets"].as_array().unwrap();
        assert!(
            !targets.is_empty() && targets.iter().all(|t| t["expr"].as_str().is_some_and(|e| !e.is_empty())),
            "{p}"
        );
    }
    let rules: Value = serde_norway::from_str(&alerts).unwrap();
    let mut names = Vec::new();
    for g in rules["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            names.push(r["alert"].as_str().unwrap().to_owned());
            assert!(r["expr"].as_str().is_some_and(|e| !e.trim().is_empty()), "{r}");
            assert!(r["labels"]["severity"].is_string() && r["annotations"]["summary"].is_string(), "{r}");
        }
    }
    for want in
        ["AxHighErrorRate", "AxUpstreamBreakerOpen", "AxBudgetPastWarning", "AxUsageSpoolStalled", "AxDataPlaneBehind"]
    {
        assert!(names.iter().any(|n| n == want), "no {want} alert in {names:?}");
    }

    // A fleet that has served: a tenant with a budget, a data plane, plain and streamed requests.
    let s = stack("metrics").await;
    let key = seed(&s.admin).await;
    let budget = json!({ "allowed_aliases": ["*"], "budgets": [{ "window": "day", "usd": 10.0 }] });
    s.admin.ok("PUT", "/api/v1/tenants/acme", Some(&budget)).await;
    let token = create_node(&s.db, "dp-1");
    let dp = Process::data_plane(&s.cp.url, &token, &s.dir.join("dp1"), "dp");
    let v = s.admin.ok("GET", "/api/v1/versions", None).await["versions"][0]["version"].as_u64().unwrap();
    wait_applied(&s.admin, "dp-1", v, Duration::from_secs(5)).await;
    for _ in 0..5 {
        assert_eq!(chat(&dp.url, &key).await.status(), 200);
    }
    let streamed = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", dp.url))
        .bearer_auth(&key)
        .json(&json!({ "model": "chat", "stream": true, "messages": [{ "role": "user", "content": "hi" }] }))
        .send()
        .await
        .unwrap();
    assert_eq!(streamed.status(), 200);
    streamed.text().await.unwrap();
    // Scraped until the usage reached the control plane (the spool's delivery gauge).
    let start = Instant::now();
    let have = loop {
        let dp_scrape = reqwest::get(format!("{}/metrics", dp.url)).await.unwrap().text().await.unwrap();
        let cp_scrape = reqwest::get(format!("{}/metrics", s.cp.url)).await.unwrap().text().await.unwrap();
        let mut have = served(&dp_scrape);
        have.extend(served(&cp_scrape));
        if have.contains("ax_spool_last_commit_timestamp_seconds") {
            assert!(cp_scrape.contains("ax_node_config_lag_versions{node=\"dp-1\"} 0"), "{cp_scrape}");
            assert!(cp_scrape.contains("ax_node_connected{node=\"dp-1\"} 1"), "{cp_scrape}");
            assert!(
                cp_scrape.contains(
                    "ax_budget_warn_ratio{scope=\"tenant\",tenant=\"acme\",subject=\"\",window=\"day\",alias=\"\"} 0.8"
                ),
                "{cp_scrape}"
            );
            break have;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no spool delivery in /metrics:\n{dp_scrape}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let mut used = std::collections::BTreeSet::new();
    for (text, prefix) in [(&dashboard, "ax_"), (&alerts, "ax_"), (&dashboard, "gen_ai_client_")] {
        let mut rest = text.as_str();
        while let Some(at) = rest.find(prefix) {
            let name: String =
                rest[at..].chars().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_').collect();
            rest = &rest[at + name.len()..];
            used.insert(name);
        }
    }
    assert!(used.len() >= 18, "{used:?}");
    for name in &used {
        assert!(have.contains(name.as_str()), "{name} is in deploy/ but no ax process serves it; served: {have:?}");
    }
}

/// A weight change reaches a running data plane within 1 s and traffic follows; the node's applied
/// version is visible; an invalid pushed snapshot is refused, reported, and the old one keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weight_change_is_applied_within_a_second_and_traffic_follows() {
    let s = stack("push").await;
    let key = seed(&s.admin).await;
    let token = create_node(&s.db, "dp-1");
    let dp = Process::data_plane(&s.cp.url, &token, &s.dir.join("dp1"), "dp");
    let v = s.admin.ok("GET", "/api/v1/versions", None).await["versions"][0]["version"].as_u64().unwrap();
    wait_applied(&s.admin, "dp-1", v, Duration::from_secs(5)).await;
    let (a, _) = split(&dp.url, &key, 300).await;
    assert!((210..=270).contains(&a), "80/20 split: {a} of 300 to a");

    let v2 = set_weights(&s.admin, 20, 80).await;
    let took = wait_applied(&s.admin, "dp-1", v2, Duration::from_secs(1)).await;
    let (a, _) = split(&dp.url, &key, 300).await;
    assert!((30..=90).contains(&a), "20/80 split after the change: {a} of 300 to a");
    eprintln!("weight change applied in {took:?}");

    // The node's health summary (sent every 5 s) counts the requests it served, per upstream.
    let start = Instant::now();
    loop {
        let nodes = s.admin.ok("GET", "/api/v1/nodes", None).await;
        let health = &nodes["nodes"][0]["health"];
        let served: u64 = health["upstreams"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|u| u["models"].as_array().into_iter().flatten())
            .filter_map(|m| m["requests"].as_u64())
            .sum();
        if served >= 300 {
            assert_eq!(health["upstreams"][0]["breaker"]["state"], "closed", "{health}");
            assert!(health["upstreams"][0]["models"][0]["latency_p95_ms"].as_f64().is_some(), "{health}");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(12), "no health summary with the requests served: {nodes}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Forced through the test hook: a route naming an unknown upstream.
    let bad = json!({ "upstreams": [], "routes": [{ "alias": "x", "candidates": [{ "upstream": "ghost", "model": "m" }] }], "tenants": [] });
    s.admin.ok("POST", "/api/v1/test/push", Some(&bad)).await;
    let start = Instant::now();
    loop {
        let nodes = s.admin.ok("GET", "/api/v1/nodes", None).await;
        let err = nodes["nodes"][0]["last_error"].as_str().unwrap_or_default().to_owned();
        if err.contains("ghost") {
            assert_eq!(nodes["nodes"][0]["applied_version"].as_u64(), Some(v2), "still on the good version");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(3), "refusal not reported: {nodes}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(chat(&dp.url, &key).await.status(), 200, "the old snapshot keeps serving");
}

/// Control plane down: the data plane keeps serving, restarts from its last-known-good snapshot
/// (encrypted on disk), and catches up when the control plane returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_plane_serves_through_a_control_plane_outage() {
    let mut s = stack("lkg").await;
    let key = seed(&s.admin).await;
    let token = create_node(&s.db, "dp-1");
    let state = s.dir.join("dp1");
    let mut dp = Process::data_plane(&s.cp.url, &token, &state, "dp");
    let v = s.admin.ok("GET", "/api/v1/versions", None).await["versions"][0]["version"].as_u64().unwrap();
    wait_applied(&s.admin, "dp-1", v, Duration::from_secs(5)).await;
    let lkg = std::fs::read(state.join("last-known-good.bin")).expect("last-known-good stored");
    assert!(!lkg.windows(key.len()).any(|w| w == key.as_bytes()));
    assert!(!String::from_utf8_lossy(&lkg).contains("chat"), "the stored snapshot is encrypted");

    let cp_url = s.cp.url.clone();
    s.cp.kill();
    assert_eq!(chat(&dp.url, &key).await.status(), 200, "serving with the control plane down");
    dp.kill();
    let dp = Process::data_plane(&cp_url, &token, &state, "dp");
    assert_eq!(chat(&dp.url, &key).await.status(), 200, "restarted from last-known-good");
    // A node with neither its control plane nor a stored version is not ready (503).
    let blank = Process::data_plane(&cp_url, &token, &s.dir.join("blank"), "blank");
    let r = reqwest::get(format!("{}/readyz", blank.url)).await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.json::<Value>().await.unwrap()["status"], "no_configuration");
    assert_eq!(reqwest::get(format!("{}/readyz", dp.url)).await.unwrap().status(), 200);
    drop(blank);

    // The control plane returns on the same address; the node reconnects and catches up.
    let port = cp_url.rsplit(':').next().unwrap().to_owned();
    let mut cmd_cp = None;
    for _ in 0..50 {
        let c = std::process::Command::new(ax_tests::built("ax-controlplane"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .env("DATABASE_URL", &s.db.url)
            .env("AX_MASTER_KEY", ax_tests::cp::MASTER_KEY)
            .env("AX_COOKIE_SECURE", "0")
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        cmd_cp = Some(c);
        tokio::time::sleep(Duration::from_millis(300)).await;
        if reqwest::get(format!("{cp_url}/healthz")).await.is_ok() {
            break;
        }
    }
    let mut cp2 = cmd_cp.expect("control plane restarted");
    let admin = Session::login(&cp_url, "root", ADMIN_PASSWORD).await.unwrap_or_else(|_| panic!("login"));
    let v2 = set_weights(&admin, 0, 1).await;
    wait_applied(&admin, "dp-1", v2, Duration::from_secs(15)).await;
    let (a, _) = split(&dp.url, &key, 20).await;
    assert_eq!(a, 0, "the caught-up version routes everything to b");
    let _ = cp2.kill();
    let _ = cp2.wait();
}

/// Every change is a version, built from the previous one plus the changed route or tenant (the
/// control plane checks each against a full read of the tables: `AX_VERIFY_DOCUMENTS`), and any
/// version can be restored: the restored document is byte for byte the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_follow_every_change_and_roll_back() {
    let s = stack("versions").await;
    let key = seed(&s.admin).await;
    let token = create_node(&s.db, "dp-1");
    let dp = Process::data_plane(&s.cp.url, &token, &s.dir.join("dp1"), "dp");
    let route = chat_route(1, 1);
    // Names whose order differs between byte order and a locale's collation.
    for alias in ["beta_1", "Zeta", "beta-1", "alpha.2", "alpha", "ALPHA"] {
        s.admin.ok("PUT", &format!("/api/v1/routes/{alias}"), Some(&route)).await;
    }
    let versions = s.admin.ok("GET", "/api/v1/versions", None).await;
    let (saved, saved_hash) =
        (versions["versions"][0]["version"].as_u64().unwrap(), versions["versions"][0]["hash"].clone());

    s.admin.ok("DELETE", "/api/v1/routes/beta-1", None).await;
    s.admin.ok("PUT", "/api/v1/routes/Zeta", Some(&chat_route(0, 5))).await;
    s.admin.ok("PUT", "/api/v1/routes/gamma", Some(&route)).await;
    s.admin.ok("PUT", "/api/v1/tenants/zed", Some(&json!({ "allowed_aliases": ["chat"] }))).await;
    let routes = s.admin.ok("GET", "/api/v1/routes", None).await;
    let names: Vec<&str> = routes["routes"].as_array().unwrap().iter().filter_map(|r| r["alias"].as_str()).collect();
    assert!(names.contains(&"gamma") && !names.contains(&"beta-1"), "{names:?}");

    // A revoked key is refused by the data plane as soon as the version is applied.
    let k = s.admin.ok("POST", "/api/v1/tenants/acme/keys", Some(&json!({ "id": "acme-2" }))).await;
    let second = k["key"].as_str().unwrap().to_owned();
    let v = s.admin.ok("POST", "/api/v1/keys/acme-2/revoke", None).await["version"].as_u64().unwrap();
    wait_applied(&s.admin, "dp-1", v, Duration::from_secs(5)).await;
    let r = chat(&dp.url, &second).await;
    assert_eq!(r.status(), 401);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "api_key_revoked");
    assert_eq!(chat(&dp.url, &key).await.status(), 200, "the other key still works");

    // Roll back to the saved version: its routes (gamma goes, beta-1 returns, Zeta's weights too).
    // Tenants and keys made later stay as they are (the second key stays revoked).
    let r = s.admin.ok("POST", &format!("/api/v1/versions/{saved}/rollback"), None).await;
    let restored = r["version"].as_u64().unwrap();
    wait_applied(&s.admin, "dp-1", restored, Duration::from_secs(5)).await;
    let routes = s.admin.ok("GET", "/api/v1/routes", None).await;
    let mut names: Vec<&str> =
        routes["routes"].as_array().unwrap().iter().filter_map(|r| r["alias"].as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["ALPHA", "Zeta", "alpha", "alpha.2", "beta-1", "beta_1", "chat"]);
    assert_eq!(s.admin.ok("GET", "/api/v1/routes/Zeta", None).await["candidates"][0]["weight"], 1);
    assert_eq!(chat(&dp.url, &second).await.status(), 401);
    assert_eq!(chat(&dp.url, &key).await.status(), 200);

    // Change routes again and roll back to the restored version: byte for byte the same document.
    s.admin.ok("PUT", "/api/v1/routes/alpha", Some(&chat_route(3, 1))).await;
    s.admin.ok("DELETE", "/api/v1/routes/ALPHA", None).await;
    let again = s.admin.ok("POST", &format!("/api/v1/versions/{restored}/rollback"), None).await;
    let list = s.admin.ok("GET", "/api/v1/versions", None).await;
    let hash_of =
        |v: u64| list["versions"].as_array().unwrap().iter().find(|x| x["version"] == v).unwrap()["hash"].clone();
    assert_eq!(hash_of(again["version"].as_u64().unwrap()), hash_of(restored));
    assert_ne!(hash_of(restored), saved_hash, "the saved version had no tenant zed and no second key");

    // A rollback that would leave a reference dangling is refused with the field, and changes nothing.
    s.admin.ok("PUT", "/api/v1/routes/omega", Some(&route)).await;
    s.admin.ok("PUT", "/api/v1/tenants/zed", Some(&json!({ "allowed_aliases": ["omega"] }))).await;
    let r = s.admin.send("POST", &format!("/api/v1/versions/{saved}/rollback"), None).await;
    assert_eq!(r.status(), 422);
    let body: Value = r.json().await.unwrap();
    assert!(body["error"]["fields"][0]["path"].as_str().unwrap().contains("allowed_aliases"), "{body}");
    assert!(s.admin.ok("GET", "/api/v1/routes/omega", None).await["alias"] == "omega");
}

/// A PUT equal to what is stored (route, tenant, upstream, an upstream with its same key) answers
/// 200 with the current version and makes no version and no audit entry; a new key or weight does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_that_changes_nothing_makes_no_version() {
    let s = stack("noop").await;
    seed(&s.admin).await;
    let keyed = |key: &str| {
        json!({ "provider": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": key,
                "models": [{ "name": "m", "context_window": 32000, "capabilities": ["chat"] }] })
    };
    s.admin.ok("PUT", "/api/v1/upstreams/o", Some(&keyed("sk-one"))).await;
    let state = || async {
        let versions = s.admin.ok("GET", "/api/v1/versions", None).await;
        let audit = s.admin.ok("GET", "/api/v1/audit?limit=1000", None).await;
        (versions["versions"].as_array().unwrap().len(), audit["entries"].as_array().unwrap().len())
    };
    let newest = s.admin.ok("GET", "/api/v1/versions", None).await["versions"][0]["version"].as_u64().unwrap();
    let before = state().await;

    assert_eq!(set_weights(&s.admin, 80, 20).await, newest);
    let t = s.admin.ok("PUT", "/api/v1/tenants/acme", Some(&json!({ "allowed_aliases": ["*"] }))).await;
    assert_eq!((t["version"].as_u64(), t["tenant"]["id"].as_str()), (Some(newest), Some("acme")), "{t}");
    let u = s.admin.ok("PUT", "/api/v1/upstreams/a", Some(&mock_upstream(0))).await;
    assert_eq!((u["version"].as_u64(), u["upstream"]["name"].as_str()), (Some(newest), Some("a")), "{u}");
    let o = s.admin.ok("PUT", "/api/v1/upstreams/o", Some(&keyed("sk-one"))).await;
    assert_eq!(o["version"].as_u64(), Some(newest), "the same key again is no change");
    assert_eq!(state().await, before, "no version and no audit entry for PUTs that change nothing");

    // A new key, or a new weight, is a change.
    let o = s.admin.ok("PUT", "/api/v1/upstreams/o", Some(&keyed("sk-two"))).await;
    assert_eq!(o["version"].as_u64(), Some(newest + 1));
    assert_eq!(set_weights(&s.admin, 20, 80).await, newest + 2);
    assert_eq!(state().await, (before.0 + 2, before.1 + 2));
    let audit = s.admin.ok("GET", "/api/v1/audit?limit=2", None).await;
    let actions: Vec<&str> = audit["entries"].as_array().unwrap().iter().filter_map(|e| e["action"].as_str()).collect();
    assert_eq!(actions, ["route.update", "upstream.update+key"]);
}

/// Runs `deploy/seed.sh` (the demo seed of `deploy/local.sh`) against `cp`, state in `state`.
fn run_seed(cp: &str, state: &std::path::Path) {
    let script = format!("{}/../deploy/seed.sh", env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("bash").arg(script).arg(cp).arg(state).output().expect("bash");
    assert!(out.status.success(), "seed.sh: {}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "seed.sh printed {out:?}");
}

/// The demo seed shows what ax does (a tool call, an embedding through a data plane) and can be
/// rerun: it seeds only what is missing, so an operator's route edit survives and no version is
/// made; its key is kept and issued again only when it is no longer active.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_seed_reruns_without_undoing_an_operators_change() {
    let s = stack("seed").await;
    create_operator(&s.db, "admin", "admin");
    let state = s.dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("admin.password"), ADMIN_PASSWORD).unwrap();
    run_seed(&s.cp.url, &state);
    let key = std::fs::read_to_string(state.join("demo.key")).unwrap().trim().to_owned();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(state.join("demo.key")).unwrap().permissions().mode() & 0o777, 0o600);

    // Through a data plane: a tool call and an embedding, with the demo key.
    let token = create_node(&s.db, "dp-1");
    let dp = Process::data_plane(&s.cp.url, &token, &s.dir.join("dp1"), "dp");
    let newest = s.admin.ok("GET", "/api/v1/versions", None).await["versions"][0]["version"].as_u64().unwrap();
    wait_applied(&s.admin, "dp-1", newest, Duration::from_secs(5)).await;
    let call = |path: &'static str, body: Value| {
        let (url, key) = (format!("{}{path}", dp.url), key.clone());
        async move {
            reqwest::Client::new()
                .post(url)
                .bearer_auth(key)
                .json(&body)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    let tools = json!({ "model": "chat-default", "messages": [{ "role": "user", "content": "Weather in Paris?" }],
        "tools": [{ "type": "function", "function": { "name": "get_weather",
            "parameters": { "type": "object", "properties": { "city": { "type": "string" } } } } }] });
    let r = call("/v1/chat/completions", tools).await;
    let f = &r["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(
        (f["name"].as_str(), f["arguments"].as_str()),
        (Some("get_weather"), Some("{\"city\":\"Paris\"}")),
        "{r}"
    );
    let r = call("/v1/embeddings", json!({ "model": "embed-default", "input": "ax routes every request" })).await;
    assert!(r["data"][0]["embedding"].as_array().is_some_and(|v| !v.is_empty()), "{r}");

    // An operator moves the weights; the seed runs again and changes nothing.
    let edited = s
        .admin
        .ok(
            "PUT",
            "/api/v1/routes/chat-default",
            Some(&json!({ "strategy": "weighted", "candidates": [
        { "upstream": "mock-fast", "model": "mock-small", "weight": 20 },
        { "upstream": "mock-large", "model": "mock-large", "weight": 80 } ] })),
        )
        .await;
    let versions = s.admin.ok("GET", "/api/v1/versions", None).await["versions"].as_array().unwrap().len();
    run_seed(&s.cp.url, &state);
    assert_eq!(s.admin.ok("GET", "/api/v1/routes/chat-default", None).await, edited["route"]);
    assert_eq!(s.admin.ok("GET", "/api/v1/versions", None).await["versions"].as_array().unwrap().len(), versions);
    assert_eq!(std::fs::read_to_string(state.join("demo.key")).unwrap().trim(), key, "the key is kept");

    // The kept key revoked: the next run issues a new one.
    let id = std::fs::read_to_string(state.join("demo.key.id")).unwrap();
    s.admin.ok("POST", &format!("/api/v1/keys/{}/revoke", id.trim()), None).await;
    run_seed(&s.cp.url, &state);
    let fresh = std::fs::read_to_string(state.join("demo.key")).unwrap().trim().to_owned();
    assert_ne!(fresh, key);
    let keys = s.admin.ok("GET", "/api/v1/tenants/demo/keys", None).await;
    let active: Vec<&str> = keys["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["status"] == "active")
        .filter_map(|k| k["id"].as_str())
        .collect();
    assert_eq!(active, [std::fs::read_to_string(state.join("demo.key.id")).unwrap().trim()]);
}

/// Operator accounts (admin only): one created with a generated one-time password may do nothing
/// but choose its own; its role changes at once; disabled, its session ends at once and it cannot
/// log in; a reset password ends its sessions; the last enabled admin can be neither demoted nor
/// disabled; every action is audited, with no password in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admins_manage_operator_accounts() {
    let s = stack("operators").await;
    let code = |v: &Value| v["error"]["code"].as_str().unwrap_or_default().to_owned();
    let r = s.admin.send("POST", "/api/v1/operators", Some(&json!({ "username": "olga", "role": "operator" }))).await;
    assert_eq!(r.status(), 201);
    let created: Value = r.json().await.unwrap();
    let otp = created["one_time_password"].as_str().unwrap().to_owned();
    assert!(otp.len() >= 16, "{created}");
    assert_eq!(
        (created["operator"]["role"].as_str(), created["operator"]["must_change_password"].as_bool()),
        (Some("operator"), Some(true))
    );
    let r = s.admin.send("POST", "/api/v1/operators", Some(&json!({ "username": "olga", "role": "finance" }))).await;
    assert_eq!(r.status(), 409);
    let r =
        s.admin.send("POST", "/api/v1/operators", Some(&json!({ "username": "bad name", "role": "finance" }))).await;
    assert_eq!(r.status(), 422);

    // The one-time password: the session says so, and nothing else answers until it is replaced.
    let olga = Session::login(&s.cp.url, "olga", &otp).await.unwrap_or_else(|_| panic!("olga logs in"));
    assert_eq!(olga.ok("GET", "/api/v1/session", None).await["must_change_password"], true);
    let r = olga.send("GET", "/api/v1/routes", None).await;
    assert_eq!((r.status().as_u16(), code(&r.json().await.unwrap())), (403, "password_change_required".to_owned()));
    let own = "olga's own long password";
    let r = olga
        .send(
            "POST",
            "/api/v1/session/password",
            Some(&json!({ "current_password": "wrong one", "new_password": own })),
        )
        .await;
    assert_eq!(r.status(), 422);
    let r = olga
        .send("POST", "/api/v1/session/password", Some(&json!({ "current_password": otp, "new_password": "short" })))
        .await;
    assert_eq!(r.status(), 422);
    let r = olga
        .send("POST", "/api/v1/session/password", Some(&json!({ "current_password": otp, "new_password": own })))
        .await;
    assert_eq!(r.status(), 204);
    assert_eq!(olga.send("GET", "/api/v1/routes", None).await.status(), 200);
    // An operator may not manage operators.
    assert_eq!(olga.send("GET", "/api/v1/operators", None).await.status(), 403);

    // Its role changes at once; disabled, its session ends and it cannot log in again.
    let v = s.admin.ok("PUT", "/api/v1/operators/olga", Some(&json!({ "role": "finance" }))).await;
    assert_eq!(v["role"], "finance");
    assert_eq!(olga.send("GET", "/api/v1/routes", None).await.status(), 403);
    assert_eq!(olga.send("GET", "/api/v1/reports/cost", None).await.status(), 200);
    let v = s.admin.ok("PUT", "/api/v1/operators/olga", Some(&json!({ "disabled": true }))).await;
    assert_eq!((v["disabled"].as_bool(), v["sessions"].as_i64()), (Some(true), Some(0)));
    assert_eq!(olga.send("GET", "/api/v1/session", None).await.status(), 401);
    let r = Session::login(&s.cp.url, "olga", own).await.err().expect("a disabled operator cannot log in");
    assert_eq!((r.status().as_u16(), code(&r.json().await.unwrap())), (403, "operator_disabled".to_owned()));

    // Enabled again and reset: the new one-time password works, the old password does not.
    s.admin.ok("PUT", "/api/v1/operators/olga", Some(&json!({ "disabled": false }))).await;
    let olga = Session::login(&s.cp.url, "olga", own).await.unwrap_or_else(|_| panic!("enabled again"));
    let reset = s.admin.ok("POST", "/api/v1/operators/olga/reset-password", None).await;
    assert_eq!(olga.send("GET", "/api/v1/session", None).await.status(), 401, "a reset ends its sessions");
    assert!(Session::login(&s.cp.url, "olga", own).await.is_err());
    let again = Session::login(&s.cp.url, "olga", reset["one_time_password"].as_str().unwrap()).await;
    assert!(again.is_ok_and(|_| true));
    let r = s.admin.send("POST", "/api/v1/operators/nobody/reset-password", None).await;
    assert_eq!(r.status(), 404);

    // The last enabled admin stays one; with a second admin, the first may step down.
    for change in [json!({ "role": "operator" }), json!({ "disabled": true })] {
        let r = s.admin.send("PUT", "/api/v1/operators/root", Some(&change)).await;
        assert_eq!((r.status().as_u16(), code(&r.json().await.unwrap())), (409, "last_admin".to_owned()), "{change}");
    }
    s.admin.ok("PUT", "/api/v1/operators/olga", Some(&json!({ "role": "admin" }))).await;
    let v = s.admin.ok("PUT", "/api/v1/operators/root", Some(&json!({ "role": "operator" }))).await;
    assert_eq!(v["role"], "operator");
    assert_eq!(s.admin.send("GET", "/api/v1/operators", None).await.status(), 403, "root is an operator now");

    // Listed by an admin; audited, without a password anywhere.
    let olga_admin = Session::login(&s.cp.url, "olga", reset["one_time_password"].as_str().unwrap())
        .await
        .unwrap_or_else(|_| panic!("login"));
    olga_admin
        .ok(
            "POST",
            "/api/v1/session/password",
            Some(&json!({ "current_password": reset["one_time_password"], "new_password": own })),
        )
        .await;
    let list = olga_admin.ok("GET", "/api/v1/operators", None).await;
    let names: Vec<(&str, &str)> = list["operators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["username"].as_str().unwrap(), o["role"].as_str().unwrap()))
        .collect();
    assert_eq!(names, [("olga", "admin"), ("root", "operator")]);
    let audit = olga_admin.ok("GET", "/api/v1/audit?limit=1000", None).await;
    let actions: Vec<&str> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .filter(|a| a.starts_with("operator."))
        .collect();
    for want in [
        "operator.create",
        "operator.password",
        "operator.role",
        "operator.disable",
        "operator.enable",
        "operator.reset_password",
    ] {
        assert!(actions.contains(&want), "{want} not in {actions:?}");
    }
    let text = audit.to_string();
    assert!(!text.contains(&otp) && !text.contains(own) && !text.contains("argon2"), "a password in the audit log");
    assert!(!list.to_string().contains("argon2"));
}

/// A change made through one control-plane replica reaches a data plane connected to the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_control_plane_replicas_stay_in_step() {
    let s = stack("replicas").await;
    let key = seed(&s.admin).await;
    let other = Process::control_plane(&s.db, &s.dir, "cp2");
    let token = create_node(&s.db, "dp-1");
    let dp = Process::data_plane(&other.url, &token, &s.dir.join("dp1"), "dp");
    let v = set_weights(&s.admin, 1, 0).await;
    let took = wait_applied(&s.admin, "dp-1", v, Duration::from_secs(1)).await;
    eprintln!("applied through the other replica in {took:?}");
    let (a, _) = split(&dp.url, &key, 20).await;
    assert_eq!(a, 20);
}

/// 10,000 requests through a data plane → exactly 10,000 usage rows; with a kill -9 in the middle
/// no answered request is lost and none is counted twice; report totals equal the rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_reaches_postgres_exactly_once_through_a_kill_9() {
    let s = stack("usage").await;
    let key = seed(&s.admin).await;
    let token = create_node(&s.db, "dp-1");
    let state = s.dir.join("dp1");
    let mut dp = Process::data_plane(&s.cp.url, &token, &state, "dp");
    let v = s.admin.ok("GET", "/api/v1/versions", None).await["versions"][0]["version"].as_u64().unwrap();
    wait_applied(&s.admin, "dp-1", v, Duration::from_secs(5)).await;

    const N: usize = 10_000;
    let answered = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let url = std::sync::Arc::new(tokio::sync::RwLock::new(dp.url.clone()));
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..8 {
        let (answered, url, sent, key) = (answered.clone(), url.clone(), sent.clone(), key.clone());
        workers.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            while sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < N {
                loop {
                    let u = url.read().await.clone();
                    let r = client
                        .post(format!("{u}/v1/chat/completions"))
                        .bearer_auth(&key)
                        .json(&json!({ "model": "chat", "messages": [{ "role": "user", "content": "hi" }] }))
                        .send()
                        .await;
                    if let Ok(r) = r {
                        if r.status() == 200 {
                            let id = r.headers()["x-request-id"].to_str().unwrap().to_owned();
                            if r.bytes().await.is_ok() {
                                answered.lock().unwrap().push(id);
                                break;
                            }
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }));
    }
    // kill -9 in the middle, then restart on the same state directory (and spool).
    while answered.lock().unwrap().len() < N / 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    dp.kill();
    let dp2 = Process::data_plane(&s.cp.url, &token, &state, "dp");
    *url.write().await = dp2.url.clone();
    for w in workers {
        w.await.unwrap();
    }
    let answered = answered.lock().unwrap().clone();
    assert_eq!(answered.len(), N);

    let start = Instant::now();
    loop {
        let rows: usize = s.db.query("SELECT count(*) FROM usage_events WHERE status = 200").parse().unwrap();
        if rows >= N {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "only {rows} usage rows after 20 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ids: std::collections::HashSet<String> =
        s.db.query("SELECT request_id FROM usage_events").lines().map(str::to_owned).collect();
    let rows: usize = s.db.query("SELECT count(*) FROM usage_events").parse().unwrap();
    assert_eq!(ids.len(), rows, "a request id is in two rows");
    let missing = answered.iter().filter(|id| !ids.contains(*id)).count();
    assert_eq!(missing, 0, "answered requests without a usage row");
    let served: usize = s.db.query("SELECT count(*) FROM usage_events WHERE status = 200").parse().unwrap();
    // Requests cut by the kill may have rows of their own (status 200 with incomplete, or errors);
    // every answered one is there exactly once.
    assert!(served >= N, "{served}");

    let sum: i64 = s.db.query("SELECT coalesce(sum(cost_micro_usd), 0) FROM usage_events").parse().unwrap();
    let report = s.admin.ok("GET", "/api/v1/reports/cost?period=month", None).await;
    assert_eq!(report["total_micro_usd"].as_i64(), Some(sum), "report total equals the rows");
    let rolled: i64 = s.db.query("SELECT sum(requests) FROM usage_daily").parse().unwrap();
    assert_eq!(rolled as usize, rows, "rollups count every row once");
    let csv = s.admin.send("GET", "/api/v1/reports/cost?period=month&format=csv", None).await.text().await.unwrap();
    assert!(csv.starts_with("period,tenant,requests"), "{csv}");
    assert!(csv.contains("acme"));

    // Top spenders, budget burn-down and the preview's projection read the same rollups.
    let top = s.admin.ok("GET", "/api/v1/reports/top", None).await;
    assert_eq!(top["tenants"][0]["tenant"], "acme");
    assert_eq!(top["tenants"][0]["cost_micro_usd"].as_i64(), Some(sum));
    let ranged = s.admin.ok("GET", "/api/v1/reports/top?from=2000-01-01&to=2999-12-31&limit=5", None).await;
    assert_eq!(ranged["tenants"][0]["cost_micro_usd"].as_i64(), Some(sum));
    let before = s.admin.ok("GET", "/api/v1/reports/top?from=2000-01-01&to=2000-01-31", None).await;
    assert_eq!(before["tenants"].as_array().map(Vec::len), Some(0), "{before}");
    s.admin
        .ok("PUT", "/api/v1/tenants/acme", Some(&json!({ "budgets": [{ "window": "month", "usd": 1000.0 }] })))
        .await;
    let burn = s.admin.ok("GET", "/api/v1/reports/budgets", None).await;
    assert_eq!(burn["budgets"][0]["spent_micro_usd"].as_i64(), Some(sum), "{burn}");
    let p = s.admin.ok("POST", "/api/v1/routes/chat/preview", Some(&chat_route(50, 50))).await;
    let per_day = p["usage_last_7_days"]["requests_per_day"].as_f64().unwrap();
    assert!((per_day - rows as f64 / 7.0).abs() < 0.01, "{p}");
    // Every request is recent: the projection reads the window since yesterday 00:00 UTC, and says so.
    let hours = p["usage_window_hours"].as_f64().unwrap();
    assert!((24.0..=48.0).contains(&hours), "{p}");
    assert!(p["usage_window"].as_str().unwrap().contains("since yesterday 00:00 UTC"), "{p}");
    let recent = p["usage"]["requests_per_day"].as_f64().unwrap();
    assert!((recent - rows as f64 * 24.0 / hours).abs() < 0.5, "{p}");
    let projected: f64 = p["projected_daily_cost_usd_after"].as_str().unwrap().parse().unwrap();
    // Same prices on both upstreams: the average request's cost at the recent rate.
    let expected = sum as f64 / 1e6 * 24.0 / hours;
    assert!((projected - expected).abs() <= expected * 0.01 + 0.0001, "projected {projected} vs {expected}");
}

/// An upstream key set through the admin API reaches the provider (and only the provider): it is
/// in the data plane's upstream request, and a replaced key takes over within a push.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_keys_travel_to_the_data_plane_and_rotate() {
    use ax_tests::{wire, FakeUpstream, Reply};
    let s = stack("keys").await;
    let up = FakeUpstream::fixed(Reply::json(wire::openai_response(Some("ok"), &[], "stop", (1, 1, 0)))).await;
    let spec = |key: &str| {
        json!({ "provider": "openai", "base_url": up.url(), "api_key": key,
                "models": [{ "name": "gpt", "context_window": 32000, "capabilities": ["chat"] }] })
    };
    s.admin.ok("PUT", "/api/v1/upstreams/openai", Some(&spec("sk-first-key-1111"))).await;
    s.admin
        .ok("PUT", "/api/v1/routes/chat", Some(&json!({ "candidates": [{ "upstream": "openai", "model": "gpt" }] })))
        .await;
    s.admin.ok("PUT", "/api/v1/tenants/acme", Some(&json!({}))).await;
    let key =
        s.admin.ok("POST", "/api/v1/tenants/acme/keys", Some(&json!({}))).await["key"].as_str().unwrap().to_owned();
    let token = create_node(&s.db, "dp-1");
    let dp = Process::data_plane(&s.cp.url, &token, &s.dir.join("dp1"), "dp");
    let v = s.admin.ok("GET", "/api/v1/versions", None).await["versions"][0]["version"].as_u64().unwrap();
    wait_applied(&s.admin, "dp-1", v, Duration::from_secs(5)).await;
    assert_eq!(chat(&dp.url, &key).await.status(), 200);
    assert_eq!(up.last().header("authorization"), Some("Bearer sk-first-key-1111"));

    let r = s.admin.ok("PUT", "/api/v1/upstreams/openai", Some(&spec("sk-second-key-2222"))).await;
    wait_applied(&s.admin, "dp-1", r["version"].as_u64().unwrap(), Duration::from_secs(1)).await;
    assert_eq!(chat(&dp.url, &key).await.status(), 200);
    assert_eq!(up.last().header("authorization"), Some("Bearer sk-second-key-2222"));
    // Leaving api_key out keeps the stored one.
    let mut keep = spec("");
    keep.as_object_mut().unwrap().remove("api_key");
    keep["max_concurrency"] = json!(64);
    let r = s.admin.ok("PUT", "/api/v1/upstreams/openai", Some(&keep)).await;
    assert_eq!(r["upstream"]["has_key"], true);
    wait_applied(&s.admin, "dp-1", r["version"].as_u64().unwrap(), Duration::from_secs(1)).await;
    assert_eq!(chat(&dp.url, &key).await.status(), 200);
    assert_eq!(up.last().header("authorization"), Some("Bearer sk-second-key-2222"));
    for log in [dp.logs(), s.cp.logs()] {
        assert!(!log.contains("sk-first-key") && !log.contains("sk-second-key"), "an upstream key reached a log");
    }
    assert!(!s.db.dump().contains("sk-second-key"));
}

/// `--help` answers with the usage; a one-shot command prints its answer, not the database
/// driver's INFO lines.
#[test]
fn the_cli_helps_and_its_commands_print_only_their_answer() {
    let run = |bin: &str, args: &[&str]| {
        let out = std::process::Command::new(ax_tests::built(bin)).args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Both binaries: the whole help names every command and flag; `help <command>` and
    // `<command> --help` give that command's; all on stdout with exit 0. A wrong one is exit 2.
    let cp_flags = [
        "serve",
        "migrate",
        "admin create",
        "node create",
        "rotate-master-key",
        "--listen",
        "--addr-file",
        "--ui-dir",
        "--role",
        "DATABASE_URL",
        "AX_MASTER_KEY_PREVIOUS",
        "AX_LOG",
        "AX_OIDC_ISSUER",
        "AX_OIDC_ROLES",
        "AX_PASSWORD_LOGIN",
    ];
    let dp_flags = [
        "serve",
        "check",
        "keygen",
        "--config",
        "--control-plane",
        "--node-token",
        "--state-dir",
        "--listen",
        "--addr-file",
        "AX_LOG",
        "AX_THREADS",
    ];
    for (bin, flags) in [("ax-controlplane", &cp_flags[..]), ("ax-dataplane", &dp_flags[..])] {
        for args in [&["--help"][..], &["-h"], &["help"]] {
            let (code, text, err) = run(bin, args);
            assert_eq!((code, err.as_str()), (Some(0), ""), "{bin} {args:?}");
            for f in flags {
                assert!(text.contains(f), "{bin} {args:?} does not name {f}: {text}");
            }
        }
        let (code, text, _) = run(bin, &["help", "serve"]);
        assert_eq!(code, Some(0));
        assert!(text.contains("--listen") && !text.contains(" help ["), "{bin} help serve: {text}");
        let (code, again, _) = run(bin, &["serve", "--help"]);
        assert_eq!((code, again), (Some(0), text), "{bin} serve --help");
        let (code, out, err) = run(bin, &["help", "nonsense"]);
        assert_eq!((code, out.as_str()), (Some(2), ""), "{bin}");
        assert!(err.contains("nonsense"), "{err}");
    }
    let (code, text, _) = run("ax-controlplane", &["help", "admin"]);
    assert!(code == Some(0) && text.contains("--role admin|operator|finance"), "{text}");
    let (code, text, _) = run("ax-dataplane", &["keygen", "--help"]);
    assert!(code == Some(0) && text.contains("sha256"), "{text}");
    let db = ax_tests::cp::TestDb::create("cli");
    let out = std::process::Command::new(ax_tests::built("ax-controlplane"))
        .arg("migrate")
        .env("DATABASE_URL", &db.url)
        .env("AX_MASTER_KEY", ax_tests::cp::MASTER_KEY)
        .env_remove("AX_LOG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "migrations applied");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("\"INFO\""), "{stderr}");
}

/// Budgets at every level through the admin API: a group's pooled budget (`PUT /groups/{id}`,
/// joined by a tenant's `groups`), a key's own week budget and per-alias limit (on creation and
/// `PUT /keys/{id}`), refused with field paths when wrong, pushed to a real data plane that
/// enforces them, and each budget's burn in `GET /reports/budgets`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_at_every_level_are_edited_pushed_enforced_and_reported() {
    let s = stack("levels").await;
    seed(&s.admin).await;
    let k2 = json!({ "id": "acme-k2", "alias_limits": { "chat": { "rpm": 2 } },
                     "budgets": [{ "window": "week", "usd": 1.0 }] });
    let k2 = s.admin.ok("POST", "/api/v1/tenants/acme/keys", Some(&k2)).await["key"].as_str().unwrap().to_owned();
    s.admin.ok("PUT", "/api/v1/groups/org", Some(&json!({ "budgets": [{ "window": "day", "usd": 0.000001 }] }))).await;
    s.admin.ok("PUT", "/api/v1/tenants/beta", Some(&json!({ "groups": ["org"] }))).await;
    let kb =
        s.admin.ok("POST", "/api/v1/tenants/beta/keys", Some(&json!({}))).await["key"].as_str().unwrap().to_owned();

    // Wrong input: 422 naming the field relative to the body; a group in use is not deleted.
    let field = |body: &Value| body["error"]["fields"][0]["path"].as_str().unwrap_or_default().to_owned();
    let r = s
        .admin
        .send("PUT", "/api/v1/keys/acme-k2", Some(&json!({ "budgets": [{ "window": "week", "usd": 0 }] })))
        .await;
    assert_eq!(r.status(), 422);
    assert_eq!(field(&r.json().await.unwrap()), "budgets[0].usd");
    let r =
        s.admin.send("PUT", "/api/v1/keys/acme-k2", Some(&json!({ "alias_limits": { "nope": { "rpm": 1 } } }))).await;
    assert_eq!(r.status(), 422);
    assert_eq!(field(&r.json().await.unwrap()), "alias_limits.nope");
    let r = s.admin.send("PUT", "/api/v1/tenants/gamma", Some(&json!({ "groups": ["nope"] }))).await;
    assert_eq!(r.status(), 422);
    assert_eq!(field(&r.json().await.unwrap()), "groups[0]");
    let r = s.admin.send("DELETE", "/api/v1/groups/org", None).await;
    assert_eq!(r.status(), 409);
    assert!(r.text().await.unwrap().contains("beta"));
    assert_eq!(s.admin.send("PUT", "/api/v1/keys/missing", Some(&json!({}))).await.status(), 404);

    let token = create_node(&s.db, "dp-1");
    let dp = Process::data_plane(&s.cp.url, &token, &s.dir.join("dp1"), "dp");
    let v = s.admin.ok("GET", "/api/v1/versions", None).await["versions"][0]["version"].as_u64().unwrap();
    wait_applied(&s.admin, "dp-1", v, Duration::from_secs(5)).await;
    for _ in 0..2 {
        assert_eq!(chat(&dp.url, &k2).await.status(), 200);
    }
    let r = chat(&dp.url, &k2).await;
    assert_eq!(r.status(), 429);
    let body: Value = r.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("key's alias"), "{body}");
    let r = chat(&dp.url, &kb).await;
    assert_eq!(r.status(), 429);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["message"], "the group's day budget of $0.000001 is spent");

    // The burn of each level, from the usage the data plane sent.
    let start = Instant::now();
    while s.db.query("SELECT count(*) FROM usage_events WHERE key_id = 'acme-k2' AND status = 200") != "2" {
        assert!(start.elapsed() < Duration::from_secs(20), "usage of acme-k2 did not arrive");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let spent: i64 =
        s.db.query("SELECT sum(cost_micro_usd) FROM usage_events WHERE key_id = 'acme-k2'").parse().unwrap();
    assert!(spent > 0);
    let report = s.admin.ok("GET", "/api/v1/reports/budgets", None).await;
    let find = |scope: &str, subject: &str| {
        report["budgets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["scope"] == scope && b["subject"] == subject)
            .unwrap_or_else(|| panic!("no {scope} budget of {subject}: {report}"))
            .clone()
    };
    let key = find("key", "acme-k2");
    assert_eq!((key["tenant"].as_str(), key["window"].as_str()), (Some("acme"), Some("week")));
    assert_eq!(key["spent_micro_usd"].as_i64(), Some(spent), "{key}");
    let group = find("group", "org");
    assert_eq!(group["members"], json!(["beta"]));
    assert_eq!(group["spent_micro_usd"].as_i64(), Some(0), "beta was refused: it spent nothing");
    let groups = s.admin.ok("GET", "/api/v1/groups", None).await;
    assert_eq!(groups["groups"][0]["tenants"], json!(["beta"]));
    let keys = s.admin.ok("GET", "/api/v1/tenants/acme/keys", None).await;
    let listed = keys["keys"].as_array().unwrap().iter().find(|k| k["id"] == "acme-k2").unwrap().clone();
    assert_eq!(listed["alias_limits"]["chat"]["rpm"], 2);
    assert_eq!(listed["budgets"][0]["window"], "week");

    // A key's policy replaced: the version is pushed, and rolling back restores it.
    let saved = s.admin.ok("PUT", "/api/v1/keys/acme-k2", Some(&json!({ "limits": { "rpm": 100 } }))).await;
    let v2 = saved["version"].as_u64().unwrap();
    wait_applied(&s.admin, "dp-1", v2, Duration::from_secs(5)).await;
    let keys = s.admin.ok("GET", "/api/v1/tenants/acme/keys", None).await;
    let listed = keys["keys"].as_array().unwrap().iter().find(|k| k["id"] == "acme-k2").unwrap().clone();
    assert_eq!((listed["limits"]["rpm"].as_i64(), listed["budgets"].as_array().map(Vec::len)), (Some(100), Some(0)));
    s.admin.ok("POST", &format!("/api/v1/versions/{v}/rollback"), None).await;
    let keys = s.admin.ok("GET", "/api/v1/tenants/acme/keys", None).await;
    let listed = keys["keys"].as_array().unwrap().iter().find(|k| k["id"] == "acme-k2").unwrap().clone();
    assert_eq!(listed["budgets"][0]["window"], "week", "the rollback restored the key's budgets");
}

/// While Redis cannot be reached, a local limit is divided by the data planes the control plane
/// sees connected, not by a constant: two data planes (configured `replicas: 1`, Redis on a closed
/// port) each admit 5 of a tenant's 10 requests per minute once the control plane has told them
/// there are two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_limits_divide_by_the_data_planes_the_control_plane_sees() {
    let s = stack("replicas").await;
    let key = seed(&s.admin).await;
    s.admin.ok("PUT", "/api/v1/tenants/acme", Some(&json!({ "limits": { "rpm": 10 } }))).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let base = s.dir.join("base.yaml");
    std::fs::write(&base, format!("server: {{ redis_url: \"redis://127.0.0.1:{closed}\", replicas: 1 }}\n")).unwrap();
    let v = s.admin.ok("GET", "/api/v1/versions", None).await["versions"][0]["version"].as_u64().unwrap();
    let mut planes = Vec::new();
    for n in ["dp-1", "dp-2"] {
        let token = create_node(&s.db, n);
        planes.push(Process::data_plane_with(&s.cp.url, &token, &s.dir.join(n), n, Some(&base)));
    }
    for n in ["dp-1", "dp-2"] {
        wait_applied(&s.admin, n, v, Duration::from_secs(5)).await;
    }
    // The count is sent on connecting and re-checked with every ping (10 s).
    let start = Instant::now();
    while !planes.iter().all(|p| p.logs().contains("\"replicas\":2")) {
        assert!(start.elapsed() < Duration::from_secs(25), "not told of two data planes:\n{}", planes[0].logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut ok = 0;
    for _ in 0..10 {
        match chat(&planes[0].url, &key).await.status().as_u16() {
            200 => ok += 1,
            429 => {}
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(ok, 5, "10 rpm ÷ 2 data planes");
}
