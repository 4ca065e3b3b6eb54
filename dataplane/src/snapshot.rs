//! The immutable snapshot: upstreams (with their pooled HTTP clients), the capability matrix,
//! routes, tenants and key digests, compiled from a `ConfigSpec` and swapped whole.
//!
//! Building is fallible and happens off the request path; the swap (`SnapshotStore::swap`)
//! cannot fail. A request loads one `Arc<Snapshot>` and finishes on it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use ax_protocol::config::{
    BreakerSpec, Capability, ConfigSpec, FailoverSpec, MockSpec, ParamsMode, ProviderKind, Strategy, TimeoutOverrides,
    TimeoutsSpec, UpstreamSpec,
};
use http::{HeaderMap, HeaderName, HeaderValue};
use sha2::{Digest, Sha256};

use crate::health::{ModelHealth, UpstreamHealth};
use crate::limits::{LimitState, Limiter};
use crate::secret::Secret;

/// Where requests find the current snapshot. The only shared mutable state on the request path,
/// and it is lock-free.
#[derive(Debug)]
pub struct SnapshotStore(ArcSwap<Snapshot>);

impl SnapshotStore {
    pub fn new(s: Snapshot) -> Self {
        Self(ArcSwap::from_pointee(s))
    }
    /// One atomic load; the caller keeps the `Arc` for the whole request.
    pub fn load(&self) -> Arc<Snapshot> {
        self.0.load_full()
    }
    pub fn swap(&self, s: Snapshot) {
        self.0.store(Arc::new(s));
    }
}

#[derive(Debug)]
pub struct Snapshot {
    /// Increments with every accepted configuration.
    pub version: u64,
    pub params: ParamsMode,
    pub max_body_bytes: u64,
    pub default_max_tokens: u32,
    pub upstreams: Vec<Upstream>,
    pub routes: HashMap<String, Route>,
    pub tenants: Vec<Tenant>,
    /// SHA-256 of an API key → the key's owner.
    pub keys: HashMap<[u8; 32], KeyRef>,
    /// SHA-256 of the admin token; `/admin/*` is off without one.
    pub admin_token: Option<[u8; 32]>,
    /// The zone in which budget days and months begin.
    pub budget_tz: jiff::tz::TimeZone,
    /// (redis_url, key prefix, replicas): used once, at start, by `App::new`.
    pub redis: Option<(String, String, u32)>,
}

#[derive(Debug)]
pub struct Upstream {
    pub name: String,
    /// `name` as a response header value, made once here.
    pub name_header: http::HeaderValue,
    pub kind: ProviderKind,
    /// The pooled HTTP client (one pool per serving thread, so connections stay on their
    /// thread); `None` for a mock upstream.
    client: Option<Arc<crate::client::Client>>,
    pub timeouts: TimeoutsSpec,
    pub max_concurrency: u32,
    pub breaker: BreakerSpec,
    /// Live state (breaker, in-flight count), kept across reloads for the same upstream name.
    pub health: Arc<UpstreamHealth>,
    pub limiter: Limiter,
    pub models: Vec<Model>,
    pub mock: Option<MockUpstream>,
    /// The largest whole answer and the largest stream event taken from this upstream.
    pub max_response_bytes: usize,
    pub max_event_bytes: usize,
    /// What the pooled client was built from; an unchanged upstream keeps its client (and its
    /// warm connections) across reloads.
    client_fingerprint: [u8; 32],
}

#[derive(Debug)]
pub struct MockUpstream {
    pub spec: MockSpec,
    /// Requests seen, for `fail_every`.
    pub counter: AtomicU64,
}

#[derive(Debug)]
pub struct Model {
    pub name: String,
    /// `name` as a response header value, made once here.
    pub name_header: http::HeaderValue,
    pub context_window: u32,
    pub max_output_tokens: Option<u32>,
    pub caps: Caps,
    /// Integer micro-USD per million tokens (`cost::Prices`).
    pub prices: Option<crate::cost::Prices>,
    /// Live statistics, kept across reloads for the same (upstream, model).
    pub health: Arc<ModelHealth>,
    /// Upstream request targets (path and query on the upstream's origin), formatted and parsed
    /// once here so no request does either.
    pub chat_url: Option<http::Uri>,
    pub stream_url: Option<http::Uri>,
    pub embed_url: Option<http::Uri>,
}

/// The capability matrix row of one model, as a bit set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Caps(u8);

impl Caps {
    fn bit(c: Capability) -> u8 {
        match c {
            Capability::Chat => 1,
            Capability::Tools => 2,
            Capability::Streaming => 4,
            Capability::Vision => 8,
            Capability::Json => 16,
            Capability::Embeddings => 32,
        }
    }
    pub fn from_list(list: &[Capability]) -> Self {
        Self(list.iter().fold(0, |acc, c| acc | Self::bit(*c)))
    }
    pub fn has(self, c: Capability) -> bool {
        self.0 & Self::bit(c) != 0
    }
}

#[derive(Debug)]
pub struct Route {
    pub alias: String,
    pub strategy: Strategy,
    pub candidates: Vec<Candidate>,
    /// Aliases tried in order when every candidate failed or was skipped (validated to exist).
    pub fallbacks: Vec<String>,
    pub timeouts: TimeoutOverrides,
    pub failover: FailoverSpec,
    pub max_prompt_tokens: Option<u32>,
    /// Validated to be another alias.
    pub long_context_alias: Option<String>,
    pub limiter: Limiter,
}

#[derive(Debug, Clone, Copy)]
pub struct Candidate {
    /// Index into `Snapshot::upstreams`.
    pub upstream: usize,
    /// Index into that upstream's `models`.
    pub model: usize,
    pub weight: u32,
    pub priority: u32,
}

#[derive(Debug)]
pub struct Tenant {
    pub id: String,
    pub allowed: Allowed,
    pub limiter: Limiter,
    pub budgets: Vec<crate::budget::Budget>,
}

#[derive(Debug)]
pub enum Allowed {
    All,
    Some(HashSet<String>),
}

impl Allowed {
    pub fn permits(&self, alias: &str) -> bool {
        match self {
            Self::All => true,
            Self::Some(set) => set.contains(alias),
        }
    }
}

#[derive(Debug)]
pub struct KeyRef {
    pub tenant: usize,
    pub key_id: String,
    pub revoked: bool,
    /// Unix seconds after which the key is refused.
    pub expires_at: Option<i64>,
    pub limiter: Limiter,
}

/// A header value for a name; `-` for a name no header can carry.
pub fn header_value(s: &str) -> http::HeaderValue {
    http::HeaderValue::from_str(s).unwrap_or_else(|_| http::HeaderValue::from_static("-"))
}

impl Upstream {
    /// The pooled HTTP client; `None` for a mock upstream.
    pub fn client(&self) -> Option<&crate::client::Client> {
        self.client.as_deref()
    }
}

impl Snapshot {
    pub fn upstream_model(&self, c: &Candidate) -> (&Upstream, &Model) {
        let up = &self.upstreams[c.upstream];
        (up, &up.models[c.model])
    }

    /// The tenant behind an API key: unknown → `InvalidApiKey`; revoked or expired keys have
    /// their own codes so the caller knows to get a new one.
    pub fn authenticate(&self, key: &str) -> Result<(&Tenant, &KeyRef), crate::AxError> {
        let digest: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        let k = self.keys.get(&digest).ok_or(crate::AxError::InvalidApiKey)?;
        if k.revoked {
            return Err(crate::AxError::ApiKeyRevoked);
        }
        if let Some(exp) = k.expires_at {
            let now = jiff::Timestamp::now().as_second();
            if now >= exp {
                return Err(crate::AxError::ApiKeyExpired);
            }
        }
        Ok((&self.tenants[k.tenant], k))
    }

    /// `self`, if it may replace `current`: a configuration with no upstreams, routes or tenants
    /// never replaces one that has routes or tenants. Both reload paths (file and control plane)
    /// apply this rule. An empty configuration is far more often a file read between its
    /// truncation and its write, or a lost document, than an intent to refuse every caller (which
    /// stopping the process does plainly).
    pub fn replacing(self, current: &Snapshot) -> Result<Snapshot, ConfigError> {
        let empty = self.upstreams.is_empty() && self.routes.is_empty() && self.tenants.is_empty();
        if empty && (!current.routes.is_empty() || !current.tenants.is_empty()) {
            return Err(err(
                "(root)",
                "the configuration is empty (no upstreams, routes or tenants); an empty configuration never \
                 replaces one that serves",
            ));
        }
        Ok(self)
    }
}

/// A configuration problem, naming the field path (`routes[1].candidates[0].upstream`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ConfigError {
    pub path: String,
    pub message: String,
}

/// A limiter for `spec`, keeping the live counters of `prev` (the same subject in the previous
/// snapshot) so a reload does not reset anyone's window.
fn limiter(
    spec: &ax_protocol::config::LimitsSpec,
    prev: Option<&Limiter>,
    path: impl Fn() -> String,
) -> Result<Limiter, ConfigError> {
    if [spec.rpm, spec.tpm, spec.concurrency].contains(&Some(0)) {
        return Err(err(format!("{}.limits", path()), "a limit of 0 would refuse everything; remove it or use >= 1"));
    }
    Ok(Limiter {
        rpm: spec.rpm,
        tpm: spec.tpm,
        concurrency: spec.concurrency,
        state: prev.map_or_else(LimitState::new, |p| p.state.clone()),
    })
}

fn err(path: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError { path: path.into(), message: message.into() }
}

/// Names (upstreams, models, aliases, tenants, keys) reach usage records, metric labels and the
/// control plane's tables: 1–256 bytes without control characters (a NUL is text Postgres refuses).
fn check_name(path: impl FnOnce() -> String, name: &str) -> Result<(), ConfigError> {
    if name.is_empty() || name.len() > 256 || name.chars().any(char::is_control) {
        return Err(err(path(), "1-256 characters, no control characters"));
    }
    Ok(())
}

/// Expands a whole-value `${NAME}` reference from the environment.
fn expand(path: &str, value: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, ConfigError> {
    match value.strip_prefix("${").and_then(|v| v.strip_suffix('}')) {
        Some(name) => env(name).ok_or_else(|| err(path, format!("environment variable '{name}' is not set"))),
        None => Ok(value.to_owned()),
    }
}

/// Compiles and validates a spec. `prev` lends unchanged upstreams' HTTP clients.
pub fn build(
    spec: &ConfigSpec,
    version: u64,
    env: &dyn Fn(&str) -> Option<String>,
    prev: Option<&Snapshot>,
) -> Result<Snapshot, ConfigError> {
    if spec.server.max_body_bytes == 0 {
        return Err(err("server.max_body_bytes", "must be greater than 0"));
    }
    let mut upstreams = Vec::with_capacity(spec.upstreams.len());
    let mut upstream_index = HashMap::new();
    for (i, u) in spec.upstreams.iter().enumerate() {
        let path = format!("upstreams[{i}]");
        check_name(|| format!("{path}.name"), &u.name)?;
        if upstream_index.insert(u.name.clone(), i).is_some() {
            return Err(err(format!("{path}.name"), format!("duplicate upstream name '{}'", u.name)));
        }
        upstreams.push(build_upstream(u, &path, env, prev)?);
    }

    let mut routes = HashMap::with_capacity(spec.routes.len());
    for (i, r) in spec.routes.iter().enumerate() {
        check_name(|| format!("routes[{i}].alias"), &r.alias)?;
        if r.alias == ax_protocol::usage::UNKNOWN_ALIAS {
            return Err(err(format!("routes[{i}].alias"), "reserved for requests naming no configured alias"));
        }
        if r.candidates.is_empty() {
            return Err(err(format!("routes[{i}].candidates"), "a route needs at least one candidate"));
        }
        let mut candidates: Vec<Candidate> = Vec::with_capacity(r.candidates.len());
        for (j, c) in r.candidates.iter().enumerate() {
            let &ui = upstream_index.get(&c.upstream).ok_or_else(|| {
                err(format!("routes[{i}].candidates[{j}].upstream"), format!("unknown upstream '{}'", c.upstream))
            })?;
            let mi = upstreams[ui].models.iter().position(|m: &Model| m.name == c.model).ok_or_else(|| {
                err(
                    format!("routes[{i}].candidates[{j}].model"),
                    format!("upstream '{}' has no model '{}'", c.upstream, c.model),
                )
            })?;
            if candidates.iter().any(|p| p.upstream == ui && p.model == mi) {
                return Err(err(
                    format!("routes[{i}].candidates[{j}]"),
                    format!("candidate {}/{} is listed twice", c.upstream, c.model),
                ));
            }
            candidates.push(Candidate { upstream: ui, model: mi, weight: c.weight, priority: c.priority });
        }
        if candidates.iter().all(|c| c.weight == 0) {
            return Err(err(format!("routes[{i}].candidates"), "at least one candidate needs a weight above 0"));
        }
        if r.failover.max_attempts == 0 {
            return Err(err(format!("routes[{i}].failover.max_attempts"), "must be at least 1"));
        }
        let route = Route {
            alias: r.alias.clone(),
            strategy: r.strategy,
            candidates,
            fallbacks: r.fallbacks.clone(),
            timeouts: r.timeouts.clone(),
            failover: r.failover.clone(),
            max_prompt_tokens: r.max_prompt_tokens,
            long_context_alias: r.long_context_alias.clone(),
            limiter: limiter(&r.limits, prev.and_then(|p| p.routes.get(&r.alias)).map(|r| &r.limiter), || {
                format!("routes[{i}]")
            })?,
        };
        if routes.insert(r.alias.clone(), route).is_some() {
            return Err(err(format!("routes[{i}].alias"), format!("duplicate alias '{}'", r.alias)));
        }
    }

    for (i, r) in spec.routes.iter().enumerate() {
        for (j, f) in r.fallbacks.iter().enumerate() {
            if f == &r.alias || !routes.contains_key(f) {
                return Err(err(format!("routes[{i}].fallbacks[{j}]"), format!("'{f}' is not another alias")));
            }
        }
        if let Some(l) = &r.long_context_alias {
            if l == &r.alias || !routes.contains_key(l) {
                return Err(err(format!("routes[{i}].long_context_alias"), format!("'{l}' is not another alias")));
            }
        }
    }

    // The previous snapshot's tenants and keys by id: their counters carry over.
    let prev_tenants: HashMap<&str, &Tenant> =
        prev.map(|p| p.tenants.iter().map(|t| (t.id.as_str(), t)).collect()).unwrap_or_default();
    let prev_keys: HashMap<&str, &KeyRef> =
        prev.map(|p| p.keys.values().map(|k| (k.key_id.as_str(), k)).collect()).unwrap_or_default();
    let mut tenants = Vec::with_capacity(spec.tenants.len());
    let mut keys = HashMap::with_capacity(spec.tenants.len());
    let mut tenant_ids = HashSet::new();
    let mut key_ids = HashSet::new();
    for (i, t) in spec.tenants.iter().enumerate() {
        check_name(|| format!("tenants[{i}].id"), &t.id)?;
        if !tenant_ids.insert(t.id.as_str()) {
            return Err(err(format!("tenants[{i}].id"), format!("duplicate tenant '{}'", t.id)));
        }
        let allowed = if t.allowed_aliases.iter().any(|a| a == "*") {
            Allowed::All
        } else {
            for (j, a) in t.allowed_aliases.iter().enumerate() {
                if !routes.contains_key(a) {
                    return Err(err(format!("tenants[{i}].allowed_aliases[{j}]"), format!("unknown alias '{a}'")));
                }
            }
            Allowed::Some(t.allowed_aliases.iter().cloned().collect())
        };
        for (j, k) in t.keys.iter().enumerate() {
            check_name(|| format!("tenants[{i}].keys[{j}].id"), &k.id)?;
            if !key_ids.insert(k.id.as_str()) {
                return Err(err(format!("tenants[{i}].keys[{j}].id"), format!("duplicate key id '{}'", k.id)));
            }
            let digest = key_digest(k.sha256.as_deref(), k.key.as_deref(), || format!("tenants[{i}].keys[{j}]"), env)?;
            let expires_at = match &k.expires_at {
                Some(t) => Some(
                    t.parse::<jiff::Timestamp>()
                        .map_err(|e| {
                            err(format!("tenants[{i}].keys[{j}].expires_at"), format!("not an RFC 3339 time: {e}"))
                        })?
                        .as_second(),
                ),
                None => None,
            };
            let prev_key = prev_keys.get(k.id.as_str()).map(|pk| &pk.limiter);
            let key = KeyRef {
                tenant: i,
                key_id: k.id.clone(),
                revoked: k.status == ax_protocol::config::KeyStatus::Revoked,
                expires_at,
                limiter: limiter(&k.limits, prev_key, || format!("tenants[{i}].keys[{j}]"))?,
            };
            if keys.insert(digest, key).is_some() {
                return Err(err(format!("tenants[{i}].keys[{j}]"), "the same key is configured twice"));
            }
        }
        let prev_tenant = prev_tenants.get(t.id.as_str()).copied();
        let mut budgets = Vec::with_capacity(t.budgets.len());
        for (j, b) in t.budgets.iter().enumerate() {
            let bpath = format!("tenants[{i}].budgets[{j}]");
            let limit = crate::cost::Prices::from_spec(&ax_protocol::config::PriceSpec {
                input: b.usd,
                output: 0.0,
                cached_input: None,
                cache_write: None,
            })
            .map_err(|_| err(format!("{bpath}.usd"), "a USD amount with at most 6 decimals"))?
            .input;
            if limit == 0 || !(b.warn_at > 0.0 && b.warn_at <= 1.0) {
                return Err(err(bpath, "usd must be > 0 and warn_at in (0, 1]"));
            }
            for (field, a) in [
                ("alias", b.alias.as_ref()),
                (
                    "action.downgrade_to",
                    match &b.action {
                        ax_protocol::config::BudgetAction::DowngradeTo { downgrade_to } => Some(downgrade_to),
                        ax_protocol::config::BudgetAction::Plain(_) => None,
                    },
                ),
            ] {
                if let Some(a) = a.filter(|a| !routes.contains_key(*a)) {
                    return Err(err(format!("{bpath}.{field}"), format!("unknown alias '{a}'")));
                }
            }
            // The same budget (window and alias) keeps its spend across reloads.
            let state = prev_tenant
                .and_then(|pt| pt.budgets.iter().find(|pb| pb.window == b.window && pb.alias == b.alias))
                .map_or_else(Default::default, |pb| pb.state.clone());
            budgets.push(crate::budget::Budget {
                window: b.window,
                limit,
                alias: b.alias.clone(),
                action: b.action.clone(),
                warn_at: (limit as f64 * b.warn_at) as u64,
                state,
            });
        }
        tenants.push(Tenant {
            id: t.id.clone(),
            allowed,
            limiter: limiter(&t.limits, prev_tenant.map(|pt| &pt.limiter), || format!("tenants[{i}]"))?,
            budgets,
        });
    }

    let admin_token = match &spec.server.admin_token {
        Some(t) => {
            let token = Secret::new(expand("server.admin_token", t, env)?);
            if token.expose().len() < 16 {
                return Err(err("server.admin_token", "use at least 16 characters"));
            }
            Some(Sha256::digest(token.expose().as_bytes()).into())
        }
        None => None,
    };

    let budget_tz = jiff::tz::TimeZone::get(&spec.server.budget_timezone)
        .map_err(|e| err("server.budget_timezone", format!("unknown time zone: {e}")))?;

    let redis = match &spec.server.redis_url {
        Some(u) => {
            Some((expand("server.redis_url", u, env)?, spec.server.redis_prefix.clone(), spec.server.replicas.max(1)))
        }
        None => None,
    };

    Ok(Snapshot {
        redis,
        budget_tz,
        admin_token,
        version,
        params: spec.server.params,
        max_body_bytes: spec.server.max_body_bytes,
        default_max_tokens: spec.server.default_max_tokens,
        upstreams,
        routes,
        tenants,
        keys,
    })
}

fn key_digest(
    sha256: Option<&str>,
    key: Option<&str>,
    path: impl Fn() -> String,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<[u8; 32], ConfigError> {
    match (sha256, key) {
        (Some(hexd), None) => {
            let mut out = [0u8; 32];
            hex::decode_to_slice(hexd.trim(), &mut out)
                .map_err(|_| err(format!("{}.sha256", path()), "must be 64 hex characters (a SHA-256 digest)"))?;
            Ok(out)
        }
        (None, Some(k)) => {
            if !(k.starts_with("${") && k.ends_with('}')) {
                return Err(err(
                    format!("{}.key", path()),
                    "keys are never stored in plaintext: give 'sha256' or a '${ENV}' reference",
                ));
            }
            let value = Secret::new(expand(&format!("{}.key", path()), k, env)?);
            Ok(Sha256::digest(value.expose().as_bytes()).into())
        }
        _ => Err(err(path(), "give exactly one of 'sha256' or 'key'")),
    }
}

fn build_upstream(
    u: &UpstreamSpec,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
    prev: Option<&Snapshot>,
) -> Result<Upstream, ConfigError> {
    let base_url = match (&u.base_url, u.provider) {
        (Some(b), _) => expand(&format!("{path}.base_url"), b, env)?.trim_end_matches('/').to_owned(),
        (None, ProviderKind::Mock) => String::new(),
        (None, _) => return Err(err(format!("{path}.base_url"), "required for this provider")),
    };
    if u.provider != ProviderKind::Mock && !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
        return Err(err(format!("{path}.base_url"), "must start with http:// or https://"));
    }
    if u.provider == ProviderKind::AzureOpenai && u.api_version.is_none() {
        return Err(err(format!("{path}.api_version"), "required for azure_openai"));
    }
    if u.provider != ProviderKind::Mock && u.mock.is_some() {
        return Err(err(format!("{path}.mock"), "only a 'mock' upstream takes mock settings"));
    }
    let t = &u.timeouts;
    if t.connect_ms == 0 || t.first_byte_ms == 0 || t.idle_ms == 0 || t.total_ms == 0 {
        return Err(err(format!("{path}.timeouts"), "timeouts must be greater than 0"));
    }
    if u.max_concurrency == 0 {
        return Err(err(format!("{path}.max_concurrency"), "must be at least 1"));
    }
    let size = |field: &str, v: Option<u64>, default: usize| -> Result<usize, ConfigError> {
        match v {
            None => Ok(default),
            Some(n) if (1024..=1 << 30).contains(&n) => Ok(usize::try_from(n).unwrap_or(default)),
            Some(_) => Err(err(format!("{path}.{field}"), "between 1024 and 1073741824 bytes")),
        }
    };
    let max_response_bytes = size("max_response_bytes", u.max_response_bytes, DEFAULT_MAX_RESPONSE_BYTES)?;
    let max_event_bytes = size("max_event_bytes", u.max_event_bytes, DEFAULT_MAX_EVENT_BYTES)?;
    if !(u.breaker.failure_ratio > 0.0 && u.breaker.failure_ratio <= 1.0) || u.breaker.failures == 0 {
        return Err(err(format!("{path}.breaker"), "failures must be >= 1 and failure_ratio in (0, 1]"));
    }
    let api_key = match &u.api_key {
        Some(k) => Some(Secret::new(expand(&format!("{path}.api_key"), k, env)?)),
        None => None,
    };

    let mut headers = HeaderMap::new();
    if let Some(key) = &api_key {
        let (name, value) = match u.provider {
            ProviderKind::Openai => ("authorization", format!("Bearer {}", key.expose())),
            ProviderKind::AzureOpenai => ("api-key", key.expose().to_owned()),
            ProviderKind::Anthropic => ("x-api-key", key.expose().to_owned()),
            ProviderKind::Gemini => ("x-goog-api-key", key.expose().to_owned()),
            ProviderKind::Mock => ("authorization", format!("Bearer {}", key.expose())),
        };
        let mut v = HeaderValue::from_str(&value)
            .map_err(|_| err(format!("{path}.api_key"), "contains characters not allowed in a header"))?;
        v.set_sensitive(true);
        headers.insert(HeaderName::from_static(name), v);
    }
    if u.provider == ProviderKind::Anthropic {
        headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
    }
    for (name, value) in &u.headers {
        let hpath = format!("{path}.headers.{name}");
        let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| err(&hpath, "not a valid header name"))?;
        let mut v =
            HeaderValue::from_str(&expand(&hpath, value, env)?).map_err(|_| err(&hpath, "not a valid header value"))?;
        v.set_sensitive(true);
        headers.insert(n, v);
    }

    let mut fp = Sha256::new();
    fp.update(base_url.as_bytes());
    fp.update(u.timeouts.connect_ms.to_le_bytes());
    for (n, v) in &headers {
        fp.update(n.as_str().as_bytes());
        fp.update([0]);
        fp.update(v.as_bytes());
        fp.update([0]);
    }
    let client_fingerprint: [u8; 32] = fp.finalize().into();
    let threads = crate::worker::count();
    let reused = prev.and_then(|p| {
        p.upstreams
            .iter()
            .find(|o| o.name == u.name && o.client_fingerprint == client_fingerprint)
            .filter(|o| o.client.as_ref().is_some_and(|c| c.threads() == threads))
    });
    let base = match u.provider {
        ProviderKind::Mock => None,
        _ => Some(
            reqwest::Url::parse(&base_url).map_err(|e| err(format!("{path}.base_url"), format!("invalid URL: {e}")))?,
        ),
    };
    let client = match (reused, &base) {
        (Some(o), _) => o.client.clone(),
        (None, None) => None,
        (None, Some(base)) => Some(Arc::new(
            crate::client::Client::new(base, headers, Duration::from_millis(u.timeouts.connect_ms), threads)
                .map_err(|e| err(format!("{path}.base_url"), e))?,
        )),
    };

    if u.models.is_empty() {
        return Err(err(format!("{path}.models"), "an upstream needs at least one model"));
    }
    let prev_upstream = prev.and_then(|p| p.upstreams.iter().find(|o| o.name == u.name));
    let mut models = Vec::with_capacity(u.models.len());
    let mut names = HashSet::new();
    for (j, m) in u.models.iter().enumerate() {
        let mpath = format!("{path}.models[{j}]");
        check_name(|| format!("{mpath}.name"), &m.name)?;
        if !names.insert(m.name.as_str()) {
            return Err(err(format!("{mpath}.name"), format!("duplicate model '{}'", m.name)));
        }
        if m.context_window == 0 {
            return Err(err(format!("{mpath}.context_window"), "must be greater than 0"));
        }
        if m.capabilities.is_empty() {
            return Err(err(format!("{mpath}.capabilities"), "list at least one capability"));
        }
        if u.provider == ProviderKind::Anthropic && m.capabilities.contains(&Capability::Embeddings) {
            return Err(err(format!("{mpath}.capabilities"), "Anthropic has no embeddings API"));
        }
        let prices = match &m.price_per_mtok {
            Some(p) => {
                let all = [Some(p.input), Some(p.output), p.cached_input, p.cache_write];
                if all.iter().flatten().any(|v| !v.is_finite() || *v < 0.0) {
                    return Err(err(format!("{mpath}.price_per_mtok"), "prices must be finite and >= 0"));
                }
                Some(crate::cost::Prices::from_spec(p).map_err(|e| err(format!("{mpath}.price_per_mtok"), e))?)
            }
            None => None,
        };
        let (chat_url, stream_url, embed_url) = urls(u, &base_url, &m.name);
        // Parsed as a whole URL (the same rules as the base), then kept as the origin-form
        // target the client sends.
        let parse = |url: String| -> Result<Option<http::Uri>, ConfigError> {
            if url.is_empty() {
                return Ok(None);
            }
            let invalid = |e: String| err(format!("{path}.base_url"), format!("invalid URL {url}: {e}"));
            let parsed = reqwest::Url::parse(&url).map_err(|e| invalid(e.to_string()))?;
            parsed[url::Position::BeforePath..].parse::<http::Uri>().map(Some).map_err(|e| invalid(e.to_string()))
        };
        let (chat_url, stream_url, embed_url) = (parse(chat_url)?, parse(stream_url)?, parse(embed_url)?);
        let health = prev_upstream
            .and_then(|p| p.models.iter().find(|pm| pm.name == m.name))
            .map_or_else(ModelHealth::new, |pm| pm.health.clone());
        models.push(Model {
            prices,
            health,
            name: m.name.clone(),
            name_header: header_value(&m.name),
            context_window: m.context_window,
            max_output_tokens: m.max_output_tokens,
            caps: Caps::from_list(&m.capabilities),
            chat_url,
            stream_url,
            embed_url,
        });
    }

    let mock = (u.provider == ProviderKind::Mock)
        .then(|| MockUpstream { spec: u.mock.clone().unwrap_or_default(), counter: AtomicU64::new(0) });

    Ok(Upstream {
        name: u.name.clone(),
        name_header: header_value(&u.name),
        kind: u.provider,
        client,
        timeouts: u.timeouts.clone(),
        max_concurrency: u.max_concurrency,
        breaker: u.breaker.clone(),
        health: prev_upstream.map_or_else(UpstreamHealth::new, |p| p.health.clone()),
        limiter: {
            if u.limits.concurrency.is_some() {
                return Err(err(format!("{path}.limits.concurrency"), "use max_concurrency for upstreams"));
            }
            limiter(&u.limits, prev_upstream.map(|p| &p.limiter), || path.to_owned())?
        },
        models,
        mock,
        max_response_bytes,
        max_event_bytes,
        client_fingerprint,
    })
}

/// Default `max_response_bytes`: generous for any chat or embeddings answer, and a bound on what
/// one hostile upstream can make a data plane hold per request.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;
/// Default `max_event_bytes`.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

fn urls(u: &UpstreamSpec, base: &str, model: &str) -> (String, String, String) {
    match u.provider {
        ProviderKind::Openai => {
            let chat = format!("{base}/chat/completions");
            (chat.clone(), chat, format!("{base}/embeddings"))
        }
        ProviderKind::AzureOpenai => {
            let v = u.api_version.as_deref().unwrap_or_default();
            let chat = format!("{base}/openai/deployments/{model}/chat/completions?api-version={v}");
            (chat.clone(), chat, format!("{base}/openai/deployments/{model}/embeddings?api-version={v}"))
        }
        ProviderKind::Anthropic => {
            let chat = format!("{base}/v1/messages");
            (chat.clone(), chat, String::new())
        }
        ProviderKind::Gemini => (
            format!("{base}/v1beta/models/{model}:generateContent"),
            format!("{base}/v1beta/models/{model}:streamGenerateContent?alt=sse"),
            format!("{base}/v1beta/models/{model}:batchEmbedContents"),
        ),
        ProviderKind::Mock => (String::new(), String::new(), String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> ConfigSpec {
        serde_norway::from_str(yaml).unwrap()
    }

    const BASE: &str = r#"
upstreams:
  - name: m
    provider: mock
    models: [{ name: mock-1, context_window: 1000, capabilities: [chat] }]
routes:
  - alias: a
    candidates: [{ upstream: m, model: mock-1 }]
"#;

    #[test]
    fn an_empty_configuration_never_replaces_one_that_serves() {
        let serving = build(&spec(BASE), 1, &|_| None, None).unwrap();
        // What a reload reads from a file caught between truncation and write.
        let empty = || build(&crate::config::parse("").unwrap(), 2, &|_| None, Some(&serving)).unwrap();
        let e = empty().replacing(&serving).unwrap_err();
        assert!(e.message.contains("empty"), "{e}");
        // From nothing to nothing, and from nothing to something, is fine.
        assert!(empty().replacing(&empty()).is_ok());
        let other = || build(&spec(&BASE.replace("alias: a", "alias: b")), 3, &|_| None, Some(&serving)).unwrap();
        assert!(other().replacing(&empty()).is_ok());
        assert!(other().replacing(&serving).is_ok());
    }

    #[test]
    fn unknown_upstream_names_field_path() {
        let s = spec(&BASE.replace("upstream: m,", "upstream: nope,"));
        let e = build(&s, 1, &|_| None, None).unwrap_err();
        assert_eq!(e.path, "routes[0].candidates[0].upstream");
    }

    #[test]
    fn plaintext_keys_are_refused_and_env_keys_hash() {
        let plain = format!("{BASE}tenants: [{{ id: t, keys: [{{ id: k, key: ax-secret }}] }}]");
        let e = build(&spec(&plain), 1, &|_| None, None).unwrap_err();
        assert_eq!(e.path, "tenants[0].keys[0].key");
        let env = format!("{BASE}tenants: [{{ id: t, keys: [{{ id: k, key: \"${{K}}\" }}] }}]");
        let s = build(&spec(&env), 1, &|n| (n == "K").then(|| "ax-secret".to_owned()), None).unwrap();
        assert!(s.authenticate("ax-secret").is_ok());
        assert_eq!(s.authenticate("ax-other").unwrap_err().code(), "invalid_api_key");
    }

    #[test]
    fn revoked_and_expired_keys_are_refused_with_their_own_codes() {
        let d = hex::encode(Sha256::digest(b"ax-k1"));
        let e = hex::encode(Sha256::digest(b"ax-k2"));
        let f = hex::encode(Sha256::digest(b"ax-k3"));
        let yaml = format!(
            "{BASE}tenants: [{{ id: t, keys: [{{ id: a, sha256: \"{d}\", status: revoked }}, \
             {{ id: b, sha256: \"{e}\", expires_at: \"2020-01-01T00:00:00Z\" }}, \
             {{ id: c, sha256: \"{f}\", expires_at: \"2999-01-01T00:00:00Z\" }}] }}]"
        );
        let s = build(&spec(&yaml), 1, &|_| None, None).unwrap();
        assert_eq!(s.authenticate("ax-k1").unwrap_err().code(), "api_key_revoked");
        assert_eq!(s.authenticate("ax-k2").unwrap_err().code(), "api_key_expired");
        assert!(s.authenticate("ax-k3").is_ok());
        let bad = yaml.replace("2999-01-01T00:00:00Z", "next tuesday");
        assert_eq!(build(&spec(&bad), 1, &|_| None, None).unwrap_err().path, "tenants[0].keys[2].expires_at");
    }

    #[test]
    fn anthropic_embeddings_are_a_config_error() {
        let yaml = r#"
upstreams:
  - name: c
    provider: anthropic
    base_url: https://api.anthropic.com
    models: [{ name: claude, context_window: 1000, capabilities: [chat, embeddings] }]
"#;
        let e = build(&spec(yaml), 1, &|_| None, None).unwrap_err();
        assert_eq!(e.path, "upstreams[0].models[0].capabilities");
    }

    #[test]
    fn clients_and_health_survive_reloads() {
        let s = spec(BASE);
        let a = build(&s, 1, &|_| None, None).unwrap();
        let b = build(&s, 2, &|_| None, Some(&a)).unwrap();
        assert_eq!(a.upstreams[0].client_fingerprint, b.upstreams[0].client_fingerprint);
        assert!(Arc::ptr_eq(&a.upstreams[0].health, &b.upstreams[0].health));
        assert!(Arc::ptr_eq(&a.upstreams[0].models[0].health, &b.upstreams[0].models[0].health));
    }

    #[test]
    fn fallbacks_must_name_other_aliases() {
        let s = spec(&format!("{BASE}    fallbacks: [nope]\n"));
        assert_eq!(build(&s, 1, &|_| None, None).unwrap_err().path, "routes[0].fallbacks[0]");
    }
}
