//! The real agent CLIs (npm, pinned in `tests/agents`) through the ax binary, headless and
//! offline: Claude Code (`/v1/messages`) to an OpenAI-protocol upstream (translated) and to an
//! Anthropic one (forwarded), and Codex (`/v1/responses`) to an OpenAI-protocol and an Anthropic
//! upstream (both translated), and the Gemini CLI (Gemini's API) to an OpenAI-protocol upstream
//! (translated) and a Gemini one (forwarded), every model name it uses served by one glob alias.
//! A one-shot prompt returns the upstream's text, and a turn in which the upstream asks for the
//! agent's own tool (Claude Code's `Read`, Codex's `exec_command`, the Gemini CLI's `read_file`)
//! completes the loop: the agent runs it, sends the result back, and its final answer is what the
//! upstream made of it. The agents' side calls that want JSON (the Gemini CLI's model router and
//! loop checks) get an object their schema allows.

use std::path::{Path, PathBuf};
use std::process::Command;

use ax_tests::wire::{self, Framing};
use ax_tests::{key_digest, temp_dir, Binary, FakeUpstream, Recorded, Reply, KEY};
use serde_json::{json, Value};

/// What the file Claude Code is asked to read says.
const SECRET: &str = "The secret word is MANGO-7.";

/// A 4×4 red PNG Claude Code is asked to look at (its `Read` returns an image as a tool result),
/// and its base64, as the upstream must receive it.
const PIXEL_PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
    0x04, 0x00, 0x00, 0x00, 0x04, 0x08, 0x02, 0x00, 0x00, 0x00, 0x26, 0x93, 0x09, 0x29, 0x00, 0x00, 0x00, 0x10, 0x49,
    0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0x00, 0x47, 0x0c, 0xc4, 0x71, 0x00, 0xae, 0x93, 0x0f, 0xf1,
    0xd0, 0x5f, 0x23, 0x9e, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];
const PIXEL_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAQAAAAECAIAAAAmkwkpAAAAEElEQVR4nGP4z8AARwzEcQCukw/x0F8jngAAAABJRU5ErkJggg==";

/// An agent CLI from `tests/agents/node_modules` (`.ci/run` installs them).
fn agent_bin(name: &str) -> String {
    let path = format!("{}/agents/node_modules/.bin/{name}", env!("CARGO_MANIFEST_DIR"));
    assert!(
        Path::new(&path).exists(),
        "the agent test needs {path}: run `bash .ci/run` once (or `npm ci --prefix tests/agents`)"
    );
    path
}

/// The upstream's turn: a path ending in `notes.txt` in the caller's latest text asks for the
/// agent's file tool (Claude Code's `Read`, Codex's `exec_command` with `cat`) when offered, one
/// ending in `.png` for Claude Code's `Read`; a tool result is answered by quoting it (an image
/// as `an image (<media type>)`); anything else (the agents' own side calls included) gets a
/// greeting naming the upstream.
fn turn(
    latest_text: &str,
    result: Option<&str>,
    tool: Option<&str>,
    who: &str,
) -> (String, Option<(&'static str, String)>) {
    if let Some(r) = result {
        return (format!("From {who}: the file reads \"{}\"", r.trim()), None);
    }
    // A path the prompt names (not the tree of the workspace the Gemini CLI lists, `├───notes.txt`).
    let path =
        latest_text.split_whitespace().find(|w| w.ends_with("notes.txt") && w.chars().all(|c| c.is_ascii_graphic()));
    let image = latest_text.split_whitespace().find(|w| w.ends_with(".png"));
    if let (Some(p), Some("Read")) = (image, tool) {
        return (String::new(), Some(("Read", json!({ "file_path": p }).to_string())));
    }
    match (path, tool) {
        (Some(p), Some("Read")) => (String::new(), Some(("Read", json!({ "file_path": p }).to_string()))),
        (Some(p), Some("read_file")) => (String::new(), Some(("read_file", json!({ "file_path": p }).to_string()))),
        (Some(p), Some("exec_command")) => {
            (String::new(), Some(("exec_command", json!({ "cmd": format!("cat {p}") }).to_string())))
        }
        _ => (format!("Hello from the {who} upstream"), None),
    }
}

fn pieces(text: &str) -> Vec<&str> {
    text.split_inclusive(' ').collect()
}

/// The agent's file tool, when the request offers it.
fn file_tool(body: &Value) -> Option<&'static str> {
    let names: Vec<&str> = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().or(t["function"]["name"].as_str()))
        .collect();
    ["Read", "exec_command", "read_file"].into_iter().find(|n| names.contains(n))
}

/// A JSON value `schema` allows: each property it requires (every one, when it names none) from
/// its enum, else by its type; what a side call that wants JSON gets.
fn satisfying(schema: &Value) -> Value {
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    let kind = schema["type"].as_str().map(str::to_ascii_lowercase).unwrap_or_else(|| "object".into());
    match kind.as_str() {
        "string" => json!("fine"),
        "number" | "integer" => schema["minimum"].as_f64().map_or(json!(1), |m| json!(m.max(1.0) as i64)),
        "boolean" => json!(false),
        "array" => json!([]),
        _ => {
            let props = schema["properties"].as_object().cloned().unwrap_or_default();
            let required: Vec<String> = match schema["required"].as_array() {
                Some(r) => r.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect(),
                None => props.keys().cloned().collect(),
            };
            Value::Object(
                required
                    .into_iter()
                    .map(|k| {
                        let v = satisfying(&props[&k]);
                        (k, v)
                    })
                    .collect(),
            )
        }
    }
}

/// The newest message that is not a system one: Claude Code appends a `system` message after the
/// user's prompt.
fn latest_turn(body: &Value) -> Value {
    let messages = body["messages"].as_array().into_iter().flatten();
    messages.rev().find(|m| m["role"] != "system").cloned().unwrap_or(Value::Null)
}

fn anthropic_upstream(r: &Recorded) -> Reply {
    let last = latest_turn(&r.body);
    let blocks = last["content"].as_array().cloned().unwrap_or_default();
    let result: Option<String> = blocks.iter().find(|b| b["type"] == "tool_result").map(|b| match &b["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => match parts.iter().find(|p| p["type"] == "image") {
            Some(image) => format!("an image ({})", image["source"]["media_type"].as_str().unwrap_or_default()),
            None => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        },
        _ => String::new(),
    });
    let latest: String = match &last["content"] {
        Value::String(s) => s.clone(),
        _ => blocks.iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join(" "),
    };
    let (text, call) = turn(&latest, result.as_deref(), file_tool(&r.body), "Anthropic");
    let calls: Vec<wire::Call<'_>> = call.as_ref().map(|(n, a)| ("toolu_read1", *n, a.as_str())).into_iter().collect();
    let stop = if calls.is_empty() { "end_turn" } else { "tool_use" };
    let text = (!text.is_empty()).then_some(text);
    if r.body["stream"] == true {
        let p = text.as_deref().map(pieces).unwrap_or_default();
        Reply::sse(&wire::anthropic_stream(&p, &calls, stop, (40, 9, 0, 0), Framing::default()))
    } else {
        Reply::json(wire::anthropic_response(text.as_deref(), &calls, stop, (40, 9, 0, 0)))
    }
}

/// The `data:` URLs of the images in the user messages since the last assistant turn (where an
/// OpenAI-protocol upstream gets the images a tool returned).
fn images_since_assistant(body: &Value) -> Vec<&str> {
    let messages = body["messages"].as_array().map(Vec::as_slice).unwrap_or_default();
    let since = messages.iter().rposition(|m| m["role"] == "assistant").map_or(0, |i| i + 1);
    messages[since..]
        .iter()
        .filter(|m| m["role"] == "user")
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .filter_map(|p| p["image_url"]["url"].as_str())
        .collect()
}

fn openai_upstream(r: &Recorded) -> Reply {
    if let Some(schema) = r.body["response_format"]["json_schema"].get("schema") {
        let text = satisfying(schema).to_string();
        return Reply::json(wire::openai_response(Some(&text), &[], "stop", (40, 9, 0)));
    }
    let last = latest_turn(&r.body);
    let tool_result = || {
        let messages = r.body["messages"].as_array().into_iter().flatten();
        messages.rev().take_while(|m| m["role"] != "assistant").find(|m| m["role"] == "tool").cloned()
    };
    let result = match images_since_assistant(&r.body).first() {
        Some(url) if tool_result().is_some() => {
            let media = url.strip_prefix("data:").and_then(|u| u.split(';').next()).unwrap_or_default();
            Some(format!("an image ({media})"))
        }
        _ => (last["role"] == "tool").then(|| last["content"].as_str().unwrap_or_default().to_owned()),
    };
    let latest: String = match &last["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join(" "),
        _ => String::new(),
    };
    let (text, call) = turn(&latest, result.as_deref(), file_tool(&r.body), "OpenAI");
    let calls: Vec<wire::Call<'_>> = call.as_ref().map(|(n, a)| ("call_read1", *n, a.as_str())).into_iter().collect();
    let finish = if calls.is_empty() { "stop" } else { "tool_calls" };
    let text = (!text.is_empty()).then_some(text);
    if r.body["stream"] == true {
        let p = text.as_deref().map(pieces).unwrap_or_default();
        Reply::sse(&wire::openai_stream(&p, &calls, finish, (40, 9, 0), Framing::default()))
    } else {
        Reply::json(wire::openai_response(text.as_deref(), &calls, finish, (40, 9, 0)))
    }
}

/// A Gemini upstream for the Gemini CLI: its latest user turn's text or function response, its
/// `read_file` when offered; JSON side calls answered from their schema.
fn gemini_upstream(r: &Recorded) -> Reply {
    let config = &r.body["generationConfig"];
    let schema = config.get("responseJsonSchema").or(config.get("responseSchema"));
    if let Some(schema) = schema.filter(|_| config["responseMimeType"] == "application/json") {
        let text = satisfying(schema).to_string();
        return Reply::json(wire::gemini_response(Some(&text), &[], "STOP", (40, 9, 0)));
    }
    let last = r.body["contents"].as_array().and_then(|c| c.last()).cloned().unwrap_or(Value::Null);
    let parts = last["parts"].as_array().cloned().unwrap_or_default();
    let result = parts.iter().find_map(|p| p.get("functionResponse")).map(|f| f["response"].to_string());
    let latest: String = parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join(" ");
    let names: Vec<&str> = r.body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["functionDeclarations"].as_array().into_iter().flatten())
        .filter_map(|f| f["name"].as_str())
        .collect();
    let tool = names.contains(&"read_file").then_some("read_file");
    let (text, call) = turn(&latest, result.as_deref(), tool, "Gemini");
    let calls: Vec<(&str, &str)> = call.as_ref().map(|(n, a)| (*n, a.as_str())).into_iter().collect();
    let text = (!text.is_empty()).then_some(text);
    if r.path.ends_with(":streamGenerateContent") {
        let p = text.as_deref().map(pieces).unwrap_or_default();
        Reply::sse(&wire::gemini_stream(&p, &calls, "STOP", (40, 9, 0), Framing::default()))
    } else {
        Reply::json(wire::gemini_response(text.as_deref(), &calls, "STOP", (40, 9, 0)))
    }
}

/// Runs `gemini -p <prompt> --approval-mode=yolo -o json` in `work` against ax, headless and
/// offline: a private `HOME` whose settings pin the API-key auth (with a base URL set, the CLI
/// otherwise picks a gateway auth that headless mode refuses) and turn off telemetry, usage
/// statistics and update checks. Its parsed result object.
fn gemini(url: &str, work: &Path, home: &Path, prompt: &str) -> Value {
    let settings = home.join(".gemini");
    std::fs::create_dir_all(&settings).unwrap();
    let pinned = json!({
        "security": { "auth": { "selectedType": "gemini-api-key" } },
        "privacy": { "usageStatisticsEnabled": false },
        "telemetry": { "enabled": false },
        "general": { "disableAutoUpdate": true, "disableUpdateNag": true, "enableAutoUpdate": false },
    });
    std::fs::write(settings.join("settings.json"), pinned.to_string()).unwrap();
    let out = Command::new("timeout")
        .args(["120", &agent_bin("gemini"), "-p", prompt, "--approval-mode=yolo", "-o", "json"])
        .current_dir(work)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("GOOGLE_GEMINI_BASE_URL", url)
        .env("GEMINI_API_KEY", KEY)
        .env("GEMINI_CLI_TRUST_WORKSPACE", "true")
        .output()
        .expect("run gemini");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "gemini failed ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("gemini's output is not JSON ({e}):\n{stdout}\n{stderr}"))
}

/// Runs `claude -p <prompt> --output-format json` in `work` against ax with `alias` as every
/// model it uses; its parsed result object. Bounded: `timeout` stops a stuck client.
fn claude(url: &str, alias: &str, work: &Path, home: &Path, prompt: &str) -> Value {
    let out = Command::new("timeout")
        .args(["120", &agent_bin("claude"), "-p", prompt, "--output-format", "json"])
        .current_dir(work)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("ANTHROPIC_BASE_URL", url)
        .env("ANTHROPIC_API_KEY", KEY)
        .env("ANTHROPIC_MODEL", alias)
        .env("ANTHROPIC_SMALL_FAST_MODEL", alias)
        .env("ANTHROPIC_DEFAULT_HAIKU_MODEL", alias)
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .output()
        .expect("run claude");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "claude failed ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
    let line = stdout.lines().rev().find(|l| l.trim_start().starts_with('{')).unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("claude's output is not JSON ({e}):\n{stdout}\n{stderr}"))
}

/// Runs `codex exec <prompt>` in `work` against ax (a custom model provider speaking the
/// Responses API) with `alias` as its model, in its own sandbox; its last message.
fn codex(url: &str, alias: &str, work: &Path, home: &Path, prompt: &str) -> String {
    let codex_home = home.join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            "model_provider = \"ax\"\n[model_providers.ax]\nname = \"ax\"\nbase_url = \"{url}/v1\"\nenv_key = \"AX_API_KEY\"\nwire_api = \"responses\"\n"
        ),
    )
    .unwrap();
    let last = home.join(format!("last-{alias}.txt"));
    let _ = std::fs::remove_file(&last);
    let out = Command::new("timeout")
        .args(["120", &agent_bin("codex"), "exec", "--skip-git-repo-check", "--ephemeral", "-m", alias, "-o"])
        .arg(&last)
        .arg(prompt)
        .current_dir(work)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("CODEX_HOME", &codex_home)
        .env("AX_API_KEY", KEY)
        .output()
        .expect("run codex");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "codex failed ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
    std::fs::read_to_string(&last).unwrap_or_else(|e| panic!("codex wrote no last message ({e}):\n{stdout}\n{stderr}"))
}

/// ax in front of the two fakes: `agent-gpt` (OpenAI protocol) and `agent-claude` (Anthropic).
fn agent_config(oa: &FakeUpstream, an: &FakeUpstream, dir: &Path) -> PathBuf {
    let caps = "capabilities: [chat, tools, streaming, vision, json]";
    let path = dir.join("ax.yaml");
    std::fs::write(
        &path,
        format!(
            r#"upstreams:
  - {{ name: oa, provider: openai, base_url: "{}/v1", api_key: sk-test, models: [{{ name: gpt-real, context_window: 400000, {caps} }}] }}
  - {{ name: an, provider: anthropic, base_url: "{}", api_key: sk-ant-test, models: [{{ name: claude-real, context_window: 200000, {caps} }}] }}
routes:
  - {{ alias: agent-gpt, candidates: [{{ upstream: oa, model: gpt-real }}] }}
  - {{ alias: agent-claude, candidates: [{{ upstream: an, model: claude-real }}] }}
tenants:
  - {{ id: t, keys: [{{ id: k, sha256: "{}" }}] }}
"#,
            oa.url(),
            an.url(),
            key_digest(KEY)
        ),
    )
    .unwrap();
    path
}

fn fresh_dirs(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = temp_dir(name);
    let (work, home) = (dir.join("work"), dir.join("home"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(work.join("notes.txt"), format!("{SECRET}\n")).unwrap();
    std::fs::write(work.join("pixel.png"), PIXEL_PNG).unwrap();
    (dir, work, home)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_runs_through_ax_to_an_openai_and_an_anthropic_upstream() {
    let oa = FakeUpstream::start(openai_upstream).await;
    let an = FakeUpstream::start(anthropic_upstream).await;
    let (dir, work, home) = fresh_dirs("claude-code");
    let path = agent_config(&oa, &an, &dir);
    let bin = Binary::start(&path, &dir);
    let url = bin.url.clone();
    let notes = work.join("notes.txt");
    let read_prompt = format!("Read the file {} and tell me the secret word.", notes.display());
    let look_prompt = format!("Read the file {} and describe it.", work.join("pixel.png").display());
    let (w, h) = (work.clone(), home.clone());
    let results = tokio::task::spawn_blocking(move || {
        ["agent-gpt", "agent-claude"].map(|alias| {
            (
                claude(&url, alias, &w, &h, "Say hello."),
                claude(&url, alias, &w, &h, &read_prompt),
                claude(&url, alias, &w, &h, &look_prompt),
            )
        })
    })
    .await
    .unwrap();
    // The usage lines are written in batches: wait for the last one.
    let calls = oa.hits() + an.hits();
    let mut logs = bin.logs();
    for _ in 0..50 {
        if logs.matches("\"target\":\"ax::usage\"").count() >= calls {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        logs = bin.logs();
    }
    for ((hello, read, look), who) in results.iter().zip(["OpenAI", "Anthropic"]) {
        assert_eq!(look["is_error"], false, "{look}\n{logs}");
        let answer = look["result"].as_str().unwrap_or_default();
        assert!(answer.contains("an image (image/png)"), "the {who} upstream saw the image Read returned: {look}");
        assert_eq!(hello["is_error"], false, "{hello}\n{logs}");
        assert_eq!(hello["result"], format!("Hello from the {who} upstream"), "{hello}");
        assert_eq!(read["is_error"], false, "{read}\n{logs}");
        let answer = read["result"].as_str().unwrap_or_default();
        assert!(answer.starts_with(&format!("From {who}: the file reads")) && answer.contains("MANGO-7"), "{read}");
        assert!(read["num_turns"].as_u64().unwrap_or(0) >= 2, "the tool loop took a second turn: {read}");
    }
    // The tool result reached each upstream in its own protocol: a tool message, a tool_result.
    let oa_saw_result = oa.requests().iter().any(|r| {
        r.body["messages"].as_array().into_iter().flatten().any(|m| {
            m["role"] == "tool"
                && m["tool_call_id"] == "call_read1"
                && m["content"].as_str().is_some_and(|c| c.contains("MANGO-7"))
        })
    });
    assert!(oa_saw_result, "the OpenAI upstream got Read's result as a tool message");
    // The image Read returned reached the OpenAI upstream, whose tool messages hold only text: a
    // user message right after the results carries it, and the tool message says where it went.
    let pixel = format!("data:image/png;base64,{PIXEL_BASE64}");
    let oa_saw_image = oa.requests().iter().any(|r| {
        let messages = r.body["messages"].as_array().cloned().unwrap_or_default();
        messages.windows(2).any(|w| {
            w[0]["role"] == "tool"
                && w[0]["content"].as_str().is_some_and(|c| c.contains("[image: attached after the tool results]"))
                && w[1]["role"] == "user"
                && w[1]["content"][0]["text"]
                    .as_str()
                    .is_some_and(|t| t.contains(w[0]["tool_call_id"].as_str().unwrap()))
                && w[1]["content"][1]["image_url"]["url"] == pixel.as_str()
        })
    });
    assert!(oa_saw_image, "the OpenAI upstream got the image: {:#?}", oa.requests().last().map(|r| &r.body));
    assert!(an.requests().iter().any(|r| String::from_utf8_lossy(&r.raw).contains(PIXEL_BASE64)));
    assert!(an
        .requests()
        .iter()
        .all(|r| r.body["model"] == "claude-real" && r.header("x-api-key") == Some("sk-ant-test")));
    assert!(an.requests().iter().any(|r| String::from_utf8_lossy(&r.raw).contains("toolu_read1")));
    // Claude Code's own fields reached the Anthropic upstream as it wrote them, beta header too.
    let first = &an.requests()[0];
    assert!(first.header("anthropic-beta").is_some_and(|b| b.contains("claude-code-")), "{:?}", first.headers);
    // Every call was metered once, as a success.
    let records: Vec<Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "ax::usage")
        .collect();
    assert_eq!(records.len(), calls, "{logs}");
    assert!(records.iter().all(|r| r["fields"]["status"] == 200), "{logs}");
    drop(bin);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_runs_through_ax_to_an_openai_and_an_anthropic_upstream() {
    let oa = FakeUpstream::start(openai_upstream).await;
    let an = FakeUpstream::start(anthropic_upstream).await;
    let (dir, work, home) = fresh_dirs("codex");
    let path = agent_config(&oa, &an, &dir);
    let bin = Binary::start(&path, &dir);
    let url = bin.url.clone();
    let (w, h) = (work.clone(), home.clone());
    let results = tokio::task::spawn_blocking(move || {
        ["agent-gpt", "agent-claude"].map(|alias| {
            (
                codex(&url, alias, &w, &h, "Say hello."),
                codex(&url, alias, &w, &h, "Read notes.txt and tell me the secret word."),
            )
        })
    })
    .await
    .unwrap();
    for ((hello, read), who) in results.iter().zip(["OpenAI", "Anthropic"]) {
        assert_eq!(hello.trim(), format!("Hello from the {who} upstream"), "{}", bin.logs());
        assert!(read.starts_with(&format!("From {who}: the file reads")) && read.contains("MANGO-7"), "{read}");
    }
    // Codex ran the command and sent its output back: a tool message, a tool_result.
    let oa_saw = oa.requests().iter().any(|r| {
        r.body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|m| m["role"] == "tool" && m["content"].as_str().is_some_and(|c| c.contains("MANGO-7")))
    });
    assert!(oa_saw, "the OpenAI upstream got the command's output as a tool message");
    assert!(an.requests().iter().any(|r| String::from_utf8_lossy(&r.raw).contains("tool_result")));
    assert!(an.requests().iter().all(|r| r.body["model"] == "claude-real"));
    drop(bin);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gemini_cli_runs_through_ax_to_an_openai_and_a_gemini_upstream() {
    let oa = FakeUpstream::start(openai_upstream).await;
    let gm = FakeUpstream::start(gemini_upstream).await;
    let (dir, work, home) = fresh_dirs("gemini-cli");
    let caps = "capabilities: [chat, tools, streaming, vision, json, reasoning]";
    let read_prompt = format!("Read the file {} and tell me the secret word.", work.join("notes.txt").display());
    let mut answers = Vec::new();
    for (who, upstream) in [
        (
            "OpenAI",
            format!(
                r#"{{ name: up, provider: openai, base_url: "{}/v1", api_key: sk-test, models: [{{ name: real, context_window: 1000000, {caps} }}] }}"#,
                oa.url()
            ),
        ),
        (
            "Gemini",
            format!(
                r#"{{ name: up, provider: gemini, base_url: "{}", api_key: g-test, models: [{{ name: real, context_window: 1000000, {caps} }}] }}"#,
                gm.url()
            ),
        ),
    ] {
        // Every model the CLI names (its main model and its side calls' flash models) is `gemini-*`.
        let config = format!(
            "upstreams:\n  - {upstream}\nroutes:\n  - {{ alias: \"gemini-*\", candidates: [{{ upstream: up, model: real }}] }}\ntenants:\n  - {{ id: t, keys: [{{ id: k, sha256: \"{}\" }}] }}\n",
            key_digest(KEY)
        );
        let path = dir.join(format!("ax-{who}.yaml"));
        std::fs::write(&path, config).unwrap();
        let bin = Binary::start(&path, &dir);
        let (url, w, h, p) = (bin.url.clone(), work.clone(), home.clone(), read_prompt.clone());
        let (hello, read) =
            tokio::task::spawn_blocking(move || (gemini(&url, &w, &h, "Say hello."), gemini(&url, &w, &h, &p)))
                .await
                .unwrap();
        answers.push((who, hello, read, bin.logs()));
    }
    for (who, hello, read, logs) in &answers {
        assert!(hello.get("error").is_none(), "{hello}\n{logs}");
        assert_eq!(
            hello["response"].as_str().map(str::trim),
            Some(format!("Hello from the {who} upstream").as_str()),
            "{hello}"
        );
        let answer = read["response"].as_str().unwrap_or_default();
        assert!(
            answer.contains(&format!("From {who}: the file reads")) && answer.contains("MANGO-7"),
            "{read}\n{logs}"
        );
        // Every call of the session, side calls included, was served and metered under the glob.
        let records: Vec<Value> = logs
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["target"] == "ax::usage")
            .collect();
        assert!(!records.is_empty(), "{logs}");
        assert!(records.iter().all(|r| r["fields"]["alias"] == "gemini-*" && r["fields"]["status"] == 200), "{logs}");
    }
    // The file's contents reached the OpenAI upstream as a tool message answering its call.
    assert!(oa.requests().iter().any(|r| r.body["messages"].as_array().into_iter().flatten().any(|m| {
        m["role"] == "tool"
            && m["tool_call_id"] == "call_read1"
            && m["content"].as_str().is_some_and(|c| c.contains("MANGO-7"))
    })));
    // The Gemini upstream was sent the CLI's own bodies at the real model's URLs: the function
    // response, the CLI's tool declarations in JSON Schema, its thinking settings.
    let sent = gm.requests();
    assert!(sent
        .iter()
        .all(|r| r.path.starts_with("/v1beta/models/real:") && r.header("x-goog-api-key") == Some("g-test")));
    assert!(sent
        .iter()
        .any(|r| r.raw.windows(16).any(|w| w == b"functionResponse")
            && String::from_utf8_lossy(&r.raw).contains("MANGO-7")));
    assert!(sent.iter().any(|r| String::from_utf8_lossy(&r.raw).contains("parametersJsonSchema")));
    let _ = std::fs::remove_dir_all(dir);
}
