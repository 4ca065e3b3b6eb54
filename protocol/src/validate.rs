//! Every rule a configuration must satisfy, checked without I/O or live state, with the field path
//! of each one broken (`routes[1].candidates[0].upstream`): [`validate_all`] reports every problem
//! at once, [`validate`] the first.
//!
//! Both planes call [`validate`]: the control plane before it stores a version, the data plane
//! before it compiles one, so what the control plane accepts every data plane accepts. What the
//! rules resolve on the way (names to indices, `${NAME}` references, prices in micro-USD, key
//! digests, upstream URLs and headers) comes back in [`Valid`]: the data plane's compiler attaches
//! live state to it and decides nothing again.

use std::collections::{HashMap, HashSet};

use http::{HeaderMap, HeaderName, HeaderValue};
use sha2::{Digest, Sha256};

use crate::config::{
    BudgetAction, BudgetSpec, Capability, ConfigSpec, KeySpec, LimitsSpec, PriceSpec, ProviderKind, TenantSpec,
    UpstreamSpec,
};
use crate::price::Prices;

/// A configuration problem, naming the field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl std::error::Error for ConfigError {}

pub fn err(path: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError { path: path.into(), message: message.into() }
}

/// Default `max_response_bytes`: generous for any chat or embeddings answer, and a bound on what
/// one hostile upstream can make a data plane hold per request.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;
/// Default `max_event_bytes`.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

/// What validation resolved, index for index with the spec's lists.
#[derive(Debug)]
pub struct Valid {
    pub upstreams: Vec<ValidUpstream>,
    /// Per route: its candidates as (upstream index, model index).
    pub routes: Vec<Vec<(usize, usize)>>,
    pub tenants: Vec<ValidTenant>,
    /// Per group: its budgets' limits in micro-USD.
    pub groups: Vec<Vec<u64>>,
    /// SHA-256 of the admin token.
    pub admin_token: Option<[u8; 32]>,
    pub budget_tz: jiff::tz::TimeZone,
    /// `server.redis_url` with its `${NAME}` resolved.
    pub redis_url: Option<String>,
}

#[derive(Debug)]
pub struct ValidUpstream {
    /// The origin requests go to; `None` for a mock upstream.
    pub base: Option<url::Url>,
    /// Authentication and configured headers, values marked sensitive.
    pub headers: HeaderMap,
    pub max_response_bytes: usize,
    pub max_event_bytes: usize,
    pub models: Vec<ValidModel>,
}

#[derive(Debug)]
pub struct ValidModel {
    pub prices: Option<Prices>,
    /// Request targets (path and query on the upstream's origin), per operation.
    pub chat: Option<http::Uri>,
    pub stream: Option<http::Uri>,
    pub embed: Option<http::Uri>,
}

#[derive(Debug)]
pub struct ValidTenant {
    pub keys: Vec<ValidKey>,
    /// Per budget: its limit in micro-USD.
    pub budget_limits: Vec<u64>,
}

#[derive(Debug)]
pub struct ValidKey {
    pub digest: [u8; 32],
    /// Unix seconds after which the key is refused.
    pub expires_at: Option<i64>,
    /// Per budget of the key: its limit in micro-USD.
    pub budget_limits: Vec<u64>,
}

/// Names (upstreams, models, aliases, tenants, keys) reach usage records, metric labels and the
/// control plane's tables: 1–256 bytes without control characters (a NUL is text Postgres refuses).
pub fn check_name(path: impl FnOnce() -> String, name: &str) -> Result<(), ConfigError> {
    if name.is_empty() || name.len() > 256 || name.chars().any(char::is_control) {
        return Err(err(path(), "1-256 characters, no control characters"));
    }
    Ok(())
}

/// Expands a whole-value `${NAME}` reference from the environment.
pub fn expand(path: &str, value: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, ConfigError> {
    match value.strip_prefix("${").and_then(|v| v.strip_suffix('}')) {
        Some(name) => env(name).ok_or_else(|| err(path, format!("environment variable '{name}' is not set"))),
        None => Ok(value.to_owned()),
    }
}

/// A limit of 0 would refuse everything.
fn check_limits(spec: &LimitsSpec, path: impl Fn() -> String) -> Result<(), ConfigError> {
    if [spec.rpm, spec.tpm, spec.concurrency].contains(&Some(0)) {
        return Err(err(format!("{}.limits", path()), "a limit of 0 would refuse everything; remove it or use >= 1"));
    }
    Ok(())
}

/// The problems found so far: validation goes on past the first one, so that one answer names
/// every broken field (a check that depends on a broken field is skipped, not reported twice).
#[derive(Default)]
struct Problems(Vec<ConfigError>);

impl Problems {
    fn add(&mut self, e: ConfigError) {
        self.0.push(e);
    }

    /// `r`'s value, or None with its error recorded.
    fn ok<T>(&mut self, r: Result<T, ConfigError>) -> Option<T> {
        r.map_err(|e| self.add(e)).ok()
    }

    /// `r`'s value, or None with its errors recorded.
    fn all<T>(&mut self, r: Result<T, Vec<ConfigError>>) -> Option<T> {
        r.map_err(|e| self.0.extend(e)).ok()
    }

    /// `value` if nothing was found.
    fn end<T>(self, value: impl FnOnce() -> T) -> Result<T, Vec<ConfigError>> {
        if self.0.is_empty() {
            Ok(value())
        } else {
            Err(self.0)
        }
    }
}

/// Checks `spec`; `env` resolves `${NAME}` references (the control plane, which resolves none,
/// passes one that resolves every name). The error is the first problem; [`validate_all`] gives
/// every one.
pub fn validate(spec: &ConfigSpec, env: &dyn Fn(&str) -> Option<String>) -> Result<Valid, ConfigError> {
    validate_all(spec, env).map_err(|all| all.into_iter().next().unwrap_or_else(|| err("", "invalid")))
}

/// Checks `spec` like [`validate`]; on failure, every problem found, in document order.
pub fn validate_all(spec: &ConfigSpec, env: &dyn Fn(&str) -> Option<String>) -> Result<Valid, Vec<ConfigError>> {
    let mut p = Problems::default();
    let rs = &spec.server.response_store;
    if !(1..=400).contains(&rs.retention_days) {
        p.add(err("server.response_store.retention_days", "must be between 1 and 400"));
    }
    if rs.max_response_bytes == 0 || rs.local_max_bytes < rs.max_response_bytes {
        p.add(err("server.response_store.max_response_bytes", "must be greater than 0 and at most local_max_bytes"));
    }
    if spec.server.max_body_bytes == 0 {
        p.add(err("server.max_body_bytes", "must be greater than 0"));
    }
    let mut upstreams = Vec::with_capacity(spec.upstreams.len());
    let mut upstream_index = HashMap::with_capacity(spec.upstreams.len());
    for (i, u) in spec.upstreams.iter().enumerate() {
        let path = format!("upstreams[{i}]");
        p.ok(check_name(|| format!("{path}.name"), &u.name));
        if upstream_index.insert(u.name.as_str(), i).is_some() {
            p.add(err(format!("{path}.name"), format!("duplicate upstream name '{}'", u.name)));
        }
        if !u.passthrough.is_off() && !matches!(u.provider, ProviderKind::Openai | ProviderKind::AzureOpenai) {
            p.add(err(
                format!("{path}.passthrough"),
                "only OpenAI-compatible upstreams (openai, azure_openai) take fields ax does not know",
            ));
        }
        if u.responses_api == Some(true) && u.provider != ProviderKind::Openai {
            p.add(err(format!("{path}.responses_api"), "only an `openai` upstream offers the Responses API"));
        }
        if let crate::config::Passthrough::Fields(f) = &u.passthrough {
            for (k, _) in f.iter().enumerate().filter(|(_, n)| n.is_empty() || n.contains('.')) {
                p.add(err(format!("{path}.passthrough[{k}]"), "a top-level field name"));
            }
        }
        if let Some(v) = p.all(upstream(u, &path, env)) {
            upstreams.push(v);
        }
    }

    let mut aliases = HashSet::with_capacity(spec.routes.len());
    let mut routes = Vec::with_capacity(spec.routes.len());
    for (i, r) in spec.routes.iter().enumerate() {
        p.ok(check_name(|| format!("routes[{i}].alias"), &r.alias));
        if r.alias == crate::usage::UNKNOWN_ALIAS {
            p.add(err(format!("routes[{i}].alias"), "reserved for requests naming no configured alias"));
        }
        if r.candidates.is_empty() {
            p.add(err(format!("routes[{i}].candidates"), "a route needs at least one candidate"));
        } else if r.candidates.iter().all(|c| c.weight == 0) {
            p.add(err(format!("routes[{i}].candidates"), "at least one candidate needs a weight above 0"));
        }
        let mut candidates: Vec<(usize, usize)> = Vec::with_capacity(r.candidates.len());
        for (j, c) in r.candidates.iter().enumerate() {
            let Some(&ui) = upstream_index.get(c.upstream.as_str()) else {
                p.add(err(
                    format!("routes[{i}].candidates[{j}].upstream"),
                    format!("unknown upstream '{}'", c.upstream),
                ));
                continue;
            };
            let Some(mi) = spec.upstreams[ui].models.iter().position(|m| m.name == c.model) else {
                p.add(err(
                    format!("routes[{i}].candidates[{j}].model"),
                    format!("upstream '{}' has no model '{}'", c.upstream, c.model),
                ));
                continue;
            };
            if candidates.contains(&(ui, mi)) {
                p.add(err(
                    format!("routes[{i}].candidates[{j}]"),
                    format!("candidate {}/{} is listed twice", c.upstream, c.model),
                ));
            }
            candidates.push((ui, mi));
        }
        if r.failover.max_attempts == 0 {
            p.add(err(format!("routes[{i}].failover.max_attempts"), "must be at least 1"));
        }
        p.ok(check_limits(&r.limits, || format!("routes[{i}]")));
        if !aliases.insert(r.alias.as_str()) {
            p.add(err(format!("routes[{i}].alias"), format!("duplicate alias '{}'", r.alias)));
        }
        routes.push(candidates);
    }

    for (i, r) in spec.routes.iter().enumerate() {
        for (j, f) in r.fallbacks.iter().enumerate() {
            if f == &r.alias || !aliases.contains(f.as_str()) {
                p.add(err(format!("routes[{i}].fallbacks[{j}]"), format!("'{f}' is not another alias")));
            }
        }
        if let Some(l) = &r.long_context_alias {
            if l == &r.alias || !aliases.contains(l.as_str()) {
                p.add(err(format!("routes[{i}].long_context_alias"), format!("'{l}' is not another alias")));
            }
        }
    }

    let mut group_ids = HashSet::with_capacity(spec.groups.len());
    let mut groups = Vec::with_capacity(spec.groups.len());
    for (i, g) in spec.groups.iter().enumerate() {
        p.ok(check_name(|| format!("groups[{i}].id"), &g.id));
        if !group_ids.insert(g.id.as_str()) {
            p.add(err(format!("groups[{i}].id"), format!("duplicate group '{}'", g.id)));
        }
        groups.push(budgets(&mut p, &g.budgets, &format!("groups[{i}]"), &aliases));
    }

    let mut tenant_ids = HashSet::with_capacity(spec.tenants.len());
    let mut key_ids = HashSet::new();
    let mut digests = HashSet::new();
    let mut tenants = Vec::with_capacity(spec.tenants.len());
    for (i, t) in spec.tenants.iter().enumerate() {
        p.ok(check_name(|| format!("tenants[{i}].id"), &t.id));
        if !tenant_ids.insert(t.id.as_str()) {
            p.add(err(format!("tenants[{i}].id"), format!("duplicate tenant '{}'", t.id)));
        }
        if let Some(v) = p.all(tenant(t, i, &aliases, &group_ids, &mut key_ids, &mut digests, env)) {
            tenants.push(v);
        }
    }

    let admin_token = match &spec.server.admin_token {
        Some(t) => match p.ok(expand("server.admin_token", t, env)) {
            Some(token) if token.len() < 16 => {
                p.add(err("server.admin_token", "use at least 16 characters"));
                None
            }
            Some(token) => Some(Sha256::digest(token.as_bytes()).into()),
            None => None,
        },
        None => None,
    };
    let budget_tz = p.ok(jiff::tz::TimeZone::get(&spec.server.budget_timezone)
        .map_err(|e| err("server.budget_timezone", format!("unknown time zone: {e}"))));
    let redis_url = p.ok(spec.server.redis_url.as_deref().map(|u| expand("server.redis_url", u, env)).transpose());
    if spec.server.redis_cluster && spec.server.redis_sentinel.is_some() {
        p.add(err(
            "server.redis_sentinel",
            "a Redis Cluster is not behind Sentinel: set one of redis_cluster, redis_sentinel",
        ));
    }
    if let Some(t) = &spec.server.tracing {
        if t.sample_ratio.is_some_and(|r| !(0.0..=1.0).contains(&r)) {
            p.add(err("server.tracing.sample_ratio", "a share from 0 to 1"));
        }
        if t.queue.is_some_and(|q| !(1..=1_000_000).contains(&q)) {
            p.add(err("server.tracing.queue", "from 1 to 1,000,000 requests"));
        }
        if t.endpoint.as_deref().is_some_and(|e| !(e.starts_with("http://") || e.starts_with("https://"))) {
            p.add(err("server.tracing.endpoint", "an http:// or https:// URL: OTLP over HTTP to a collector"));
        }
    }
    if spec.server.redis_sentinel.as_deref().is_some_and(str::is_empty) {
        p.add(err("server.redis_sentinel", "the name of the master the Sentinels watch"));
    }
    match budget_tz {
        Some(budget_tz) => p.end(|| Valid {
            upstreams,
            routes,
            tenants,
            groups,
            admin_token,
            budget_tz,
            redis_url: redis_url.flatten(),
        }),
        None => Err(p.0),
    }
}

fn tenant<'s>(
    t: &'s TenantSpec,
    i: usize,
    aliases: &HashSet<&str>,
    groups: &HashSet<&str>,
    key_ids: &mut HashSet<&'s str>,
    digests: &mut HashSet<[u8; 32]>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ValidTenant, Vec<ConfigError>> {
    let mut p = Problems::default();
    if !t.allowed_aliases.iter().any(|a| a == "*") {
        for (j, a) in t.allowed_aliases.iter().enumerate() {
            // A glob allows every alias it matches (and names at least one).
            let known = aliases.contains(a.as_str())
                || (crate::glob::is_glob(a) && aliases.iter().any(|x| crate::glob::matches(a, x)));
            if !known {
                p.add(err(format!("tenants[{i}].allowed_aliases[{j}]"), format!("unknown alias '{a}'")));
            }
        }
    }
    let mut keys = Vec::with_capacity(t.keys.len());
    for (j, k) in t.keys.iter().enumerate() {
        let path = || format!("tenants[{i}].keys[{j}]");
        p.ok(check_name(|| format!("{}.id", path()), &k.id));
        if !key_ids.insert(k.id.as_str()) {
            p.add(err(format!("{}.id", path()), format!("duplicate key id '{}'", k.id)));
        }
        let digest = p.ok(key_digest(k, path, env));
        let expires_at = match &k.expires_at {
            Some(t) => p.ok(t
                .parse::<jiff::Timestamp>()
                .map(|t| Some(t.as_second()))
                .map_err(|e| err(format!("{}.expires_at", path()), format!("not an RFC 3339 time: {e}")))),
            None => Some(None),
        };
        p.ok(check_limits(&k.limits, path));
        for (alias, limits) in &k.alias_limits {
            if !aliases.contains(alias.as_str()) {
                p.add(err(format!("{}.alias_limits.{alias}", path()), format!("unknown alias '{alias}'")));
            }
            p.ok(check_limits(limits, || format!("{}.alias_limits.{alias}", path())));
        }
        let budget_limits = budgets(&mut p, &k.budgets, &path(), aliases);
        if let Some(digest) = digest {
            if !digests.insert(digest) {
                p.add(err(path(), "the same key is configured twice"));
            }
            keys.push(ValidKey { digest, expires_at: expires_at.flatten(), budget_limits });
        }
    }
    let budget_limits = budgets(&mut p, &t.budgets, &format!("tenants[{i}]"), aliases);
    for (j, g) in t.groups.iter().enumerate() {
        if !groups.contains(g.as_str()) {
            p.add(err(format!("tenants[{i}].groups[{j}]"), format!("unknown group '{g}'")));
        }
    }
    p.ok(check_limits(&t.limits, || format!("tenants[{i}]")));
    p.end(|| ValidTenant { keys, budget_limits })
}

/// Every budget of one subject (`path` is the subject's: `tenants[0]`): each limit in micro-USD
/// (0 where it is invalid, with its problem recorded).
fn budgets(p: &mut Problems, list: &[BudgetSpec], path: &str, aliases: &HashSet<&str>) -> Vec<u64> {
    let mut limits = Vec::with_capacity(list.len());
    for (j, b) in list.iter().enumerate() {
        let path = format!("{path}.budgets[{j}]");
        let limit = p.ok(Prices::from_spec(&PriceSpec {
            input: b.usd,
            output: 0.0,
            cached_input: None,
            cache_write: None,
            cache_write_1h: None,
        })
        .map(|p| p.input)
        .map_err(|_| err(format!("{path}.usd"), "a USD amount with at most 6 decimals")));
        if limit == Some(0) {
            p.add(err(format!("{path}.usd"), "must be greater than 0"));
        }
        if !(b.warn_at > 0.0 && b.warn_at <= 1.0) {
            p.add(err(format!("{path}.warn_at"), "must be in (0, 1]"));
        }
        let downgrade_to = match &b.action {
            BudgetAction::DowngradeTo { downgrade_to } => Some(downgrade_to),
            BudgetAction::Plain(_) => None,
        };
        for (field, a) in [("alias", b.alias.as_ref()), ("action.downgrade_to", downgrade_to)] {
            if let Some(a) = a.filter(|a| !aliases.contains(a.as_str())) {
                p.add(err(format!("{path}.{field}"), format!("unknown alias '{a}'")));
            }
        }
        if let Some(twin) = list[..j].iter().position(|o| o.window == b.window && o.alias == b.alias) {
            p.add(err(
                path.clone(),
                format!("budgets[{twin}] already caps this {} (and alias); one budget per window", b.window.name()),
            ));
        }
        limits.push(limit.unwrap_or(0));
    }
    limits
}

fn key_digest(
    k: &KeySpec,
    path: impl Fn() -> String,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<[u8; 32], ConfigError> {
    match (k.sha256.as_deref(), k.key.as_deref()) {
        (Some(hexd), None) => {
            let mut out = [0u8; 32];
            hex::decode_to_slice(hexd.trim(), &mut out)
                .map_err(|_| err(format!("{}.sha256", path()), "must be 64 hex characters (a SHA-256 digest)"))?;
            Ok(out)
        }
        (None, Some(key)) => {
            if !(key.starts_with("${") && key.ends_with('}')) {
                return Err(err(
                    format!("{}.key", path()),
                    "keys are never stored in plaintext: give 'sha256' or a '${ENV}' reference",
                ));
            }
            Ok(Sha256::digest(expand(&format!("{}.key", path()), key, env)?.as_bytes()).into())
        }
        _ => Err(err(path(), "give exactly one of 'sha256' or 'key'")),
    }
}

fn upstream(
    u: &UpstreamSpec,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ValidUpstream, Vec<ConfigError>> {
    let mut p = Problems::default();
    // None: missing or unusable (reported); "" for a mock upstream.
    let base_url = match (&u.base_url, u.provider) {
        (Some(b), _) => p.ok(expand(&format!("{path}.base_url"), b, env)).map(|b| b.trim_end_matches('/').to_owned()),
        (None, ProviderKind::Mock) => Some(String::new()),
        (None, _) => {
            p.add(err(format!("{path}.base_url"), "required for this provider"));
            None
        }
    };
    let base_url = base_url.filter(|b| {
        let ok = u.provider == ProviderKind::Mock || b.starts_with("http://") || b.starts_with("https://");
        if !ok {
            p.add(err(format!("{path}.base_url"), "must start with http:// or https://"));
        }
        ok
    });
    if u.provider == ProviderKind::AzureOpenai && u.api_version.is_none() {
        p.add(err(format!("{path}.api_version"), "required for azure_openai"));
    }
    if u.provider != ProviderKind::Mock && u.mock.is_some() {
        p.add(err(format!("{path}.mock"), "only a 'mock' upstream takes mock settings"));
    }
    let t = &u.timeouts;
    if t.connect_ms == 0 || t.first_byte_ms == 0 || t.idle_ms == 0 || t.total_ms == 0 {
        p.add(err(format!("{path}.timeouts"), "timeouts must be greater than 0"));
    }
    if u.max_concurrency == 0 {
        p.add(err(format!("{path}.max_concurrency"), "must be at least 1"));
    }
    let size = |field: &str, v: Option<u64>, default: usize| -> Result<usize, ConfigError> {
        match v {
            None => Ok(default),
            Some(n) if (1024..=1 << 30).contains(&n) => Ok(usize::try_from(n).unwrap_or(default)),
            Some(_) => Err(err(format!("{path}.{field}"), "between 1024 and 1073741824 bytes")),
        }
    };
    let max_response_bytes =
        p.ok(size("max_response_bytes", u.max_response_bytes, DEFAULT_MAX_RESPONSE_BYTES)).unwrap_or_default();
    let max_event_bytes = p.ok(size("max_event_bytes", u.max_event_bytes, DEFAULT_MAX_EVENT_BYTES)).unwrap_or_default();
    if !(u.breaker.failure_ratio > 0.0 && u.breaker.failure_ratio <= 1.0) || u.breaker.failures == 0 {
        p.add(err(format!("{path}.breaker"), "failures must be >= 1 and failure_ratio in (0, 1]"));
    }
    let headers = p.ok(headers(u, path, env)).unwrap_or_default();
    let base = match (u.provider, &base_url) {
        (ProviderKind::Mock, _) | (_, None) => None,
        (_, Some(base_url)) => {
            let invalid = |m: String| err(format!("{path}.base_url"), m);
            match url::Url::parse(base_url) {
                Err(e) => {
                    p.add(invalid(format!("invalid URL: {e}")));
                    None
                }
                Ok(base) if !base.username().is_empty() || base.password().is_some() => {
                    p.add(invalid("credentials in the URL are not supported: use api_key or headers".into()));
                    None
                }
                Ok(base) if base.host().is_none() => {
                    p.add(invalid("the URL has no host".into()));
                    None
                }
                Ok(base) => Some(base),
            }
        }
    };

    if u.models.is_empty() {
        p.add(err(format!("{path}.models"), "an upstream needs at least one model"));
    }
    let mut models = Vec::with_capacity(u.models.len());
    let mut names = HashSet::with_capacity(u.models.len());
    for (j, m) in u.models.iter().enumerate() {
        let mpath = format!("{path}.models[{j}]");
        p.ok(check_name(|| format!("{mpath}.name"), &m.name));
        if !names.insert(m.name.as_str()) {
            p.add(err(format!("{mpath}.name"), format!("duplicate model '{}'", m.name)));
        }
        if m.context_window == 0 {
            p.add(err(format!("{mpath}.context_window"), "must be greater than 0"));
        }
        if m.capabilities.is_empty() {
            p.add(err(format!("{mpath}.capabilities"), "list at least one capability"));
        }
        if u.provider == ProviderKind::Anthropic && m.capabilities.contains(&Capability::Embeddings) {
            p.add(err(format!("{mpath}.capabilities"), "Anthropic has no embeddings API"));
        }
        let prices = match &m.price_per_mtok {
            Some(pr) => {
                let all = [Some(pr.input), Some(pr.output), pr.cached_input, pr.cache_write];
                if all.iter().flatten().any(|v| !v.is_finite() || *v < 0.0) {
                    p.add(err(format!("{mpath}.price_per_mtok"), "prices must be finite and >= 0"));
                    None
                } else {
                    p.ok(Prices::from_spec(pr).map_err(|e| err(format!("{mpath}.price_per_mtok"), e)))
                }
            }
            None => None,
        };
        // The request targets only when the base URL is usable (its problem is reported once).
        let Some(base_url) = base_url.as_deref().filter(|_| base.is_some() || u.provider == ProviderKind::Mock) else {
            continue;
        };
        let [chat, stream, embed] = targets(u, base_url, &m.name);
        // Parsed as a whole URL (the same rules as the base), then kept as the origin-form target
        // the client sends.
        let parse = |url: String| -> Result<Option<http::Uri>, ConfigError> {
            if url.is_empty() {
                return Ok(None);
            }
            let invalid = |e: String| err(format!("{path}.base_url"), format!("invalid URL {url}: {e}"));
            let parsed = url::Url::parse(&url).map_err(|e| invalid(e.to_string()))?;
            parsed[url::Position::BeforePath..].parse::<http::Uri>().map(Some).map_err(|e| invalid(e.to_string()))
        };
        let (chat, stream, embed) = (p.ok(parse(chat)), p.ok(parse(stream)), p.ok(parse(embed)));
        models.push(ValidModel { prices, chat: chat.flatten(), stream: stream.flatten(), embed: embed.flatten() });
    }
    if u.limits.concurrency.is_some() {
        p.add(err(format!("{path}.limits.concurrency"), "use max_concurrency for upstreams"));
    }
    p.ok(check_limits(&u.limits, || path.to_owned()));
    p.end(|| ValidUpstream { base, headers, max_response_bytes, max_event_bytes, models })
}

/// The headers every request to `u` carries: its provider's authentication and the configured ones.
fn headers(u: &UpstreamSpec, path: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<HeaderMap, ConfigError> {
    let mut headers = HeaderMap::new();
    if let Some(k) = &u.api_key {
        let key = expand(&format!("{path}.api_key"), k, env)?;
        let (name, value) = match u.provider {
            ProviderKind::Openai | ProviderKind::Mock => ("authorization", format!("Bearer {key}")),
            ProviderKind::AzureOpenai => ("api-key", key),
            ProviderKind::Anthropic => ("x-api-key", key),
            ProviderKind::Gemini => ("x-goog-api-key", key),
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
    Ok(headers)
}

/// Chat, stream and embeddings URLs of `model` on an upstream (empty: the provider has none).
fn targets(u: &UpstreamSpec, base: &str, model: &str) -> [String; 3] {
    match u.provider {
        ProviderKind::Openai => {
            let chat = format!("{base}/chat/completions");
            [chat.clone(), chat, format!("{base}/embeddings")]
        }
        ProviderKind::AzureOpenai => {
            let v = u.api_version.as_deref().unwrap_or_default();
            let chat = format!("{base}/openai/deployments/{model}/chat/completions?api-version={v}");
            [chat.clone(), chat, format!("{base}/openai/deployments/{model}/embeddings?api-version={v}")]
        }
        ProviderKind::Anthropic => {
            let chat = format!("{base}/v1/messages");
            [chat.clone(), chat, String::new()]
        }
        ProviderKind::Gemini => [
            format!("{base}/v1beta/models/{model}:generateContent"),
            format!("{base}/v1beta/models/{model}:streamGenerateContent?alt=sse"),
            format!("{base}/v1beta/models/{model}:batchEmbedContents"),
        ],
        ProviderKind::Mock => [String::new(), String::new(), String::new()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec from JSON with `base`'s routes and upstreams and `extra` merged in at the top.
    fn spec(extra: serde_json::Value) -> ConfigSpec {
        let mut v = serde_json::json!({
            "upstreams": [{ "name": "m", "provider": "mock",
                            "models": [{ "name": "mock-1", "context_window": 1000, "capabilities": ["chat"] }] }],
            "routes": [{ "alias": "a", "candidates": [{ "upstream": "m", "model": "mock-1" }] }]
        });
        for (k, x) in extra.as_object().cloned().unwrap_or_default() {
            v[k] = x;
        }
        serde_json::from_value(v).unwrap()
    }

    fn path_of(s: &ConfigSpec) -> String {
        validate(s, &|_| None).unwrap_err().path
    }

    #[test]
    fn unknown_upstream_names_field_path() {
        let mut s = spec(serde_json::json!({}));
        s.routes[0].candidates[0].upstream = "nope".into();
        assert_eq!(path_of(&s), "routes[0].candidates[0].upstream");
    }

    #[test]
    fn plaintext_keys_are_refused() {
        let s = spec(serde_json::json!({ "tenants": [{ "id": "t", "keys": [{ "id": "k", "key": "ax-secret" }] }] }));
        assert_eq!(path_of(&s), "tenants[0].keys[0].key");
        let s = spec(serde_json::json!({ "tenants": [{ "id": "t", "keys": [{ "id": "k", "key": "${K}" }] }] }));
        let v = validate(&s, &|n| (n == "K").then(|| "ax-secret".to_owned())).unwrap();
        assert_eq!(v.tenants[0].keys[0].digest, <[u8; 32]>::from(Sha256::digest(b"ax-secret")));
        assert_eq!(path_of(&s), "tenants[0].keys[0].key", "an unset variable names the field");
    }

    #[test]
    fn anthropic_embeddings_are_a_config_error() {
        let s = spec(serde_json::json!({ "routes": [], "upstreams": [{
            "name": "c", "provider": "anthropic", "base_url": "https://api.anthropic.com",
            "models": [{ "name": "claude", "context_window": 1000, "capabilities": ["chat", "embeddings"] }] }] }));
        assert_eq!(path_of(&s), "upstreams[0].models[0].capabilities");
    }

    #[test]
    fn fallbacks_must_name_other_aliases() {
        let mut s = spec(serde_json::json!({}));
        s.routes[0].fallbacks = vec!["nope".into()];
        assert_eq!(path_of(&s), "routes[0].fallbacks[0]");
        s.routes[0].fallbacks = vec!["a".into()];
        assert_eq!(path_of(&s), "routes[0].fallbacks[0]", "not itself either");
    }

    #[test]
    fn references_resolve_to_indices() {
        let s = spec(serde_json::json!({}));
        let v = validate(&s, &|_| None).unwrap();
        assert_eq!(v.routes, vec![vec![(0, 0)]]);
        assert!(v.upstreams[0].base.is_none(), "a mock upstream has no origin");
    }

    #[test]
    fn urls_with_credentials_are_refused() {
        let s = spec(serde_json::json!({ "routes": [], "upstreams": [{
            "name": "o", "provider": "openai", "base_url": "https://u:p@api.openai.com/v1",
            "models": [{ "name": "g", "context_window": 1000, "capabilities": ["chat"] }] }] }));
        let e = validate(&s, &|_| None).unwrap_err();
        assert_eq!(e.path, "upstreams[0].base_url");
        assert!(e.message.contains("credentials"), "{e}");
    }
}
