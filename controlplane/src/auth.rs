//! Operators: argon2id passwords, sessions in an HttpOnly SameSite=Strict cookie, a CSRF token
//! per session (sent back in `x-csrf-token` on every mutation), roles checked on the server for
//! every route, and throttled logins.
//!
//! Order of checks on an admin route: no valid session → 401; a mutation without the session's
//! CSRF token → 403 `csrf_failed`; a role below the route's → 403 `forbidden`.

use std::net::SocketAddr;

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use axum::extract::{ConnectInfo, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use crate::crypto;
use crate::error::{ApiError, ApiResult};
use crate::store;
use crate::AppState;

pub const COOKIE: &str = "ax_session";
pub(crate) const SESSION_HOURS: i64 = 12;
/// Failed logins allowed per username (and 4× per client address) in `THROTTLE_WINDOW_S`.
const MAX_FAILURES: i64 = 5;
const THROTTLE_WINDOW_S: i64 = 900;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Finance,
    Operator,
    Admin,
}

impl Role {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "finance" => Some(Self::Finance),
            "operator" => Some(Self::Operator),
            "admin" => Some(Self::Admin),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Finance => "finance",
            Self::Operator => "operator",
            Self::Admin => "admin",
        }
    }
}

/// Whether `have` may do what needs `need`. Finance reads reports only; operators read and edit
/// routing, limits and budgets (and read reports); admins do everything.
fn permits(have: Role, need: Role) -> bool {
    have >= need
}

/// The operator behind a request (valid session; CSRF already checked for mutations).
#[derive(Debug, Clone)]
pub struct Caller {
    pub operator_id: i64,
    pub username: String,
    pub role: Role,
    pub csrf: String,
    /// Logged in with a one-time password: only the session, logout and the password change
    /// answer until it chooses its own.
    pub must_change_password: bool,
    pub(crate) token_digest: String,
}

impl Caller {
    pub fn require(&self, need: Role) -> ApiResult<()> {
        if permits(self.role, need) {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "the {} role may not do this (needs {})",
                self.role.as_str(),
                need.as_str()
            )))
        }
    }
}

pub(crate) fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';')).find_map(|kv| {
        let (k, v) = kv.trim().split_once('=')?;
        (k == name).then(|| v.to_owned())
    })
}

/// Constant-time comparison (CSRF tokens).
pub(crate) fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let token = cookie_value(&parts.headers, COOKIE).ok_or_else(ApiError::unauthorized)?;
        let token_digest = crypto::digest(&token);
        let row = store::operators::session(&state.db, &token_digest).await?;
        let (operator_id, username, role, csrf, must_change_password) = row.ok_or_else(ApiError::unauthorized)?;
        let role = Role::parse(&role).ok_or_else(|| ApiError::internal("session", "unknown role in the database"))?;
        // Nested under /api/v1, the path may come without that prefix.
        let path = parts.uri.path();
        let path = path.strip_prefix("/api/v1").unwrap_or(path);
        if must_change_password && !matches!(path, "/session" | "/logout" | "/session/password") {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "password_change_required",
                "this login used a one-time password: choose your own first (POST /api/v1/session/password)",
            ));
        }
        if !matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS) {
            let sent = parts.headers.get("x-csrf-token").and_then(|v| v.to_str().ok()).unwrap_or_default();
            if !same(sent, &csrf) {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "csrf_failed",
                    "missing or wrong x-csrf-token header (it comes with the session)",
                ));
            }
        }
        Ok(Self { operator_id, username, role, csrf, must_change_password, token_digest })
    }
}

pub fn hash_password(password: &str) -> Result<String, String> {
    let salt_bytes: [u8; 16] = rand::random();
    let salt = SaltString::encode_b64(&salt_bytes).map_err(|e| e.to_string())?;
    Argon2::default().hash_password(password.as_bytes(), &salt).map(|h| h.to_string()).map_err(|e| e.to_string())
}

/// `hash_password` on the blocking pool (argon2 takes tens of milliseconds).
pub async fn hash_off_thread(password: String) -> ApiResult<String> {
    tokio::task::spawn_blocking(move || hash_password(&password))
        .await
        .map_err(|e| ApiError::internal("argon2", e))?
        .map_err(|e| ApiError::internal("argon2", e))
}

/// `verify_password` on the blocking pool.
async fn verify_off_thread(password: String, phc: String) -> ApiResult<bool> {
    tokio::task::spawn_blocking(move || verify_password(&password, &phc))
        .await
        .map_err(|e| ApiError::internal("argon2", e))
}

fn verify_password(password: &str, phc: &str) -> bool {
    PasswordHash::new(phc).is_ok_and(|h| Argon2::default().verify_password(password.as_bytes(), &h).is_ok())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Login {
    username: String,
    password: String,
}

#[derive(Serialize)]
pub struct SessionInfo {
    username: String,
    role: Role,
    csrf_token: String,
    /// A one-time password was used: the operator must choose its own before anything else.
    must_change_password: bool,
}

pub(crate) fn session_cookie(state: &AppState, value: &str, max_age: i64) -> HeaderValue {
    let secure = if state.settings.secure_cookies { "; Secure" } else { "" };
    let c = format!("{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}");
    HeaderValue::from_str(&c).unwrap_or(HeaderValue::from_static(""))
}

/// A password hash to verify against when the username does not exist, so both cases take the
/// same time.
fn decoy_hash() -> &'static str {
    static DECOY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DECOY.get_or_init(|| hash_password("decoy password").unwrap_or_default())
}

pub async fn login(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    crate::extract::ApiBody(body): crate::extract::ApiBody,
) -> ApiResult<Response> {
    let req: Login = crate::error::decode(&body)?;
    if !state.settings.password_login {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "password_login_disabled",
            "passwords are turned off here (AX_PASSWORD_LOGIN=0): sign in with single sign-on",
        ));
    }
    let client = peer.ip().to_string();
    take_login_slot(&state.db, &req.username, &client).await?;
    let row = store::operators::by_username(&state.db, &req.username).await?;
    let phc = row.as_ref().map_or_else(|| decoy_hash().to_owned(), |r| r.1.clone());
    let ok = verify_off_thread(req.password.clone(), phc).await?;
    let Some((operator_id, _, role, disabled, must_change_password)) = row.filter(|_| ok) else {
        // The slot taken above stays: it is this attempt's failure.
        tracing::warn!(username = %req.username, client = %client, "failed login");
        return Err(ApiError::new(StatusCode::UNAUTHORIZED, "invalid_credentials", "wrong username or password"));
    };
    store::operators::clear_failures(&state.db, &req.username).await?;
    if disabled {
        tracing::warn!(username = %req.username, client = %client, "login of a disabled operator");
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "operator_disabled",
            "this operator is disabled; ask an admin",
        ));
    }
    let role = Role::parse(&role).ok_or_else(|| ApiError::internal("login", "unknown role"))?;
    let (token, csrf) = start_session(&state, operator_id).await?;
    let mut resp =
        Json(SessionInfo { username: req.username, role, csrf_token: csrf, must_change_password }).into_response();
    resp.headers_mut().insert(header::SET_COOKIE, session_cookie(&state, &token, SESSION_HOURS * 3600));
    Ok(resp)
}

/// A new session of `SESSION_HOURS` for an operator: its token (for the cookie) and CSRF token.
pub(crate) async fn start_session(state: &AppState, operator_id: i64) -> ApiResult<(String, String)> {
    let token = crypto::token(32);
    let csrf = crypto::token(24);
    store::operators::create_session(&state.db, &crypto::digest(&token), operator_id, &csrf, SESSION_HOURS as i32)
        .await?;
    Ok((token, csrf))
}

/// Takes a login attempt's slot before its password is checked: under transaction-scoped advisory
/// locks on the username and the client address (always in that order), the recent failures are
/// counted and, below both limits, a `login_failures` row is written for this attempt. So N
/// parallel attempts check at most the limit's worth of passwords; a right password deletes the
/// row again (with the user's other failures). Over a limit: 429 `login_throttled`.
async fn take_login_slot(db: &sqlx::PgPool, username: &str, client: &str) -> ApiResult<()> {
    let window = THROTTLE_WINDOW_S as f64;
    if store::operators::take_login_slot(db, username, client, window, MAX_FAILURES, MAX_FAILURES * 4).await? {
        return Ok(());
    }
    tracing::warn!(username, client, "login throttled");
    let mut e = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "login_throttled",
        "too many failed logins; try again in a few minutes",
    );
    e.retry_after = Some(THROTTLE_WINDOW_S as u64 / 3);
    Err(e)
}

pub async fn logout(State(state): State<AppState>, caller: Caller) -> ApiResult<Response> {
    store::operators::delete_session(&state.db, &caller.token_digest).await?;
    let mut resp = StatusCode::NO_CONTENT.into_response();
    resp.headers_mut().insert(header::SET_COOKIE, session_cookie(&state, "", 0));
    Ok(resp)
}

pub async fn session(caller: Caller) -> Json<SessionInfo> {
    Json(SessionInfo {
        username: caller.username,
        role: caller.role,
        csrf_token: caller.csrf,
        must_change_password: caller.must_change_password,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PasswordChange {
    current_password: String,
    new_password: String,
}

/// `POST /session/password`: the caller chooses its own password (the current one, or the
/// one-time one, proves it is the caller); its other sessions end.
pub async fn change_password(
    State(state): State<AppState>,
    caller: Caller,
    crate::extract::ApiBody(body): crate::extract::ApiBody,
) -> ApiResult<StatusCode> {
    let req: PasswordChange = crate::error::decode(&body)?;
    if req.new_password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(ApiError::field("new_password", format!("at least {MIN_PASSWORD_CHARS} characters")));
    }
    if req.new_password == req.current_password {
        return Err(ApiError::field("new_password", "must differ from the current password"));
    }
    let mut tx = state.db.begin().await?;
    let phc = store::operators::password_hash(&mut tx, caller.operator_id).await?.unwrap_or_default();
    if !verify_off_thread(req.current_password, phc).await? {
        return Err(ApiError::field("current_password", "wrong password"));
    }
    let phc = hash_off_thread(req.new_password).await?;
    store::operators::set_password(&mut tx, &caller.username, &phc, false).await?;
    store::operators::end_other_sessions(&mut tx, caller.operator_id, &caller.token_digest).await?;
    store::versions::audit(&mut tx, &caller.username, "operator.password", &caller.username, None, None).await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The shortest password an operator may have.
pub const MIN_PASSWORD_CHARS: usize = 12;

/// `ax-controlplane admin create`: the first admin (or any operator) from the command line.
pub async fn create_operator(db: &sqlx::PgPool, username: &str, password: &str, role: Role) -> Result<(), String> {
    if username.is_empty() || password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(format!(
            "username must not be empty and the password must have at least {MIN_PASSWORD_CHARS} characters"
        ));
    }
    let phc = hash_off_thread(password.to_owned()).await.map_err(|e| e.message)?;
    store::operators::upsert(db, username, &phc, role.as_str()).await.map_err(|e| e.to_string())?;
    Ok(())
}
