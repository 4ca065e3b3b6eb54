//! The configuration as data planes see it: compiled from the tables into one
//! `ax_protocol::snapshot::Document`, validated by the data plane's own compiler before any change
//! commits, and versioned (`config_versions`: the document without upstream keys, its hash, the
//! author). Every mutation runs in one transaction that ends in `commit`, which takes a
//! transaction-scoped advisory lock so versions are strictly ordered across control-plane replicas,
//! and NOTIFYs `ax_config` so every replica pushes the new version to its data planes.

use ax_protocol::config::{CandidateSpec, KeySpec, KeyStatus, ModelSpec, RouteSpec, TenantSpec, UpstreamSpec};
use ax_protocol::snapshot::Document;
use sha2::{Digest, Sha256};
use sqlx::PgConnection;

use std::collections::BTreeMap;

use crate::crypto::{MasterKeys, Sealed};
use crate::error::{ApiError, ApiResult, FieldError};

/// Serializes all configuration writers (one advisory lock id for the whole config).
pub const CONFIG_LOCK: i64 = 0x6178_636f_6e66;

/// Reads the tables into a document, without upstream keys (they travel beside it: `upstream_keys`).
pub async fn load(conn: &mut PgConnection) -> ApiResult<Document> {
    let upstreams = load_upstreams(conn, None).await?.into_iter().map(|(u, _)| u).collect();
    let routes = load_routes(conn, None)
        .await?
        .into_iter()
        .map(|r| {
            let mut spec = r.spec;
            for (c, on) in spec.candidates.iter_mut().zip(r.enabled) {
                // A disabled candidate is weight 0: the data plane never picks it.
                if !on {
                    c.weight = 0;
                }
            }
            spec
        })
        .collect();
    let mut doc = Document { upstreams, routes, tenants: Vec::new() };
    let tenants: Vec<(String, serde_json::Value)> =
        sqlx::query_as("SELECT id, spec FROM tenants ORDER BY id").fetch_all(&mut *conn).await?;
    let api_keys: Vec<(String, String, String, String, Option<String>, Option<serde_json::Value>)> = sqlx::query_as(
        "SELECT id, tenant_id, digest, status,
                to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), limits
         FROM api_keys ORDER BY tenant_id, id",
    )
    .fetch_all(&mut *conn)
    .await?;
    let api_keys = group(api_keys, |k| k.1.clone());
    for (id, spec) in tenants {
        let mut t: TenantSpec = serde_json::from_value(spec).map_err(|e| ApiError::internal("stored tenant", e))?;
        t.id.clone_from(&id);
        t.keys = api_keys
            .get(&id)
            .into_iter()
            .flatten()
            .map(|k| KeySpec {
                id: k.0.clone(),
                sha256: Some(k.2.clone()),
                key: None,
                status: if k.3 == "active" { KeyStatus::Active } else { KeyStatus::Revoked },
                expires_at: k.4.clone(),
                limits: k.5.clone().and_then(|v| serde_json::from_value(v).ok()).unwrap_or_default(),
            })
            .collect();
        doc.tenants.push(t);
    }
    Ok(doc)
}

/// Upstreams (all, or the one named) with their models, and whether each has a stored key.
pub async fn load_upstreams(conn: &mut PgConnection, only: Option<&str>) -> ApiResult<Vec<(UpstreamSpec, bool)>> {
    let ups: Vec<(String, serde_json::Value, bool)> = sqlx::query_as(
        "SELECT name, spec, key_ciphertext IS NOT NULL FROM upstreams WHERE $1::text IS NULL OR name = $1 ORDER BY name",
    )
    .bind(only)
    .fetch_all(&mut *conn)
    .await?;
    let models: Vec<(String, serde_json::Value)> = sqlx::query_as(
        "SELECT upstream, spec FROM upstream_models WHERE $1::text IS NULL OR upstream = $1 ORDER BY upstream, name",
    )
    .bind(only)
    .fetch_all(&mut *conn)
    .await?;
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

/// Routes (all, or the one named) with their candidates.
pub async fn load_routes(conn: &mut PgConnection, only: Option<&str>) -> ApiResult<Vec<StoredRoute>> {
    let routes: Vec<(String, serde_json::Value)> =
        sqlx::query_as("SELECT alias, spec FROM routes WHERE $1::text IS NULL OR alias = $1 ORDER BY alias")
            .bind(only)
            .fetch_all(&mut *conn)
            .await?;
    let cands: Vec<(String, String, String, i32, i32, bool)> = sqlx::query_as(
        "SELECT alias, upstream, model, weight, priority, enabled FROM route_candidates
         WHERE $1::text IS NULL OR alias = $1 ORDER BY alias, position",
    )
    .bind(only)
    .fetch_all(&mut *conn)
    .await?;
    let mut cands = group(cands, |c| c.0.clone());
    let mut out = Vec::with_capacity(routes.len());
    for (alias, spec) in routes {
        let mut spec: RouteSpec = serde_json::from_value(spec).map_err(|e| ApiError::internal("stored route", e))?;
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
    const READ: &str = "SELECT name, key_ciphertext, key_nonce, key_id FROM upstreams WHERE key_ciphertext IS NOT NULL";
    let sql = if for_update { format!("{READ} ORDER BY name FOR UPDATE") } else { format!("{READ} ORDER BY name") };
    sqlx::query_as(&sql).fetch_all(&mut *conn).await
}

/// Every stored upstream key, decrypted: upstream name → key (what data planes receive).
pub async fn upstream_keys(conn: &mut PgConnection, keys: &MasterKeys) -> ApiResult<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (name, ct, nonce, key_id) in sealed_keys(conn, false).await? {
        let plain = keys.open(&key_id, &nonce, &ct, &name).map_err(|e| ApiError::internal("upstream key", e))?;
        out.insert(name, String::from_utf8(plain).map_err(|e| ApiError::internal("upstream key", e))?);
    }
    Ok(out)
}

/// Stores an upstream's key, sealed under the current master key.
pub async fn store_key(conn: &mut PgConnection, name: &str, sealed: Sealed) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE upstreams SET key_ciphertext = $2, key_nonce = $3, key_id = $4 WHERE name = $1")
        .bind(name)
        .bind(sealed.ciphertext)
        .bind(sealed.nonce)
        .bind(sealed.key_id)
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

/// Validates a document with the data plane's compiler: what passes here, every data plane accepts.
pub fn validate(doc: &Document) -> Result<(), FieldError> {
    let spec = ax_protocol::config::ConfigSpec {
        upstreams: doc.upstreams.clone(),
        routes: doc.routes.clone(),
        tenants: doc.tenants.clone(),
        ..Default::default()
    };
    // `${NAME}` references are resolved on each data plane; here any name resolves.
    ax_dataplane::snapshot::build(&spec, 1, &|_| Some("x".to_owned()), None)
        .map(drop)
        .map_err(|e| FieldError::new(e.path, e.message))
}

/// Ends a mutation: validates the whole resulting configuration (422 naming the field if it
/// would not compile; the caller's transaction is then dropped, so nothing changes), stores a new
/// version and notifies every control-plane replica. Returns the new version.
pub async fn commit(conn: &mut PgConnection, author: &str, summary: &str, focus: Focus<'_>) -> ApiResult<i64> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(CONFIG_LOCK).execute(&mut *conn).await?;
    let doc = load(conn).await?;
    validate(&doc).map_err(|f| ApiError::invalid(vec![focus.rebase(&doc, f)]))?;
    let text = serde_json::to_string(&doc).map_err(|e| ApiError::internal("document", e))?;
    let version: i64 = sqlx::query_scalar(
        "INSERT INTO config_versions (version, content_hash, document, document_json, author, summary)
         SELECT coalesce(max(version), 0) + 1, $1, $2::jsonb, $2, $3, $4 FROM config_versions RETURNING version",
    )
    .bind(hex::encode(Sha256::digest(text.as_bytes())))
    .bind(&text)
    .bind(author)
    .bind(summary)
    .fetch_one(&mut *conn)
    .await?;
    sqlx::query("SELECT pg_notify('ax_config', $1)").bind(version.to_string()).execute(&mut *conn).await?;
    Ok(version)
}

/// The entity a mutation edited: validation errors inside it get paths relative to the request
/// body (`candidates[0].weight`, not `routes[412].candidates[0].weight`).
#[derive(Clone, Copy)]
pub enum Focus<'a> {
    None,
    Route(&'a str),
    Upstream(&'a str),
    Tenant(&'a str),
}

impl Focus<'_> {
    pub fn rebase(self, doc: &Document, mut f: FieldError) -> FieldError {
        let prefix = match self {
            Focus::None => None,
            Focus::Route(a) => doc.routes.iter().position(|r| r.alias == a).map(|i| format!("routes[{i}]")),
            Focus::Upstream(n) => doc.upstreams.iter().position(|u| u.name == n).map(|i| format!("upstreams[{i}]")),
            Focus::Tenant(t) => doc.tenants.iter().position(|x| x.id == t).map(|i| format!("tenants[{i}]")),
        };
        if let Some(rest) = prefix.as_deref().and_then(|p| f.path.strip_prefix(p)) {
            f.path = rest.trim_start_matches('.').to_owned();
        }
        f
    }
}

/// Records who changed what (never a secret: callers pass documents without keys).
pub async fn audit(
    conn: &mut PgConnection,
    operator: &str,
    action: &str,
    target: &str,
    before: Option<serde_json::Value>,
    after: Option<serde_json::Value>,
) -> ApiResult<()> {
    sqlx::query("INSERT INTO audit_log (operator, action, target, before, after) VALUES ($1, $2, $3, $4, $5)")
        .bind(operator)
        .bind(action)
        .bind(target)
        .bind(before)
        .bind(after)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Replaces the routing tables with `doc` (rollback). Upstream keys stay as they are.
pub async fn restore(conn: &mut PgConnection, doc: &Document) -> ApiResult<()> {
    sqlx::query("DELETE FROM route_candidates").execute(&mut *conn).await?;
    sqlx::query("DELETE FROM routes").execute(&mut *conn).await?;
    for r in &doc.routes {
        crate::admin::write_route(conn, r, &r.candidates.iter().map(|c| (c.clone(), c.weight > 0)).collect::<Vec<_>>())
            .await?;
    }
    sqlx::query("DELETE FROM upstream_models").execute(&mut *conn).await?;
    for u in &doc.upstreams {
        crate::admin::write_upstream(conn, u).await?;
    }
    sqlx::query("DELETE FROM upstreams WHERE NOT (name = ANY($1))")
        .bind(doc.upstreams.iter().map(|u| u.name.clone()).collect::<Vec<_>>())
        .execute(&mut *conn)
        .await?;
    for t in &doc.tenants {
        crate::admin::write_tenant(conn, t).await?;
        for k in &t.keys {
            let status = if k.status == KeyStatus::Active { "active" } else { "revoked" };
            sqlx::query("UPDATE api_keys SET status = $2 WHERE id = $1")
                .bind(&k.id)
                .bind(status)
                .execute(&mut *conn)
                .await?;
        }
    }
    Ok(())
}
