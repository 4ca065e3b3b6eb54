//! Bodies of the control plane's admin API: the control plane serializes these types and the UI
//! deserializes the same ones (and the other way for request bodies), so a renamed field breaks
//! the build, not a page. Only the audit log's before and after stay free JSON: they are whatever
//! entity the entry is about.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::{
    BudgetAction, BudgetSpec, FailoverSpec, LimitsSpec, Strategy, TenantSpec, TimeoutOverrides, UpstreamSpec,
};

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

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
    /// Groups (`PUT /groups/{id}`) whose pooled budgets this tenant's spend counts against.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Record the tenant's prompts and completions in its trace spans.
    #[serde(default)]
    pub trace_content: bool,
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
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default)]
    pub trace_content: bool,
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
    /// `tenant`, `key` or `group`.
    #[serde(default = "tenant_scope")]
    pub scope: String,
    /// The tenant (of a tenant's or a key's budget; empty for a group's).
    pub tenant: String,
    /// The key's or the group's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// A group's member tenants (whose spend it pools).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<String>,
    /// `day`, `week` (Monday to Sunday) or `month`.
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

fn tenant_scope() -> String {
    "tenant".to_owned()
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

/// `PUT /tenants/{id}`: the tenant as stored, and the configuration version the change made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantSaved {
    pub tenant: Option<TenantSpec>,
    pub version: i64,
}

// ---------- keys ----------

/// `POST /tenants/{id}/keys` (every field optional; an empty body is allowed).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyIn {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsSpec>,
    /// The key's limits per alias, on top of `limits`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub alias_limits: BTreeMap<String, LimitsSpec>,
    /// The key's own budgets, on top of its tenant's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<BudgetSpec>,
}

/// `PUT /keys/{id}`: a key's limits, per-alias limits and budgets, replaced whole.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyPolicy {
    #[serde(default)]
    pub limits: LimitsSpec,
    #[serde(default)]
    pub alias_limits: BTreeMap<String, LimitsSpec>,
    #[serde(default)]
    pub budgets: Vec<BudgetSpec>,
}

/// The answer to `PUT /keys/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyPolicySaved {
    pub id: String,
    pub tenant: String,
    pub policy: KeyPolicy,
    pub version: i64,
}

/// `PUT /groups/{id}`: a group of tenants' pooled budgets (tenants join in their `groups`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupIn {
    #[serde(default)]
    pub budgets: Vec<BudgetSpec>,
}

/// One group in `GET /groups`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupView {
    pub id: String,
    pub budgets: Vec<BudgetSpec>,
    /// The tenants that name it.
    pub tenants: Vec<String>,
}

/// `GET /groups`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupList {
    pub groups: Vec<GroupView>,
}

/// The answer to `PUT /groups/{id}` and `DELETE /groups/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupSaved {
    pub id: String,
    pub version: i64,
}

/// The answer to `POST /tenants/{id}/keys`: the only time the key itself is shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyCreated {
    pub id: String,
    pub key: String,
    /// The key's first characters, as lists show it.
    pub prefix: String,
    pub tenant: String,
    pub version: i64,
    pub note: String,
}

/// One key in `GET /tenants/{id}/keys`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyView {
    pub id: String,
    pub prefix: String,
    /// `active` or `revoked`.
    pub status: String,
    /// RFC 3339 UTC.
    pub expires_at: Option<String>,
    pub created_at: String,
    #[serde(default)]
    pub limits: LimitsSpec,
    #[serde(default)]
    pub alias_limits: BTreeMap<String, LimitsSpec>,
    #[serde(default)]
    pub budgets: Vec<BudgetSpec>,
}

/// `GET /tenants/{id}/keys`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyList {
    pub keys: Vec<KeyView>,
}

/// `POST /keys/{id}/revoke`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyRevoked {
    pub id: String,
    pub status: String,
    pub version: i64,
}

// ---------- upstreams ----------

/// One upstream as the API shows it: its spec without the key (write-only), and whether a key is
/// stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamView {
    #[serde(flatten)]
    pub spec: UpstreamSpec,
    pub has_key: bool,
}

/// `GET /upstreams`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamList {
    pub upstreams: Vec<UpstreamView>,
}

/// `PUT /upstreams/{name}`: the upstream as stored and the version the change made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamSaved {
    pub upstream: Option<UpstreamView>,
    pub version: i64,
}

/// `DELETE /upstreams/{name}`, `DELETE /routes/{alias}`: what went, and the version that made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deleted {
    pub deleted: String,
    pub version: i64,
}

// ---------- routes ----------

fn one() -> i64 {
    1
}

fn yes() -> bool {
    true
}

/// One candidate of a route as the API takes and shows it. Signed numbers, so a negative weight
/// is a field error, not a decode error; `enabled: false` keeps the weight but sends no traffic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CandidateIn {
    pub upstream: String,
    pub model: String,
    #[serde(default = "one")]
    pub weight: i64,
    #[serde(default)]
    pub priority: i64,
    #[serde(default = "yes")]
    pub enabled: bool,
}

/// `PUT /routes/{alias}` and `POST /routes/{alias}/preview`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteIn {
    /// Must match the URL when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    #[serde(default)]
    pub strategy: Strategy,
    pub candidates: Vec<CandidateIn>,
    #[serde(default)]
    pub fallbacks: Vec<String>,
    #[serde(default)]
    pub timeouts: TimeoutOverrides,
    #[serde(default)]
    pub failover: FailoverSpec,
    #[serde(default)]
    pub max_prompt_tokens: Option<u32>,
    #[serde(default)]
    pub long_context_alias: Option<String>,
    #[serde(default)]
    pub limits: LimitsSpec,
}

/// One route as the API shows it: the `config` route with each candidate's configured weight and
/// `enabled` flag (a data plane sees a disabled candidate as weight 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteView {
    pub alias: String,
    #[serde(default)]
    pub strategy: Strategy,
    pub candidates: Vec<CandidateView>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub timeouts: TimeoutOverrides,
    #[serde(default, skip_serializing_if = "is_default")]
    pub failover: FailoverSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_prompt_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub long_context_alias: Option<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub limits: LimitsSpec,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateView {
    pub upstream: String,
    pub model: String,
    pub weight: u32,
    pub priority: u32,
    pub enabled: bool,
}

/// `GET /routes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteList {
    pub routes: Vec<RouteView>,
}

/// `PUT /routes/{alias}`: the route as stored and the version the change made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteSaved {
    pub route: Option<RouteView>,
    pub version: i64,
}

/// A candidate's share of its alias's traffic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Share {
    pub upstream: String,
    pub model: String,
    pub weight: u32,
    /// Percent, one decimal.
    pub share_pct: f64,
}

/// The alias's recent traffic, the basis of a preview's projected cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageSummary {
    pub requests_per_day: f64,
    pub avg_prompt_tokens: f64,
    pub avg_completion_tokens: f64,
}

/// `POST /routes/{alias}/preview`: what a route change would do, without committing it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoutePreview {
    pub alias: String,
    pub before: Option<RouteView>,
    pub after: Option<RouteView>,
    pub shares_before: Vec<Share>,
    pub shares_after: Vec<Share>,
    pub usage_last_7_days: UsageSummary,
    /// The traffic the projection is made from: since yesterday 00:00 UTC (24 to 48 hours) when
    /// the alias had 20 requests or more there, else the last 7 days.
    pub usage: UsageSummary,
    /// The hours `usage` was measured over.
    pub usage_window_hours: f64,
    /// Which window, in words, for the UI ("the last 31 h (since yesterday 00:00 UTC)").
    pub usage_window: String,
    /// USD per day at `usage`'s rate, 4 places; `None` without traffic or prices.
    pub projected_daily_cost_usd_before: Option<String>,
    pub projected_daily_cost_usd_after: Option<String>,
}

// ---------- versions and nodes ----------

/// `POST /versions/{version}/rollback`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RolledBack {
    pub restored: i64,
    pub version: i64,
}

/// `POST /nodes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeIn {
    pub id: String,
}

/// The answer to `POST /nodes`: the only time the node token is shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeCreated {
    pub id: String,
    pub token: String,
}

// ---------- reports and usage ----------

/// One tenant in `GET /reports/top`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopSpender {
    pub tenant: String,
    pub requests: i64,
    pub tokens: i64,
    pub cost_micro_usd: i64,
    pub cost_usd: String,
}

/// `GET /reports/top`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopSpenders {
    pub tenants: Vec<TopSpender>,
}

/// `GET /reports/recent`: the fleet's traffic over the last minutes, from the usage records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecentTraffic {
    /// The window, in minutes (ending now).
    pub minutes: i64,
    pub requests: i64,
    /// Requests that ended with an error code.
    pub errors: i64,
    pub cost_micro_usd: i64,
    /// Per upstream (requests refused before one was chosen have an empty name), by name.
    pub upstreams: Vec<RecentUpstream>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecentUpstream {
    pub upstream: String,
    pub requests: i64,
    pub errors: i64,
    /// 95th percentile of the whole request's latency, ms (None without requests).
    pub latency_p95_ms: Option<f64>,
    /// 95th percentile of the time to the first streamed byte, ms (None without streams).
    pub ttft_p95_ms: Option<f64>,
}

/// The answer to a usage batch (`POST /usage`, a data plane's spool).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageAck {
    pub received: usize,
    pub inserted: i64,
    pub duplicates: i64,
    pub dead_lettered: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream's view is its spec with `has_key` beside the spec's own fields, and reads back.
    #[test]
    fn upstream_views_are_flat_and_round_trip() {
        let spec: UpstreamSpec = serde_json::from_str(
            r#"{"name":"u","provider":"openai","base_url":"http://x","models":[{"name":"m","context_window":8,"capabilities":["chat"]}]}"#,
        )
        .unwrap_or_else(|e| unreachable!("{e}"));
        let v = UpstreamView { spec, has_key: true };
        let text = serde_json::to_string(&v).unwrap_or_default();
        assert!(text.contains(r#""has_key":true"#) && text.contains(r#""name":"u""#), "{text}");
        assert!(!text.contains("\"spec\""), "{text}");
        assert_eq!(serde_json::from_str::<UpstreamView>(&text).ok(), Some(v));
    }
}

// ---------- operators ----------

/// One operator account as the API shows it (`GET /operators`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperatorView {
    pub username: String,
    /// `admin`, `operator` or `finance`.
    pub role: String,
    pub disabled: bool,
    /// Has a one-time password it has not replaced yet.
    pub must_change_password: bool,
    /// Signs in through single sign-on (the provider owns its role; it has no password here).
    #[serde(default)]
    pub sso: bool,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// Live sessions.
    pub sessions: i64,
}

/// `GET /operators`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperatorList {
    pub operators: Vec<OperatorView>,
}

/// `GET /sso`: how operators sign in (asked by the login page before anyone is signed in).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignInOptions {
    /// Username and password (`POST /login`).
    pub password: bool,
    /// Single sign-on's button label (`GET /sso/login`), when configured.
    pub sso: Option<String>,
}

/// `POST /operators` and `POST /operators/{username}/reset-password`: the operator and its
/// one-time password, shown in this response only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperatorPassword {
    pub operator: OperatorView,
    pub one_time_password: String,
    pub note: String,
}

/// `GET /requests`: the request explorer's page of requests, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestList {
    pub requests: Vec<RequestRow>,
    /// The cursor of the next (older) page, when there may be one: pass it back as `before`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// One request, as the explorer lists it (its record's headline fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRow {
    pub request_id: String,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub tenant: String,
    pub key_id: String,
    pub alias: String,
    /// The upstream and model of the attempt that answered (or of the last one).
    pub upstream: String,
    pub model: String,
    pub status: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    pub attempts: i64,
    pub stream: bool,
    pub latency_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<i64>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cost_micro_usd: i64,
}

/// `GET /requests/{id}`: one request's whole record (its attempts, tokens, cost) and the data
/// plane that served it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestDetail {
    /// RFC 3339, UTC.
    pub started_at: String,
    pub node: String,
    pub record: crate::usage::UsageRecord,
}
