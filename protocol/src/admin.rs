//! Bodies of the control plane's admin API that the UI reads and writes: the control plane
//! serializes these types and the UI deserializes the same ones, so a renamed field breaks the
//! build, not a page. (Routes and upstreams travel as their `config` specs.)

use serde::{Deserialize, Serialize};

use crate::config::{BudgetAction, BudgetSpec, LimitsSpec};

/// `PUT /tenants/{id}`: create (admin) or update (operator) a tenant's aliases, limits, budgets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantIn {
    /// Must match the URL when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default = "all_aliases")]
    pub allowed_aliases: Vec<String>,
    #[serde(default)]
    pub limits: LimitsSpec,
    #[serde(default)]
    pub budgets: Vec<BudgetSpec>,
}

fn all_aliases() -> Vec<String> {
    vec!["*".to_owned()]
}

/// One tenant in `GET /tenants`: its spec (without keys) and how many keys it has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantView {
    pub id: String,
    pub allowed_aliases: Vec<String>,
    #[serde(default)]
    pub limits: LimitsSpec,
    #[serde(default)]
    pub budgets: Vec<BudgetSpec>,
    /// Keys not revoked or expired.
    pub active_keys: i64,
    /// All keys ever created.
    pub keys: i64,
}

/// `GET /tenants`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantList {
    pub tenants: Vec<TenantView>,
}

/// One row of `GET /reports/cost`: a period and a group (tenant, alias, model or key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostRow {
    /// First day of the period, `YYYY-MM-DD`.
    pub period: String,
    /// The group's value; the row also carries it under the group's name (`"tenant": "acme"`).
    pub group: String,
    pub requests: i64,
    pub errors: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cached_tokens: i64,
    pub cache_write_tokens: i64,
    pub cost_micro_usd: i64,
    /// The same cost as a decimal string with 6 places.
    pub cost_usd: String,
}

/// `GET /reports/cost` (JSON; `format=csv` gives the same rows as CSV).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostReport {
    /// `day` or `month`.
    pub period: String,
    /// `tenant`, `alias`, `model` or `key`.
    pub by: String,
    pub rows: Vec<CostRow>,
    /// The exact sum of the rows' `cost_micro_usd`.
    pub total_micro_usd: i64,
    pub total_usd: String,
}

/// One budget's burn in `GET /reports/budgets`: the cap and what its current period spent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetBurn {
    pub tenant: String,
    /// `day` or `month`.
    pub window: String,
    #[serde(default)]
    pub alias: Option<String>,
    pub cap_usd: String,
    pub spent_usd: String,
    pub spent_micro_usd: i64,
    /// Spent ÷ cap in %, one decimal.
    pub used_pct: f64,
    pub action: BudgetAction,
    pub warn_at: f64,
}

/// `GET /reports/budgets`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetReport {
    pub budgets: Vec<BudgetBurn>,
    /// The zone of the days and months (the usage rollups are UTC days).
    pub timezone: String,
}

/// One data plane in `GET /nodes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    pub id: String,
    /// The configuration version it last applied; `None` before its first.
    pub applied_version: Option<i64>,
    /// Its last refusal (`version N: …`) or connection error.
    pub last_error: Option<String>,
    /// RFC 3339 UTC.
    pub last_seen: Option<String>,
    /// Its latest health summary (sent every 5 s).
    pub health: Option<crate::health::NodeHealth>,
    /// Connected now, to any control-plane replica (a websocket heard from in the last 30 s).
    pub connected: bool,
    /// Open websockets on this node's token (several processes may share one), on all replicas.
    #[serde(default)]
    pub connections: i64,
    /// Usage records of this node kept in the dead-letter table (unreadable, or refused by the
    /// database) instead of being counted.
    #[serde(default)]
    pub dead_letters: i64,
}

/// `GET /nodes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeList {
    pub latest_version: Option<i64>,
    pub nodes: Vec<NodeView>,
}

/// One committed configuration in `GET /versions` (newest first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VersionView {
    pub version: i64,
    /// SHA-256 of the document: equal hashes, equal configurations.
    pub hash: String,
    pub author: String,
    pub summary: String,
    /// RFC 3339 UTC.
    pub created_at: String,
}

/// `GET /versions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VersionList {
    pub versions: Vec<VersionView>,
}

/// One change in `GET /audit`: who did what to which target, the entity before and after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub id: i64,
    pub operator: String,
    pub action: String,
    pub target: String,
    pub before: Option<serde_json::Value>,
    pub after: Option<serde_json::Value>,
    /// RFC 3339 UTC.
    pub at: String,
}

/// `GET /audit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditList {
    pub entries: Vec<AuditEntry>,
}
