//! What the control plane pushes to data planes over the websocket, and what they answer.
//!
//! The pushed document is the routing part of a config (`upstreams`, `routes`, `tenants`); each
//! data plane keeps its own `server` and `metering` sections from its local file. Every document
//! has a version (strictly increasing) and the SHA-256 of its canonical JSON.

use serde::{Deserialize, Serialize};

use crate::config::{RouteSpec, TenantSpec, UpstreamSpec};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Document {
    #[serde(default)]
    pub upstreams: Vec<UpstreamSpec>,
    #[serde(default)]
    pub routes: Vec<RouteSpec>,
    #[serde(default)]
    pub tenants: Vec<TenantSpec>,
}

/// Control plane → data plane.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToNode {
    /// The full current configuration. Upstream API keys travel beside the document (`keys`:
    /// upstream name → key), so the control plane can send the stored document text as it is; the
    /// connection is authenticated by the node token (run it over TLS outside loopback).
    Snapshot {
        version: u64,
        hash: String,
        #[serde(default)]
        keys: std::collections::BTreeMap<String, String>,
        document: Document,
    },
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
}
