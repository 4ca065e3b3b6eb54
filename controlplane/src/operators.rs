//! Operator accounts in the admin API (admin only): list, create with a generated one-time
//! password, change the role, disable and enable, reset the password. Every change is audited
//! (never a password); the last enabled admin cannot be demoted or disabled; a disabled operator's
//! sessions end at once, and so do those of one whose password was reset. An operator given a
//! one-time password must choose its own (`POST /session/password`) before anything else.

use ax_protocol::admin::{OperatorList, OperatorPassword, OperatorView};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::json;
use sqlx::PgConnection;

use crate::auth::{hash_off_thread, Caller, Role};
use crate::error::{decode, ApiError, ApiResult};
use crate::extract::{ApiBody, ApiPath};
use crate::store::operators as ops;
use crate::store::versions::audit;
use crate::{crypto, AppState};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorIn {
    pub username: String,
    pub role: Role,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorChange {
    #[serde(default)]
    pub role: Option<Role>,
    #[serde(default)]
    pub disabled: Option<bool>,
}

const NOTE: &str = "give this password to the operator once: it is not stored in plaintext and is shown only now; \
                    at its first login the operator chooses its own";

/// What the audit log keeps of an operator.
fn audited(r: &OperatorView) -> serde_json::Value {
    json!({ "username": r.username, "role": r.role, "disabled": r.disabled })
}

/// 1-64 characters: letters, digits, `-` `_` `.` `@` (an SSO operator's name follows the same rule).
pub fn is_valid_username(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'))
}

fn valid_username(name: &str) -> ApiResult<()> {
    if is_valid_username(name) {
        Ok(())
    } else {
        Err(ApiError::field("username", "1-64 characters: letters, digits, - _ . @"))
    }
}

/// A generated one-time password and its argon2 hash.
async fn one_time_password() -> ApiResult<(String, String)> {
    let password = crypto::token(18);
    let phc = hash_off_thread(password.clone()).await?;
    Ok((password, phc))
}

async fn found(conn: &mut PgConnection, username: &str) -> ApiResult<OperatorView> {
    ops::one_for_update(conn, username).await?.ok_or_else(|| ApiError::not_found(format!("operator '{username}'")))
}

pub async fn list(State(s): State<AppState>, caller: Caller) -> ApiResult<Json<OperatorList>> {
    caller.require(Role::Admin)?;
    let operators = ops::list(&mut *s.db.acquire().await?).await?;
    Ok(Json(OperatorList { operators }))
}

/// `POST /operators`: a new operator with a generated one-time password (409 if the name is taken).
pub async fn create(
    State(s): State<AppState>,
    caller: Caller,
    ApiBody(body): ApiBody,
) -> ApiResult<(StatusCode, Json<OperatorPassword>)> {
    caller.require(Role::Admin)?;
    let req: OperatorIn = decode(&body)?;
    valid_username(&req.username)?;
    let (password, phc) = one_time_password().await?;
    let mut tx = s.db.begin().await?;
    if !ops::insert(&mut tx, &req.username, &phc, req.role.as_str()).await? {
        return Err(ApiError::conflict(format!("operator '{}' exists", req.username)));
    }
    let row = found(&mut tx, &req.username).await?;
    audit(&mut tx, &caller.username, "operator.create", &req.username, None, Some(audited(&row))).await?;
    tx.commit().await?;
    Ok((
        StatusCode::CREATED,
        Json(OperatorPassword { operator: row, one_time_password: password, note: NOTE.to_owned() }),
    ))
}

/// `PUT /operators/{username}`: its role and whether it is disabled (the fields given). The last
/// enabled admin keeps its role and stays enabled (409 `last_admin`).
pub async fn change(
    State(s): State<AppState>,
    caller: Caller,
    ApiPath(username): ApiPath<String>,
    ApiBody(body): ApiBody,
) -> ApiResult<Json<OperatorView>> {
    caller.require(Role::Admin)?;
    let req: OperatorChange = decode(&body)?;
    let mut tx = s.db.begin().await?;
    ops::lock_admins(&mut tx).await?;
    let before = found(&mut tx, &username).await?;
    let role = req.role.map_or_else(|| before.role.clone(), |r| r.as_str().to_owned());
    let disabled = req.disabled.unwrap_or(before.disabled);
    if role == before.role && disabled == before.disabled {
        return Ok(Json(before));
    }
    let was_admin = before.role == "admin" && !before.disabled;
    let stays_admin = role == "admin" && !disabled;
    if was_admin && !stays_admin && ops::other_admins(&mut tx, &username).await? == 0 {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "last_admin",
            format!("'{username}' is the last enabled admin: make another admin first"),
        ));
    }
    ops::set_role_and_state(&mut tx, &username, &role, disabled).await?;
    let after = found(&mut tx, &username).await?;
    let action = match (before.disabled, after.disabled) {
        (false, true) => "operator.disable",
        (true, false) => "operator.enable",
        _ => "operator.role",
    };
    audit(&mut tx, &caller.username, action, &username, Some(audited(&before)), Some(audited(&after))).await?;
    tx.commit().await?;
    Ok(Json(after))
}

/// `POST /operators/{username}/reset-password`: a new one-time password; its sessions end.
pub async fn reset_password(
    State(s): State<AppState>,
    caller: Caller,
    ApiPath(username): ApiPath<String>,
) -> ApiResult<Json<OperatorPassword>> {
    caller.require(Role::Admin)?;
    let mut tx = s.db.begin().await?;
    let before = found(&mut tx, &username).await?;
    if before.sso {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "sso_operator",
            format!("'{username}' signs in with single sign-on and has no password here"),
        ));
    }
    let (password, phc) = one_time_password().await?;
    ops::set_password(&mut tx, &username, &phc, true).await?;
    ops::end_sessions(&mut tx, &username).await?;
    audit(&mut tx, &caller.username, "operator.reset_password", &username, None, None).await?;
    tx.commit().await?;
    let operator = OperatorView { must_change_password: true, sessions: 0, ..before };
    Ok(Json(OperatorPassword { operator, one_time_password: password, note: NOTE.to_owned() }))
}
