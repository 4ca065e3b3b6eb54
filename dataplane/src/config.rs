//! Configuration: where a `ConfigSpec` comes from and what it compiles into.
//!
//! Standalone (DB-less), a YAML file decoded here with errors that name the field path and
//! reloaded on SIGHUP or change (`reload`); fed by the control plane, the websocket link
//! (`control`). Either way the spec is validated (`ax_protocol::validate`) and compiled into an
//! immutable `snapshot::Snapshot`, swapped whole.

pub mod reload;
pub mod snapshot;

use std::path::Path;

use ax_protocol::config::ConfigSpec;

use snapshot::{ConfigError, Snapshot};

/// Decodes YAML text. Unknown fields are errors (`deny_unknown_fields` on every struct).
pub fn parse(text: &str) -> Result<ConfigSpec, ConfigError> {
    let de = serde_norway::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        ConfigError { path: if path == "." { "(root)".to_owned() } else { path }, message: e.into_inner().to_string() }
    })
}

/// Reads, decodes and compiles a config file into a snapshot.
pub fn load(path: &Path, version: u64, prev: Option<&Snapshot>) -> Result<(ConfigSpec, Snapshot), ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError { path: path.display().to_string(), message: format!("cannot read: {e}") })?;
    from_text(&text, version, prev)
}

/// Decodes and compiles config text already read.
pub fn from_text(text: &str, version: u64, prev: Option<&Snapshot>) -> Result<(ConfigSpec, Snapshot), ConfigError> {
    let spec = parse(text)?;
    let snap = snapshot::build(&spec, version, &|name| std::env::var(name).ok(), prev)?;
    Ok((spec, snap))
}

#[cfg(test)]
mod tests {
    /// The JSON the control plane stores and pushes leaves defaults out; it must read back into
    /// exactly the same configuration.
    #[test]
    fn json_documents_round_trip_with_defaults_left_out() {
        let quickstart = include_str!("../../deploy/examples/quickstart.yaml");
        let custom = r#"
upstreams:
  - { name: u, provider: openai, base_url: "http://x", api_key: k, headers: { x-a: b }, max_concurrency: 7,
      limits: { rpm: 5 }, models: [{ name: m, context_window: 10, capabilities: [chat] }] }
routes:
  - { alias: a, strategy: priority, fallbacks: [b], timeouts: { first_byte_ms: 5 }, failover: { max_attempts: 2 },
      max_prompt_tokens: 9, long_context_alias: b, limits: { tpm: 3 },
      candidates: [{ upstream: u, model: m, weight: 0, priority: 2 }, { upstream: u, model: m }] }
  - { alias: b, candidates: [{ upstream: u, model: m }] }
tenants:
  - { id: t, keys: [{ id: k, sha256: "00", status: revoked, expires_at: "2030-01-01T00:00:00Z", limits: { rpm: 1 } }],
      limits: { concurrency: 2 }, budgets: [{ window: month, usd: 1.5, alias: a, action: { downgrade_to: b } }] }
"#;
        for text in [quickstart, custom] {
            let spec = super::parse(text).unwrap();
            let json = serde_json::to_string(&spec).unwrap();
            let back: ax_protocol::config::ConfigSpec = serde_json::from_str(&json).unwrap();
            assert_eq!(back, spec, "{json}");
        }
        let route = &super::parse(quickstart).unwrap().routes[0];
        assert!(serde_json::to_string(route).unwrap().len() < 250, "defaults are left out");
    }

    #[test]
    fn errors_name_the_field_path() {
        let e = super::parse("upstreams:\n  - name: a\n    provider: nope\n    models: []\n").unwrap_err();
        assert_eq!(e.path, "upstreams[0].provider");
        let e = super::parse("server:\n  lissten: 1\n").unwrap_err();
        assert!(e.path.starts_with("server"), "{e}");
        assert!(e.message.contains("lissten"), "{e}");
    }
}
