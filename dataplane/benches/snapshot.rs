//! Compiling a large pushed configuration (issue 5): 10,000 aliases and 1,000 tenants, the shape
//! the control plane's benchmark seeds. Measures, separately, decoding the websocket message,
//! compiling it against the previous snapshot, the swap, and dropping the old snapshot.
//!
//!   cargo bench -p ax-dataplane --bench snapshot
//!
//! A plain timing loop (best and median of 15 runs), single-threaded.
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used, reason = "a benchmark prints its results")]

use std::time::Instant;

use ax_dataplane::config::snapshot::SnapshotStore;
use ax_dataplane::control::compile;
use ax_protocol::config::ConfigSpec;
use ax_protocol::snapshot::ToNode;
use serde_json::json;

/// The data plane binary's allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn message(weight: u32) -> String {
    let model = json!({ "name": "m", "context_window": 32000, "capabilities": ["chat"],
                        "price_per_mtok": { "input": 1.0, "output": 2.0 } });
    let upstreams: Vec<_> = ["a", "b"]
        .iter()
        .map(|n| json!({ "name": n, "provider": "mock", "mock": { "latency_ms": 0 }, "models": [model.clone()] }))
        .collect();
    let routes: Vec<_> = (0..10_000)
        .map(|i| {
            json!({ "alias": format!("alias-{i}"), "candidates": [
                { "upstream": "a", "model": "m", "weight": if i == 0 { weight } else { 1 } },
                { "upstream": "b", "model": "m", "weight": 1 } ] })
        })
        .collect();
    let tenants: Vec<_> = (0..1_000)
        .map(|i| {
            json!({ "id": format!("tenant-{i}"), "allowed_aliases": ["*"],
                    "keys": [{ "id": format!("key-{i}"), "sha256": format!("{:064x}", i + 1) }] })
        })
        .collect();
    json!({ "type": "snapshot", "version": weight, "hash": "x", "keys": {},
            "document": { "upstreams": upstreams, "routes": routes, "tenants": tenants } })
    .to_string()
}

fn stats(mut v: Vec<f64>) -> String {
    v.sort_by(f64::total_cmp);
    format!("best {:6.2} ms  median {:6.2} ms", v[0], v[v.len() / 2])
}

/// The document of a snapshot message (the messages here are all snapshots).
fn document_of(text: &str) -> ax_protocol::snapshot::Document {
    match serde_json::from_str(text).unwrap() {
        ToNode::Snapshot { document, .. } => document,
        ToNode::Fleet { .. } => ax_protocol::snapshot::Document::default(),
    }
}

fn main() {
    let base = ConfigSpec::default();
    let first = message(1);
    let document = document_of(&first);
    let store = SnapshotStore::new(compile(&base, document, 1, None).0.unwrap());
    println!("message: {} bytes, 10,000 aliases, 1,000 tenants", first.len());
    let (mut decode, mut build, mut swap, mut dropped) = (vec![], vec![], vec![], vec![]);
    for run in 2..17u32 {
        let text = message(run);
        let t = Instant::now();
        let document = document_of(&text);
        decode.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let current = store.load();
        let snap = compile(&base, document, u64::from(run), Some(&current)).0.unwrap();
        build.push(t.elapsed().as_secs_f64() * 1e3);
        drop(current);
        let t = Instant::now();
        let old = store.load();
        store.swap(snap);
        swap.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        std::mem::drop(old);
        dropped.push(t.elapsed().as_secs_f64() * 1e3);
    }
    println!("decode   {}", stats(decode));
    println!("compile  {}", stats(build));
    println!("swap     {}", stats(swap));
    println!("drop old {}", stats(dropped));
}
