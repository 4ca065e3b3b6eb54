//! Operators, their sessions and failed logins.

use ax_protocol::admin::OperatorView;
use sqlx::{PgConnection, PgPool};

use crate::error::ApiResult;

/// The operator behind a live session of an enabled operator: (operator id, username, role, CSRF
/// token, whether it must change its password first).
pub async fn session(db: &PgPool, token_digest: &str) -> ApiResult<Option<(i64, String, String, String, bool)>> {
    let row = sqlx::query!(
        "SELECT o.id, o.username, o.role, s.csrf_token, o.must_change_password FROM sessions s JOIN operators o ON o.id = s.operator_id
             WHERE s.token_digest = $1 AND s.expires_at > now() AND NOT o.disabled",
        token_digest,
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| (r.id, r.username, r.role, r.csrf_token, r.must_change_password)))
}

/// An operator by username: (id, password hash, role, disabled, must change its password).
pub async fn by_username(db: &PgPool, username: &str) -> ApiResult<Option<(i64, String, String, bool, bool)>> {
    Ok(sqlx::query!(
        "SELECT id, password_hash, role, disabled, must_change_password FROM operators WHERE username = $1",
        username
    )
    .fetch_optional(db)
    .await?
    .map(|r| (r.id, r.password_hash, r.role, r.disabled, r.must_change_password)))
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

/// Creates an operator, or sets the password and role of an existing one (and enables it: the
/// command line is how a locked-out deployment gets its admin back).
pub async fn upsert(db: &PgPool, username: &str, password_hash: &str, role: &str) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO operators (username, password_hash, role) VALUES ($1, $2, $3)
         ON CONFLICT (username) DO UPDATE SET password_hash = excluded.password_hash, role = excluded.role,
             disabled = false, must_change_password = false",
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

/// Every operator, by username.
pub async fn list(conn: &mut PgConnection) -> ApiResult<Vec<OperatorView>> {
    Ok(sqlx::query_as!(
        OperatorView,
        r#"SELECT o.username, o.role, o.disabled, o.must_change_password, o.sso_subject IS NOT NULL AS "sso!",
                  to_char(o.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS "created_at!",
                  (SELECT count(*) FROM sessions s WHERE s.operator_id = o.id AND s.expires_at > now()) AS "sessions!"
             FROM operators o ORDER BY o.username COLLATE "C""#
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// One operator, its row locked for the rest of the transaction.
pub async fn one_for_update(conn: &mut PgConnection, username: &str) -> ApiResult<Option<OperatorView>> {
    Ok(sqlx::query_as!(
        OperatorView,
        r#"SELECT o.username, o.role, o.disabled, o.must_change_password, o.sso_subject IS NOT NULL AS "sso!",
                  to_char(o.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS "created_at!",
                  (SELECT count(*) FROM sessions s WHERE s.operator_id = o.id AND s.expires_at > now()) AS "sessions!"
             FROM operators o WHERE o.username = $1 FOR UPDATE"#,
        username
    )
    .fetch_optional(&mut *conn)
    .await?)
}

/// Serializes changes to who is an admin (so two requests cannot each remove one of the last two).
pub async fn lock_admins(conn: &mut PgConnection) -> ApiResult<()> {
    sqlx::query!("SELECT pg_advisory_xact_lock(hashtextextended('ax-operators-admins', 0))")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Enabled admins other than `except`.
pub async fn other_admins(conn: &mut PgConnection, except: &str) -> ApiResult<i64> {
    Ok(sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM operators WHERE role = 'admin' AND NOT disabled AND username <> $1"#,
        except
    )
    .fetch_one(&mut *conn)
    .await?)
}

/// A new operator with a one-time password. `false`: the username is taken.
pub async fn insert(conn: &mut PgConnection, username: &str, password_hash: &str, role: &str) -> ApiResult<bool> {
    let done = sqlx::query!(
        "INSERT INTO operators (username, password_hash, role, must_change_password) VALUES ($1, $2, $3, true)
         ON CONFLICT (username) DO NOTHING",
        username,
        password_hash,
        role,
    )
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Sets an operator's role and whether it is disabled; a disabled one's sessions end.
pub async fn set_role_and_state(conn: &mut PgConnection, username: &str, role: &str, disabled: bool) -> ApiResult<()> {
    sqlx::query!("UPDATE operators SET role = $2, disabled = $3 WHERE username = $1", username, role, disabled)
        .execute(&mut *conn)
        .await?;
    if disabled {
        end_sessions(conn, username).await?;
    }
    Ok(())
}

/// A new password: one-time (`must_change`, set by an admin) or the operator's own choice.
pub async fn set_password(
    conn: &mut PgConnection,
    username: &str,
    password_hash: &str,
    must_change: bool,
) -> ApiResult<()> {
    sqlx::query!(
        "UPDATE operators SET password_hash = $2, must_change_password = $3 WHERE username = $1",
        username,
        password_hash,
        must_change,
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Ends every session of an operator.
pub async fn end_sessions(conn: &mut PgConnection, username: &str) -> ApiResult<()> {
    sqlx::query!("DELETE FROM sessions WHERE operator_id = (SELECT id FROM operators WHERE username = $1)", username)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Ends an operator's sessions but one (its own, after it changed its password).
pub async fn end_other_sessions(conn: &mut PgConnection, operator_id: i64, keep: &str) -> ApiResult<()> {
    sqlx::query!("DELETE FROM sessions WHERE operator_id = $1 AND token_digest <> $2", operator_id, keep)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// The password hash of an operator by id.
pub async fn password_hash(conn: &mut PgConnection, operator_id: i64) -> ApiResult<Option<String>> {
    Ok(sqlx::query_scalar!("SELECT password_hash FROM operators WHERE id = $1", operator_id)
        .fetch_optional(&mut *conn)
        .await?)
}

/// The operator a provider's subject signs in as, its row locked: (id, username, role, disabled).
pub async fn by_subject(conn: &mut PgConnection, subject: &str) -> ApiResult<Option<(i64, String, String, bool)>> {
    Ok(sqlx::query!("SELECT id, username, role, disabled FROM operators WHERE sso_subject = $1 FOR UPDATE", subject)
        .fetch_optional(&mut *conn)
        .await?
        .map(|r| (r.id, r.username, r.role, r.disabled)))
}

/// A new operator that signs in through the provider (no usable password): its id, or None when
/// the username is taken.
pub async fn insert_sso(conn: &mut PgConnection, username: &str, role: &str, subject: &str) -> ApiResult<Option<i64>> {
    Ok(sqlx::query_scalar!(
        "INSERT INTO operators (username, password_hash, role, sso_subject) VALUES ($1, '!sso', $2, $3)
         ON CONFLICT (username) DO NOTHING RETURNING id",
        username,
        role,
        subject,
    )
    .fetch_optional(&mut *conn)
    .await?)
}
