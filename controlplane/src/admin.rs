//! The admin API (`/api/v1/…`): tenants and their keys, upstreams (write-only keys), routes and
//! weights, versions and rollback, data-plane nodes, the audit log. Every mutation validates the
//! whole resulting configuration before it commits (422 naming the field), is audited, and makes
//! a new version that is pushed to every data plane.

use ax_protocol::admin::{
    AuditEntry, AuditList, NodeList, NodeView, TenantIn, TenantList, TenantView, VersionList, VersionView,
};
use ax_protocol::config::{
    CandidateSpec, FailoverSpec, LimitsSpec, RouteSpec, Strategy, TenantSpec, TimeoutOverrides, UpstreamSpec,
};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sqlx::PgConnection;

use crate::auth::{Caller, Role};
use crate::document::{self, audit, commit, Focus};
use crate::error::{decode, ApiError, ApiResult, FieldError};
use crate::extract::{ApiBody, ApiPath, ApiQuery};
use crate::{crypto, AppState};

type Reply = ApiResult<Json<Value>>;

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

// ---------- tenants ----------

pub async fn write_tenant(conn: &mut PgConnection, t: &TenantSpec) -> ApiResult<()> {
    let spec = json!({ "id": t.id, "keys": [], "allowed_aliases": t.allowed_aliases, "limits": t.limits, "budgets": t.budgets });
    sqlx::query!(
        "INSERT INTO tenants (id, spec) VALUES ($1, $2)
         ON CONFLICT (id) DO UPDATE SET spec = excluded.spec, updated_at = now()",
        t.id,
        spec,
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

async fn tenant_json(conn: &mut PgConnection, id: &str) -> ApiResult<Option<Value>> {
    Ok(sqlx::query_scalar!("SELECT spec FROM tenants WHERE id = $1", id).fetch_optional(&mut *conn).await?)
}

pub async fn list_tenants(State(s): State<AppState>, caller: Caller) -> Reply {
    caller.require(Role::Operator)?;
    let rows: Vec<(Value, i64, i64)> = sqlx::query!(
        r#"SELECT t.spec, count(k.id) FILTER (WHERE k.status = 'active') AS "active!", count(k.id) AS "all!"
         FROM tenants t LEFT JOIN api_keys k ON k.tenant_id = t.id GROUP BY t.id, t.spec ORDER BY t.id"#
    )
    .fetch_all(&s.db)
    .await?
    .into_iter()
    .map(|r| (r.spec, r.active, r.all))
    .collect();
    // A stored spec that no longer reads is an error, not a tenant silently missing from the list.
    let tenants = rows
        .into_iter()
        .map(|(spec, active_keys, keys)| {
            let t: TenantSpec = serde_json::from_value(spec).map_err(|e| ApiError::internal("tenant spec", e))?;
            Ok(TenantView {
                id: t.id,
                allowed_aliases: t.allowed_aliases,
                limits: t.limits,
                budgets: t.budgets,
                active_keys,
                keys,
            })
        })
        .collect::<ApiResult<Vec<_>>>()?;
    Ok(Json(json!(TenantList { tenants })))
}

/// Create (admin) when the tenant is new; update its limits, aliases and budgets (operator).
pub async fn put_tenant(
    State(s): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> Reply {
    caller.require(Role::Operator)?;
    valid_name("id", &id)?;
    let t: TenantIn = decode(&body)?;
    if t.id.as_ref().is_some_and(|b| *b != id) {
        return Err(ApiError::field("id", "does not match the URL"));
    }
    let mut tx = s.db.begin().await?;
    let before = tenant_json(&mut tx, &id).await?;
    if before.is_none() {
        caller.require(Role::Admin)?;
    }
    let spec = TenantSpec {
        id: id.clone(),
        keys: Vec::new(),
        allowed_aliases: t.allowed_aliases,
        limits: t.limits,
        budgets: t.budgets,
    };
    write_tenant(&mut tx, &spec).await?;
    let after = tenant_json(&mut tx, &id).await?;
    audit(
        &mut tx,
        &caller.username,
        if before.is_some() { "tenant.update" } else { "tenant.create" },
        &id,
        before,
        after.clone(),
    )
    .await?;
    let version = commit(&mut tx, &caller.username, &format!("tenant {id}"), Focus::Tenant(&id)).await?;
    tx.commit().await?;
    Ok(Json(json!({ "tenant": after, "version": version })))
}

// ---------- keys ----------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyIn {
    #[serde(default)]
    id: Option<String>,
    /// RFC 3339.
    #[serde(default)]
    expires_at: Option<String>,
    #[serde(default)]
    limits: Option<LimitsSpec>,
}

/// Creates a key; the key itself is in this response only (stored as its SHA-256).
pub async fn create_key(
    State(s): State<AppState>,
    caller: Caller,
    ApiPath(tenant): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> Reply {
    caller.require(Role::Admin)?;
    let mut k: KeyIn =
        if body.is_empty() { KeyIn { id: None, expires_at: None, limits: None } } else { decode(&body)? };
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
    if tenant_json(&mut tx, &tenant).await?.is_none() {
        return Err(ApiError::not_found(format!("tenant '{tenant}'")));
    }
    let key = format!("ax-{}", crypto::token(30));
    let prefix: String = key.chars().take(8).collect();
    let inserted = sqlx::query!(
        "INSERT INTO api_keys (id, tenant_id, digest, prefix, status, expires_at, limits)
         VALUES ($1, $2, $3, $4, 'active', $5::text::timestamptz, $6) ON CONFLICT (id) DO NOTHING",
        id,
        tenant,
        crypto::digest(&key),
        prefix,
        k.expires_at,
        k.limits.map(|l| json!(l)),
    )
    .execute(&mut *tx)
    .await?;
    if inserted.rows_affected() == 0 {
        return Err(ApiError::conflict(format!("a key with id '{id}' exists")));
    }
    let after = json!({ "id": id, "tenant": tenant, "prefix": prefix, "expires_at": k.expires_at });
    audit(&mut tx, &caller.username, "key.create", &id, None, Some(after.clone())).await?;
    let version = commit(&mut tx, &caller.username, &format!("key {id}"), Focus::Tenant(&tenant)).await?;
    tx.commit().await?;
    Ok(Json(json!({ "id": id, "key": key, "prefix": prefix, "tenant": tenant, "version": version,
        "note": "the key is shown once; only its SHA-256 is stored" })))
}

pub async fn list_keys(State(s): State<AppState>, caller: Caller, ApiPath(tenant): ApiPath<String>) -> Reply {
    caller.require(Role::Operator)?;
    let rows: Vec<(String, String, String, Option<String>, String)> = sqlx::query!(
        r#"SELECT id, prefix, status, to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS expires_at,
                  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS "created_at!"
           FROM api_keys WHERE tenant_id = $1 ORDER BY created_at, id"#,
        tenant,
    )
    .fetch_all(&s.db)
    .await?
    .into_iter()
    .map(|r| (r.id, r.prefix, r.status, r.expires_at, r.created_at))
    .collect();
    let keys: Vec<Value> = rows
        .into_iter()
        .map(|(id, prefix, status, expires_at, created_at)| {
            json!({ "id": id, "prefix": prefix, "status": status, "expires_at": expires_at, "created_at": created_at })
        })
        .collect();
    Ok(Json(json!({ "keys": keys })))
}

pub async fn revoke_key(State(s): State<AppState>, caller: Caller, ApiPath(id): ApiPath<String>) -> Reply {
    caller.require(Role::Admin)?;
    let mut tx = s.db.begin().await?;
    let tenant: Option<String> =
        sqlx::query_scalar!("UPDATE api_keys SET status = 'revoked' WHERE id = $1 RETURNING tenant_id", id)
            .fetch_optional(&mut *tx)
            .await?;
    let tenant = tenant.ok_or_else(|| ApiError::not_found(format!("key '{id}'")))?;
    audit(&mut tx, &caller.username, "key.revoke", &id, None, Some(json!({ "status": "revoked" }))).await?;
    let version = commit(&mut tx, &caller.username, &format!("revoke key {id}"), Focus::Tenant(&tenant)).await?;
    tx.commit().await?;
    Ok(Json(json!({ "id": id, "status": "revoked", "version": version })))
}

// ---------- upstreams ----------

pub async fn write_upstream(conn: &mut PgConnection, u: &UpstreamSpec) -> ApiResult<()> {
    let mut spec = serde_json::to_value(u).map_err(|e| ApiError::internal("upstream", e))?;
    if let Some(o) = spec.as_object_mut() {
        o.remove("api_key");
        o.insert("models".to_owned(), json!([]));
    }
    sqlx::query!(
        "INSERT INTO upstreams (name, spec) VALUES ($1, $2)
         ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, updated_at = now()",
        u.name,
        spec,
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!("DELETE FROM upstream_models WHERE upstream = $1", u.name).execute(&mut *conn).await?;
    for m in &u.models {
        let spec = serde_json::to_value(m).map_err(|e| ApiError::internal("model", e))?;
        sqlx::query!("INSERT INTO upstream_models (upstream, name, spec) VALUES ($1, $2, $3)", u.name, m.name, spec)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Upstreams as the API shows them (all, or the one named): no key, `has_key` instead.
async fn upstream_views(conn: &mut PgConnection, only: Option<&str>) -> ApiResult<Vec<Value>> {
    Ok(document::load_upstreams(conn, only)
        .await?
        .into_iter()
        .map(|(mut u, has_key)| {
            u.api_key = None;
            let mut v = serde_json::to_value(u).unwrap_or_default();
            v["has_key"] = json!(has_key);
            v
        })
        .collect())
}

async fn upstream_view(conn: &mut PgConnection, name: &str) -> ApiResult<Option<Value>> {
    Ok(upstream_views(conn, Some(name)).await?.pop())
}

pub async fn list_upstreams(State(s): State<AppState>, caller: Caller) -> Reply {
    caller.require(Role::Operator)?;
    let list = upstream_views(&mut *s.db.acquire().await?, None).await?;
    Ok(Json(json!({ "upstreams": list })))
}

/// Creates or replaces an upstream (admin). `api_key` is write-only: stored encrypted, never
/// returned; leave it out to keep the current key.
pub async fn put_upstream(
    State(s): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> Reply {
    caller.require(Role::Admin)?;
    valid_name("name", &name)?;
    let mut v: Value = decode(&body)?;
    if let Some(o) = v.as_object_mut() {
        o.entry("name").or_insert_with(|| json!(name));
    }
    let u: UpstreamSpec = decode(&serde_json::to_vec(&v).unwrap_or_default())?;
    if u.name != name {
        return Err(ApiError::field("name", "does not match the URL"));
    }
    let mut tx = s.db.begin().await?;
    let before = upstream_view(&mut tx, &name).await?;
    write_upstream(&mut tx, &u).await?;
    if let Some(key) = u.api_key.as_deref().filter(|k| !k.is_empty()) {
        let sealed = s.keys.seal(key.as_bytes(), &name).map_err(|e| ApiError::internal("seal", e))?;
        document::store_key(&mut tx, &name, sealed).await?;
    }
    let after = upstream_view(&mut tx, &name).await?;
    let action = match (&before, u.api_key.is_some()) {
        (None, _) => "upstream.create",
        (Some(_), true) => "upstream.update+key",
        (Some(_), false) => "upstream.update",
    };
    audit(&mut tx, &caller.username, action, &name, before, after.clone()).await?;
    let version = commit(&mut tx, &caller.username, &format!("upstream {name}"), Focus::Upstream(&name)).await?;
    tx.commit().await?;
    Ok(Json(json!({ "upstream": after, "version": version })))
}

pub async fn delete_upstream(State(s): State<AppState>, caller: Caller, ApiPath(name): ApiPath<String>) -> Reply {
    caller.require(Role::Admin)?;
    let mut tx = s.db.begin().await?;
    let before =
        upstream_view(&mut tx, &name).await?.ok_or_else(|| ApiError::not_found(format!("upstream '{name}'")))?;
    sqlx::query!("DELETE FROM upstreams WHERE name = $1", name).execute(&mut *tx).await?;
    audit(&mut tx, &caller.username, "upstream.delete", &name, Some(before), None).await?;
    let version = commit(&mut tx, &caller.username, &format!("delete upstream {name}"), Focus::None).await?;
    tx.commit().await?;
    Ok(Json(json!({ "deleted": name, "version": version })))
}

// ---------- routes ----------

#[derive(Deserialize, Serialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct CandidateIn {
    upstream: String,
    model: String,
    /// Signed so a negative weight is a field error, not a decode error.
    #[serde(default = "one")]
    weight: i64,
    #[serde(default)]
    priority: i64,
    #[serde(default = "yes")]
    enabled: bool,
}

fn one() -> i64 {
    1
}
fn yes() -> bool {
    true
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RouteIn {
    #[serde(default)]
    alias: Option<String>,
    #[serde(default)]
    strategy: Strategy,
    candidates: Vec<CandidateIn>,
    #[serde(default)]
    fallbacks: Vec<String>,
    #[serde(default)]
    timeouts: TimeoutOverrides,
    #[serde(default)]
    failover: FailoverSpec,
    #[serde(default)]
    max_prompt_tokens: Option<u32>,
    #[serde(default)]
    long_context_alias: Option<String>,
    #[serde(default)]
    limits: LimitsSpec,
}

impl RouteIn {
    /// Field checks the data plane's compiler cannot see (it never sees a negative weight or the
    /// enabled flag).
    fn check(&self) -> Result<Vec<(CandidateSpec, bool)>, Vec<FieldError>> {
        let mut errors = Vec::new();
        if self.candidates.is_empty() {
            errors.push(FieldError::new("candidates", "at least one candidate"));
        }
        for (i, c) in self.candidates.iter().enumerate() {
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
        if !self.candidates.is_empty() && !self.candidates.iter().any(|c| c.enabled && c.weight > 0) {
            errors.push(FieldError::new("candidates", "at least one candidate must be enabled with a weight above 0"));
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(self
            .candidates
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
}

pub async fn write_route(
    conn: &mut PgConnection,
    r: &RouteSpec,
    candidates: &[(CandidateSpec, bool)],
) -> ApiResult<()> {
    let mut spec = serde_json::to_value(r).map_err(|e| ApiError::internal("route", e))?;
    if let Some(o) = spec.as_object_mut() {
        o.insert("candidates".to_owned(), json!([]));
    }
    sqlx::query!(
        "INSERT INTO routes (alias, spec) VALUES ($1, $2)
         ON CONFLICT (alias) DO UPDATE SET spec = excluded.spec, updated_at = now()",
        r.alias,
        spec,
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!("DELETE FROM route_candidates WHERE alias = $1", r.alias).execute(&mut *conn).await?;
    for (i, (c, enabled)) in candidates.iter().enumerate() {
        sqlx::query!(
            "INSERT INTO route_candidates (alias, position, upstream, model, weight, priority, enabled)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            r.alias,
            i32::try_from(i).unwrap_or(i32::MAX),
            c.upstream,
            c.model,
            i32::try_from(c.weight).unwrap_or(i32::MAX),
            i32::try_from(c.priority).unwrap_or(i32::MAX),
            enabled,
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Routes as the API shows them (all, or the one named): candidates with their configured
/// weights and `enabled` flags.
async fn route_views(conn: &mut PgConnection, only: Option<&str>) -> ApiResult<Vec<Value>> {
    Ok(document::load_routes(conn, only)
        .await?
        .into_iter()
        .map(|r| {
            let candidates: Vec<Value> = r
                .spec
                .candidates
                .iter()
                .zip(&r.enabled)
                .map(|(c, on)| {
                    json!({ "upstream": c.upstream, "model": c.model, "weight": c.weight, "priority": c.priority, "enabled": on })
                })
                .collect();
            let mut v = serde_json::to_value(&r.spec).unwrap_or_default();
            v["candidates"] = Value::Array(candidates);
            v
        })
        .collect())
}

async fn route_view(conn: &mut PgConnection, alias: &str) -> ApiResult<Option<Value>> {
    Ok(route_views(conn, Some(alias)).await?.pop())
}

pub async fn list_routes(State(s): State<AppState>, caller: Caller) -> Reply {
    caller.require(Role::Operator)?;
    let list = route_views(&mut *s.db.acquire().await?, None).await?;
    Ok(Json(json!({ "routes": list })))
}

pub async fn get_route(State(s): State<AppState>, caller: Caller, ApiPath(alias): ApiPath<String>) -> Reply {
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
) -> Reply {
    caller.require(Role::Operator)?;
    valid_name("alias", &alias)?;
    let r: RouteIn = decode(&body)?;
    if r.alias.as_ref().is_some_and(|a| *a != alias) {
        return Err(ApiError::field("alias", "does not match the URL"));
    }
    let candidates = r.check().map_err(ApiError::invalid)?;
    let mut tx = s.db.begin().await?;
    let before = route_view(&mut tx, &alias).await?;
    write_route(&mut tx, &route_spec(&alias, &r, &candidates), &candidates).await?;
    let after = route_view(&mut tx, &alias).await?;
    audit(
        &mut tx,
        &caller.username,
        if before.is_some() { "route.update" } else { "route.create" },
        &alias,
        before,
        after.clone(),
    )
    .await?;
    let version = commit(&mut tx, &caller.username, &format!("route {alias}"), Focus::Route(&alias)).await?;
    tx.commit().await?;
    Ok(Json(json!({ "route": after, "version": version })))
}

pub async fn delete_route(State(s): State<AppState>, caller: Caller, ApiPath(alias): ApiPath<String>) -> Reply {
    caller.require(Role::Operator)?;
    let mut tx = s.db.begin().await?;
    let before = route_view(&mut tx, &alias).await?.ok_or_else(|| ApiError::not_found(format!("route '{alias}'")))?;
    sqlx::query!("DELETE FROM routes WHERE alias = $1", alias).execute(&mut *tx).await?;
    audit(&mut tx, &caller.username, "route.delete", &alias, Some(before), None).await?;
    let version = commit(&mut tx, &caller.username, &format!("delete route {alias}"), Focus::Route(&alias)).await?;
    tx.commit().await?;
    Ok(Json(json!({ "deleted": alias, "version": version })))
}

/// What a route change would do, without committing it: the diff against the live route and each
/// real model's share of the alias's traffic before and after.
pub async fn preview_route(
    State(s): State<AppState>,
    caller: Caller,
    ApiPath(alias): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> Reply {
    caller.require(Role::Operator)?;
    let r: RouteIn = decode(&body)?;
    let candidates = r.check().map_err(ApiError::invalid)?;
    let mut tx = s.db.begin().await?;
    let before = route_view(&mut tx, &alias).await?;
    let live = document::live(&mut tx).await?;
    write_route(&mut tx, &route_spec(&alias, &r, &candidates), &candidates).await?;
    let mut next = live.clone();
    document::refresh(&mut tx, &mut next, Focus::Route(&alias)).await?;
    let (valid, mut doc) = document::validate(next);
    valid.map_err(|f| ApiError::invalid(vec![Focus::Route(&alias).rebase(&doc, f)]))?;
    let after = route_view(&mut tx, &alias).await?;
    tx.rollback().await?;
    let shares = |d: &ax_protocol::snapshot::Document| -> Value {
        d.routes.iter().find(|x| x.alias == alias).map_or(json!([]), share_list)
    };
    let new_shares = shares(&doc);
    let old_shares = shares(&live);
    let history = usage_history(&s.db, &alias).await?;
    let cost_before = projected_daily_cost(&live, &old_shares, &history);
    let cost_after = projected_daily_cost(&doc, &new_shares, &history);
    doc.routes.clear();
    Ok(Json(json!({
        "alias": alias,
        "before": before,
        "after": after,
        "shares_before": old_shares,
        "shares_after": new_shares,
        "usage_last_7_days": { "requests_per_day": history.requests_per_day, "avg_prompt_tokens": history.avg_prompt,
                               "avg_completion_tokens": history.avg_completion },
        "projected_daily_cost_usd_before": cost_before,
        "projected_daily_cost_usd_after": cost_after,
    })))
}

/// The alias's traffic over the last 7 days (from the rollups).
struct History {
    requests_per_day: f64,
    avg_prompt: f64,
    avg_completion: f64,
}

async fn usage_history(db: &sqlx::PgPool, alias: &str) -> ApiResult<History> {
    let r = sqlx::query!(
        r#"SELECT coalesce(sum(requests), 0)::bigint AS "requests!", coalesce(sum(prompt_tokens), 0)::bigint AS "prompt!",
                  coalesce(sum(completion_tokens), 0)::bigint AS "completion!"
           FROM usage_daily WHERE alias = $1 AND day > current_date - 7"#,
        alias,
    )
    .fetch_one(db)
    .await?;
    let (requests, prompt, completion) = (r.requests, r.prompt, r.completion);
    let n = requests.max(1) as f64;
    Ok(History {
        requests_per_day: requests as f64 / 7.0,
        avg_prompt: prompt as f64 / n,
        avg_completion: completion as f64 / n,
    })
}

/// Requests per day × each candidate's share × its model's price for the average request. An
/// estimate for the preview (money that is billed is always integer micro-USD); `None` without
/// usage history or when a candidate's model has no price.
fn projected_daily_cost(doc: &ax_protocol::snapshot::Document, shares: &Value, h: &History) -> Option<String> {
    if h.requests_per_day == 0.0 {
        return None;
    }
    let mut total = 0.0;
    for s in shares.as_array()? {
        let share = s["share_pct"].as_f64()? / 100.0;
        if share == 0.0 {
            continue;
        }
        let up = doc.upstreams.iter().find(|u| s["upstream"] == u.name.as_str())?;
        let model = up.models.iter().find(|m| s["model"] == m.name.as_str())?;
        let p = model.price_per_mtok.as_ref()?;
        total += share * h.requests_per_day * (h.avg_prompt * p.input + h.avg_completion * p.output) / 1e6;
    }
    Some(format!("{total:.4}"))
}

/// Each candidate's share of traffic in percent (weighted: weight / total; priority: all to the
/// first enabled candidate of the lowest priority while it is healthy).
fn share_list(route: &RouteSpec) -> Value {
    let enabled: Vec<&CandidateSpec> = route.candidates.iter().filter(|c| c.weight > 0).collect();
    let total: u64 = enabled.iter().map(|c| u64::from(c.weight)).sum();
    let first_priority = enabled.iter().map(|c| c.priority).min();
    route
        .candidates
        .iter()
        .map(|c| {
            let pct = match route.strategy {
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
            json!({ "upstream": c.upstream, "model": c.model, "weight": c.weight, "share_pct": pct })
        })
        .collect()
}

// ---------- versions ----------

pub async fn list_versions(State(s): State<AppState>, caller: Caller) -> Reply {
    caller.require(Role::Operator)?;
    let versions = sqlx::query!(
        r#"SELECT version, content_hash, author, summary, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS "created_at!"
           FROM config_versions ORDER BY version DESC LIMIT 200"#
    )
    .fetch_all(&s.db)
    .await?
    .into_iter()
    .map(|r| VersionView {
        version: r.version,
        hash: r.content_hash,
        author: r.author,
        summary: r.summary,
        created_at: r.created_at,
    })
    .collect();
    Ok(Json(json!(VersionList { versions })))
}

/// Restores the routing configuration of an earlier version as a new version (operator).
pub async fn rollback(State(s): State<AppState>, caller: Caller, ApiPath(version): ApiPath<i64>) -> Reply {
    caller.require(Role::Operator)?;
    let mut tx = s.db.begin().await?;
    let stored: Option<String> = sqlx::query_scalar!(
        r#"SELECT coalesce(document_json, document::text) AS "document!" FROM config_versions WHERE version = $1"#,
        version,
    )
    .fetch_optional(&mut *tx)
    .await?;
    let stored = stored.ok_or_else(|| ApiError::not_found(format!("version {version}")))?;
    let doc: ax_protocol::snapshot::Document =
        serde_json::from_str(&stored).map_err(|e| ApiError::internal("stored version", e))?;
    document::restore(&mut tx, &doc).await?;
    audit(&mut tx, &caller.username, "config.rollback", &format!("version {version}"), None, None).await?;
    let new = commit(&mut tx, &caller.username, &format!("rollback to version {version}"), Focus::None).await?;
    tx.commit().await?;
    Ok(Json(json!({ "restored": version, "version": new })))
}

// ---------- data planes ----------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeIn {
    id: String,
}

/// Registers a data plane and returns its token (shown once; stored as SHA-256).
pub async fn create_node(
    State(s): State<AppState>,
    caller: Caller,
    ApiBody(body): ApiBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    caller.require(Role::Admin)?;
    let n: NodeIn = decode(&body)?;
    valid_name("id", &n.id)?;
    let token = format!("axn-{}", crypto::token(30));
    register_node(&s.db, &n.id, &token).await?;
    let mut conn = s.db.acquire().await?;
    audit(&mut conn, &caller.username, "node.create", &n.id, None, None).await?;
    Ok((StatusCode::CREATED, Json(json!({ "id": n.id, "token": token }))))
}

/// Also used by `ax-controlplane node create`.
pub async fn register_node(db: &sqlx::PgPool, id: &str, token: &str) -> ApiResult<()> {
    sqlx::query!(
        "INSERT INTO data_planes (id, token_digest) VALUES ($1, $2)
         ON CONFLICT (id) DO UPDATE SET token_digest = excluded.token_digest",
        id,
        crypto::digest(token),
    )
    .execute(db)
    .await?;
    Ok(())
}

pub async fn list_nodes(State(s): State<AppState>, caller: Caller) -> Reply {
    caller.require(Role::Operator)?;
    let nodes = sqlx::query!(
        r#"SELECT d.id, d.applied_version, d.last_error,
                  to_char(d.last_seen AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS last_seen, d.health,
                  (SELECT count(*) FROM node_connections c
                   WHERE c.node = d.id AND c.last_seen > now() - make_interval(secs => $1)) AS "connections!",
                  (SELECT count(*) FROM usage_dead_letters l WHERE l.node = d.id) AS "dead_letters!"
           FROM data_planes d ORDER BY d.id"#,
        crate::push::CONNECTED_WITHIN_S,
    )
    .fetch_all(&s.db)
    .await?
    .into_iter()
    .map(|r| NodeView {
        connected: r.connections > 0,
        connections: r.connections,
        dead_letters: r.dead_letters,
        id: r.id,
        applied_version: r.applied_version,
        last_error: r.last_error,
        last_seen: r.last_seen,
        // A summary this version cannot read is left out rather than failing the list.
        health: r.health.and_then(|h| serde_json::from_value(h).ok()),
    })
    .collect();
    Ok(Json(json!(NodeList { latest_version: s.hub.latest_version().and_then(|v| i64::try_from(v).ok()), nodes })))
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

pub async fn list_audit(State(s): State<AppState>, caller: Caller, ApiQuery(q): ApiQuery<AuditQuery>) -> Reply {
    caller.require(Role::Operator)?;
    let entries = sqlx::query!(
        r#"SELECT id, operator, action, target, before, after, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS "at!"
           FROM audit_log WHERE ($1::text IS NULL OR operator = $1) AND ($2::text IS NULL OR target = $2)
           ORDER BY id DESC LIMIT $3"#,
        q.operator,
        q.target,
        q.limit.unwrap_or(100).clamp(1, 1000),
    )
    .fetch_all(&s.db)
    .await?
    .into_iter()
    .map(|r| AuditEntry {
        id: r.id,
        operator: r.operator,
        action: r.action,
        target: r.target,
        before: r.before,
        after: r.after,
        at: r.at,
    })
    .collect();
    Ok(Json(json!(AuditList { entries })))
}
