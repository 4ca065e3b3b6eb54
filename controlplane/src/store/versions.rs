//! Configuration versions (`config_versions`: each committed document without upstream keys, its
//! hash, author and summary) and the audit log.

use ax_protocol::admin::{AuditEntry, VersionView};
use ax_protocol::snapshot::Document;
use sqlx::{PgConnection, PgPool};

use crate::error::{ApiError, ApiResult};

/// Serializes all configuration writers (one advisory lock id for the whole config).
pub const CONFIG_LOCK: i64 = 0x6178_636f_6e66;

/// Takes the configuration's transaction-scoped advisory lock: versions are strictly ordered
/// across control-plane replicas.
pub async fn lock(conn: &mut PgConnection) -> ApiResult<()> {
    sqlx::query!("SELECT pg_advisory_xact_lock($1)", CONFIG_LOCK).execute(&mut *conn).await?;
    Ok(())
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

/// The latest version as stored: (version, hash, the document's text).
pub async fn latest_text(db: &PgPool) -> ApiResult<Option<(i64, String, String)>> {
    let row = sqlx::query!(
        r#"SELECT version, content_hash, coalesce(document_json, document::text) AS "document!" FROM config_versions
         ORDER BY version DESC LIMIT 1"#
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| (r.version, r.content_hash, r.document)))
}

/// The document text of one version.
pub async fn document_text(conn: &mut PgConnection, version: i64) -> ApiResult<Option<String>> {
    Ok(sqlx::query_scalar!(
        r#"SELECT coalesce(document_json, document::text) AS "document!" FROM config_versions WHERE version = $1"#,
        version,
    )
    .fetch_optional(&mut *conn)
    .await?)
}

/// Stores the next version and notifies every control-plane replica (`ax_config`); call under
/// `lock`. Returns the new version.
pub async fn insert(conn: &mut PgConnection, hash: &str, text: &str, author: &str, summary: &str) -> ApiResult<i64> {
    let version = sqlx::query_scalar!(
        "INSERT INTO config_versions (version, content_hash, document_json, author, summary)
         SELECT coalesce(max(version), 0) + 1, $1, $2, $3, $4 FROM config_versions RETURNING version",
        hash,
        text,
        author,
        summary,
    )
    .fetch_one(&mut *conn)
    .await?;
    sqlx::query!("SELECT pg_notify('ax_config', $1)", version.to_string()).execute(&mut *conn).await?;
    Ok(version)
}

/// The number of the newest version, if any.
pub async fn newest(conn: &mut PgConnection) -> ApiResult<Option<i64>> {
    Ok(sqlx::query_scalar!("SELECT max(version) FROM config_versions").fetch_one(&mut *conn).await?)
}

/// The newest 200 versions, newest first.
pub async fn list(db: &PgPool) -> ApiResult<Vec<VersionView>> {
    Ok(sqlx::query!(
        r#"SELECT version, content_hash, author, summary, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS "created_at!"
           FROM config_versions ORDER BY version DESC LIMIT 200"#
    )
    .fetch_all(db)
    .await?
    .into_iter()
    .map(|r| VersionView {
        version: r.version,
        hash: r.content_hash,
        author: r.author,
        summary: r.summary,
        created_at: r.created_at,
    })
    .collect())
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

/// Audit entries, newest first, by operator and target when given.
pub async fn audit_entries(
    db: &PgPool,
    operator: Option<&str>,
    target: Option<&str>,
    limit: i64,
) -> ApiResult<Vec<AuditEntry>> {
    Ok(sqlx::query!(
        r#"SELECT id, operator, action, target, before, after, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS "at!"
           FROM audit_log WHERE ($1::text IS NULL OR operator = $1) AND ($2::text IS NULL OR target = $2)
           ORDER BY id DESC LIMIT $3"#,
        operator,
        target,
        limit,
    )
    .fetch_all(db)
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
    .collect())
}
