//! Operators, their sessions and failed logins.

use sqlx::PgPool;

use crate::error::ApiResult;

/// The operator behind a live session: (operator id, username, role, CSRF token).
pub async fn session(db: &PgPool, token_digest: &str) -> ApiResult<Option<(i64, String, String, String)>> {
    let row = sqlx::query!(
        "SELECT o.id, o.username, o.role, s.csrf_token FROM sessions s JOIN operators o ON o.id = s.operator_id
             WHERE s.token_digest = $1 AND s.expires_at > now()",
        token_digest,
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| (r.id, r.username, r.role, r.csrf_token)))
}

/// An operator by username: (id, password hash, role).
pub async fn by_username(db: &PgPool, username: &str) -> ApiResult<Option<(i64, String, String)>> {
    Ok(sqlx::query!("SELECT id, password_hash, role FROM operators WHERE username = $1", username)
        .fetch_optional(db)
        .await?
        .map(|r| (r.id, r.password_hash, r.role)))
}

/// Forgets a user's failed logins (after a right password).
pub async fn clear_failures(db: &PgPool, username: &str) -> ApiResult<()> {
    sqlx::query!("DELETE FROM login_failures WHERE username = $1", username).execute(db).await?;
    Ok(())
}

/// A new session of `hours`.
pub async fn create_session(
    db: &PgPool,
    token_digest: &str,
    operator_id: i64,
    csrf: &str,
    hours: i32,
) -> ApiResult<()> {
    sqlx::query!(
        "INSERT INTO sessions (token_digest, operator_id, csrf_token, expires_at)
         VALUES ($1, $2, $3, now() + make_interval(hours => $4))",
        token_digest,
        operator_id,
        csrf,
        hours,
    )
    .execute(db)
    .await?;
    Ok(())
}

pub async fn delete_session(db: &PgPool, token_digest: &str) -> ApiResult<()> {
    sqlx::query!("DELETE FROM sessions WHERE token_digest = $1", token_digest).execute(db).await?;
    Ok(())
}

/// Takes a login attempt's slot: under transaction-scoped advisory locks on the username and the
/// client address (always in that order), counts the failures within `window_s` and, when the
/// user has fewer than `per_user` and the client fewer than `per_client`, writes this attempt's
/// `login_failures` row. `false`: throttled (nothing written).
pub async fn take_login_slot(
    db: &PgPool,
    username: &str,
    client: &str,
    window_s: f64,
    per_user: i64,
    per_client: i64,
) -> ApiResult<bool> {
    let mut tx = db.begin().await?;
    sqlx::query!("SELECT pg_advisory_xact_lock(hashtextextended('ax-login-user:' || $1, 0))", username)
        .execute(&mut *tx)
        .await?;
    sqlx::query!("SELECT pg_advisory_xact_lock(hashtextextended('ax-login-client:' || $1, 0))", client)
        .execute(&mut *tx)
        .await?;
    let failures = sqlx::query!(
        r#"SELECT count(*) FILTER (WHERE username = $1) AS "by_user!", count(*) FILTER (WHERE client = $2) AS "by_client!"
         FROM login_failures WHERE at > now() - make_interval(secs => $3) AND (username = $1 OR client = $2)"#,
        username,
        client,
        window_s,
    )
    .fetch_one(&mut *tx)
    .await?;
    if failures.by_user >= per_user || failures.by_client >= per_client {
        tx.commit().await?;
        return Ok(false);
    }
    sqlx::query!("INSERT INTO login_failures (username, client) VALUES ($1, $2)", username, client)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(true)
}

/// Creates an operator, or sets the password and role of an existing one.
pub async fn upsert(db: &PgPool, username: &str, password_hash: &str, role: &str) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO operators (username, password_hash, role) VALUES ($1, $2, $3)
         ON CONFLICT (username) DO UPDATE SET password_hash = excluded.password_hash, role = excluded.role",
        username,
        password_hash,
        role,
    )
    .execute(db)
    .await
    .map(drop)
}

/// Expired sessions and failures older than a day.
pub async fn purge_expired(db: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query!("DELETE FROM sessions WHERE expires_at < now()").execute(db).await?;
    sqlx::query!("DELETE FROM login_failures WHERE at < now() - interval '1 day'").execute(db).await?;
    Ok(())
}
