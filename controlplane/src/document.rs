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
    let routes = load_routes(conn, None).await?.into_iter().map(StoredRoute::live).collect();
    let tenants = load_tenants(conn, None).await?;
    Ok(Document { upstreams, routes, tenants })
}

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
    let api_keys: Vec<(String, String, String, String, Option<String>, Option<serde_json::Value>)> = sqlx::query!(
        r#"SELECT id, tenant_id, digest, status,
                  to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS expires_at, limits
           FROM api_keys WHERE $1::text IS NULL OR tenant_id = $1 ORDER BY id COLLATE "C""#,
        only,
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|r| (r.id, r.tenant_id, r.digest, r.status, r.expires_at, r.limits))
    .collect();
    let api_keys = group(api_keys, |k| k.1.clone());
    let mut out = Vec::with_capacity(tenants.len());
    for (id, spec) in tenants {
        let mut t: TenantSpec = serde_json::from_str(&spec).map_err(|e| ApiError::internal("stored tenant", e))?;
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
        out.push(t);
    }
    Ok(out)
}

/// The document of the latest stored version, if any.
pub async fn latest(conn: &mut PgConnection) -> ApiResult<Option<Document>> {
    let text = sqlx::query_scalar!(
        r#"SELECT coalesce(document_json, document::text) AS "document!" FROM config_versions ORDER BY version DESC LIMIT 1"#
    )
    .fetch_optional(&mut *conn)
    .await?;
    text.map(|t| serde_json::from_str(&t).map_err(|e| ApiError::internal("stored version", e))).transpose()
}

/// The document the tables hold now. After a change to one route or one tenant (`focus`), it is
/// the latest version with that entity re-read (10,000 aliases: one row instead of 30,000); any
/// other change, or no stored version, reads every table. Both give the same document: every
/// change to the tables ends in `commit` in the same transaction, so the latest version is the
/// tables as they were before this change (with `AX_VERIFY_DOCUMENTS=1`, as in the tests, `commit`
/// checks that against a full read).
pub async fn current(conn: &mut PgConnection, focus: Focus<'_>) -> ApiResult<Document> {
    if matches!(focus, Focus::Route(_) | Focus::Tenant(_)) {
        if let Some(mut doc) = latest(conn).await? {
            refresh(conn, &mut doc, focus).await?;
            return Ok(doc);
        }
    }
    load(conn).await
}

/// The live configuration: the latest version (the tables, when none is stored yet).
pub async fn live(conn: &mut PgConnection) -> ApiResult<Document> {
    match latest(conn).await? {
        Some(doc) => Ok(doc),
        None => load(conn).await,
    }
}

/// Re-reads the focused route or tenant from the tables into `doc` (anything else: every table).
pub async fn refresh(conn: &mut PgConnection, doc: &mut Document, focus: Focus<'_>) -> ApiResult<()> {
    match focus {
        Focus::Route(alias) => {
            let fresh = load_routes(conn, Some(alias)).await?.into_iter().map(StoredRoute::live).next();
            replace_sorted(&mut doc.routes, alias, fresh, |r| &r.alias);
        }
        Focus::Tenant(id) => {
            let fresh = load_tenants(conn, Some(id)).await?.into_iter().next();
            replace_sorted(&mut doc.tenants, id, fresh, |t| &t.id);
        }
        Focus::None | Focus::Upstream(_) => *doc = load(conn).await?,
    }
    Ok(())
}

/// Puts `item` where `name` sorts in `list` (sorted by `key` in byte order, as the tables are
/// read), replacing the entry of that name; `None` removes it. The entry is found by a scan, not
/// by its sorted position: a version stored by an older build may be in another order.
fn replace_sorted<T>(list: &mut Vec<T>, name: &str, item: Option<T>, key: impl Fn(&T) -> &String) {
    match (list.iter().position(|x| key(x).as_str() == name), item) {
        (Some(i), Some(it)) => list[i] = it,
        (Some(i), None) => {
            list.remove(i);
        }
        (None, Some(it)) => {
            let at = list.partition_point(|x| key(x).as_str() < name);
            list.insert(at, it);
        }
        (None, None) => {}
    }
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
        let plain = keys.open(&key_id, &nonce, &ct, &name).map_err(|e| ApiError::internal("upstream key", e))?;
        out.insert(name, String::from_utf8(plain).map_err(|e| ApiError::internal("upstream key", e))?);
    }
    Ok(out)
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

/// Validates a document with the rules every data plane applies (`ax_protocol::validate`): what
/// passes here, every data plane accepts. The document is moved in and handed back (not copied:
/// 10,000 aliases).
pub fn validate(doc: Document) -> (Result<(), FieldError>, Document) {
    let Document { upstreams, routes, tenants } = doc;
    let spec = ax_protocol::config::ConfigSpec { upstreams, routes, tenants, ..Default::default() };
    // `${NAME}` references are resolved on each data plane; here any name resolves.
    let result = ax_protocol::validate::validate(&spec, &|_| Some("x".to_owned()))
        .map(drop)
        .map_err(|e| FieldError::new(e.path, e.message));
    let ax_protocol::config::ConfigSpec { upstreams, routes, tenants, .. } = spec;
    (result, Document { upstreams, routes, tenants })
}

/// Ends a mutation: validates the whole resulting configuration (422 naming the field if it
/// would not compile; the caller's transaction is then dropped, so nothing changes), stores a new
/// version and notifies every control-plane replica. Returns the new version.
pub async fn commit(conn: &mut PgConnection, author: &str, summary: &str, focus: Focus<'_>) -> ApiResult<i64> {
    let ms = |t: std::time::Instant| t.elapsed().as_secs_f64() * 1000.0;
    let t = std::time::Instant::now();
    sqlx::query!("SELECT pg_advisory_xact_lock($1)", CONFIG_LOCK).execute(&mut *conn).await?;
    let lock_ms = ms(t);
    let t = std::time::Instant::now();
    let doc = current(conn, focus).await?;
    if std::env::var("AX_VERIFY_DOCUMENTS").as_deref() == Ok("1") {
        let full = load(conn).await?;
        if full != doc {
            return Err(ApiError::internal("document", "the incremental document differs from the tables"));
        }
    }
    let load_ms = ms(t);
    let t = std::time::Instant::now();
    let (valid, doc) = validate(doc);
    valid.map_err(|f| ApiError::invalid(vec![focus.rebase(&doc, f)]))?;
    let validate_ms = ms(t);
    let t = std::time::Instant::now();
    let text = serde_json::to_string(&doc).map_err(|e| ApiError::internal("document", e))?;
    let version = sqlx::query_scalar!(
        "INSERT INTO config_versions (version, content_hash, document_json, author, summary)
         SELECT coalesce(max(version), 0) + 1, $1, $2, $3, $4 FROM config_versions RETURNING version",
        hex::encode(Sha256::digest(text.as_bytes())),
        text,
        author,
        summary,
    )
    .fetch_one(&mut *conn)
    .await?;
    sqlx::query!("SELECT pg_notify('ax_config', $1)", version.to_string()).execute(&mut *conn).await?;
    tracing::info!(version, lock_ms, load_ms, validate_ms, store_ms = ms(t), "configuration version stored");
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
    sqlx::query!(
        "INSERT INTO audit_log (operator, action, target, before, after) VALUES ($1, $2, $3, $4, $5)",
        operator,
        action,
        target,
        before,
        after,
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Replaces the routing tables with `doc` (rollback). Upstream keys stay as they are.
pub async fn restore(conn: &mut PgConnection, doc: &Document) -> ApiResult<()> {
    sqlx::query!("DELETE FROM route_candidates").execute(&mut *conn).await?;
    sqlx::query!("DELETE FROM routes").execute(&mut *conn).await?;
    for r in &doc.routes {
        crate::admin::write_route(conn, r, &r.candidates.iter().map(|c| (c.clone(), c.weight > 0)).collect::<Vec<_>>())
            .await?;
    }
    sqlx::query!("DELETE FROM upstream_models").execute(&mut *conn).await?;
    for u in &doc.upstreams {
        crate::admin::write_upstream(conn, u).await?;
    }
    let keep: Vec<String> = doc.upstreams.iter().map(|u| u.name.clone()).collect();
    sqlx::query!("DELETE FROM upstreams WHERE NOT (name = ANY($1))", &keep).execute(&mut *conn).await?;
    for t in &doc.tenants {
        crate::admin::write_tenant(conn, t).await?;
        for k in &t.keys {
            let status = if k.status == KeyStatus::Active { "active" } else { "revoked" };
            sqlx::query!("UPDATE api_keys SET status = $2 WHERE id = $1", k.id, status).execute(&mut *conn).await?;
        }
    }
    Ok(())
}
