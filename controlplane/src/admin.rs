//! The admin API (`/api/v1/…`): tenants and their keys, upstreams (write-only keys), routes and
//! weights, versions and rollback, data-plane nodes, the audit log. Every handler decodes its
//! request into an `ax_protocol::admin` type, calls the store, and answers another such type.
//! Every mutation runs in one transaction, validates the whole resulting configuration before it
//! commits (422 naming the field), is audited, and makes a new version that is pushed to every
//! data plane.

use ax_protocol::admin::{
    AuditList, Deleted, GroupIn, GroupList, GroupSaved, GroupView, KeyCreated, KeyIn, KeyList, KeyPolicy,
    KeyPolicySaved, KeyRevoked, NodeCreated, NodeIn, NodeList, RolledBack, RouteIn, RouteList, RoutePreview,
    RouteSaved, RouteView, Share, TenantIn, TenantList, TenantSaved, TenantView, UpstreamList, UpstreamSaved,
    UpstreamView, UsageSummary, VersionList,
};
use ax_protocol::config::{CandidateSpec, GroupSpec, RouteSpec, Strategy, TenantSpec, UpstreamSpec};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::Value;
use sqlx::PgConnection;

use crate::auth::{Caller, Role};
use crate::document::{self, commit, Focus};
use crate::error::{decode, ApiError, ApiResult, FieldError};
use crate::extract::{ApiBody, ApiPath, ApiQuery};
use crate::store::{self, versions::audit};
use crate::{crypto, AppState};

type Reply<T> = ApiResult<Json<T>>;

fn valid_name(path: &str, name: &str) -> ApiResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '/'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::field(path, "1-128 characters: letters, digits, - _ . : /"))
    }
}

/// An entity as the audit log keeps it.
fn audited<T: serde::Serialize>(v: Option<&T>) -> Option<Value> {
    v.and_then(|v| serde_json::to_value(v).ok())
}

// ---------- tenants ----------

pub async fn list_tenants(State(s): State<AppState>, caller: Caller) -> Reply<TenantList> {
    caller.require(Role::Operator)?;
    // A stored spec that no longer reads is an error, not a tenant silently missing from the list.
    let tenants = store::config::tenants_with_key_counts(&s.db)
        .await?
        .into_iter()
        .map(|(spec, active_keys, keys)| {
            let t: TenantSpec = serde_json::from_value(spec).map_err(|e| ApiError::internal("tenant spec", e))?;
            Ok(TenantView {
                id: t.id,
                allowed_aliases: t.allowed_aliases,
                limits: t.limits,
                budgets: t.budgets,
                groups: t.groups,
                trace_content: t.trace_content,
                active_keys,
                keys,
            })
        })
        .collect::<ApiResult<Vec<_>>>()?;
    Ok(Json(TenantList { tenants }))
}

/// Create (admin) when the tenant is new; update its limits, aliases and budgets (operator).
pub async fn put_tenant(
    State(s): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> Reply<TenantSaved> {
    caller.require(Role::Operator)?;
    valid_name("id", &id)?;
    let t: TenantIn = decode(&body)?;
    if t.id.as_ref().is_some_and(|b| *b != id) {
        return Err(ApiError::field("id", "does not match the URL"));
    }
    let mut tx = s.db.begin().await?;
    let before = store::config::tenant_json(&mut tx, &id).await?;
    if before.is_none() {
        caller.require(Role::Admin)?;
    }
    let spec = TenantSpec {
        id: id.clone(),
        keys: Vec::new(),
        allowed_aliases: t.allowed_aliases,
        limits: t.limits,
        budgets: t.budgets,
        groups: t.groups,
        trace_content: t.trace_content,
    };
    store::config::write_tenant(&mut tx, &spec).await?;
    let after = store::config::tenant_json(&mut tx, &id).await?;
    if let Some(version) = unchanged(&mut tx, &before, &after).await? {
        let tenant = after.map(serde_json::from_value).transpose().map_err(|e| ApiError::internal("tenant spec", e))?;
        return Ok(Json(TenantSaved { tenant, version }));
    }
    let action = if before.is_some() { "tenant.update" } else { "tenant.create" };
    audit(&mut tx, &caller.username, action, &id, before, after.clone()).await?;
    let version = commit(&mut tx, &caller.username, &format!("tenant {id}"), Focus::Tenant(&id), s.verify()).await?;
    tx.commit().await?;
    let tenant = after.map(serde_json::from_value).transpose().map_err(|e| ApiError::internal("tenant spec", e))?;
    Ok(Json(TenantSaved { tenant, version }))
}

/// A PUT whose entity reads the same after as before changes nothing: no audit entry and no
/// version (the caller drops the transaction); the current version is the answer. `None` when it
/// is a change (or no version is stored yet).
async fn unchanged<T: PartialEq>(
    conn: &mut sqlx::PgConnection,
    before: &Option<T>,
    after: &Option<T>,
) -> ApiResult<Option<i64>> {
    if before.is_none() || before != after {
        return Ok(None);
    }
    store::versions::newest(conn).await
}

// ---------- keys ----------

/// Creates a key; the key itself is in this response only (stored as its SHA-256).
pub async fn create_key(
    State(s): State<AppState>,
    caller: Caller,
    ApiPath(tenant): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> Reply<KeyCreated> {
    caller.require(Role::Admin)?;
    let mut k: KeyIn = if body.is_empty() { KeyIn::default() } else { decode(&body)? };
    let id = k.id.take().unwrap_or_else(|| format!("{tenant}-{}", &crypto::token(6)[..8]));
    valid_name("id", &id)?;
    if let Some(e) = &k.expires_at {
        // Stored as Postgres reads it: the parsed time in UTC, years 1970 to 9999.
        match e.parse::<jiff::Timestamp>() {
            Ok(t) if (0..=253_402_300_799).contains(&t.as_second()) => {
                k.expires_at = Some(t.to_string());
            }
            _ => {
                return Err(ApiError::field(
                    "expires_at",
                    "an RFC 3339 time such as 2027-01-01T00:00:00Z (years 1970-9999)",
                ))
            }
        }
    }
    let mut tx = s.db.begin().await?;
    if store::config::tenant_json(&mut tx, &tenant).await?.is_none() {
        return Err(ApiError::not_found(format!("tenant '{tenant}'")));
    }
    let key = format!("ax-{}", crypto::token(30));
    let prefix: String = key.chars().take(8).collect();
    let limits = k.limits.map(|l| serde_json::to_value(l).unwrap_or_default());
    let inserted = store::config::insert_key(
        &mut tx,
        &id,
        &tenant,
        &crypto::digest(&key),
        &prefix,
        k.expires_at.as_deref(),
        limits,
    )
    .await?;
    if !inserted {
        return Err(ApiError::conflict(format!("a key with id '{id}' exists")));
    }
    if !k.alias_limits.is_empty() || !k.budgets.is_empty() {
        let limits = k.limits.unwrap_or_default();
        store::config::set_key_policy(&mut tx, &id, &limits, &k.alias_limits, &k.budgets).await?;
    }
    let after = serde_json::json!({ "id": id, "tenant": tenant, "prefix": prefix, "expires_at": k.expires_at });
    audit(&mut tx, &caller.username, "key.create", &id, None, Some(after)).await?;
    let version = commit(&mut tx, &caller.username, &format!("key {id}"), Focus::Key(&tenant, &id), s.verify()).await?;
    tx.commit().await?;
    let note = "the key is shown once; only its SHA-256 is stored".to_owned();
    Ok(Json(KeyCreated { id, key, prefix, tenant, version, note }))
}

pub async fn list_keys(State(s): State<AppState>, caller: Caller, ApiPath(tenant): ApiPath<String>) -> Reply<KeyList> {
    caller.require(Role::Operator)?;
    Ok(Json(KeyList { keys: store::config::keys_of(&s.db, &tenant).await? }))
}

pub async fn revoke_key(State(s): State<AppState>, caller: Caller, ApiPath(id): ApiPath<String>) -> Reply<KeyRevoked> {
    caller.require(Role::Admin)?;
    let mut tx = s.db.begin().await?;
    let tenant = store::config::revoke_key(&mut tx, &id).await?;
    let tenant = tenant.ok_or_else(|| ApiError::not_found(format!("key '{id}'")))?;
    let after = serde_json::json!({ "status": "revoked" });
    audit(&mut tx, &caller.username, "key.revoke", &id, None, Some(after)).await?;
    let summary = format!("revoke key {id}");
    let version = commit(&mut tx, &caller.username, &summary, Focus::Tenant(&tenant), s.verify()).await?;
    tx.commit().await?;
    Ok(Json(KeyRevoked { id, status: "revoked".to_owned(), version }))
}

/// `PUT /keys/{id}`: replaces a key's limits, per-alias limits and budgets (operator).
pub async fn put_key(
    State(s): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> Reply<KeyPolicySaved> {
    caller.require(Role::Operator)?;
    let policy: KeyPolicy = decode(&body)?;
    let mut tx = s.db.begin().await?;
    let before = store::config::key_policy_json(&mut tx, &id).await?;
    let tenant = store::config::set_key_policy(&mut tx, &id, &policy.limits, &policy.alias_limits, &policy.budgets)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("key '{id}'")))?;
    let after = store::config::key_policy_json(&mut tx, &id).await?;
    if let Some(version) = unchanged(&mut tx, &before, &after).await? {
        return Ok(Json(KeyPolicySaved { id, tenant, policy, version }));
    }
    audit(&mut tx, &caller.username, "key.update", &id, before, after).await?;
    let version = commit(&mut tx, &caller.username, &format!("key {id}"), Focus::Key(&tenant, &id), s.verify()).await?;
    tx.commit().await?;
    Ok(Json(KeyPolicySaved { id, tenant, policy, version }))
}

// ---------- groups ----------

pub async fn list_groups(State(s): State<AppState>, caller: Caller) -> Reply<GroupList> {
    caller.require(Role::Operator)?;
    let mut conn = s.db.acquire().await?;
    let groups = store::config::load_groups(&mut conn).await?;
    let members = store::config::group_members(&mut conn, None).await?;
    let groups = groups
        .into_iter()
        .map(|g| {
            let tenants = members.iter().filter(|(group, _)| *group == g.id).map(|(_, t)| t.clone()).collect();
            GroupView { id: g.id, budgets: g.budgets, tenants }
        })
        .collect();
    Ok(Json(GroupList { groups }))
}

/// Creates (admin) or updates (operator) a group's budgets.
pub async fn put_group(
    State(s): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> Reply<GroupSaved> {
    caller.require(Role::Operator)?;
    valid_name("id", &id)?;
    let g: GroupIn = decode(&body)?;
    let mut tx = s.db.begin().await?;
    let before = store::config::group_json(&mut tx, &id).await?;
    if before.is_none() {
        caller.require(Role::Admin)?;
    }
    store::config::write_group(&mut tx, &GroupSpec { id: id.clone(), budgets: g.budgets }).await?;
    let after = store::config::group_json(&mut tx, &id).await?;
    if let Some(version) = unchanged(&mut tx, &before, &after).await? {
        return Ok(Json(GroupSaved { id, version }));
    }
    let action = if before.is_some() { "group.update" } else { "group.create" };
    audit(&mut tx, &caller.username, action, &id, before, after).await?;
    let version = commit(&mut tx, &caller.username, &format!("group {id}"), Focus::Group(&id), s.verify()).await?;
    tx.commit().await?;
    Ok(Json(GroupSaved { id, version }))
}

/// Deletes a group no tenant names (409 `conflict` naming them otherwise).
pub async fn delete_group(
    State(s): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Reply<GroupSaved> {
    caller.require(Role::Admin)?;
    let mut tx = s.db.begin().await?;
    let members: Vec<String> =
        store::config::group_members(&mut tx, Some(&id)).await?.into_iter().map(|(_, t)| t).collect();
    if !members.is_empty() {
        return Err(ApiError::conflict(format!(
            "tenants {} are in group '{id}': take them out first",
            members.join(", ")
        )));
    }
    let before = store::config::group_json(&mut tx, &id).await?;
    if !store::config::delete_group(&mut tx, &id).await? {
        return Err(ApiError::not_found(format!("group '{id}'")));
    }
    audit(&mut tx, &caller.username, "group.delete", &id, before, None).await?;
    let version = commit(&mut tx, &caller.username, &format!("delete group {id}"), Focus::None, s.verify()).await?;
    tx.commit().await?;
    Ok(Json(GroupSaved { id, version }))
}

// ---------- upstreams ----------

/// Upstreams as the API shows them (all, or the one named): no key, `has_key` instead.
async fn upstream_views(conn: &mut PgConnection, only: Option<&str>) -> ApiResult<Vec<UpstreamView>> {
    Ok(store::config::load_upstreams(conn, only)
        .await?
        .into_iter()
        .map(|(mut spec, has_key)| {
            spec.api_key = None;
            UpstreamView { spec, has_key }
        })
        .collect())
}

async fn upstream_view(conn: &mut PgConnection, name: &str) -> ApiResult<Option<UpstreamView>> {
    Ok(upstream_views(conn, Some(name)).await?.pop())
}

pub async fn list_upstreams(State(s): State<AppState>, caller: Caller) -> Reply<UpstreamList> {
    caller.require(Role::Operator)?;
    let upstreams = upstream_views(&mut *s.db.acquire().await?, None).await?;
    Ok(Json(UpstreamList { upstreams }))
}

/// Creates or replaces an upstream (admin). `api_key` is write-only: stored encrypted, never
/// returned; leave it out to keep the current key.
pub async fn put_upstream(
    State(s): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> Reply<UpstreamSaved> {
    caller.require(Role::Admin)?;
    valid_name("name", &name)?;
    // The name may be left out of the body: the URL gives it.
    let mut v: Value = decode(&body)?;
    if let Some(o) = v.as_object_mut() {
        o.entry("name").or_insert_with(|| Value::from(name.as_str()));
    }
    let u: UpstreamSpec = decode(&serde_json::to_vec(&v).unwrap_or_default())?;
    if u.name != name {
        return Err(ApiError::field("name", "does not match the URL"));
    }
    document::check_upstream(&u).map_err(ApiError::invalid)?;
    let mut tx = s.db.begin().await?;
    let before = upstream_view(&mut tx, &name).await?;
    let new_key = u.api_key.as_deref().filter(|k| !k.is_empty());
    // The key is a change only when it differs from the stored one.
    let same_key = match new_key {
        None => true,
        Some(k) => store::config::upstream_key(&mut tx, &s.keys, &name).await?.is_some_and(|old| old == k),
    };
    store::config::write_upstream(&mut tx, &u).await?;
    if let Some(key) = new_key.filter(|_| !same_key) {
        let sealed = s.keys.seal(key.as_bytes(), &name).map_err(|e| ApiError::internal("seal", e))?;
        store::config::store_key(&mut tx, &name, sealed).await?;
    }
    let after = upstream_view(&mut tx, &name).await?;
    if same_key {
        if let Some(version) = unchanged(&mut tx, &before, &after).await? {
            return Ok(Json(UpstreamSaved { upstream: after, version }));
        }
    }
    let action = match (&before, !same_key) {
        (None, _) => "upstream.create",
        (Some(_), true) => "upstream.update+key",
        (Some(_), false) => "upstream.update",
    };
    audit(&mut tx, &caller.username, action, &name, audited(before.as_ref()), audited(after.as_ref())).await?;
    let summary = format!("upstream {name}");
    let version = commit(&mut tx, &caller.username, &summary, Focus::Upstream(&name), s.verify()).await?;
    tx.commit().await?;
    Ok(Json(UpstreamSaved { upstream: after, version }))
}

pub async fn delete_upstream(
    State(s): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> Reply<Deleted> {
    caller.require(Role::Admin)?;
    let mut tx = s.db.begin().await?;
    let before =
        upstream_view(&mut tx, &name).await?.ok_or_else(|| ApiError::not_found(format!("upstream '{name}'")))?;
    store::config::delete_upstream(&mut tx, &name).await?;
    audit(&mut tx, &caller.username, "upstream.delete", &name, audited(Some(&before)), None).await?;
    let summary = format!("delete upstream {name}");
    let version = commit(&mut tx, &caller.username, &summary, Focus::None, s.verify()).await?;
    tx.commit().await?;
    Ok(Json(Deleted { deleted: name, version }))
}

// ---------- routes ----------

/// Field checks the data plane's rules cannot see (they never see a negative weight or the
/// enabled flag): every field error at once.
fn check_route(r: &RouteIn) -> Result<Vec<(CandidateSpec, bool)>, Vec<FieldError>> {
    let mut errors = Vec::new();
    if r.candidates.is_empty() {
        errors.push(FieldError::new("candidates", "at least one candidate"));
    }
    for (i, c) in r.candidates.iter().enumerate() {
        if c.weight < 0 {
            errors.push(FieldError::new(format!("candidates[{i}].weight"), "must be 0 or more"));
        }
        if c.weight > 1_000_000 {
            errors.push(FieldError::new(format!("candidates[{i}].weight"), "at most 1000000"));
        }
        if !(0..=1000).contains(&c.priority) {
            errors.push(FieldError::new(format!("candidates[{i}].priority"), "between 0 and 1000"));
        }
    }
    if !r.candidates.is_empty() && !r.candidates.iter().any(|c| c.enabled && c.weight > 0) {
        errors.push(FieldError::new("candidates", "at least one candidate must be enabled with a weight above 0"));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(r.candidates
        .iter()
        .map(|c| {
            let spec = CandidateSpec {
                upstream: c.upstream.clone(),
                model: c.model.clone(),
                weight: u32::try_from(c.weight).unwrap_or(0),
                priority: u32::try_from(c.priority).unwrap_or(0),
            };
            (spec, c.enabled)
        })
        .collect())
}

async fn route_view(conn: &mut PgConnection, alias: &str) -> ApiResult<Option<RouteView>> {
    Ok(store::config::route_views(conn, Some(alias)).await?.pop())
}

pub async fn list_routes(State(s): State<AppState>, caller: Caller) -> Reply<RouteList> {
    caller.require(Role::Operator)?;
    let routes = store::config::route_views(&mut *s.db.acquire().await?, None).await?;
    Ok(Json(RouteList { routes }))
}

pub async fn get_route(State(s): State<AppState>, caller: Caller, ApiPath(alias): ApiPath<String>) -> Reply<RouteView> {
    caller.require(Role::Operator)?;
    let mut conn = s.db.acquire().await?;
    let r = route_view(&mut conn, &alias).await?.ok_or_else(|| ApiError::not_found(format!("route '{alias}'")))?;
    Ok(Json(r))
}

fn route_spec(alias: &str, r: &RouteIn, candidates: &[(CandidateSpec, bool)]) -> RouteSpec {
    RouteSpec {
        alias: alias.to_owned(),
        strategy: r.strategy,
        candidates: candidates
            .iter()
            .map(|(c, on)| CandidateSpec { weight: if *on { c.weight } else { 0 }, ..c.clone() })
            .collect(),
        fallbacks: r.fallbacks.clone(),
        timeouts: r.timeouts.clone(),
        failover: r.failover.clone(),
        max_prompt_tokens: r.max_prompt_tokens,
        long_context_alias: r.long_context_alias.clone(),
        limits: r.limits,
    }
}

/// Creates or replaces a route: strategy, candidates and weights, fallbacks (operator).
pub async fn put_route(
    State(s): State<AppState>,
    caller: Caller,
    ApiPath(alias): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> Reply<RouteSaved> {
    caller.require(Role::Operator)?;
    valid_name("alias", &alias)?;
    let r: RouteIn = decode(&body)?;
    if r.alias.as_ref().is_some_and(|a| *a != alias) {
        return Err(ApiError::field("alias", "does not match the URL"));
    }
    let candidates = check_route(&r).map_err(ApiError::invalid)?;
    let mut tx = s.db.begin().await?;
    let before = route_view(&mut tx, &alias).await?;
    store::config::write_route(&mut tx, &route_spec(&alias, &r, &candidates), &candidates).await?;
    let after = route_view(&mut tx, &alias).await?;
    if let Some(version) = unchanged(&mut tx, &before, &after).await? {
        return Ok(Json(RouteSaved { route: after, version }));
    }
    let action = if before.is_some() { "route.update" } else { "route.create" };
    audit(&mut tx, &caller.username, action, &alias, audited(before.as_ref()), audited(after.as_ref())).await?;
    let summary = format!("route {alias}");
    let version = commit(&mut tx, &caller.username, &summary, Focus::Route(&alias), s.verify()).await?;
    tx.commit().await?;
    Ok(Json(RouteSaved { route: after, version }))
}

pub async fn delete_route(
    State(s): State<AppState>,
    caller: Caller,
    ApiPath(alias): ApiPath<String>,
) -> Reply<Deleted> {
    caller.require(Role::Operator)?;
    let mut tx = s.db.begin().await?;
    let before = route_view(&mut tx, &alias).await?.ok_or_else(|| ApiError::not_found(format!("route '{alias}'")))?;
    store::config::delete_route(&mut tx, &alias).await?;
    audit(&mut tx, &caller.username, "route.delete", &alias, audited(Some(&before)), None).await?;
    let summary = format!("delete route {alias}");
    let version = commit(&mut tx, &caller.username, &summary, Focus::Route(&alias), s.verify()).await?;
    tx.commit().await?;
    Ok(Json(Deleted { deleted: alias, version }))
}

/// What a route change would do, without committing it: the diff against the live route and each
/// real model's share of the alias's traffic before and after.
pub async fn preview_route(
    State(s): State<AppState>,
    caller: Caller,
    ApiPath(alias): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> Reply<RoutePreview> {
    caller.require(Role::Operator)?;
    let r: RouteIn = decode(&body)?;
    let candidates = check_route(&r).map_err(ApiError::invalid)?;
    let mut tx = s.db.begin().await?;
    let before = route_view(&mut tx, &alias).await?;
    let live = document::live(&mut tx).await?;
    store::config::write_route(&mut tx, &route_spec(&alias, &r, &candidates), &candidates).await?;
    let mut next = live.clone();
    document::refresh(&mut tx, &mut next, Focus::Route(&alias)).await?;
    let (valid, mut doc) = document::validate(next);
    valid.map_err(|all| ApiError::invalid(all.into_iter().map(|f| Focus::Route(&alias).rebase(&doc, f)).collect()))?;
    let after = route_view(&mut tx, &alias).await?;
    tx.rollback().await?;
    let shares = |d: &ax_protocol::snapshot::Document| -> Vec<Share> {
        d.routes.iter().find(|x| x.alias == alias).map_or_else(Vec::new, share_list)
    };
    let shares_after = shares(&doc);
    let shares_before = shares(&live);
    let summary = |requests: i64, prompt: i64, completion: i64, hours: f64| {
        let n = requests.max(1) as f64;
        UsageSummary {
            requests_per_day: requests as f64 * 24.0 / hours,
            avg_prompt_tokens: prompt as f64 / n,
            avg_completion_tokens: completion as f64 / n,
        }
    };
    let (requests, prompt, completion) = store::usage::alias_week(&s.db, &alias).await?;
    let week = summary(requests, prompt, completion, 7.0 * 24.0);
    // The projection's traffic: the recent window when it has enough requests to be read, else
    // the week; the answer says which.
    let (requests, prompt, completion, hours) = store::usage::alias_recent(&s.db, &alias).await?;
    let (usage, usage_window_hours, usage_window) = if requests >= RECENT_ENOUGH {
        let usage = summary(requests, prompt, completion, hours);
        (usage, hours, format!("the last {hours:.0} h (since yesterday 00:00 UTC)"))
    } else {
        let why = format!("the last 7 days (fewer than {RECENT_ENOUGH} requests since yesterday 00:00 UTC)");
        (week.clone(), 7.0 * 24.0, why)
    };
    let projected_daily_cost_usd_before = projected_daily_cost(&live, &shares_before, &usage);
    let projected_daily_cost_usd_after = projected_daily_cost(&doc, &shares_after, &usage);
    doc.routes.clear();
    Ok(Json(RoutePreview {
        alias,
        before,
        after,
        shares_before,
        shares_after,
        usage_last_7_days: week,
        usage,
        usage_window_hours,
        usage_window,
        projected_daily_cost_usd_before,
        projected_daily_cost_usd_after,
    }))
}

/// The requests since yesterday 00:00 UTC that make a recent rate worth projecting from.
const RECENT_ENOUGH: i64 = 20;

/// Requests per day × each candidate's share × its model's price for the average request. An
/// estimate for the preview (money that is billed is always integer micro-USD); `None` without
/// usage history or when a candidate's model has no price.
fn projected_daily_cost(doc: &ax_protocol::snapshot::Document, shares: &[Share], h: &UsageSummary) -> Option<String> {
    if h.requests_per_day == 0.0 {
        return None;
    }
    let mut total = 0.0;
    for s in shares {
        let share = s.share_pct / 100.0;
        if share == 0.0 {
            continue;
        }
        let up = doc.upstreams.iter().find(|u| u.name == s.upstream)?;
        let model = up.models.iter().find(|m| m.name == s.model)?;
        let p = model.price_per_mtok.as_ref()?;
        total +=
            share * h.requests_per_day * (h.avg_prompt_tokens * p.input + h.avg_completion_tokens * p.output) / 1e6;
    }
    Some(format!("{total:.4}"))
}

/// Each candidate's share of traffic in percent (weighted: weight / total; priority: all to the
/// first enabled candidate of the lowest priority while it is healthy).
fn share_list(route: &RouteSpec) -> Vec<Share> {
    let enabled: Vec<&CandidateSpec> = route.candidates.iter().filter(|c| c.weight > 0).collect();
    let total: u64 = enabled.iter().map(|c| u64::from(c.weight)).sum();
    let first_priority = enabled.iter().map(|c| c.priority).min();
    route
        .candidates
        .iter()
        .map(|c| {
            let share_pct = match route.strategy {
                Strategy::Priority => {
                    let primary = enabled.iter().position(|e| Some(e.priority) == first_priority);
                    if c.weight > 0 && primary.is_some_and(|p| std::ptr::eq(enabled[p], c)) {
                        100.0
                    } else {
                        0.0
                    }
                }
                _ if total == 0 || c.weight == 0 => 0.0,
                _ => (f64::from(c.weight) * 1000.0 / total as f64).round() / 10.0,
            };
            Share { upstream: c.upstream.clone(), model: c.model.clone(), weight: c.weight, share_pct }
        })
        .collect()
}

// ---------- versions ----------

pub async fn list_versions(State(s): State<AppState>, caller: Caller) -> Reply<VersionList> {
    caller.require(Role::Operator)?;
    Ok(Json(VersionList { versions: store::versions::list(&s.db).await? }))
}

/// Restores the routing configuration of an earlier version as a new version (operator).
pub async fn rollback(State(s): State<AppState>, caller: Caller, ApiPath(version): ApiPath<i64>) -> Reply<RolledBack> {
    caller.require(Role::Operator)?;
    let mut tx = s.db.begin().await?;
    let stored = store::versions::document_text(&mut tx, version).await?;
    let stored = stored.ok_or_else(|| ApiError::not_found(format!("version {version}")))?;
    let doc: ax_protocol::snapshot::Document =
        serde_json::from_str(&stored).map_err(|e| ApiError::internal("stored version", e))?;
    document::restore(&mut tx, &doc).await?;
    audit(&mut tx, &caller.username, "config.rollback", &format!("version {version}"), None, None).await?;
    let summary = format!("rollback to version {version}");
    let new = commit(&mut tx, &caller.username, &summary, Focus::None, s.verify()).await?;
    tx.commit().await?;
    Ok(Json(RolledBack { restored: version, version: new }))
}

// ---------- data planes ----------

/// Registers a data plane and returns its token (shown once; stored as SHA-256).
pub async fn create_node(
    State(s): State<AppState>,
    caller: Caller,
    ApiBody(body): ApiBody,
) -> ApiResult<(StatusCode, Json<NodeCreated>)> {
    caller.require(Role::Admin)?;
    let n: NodeIn = decode(&body)?;
    valid_name("id", &n.id)?;
    let token = format!("axn-{}", crypto::token(30));
    register_node(&s.db, &n.id, &token).await?;
    let mut conn = s.db.acquire().await?;
    audit(&mut conn, &caller.username, "node.create", &n.id, None, None).await?;
    Ok((StatusCode::CREATED, Json(NodeCreated { id: n.id, token })))
}

/// Also used by `ax-controlplane node create`.
pub async fn register_node(db: &sqlx::PgPool, id: &str, token: &str) -> ApiResult<()> {
    store::nodes::register(db, id, &crypto::digest(token)).await
}

pub async fn list_nodes(State(s): State<AppState>, caller: Caller) -> Reply<NodeList> {
    caller.require(Role::Operator)?;
    let nodes = store::nodes::list(&s.db, crate::push::CONNECTED_WITHIN_S).await?;
    Ok(Json(NodeList { latest_version: s.hub.latest_version().and_then(|v| i64::try_from(v).ok()), nodes }))
}

// ---------- audit ----------

#[derive(Deserialize)]
pub struct AuditQuery {
    #[serde(default)]
    operator: Option<String>,
    #[serde(default)]
    target: Option<String>,
    #[serde(default)]
    limit: Option<i64>,
}

pub async fn list_audit(
    State(s): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> Reply<AuditList> {
    caller.require(Role::Operator)?;
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let entries = store::versions::audit_entries(&s.db, q.operator.as_deref(), q.target.as_deref(), limit).await?;
    Ok(Json(AuditList { entries }))
}
