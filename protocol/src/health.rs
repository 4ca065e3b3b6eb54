//! The health table of a data plane: served at its `/admin/health`, and sent to the control plane
//! every few seconds (`FromNode::Health`) as the node's health summary.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeHealth {
    /// The configuration version the node serves.
    pub config_version: u64,
    #[serde(default)]
    pub upstreams: Vec<UpstreamStatus>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamStatus {
    pub upstream: String,
    pub provider: String,
    pub in_flight: u32,
    pub max_concurrency: u32,
    pub breaker: BreakerStatus,
    /// The window `models` cover, in ms.
    #[serde(default)]
    pub window_ms: u64,
    pub models: Vec<ModelStatus>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BreakerStatus {
    pub state: BreakerState,
    pub reopens_in_ms: Option<u64>,
}

/// One model of one upstream over the rolling window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelStatus {
    #[serde(default)]
    pub model: String,
    pub requests: u32,
    pub success_rate: Option<f64>,
    pub latency_p50_ms: Option<f64>,
    pub latency_p95_ms: Option<f64>,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p95_ms: Option<f64>,
    pub ttft_ewma_ms: Option<f64>,
}
