//! Data planes (`data_planes`: token digests, the version each applied, its health summary) and
//! their websocket connections (`node_connections`, one row per connection on any replica).

use ax_protocol::admin::NodeView;
use sqlx::PgPool;

use crate::error::ApiResult;

/// Registers a node (or gives it a new token).
pub async fn register(db: &PgPool, id: &str, token_digest: &str) -> ApiResult<()> {
    sqlx::query!(
        "INSERT INTO data_planes (id, token_digest) VALUES ($1, $2)
         ON CONFLICT (id) DO UPDATE SET token_digest = excluded.token_digest",
        id,
        token_digest,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// The node a token digest belongs to.
pub async fn by_token(db: &PgPool, token_digest: &str) -> ApiResult<Option<String>> {
    Ok(sqlx::query_scalar!("SELECT id FROM data_planes WHERE token_digest = $1", token_digest)
        .fetch_optional(db)
        .await?)
}

/// Every node, with its connections heard from within `connected_within_s` and its dead letters.
pub async fn list(db: &PgPool, connected_within_s: f64) -> ApiResult<Vec<NodeView>> {
    Ok(sqlx::query!(
        r#"SELECT d.id, d.applied_version, d.last_error,
                  to_char(d.last_seen AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS last_seen, d.health,
                  (SELECT count(*) FROM node_connections c
                   WHERE c.node = d.id AND c.last_seen > now() - make_interval(secs => $1)) AS "connections!",
                  (SELECT count(*) FROM usage_dead_letters l WHERE l.node = d.id) AS "dead_letters!"
           FROM data_planes d ORDER BY d.id"#,
        connected_within_s,
    )
    .fetch_all(db)
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
    .collect())
}

/// Data-plane processes connected now, to any replica: websockets heard from within
/// `connected_within_s`.
pub async fn live_connections(db: &PgPool, connected_within_s: f64) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM node_connections WHERE last_seen > now() - make_interval(secs => $1)"#,
        connected_within_s
    )
    .fetch_one(db)
    .await
}

/// A websocket connection of `node` opened on this replica.
pub async fn open_connection(db: &PgPool, id: &str, node: &str, replica: &str, peer: &str) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO node_connections (id, node, replica, peer) VALUES ($1, $2, $3, $4)",
        id,
        node,
        replica,
        peer,
    )
    .execute(db)
    .await
    .map(drop)
}

pub async fn close_connection(db: &PgPool, id: &str) -> Result<(), sqlx::Error> {
    sqlx::query!("DELETE FROM node_connections WHERE id = $1", id).execute(db).await.map(drop)
}

/// The connection was heard from now.
pub async fn heartbeat(db: &PgPool, id: &str) -> Result<(), sqlx::Error> {
    sqlx::query!("UPDATE node_connections SET last_seen = now() WHERE id = $1", id).execute(db).await.map(drop)
}

/// Connections of replicas that died without closing them.
pub async fn purge_stale_connections(db: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query!("DELETE FROM node_connections WHERE last_seen < now() - interval '1 hour'").execute(db).await.map(drop)
}

/// The node's last contact and, when given, the outcome of a version: applied (`None`) or
/// refused with its error.
pub async fn seen(db: &PgPool, node: &str, outcome: Option<(u64, Option<String>)>) -> Result<(), sqlx::Error> {
    match outcome {
        None => sqlx::query!("UPDATE data_planes SET last_seen = now() WHERE id = $1", node).execute(db).await,
        Some((v, None)) => {
            sqlx::query!(
                "UPDATE data_planes SET last_seen = now(), applied_version = $2, last_error = NULL WHERE id = $1",
                node,
                i64::try_from(v).unwrap_or(i64::MAX),
            )
            .execute(db)
            .await
        }
        Some((v, Some(e))) => {
            sqlx::query!(
                "UPDATE data_planes SET last_seen = now(), last_error = $2 WHERE id = $1",
                node,
                format!("version {v}: {e}")
            )
            .execute(db)
            .await
        }
    }
    .map(drop)
}

/// The node's latest health table.
pub async fn record_health(
    db: &PgPool,
    node: &str,
    health: &ax_protocol::health::NodeHealth,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE data_planes SET last_seen = now(), health = $2 WHERE id = $1",
        node,
        sqlx::types::Json(health) as _,
    )
    .execute(db)
    .await
    .map(drop)
}
