//! Standalone (DB-less) configuration: a YAML file decoded into `ax_protocol::config::ConfigSpec`
//! with errors that name the field path, then compiled by `snapshot::build`.

use std::path::Path;

use ax_protocol::config::ConfigSpec;

use crate::snapshot::{self, ConfigError, Snapshot};

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
    let spec = parse(&text)?;
    let snap = snapshot::build(&spec, version, &|name| std::env::var(name).ok(), prev)?;
    Ok((spec, snap))
}

#[cfg(test)]
mod tests {
    #[test]
    fn errors_name_the_field_path() {
        let e = super::parse("upstreams:\n  - name: a\n    provider: nope\n    models: []\n").unwrap_err();
        assert_eq!(e.path, "upstreams[0].provider");
        let e = super::parse("server:\n  lissten: 1\n").unwrap_err();
        assert!(e.path.starts_with("server"), "{e}");
        assert!(e.message.contains("lissten"), "{e}");
    }
}
