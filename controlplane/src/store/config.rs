//! The configuration tables: tenants and their API keys, upstreams (their models and sealed
//! keys), routes (their candidates). Reads compose the `config` specs data planes see; writes
//! take them apart again.

use std::collections::BTreeMap;

use ax_protocol::admin::{CandidateView, KeyView, RouteView};
use ax_protocol::config::{
    BudgetSpec, CandidateSpec, GroupSpec, KeySpec, KeyStatus, LimitsSpec, ModelSpec, RouteSpec, TenantSpec,
    UpstreamSpec,
};
use serde_json::{json, Value};
use sqlx::{PgConnection, PgPool};

use crate::crypto::{MasterKeys, Sealed};
use crate::error::{ApiError, ApiResult};

/// Tenants (all, or the one named) with their keys as data planes see them (digests only).
pub async fn load_tenants(conn: &mut PgConnection, only: Option<&str>) -> ApiResult<Vec<TenantSpec>> {
    let tenants: Vec<(String, String)> = sqlx::query!(
        r#"SELECT id, spec::text AS "spec!" FROM tenants WHERE $1::text IS NULL OR id = $1 ORDER BY id COLLATE "C""#,
        only,
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|r| (r.id, r.spec))
    .collect();
    let api_keys = sqlx::query!(
        r#"SELECT id, tenant_id, digest, status,
                  to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS expires_at, limits,
                  alias_limits, budgets
           FROM api_keys WHERE $1::text IS NULL OR tenant_id = $1 ORDER BY id COLLATE "C""#,
        only,
    )
    .fetch_all(&mut *conn)
    .await?;
    let api_keys = group(api_keys, |k| k.tenant_id.clone());
    let mut out = Vec::with_capacity(tenants.len());
    for (id, spec) in tenants {
        let mut t: TenantSpec = serde_json::from_str(&spec).map_err(|e| ApiError::internal("stored tenant", e))?;
        t.id.clone_from(&id);
        t.keys = api_keys
            .get(&id)
            .into_iter()
            .flatten()
            .map(|k| KeySpec {
                id: k.id.clone(),
                sha256: Some(k.digest.clone()),
                key: None,
                status: if k.status == "active" { KeyStatus::Active } else { KeyStatus::Revoked },
                expires_at: k.expires_at.clone(),
                limits: stored(&k.limits),
                alias_limits: stored(&k.alias_limits),
                budgets: stored(&k.budgets),
            })
            .collect();
        out.push(t);
    }
    Ok(out)
}

/// A key's stored JSON column (written by `insert_key` / `set_key_policy`), or its default.
fn stored<T: serde::de::DeserializeOwned + Default>(v: &Option<Value>) -> T {
    v.clone().and_then(|v| serde_json::from_value(v).ok()).unwrap_or_default()
}

/// Every group of tenants, by id (byte order).
pub async fn load_groups(conn: &mut PgConnection) -> ApiResult<Vec<GroupSpec>> {
    sqlx::query!(r#"SELECT id, spec FROM tenant_groups ORDER BY id COLLATE "C""#)
        .fetch_all(&mut *conn)
        .await?
        .into_iter()
        .map(|r| {
            let mut g: GroupSpec = serde_json::from_value(r.spec).map_err(|e| ApiError::internal("stored group", e))?;
            g.id = r.id;
            Ok(g)
        })
        .collect()
}

/// (group, tenant) for every tenant naming a group (the one named, or all), by tenant id.
pub async fn group_members(conn: &mut PgConnection, only: Option<&str>) -> ApiResult<Vec<(String, String)>> {
    Ok(sqlx::query!(
        r#"SELECT g AS "group!", t.id FROM tenants t, jsonb_array_elements_text(coalesce(t.spec->'groups', '[]')) g
           WHERE $1::text IS NULL OR g = $1 ORDER BY t.id COLLATE "C""#,
        only,
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|r| (r.group, r.id))
    .collect())
}

pub async fn group_json(conn: &mut PgConnection, id: &str) -> ApiResult<Option<Value>> {
    Ok(sqlx::query_scalar!("SELECT spec FROM tenant_groups WHERE id = $1", id).fetch_optional(&mut *conn).await?)
}

pub async fn write_group(conn: &mut PgConnection, g: &GroupSpec) -> ApiResult<()> {
    let spec = serde_json::to_value(g).map_err(|e| ApiError::internal("group", e))?;
    sqlx::query!(
        "INSERT INTO tenant_groups (id, spec) VALUES ($1, $2)
         ON CONFLICT (id) DO UPDATE SET spec = excluded.spec, updated_at = now()",
        g.id,
        spec,
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Deletes a group; false when there was none.
pub async fn delete_group(conn: &mut PgConnection, id: &str) -> ApiResult<bool> {
    Ok(sqlx::query!("DELETE FROM tenant_groups WHERE id = $1", id).execute(&mut *conn).await?.rows_affected() > 0)
}

/// Every group but `keep` goes (a rollback).
pub async fn delete_groups_except(conn: &mut PgConnection, keep: &[String]) -> ApiResult<()> {
    sqlx::query!("DELETE FROM tenant_groups WHERE NOT (id = ANY($1))", keep).execute(&mut *conn).await?;
    Ok(())
}

/// Upstreams (all, or the one named) with their models, and whether each has a stored key.
pub async fn load_upstreams(conn: &mut PgConnection, only: Option<&str>) -> ApiResult<Vec<(UpstreamSpec, bool)>> {
    let ups = sqlx::query!(
        r#"SELECT name, spec, key_ciphertext IS NOT NULL AS "has_key!" FROM upstreams
           WHERE $1::text IS NULL OR name = $1 ORDER BY name COLLATE "C""#,
        only,
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|r| (r.name, r.spec, r.has_key));
    let models: Vec<(String, serde_json::Value)> = sqlx::query!(
        "SELECT upstream, spec FROM upstream_models WHERE $1::text IS NULL OR upstream = $1 ORDER BY upstream, name",
        only,
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|r| (r.upstream, r.spec))
    .collect();
    let mut models = group(models, |m| m.0.clone());
    let mut out = Vec::with_capacity(ups.len());
    for (name, spec, has_key) in ups {
        let mut u: UpstreamSpec = serde_json::from_value(spec).map_err(|e| ApiError::internal("stored upstream", e))?;
        u.models = models
            .remove(&name)
            .unwrap_or_default()
            .into_iter()
            .map(|(_, m)| serde_json::from_value::<ModelSpec>(m))
            .collect::<Result<_, _>>()
            .map_err(|e| ApiError::internal("stored model", e))?;
        u.name = name;
        out.push((u, has_key));
    }
    Ok(out)
}

/// A route as stored: candidates keep their configured weights; `enabled` is per candidate.
pub struct StoredRoute {
    pub spec: RouteSpec,
    pub enabled: Vec<bool>,
}

impl StoredRoute {
    /// The route as data planes see it: a disabled candidate has weight 0 (never picked).
    pub fn live(self) -> RouteSpec {
        let mut spec = self.spec;
        for (c, on) in spec.candidates.iter_mut().zip(self.enabled) {
            if !on {
                c.weight = 0;
            }
        }
        spec
    }

    /// The route as the API shows it: each candidate's configured weight and `enabled` flag.
    pub fn view(self) -> RouteView {
        let RouteSpec {
            alias,
            strategy,
            candidates,
            fallbacks,
            timeouts,
            failover,
            max_prompt_tokens,
            long_context_alias,
            limits,
        } = self.spec;
        let candidates = candidates
            .into_iter()
            .zip(self.enabled)
            .map(|(c, enabled)| CandidateView {
                upstream: c.upstream,
                model: c.model,
                weight: c.weight,
                priority: c.priority,
                enabled,
            })
            .collect();
        RouteView {
            alias,
            strategy,
            candidates,
            fallbacks,
            timeouts,
            failover,
            max_prompt_tokens,
            long_context_alias,
            limits,
        }
    }
}

/// Routes (all, or the one named) with their candidates.
pub async fn load_routes(conn: &mut PgConnection, only: Option<&str>) -> ApiResult<Vec<StoredRoute>> {
    // Specs are read as text and parsed once (not through a `serde_json::Value`); names in byte
    // order (`COLLATE "C"`), as `str` compares them (`replace_sorted`).
    let routes: Vec<(String, String)> = sqlx::query!(
        r#"SELECT alias, spec::text AS "spec!" FROM routes WHERE $1::text IS NULL OR alias = $1 ORDER BY alias COLLATE "C""#,
        only,
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|r| (r.alias, r.spec))
    .collect();
    let cands: Vec<(String, String, String, i32, i32, bool)> = sqlx::query!(
        "SELECT alias, upstream, model, weight, priority, enabled FROM route_candidates
         WHERE $1::text IS NULL OR alias = $1 ORDER BY alias, position",
        only,
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|r| (r.alias, r.upstream, r.model, r.weight, r.priority, r.enabled))
    .collect();
    let mut cands = group(cands, |c| c.0.clone());
    let mut out = Vec::with_capacity(routes.len());
    for (alias, spec) in routes {
        let mut spec: RouteSpec = serde_json::from_str(&spec).map_err(|e| ApiError::internal("stored route", e))?;
        let rows = cands.remove(&alias).unwrap_or_default();
        spec.candidates = rows
            .iter()
            .map(|c| CandidateSpec {
                upstream: c.1.clone(),
                model: c.2.clone(),
                weight: u32::try_from(c.3).unwrap_or(0),
                priority: u32::try_from(c.4).unwrap_or(0),
            })
            .collect();
        spec.alias = alias;
        out.push(StoredRoute { spec, enabled: rows.iter().map(|c| c.5).collect() });
    }
    Ok(out)
}

/// Upstream keys as stored: (upstream, ciphertext, nonce, master key id). `for_update` locks the
/// rows for the rest of the transaction (rotation).
pub async fn sealed_keys(
    conn: &mut PgConnection,
    for_update: bool,
) -> Result<Vec<(String, Vec<u8>, Vec<u8>, String)>, sqlx::Error> {
    // One statement per case (the macros check literal SQL); `!`: not null where the key is set.
    let rows = if for_update {
        sqlx::query_as!(
            SealedRow,
            r#"SELECT name, key_ciphertext AS "ct!", key_nonce AS "nonce!", key_id AS "key_id!" FROM upstreams
               WHERE key_ciphertext IS NOT NULL ORDER BY name FOR UPDATE"#
        )
        .fetch_all(&mut *conn)
        .await?
    } else {
        sqlx::query_as!(
            SealedRow,
            r#"SELECT name, key_ciphertext AS "ct!", key_nonce AS "nonce!", key_id AS "key_id!" FROM upstreams
               WHERE key_ciphertext IS NOT NULL ORDER BY name"#
        )
        .fetch_all(&mut *conn)
        .await?
    };
    Ok(rows.into_iter().map(|r| (r.name, r.ct, r.nonce, r.key_id)).collect())
}

struct SealedRow {
    name: String,
    ct: Vec<u8>,
    nonce: Vec<u8>,
    key_id: String,
}

/// Every stored upstream key, decrypted: upstream name → key (what data planes receive).
pub async fn upstream_keys(conn: &mut PgConnection, keys: &MasterKeys) -> ApiResult<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (name, ct, nonce, key_id) in sealed_keys(conn, false).await? {
        let plain = open_key(keys, &name, &ct, &nonce, &key_id)?;
        out.insert(name, plain);
    }
    Ok(out)
}

/// One upstream's stored key, decrypted.
pub async fn upstream_key(conn: &mut PgConnection, keys: &MasterKeys, name: &str) -> ApiResult<Option<String>> {
    let row = sqlx::query!(
        r#"SELECT key_ciphertext AS "ct!", key_nonce AS "nonce!", key_id AS "key_id!" FROM upstreams
           WHERE name = $1 AND key_ciphertext IS NOT NULL"#,
        name
    )
    .fetch_optional(&mut *conn)
    .await?;
    row.map(|r| open_key(keys, name, &r.ct, &r.nonce, &r.key_id)).transpose()
}

fn open_key(keys: &MasterKeys, name: &str, ct: &[u8], nonce: &[u8], key_id: &str) -> ApiResult<String> {
    let plain = keys.open(key_id, nonce, ct, name).map_err(|e| ApiError::internal("upstream key", e))?;
    String::from_utf8(plain).map_err(|e| ApiError::internal("upstream key", e))
}

/// Stores an upstream's key, sealed under the current master key.
pub async fn store_key(conn: &mut PgConnection, name: &str, sealed: Sealed) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE upstreams SET key_ciphertext = $2, key_nonce = $3, key_id = $4 WHERE name = $1",
        name,
        sealed.ciphertext,
        sealed.nonce,
        sealed.key_id,
    )
    .execute(&mut *conn)
    .await
    .map(drop)
}

/// Rows grouped by a key, in their original order (one pass, not a scan per parent).
fn group<T>(rows: Vec<T>, key: impl Fn(&T) -> String) -> std::collections::HashMap<String, Vec<T>> {
    let mut map: std::collections::HashMap<String, Vec<T>> = std::collections::HashMap::new();
    for r in rows {
        map.entry(key(&r)).or_default().push(r);
    }
    map
}

pub async fn write_tenant(conn: &mut PgConnection, t: &TenantSpec) -> ApiResult<()> {
    // (Keys live in their own table.) Written field by field, in the shape stored since the first
    // version, so saving a tenant unchanged compares equal; an optional field only when set.
    let mut spec = json!({ "id": t.id, "keys": [], "allowed_aliases": t.allowed_aliases, "limits": t.limits,
                           "budgets": t.budgets, "groups": t.groups });
    if t.trace_content {
        spec["trace_content"] = json!(true);
    }
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

pub async fn tenant_json(conn: &mut PgConnection, id: &str) -> ApiResult<Option<Value>> {
    Ok(sqlx::query_scalar!("SELECT spec FROM tenants WHERE id = $1", id).fetch_optional(&mut *conn).await?)
}

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

/// Every tenant's stored spec with its count of active keys and of all keys.
pub async fn tenants_with_key_counts(db: &PgPool) -> ApiResult<Vec<(Value, i64, i64)>> {
    Ok(sqlx::query!(
        r#"SELECT t.spec, count(k.id) FILTER (WHERE k.status = 'active') AS "active!", count(k.id) AS "all!"
         FROM tenants t LEFT JOIN api_keys k ON k.tenant_id = t.id GROUP BY t.id, t.spec ORDER BY t.id"#
    )
    .fetch_all(db)
    .await?
    .into_iter()
    .map(|r| (r.spec, r.active, r.all))
    .collect())
}

/// Every tenant's id and stored spec.
pub async fn tenant_specs(db: &PgPool) -> ApiResult<Vec<(String, Value)>> {
    Ok(sqlx::query!("SELECT id, spec FROM tenants ORDER BY id")
        .fetch_all(db)
        .await?
        .into_iter()
        .map(|r| (r.id, r.spec))
        .collect())
}

/// A new key row (its digest only). `false` when a key of that id exists.
pub async fn insert_key(
    conn: &mut PgConnection,
    id: &str,
    tenant: &str,
    digest: &str,
    prefix: &str,
    expires_at: Option<&str>,
    limits: Option<Value>,
) -> ApiResult<bool> {
    let inserted = sqlx::query!(
        "INSERT INTO api_keys (id, tenant_id, digest, prefix, status, expires_at, limits)
         VALUES ($1, $2, $3, $4, 'active', $5::text::timestamptz, $6) ON CONFLICT (id) DO NOTHING",
        id,
        tenant,
        digest,
        prefix,
        expires_at,
        limits,
    )
    .execute(&mut *conn)
    .await?;
    Ok(inserted.rows_affected() > 0)
}

/// A tenant's keys, oldest first.
pub async fn keys_of(db: &PgPool, tenant: &str) -> ApiResult<Vec<KeyView>> {
    Ok(sqlx::query!(
        r#"SELECT id, prefix, status, to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS expires_at,
                  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS "created_at!",
                  limits, alias_limits, budgets
           FROM api_keys WHERE tenant_id = $1 ORDER BY created_at, id"#,
        tenant,
    )
    .fetch_all(db)
    .await?
    .into_iter()
    .map(|r| KeyView {
        id: r.id,
        prefix: r.prefix,
        status: r.status,
        expires_at: r.expires_at,
        created_at: r.created_at,
        limits: stored(&r.limits),
        alias_limits: stored(&r.alias_limits),
        budgets: stored(&r.budgets),
    })
    .collect())
}

/// A key's limits, per-alias limits and budgets; its tenant, or `None` when there is no such key.
pub async fn set_key_policy(
    conn: &mut PgConnection,
    id: &str,
    limits: &LimitsSpec,
    alias_limits: &BTreeMap<String, LimitsSpec>,
    budgets: &[BudgetSpec],
) -> ApiResult<Option<String>> {
    let json = |v: serde_json::Result<Value>| v.map_err(|e| ApiError::internal("key policy", e));
    let (limits, alias_limits, budgets) = (
        json(serde_json::to_value(limits))?,
        json(serde_json::to_value(alias_limits))?,
        json(serde_json::to_value(budgets))?,
    );
    Ok(sqlx::query_scalar!(
        "UPDATE api_keys SET limits = $2, alias_limits = $3, budgets = $4 WHERE id = $1 RETURNING tenant_id",
        id,
        limits,
        alias_limits,
        budgets,
    )
    .fetch_optional(&mut *conn)
    .await?)
}

/// A key's policy as stored (the audit log's before and after).
pub async fn key_policy_json(conn: &mut PgConnection, id: &str) -> ApiResult<Option<Value>> {
    Ok(sqlx::query_scalar!(
        r#"SELECT jsonb_build_object('limits', limits, 'alias_limits', alias_limits, 'budgets', budgets) AS "p!"
           FROM api_keys WHERE id = $1"#,
        id
    )
    .fetch_optional(&mut *conn)
    .await?)
}

/// Revokes a key; its tenant, or `None` when there is no such key.
pub async fn revoke_key(conn: &mut PgConnection, id: &str) -> ApiResult<Option<String>> {
    Ok(sqlx::query_scalar!("UPDATE api_keys SET status = 'revoked' WHERE id = $1 RETURNING tenant_id", id)
        .fetch_optional(&mut *conn)
        .await?)
}

/// Sets a key's status (a rollback restores the statuses of its version).
pub async fn set_key_status(conn: &mut PgConnection, id: &str, status: KeyStatus) -> ApiResult<()> {
    let status = if status == KeyStatus::Active { "active" } else { "revoked" };
    sqlx::query!("UPDATE api_keys SET status = $2 WHERE id = $1", id, status).execute(&mut *conn).await?;
    Ok(())
}

pub async fn delete_upstream(conn: &mut PgConnection, name: &str) -> ApiResult<()> {
    sqlx::query!("DELETE FROM upstreams WHERE name = $1", name).execute(&mut *conn).await?;
    Ok(())
}

pub async fn delete_route(conn: &mut PgConnection, alias: &str) -> ApiResult<()> {
    sqlx::query!("DELETE FROM routes WHERE alias = $1", alias).execute(&mut *conn).await?;
    Ok(())
}

/// Deletes every route and its candidates (a rollback writes its version's routes next).
pub async fn clear_routes(conn: &mut PgConnection) -> ApiResult<()> {
    sqlx::query!("DELETE FROM route_candidates").execute(&mut *conn).await?;
    sqlx::query!("DELETE FROM routes").execute(&mut *conn).await?;
    Ok(())
}

/// Deletes every upstream model (a rollback writes its version's upstreams next; upstream rows
/// and their sealed keys stay).
pub async fn clear_models(conn: &mut PgConnection) -> ApiResult<()> {
    sqlx::query!("DELETE FROM upstream_models").execute(&mut *conn).await?;
    Ok(())
}

/// Deletes every upstream not named in `keep`.
pub async fn delete_upstreams_except(conn: &mut PgConnection, keep: &[String]) -> ApiResult<()> {
    sqlx::query!("DELETE FROM upstreams WHERE NOT (name = ANY($1))", keep).execute(&mut *conn).await?;
    Ok(())
}

/// Routes as the API shows them (all, or the one named).
pub async fn route_views(conn: &mut PgConnection, only: Option<&str>) -> ApiResult<Vec<RouteView>> {
    Ok(load_routes(conn, only).await?.into_iter().map(StoredRoute::view).collect())
}
