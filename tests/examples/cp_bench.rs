//! Control-plane benchmark (issue 5): config propagation (API commit → applied on a data plane),
//! a 10,000-alias / 1,000-tenant snapshot under load, and usage ingestion into Postgres.
//!
//!   cargo build --release -p ax-dataplane -p ax-controlplane
//!   AX_BIN_DIR=target/release cargo run -p ax-tests --example cp_bench
//!
//! Loopback only, local Postgres (a private database, dropped at the end), bounded: about a minute.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::print_stdout, reason = "a benchmark binary")]

use std::time::{Duration, Instant};

use ax_tests::cp::{create_node, create_operator, Session, TestDb, ADMIN_PASSWORD};
use ax_tests::Process;
use serde_json::{json, Value};

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

async fn dp_version(client: &reqwest::Client, dp: &str) -> u64 {
    let v: Value = client.get(format!("{dp}/readyz")).send().await.unwrap().json().await.unwrap();
    v["config_version"].as_u64().unwrap()
}

/// Time from just before the API call until the data plane serves the new version.
async fn change_and_wait(admin: &Session, client: &reqwest::Client, dp: &str, alias: &str, w: i64) -> (f64, f64) {
    let start = Instant::now();
    let body = json!({ "candidates": [{ "upstream": "a", "model": "m", "weight": w }, { "upstream": "b", "model": "m", "weight": 100 - w }] });
    let r = admin.ok("PUT", &format!("/api/v1/routes/{alias}"), Some(&body)).await;
    let api = start.elapsed().as_secs_f64() * 1000.0;
    let v = r["version"].as_u64().unwrap();
    while dp_version(client, dp).await < v {
        tokio::time::sleep(Duration::from_micros(500)).await;
        assert!(start.elapsed() < Duration::from_secs(10), "version {v} not applied");
    }
    (api, start.elapsed().as_secs_f64() * 1000.0)
}

fn upstream() -> Value {
    json!({ "provider": "mock", "mock": { "latency_ms": 0, "reply_tokens": 4 },
            "models": [{ "name": "m", "context_window": 32000, "capabilities": ["chat"], "price_per_mtok": { "input": 1.0, "output": 2.0 } }] })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let db = TestDb::create("bench");
    create_operator(&db, "root", "admin");
    let dir = ax_tests::temp_dir("cp-bench");
    // Test hooks on (the bench seeds 10,000 aliases in SQL), but not the per-commit full-read check.
    let cp = Process::control_plane_with(&db, &dir, "cp", &[("AX_TEST_HOOKS", "1")]);
    let admin = Session::login(&cp.url, "root", ADMIN_PASSWORD).await.unwrap_or_else(|_| panic!("login"));
    admin.ok("PUT", "/api/v1/upstreams/a", Some(&upstream())).await;
    admin.ok("PUT", "/api/v1/upstreams/b", Some(&upstream())).await;
    admin.ok("PUT", "/api/v1/tenants/t", Some(&json!({}))).await;
    let key = admin.ok("POST", "/api/v1/tenants/t/keys", Some(&json!({}))).await["key"].as_str().unwrap().to_owned();
    let token = create_node(&db, "bench-1");
    let dp = Process::data_plane(&cp.url, &token, &dir.join("dp"), "dp");
    let client = reqwest::Client::new();
    change_and_wait(&admin, &client, &dp.url, "chat", 50).await;

    // 1. Propagation, small config: 100 weight changes, one after another.
    let (mut api, mut total) = (Vec::new(), Vec::new());
    for i in 0..100 {
        let (a, t) = change_and_wait(&admin, &client, &dp.url, "chat", 10 + (i % 80)).await;
        api.push(a);
        total.push(t);
    }
    println!(
        "propagation (small config, 100 changes): API commit p50 {:.1} ms p99 {:.1} ms; commit→applied on the data plane p50 {:.1} ms p99 {:.1} ms",
        pct(&mut api, 0.5), pct(&mut api, 0.99), pct(&mut total, 0.5), pct(&mut total, 0.99)
    );

    // 2. 10,000 aliases and 1,000 tenants (seeded in SQL), one change under load.
    db.query(
        "INSERT INTO routes (alias, spec) SELECT 'alias-' || g, '{\"alias\":\"\",\"candidates\":[]}'::jsonb FROM generate_series(1, 10000) g;
         INSERT INTO route_candidates (alias, position, upstream, model, weight) SELECT 'alias-' || g, 0, 'a', 'm', 1 FROM generate_series(1, 10000) g;
         INSERT INTO route_candidates (alias, position, upstream, model, weight) SELECT 'alias-' || g, 1, 'b', 'm', 1 FROM generate_series(1, 10000) g;
         INSERT INTO tenants (id, spec) SELECT 'tenant-' || g, '{\"id\":\"\",\"keys\":[]}'::jsonb FROM generate_series(1, 1000) g;
         INSERT INTO api_keys (id, tenant_id, digest, prefix, status) SELECT 'key-' || g, 'tenant-' || g, md5(g::text) || md5((g + 1)::text), 'ax-x', 'active' FROM generate_series(1, 1000) g;",
    );
    // Seeded behind the API's back: an upstream change re-reads every table (a route or tenant
    // change starts from the latest version).
    admin.ok("PUT", "/api/v1/upstreams/a", Some(&upstream())).await;
    change_and_wait(&admin, &client, &dp.url, "chat", 50).await; // ships the big document once
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = Vec::new();
    for _ in 0..4 {
        let (stop, url, key, c) = (stop.clone(), dp.url.clone(), key.clone(), client.clone());
        load.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (0u64, 0u64);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let r = c
                    .post(format!("{url}/v1/chat/completions"))
                    .bearer_auth(&key)
                    .json(&json!({ "model": "alias-77", "messages": [{ "role": "user", "content": "hi" }] }))
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status() == 200 => ok += 1,
                    _ => failed += 1,
                }
            }
            (ok, failed)
        }));
    }
    let (mut api, mut total) = (Vec::new(), Vec::new());
    for i in 0..10 {
        let (a, t) = change_and_wait(&admin, &client, &dp.url, "chat", 20 + i).await;
        api.push(a);
        total.push(t);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut ok, mut failed) = (0, 0);
    for l in load {
        let (o, f) = l.await.unwrap();
        ok += o;
        failed += f;
    }
    println!(
        "10,000 aliases + 1,000 tenants, 10 changes under load: API commit p50 {:.0} ms p99 {:.0} ms; commit→applied p50 {:.0} ms p99 {:.0} ms; requests during the swaps: {ok} ok, {failed} failed",
        pct(&mut api, 0.5), pct(&mut api, 0.99), pct(&mut total, 0.5), pct(&mut total, 0.99)
    );
    for l in cp.logs().lines().filter(|l| l.contains("configuration version stored")).rev().take(3) {
        println!("control plane: {l}");
    }
    for l in dp.logs().lines().filter(|l| l.contains("snapshot message handled")).rev().take(3) {
        println!("data plane: {l}");
    }
    let applied_log = dp.logs().lines().filter(|l| l.contains("configuration version applied")).count();
    println!("(data plane applied {applied_log} versions in all)");

    // 3. Usage ingestion: 40 batches of 5,000 records, one request each.
    let mut batches = Vec::new();
    for b in 0..40 {
        let mut body = String::new();
        for i in 0..5000 {
            let rec = json!({ "request_id": format!("bench-{b}-{i}"), "started_at_ms": 1_790_000_000_000u64 + i,
                "tenant": "t", "key_id": "k", "alias": "chat", "upstream": "a", "model": "m", "status": 200,
                "prompt_tokens": 12, "completion_tokens": 30, "cost_micro_usd": 72, "latency_ms": 3 });
            body.push_str(&rec.to_string());
            body.push('\n');
        }
        batches.push(body);
    }
    let start = Instant::now();
    let mut inserted = 0;
    for body in batches {
        let r: Value = client
            .post(format!("{}/api/v1/usage", cp.url))
            .bearer_auth(&token)
            .body(body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        inserted += r["inserted"].as_u64().unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "usage ingestion: {inserted} rows in {secs:.2} s = {:.0} rows/s (batches of 5,000, one at a time)",
        inserted as f64 / secs
    );
}
