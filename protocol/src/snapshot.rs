//! What the control plane pushes to data planes over the websocket, and what they answer.
//!
//! The pushed document is the routing part of a config (`upstreams`, `routes`, `tenants`, `groups`); each
//! data plane keeps its own `server` and `metering` sections from its local file. Every document
//! has a version (strictly increasing) and the SHA-256 of its canonical JSON.

use serde::{Deserialize, Serialize};

use crate::config::{GroupSpec, RouteSpec, TenantSpec, UpstreamSpec};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Document {
    #[serde(default)]
    pub upstreams: Vec<UpstreamSpec>,
    #[serde(default)]
    pub routes: Vec<RouteSpec>,
    #[serde(default)]
    pub tenants: Vec<TenantSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupSpec>,
}

/// Control plane → data plane.
///
/// Generic over the document: a data plane reads a `Document`; the control plane writes the
/// stored text as it is (`ToNode<&RawValue>`), so a large document is neither decoded nor copied
/// to be sent. Decoded through [`WireToNode`], a flat struct: serde decodes an internally tagged
/// enum by first copying the whole message into a generic tree, which doubled the decode time of
/// a 10,000-alias document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    try_from = "WireToNode<D>",
    bound(deserialize = "D: Deserialize<'de>")
)]
pub enum ToNode<D = Document> {
    /// The full current configuration. Upstream API keys travel beside the document (`keys`:
    /// upstream name → key), so the control plane can send the stored document text as it is; the
    /// connection is authenticated by the node token (run it over TLS outside loopback).
    Snapshot {
        version: u64,
        hash: String,
        #[serde(default)]
        keys: std::collections::BTreeMap<String, String>,
        document: D,
    },
    /// The data-plane processes connected to the control plane now (on every replica): what a
    /// local limit is divided by while Redis cannot be reached, in place of `server.replicas`.
    /// Sent on connecting and whenever the count changes; a node that does not know this message
    /// logs it and goes on.
    Fleet { replicas: u32 },
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum ToNodeKind {
    Snapshot,
    Fleet,
}

/// The wire form of [`ToNode`], read in one pass.
#[derive(Deserialize)]
struct WireToNode<D> {
    #[serde(rename = "type")]
    kind: ToNodeKind,
    version: Option<u64>,
    hash: Option<String>,
    #[serde(default)]
    keys: std::collections::BTreeMap<String, String>,
    document: Option<D>,
    replicas: Option<u32>,
}

impl<D> TryFrom<WireToNode<D>> for ToNode<D> {
    type Error = &'static str;

    fn try_from(w: WireToNode<D>) -> Result<Self, Self::Error> {
        match w.kind {
            ToNodeKind::Snapshot => match (w.version, w.hash, w.document) {
                (Some(version), Some(hash), Some(document)) => {
                    Ok(ToNode::Snapshot { version, hash, keys: w.keys, document })
                }
                _ => Err("a snapshot message needs version, hash and document"),
            },
            ToNodeKind::Fleet => {
                w.replicas.map(|replicas| ToNode::Fleet { replicas }).ok_or("a fleet message needs replicas")
            }
        }
    }
}

/// Data plane → control plane.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromNode {
    /// First message on every connection: the version the node serves (0: none yet).
    Hello { version: u64 },
    /// The version was validated and swapped in.
    Applied { version: u64 },
    /// The version was refused; the node keeps serving the one it had.
    Rejected { version: u64, error: String },
    /// The node's health table, every few seconds (its health summary in the admin API).
    Health { health: crate::health::NodeHealth },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn to_node_round_trips_through_its_wire_form() {
        let msg = ToNode::Snapshot {
            version: 7,
            hash: "abc".into(),
            keys: [("a".to_owned(), "sk".to_owned())].into(),
            document: Document::default(),
        };
        let text = serde_json::to_string(&msg).unwrap_or_default();
        assert!(text.starts_with(r#"{"type":"snapshot","#), "{text}");
        assert_eq!(serde_json::from_str::<ToNode>(&text).ok(), Some(msg));
        assert!(serde_json::from_str::<ToNode>(r#"{"type":"other","version":1,"hash":"","document":{}}"#).is_err());
        assert!(serde_json::from_str::<ToNode>(r#"{"type":"snapshot","version":1,"hash":""}"#).is_err());
        let fleet = ToNode::<Document>::Fleet { replicas: 3 };
        let text = serde_json::to_string(&fleet).unwrap_or_default();
        assert_eq!(text, r#"{"type":"fleet","replicas":3}"#);
        assert_eq!(serde_json::from_str::<ToNode>(&text).ok(), Some(fleet));
    }

    /// What the control plane writes around a stored document's text is what a data plane reads.
    #[test]
    fn a_raw_document_is_sent_as_it_is() {
        let text = r#"{"upstreams":[],"routes":[],"tenants":[]}"#;
        let raw: Box<serde_json::value::RawValue> =
            serde_json::value::RawValue::from_string(text.to_owned()).unwrap_or_else(|e| unreachable!("{e}"));
        let msg = ToNode::Snapshot { version: 3, hash: "h".into(), keys: Default::default(), document: &*raw };
        let wire = serde_json::to_string(&msg).unwrap_or_default();
        assert!(wire.contains(text), "{wire}");
        let read = serde_json::from_str::<ToNode>(&wire).ok();
        let want =
            ToNode::Snapshot { version: 3, hash: "h".into(), keys: Default::default(), document: Document::default() };
        assert_eq!(read, Some(want));
    }
}
