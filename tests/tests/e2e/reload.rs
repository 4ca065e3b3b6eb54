//! Reload of the real binary: a config rewrite while a 5-second stream is in flight leaves the
//! stream unharmed and sends new requests to the new routes; an invalid file leaves the old routes
//! serving; SIGHUP reloads even when the file looks unchanged; an empty file is refused.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use ax_tests::wire::{self, Framing};
use ax_tests::{assemble, key_digest, post, sse_events, temp_dir, Binary, FakeUpstream, Reply, KEY};
use serde_json::json;

/// A config routing `chat` to one upstream. Padded to a fixed length so two versions differ only
/// in content, never in size.
fn cfg(name: &str, url: &str) -> String {
    let text = format!(
        r#"upstreams:
  - name: {name}
    provider: openai
    base_url: {url}
    models: [{{ name: m, context_window: 8000, capabilities: [chat, streaming] }}]
routes:
  - alias: chat
    candidates: [{{ upstream: {name}, model: m }}]
tenants:
  - id: t
    keys: [{{ id: k, sha256: "{}" }}]
"#,
        key_digest(KEY)
    );
    format!("{text}#{}\n", " ".repeat(120 - text.len() % 120))
}

fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

async fn served_by(url: &str) -> String {
    let resp = post(
        url,
        "/v1/chat/completions",
        &json!({ "model": "chat", "messages": [{ "role": "user", "content": "x" }] }),
    )
    .await;
    assert_eq!(resp.status(), 200);
    resp.headers()["x-ax-upstream"].to_str().unwrap().to_owned()
}

async fn wait_for_upstream(url: &str, want: &str, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        if served_by(url).await == want {
            return start.elapsed();
        }
        assert!(start.elapsed() < within, "new routes not served within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_keeps_streams_and_switches_routes() {
    let pieces: Vec<String> = (0..50).map(|i| format!("piece{i} ")).collect();
    let expected = pieces.concat();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let events: Vec<String> = wire::openai_stream(&refs, &[], "stop", (1, 50, 0), Framing::default())
        .split_inclusive("\n\n")
        .map(str::to_owned)
        .collect();
    let ok = Reply::json(wire::openai_response(Some("ok"), &[], "stop", (1, 1, 0)));
    let ok_a = ok.clone();
    // 54 events, 100 ms apart: a stream of about 5 seconds.
    let a = FakeUpstream::start(move |r| {
        if r.body["stream"] == true {
            Reply::sse_paced(events.clone(), Duration::from_millis(100))
        } else {
            ok_a.clone()
        }
    })
    .await;
    let b = FakeUpstream::fixed(ok).await;

    let dir = temp_dir("reload");
    let path = dir.join("ax.yaml");
    write_atomic(&path, &cfg("up-a", &a.url()));
    let bin = Binary::start(&path, &dir);
    assert_eq!(served_by(&bin.url).await, "up-a");

    let url = bin.url.clone();
    let stream = tokio::spawn(async move {
        let resp = post(
            &url,
            "/v1/chat/completions",
            &json!({ "model": "chat", "stream": true,
            "messages": [{ "role": "user", "content": "long" }] }),
        )
        .await;
        assert_eq!(resp.headers()["x-ax-upstream"], "up-a");
        sse_events(resp).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Rewrite the file: new requests follow within the poll interval.
    write_atomic(&path, &cfg("up-b", &b.url()));
    let took = wait_for_upstream(&bin.url, "up-b", Duration::from_secs(4)).await;
    eprintln!("file-change reload took {took:?}");

    // An invalid file (same size, one broken key) is rejected; the previous routes keep serving.
    let good_a = cfg("up-a", &a.url());
    let broken = good_a.replace("candidates", "candidatez");
    write_atomic(&path, &broken);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(served_by(&bin.url).await, "up-b");
    let logs = bin.logs();
    assert!(logs.contains("configuration rejected") && logs.contains("candidatez"), "{logs}");

    // The in-flight stream finished unharmed, on the upstream it started with.
    let events = tokio::time::timeout(Duration::from_secs(15), stream).await.expect("stream finishes").unwrap();
    let done = assemble(&events);
    assert_eq!(done.text, expected);
    assert!(done.done && done.error.is_none());
    assert_eq!(done.finish_reason.as_deref(), Some("stop"));

    // SIGHUP: a valid file with the same size and modification time as the broken one is
    // invisible to polling; the signal reloads it.
    let mtime: SystemTime = std::fs::metadata(&path).unwrap().modified().unwrap();
    std::fs::write(&path, &good_a).unwrap();
    std::fs::File::options().write(true).open(&path).unwrap().set_modified(mtime).unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(served_by(&bin.url).await, "up-b", "polling must not have noticed");
    let status = std::process::Command::new("kill").args(["-HUP", &bin.pid().to_string()]).status().unwrap();
    assert!(status.success());
    wait_for_upstream(&bin.url, "up-a", Duration::from_secs(2)).await;

    // An empty file, which is what a reload reads between an in-place rewrite's truncation and its
    // write, is refused on a poll and on SIGHUP alike; the routes keep serving.
    std::fs::write(&path, "").unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let status = std::process::Command::new("kill").args(["-HUP", &bin.pid().to_string()]).status().unwrap();
    assert!(status.success());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(served_by(&bin.url).await, "up-a");
    let logs = bin.logs();
    assert_eq!(logs.matches("the configuration is empty").count(), 2, "{logs}");
    let _ = std::fs::remove_dir_all(&dir);
}
