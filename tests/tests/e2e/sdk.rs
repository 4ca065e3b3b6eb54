//! The official `openai` Python SDK drives the real binary: non-stream, stream, errors, and a
//! tool-call round trip through an Anthropic-protocol upstream.

use ax_tests::wire::{self, Framing};
use ax_tests::{key_digest, temp_dir, Binary, FakeUpstream, Recorded, Reply, KEY};
use serde_json::Value;

/// A small Anthropic: a tool call when tools are offered and no result is back yet; a reply
/// quoting the tool result once it is.
fn anthropic(r: &Recorded) -> Reply {
    let stream = r.body["stream"] == true;
    let messages = r.body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let tool_result = last["content"]
        .as_array()
        .and_then(|blocks| blocks.iter().find(|b| b["type"] == "tool_result"))
        .map(|b| b["content"].as_str().unwrap_or_default().to_owned());
    let has_tools = r.body["tools"].as_array().is_some_and(|t| !t.is_empty());
    let (text, calls, stop): (Option<String>, Vec<wire::Call<'_>>, &str) = match (tool_result, has_tools) {
        (Some(result), _) => (Some(format!("The weather is {result}.")), vec![], "end_turn"),
        (None, true) => (None, vec![("toolu_01", "get_weather", r#"{"city":"Paris"}"#)], "tool_use"),
        (None, false) => (Some("Hello from Claude, 你好 🙂".to_owned()), vec![], "end_turn"),
    };
    if stream {
        let pieces: Vec<String> =
            text.as_deref().map(|t| t.split_inclusive(' ').map(str::to_owned).collect()).unwrap_or_default();
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        Reply::sse_split(
            &wire::anthropic_stream(&refs, &calls, stop, (10, 5, 0, 0), Framing { crlf: false, keepalive_every: 3 }),
            &[29],
        )
    } else {
        Reply::json(wire::anthropic_response(text.as_deref(), &calls, stop, (10, 5, 0, 0)))
    }
}

fn python() -> String {
    if let Ok(p) = std::env::var("AX_PYTHON") {
        return p;
    }
    ax_tests::venv_bin("python", "the SDK test (the `openai` package; or set AX_PYTHON)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_python_sdk_against_the_binary() {
    let up = FakeUpstream::start(anthropic).await;
    let dir = temp_dir("sdk");
    let path = dir.join("ax.yaml");
    std::fs::write(
        &path,
        format!(
            r#"upstreams:
  - name: claude
    provider: anthropic
    base_url: {}
    api_key: sk-ant-test
    models: [{{ name: claude-real, context_window: 200000, capabilities: [chat, tools, streaming, vision] }}]
routes:
  - alias: chat
    candidates: [{{ upstream: claude, model: claude-real }}]
tenants:
  - id: t
    keys: [{{ id: k, sha256: "{}" }}]
"#,
            up.url(),
            key_digest(KEY)
        ),
    )
    .unwrap();
    let bin = Binary::start(&path, &dir);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/sdk/openai_sdk.py");
    let url = bin.url.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python())
            .arg(script)
            .env("AX_BASE_URL", format!("{url}/v1"))
            .env("AX_KEY", KEY)
            .output()
            .expect("run python")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "SDK script failed\nstdout:\n{stdout}\nstderr:\n{stderr}\ngateway log:\n{}",
        bin.logs()
    );
    assert!(stdout.contains("sdk: all checks passed"), "{stdout}");
    // Non-stream + stream + 2 round trips of 2 calls each + error checks that never reach it.
    assert!(up.hits() >= 6, "hits = {}", up.hits());
    let _ = std::fs::remove_dir_all(&dir);
}
