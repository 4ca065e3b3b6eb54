//! Single sign-on for the admin UI: OpenID Connect, the authorization code flow with PKCE, against
//! one configured issuer (`AX_OIDC_*`, read once at start: `Config::from_env`).
//!
//! `GET /sso/login` sends the browser to the provider with a fresh state, nonce and PKCE challenge;
//! those and the verifier travel in a cookie sealed with the master key (AES-256-GCM, `HttpOnly`,
//! `SameSite=Lax` so it comes back on the provider's redirect, 10 minutes), which also binds the
//! answer to the browser that asked. `GET /sso/callback` opens it, checks the state, trades the
//! code (with the verifier) for tokens, verifies the ID token (signature against the provider's
//! keys, issuer, audience, expiry, nonce), reads the username and role claims (from the ID token,
//! else the userinfo endpoint), maps the role claim's values to a role, and starts an ordinary
//! session. An operator who signs in this way is found again by the provider's subject; the
//! provider owns its role, which each sign-in sets. Failures send the browser back to the login
//! page with `?sso_error=<code>`, and the detail goes to the log (never a token or a code).
//!
//! The provider's metadata and keys are fetched at the first sign-in and again every 15 minutes,
//! or after an ID token fails to verify (a rotated key), so the control plane starts while the
//! provider is down.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use openidconnect::core::{
    CoreAuthDisplay, CoreAuthPrompt, CoreErrorResponseType, CoreGenderClaim, CoreJsonWebKey,
    CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm, CoreProviderMetadata, CoreResponseType,
    CoreRevocableToken, CoreRevocationErrorResponse, CoreTokenIntrospectionResponse, CoreTokenType,
};
use openidconnect::{
    AccessToken, AdditionalClaims, AuthenticationFlow, AuthorizationCode, Client, ClientId, ClientSecret, CsrfToken,
    EmptyExtraTokenFields, EndpointMaybeSet, EndpointNotSet, EndpointSet, IdTokenFields, IssuerUrl, Nonce,
    OAuth2TokenResponse, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope, StandardErrorResponse,
    StandardTokenResponse, SubjectIdentifier, TokenResponse, UserInfoClaims,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::auth::{self, Role};
use crate::error::{ApiError, ApiResult};
use crate::store::operators as ops;
use crate::store::versions::audit;
use crate::AppState;

/// The cookie that carries a sign-in's state, nonce and PKCE verifier to the callback.
const COOKIE: &str = "ax_sso";
const COOKIE_PATH: &str = "/api/v1/sso";
/// How long a sign-in may take at the provider.
const LOGIN_SECONDS: u64 = 600;
/// How long the provider's metadata and keys are kept.
const METADATA_TTL: Duration = Duration::from_secs(900);
/// Associated data of the sealed cookie (a sealed upstream key cannot stand in for it).
const SEAL_AAD: &str = "ax-sso-login";

/// The single sign-on settings (`AX_OIDC_*`).
#[derive(Debug, Clone)]
pub struct Config {
    pub issuer: String,
    pub client_id: String,
    /// None: a public client (PKCE alone); else sent with HTTP Basic to the token endpoint.
    pub client_secret: Option<String>,
    /// The callback's public URL; None: `<scheme>://<Host>/api/v1/sso/callback` from the request.
    pub redirect_url: Option<String>,
    pub scopes: Vec<String>,
    /// The claim whose values map to roles (a string or an array of strings).
    pub role_claim: String,
    /// Claim value → role; an operator gets the highest role among its values.
    pub roles: Vec<(String, Role)>,
    /// The claim that names the operator (falls back to `email`, then `sub`).
    pub username_claim: String,
    /// What the login page's button says.
    pub label: String,
}

impl Config {
    /// `AX_OIDC_ISSUER` unset: no single sign-on. Set: the rest must make sense, or `serve` stops
    /// with the reason.
    pub fn from_env() -> Result<Option<Self>, String> {
        let var = |name: &str| std::env::var(name).ok().map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let Some(issuer) = var("AX_OIDC_ISSUER") else { return Ok(None) };
        IssuerUrl::new(issuer.clone()).map_err(|e| format!("AX_OIDC_ISSUER: {e}"))?;
        let client_id = var("AX_OIDC_CLIENT_ID").ok_or("AX_OIDC_ISSUER is set but AX_OIDC_CLIENT_ID is not")?;
        let redirect_url = var("AX_OIDC_REDIRECT_URL")
            .or_else(|| var("AX_PUBLIC_URL").map(|u| format!("{}/api/v1/sso/callback", u.trim_end_matches('/'))));
        if let Some(u) = &redirect_url {
            RedirectUrl::new(u.clone()).map_err(|e| format!("AX_OIDC_REDIRECT_URL: {e}"))?;
        }
        let roles = parse_roles(&var("AX_OIDC_ROLES").ok_or(
            "AX_OIDC_ROLES is not set: say which claim values make which role, e.g. ax-admins=admin,ax-ops=operator",
        )?)?;
        let scopes = var("AX_OIDC_SCOPES").unwrap_or_else(|| "openid profile email".to_owned());
        Ok(Some(Self {
            issuer,
            client_id,
            client_secret: var("AX_OIDC_CLIENT_SECRET"),
            redirect_url,
            scopes: scopes.split([' ', ',']).filter(|s| !s.is_empty() && *s != "openid").map(str::to_owned).collect(),
            role_claim: var("AX_OIDC_ROLE_CLAIM").unwrap_or_else(|| "groups".to_owned()),
            roles,
            username_claim: var("AX_OIDC_USERNAME_CLAIM").unwrap_or_else(|| "preferred_username".to_owned()),
            label: var("AX_OIDC_LABEL").unwrap_or_else(|| "Single sign-on".to_owned()),
        }))
    }

    /// The highest role any of the claim's values maps to.
    fn role_of(&self, claim: Option<&Value>) -> Option<Role> {
        let values: Vec<&str> = match claim {
            Some(Value::String(s)) => vec![s.as_str()],
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        self.roles.iter().filter(|(v, _)| values.contains(&v.as_str())).map(|(_, r)| *r).max()
    }
}

/// `value=role,value=role` (a value may hold `=`: the role is after the last one).
fn parse_roles(spec: &str) -> Result<Vec<(String, Role)>, String> {
    let roles: Result<Vec<_>, String> = spec
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|pair| {
            let (value, role) =
                pair.rsplit_once('=').ok_or_else(|| format!("AX_OIDC_ROLES: '{pair}' is not value=role"))?;
            let role = Role::parse(role.trim())
                .ok_or_else(|| format!("AX_OIDC_ROLES: '{role}' is not a role (admin, operator, finance)"))?;
            Ok((value.trim().to_owned(), role))
        })
        .collect();
    let roles = roles?;
    if roles.is_empty() {
        return Err("AX_OIDC_ROLES maps no claim value to a role".to_owned());
    }
    Ok(roles)
}

/// Every claim the ID token carries beyond the standard ones (groups, roles, …), by name.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OtherClaims {
    #[serde(flatten)]
    rest: Map<String, Value>,
}

impl AdditionalClaims for OtherClaims {}

type Fields = IdTokenFields<
    OtherClaims,
    EmptyExtraTokenFields,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm,
>;
type OidcClient = Client<
    OtherClaims,
    CoreAuthDisplay,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJsonWebKey,
    CoreAuthPrompt,
    StandardErrorResponse<CoreErrorResponseType>,
    StandardTokenResponse<Fields, CoreTokenType>,
    CoreTokenIntrospectionResponse,
    CoreRevocableToken,
    CoreRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// The configured provider: its settings, an HTTP client that follows no redirects (so a
/// provider cannot bounce a token request elsewhere), and its discovered metadata.
pub struct Sso {
    pub config: Config,
    http: openidconnect::reqwest::Client,
    discovered: tokio::sync::Mutex<Option<(Instant, Arc<OidcClient>)>>,
}

impl Sso {
    pub fn new(config: Config) -> Result<Self, String> {
        let http = openidconnect::reqwest::Client::builder()
            .redirect(openidconnect::reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10))
            .tcp_nodelay(true)
            .build()
            .map_err(|e| format!("single sign-on HTTP client: {e}"))?;
        Ok(Self { config, http, discovered: tokio::sync::Mutex::new(None) })
    }

    /// The provider's client, discovered again when older than `METADATA_TTL`.
    async fn client(&self) -> Result<Arc<OidcClient>, String> {
        let mut slot = self.discovered.lock().await;
        if let Some((_, c)) = slot.as_ref().filter(|(at, _)| at.elapsed() < METADATA_TTL) {
            return Ok(c.clone());
        }
        let issuer = IssuerUrl::new(self.config.issuer.clone()).map_err(|e| e.to_string())?;
        let metadata = CoreProviderMetadata::discover_async(issuer, &self.http)
            .await
            .map_err(|e| format!("discovery at {}: {}", self.config.issuer, chain(&e)))?;
        let secret = self.config.client_secret.clone().map(ClientSecret::new);
        let client = Arc::new(OidcClient::from_provider_metadata(
            metadata,
            ClientId::new(self.config.client_id.clone()),
            secret,
        ));
        *slot = Some((Instant::now(), client.clone()));
        Ok(client)
    }

    /// Forgets the discovered metadata (the next sign-in fetches it and the keys again).
    async fn forget(&self) {
        *self.discovered.lock().await = None;
    }
}

/// An error and its sources, one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}

/// What a sign-in carries from `/sso/login` to `/sso/callback`, sealed in the cookie.
#[derive(Serialize, Deserialize)]
struct Pending {
    state: String,
    nonce: String,
    verifier: String,
    redirect: String,
    next: String,
    /// Unix seconds after which the sign-in is stale.
    expires: u64,
}

fn now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn seal(state: &AppState, p: &Pending) -> Result<String, String> {
    let json = serde_json::to_vec(p).map_err(|e| e.to_string())?;
    let sealed = state.keys.seal(&json, SEAL_AAD)?;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    Ok(format!("{}.{}.{}", sealed.key_id, b64.encode(sealed.nonce), b64.encode(sealed.ciphertext)))
}

fn open(state: &AppState, cookie: &str) -> Option<Pending> {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut parts = cookie.splitn(3, '.');
    let (key_id, nonce, ct) = (parts.next()?, parts.next()?, parts.next()?);
    let plain = state.keys.open(key_id, &b64.decode(nonce).ok()?, &b64.decode(ct).ok()?, SEAL_AAD).ok()?;
    serde_json::from_slice::<Pending>(&plain).ok().filter(|p| p.expires >= now_s())
}

fn cookie(state: &AppState, value: &str, max_age: u64) -> HeaderValue {
    let secure = if state.settings.secure_cookies { "; Secure" } else { "" };
    let c = format!("{COOKIE}={value}; Path={COOKIE_PATH}; HttpOnly; SameSite=Lax; Max-Age={max_age}{secure}");
    HeaderValue::from_str(&c).unwrap_or(HeaderValue::from_static(""))
}

/// A UI path to return to: a local absolute path of visible ASCII only, never `//host`, a
/// backslash or the API. (Browsers drop tabs and newlines from URLs, so `/\t/evil.example` would
/// become `//evil.example`: whitespace and control characters are refused, not just `//`.)
fn local_path(next: Option<&str>) -> String {
    match next {
        Some(p)
            if p.starts_with('/')
                && !p.starts_with("//")
                && !p.starts_with("/api/")
                && p.bytes().all(|b| b.is_ascii_graphic() && b != b'\\') =>
        {
            p.to_owned()
        }
        _ => "/".to_owned(),
    }
}

/// The callback URL: configured, else from the request's `Host` (a wrong one only fails at the
/// provider, which accepts its registered redirect URLs alone).
fn redirect_url(state: &AppState, sso: &Sso, headers: &HeaderMap) -> ApiResult<String> {
    if let Some(u) = &sso.config.redirect_url {
        return Ok(u.clone());
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            !h.is_empty() && h.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
        })
        .ok_or_else(|| ApiError::bad_request("no usable Host header; set AX_PUBLIC_URL"))?;
    let scheme = if state.settings.secure_cookies { "https" } else { "http" };
    Ok(format!("{scheme}://{host}/api/v1/sso/callback"))
}

/// `GET /sso`: how operators sign in here (public: the login page asks before anyone is signed in).
pub async fn options(State(state): State<AppState>) -> Json<ax_protocol::admin::SignInOptions> {
    Json(ax_protocol::admin::SignInOptions {
        password: state.settings.password_login,
        sso: state.sso.as_ref().map(|s| s.config.label.clone()),
    })
}

#[derive(Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
}

fn see_other(location: &str) -> Response {
    let mut resp = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(location) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// Back to the login page with a stable code the page explains.
fn fail(state: &AppState, code: &'static str, detail: &str) -> Response {
    tracing::warn!(code, detail, "single sign-on failed");
    let mut resp = see_other(&format!("/?sso_error={code}"));
    resp.headers_mut().insert(header::SET_COOKIE, cookie(state, "", 0));
    resp
}

fn not_configured() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "sso_not_configured", "single sign-on is not configured (AX_OIDC_ISSUER)")
}

/// `GET /sso/login?next=/path`: to the provider, with state, nonce and a PKCE (S256) challenge.
pub async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<LoginQuery>,
) -> ApiResult<Response> {
    let sso = state.sso.as_ref().ok_or_else(not_configured)?;
    let redirect = redirect_url(&state, sso, &headers)?;
    let client = match sso.client().await {
        Ok(c) => c,
        Err(e) => return Ok(fail(&state, "sso_provider_unavailable", &e)),
    };
    let redirect_url = RedirectUrl::new(redirect.clone()).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let mut request = client
        .authorize_url(
            AuthenticationFlow::<CoreResponseType>::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        )
        .set_redirect_uri(std::borrow::Cow::Owned(redirect_url))
        .set_pkce_challenge(challenge);
    for s in &sso.config.scopes {
        request = request.add_scope(Scope::new(s.clone()));
    }
    let (url, csrf, nonce) = request.url();
    let pending = Pending {
        state: csrf.secret().clone(),
        nonce: nonce.secret().clone(),
        verifier: verifier.secret().clone(),
        redirect,
        next: local_path(q.next.as_deref()),
        expires: now_s() + LOGIN_SECONDS,
    };
    let sealed = seal(&state, &pending).map_err(|e| ApiError::internal("sso seal", e))?;
    let mut resp = see_other(url.as_str());
    resp.headers_mut().insert(header::SET_COOKIE, cookie(&state, &sealed, LOGIN_SECONDS));
    Ok(resp)
}

#[derive(Deserialize)]
pub struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// `GET /sso/callback`: the provider's answer; a session and back to the page the operator
/// started from, or to the login page with `?sso_error=`.
pub async fn callback(State(state): State<AppState>, headers: HeaderMap, Query(q): Query<CallbackQuery>) -> Response {
    let Some(sso) = state.sso.as_ref() else { return not_configured().into_response() };
    let pending = auth::cookie_value(&headers, COOKIE).and_then(|c| open(&state, &c));
    let Some(pending) = pending else {
        return fail(
            &state,
            "sso_state_invalid",
            "no sign-in in progress in this browser (or it took over 10 minutes)",
        );
    };
    if !q.state.as_deref().is_some_and(|s| auth::same(s, &pending.state)) {
        return fail(&state, "sso_state_invalid", "the provider's state does not match this browser's sign-in");
    }
    if let Some(e) = q.error {
        let detail = format!("the provider answered {e}: {}", q.error_description.unwrap_or_default());
        return fail(&state, "sso_denied", &detail);
    }
    let Some(code) = q.code else { return fail(&state, "sso_denied", "the provider sent no code") };
    match sign_in(&state, sso, &pending, code).await {
        Ok(token) => {
            let mut resp = see_other(&pending.next);
            let h = resp.headers_mut();
            h.append(header::SET_COOKIE, cookie(&state, "", 0));
            h.append(header::SET_COOKIE, auth::session_cookie(&state, &token, auth::SESSION_HOURS * 3600));
            resp
        }
        Err((code, detail)) => fail(&state, code, &detail),
    }
}

/// The claims of a verified sign-in: the ID token's, then what the userinfo endpoint adds.
async fn claims(
    sso: &Sso,
    client: &OidcClient,
    tokens: &StandardTokenResponse<Fields, CoreTokenType>,
    nonce: &Nonce,
) -> Result<Map<String, Value>, (&'static str, String)> {
    let id_token = tokens.id_token().ok_or(("sso_token_invalid", "the provider sent no ID token".to_owned()))?;
    let verified = match id_token.claims(&client.id_token_verifier(), nonce) {
        Ok(c) => c,
        Err(e) => {
            sso.forget().await;
            return Err(("sso_token_invalid", format!("the ID token does not verify: {}", chain(&e))));
        }
    };
    let mut all = match serde_json::to_value(verified) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    let wanted = [sso.config.role_claim.as_str(), sso.config.username_claim.as_str()];
    if wanted.iter().any(|c| !all.contains_key(*c)) {
        if let Ok(request) = client.user_info(
            AccessToken::new(tokens.access_token().secret().clone()),
            Some(SubjectIdentifier::new(verified.subject().to_string())),
        ) {
            match request.request_async::<OtherClaims, _, CoreGenderClaim>(&sso.http).await {
                Ok(info) => merge(&mut all, &info),
                Err(e) => {
                    tracing::warn!(error = %chain(&e), "single sign-on: the userinfo endpoint failed; using the ID token's claims")
                }
            }
        }
    }
    Ok(all)
}

fn merge(all: &mut Map<String, Value>, info: &UserInfoClaims<OtherClaims, CoreGenderClaim>) {
    if let Ok(Value::Object(m)) = serde_json::to_value(info) {
        for (k, v) in m {
            all.entry(k).or_insert(v);
        }
    }
}

/// Trades the code for tokens, verifies them and signs the operator in: its session token.
async fn sign_in(
    state: &AppState,
    sso: &Sso,
    pending: &Pending,
    code: String,
) -> Result<String, (&'static str, String)> {
    let client = sso.client().await.map_err(|e| ("sso_provider_unavailable", e))?;
    let redirect = RedirectUrl::new(pending.redirect.clone()).map_err(|e| ("sso_state_invalid", e.to_string()))?;
    let tokens = client
        .exchange_code(AuthorizationCode::new(code))
        .map_err(|e| ("sso_provider_unavailable", e.to_string()))?
        .set_pkce_verifier(PkceCodeVerifier::new(pending.verifier.clone()))
        .set_redirect_uri(std::borrow::Cow::Owned(redirect))
        .request_async(&sso.http)
        .await
        .map_err(|e| ("sso_denied", format!("the token endpoint refused the code: {}", chain(&e))))?;
    let claims = claims(sso, &client, &tokens, &Nonce::new(pending.nonce.clone())).await?;
    let issuer = claims.get("iss").and_then(Value::as_str).unwrap_or(&sso.config.issuer);
    let subject = claims.get("sub").and_then(Value::as_str).unwrap_or_default();
    let subject = format!("{issuer} {subject}");
    let username = [sso.config.username_claim.as_str(), "email", "sub"]
        .iter()
        .find_map(|c| claims.get(*c).and_then(Value::as_str))
        .unwrap_or_default()
        .to_owned();
    let Some(role) = sso.config.role_of(claims.get(&sso.config.role_claim)) else {
        let got = claims.get(&sso.config.role_claim).map_or_else(|| "nothing".to_owned(), Value::to_string);
        return Err((
            "sso_no_role",
            format!(
                "'{username}' has no value of claim '{}' that maps to a role (it has {got})",
                sso.config.role_claim
            ),
        ));
    };
    let operator_id = operator(state, &subject, &username, role).await?;
    auth::start_session(state, operator_id).await.map(|(token, _)| token).map_err(|e| ("sso_failed", e.message))
}

/// The operator behind `subject`, created under `username` at its first sign-in; its role is the
/// provider's. Audited: the creation, and a role the provider changed.
async fn operator(state: &AppState, subject: &str, username: &str, role: Role) -> Result<i64, (&'static str, String)> {
    let db_err = |e: ApiError| ("sso_failed", e.message);
    let mut tx = state.db.begin().await.map_err(|e| db_err(e.into()))?;
    let found = ops::by_subject(&mut tx, subject).await.map_err(db_err)?;
    let id = match found {
        Some((_, name, _, true)) => {
            return Err(("operator_disabled", format!("'{name}' is disabled")));
        }
        Some((id, name, before, false)) => {
            if before != role.as_str() {
                ops::set_role_and_state(&mut tx, &name, role.as_str(), false).await.map_err(db_err)?;
                let b = serde_json::json!({ "username": name, "role": before });
                let a = serde_json::json!({ "username": name, "role": role.as_str() });
                audit(&mut tx, "sso", "operator.role", &name, Some(b), Some(a)).await.map_err(db_err)?;
            }
            id
        }
        None => {
            if !crate::operators::is_valid_username(username) {
                return Err(("sso_username_invalid", format!("'{username}' is not a usable operator name")));
            }
            let Some(id) = ops::insert_sso(&mut tx, username, role.as_str(), subject).await.map_err(db_err)? else {
                return Err((
                    "sso_username_taken",
                    format!("an operator named '{username}' already signs in with a password"),
                ));
            };
            let a = serde_json::json!({ "username": username, "role": role.as_str(), "sso": true });
            audit(&mut tx, "sso", "operator.create", username, None, Some(a)).await.map_err(db_err)?;
            id
        }
    };
    tx.commit().await.map_err(|e| db_err(e.into()))?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::local_path;

    /// `next` cannot send the browser to another host, however it is spelled.
    #[test]
    fn next_is_a_local_path_only() {
        for ok in ["/", "/routes", "/reports?by=alias", "/tenants/a%20b"] {
            assert_eq!(local_path(Some(ok)), ok);
        }
        for bad in [
            "//evil.example",
            "/\t/evil.example",
            "/\n/evil.example",
            "/\\evil.example",
            "https://evil.example",
            "evil.example",
            "/ /evil.example",
            "/api/v1/sso/login",
            "",
        ] {
            assert_eq!(local_path(Some(bad)), "/", "{bad:?}");
        }
        assert_eq!(local_path(None), "/");
    }
}
