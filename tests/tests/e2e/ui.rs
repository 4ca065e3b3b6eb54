//! The admin UI in a real headless Chromium (Debian's `chromium` + `chromedriver`, driven with
//! fantoccini) against a real control plane (serving `ui/dist`, built by `ui/build.sh`), Postgres,
//! and a data plane with mock upstreams. Screenshots of each page go to `docs/screenshots/`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ax_tests::cp::{create_node, create_operator, wait_applied, Session, TestDb, ADMIN_PASSWORD};
use ax_tests::Process;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// chromedriver on a free port with its own headless Chromium; both end with the test.
struct Browser {
    driver: Child,
    client: Client,
    profile: PathBuf,
}

impl Browser {
    async fn start(tag: &str) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (apt-get install chromium chromium-driver; .ci/run installs it)");
        let profile = ax_tests::temp_dir(&format!("chromium-{tag}"));
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({ "binary": "/usr/bin/chromium", "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1280,900", format!("--user-data-dir={}", profile.display()) ] }),
        );
        let start = Instant::now();
        let client = loop {
            let r = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&format!("http://127.0.0.1:{port}"))
                .await;
            match r {
                Ok(c) => break c,
                Err(e) if start.elapsed() > Duration::from_secs(20) => panic!("cannot start chromium: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        };
        Self { driver, client, profile }
    }

    /// Waits (up to 10 s) for an element matching `css`.
    async fn find(&self, css: &str) -> fantoccini::elements::Element {
        let found = self.client.wait().at_most(Duration::from_secs(10)).for_element(Locator::Css(css)).await;
        match found {
            Ok(e) => e,
            Err(e) => {
                let url = self.client.current_url().await.map(|u| u.to_string()).unwrap_or_default();
                let shot = std::env::temp_dir().join("ax-ui-failure.png");
                if let Ok(png) = self.client.screenshot().await {
                    let _ = std::fs::write(&shot, png);
                }
                let body = self.client.find(Locator::Css("body")).await.ok();
                let text = match body {
                    Some(b) => b.text().await.unwrap_or_default(),
                    None => String::new(),
                };
                panic!("no element '{css}' on {url}: {e}; screenshot {}; the page shows:\n{text}", shot.display())
            }
        }
    }

    /// Waits (up to `secs`) until the page's text contains `text`; the page text then.
    async fn wait_text(&self, text: &str, secs: u64) -> String {
        let start = Instant::now();
        loop {
            let body = self.client.find(Locator::Css("body")).await.unwrap().text().await.unwrap_or_default();
            if body.contains(text) {
                return body;
            }
            assert!(start.elapsed() < Duration::from_secs(secs), "the page never showed '{text}'; it shows:\n{body}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        let dir = repo().join("docs/screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    async fn login(&self, base: &str, user: &str) {
        self.client.goto(base).await.unwrap();
        self.find("input[name=username]").await.send_keys(user).await.unwrap();
        self.find("input[name=password]").await.send_keys(ADMIN_PASSWORD).await.unwrap();
        self.find("button[type=submit]").await.click().await.unwrap();
        self.find("header.top").await;
    }

    /// Replaces an input's text as a user would (select all, type), firing input events.
    async fn type_into(&self, css: &str, text: &str) {
        let input = self.find(css).await;
        input.clear().await.unwrap();
        input.send_keys(text).await.unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        // Killing chromedriver orphans its Chromium, which kept running after the tests (idle, but
        // four browsers a run, 200 MiB each): end every process started with this test's profile.
        let _ = Command::new("pkill")
            .args(["-KILL", "-f"])
            .arg(format!("user-data-dir={}", self.profile.display()))
            .status();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

fn mock_upstream() -> Value {
    json!({ "provider": "mock", "mock": { "latency_ms": 0, "reply_tokens": 4 },
            "models": [{ "name": "m", "context_window": 32000, "capabilities": ["chat"],
                         "price_per_mtok": { "input": 1.0, "output": 2.0 } }] })
}

fn control_plane(db: &TestDb, dir: &Path) -> Process {
    control_plane_with(db, dir, &[])
}

fn control_plane_with(db: &TestDb, dir: &Path, env: &[(&str, &str)]) -> Process {
    let mut cmd = Command::new(ax_tests::built("ax-controlplane"));
    let ui = repo().join("ui/dist");
    assert!(ui.join("index.html").is_file(), "ui/dist is not built: run `bash ui/build.sh` (.ci/run does)");
    cmd.args(["serve", "--ui-dir"])
        .arg(&ui)
        .env("DATABASE_URL", &db.url)
        .env("AX_MASTER_KEY", ax_tests::cp::MASTER_KEY)
        .env("AX_COOKIE_SECURE", "0")
        .env("AX_VERIFY_DOCUMENTS", "1")
        .envs(env.iter().copied());
    Process::spawn(cmd, dir, "cp")
}

/// A fresh database and control plane, an admin logged in through the API, and two mock
/// upstreams `a` and `b` serving model `m`.
async fn admin_plane(tag: &str) -> (TestDb, PathBuf, Process, Session) {
    let db = TestDb::create(&format!("ui_{tag}"));
    create_operator(&db, "root", "admin");
    let dir = ax_tests::temp_dir(&format!("ui-{tag}"));
    let cp = control_plane(&db, &dir);
    let admin = Session::login(&cp.url, "root", ADMIN_PASSWORD).await.unwrap_or_else(|_| panic!("login"));
    admin.ok("PUT", "/api/v1/upstreams/a", Some(&mock_upstream())).await;
    admin.ok("PUT", "/api/v1/upstreams/b", Some(&mock_upstream())).await;
    (db, dir, cp, admin)
}

async fn split(dp: &str, key: &str, n: usize) -> usize {
    let client = reqwest::Client::new();
    let mut a = 0;
    for _ in 0..n {
        let r = client
            .post(format!("{dp}/v1/chat/completions"))
            .bearer_auth(key)
            .json(&json!({ "model": "chat", "messages": [{ "role": "user", "content": "hi" }] }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        if r.headers()["x-ax-upstream"] == "a" {
            a += 1;
        }
    }
    a
}

/// An operator logs in, moves the weights from 80/20 to 20/80, sees the new shares in the preview,
/// saves, and sees the data plane apply the version; requests then split about 20/80. Bad input
/// shows the server's field error and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_changes_weights_in_the_browser() {
    let (db, dir, cp, admin) = admin_plane("weights").await;
    let route = json!({ "candidates": [{ "upstream": "a", "model": "m", "weight": 80 }, { "upstream": "b", "model": "m", "weight": 20 }] });
    admin.ok("PUT", "/api/v1/routes/chat", Some(&route)).await;
    admin.ok("PUT", "/api/v1/tenants/acme", Some(&json!({ "allowed_aliases": ["*"] }))).await;
    let key = admin.ok("POST", "/api/v1/tenants/acme/keys", Some(&json!({}))).await["key"].as_str().unwrap().to_owned();
    let token = create_node(&db, "dp-1");
    let dp = Process::data_plane(&cp.url, &token, &dir.join("dp"), "dp");

    let b = Browser::start("weights").await;
    b.login(&cp.url, "root").await;
    b.wait_text("Routes", 10).await;
    b.client.goto(&format!("{}/routes", cp.url)).await.unwrap();
    b.wait_text("80 %", 10).await;
    b.screenshot("routes").await;

    // Bad input: a negative weight → the server's field error next to it, nothing saved.
    let versions = admin.ok("GET", "/api/v1/versions", None).await["versions"].as_array().unwrap().len();
    b.type_into("input[aria-label='weight of a/m']", "-5").await;
    b.find(".actions button").await.click().await.unwrap();
    let err = b.find(".field-error").await.text().await.unwrap();
    assert_eq!(err, "must be 0 or more");
    b.screenshot("routes-field-error").await;
    // Every candidate disabled → the route-level error.
    b.type_into("input[aria-label='weight of a/m']", "80").await;
    for label in ["a/m enabled", "b/m enabled"] {
        b.find(&format!("input[aria-label='{label}']")).await.click().await.unwrap();
    }
    b.find(".actions button").await.click().await.unwrap();
    let err = b.find("div.error").await.text().await.unwrap();
    assert!(err.contains("at least one candidate must be enabled"), "route error: {err}");
    for label in ["a/m enabled", "b/m enabled"] {
        b.find(&format!("input[aria-label='{label}']")).await.click().await.unwrap();
    }
    let after = admin.ok("GET", "/api/v1/versions", None).await["versions"].as_array().unwrap().len();
    assert_eq!(after, versions, "bad input made no version");
    assert_eq!(admin.ok("GET", "/api/v1/routes/chat", None).await["candidates"][0]["weight"], 80);

    // 80/20 → 20/80: the preview shows the new shares, saving reports the data plane's apply.
    b.type_into("input[aria-label='weight of a/m']", "20").await;
    b.type_into("input[aria-label='weight of b/m']", "80").await;
    b.find(".actions button").await.click().await.unwrap();
    let preview = b.find(".preview").await.text().await.unwrap();
    assert!(preview.contains("80 → 20") && preview.contains("20 → 80"), "preview: {preview}");
    let after_col: Vec<String> = {
        let cells = b.client.find_all(Locator::Css(".preview td.after")).await.unwrap();
        let mut out = Vec::new();
        for c in cells {
            out.push(c.text().await.unwrap());
        }
        out
    };
    assert_eq!(after_col, ["20 %", "80 %"]);
    b.screenshot("routes-preview").await;
    b.find("button.primary").await.click().await.unwrap();
    let page = b.wait_text("applied by 1 of 1 data planes", 10).await;
    assert!(page.contains("pushed"), "{page}");
    b.screenshot("routes-saved").await;
    let a = split(&dp.url, &key, 300).await;
    assert!((30..=90).contains(&a), "20/80 after the save: {a} of 300 to a");

    // The overview sums the node's health summary; the audit log has the change.
    b.client.goto(&format!("{}/overview", cp.url)).await.unwrap();
    b.wait_text("Requests / min", 10).await;
    b.wait_text("closed", 15).await;
    // The 300 requests, counted from their usage records over the last 15 minutes: still there
    // long after a 10 s health window has forgotten them.
    let start = Instant::now();
    loop {
        let shown = b.find(".tile.requests strong").await.text().await.unwrap();
        if shown == "300" {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "the overview counts {shown} requests, not 300");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let recent = admin.ok("GET", "/api/v1/reports/recent?minutes=15", None).await;
    assert_eq!((recent["requests"].as_i64(), recent["errors"].as_i64()), (Some(300), Some(0)), "{recent}");
    let per_upstream: i64 =
        recent["upstreams"].as_array().unwrap().iter().map(|u| u["requests"].as_i64().unwrap()).sum();
    assert_eq!(per_upstream, 300, "{recent}");
    assert_eq!(admin.send("GET", "/api/v1/reports/recent?minutes=0", None).await.status(), 422);
    b.screenshot("overview").await;
    b.client.goto(&format!("{}/audit", cp.url)).await.unwrap();
    b.wait_text("route.update", 10).await;
    b.screenshot("audit").await;

    // The data planes page shows the node at the new version.
    b.client.goto(&format!("{}/nodes", cp.url)).await.unwrap();
    b.wait_text("dp-1", 10).await;
    // Its health summary (sent every 5 s) with the upstreams it served.
    b.wait_text("breaker closed", 15).await;
    b.screenshot("nodes").await;

    // A tenant and a key made in the browser: the key is shown once, works against the data plane,
    // and after a reload it is nowhere on the page.
    b.client.goto(&format!("{}/tenants", cp.url)).await.unwrap();
    b.wait_text("acme", 10).await;
    b.type_into("input[name=tenant-id]", "globex").await;
    b.find("form.inline-form button[type=submit]").await.click().await.unwrap();
    b.wait_text("Keys of globex", 10).await;
    b.find("section.keys button.primary").await.click().await.unwrap();
    let new_key = b.find(".new-key code").await.text().await.unwrap();
    assert!(new_key.starts_with("ax-") && new_key.len() > 30, "{new_key}");
    b.screenshot("tenants-new-key").await;
    let v = admin.ok("GET", "/api/v1/versions", None).await["versions"][0]["version"].as_u64().unwrap();
    wait_applied(&admin, "dp-1", v, Duration::from_secs(5)).await;
    let r = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", dp.url))
        .bearer_auth(&new_key)
        .json(&json!({ "model": "chat", "messages": [{ "role": "user", "content": "hi" }] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "the key made in the browser works");
    b.client.refresh().await.unwrap();
    b.wait_text("globex", 10).await;
    b.find("table.tenants tbody tr:last-child button.keys").await.click().await.unwrap();
    b.wait_text("Keys of globex", 10).await;
    // The list loads after its heading: wait for the key's prefix (it is listed), then check
    // the whole key is nowhere.
    let page = b.wait_text(&new_key[..8], 10).await;
    let html = b.client.source().await.unwrap();
    assert!(!page.contains(&new_key) && !html.contains(&new_key), "the key is visible after a reload");

    // Upstream keys are write-only: replace one (after a confirmation); it is never shown.
    b.client.goto(&format!("{}/upstreams", cp.url)).await.unwrap();
    b.wait_text("Input / Mtok", 10).await;
    b.find("section[aria-label='upstream a'] button.link").await.click().await.unwrap();
    let secret = "sk-ui-replaced-key-0123456789";
    b.type_into("section[aria-label='upstream a'] input[name=api-key]", secret).await;
    b.find("section[aria-label='upstream a'] button[type=submit]").await.click().await.unwrap();
    b.client.accept_alert().await.unwrap();
    b.wait_text("Key replaced", 10).await;
    assert!(!b.client.source().await.unwrap().contains(secret), "the key is on the page");
    let ups = admin.ok("GET", "/api/v1/upstreams", None).await;
    assert_eq!(ups["upstreams"][0]["has_key"], true, "{ups}");
    assert!(!ups.to_string().contains(secret));
    b.screenshot("upstreams").await;

    // A phone-sized window (390 px): the routes page still fits its width.
    b.client.set_window_size(390, 844).await.unwrap();
    b.client.goto(&format!("{}/routes", cp.url)).await.unwrap();
    b.wait_text("chat", 10).await;
    let overflow =
        b.client.execute("return document.documentElement.scrollWidth - window.innerWidth", vec![]).await.unwrap();
    assert!(overflow.as_i64().unwrap_or(999) <= 0, "the routes page scrolls sideways at 390 px by {overflow}");
    b.screenshot("routes-390").await;
    drop(dp);
}

/// Finance lands on the cost report: its total equals the seeded usage rows to the micro-dollar
/// (shown exactly, with requests and tokens totalled too), the CSV behind "Download CSV" (the same
/// query) has the same numbers; requests refused before they had a tenant are one labeled group
/// that does not drill down, in the table and the legend; a range with no usage says what to do;
/// no edit controls; an operator URL says "not allowed" (the server answers 403 too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finance_sees_cost_only() {
    let db = TestDb::create("ui_finance");
    create_operator(&db, "fin", "finance");
    let dir = ax_tests::temp_dir("ui-finance");
    let cp = control_plane(&db, &dir);
    // Seeded usage, shipped as a data plane ships it: two tenants, odd amounts.
    let token = create_node(&db, "dp-1");
    let seeded: Vec<(&str, u64)> =
        (0..57u64).map(|i| (if i % 3 == 0 { "globex" } else { "acme" }, 1_234 + i * 7_919)).collect();
    let expected = seed_usage(&cp.url, &token, &seeded).await;
    // Three requests with a wrong key: no tenant, no cost.
    let refused = (0..3).map(|i| {
        json!({ "request_id": format!("bad-key-{i}"), "started_at_ms": now_ms(),
        "tenant": "", "key_id": "", "alias": "", "upstream": "", "model": "", "status": 401,
        "error_code": "invalid_api_key", "cost_micro_usd": 0, "latency_ms": 1 })
        .to_string()
            + "\n"
    });
    let r = reqwest::Client::new()
        .post(format!("{}/api/v1/usage", cp.url))
        .bearer_auth(&token)
        .body(refused.collect::<String>())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let rows: u64 = db.query("SELECT count(*) FROM usage_events").parse().unwrap();
    let sum: u64 = db.query("SELECT sum(cost_micro_usd) FROM usage_events").parse().unwrap();
    assert_eq!((rows, sum), (60, expected));
    let tokens: u64 = db.query("SELECT sum(prompt_tokens + completion_tokens) FROM usage_events").parse().unwrap();
    let exact = |micro: u64| format!("${}.{:06}", micro / 1_000_000, micro % 1_000_000);

    // The UI's files are served compressed when the browser accepts gzip (the wasm is large).
    let wasm = reqwest::Client::new()
        .get(format!("{}/ui_bg.wasm", cp.url))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(wasm.headers().get("content-encoding").map(|v| v.to_str().unwrap()), Some("gzip"));
    assert_eq!(wasm.headers()["content-type"], "application/wasm");
    let gz = wasm.bytes().await.unwrap().len() as u64;
    let raw = std::fs::metadata(repo().join("ui/dist/ui_bg.wasm")).unwrap().len();
    assert!(gz * 2 < raw, "gzip: {gz} of {raw} bytes");
    eprintln!("ui_bg.wasm: {raw} bytes, {gz} gzipped");

    let b = Browser::start("finance").await;
    b.login(&cp.url, "fin").await;
    let page = b.wait_text("Total", 10).await;
    let total = b.find("th.total").await.text().await.unwrap();
    assert_eq!(total, exact(sum), "report total vs the usage rows; page:\n{page}");
    let mut foot = Vec::new();
    for th in b.client.find_all(Locator::Css("table.report tfoot th")).await.unwrap() {
        foot.push(th.text().await.unwrap());
    }
    assert_eq!(
        foot,
        ["Total", "60", "3", &thousands(tokens), &exact(sum)],
        "requests, errors, tokens and cost totalled"
    );
    assert!(page.contains("acme") && page.contains("globex"), "{page}");
    // The refused requests: one labeled group, no drill button; every legend entry has a label.
    assert_eq!(b.find("span.group").await.text().await.unwrap(), "(unauthenticated)");
    let drills = b.client.find_all(Locator::Css("button.drill")).await.unwrap();
    for d in &drills {
        assert!(!d.text().await.unwrap().trim().is_empty(), "a drill button without a name");
    }
    for s in b.client.find_all(Locator::Css(".legend .series")).await.unwrap() {
        assert!(!s.text().await.unwrap().trim().is_empty(), "a legend entry without a label");
    }
    // Each row's exact amount on hover.
    let cell = b.find("table.report tbody td.cost").await;
    let title = cell.attr("title").await.unwrap().unwrap_or_default();
    assert!(title.starts_with('$') && title.split('.').nth(1).is_some_and(|f| f.len() == 6), "exact on hover: {title}");
    let bars = b.client.find_all(Locator::Css("figure.chart svg rect")).await.unwrap().len();
    assert!(bars >= 2, "the chart has a bar segment per tenant and day: {bars}");
    let nav = b.find("nav").await.text().await.unwrap();
    assert!(nav.contains("Cost") && !nav.contains("Routes"), "finance navigation: {nav}");
    assert!(b.client.find_all(Locator::Css("input.weight, button.primary")).await.unwrap().is_empty());
    b.screenshot("cost").await;

    // The CSV link is the same query as the table: same rows, same total to the micro-dollar.
    let href = b.find("a[download]").await.attr("href").await.unwrap().unwrap();
    let fin = Session::login(&cp.url, "fin", ADMIN_PASSWORD).await.unwrap_or_else(|_| panic!("login"));
    let csv = fin.send("GET", &href, None).await.text().await.unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "cost_usd").unwrap();
    let csv_micro: u64 = csv
        .lines()
        .skip(1)
        .map(|l| {
            let v = l.split(',').nth(col).unwrap();
            let (whole, frac) = v.split_once('.').unwrap_or((v, "0"));
            whole.parse::<u64>().unwrap() * 1_000_000 + format!("{frac:0<6}").parse::<u64>().unwrap()
        })
        .sum();
    assert_eq!(csv_micro, sum, "CSV total vs the usage rows:\n{csv}");
    let table_rows = b.client.find_all(Locator::Css("table.report tbody tr")).await.unwrap().len();
    assert_eq!(table_rows, csv.lines().count() - 1, "the CSV has the rows on screen:\n{csv}");

    // A range with no usage says so, and how to see more.
    b.type_into("input[name=filter-tenant]", "nobody").await;
    b.find("input[name=filter-tenant]").await.send_keys(ENTER).await.unwrap();
    b.wait_text("No usage in this range yet", 10).await;
    b.wait_text("widen the dates or clear the filters", 10).await;

    b.client.goto(&format!("{}/routes", cp.url)).await.unwrap();
    b.wait_text("Not allowed", 10).await;
    assert!(b.client.find_all(Locator::Css("input.weight")).await.unwrap().is_empty());
    b.screenshot("not-allowed").await;
    assert_eq!(fin.send("GET", "/api/v1/routes", None).await.status(), 403);
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

/// `1234567` → `1,234,567`, as the UI writes counts.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Ships one usage record per `(tenant, micro-USD)` as a data plane ships them (a second apart,
/// the newest now); returns their total cost.
async fn seed_usage(cp: &str, node_token: &str, records: &[(&str, u64)]) -> u64 {
    let now_ms = now_ms();
    let mut body = String::new();
    for (i, (tenant, cost)) in records.iter().enumerate() {
        let rec = json!({ "request_id": format!("seed-{i}"), "started_at_ms": now_ms - i as u64 * 1000,
            "tenant": tenant, "key_id": "k", "alias": "chat", "upstream": "a", "model": "m", "status": 200,
            "prompt_tokens": 100 + i, "completion_tokens": 20, "cost_micro_usd": cost, "latency_ms": 5 });
        body.push_str(&format!("{rec}\n"));
    }
    let r = reqwest::Client::new()
        .post(format!("{cp}/api/v1/usage"))
        .bearer_auth(node_token)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    records.iter().map(|r| r.1).sum()
}

/// WebDriver key codes.
const TAB: &str = "\u{E004}";
const ENTER: &str = "\u{E007}";

impl Browser {
    /// What has the keyboard focus: its aria-label, name, or text.
    async fn focused(&self) -> String {
        let v = self
            .client
            .execute(
                "const e = document.activeElement; return e ? (e.getAttribute('aria-label') || e.getAttribute('name') || e.textContent.trim()) : ''",
                vec![],
            )
            .await
            .unwrap();
        v.as_str().unwrap_or("").to_owned()
    }

    /// Presses Tab until the focused element is `target` (at most 80 presses); the stops passed.
    async fn tab_to(&self, target: &str) -> Vec<String> {
        let mut seen = Vec::new();
        for _ in 0..80 {
            self.client.active_element().await.unwrap().send_keys(TAB).await.unwrap();
            let now = self.focused().await;
            if now == target {
                return seen;
            }
            seen.push(now);
        }
        panic!("Tab never reached '{target}'; it went through {seen:?}")
    }

    /// Horizontal overflow of the page in CSS pixels (> 0: the page scrolls sideways).
    async fn overflow(&self) -> i64 {
        let v = self.client.execute("return document.documentElement.scrollWidth - window.innerWidth", vec![]).await;
        v.unwrap().as_i64().unwrap_or(999)
    }
}

/// An operator sets a tenant's limits and budgets (with the current burn shown), creates and edits
/// upstreams with their models and prices, and sets a route's fallback aliases; bad input gets the
/// server's field error at the input. The login and a weight change work with the keyboard alone,
/// and every page fits a 390 px screen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_edits_tenants_upstreams_and_fallbacks() {
    let (db, _dir, cp, admin) = admin_plane("edit").await;
    for (alias, up) in [("chat", "a"), ("chat-mini", "b")] {
        let route = json!({ "candidates": [{ "upstream": up, "model": "m", "weight": 1 }] });
        admin.ok("PUT", &format!("/api/v1/routes/{alias}"), Some(&route)).await;
    }
    admin.ok("PUT", "/api/v1/tenants/acme", Some(&json!({ "allowed_aliases": ["*"] }))).await;
    let token = create_node(&db, "dp-1");
    // Today's spend of acme: $0.006 (for the burn against a $0.01 day budget: 60 %).
    assert_eq!(seed_usage(&cp.url, &token, &[("acme", 2_000), ("acme", 2_500), ("acme", 1_500)]).await, 6_000);

    let b = Browser::start("edit").await;
    // Keyboard only: type the user name, Tab to the password, Enter submits.
    b.client.goto(&cp.url).await.unwrap();
    b.find("input[name=username]").await.click().await.unwrap();
    b.client.active_element().await.unwrap().send_keys("root").await.unwrap();
    b.client.active_element().await.unwrap().send_keys(TAB).await.unwrap();
    assert_eq!(b.focused().await, "password");
    b.client.active_element().await.unwrap().send_keys(&format!("{ADMIN_PASSWORD}{ENTER}")).await.unwrap();
    b.find("header.top").await;

    // Tenants: limits and a budget; bad input first.
    b.client.goto(&format!("{}/tenants", cp.url)).await.unwrap();
    b.wait_text("acme", 10).await;
    b.find("table.tenants td.row-actions button").await.click().await.unwrap();
    b.find("form.tenant-editor").await;
    b.type_into("form.tenant-editor input[name='limits.rpm']", "600").await;
    b.find("form.tenant-editor fieldset:nth-of-type(2) > button").await.click().await.unwrap();
    b.type_into("input[name=budget-usd]", "lots").await;
    b.find("form.tenant-editor button[type=submit]").await.click().await.unwrap();
    let err = b.find(".budget-row .field-error").await.text().await.unwrap();
    assert!(err.contains("expected f64"), "budget usd error: {err}");
    b.type_into("input[name=budget-usd]", "0.01").await;
    let action = b.find("select[name=budget-action]").await;
    action.select_by_value("downgrade").await.unwrap();
    b.type_into("input[name=budget-downgrade]", "nope").await;
    b.find("form.tenant-editor button[type=submit]").await.click().await.unwrap();
    b.wait_text("unknown alias 'nope'", 10).await;
    let err = b.find(".budget-row .field-error").await.text().await.unwrap();
    assert!(err.contains("unknown alias 'nope'"), "downgrade alias error, at its input: {err}");
    let spec = admin.ok("GET", "/api/v1/tenants", None).await;
    assert!(spec["tenants"][0]["budgets"].is_null() || spec["tenants"][0]["budgets"] == json!([]), "{spec}");
    b.find("select[name=budget-action]").await.select_by_value("warn").await.unwrap();
    // Exact across replicas (a Redis call per request instead of leases): the limits, and the budget.
    b.find("input[name=limits-exact]").await.click().await.unwrap();
    b.find("input[name=budget-exact]").await.click().await.unwrap();
    b.find("form.tenant-editor button[type=submit]").await.click().await.unwrap();
    let page = b.wait_text("600 rpm (exact)", 10).await;
    assert!(page.contains("day: $0.006 of $0.01 · 60 % · warn"), "the burn: {page}");
    let meter = b.find("td.burns meter").await.attr("value").await.unwrap();
    assert_eq!(meter.as_deref(), Some("60"));
    let t = &admin.ok("GET", "/api/v1/tenants", None).await["tenants"][0];
    assert_eq!(t["limits"], json!({ "rpm": 600, "exact": true }));
    assert_eq!(
        t["budgets"],
        json!([{ "window": "day", "usd": 0.01, "action": "warn", "warn_at": 0.8, "exact": true }])
    );
    b.screenshot("tenants").await;

    // A group with a pooled week budget, joined by acme: the tenant row shows the group's burn.
    b.type_into("input[name=group-id]", "research").await;
    b.find("form[aria-label='new group'] button[type=submit]").await.click().await.unwrap();
    b.find("form.group-editor").await;
    b.find("form.group-editor fieldset > button").await.click().await.unwrap();
    b.find("form.group-editor select[name=budget-window]").await.select_by_value("week").await.unwrap();
    b.type_into("form.group-editor input[name=budget-usd]", "5").await;
    b.find("form.group-editor select[name=budget-redis-down]").await.select_by_value("fail_open").await.unwrap();
    b.find("form.group-editor button[type=submit]").await.click().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut groups = admin.ok("GET", "/api/v1/groups", None).await;
    while groups["groups"][0]["budgets"].as_array().is_none_or(Vec::is_empty) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        groups = admin.ok("GET", "/api/v1/groups", None).await;
    }
    assert_eq!(
        groups["groups"][0]["budgets"],
        json!([{ "window": "week", "usd": 5.0, "action": "reject", "warn_at": 0.8, "on_redis_down": "fail_open" }])
    );
    b.find("table.tenants td.row-actions button").await.click().await.unwrap();
    b.type_into("form.tenant-editor input[name=tenant-groups]", "research").await;
    // Its prompts and completions into its trace spans, in the same save.
    b.find("form.tenant-editor input[name=trace-content]").await.click().await.unwrap();
    b.screenshot("tenant-editor").await;
    b.find("form.tenant-editor button[type=submit]").await.click().await.unwrap();
    let page = b.wait_text("group research · week: $0.006 of $5.00", 10).await;
    assert!(page.contains("day: $0.006 of $0.01"), "the tenant's own budget is still there: {page}");
    assert_eq!(admin.ok("GET", "/api/v1/tenants", None).await["tenants"][0]["trace_content"], json!(true));
    assert_eq!(admin.ok("GET", "/api/v1/groups", None).await["groups"][0]["tenants"], json!(["acme"]));
    // The groups section follows: acme is a member, and the group's burn is there too.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let table = b.find("table.group-list").await.text().await.unwrap_or_default();
        if table.contains("acme") && table.contains("week: $0.006 of $5.00") {
            break;
        }
        assert!(Instant::now() < deadline, "the groups section is stale: {table}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.screenshot("tenants-groups").await;

    // A key's limit per alias and its own budget: a bad number is refused at its section.
    b.find("table.tenants td.row-actions button.keys").await.click().await.unwrap();
    b.wait_text("Keys of acme", 10).await;
    b.find("section.keys button.primary").await.click().await.unwrap();
    b.find(".new-key code").await;
    b.find("section.keys button.edit-key").await.click().await.unwrap();
    b.find("form.key-editor button.add-alias-limit").await.click().await.unwrap();
    b.type_into("form.key-editor input[name=alias-limit-alias]", "chat").await;
    b.type_into("form.key-editor input[name=alias-limit-rpm]", "lots").await;
    b.find("form.key-editor button[type=submit]").await.click().await.unwrap();
    let err = b.find("form.key-editor .field-error").await.text().await.unwrap();
    assert!(err.contains("expected u32"), "alias limit error: {err}");
    b.type_into("form.key-editor input[name=alias-limit-rpm]", "10").await;
    b.find("form.key-editor fieldset:nth-of-type(3) > button").await.click().await.unwrap();
    b.type_into("form.key-editor input[name=budget-usd]", "2").await;
    b.screenshot("tenants-key-edit").await;
    b.find("form.key-editor button[type=submit]").await.click().await.unwrap();
    b.wait_text("chat: 10 rpm", 10).await;
    let keys = admin.ok("GET", "/api/v1/tenants/acme/keys", None).await;
    let k = &keys["keys"][0];
    assert_eq!(k["alias_limits"], json!({ "chat": { "rpm": 10 } }));
    assert_eq!(k["budgets"], json!([{ "window": "day", "usd": 2.0, "action": "reject", "warn_at": 0.8 }]));

    // Upstreams: create one with a model and prices; a bad context window is refused at its input.
    b.client.goto(&format!("{}/upstreams", cp.url)).await.unwrap();
    b.wait_text("New upstream", 10).await;
    let buttons = b.client.find_all(Locator::Css("div.actions button")).await.unwrap();
    buttons[0].click().await.unwrap();
    b.type_into("form.upstream-editor input[name=name]", "c").await;
    b.find("form.upstream-editor select[name=provider]").await.select_by_value("mock").await.unwrap();
    b.find("form.upstream-editor fieldset > button").await.click().await.unwrap();
    b.type_into("form.upstream-editor input[name=model-name]", "m2").await;
    b.type_into("form.upstream-editor input[name=model-context_window]", "big").await;
    b.type_into("form.upstream-editor input[name='model-price_per_mtok.input']", "0.5").await;
    b.type_into("form.upstream-editor input[name='model-price_per_mtok.output']", "1.5").await;
    b.find("form.upstream-editor input[name=cap-tools]").await.click().await.unwrap();
    b.screenshot("upstreams-edit").await;
    b.find("form.upstream-editor button[type=submit]").await.click().await.unwrap();
    let err = b.find(".model-row .field-error").await.text().await.unwrap();
    assert!(err.contains("expected u32"), "context window error: {err}");
    b.type_into("form.upstream-editor input[name=model-context_window]", "8000").await;
    // Passthrough and the Responses API are for OpenAI upstreams: on a mock both are refused, each
    // at its input, in one answer.
    b.type_into("form.upstream-editor input[name=passthrough]", "seed, store").await;
    b.find("form.upstream-editor input[name=responses_api]").await.click().await.unwrap();
    b.find("form.upstream-editor button[type=submit]").await.click().await.unwrap();
    b.wait_text("only OpenAI-compatible upstreams", 10).await;
    let page = b.wait_text("only an `openai` upstream offers the Responses API", 10).await;
    assert_eq!(b.client.find_all(Locator::Css("form.upstream-editor .field-error")).await.unwrap().len(), 2, "{page}");
    // (A space: WebDriver's clear fires no input event; the form trims it away.)
    b.type_into("form.upstream-editor input[name=passthrough]", " ").await;
    b.find("form.upstream-editor input[name=responses_api]").await.click().await.unwrap();
    b.find("form.upstream-editor button[type=submit]").await.click().await.unwrap();
    b.find("section[aria-label='upstream c']").await;
    let c = admin.ok("GET", "/api/v1/upstreams", None).await["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "c")
        .cloned()
        .unwrap();
    assert_eq!(c["provider"], "mock");
    assert_eq!(
        c["models"],
        json!([{ "name": "m2", "context_window": 8000, "capabilities": ["chat", "tools", "streaming"],
                 "price_per_mtok": { "input": 0.5, "output": 1.5 } }])
    );
    // Edit upstream a: a timeout changes, its stored key stays.
    let mut keyed = mock_upstream();
    keyed["api_key"] = json!("sk-ui-stored-key-0123456789");
    admin.ok("PUT", "/api/v1/upstreams/a", Some(&keyed)).await;
    b.client.refresh().await.unwrap();
    b.wait_text("stored (write-only)", 10).await;
    b.find("section[aria-label='upstream a'] > button").await.click().await.unwrap();
    b.type_into("form.upstream-editor input[name='timeouts.first_byte_ms']", "1234").await;
    b.find("form.upstream-editor button[type=submit]").await.click().await.unwrap();
    b.wait_text("first byte 1,234 ms", 10).await;
    let a = admin.ok("GET", "/api/v1/upstreams", None).await["upstreams"][0].clone();
    assert_eq!((a["name"].as_str(), a["has_key"].as_bool()), (Some("a"), Some(true)), "the edit kept the key: {a}");
    assert_eq!(a["timeouts"]["first_byte_ms"], 1234);
    assert!(!b.client.source().await.unwrap().contains("sk-ui-stored-key"), "the key is on the page");

    // Routes: fallback aliases; an unknown one is the server's field error.
    b.client.goto(&format!("{}/routes", cp.url)).await.unwrap();
    b.wait_text("Fallback aliases", 10).await;
    b.type_into("input[name=fallbacks]", "nope").await;
    b.find(".actions button").await.click().await.unwrap();
    let err = b.find("label.field .field-error").await.text().await.unwrap();
    assert!(err.contains("nope"), "fallback error: {err}");
    b.type_into("input[name=fallbacks]", "chat-mini").await;

    // Keyboard only, from the fallbacks input: Tab to Preview, Enter; Tab to Save, Enter.
    b.find("input[name=fallbacks]").await.click().await.unwrap();
    b.tab_to("Preview").await;
    b.client.active_element().await.unwrap().send_keys(ENTER).await.unwrap();
    b.find(".preview").await;
    b.tab_to("Save").await;
    b.client.active_element().await.unwrap().send_keys(ENTER).await.unwrap();
    b.wait_text("pushed", 10).await;
    assert_eq!(admin.ok("GET", "/api/v1/routes/chat", None).await["fallbacks"], json!(["chat-mini"]));
    // Every control of the page is reachable by Tab, in reading order: the navigation first.
    b.client.goto(&format!("{}/routes", cp.url)).await.unwrap();
    b.wait_text("Fallback aliases", 10).await;
    let stops = b.tab_to("fallbacks").await;
    for want in ["Overview", "Routes", "Cost", "chat-mini", "weight of a/m", "weight slider of a/m", "a/m enabled"] {
        assert!(stops.iter().any(|s| s == want), "Tab skips '{want}': {stops:?}");
    }

    // Cost: the chart, and the drill-down tenant → alias → model → key.
    b.client.goto(&format!("{}/reports", cp.url)).await.unwrap();
    b.find("figure.chart svg rect").await;
    b.find("button.drill").await.click().await.unwrap();
    b.wait_text("tenant acme", 10).await;
    assert_eq!(b.find("table.report thead th:nth-child(2)").await.text().await.unwrap(), "alias");
    for (next, col) in [("chat", "model"), ("m", "key")] {
        b.find("button.drill").await.click().await.unwrap();
        b.wait_text(&format!(" {next}"), 10).await;
        let start = Instant::now();
        while b.find("table.report thead th:nth-child(2)").await.text().await.unwrap() != col {
            assert!(start.elapsed() < Duration::from_secs(10), "never grouped by {col}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert_eq!(b.find("th.total").await.text().await.unwrap(), "$0.006000");
    let href = b.find("a[download]").await.attr("href").await.unwrap().unwrap();
    assert!(href.contains("by=key") && href.contains("tenant=acme") && href.contains("model=m"), "{href}");
    b.screenshot("cost-drill-down").await;

    // 390 px: no page scrolls sideways.
    b.client.set_window_size(390, 844).await.unwrap();
    for (page, ready) in [
        ("overview", "Requests / min"),
        ("routes", "Fallback aliases"),
        ("upstreams", "Input / Mtok"),
        ("nodes", "dp-1"),
        ("versions", "Restore"),
        ("tenants", "acme"),
        ("audit", "route.update"),
        ("reports", "Total"),
    ] {
        b.client.goto(&format!("{}/{page}", cp.url)).await.unwrap();
        b.wait_text(ready, 10).await;
        let overflow = b.overflow().await;
        if overflow > 0 {
            b.screenshot(&format!("{page}-390-overflow")).await;
        }
        assert!(overflow <= 0, "the {page} page scrolls sideways at 390 px by {overflow} px");
        if page == "reports" {
            // The table scrolls; its cost column stays in view at the right edge.
            let v = b
                .client
                .execute(
                    "const c = document.querySelector('table.report tbody td.cost').getBoundingClientRect();
                     return [c.left, c.right, window.innerWidth];",
                    vec![],
                )
                .await
                .unwrap();
            let [left, right, width] = [0, 1, 2].map(|i| v[i].as_f64().unwrap());
            assert!(left >= 0.0 && right <= width + 0.5, "the cost column is out of view at 390 px: {v}");
            b.client.execute("document.querySelector('table.report').scrollIntoView()", vec![]).await.unwrap();
        }
        if matches!(page, "tenants" | "reports" | "upstreams") {
            b.screenshot(&format!("{page}-390")).await;
        }
    }
}

/// An admin manages operators in the browser: creates one (its one-time password shown once), the
/// new operator logs in with it and must choose its own password before it sees anything, then
/// the admin changes its role and disables it; the last admin cannot be demoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_manages_operators_in_the_browser() {
    let (_db, _dir, cp, admin) = admin_plane("operators").await;
    let b = Browser::start("operators").await;
    b.login(&cp.url, "root").await;
    b.find("nav a[href='/operators']").await.click().await.unwrap();
    b.find("table.operators").await;
    b.type_into("form[aria-label='new operator'] input[name=username]", "olga").await;
    b.find("form[aria-label='new operator'] button[type=submit]").await.click().await.unwrap();
    let otp = b.find("code.one-time-password").await.text().await.unwrap();
    assert!(otp.len() >= 16, "one-time password: {otp}");
    b.wait_text("one-time password pending", 10).await;
    b.screenshot("operators").await;

    // The new operator: a one-time password leads to the password form, and nothing else.
    let o = Browser::start("operators-olga").await;
    o.client.goto(&cp.url).await.unwrap();
    o.find("input[name=username]").await.send_keys("olga").await.unwrap();
    o.find("input[name=password]").await.send_keys(&otp).await.unwrap();
    o.find("button[type=submit]").await.click().await.unwrap();
    o.wait_text("Choose your password", 10).await;
    assert!(o.client.find_all(Locator::Css("header.top")).await.unwrap().is_empty());
    o.find("input[name=current_password]").await.send_keys(&otp).await.unwrap();
    o.find("input[name=new_password]").await.send_keys("olga chose this one").await.unwrap();
    o.screenshot("operators-choose-password").await;
    o.find("button[type=submit]").await.click().await.unwrap();
    o.find("header.top").await;
    let nav = o.find("nav").await.text().await.unwrap();
    assert!(nav.contains("Routes") && !nav.contains("Operators"), "an operator's navigation: {nav}");

    // The admin makes her finance, then disables her: her next call finds no session.
    b.client.refresh().await.unwrap();
    let role = b.find("tr[data-operator=olga] select").await;
    role.select_by_value("finance").await.unwrap();
    let start = Instant::now();
    loop {
        let list = admin.ok("GET", "/api/v1/operators", None).await;
        if list["operators"].as_array().unwrap().iter().any(|x| x["username"] == "olga" && x["role"] == "finance") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "the role never changed: {list}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.find("tr[data-operator=olga] button").await.click().await.unwrap();
    b.wait_text("disabled", 10).await;
    let olga = Session::login(&cp.url, "olga", "olga chose this one").await;
    assert_eq!(olga.err().map(|r| r.status().as_u16()), Some(403), "a disabled operator cannot log in");
    o.client.goto(&format!("{}/reports", cp.url)).await.unwrap();
    o.find("input[name=username]").await;

    // The last admin cannot be demoted: the server says why, on the page.
    b.find("tr[data-operator=root] select").await.select_by_value("operator").await.unwrap();
    b.wait_text("last enabled admin", 10).await;
    // The list is read again: root's role shows what the server kept.
    let start = Instant::now();
    while b.find("tr[data-operator=root] select").await.prop("value").await.unwrap().as_deref() != Some("admin") {
        assert!(start.elapsed() < Duration::from_secs(10), "root's role never showed admin again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.screenshot("operators-last-admin").await;
}

/// An admin walks every page through the navigation, leaving pages that refresh themselves
/// (Overview, Data planes) before their next tick: no panic and no console error, then or later.
/// After a logout on the routes page, a finance user who logs in lands on its own home page (the
/// cost report), not on the page the admin left open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_walks_without_an_error_and_the_next_user_lands_home() {
    let (db, _dir, cp, _admin) = admin_plane("walk").await;
    create_operator(&db, "fin", "finance");
    let b = Browser::start("walk").await;
    b.login(&cp.url, "root").await;
    // Every console error (a wasm panic is one: console_error_panic_hook) and uncaught error.
    b.client
        .execute(
            "window.__axErrors = [];
             const original = console.error.bind(console);
             console.error = (...a) => { window.__axErrors.push(a.map(String).join(' ')); original(...a); };
             window.addEventListener('error', e => window.__axErrors.push(String(e.message)));
             window.addEventListener('unhandledrejection', e => window.__axErrors.push(String(e.reason)));",
            vec![],
        )
        .await
        .unwrap();
    let pages = ["overview", "routes", "nodes", "upstreams", "versions", "tenants", "audit", "operators", "reports"];
    for round in 0..2 {
        for page in pages {
            b.find(&format!("nav a[href='/{page}']")).await.click().await.unwrap();
            b.find("main h1").await;
            // Long enough for a page's first fetch, shorter than its refresh.
            tokio::time::sleep(Duration::from_millis(if round == 0 { 1500 } else { 300 })).await;
        }
    }
    // The timers of the pages left behind fire now (Overview every 5 s, Data planes every 2 s).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let errors = b.client.execute("return window.__axErrors;", vec![]).await.unwrap();
    assert_eq!(errors, json!([]), "errors in the browser while walking every page");

    b.find("nav a[href='/routes']").await.click().await.unwrap();
    b.find("main h1").await;
    assert!(b.client.current_url().await.unwrap().path().ends_with("/routes"));
    b.find("header.top button.link").await.click().await.unwrap();
    b.find("input[name=username]").await.send_keys("fin").await.unwrap();
    b.find("input[name=password]").await.send_keys(ADMIN_PASSWORD).await.unwrap();
    b.find("button[type=submit]").await.click().await.unwrap();
    b.find("header.top").await;
    let start = Instant::now();
    while !b.client.current_url().await.unwrap().path().ends_with("/reports") {
        assert!(start.elapsed() < Duration::from_secs(10), "finance did not land on the cost report");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let page = b.find("main").await.text().await.unwrap();
    assert!(!page.contains("Not allowed"), "{page}");
}

/// A real OpenID Connect provider (panva's certified `oidc-provider`, tests/sso/provider.js) on
/// `port`, with one client `ax` whose redirect URL is `redirect`; `groups` gives each login its
/// `groups` claim. Its issuer is `http://localhost:<port>`: another site than the control plane
/// at 127.0.0.1, so the browser applies SameSite and keeps cookies apart as it would in
/// production. Stopped with the test.
struct OidcProvider {
    child: Child,
    issuer: String,
}

const SSO_SECRET: &str = "a client secret only the tests know";

impl OidcProvider {
    fn start(port: u16, redirect: &str, groups: &Value) -> Self {
        let dir = repo().join("tests/sso");
        assert!(
            dir.join("node_modules/oidc-provider").is_dir(),
            "tests/sso/node_modules is missing: npm ci --prefix tests/sso (.ci/run does)"
        );
        let child = Command::new("node")
            .arg("provider.js")
            .current_dir(&dir)
            .env("PORT", port.to_string())
            .env("REDIRECT_URI", redirect)
            .env("CLIENT_SECRET", SSO_SECRET)
            .env("GROUPS", groups.to_string())
            .env("ISSUER_HOST", "localhost")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("node");
        let issuer = format!("http://localhost:{port}");
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(start.elapsed() < Duration::from_secs(20), "the OpenID provider did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        Self { child, issuer }
    }
}

impl OidcProvider {
    /// Logs out of ax, deletes the provider's cookies (its sign-in session), and opens ax's login
    /// page at `base` again: the next sign-in is someone else's.
    async fn next_person(&self, b: &Browser, base: &str) {
        b.find("button.link").await.click().await.unwrap();
        b.find("a.sso").await;
        b.client.goto(&format!("{}/.well-known/openid-configuration", self.issuer)).await.unwrap();
        b.client.delete_all_cookies().await.unwrap();
        b.client.goto(base).await.unwrap();
    }
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Signs in at the provider's own pages (its development login takes any password), then
/// consents when it asks.
async fn provider_sign_in(b: &Browser, login: &str) {
    b.find("a.sso").await.click().await.unwrap();
    b.find("input[name=login]").await.send_keys(login).await.unwrap();
    b.find("input[name=password]").await.send_keys("any password").await.unwrap();
    b.find("button[type=submit]").await.click().await.unwrap();
    // The consent page ("Continue") once per account; then back to ax.
    let start = Instant::now();
    loop {
        let url = b.client.current_url().await.unwrap();
        let on_provider = url.path().starts_with("/interaction/");
        if !on_provider {
            break;
        }
        if let Ok(button) = b.client.find(Locator::Css("button[type=submit]")).await {
            let _ = button.click().await;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "stuck at the provider: {url}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Single sign-on in the browser against a real OpenID provider: an admin-group member opens a
/// deep link, signs in at the provider (code flow with PKCE) and lands on that page as an admin;
/// a finance-group member lands on the cost report as finance; someone with no mapped group is
/// sent back to the login page with the reason. The local admin still logs in with a password and
/// sees the SSO operators (which have no password to reset); their creation is audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_sign_in_with_single_sign_on() {
    let db = TestDb::create("ui_sso");
    create_operator(&db, "root", "admin");
    let dir = ax_tests::temp_dir("ui-sso");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let issuer = format!("http://localhost:{port}");
    let cp = control_plane_with(
        &db,
        &dir,
        &[
            ("AX_OIDC_ISSUER", &issuer),
            ("AX_OIDC_CLIENT_ID", "ax"),
            ("AX_OIDC_CLIENT_SECRET", SSO_SECRET),
            ("AX_OIDC_SCOPES", "openid profile email groups"),
            ("AX_OIDC_ROLES", "ax-admins=admin,ax-ops=operator,ax-finance=finance"),
            ("AX_OIDC_LABEL", "Sign in with Example SSO"),
        ],
    );
    let groups = json!({ "alice": ["staff", "ax-admins"], "bob": ["ax-finance"], "carol": ["staff"] });
    let provider = OidcProvider::start(port, &format!("{}/api/v1/sso/callback", cp.url), &groups);
    assert_eq!(provider.issuer, issuer);
    let options: Value = reqwest::get(format!("{}/api/v1/sso", cp.url)).await.unwrap().json().await.unwrap();
    assert_eq!(options, json!({ "password": true, "sso": "Sign in with Example SSO" }));

    let b = Browser::start("sso").await;
    b.client.goto(&format!("{}/routes", cp.url)).await.unwrap();
    b.wait_text("Sign in with Example SSO", 10).await;
    b.find("input[name=username]").await; // passwords stay on
    b.screenshot("login-sso").await;
    provider_sign_in(&b, "alice").await;
    b.find("header.top").await;
    b.wait_text("alice · admin", 10).await;
    assert_eq!(b.client.current_url().await.unwrap().path(), "/routes", "back to the deep link");
    b.find("nav a[href='/operators']").await.click().await.unwrap();
    b.wait_text("single sign-on", 10).await;
    b.screenshot("operators-sso").await;

    // The provider's session would sign the next person in as alice: log out, and forget it.
    provider.next_person(&b, &cp.url).await;
    provider_sign_in(&b, "bob").await;
    b.wait_text("bob · finance", 10).await;
    b.find("nav a[href='/reports']").await;
    b.wait_text("No usage in this range yet", 10).await;
    b.wait_text("bash deploy/local.sh", 10).await;
    b.screenshot("cost-empty").await;
    let nav = b.find("nav").await.text().await.unwrap();
    assert!(!nav.contains("Routes"), "finance sees no routing: {nav}");

    provider.next_person(&b, &cp.url).await;
    provider_sign_in(&b, "carol").await;
    b.wait_text("no group that gives a role", 10).await;
    assert!(b.client.current_url().await.unwrap().query().unwrap_or_default().contains("sso_error=sso_no_role"));
    assert!(b.client.find_all(Locator::Css("header.top")).await.unwrap().is_empty(), "carol is not signed in");
    b.screenshot("login-sso-refused").await;

    // A callback without this browser's sign-in in progress (a forged or replayed one) signs no one in.
    let forged = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = forged.get(format!("{}/api/v1/sso/callback?code=x&state=y", cp.url)).send().await.unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/?sso_error=sso_state_invalid");
    assert!(!r.headers().get_all("set-cookie").iter().any(|c| c.to_str().unwrap().starts_with("ax_session=")));

    // The local admin: a password still works; the SSO operators are listed and have no password.
    let admin = Session::login(&cp.url, "root", ADMIN_PASSWORD).await.unwrap_or_else(|_| panic!("login"));
    let list = admin.ok("GET", "/api/v1/operators", None).await;
    let ops = list["operators"].as_array().unwrap();
    let find = |n: &str| ops.iter().find(|o| o["username"] == n).cloned().unwrap_or_else(|| panic!("{n} in {list}"));
    assert_eq!((find("alice")["role"].clone(), find("alice")["sso"].clone()), (json!("admin"), json!(true)));
    assert_eq!((find("bob")["role"].clone(), find("bob")["sso"].clone()), (json!("finance"), json!(true)));
    assert_eq!(find("root")["sso"], json!(false));
    assert!(ops.iter().all(|o| o["username"] != "carol"), "carol got no account: {list}");
    let r = admin.send("POST", "/api/v1/operators/alice/reset-password", None).await;
    assert_eq!(r.status(), 409);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "sso_operator");
    let audit = admin.ok("GET", "/api/v1/audit?operator=sso", None).await.to_string();
    assert!(audit.contains("alice") && audit.contains("bob") && audit.contains("operator.create"), "{audit}");
    // An SSO operator has no password here: a password login as alice fails.
    assert!(Session::login(&cp.url, "alice", "any password").await.is_err());
    drop(provider);
}

/// The request explorer: a request that failed over (its first upstream refuses connections) is
/// found by its id in the browser, with both attempts: the failed one and the one that answered.
/// The overview's error figure links to the failed requests. The API narrows by each filter, pages
/// back with its cursor, and refuses bad filters with a field error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_finds_a_failed_over_request_by_its_id() {
    let (db, dir, cp, admin) = admin_plane("explorer").await;
    let down = json!({ "provider": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": "sk-down-0123456789",
                       "models": [{ "name": "m", "context_window": 32000, "capabilities": ["chat"] }] });
    admin.ok("PUT", "/api/v1/upstreams/down", Some(&down)).await;
    let route = json!({ "strategy": "priority", "candidates": [
        { "upstream": "down", "model": "m", "priority": 0 }, { "upstream": "a", "model": "m", "priority": 1 }] });
    admin.ok("PUT", "/api/v1/routes/chat", Some(&route)).await;
    admin.ok("PUT", "/api/v1/tenants/acme", Some(&json!({ "allowed_aliases": ["*"] }))).await;
    let key = admin.ok("POST", "/api/v1/tenants/acme/keys", Some(&json!({}))).await["key"].as_str().unwrap().to_owned();
    let token = create_node(&db, "dp-1");
    let dp = Process::data_plane(&cp.url, &token, &dir.join("dp"), "dp");
    let v = admin.ok("GET", "/api/v1/versions", None).await["versions"][0]["version"].as_u64().unwrap();
    wait_applied(&admin, "dp-1", v, Duration::from_secs(10)).await;

    let client = reqwest::Client::new();
    let call = |id: &'static str, model: &'static str| {
        client
            .post(format!("{}/v1/chat/completions", dp.url))
            .bearer_auth(&key)
            .header("x-request-id", id)
            .json(&json!({ "model": model, "messages": [{ "role": "user", "content": "hi" }] }))
            .send()
    };
    // Records keep their start to the millisecond: the calls are a few apart, so "newest first"
    // is the order they were sent in.
    let gap = || tokio::time::sleep(Duration::from_millis(5));
    let r = call("req-failed-over", "chat").await.unwrap();
    assert_eq!((r.status().as_u16(), r.headers()["x-ax-upstream"].to_str().unwrap()), (200, "a"));
    for id in ["req-plain-0", "req-plain-1", "req-plain-2"] {
        gap().await;
        assert_eq!(call(id, "chat").await.unwrap().status(), 200);
    }
    gap().await;
    let r = call("req-no-such-alias", "nope").await.unwrap();
    assert!(r.status().is_client_error(), "{}", r.status());

    // The records reach the control plane within the data plane's usage batch interval.
    let start = Instant::now();
    let all = loop {
        let l = admin.ok("GET", "/api/v1/requests?tenant=acme", None).await;
        if l["requests"].as_array().unwrap().len() == 5 {
            break l;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "not every request was recorded: {l}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let ids: Vec<&str> =
        all["requests"].as_array().unwrap().iter().map(|r| r["request_id"].as_str().unwrap()).collect();
    assert_eq!(ids[0], "req-no-such-alias", "newest first: {ids:?}");
    assert_eq!(ids[4], "req-failed-over", "newest first: {ids:?}");
    let row = &all["requests"][4];
    assert_eq!(
        (row["attempts"].as_i64(), row["upstream"].as_str(), row["status"].as_i64()),
        (Some(2), Some("a"), Some(200))
    );
    // Every filter narrows; the cursor pages back without a gap or a repeat.
    let count = |q: String| {
        let admin = &admin;
        async move { admin.ok("GET", &format!("/api/v1/requests?{q}"), None).await["requests"].as_array().unwrap().len() }
    };
    assert_eq!(count("request_id=req-failed-over".into()).await, 1);
    assert_eq!(count("error=any".into()).await, 1);
    assert_eq!(count("status=200&alias=chat&upstream=a".into()).await, 4);
    assert_eq!(count(format!("key={}", row["key_id"].as_str().unwrap())).await, 5);
    assert_eq!(count("tenant=globex".into()).await, 0);
    assert_eq!(count("from=2000-01-01&to=2001-01-01".into()).await, 0);
    let mut seen = Vec::new();
    let mut q = "tenant=acme&limit=2".to_owned();
    loop {
        let page = admin.ok("GET", &format!("/api/v1/requests?{q}"), None).await;
        seen.extend(page["requests"].as_array().unwrap().iter().map(|r| r["request_id"].as_str().unwrap().to_owned()));
        match page["next"].as_str() {
            Some(next) => q = format!("tenant=acme&limit=2&before={}", next.replace('/', "%2F")),
            None => break,
        }
    }
    assert_eq!(seen, ids, "paging by 2");
    for (q, field) in [
        ("limit=0", "limit"),
        ("status=42", "status"),
        ("from=yesterday", "from"),
        ("before=x", "before"),
        ("before=9223372036854775807%2Fx", "before"),
    ] {
        let r = admin.send("GET", &format!("/api/v1/requests?{q}"), None).await;
        assert_eq!(r.status(), 422, "{q}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["fields"][0]["path"], field, "{v}");
    }
    let detail = admin.ok("GET", "/api/v1/requests/req-failed-over", None).await;
    let attempts = detail["record"]["attempt_list"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{detail}");
    assert_eq!((attempts[0]["upstream"].as_str(), attempts[1]["upstream"].as_str()), (Some("down"), Some("a")));
    assert!(attempts[0]["error_code"].is_string() && attempts[1]["error_code"].is_null(), "{detail}");
    // Each attempt's bytes: the refused one sent nothing, nor did the answering mock (it is in
    // the process; `traces.rs` checks a real upstream's counts).
    assert_eq!((&attempts[0]["sent_bytes"], &attempts[0]["received_bytes"]), (&json!(0), &json!(0)), "{detail}");
    assert_eq!(attempts[1]["sent_bytes"], 0, "{detail}");
    assert_eq!(detail["node"], "dp-1");
    assert_eq!(admin.send("GET", "/api/v1/requests/req-never", None).await.status(), 404);

    // In the browser: the overview's failed figure leads to the failed request…
    let b = Browser::start("explorer").await;
    b.login(&cp.url, "root").await;
    b.client.goto(&format!("{}/overview", cp.url)).await.unwrap();
    b.wait_text("1 failed →", 15).await;
    b.find(".tile.errors a").await.click().await.unwrap();
    b.wait_text("req-no-such-alias", 10).await;
    let page = b.find("main").await.text().await.unwrap();
    assert!(!page.contains("req-plain-0"), "the failed filter lists only failures: {page}");
    // …and a search by id opens the failed-over request with both attempts.
    b.client.goto(&format!("{}/requests", cp.url)).await.unwrap();
    b.wait_text("req-plain-2", 10).await;
    b.type_into("input[name=request_id]", "req-failed-over").await;
    b.find("form.explorer button[type=submit]").await.click().await.unwrap();
    b.wait_text("Request req-failed-over", 10).await;
    b.wait_text("answered", 10).await;
    assert_eq!(b.find("section.request dd.trace-id").await.text().await.unwrap(), "not traced");
    let rows = b.client.find_all(Locator::Css("section.request table.attempts tbody tr")).await.unwrap();
    let mut cells = Vec::new();
    for r in rows {
        cells.push(r.text().await.unwrap());
    }
    assert_eq!(cells.len(), 2, "{cells:?}");
    assert!(cells[0].contains("req-failed-over#1") && cells[0].contains("down"), "{cells:?}");
    assert!(
        cells[1].contains("req-failed-over#2") && cells[1].contains(" a ") && cells[1].contains("answered"),
        "{cells:?}"
    );
    assert!(cells[0].contains(" 0 B 0 B "), "the refused attempt sent nothing: {cells:?}");
    let head = b.find("section.request table.attempts thead").await.text().await.unwrap();
    assert!(["TTFT", "Sent", "Received"].iter().all(|h| head.contains(h)), "{head}");
    assert!(b.client.current_url().await.unwrap().as_str().contains("request_id=req-failed-over"));
    b.screenshot("requests-failed-over").await;
    drop(dp);
}
