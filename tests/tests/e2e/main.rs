//! End-to-end suite: the gateway (in-process, or the real binary where a process matters)
//! against fake upstreams on ephemeral ports.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "test helpers fail a test by panicking")]

mod agents;
mod conformance;
mod controlplane;
mod corpus;
mod failover;
mod faults;
mod fleet;
mod gemini;
mod governance;
mod hardening;
mod ingress;
mod layering;
mod openai_surface;
mod passthrough;
mod reasoning;
mod reload;
mod responses_store;
mod sdk;
mod traces;
mod translation;
mod ui;

use ax_tests::{key_digest, KEY, UPSTREAM_KEY};

/// The providers every conformance test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum P {
    OpenAi,
    Anthropic,
    Gemini,
}

pub const ALL: [P; 3] = [P::OpenAi, P::Anthropic, P::Gemini];

impl P {
    pub fn provider(self) -> &'static str {
        match self {
            P::OpenAi => "openai",
            P::Anthropic => "anthropic",
            P::Gemini => "gemini",
        }
    }
}

/// A config with one upstream of `provider` at `base_url`, served by the alias `chat` (and
/// `other`, which the test tenant may not use).
pub fn config(provider: &str, base_url: &str, params: &str) -> String {
    let digest = key_digest(KEY);
    let caps = if provider == "anthropic" {
        "chat, tools, streaming, vision, json"
    } else {
        "chat, tools, streaming, vision, json, embeddings"
    };
    format!(
        r#"
server: {{ params: {params}, max_body_bytes: 65536 }}
upstreams:
  - name: up
    provider: {provider}
    base_url: {base_url}
    api_key: {UPSTREAM_KEY}
    api_version: "2024-10-21"
    models:
      - {{ name: real-model, context_window: 100000, capabilities: [{caps}] }}
routes:
  - alias: chat
    candidates: [{{ upstream: up, model: real-model }}]
  - alias: other
    candidates: [{{ upstream: up, model: real-model }}]
tenants:
  - id: t1
    keys: [{{ id: k1, sha256: "{digest}" }}]
    allowed_aliases: [chat]
"#
    )
    .replace(
        "    api_version: \"2024-10-21\"\n",
        if provider == "azure_openai" { "    api_version: \"2024-10-21\"\n" } else { "" },
    )
}
