//! Tenants as the snapshot has them: their keys, rate limits and budgets.

use super::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSpec {
    pub id: String,
    pub keys: Vec<KeySpec>,
    /// Aliases this tenant may call; `"*"` allows all.
    #[serde(default = "default_allowed")]
    pub allowed_aliases: Vec<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub limits: LimitsSpec,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<BudgetSpec>,
    /// Groups (`groups[].id`) whose pooled budgets this tenant's spend counts against.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Record this tenant's prompts and completions in its requests' trace spans
    /// (`gen_ai.input.messages`, `gen_ai.output.messages`; docs/observability.md). Off: spans carry
    /// no content.
    #[serde(default, skip_serializing_if = "is_default")]
    pub trace_content: bool,
}

/// A spending cap for a tenant, a key or a group (or for one alias of it) per day, week or month.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetSpec {
    pub window: BudgetWindow,
    /// The cap in USD (at most 6 decimals).
    pub usd: f64,
    /// Only requests for this alias count (and are capped); all of the tenant's otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    #[serde(default)]
    pub action: BudgetAction,
    /// Share of the cap from which responses carry `x-ax-budget-warning`.
    #[serde(default = "default_warn_at")]
    pub warn_at: f64,
    /// With Redis: reserve every request's cost there (one round trip each) instead of drawing
    /// from it in blocks (docs/budgets.md).
    #[serde(default, skip_serializing_if = "is_default")]
    pub exact: bool,
    /// With Redis, what the budget does while Redis cannot be reached (docs/budgets.md).
    #[serde(default, skip_serializing_if = "is_default")]
    pub on_redis_down: RedisDown,
}

/// A fleet-wide budget while Redis is unreachable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedisDown {
    /// Spend only what this replica's lease already holds (counted in Redis), then refuse with
    /// 503 `budget_unavailable`: the budget is never overspent.
    #[default]
    FailClosed,
    /// Spend against `limit ÷ server.replicas` locally: requests go on, and the fleet may spend
    /// up to the budget once more during the outage.
    FailOpen,
}

fn default_warn_at() -> f64 {
    0.8
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetWindow {
    Day,
    /// Monday to Sunday.
    Week,
    Month,
}

impl BudgetWindow {
    pub fn name(self) -> &'static str {
        match self {
            Self::Day => "day",
            Self::Week => "week",
            Self::Month => "month",
        }
    }
}

/// `action: reject`, `action: warn` or `action: { downgrade_to: <alias> }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BudgetAction {
    /// Serve the request with this (cheaper) alias instead.
    DowngradeTo {
        downgrade_to: String,
    },
    Plain(PlainBudgetAction),
}

impl Default for BudgetAction {
    fn default() -> Self {
        Self::Plain(PlainBudgetAction::Reject)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlainBudgetAction {
    /// 429 `budget_exceeded`.
    Reject,
    /// Serve anyway: responses carry `x-ax-budget-warning` (with `exceeded`), nothing is refused.
    Warn,
}

fn default_allowed() -> Vec<String> {
    vec!["*".to_owned()]
}

/// Rate limits of one subject (tenant, key, alias or upstream); each absent field is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSpec {
    /// Requests per minute (sliding window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<u32>,
    /// Tokens per minute: reserved before the call (prompt estimate + max_tokens), settled after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpm: Option<u32>,
    /// Requests in flight (streams count until they end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// With Redis: count every request there (one round trip each) instead of drawing quota in
    /// blocks (docs/limits.md).
    #[serde(default, skip_serializing_if = "is_default")]
    pub exact: bool,
}

/// One API key of a tenant. The config never holds a key in plaintext: either its SHA-256
/// digest (hex) or a `${ENV}` reference to a variable holding the key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeySpec {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default)]
    pub status: KeyStatus,
    /// RFC 3339 time after which the key is refused, e.g. `2027-01-01T00:00:00Z`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Limits of this key alone, on top of the tenant's.
    #[serde(default, skip_serializing_if = "is_default")]
    pub limits: LimitsSpec,
    /// Limits of this key per alias it calls (on top of `limits`): `{ chat-pro: { rpm: 10 } }`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub alias_limits: BTreeMap<String, LimitsSpec>,
    /// Budgets of this key alone, on top of its tenant's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<BudgetSpec>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyStatus {
    #[default]
    Active,
    Revoked,
}
