//! The immutable snapshot: upstreams (with their backends: pooled HTTP clients or the in-process
//! mock), the capability matrix, routes, tenants and key digests, compiled from a validated
//! `ConfigSpec` and swapped whole.
//!
//! Each entity holds its configuration and, beside it, its live state: every field typed from
//! `crate::state` (limiters' counters, budgets' spend, breakers and statistics) and the upstream
//! clients' pools are carried over from the previous snapshot for the same name, so a reload
//! resets no one's window and drops no warm connection. Nothing else in here changes after build.
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
use ax_protocol::validate::{Valid, ValidUpstream};
use sha2::{Digest, Sha256};

use crate::body::header_value;

use crate::state::budget::{Budget, BudgetState, Scope};
use crate::state::health::{ModelHealth, UpstreamHealth};
use crate::state::limits::{LimitState, Limiter};

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

/// The maps a request looks up (keys, routes, per-alias limits): foldhash rather than std's
/// SipHash, ~15 instructions a lookup instead of ~130. Their keys come from the configuration, so a
/// caller cannot fill them with colliding entries; what a caller sends is only looked up.
pub type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

#[derive(Debug)]
pub struct Snapshot {
    /// Increments with every accepted configuration.
    pub version: u64,
    pub params: ParamsMode,
    pub max_body_bytes: u64,
    pub default_max_tokens: u32,
    pub upstreams: Vec<Upstream>,
    pub routes: Map<String, Route>,
    /// The aliases that are globs (`ax_protocol::glob`), in the order they are tried.
    pub globs: Vec<String>,
    pub tenants: Vec<Tenant>,
    /// SHA-256 of an API key → the key's owner.
    pub keys: Map<[u8; 32], KeyRef>,
    /// SHA-256 of the admin token; `/admin/*` is off without one.
    pub admin_token: Option<[u8; 32]>,
    /// The zone in which budget days and months begin.
    pub budget_tz: jiff::tz::TimeZone,
    /// `server.redis_*`: used once, at start, by `App::new`.
    pub redis: Option<RedisTarget>,
    /// The response store's limits: used once, at start, by `App::new`.
    pub response_store: ax_protocol::config::ResponseStoreSpec,
    /// The protocols some route forwards (`Route::protocols`): without one, callers of a protocol
    /// are decoded at once (no skim first).
    pub forwarded: ax_wire::canonical::Protocols,
}

#[derive(Debug)]
pub struct Upstream {
    pub name: String,
    /// `name` as a response header value, made once here.
    pub name_header: http::HeaderValue,
    pub kind: ProviderKind,
    /// Where its requests go.
    pub backend: Backend,
    pub timeouts: TimeoutsSpec,
    pub max_concurrency: u32,
    pub breaker: BreakerSpec,
    /// Live state (breaker, in-flight count), kept across reloads for the same upstream name.
    pub health: Arc<UpstreamHealth>,
    pub limiter: Limiter,
    pub models: Vec<Model>,
    /// The largest whole answer and the largest stream event taken from this upstream.
    pub max_response_bytes: usize,
    pub max_event_bytes: usize,
    /// Unknown chat fields this upstream is sent as written (`UpstreamSpec::passthrough`).
    pub passthrough: ax_protocol::config::Passthrough,
    /// The protocols its callers can be forwarded in (OpenAI Chat Completions for every
    /// OpenAI-compatible server, Responses for those that offer it, Anthropic Messages).
    pub speaks: ax_wire::canonical::Protocols,
    /// What the pooled client was built from; an unchanged upstream keeps its client (and its
    /// warm connections) across reloads.
    client_fingerprint: [u8; 32],
}

/// Who served a call (its last attempt): the one type the answer's `x-ax-*` headers, the usage
/// record and the logs read.
#[derive(Clone, Copy)]
pub struct Served<'s> {
    pub up: &'s Upstream,
    pub model: &'s Model,
    /// Attempts made, the successful one included.
    pub attempts: u32,
    /// The fallback alias that served, when the requested alias failed.
    pub fallback: Option<&'s str>,
}

/// Where an upstream's requests go: a closed set, matched exhaustively by dispatch.
#[derive(Debug)]
pub enum Backend {
    /// Over HTTP through the pooled client (one pool per serving thread, so connections stay on
    /// their thread), in the provider's wire format.
    Http(Arc<crate::transport::Client>),
    /// Answered in-process by the built-in mock (`upstream::mock`), in the canonical model.
    Mock(MockUpstream),
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
    /// Integer micro-USD per million tokens (`ax_protocol::price::Prices`).
    pub prices: Option<ax_protocol::price::Prices>,
    /// Live statistics, kept across reloads for the same (upstream, model).
    pub health: Arc<ModelHealth>,
    /// Upstream request targets (path and query on the upstream's origin), formatted and parsed
    /// once here so no request does either.
    pub chat_url: Option<http::Uri>,
    pub stream_url: Option<http::Uri>,
    /// `POST …/responses`, for an upstream that offers the Responses API.
    pub responses_url: Option<http::Uri>,
    pub embed_url: Option<http::Uri>,
    /// Where the upstream counts a request's tokens (Anthropic's `count_tokens`), if it does.
    pub count_url: Option<http::Uri>,
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
            Capability::Reasoning => 64,
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
    /// The protocols every candidate of this alias and of its fallback aliases speaks: callers
    /// of one of them are served from their own bytes.
    pub protocols: ax_wire::canonical::Protocols,
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
    /// The tenant's budgets, then its groups' (whose live spend every member shares).
    pub budgets: Vec<crate::state::budget::Budget>,
    /// Its prompts and completions go into its traced requests' spans.
    pub trace_content: bool,
}

#[derive(Debug)]
pub enum Allowed {
    All,
    /// The aliases named, and the globs among them (each allows the aliases it matches).
    Some {
        names: HashSet<String>,
        globs: Vec<String>,
    },
}

impl Allowed {
    /// Whether the tenant may use the route `alias` (a route's own alias: a glob route is allowed
    /// by its pattern).
    pub fn permits(&self, alias: &str) -> bool {
        match self {
            Self::All => true,
            Self::Some { names, globs } => {
                names.contains(alias) || globs.iter().any(|g| ax_protocol::glob::matches(g, alias))
            }
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
    /// The key's limits per alias: alias → (`<key>/<alias>`, the subject's name in Redis; limiter).
    pub alias_limits: Map<String, (String, Limiter)>,
    /// The key's own budgets (its tenant's and groups' are the tenant's).
    pub budgets: Vec<crate::state::budget::Budget>,
}

impl Upstream {
    /// The pooled HTTP client, unless the upstream is answered in-process.
    fn client(&self) -> Option<&Arc<crate::transport::Client>> {
        match &self.backend {
            Backend::Http(c) => Some(c),
            Backend::Mock(_) => None,
        }
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

    /// The route of `alias` for `tenant`: `model_not_found` when the alias does not exist,
    /// `model_not_allowed` when the tenant may not use it.
    pub fn route_for(&self, tenant: &Tenant, alias: &str) -> Result<&Route, crate::AxError> {
        match self.route(alias) {
            None => Err(crate::AxError::ModelNotFound(alias.to_owned())),
            Some(route) if !tenant.allowed.permits(&route.alias) => {
                Err(crate::AxError::ModelNotAllowed(alias.to_owned()))
            }
            Some(route) => Ok(route),
        }
    }

    /// The route that serves the model name a caller sent: its exact alias, else the longest glob
    /// alias that matches (`ax_protocol::glob`). Its records and limits are the route's alias's.
    pub fn route(&self, name: &str) -> Option<&Route> {
        match self.routes.get(name) {
            Some(r) => Some(r),
            None if self.globs.is_empty() => None,
            None => ax_protocol::glob::resolve(name, |_| false, &self.globs).and_then(|g| self.routes.get(g)),
        }
    }

    /// `self`, if it may replace `current`: a configuration with no upstreams, routes or tenants
    /// never replaces one that has routes or tenants. Both reload paths (file and control plane)
    /// apply this rule. An empty configuration is far more often a file read between its
    /// truncation and its write, or a lost document, than an intent to refuse every caller (which
    /// stopping the process does plainly).
    pub fn replacing(self, current: &Snapshot) -> Result<Snapshot, ConfigError> {
        let empty = self.upstreams.is_empty() && self.routes.is_empty() && self.tenants.is_empty();
        if empty && (!current.routes.is_empty() || !current.tenants.is_empty()) {
            return Err(ax_protocol::validate::err(
                "(root)",
                "the configuration is empty (no upstreams, routes or tenants); an empty configuration never \
                 replaces one that serves",
            ));
        }
        Ok(self)
    }
}

pub use ax_protocol::validate::{ConfigError, DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_RESPONSE_BYTES};

/// A limiter for `spec`, keeping the live counters of `prev` (the same subject in the previous
/// snapshot) so a reload does not reset anyone's window.
fn limiter(spec: &ax_protocol::config::LimitsSpec, prev: Option<&Limiter>) -> Limiter {
    Limiter {
        rpm: spec.rpm,
        tpm: spec.tpm,
        concurrency: spec.concurrency,
        exact: spec.exact,
        state: prev.map_or_else(LimitState::new, |p| p.state.clone()),
    }
}

/// Where the fleet's Redis is: `url` (with `cluster`, seed nodes separated by commas), the key
/// prefix, and the replicas a limit is divided by when Redis cannot be used.
#[derive(Debug, Clone)]
pub struct RedisTarget {
    pub url: String,
    pub cluster: bool,
    /// The master's name when `url` lists Sentinels.
    pub sentinel: Option<String>,
    pub prefix: String,
    pub replicas: u32,
}

/// Validates a spec (`ax_protocol::validate`, the rules the control plane applies too) and
/// compiles it. `prev` lends unchanged upstreams' HTTP clients and every subject's live state.
pub fn build(
    spec: &ConfigSpec,
    version: u64,
    env: &dyn Fn(&str) -> Option<String>,
    prev: Option<&Snapshot>,
) -> Result<Snapshot, ConfigError> {
    let valid = ax_protocol::validate::validate_all(spec, env).map_err(all_in_one)?;
    compile(spec, valid, version, prev)
}

/// Every problem of a configuration in one error: the first's path, and the others after its
/// message (so `ax-dataplane check`, a refused reload and a refused push name them all).
fn all_in_one(all: Vec<ConfigError>) -> ConfigError {
    let mut all = all.into_iter();
    let Some(first) = all.next() else { return ax_protocol::validate::err("", "invalid configuration") };
    let rest: Vec<String> = all.map(|e| e.to_string()).collect();
    if rest.is_empty() {
        return first;
    }
    let message = format!("{} (and {} more: {})", first.message, rest.len(), rest.join("; "));
    ConfigError { message, ..first }
}

/// Attaches live state (limiters, budgets, breakers, pools) to a validated spec. Fails only where
/// this process cannot serve what is valid (a TLS client it cannot build).
fn compile(spec: &ConfigSpec, valid: Valid, version: u64, prev: Option<&Snapshot>) -> Result<Snapshot, ConfigError> {
    let mut upstreams = Vec::with_capacity(spec.upstreams.len());
    for (i, (u, v)) in spec.upstreams.iter().zip(valid.upstreams).enumerate() {
        upstreams.push(compile_upstream(u, v, i, prev)?);
    }

    let mut routes = Map::with_capacity_and_hasher(spec.routes.len(), Default::default());
    for (r, resolved) in spec.routes.iter().zip(valid.routes) {
        let candidates = resolved
            .into_iter()
            .zip(&r.candidates)
            .map(|((upstream, model), c)| Candidate { upstream, model, weight: c.weight, priority: c.priority })
            .collect();
        let prev_limiter = prev.and_then(|p| p.routes.get(&r.alias)).map(|r| &r.limiter);
        let route = Route {
            alias: r.alias.clone(),
            strategy: r.strategy,
            candidates,
            fallbacks: r.fallbacks.clone(),
            timeouts: r.timeouts.clone(),
            failover: r.failover.clone(),
            max_prompt_tokens: r.max_prompt_tokens,
            long_context_alias: r.long_context_alias.clone(),
            limiter: limiter(&r.limits, prev_limiter),
            protocols: ax_wire::canonical::Protocols::NONE,
        };
        routes.insert(r.alias.clone(), route);
    }
    // Each alias's own protocol first, then shared with its fallbacks' (failover walks the
    // fallbacks' candidates too, one level deep).
    let own: HashMap<String, ax_wire::canonical::Protocols> = routes
        .iter()
        .map(|(alias, r)| {
            let speaks = r
                .candidates
                .iter()
                .filter(|c| c.weight > 0)
                .fold(ax_wire::canonical::Protocols::ALL, |all, c| all.and(upstreams[c.upstream].speaks));
            (alias.clone(), speaks)
        })
        .collect();
    for r in routes.values_mut() {
        let mine = own.get(&r.alias).copied().unwrap_or_default();
        r.protocols = r.fallbacks.iter().fold(mine, |all, f| all.and(own.get(f).copied().unwrap_or_default()));
    }

    // The previous snapshot's tenants and keys by id, and budgets by stem: their counters carry over.
    let prev_tenants: HashMap<&str, &Tenant> =
        prev.map(|p| p.tenants.iter().map(|t| (t.id.as_str(), t)).collect()).unwrap_or_default();
    let prev_keys: HashMap<&str, &KeyRef> =
        prev.map(|p| p.keys.values().map(|k| (k.key_id.as_str(), k)).collect()).unwrap_or_default();
    let prev_budgets: HashMap<&str, &Arc<BudgetState>> = prev
        .map(|p| {
            let tenants = p.tenants.iter().flat_map(|t| &t.budgets);
            tenants.chain(p.keys.values().flat_map(|k| &k.budgets)).map(|b| (b.stem.as_str(), &b.state)).collect()
        })
        .unwrap_or_default();
    let budgets = |list: &[ax_protocol::config::BudgetSpec], limits: Vec<u64>, scope: Scope, subject: &str| {
        list.iter()
            .zip(limits)
            .map(|(b, limit)| {
                let stem = crate::state::budget::stem(scope, subject, b.window, b.alias.as_deref());
                Budget {
                    scope,
                    subject: subject.to_owned(),
                    window: b.window,
                    limit,
                    alias: b.alias.clone(),
                    action: b.action.clone(),
                    warn_at: (limit as f64 * b.warn_at) as u64,
                    exact: b.exact,
                    fail_open: b.on_redis_down == ax_protocol::config::RedisDown::FailOpen,
                    state: prev_budgets.get(stem.as_str()).map_or_else(Default::default, |s| (*s).clone()),
                    stem,
                }
            })
            .collect::<Vec<_>>()
    };
    let groups: HashMap<&str, Vec<Budget>> = spec
        .groups
        .iter()
        .zip(valid.groups)
        .map(|(g, limits)| (g.id.as_str(), budgets(&g.budgets, limits, Scope::Group, &g.id)))
        .collect();
    let mut tenants = Vec::with_capacity(spec.tenants.len());
    let mut keys = Map::with_capacity_and_hasher(spec.tenants.len(), Default::default());
    for (i, (t, v)) in spec.tenants.iter().zip(valid.tenants).enumerate() {
        let allowed = if t.allowed_aliases.iter().any(|a| a == "*") {
            Allowed::All
        } else {
            Allowed::Some {
                names: t.allowed_aliases.iter().cloned().collect(),
                globs: ax_protocol::glob::ordered(t.allowed_aliases.iter().map(String::as_str)),
            }
        };
        for (k, vk) in t.keys.iter().zip(v.keys) {
            let prev_key = prev_keys.get(k.id.as_str());
            let alias_limits = k
                .alias_limits
                .iter()
                .map(|(alias, l)| {
                    let prev = prev_key.and_then(|pk| pk.alias_limits.get(alias)).map(|(_, l)| l);
                    (alias.clone(), (format!("{}/{alias}", k.id), limiter(l, prev)))
                })
                .collect();
            let key = KeyRef {
                tenant: i,
                key_id: k.id.clone(),
                revoked: k.status == ax_protocol::config::KeyStatus::Revoked,
                expires_at: vk.expires_at,
                limiter: limiter(&k.limits, prev_key.map(|pk| &pk.limiter)),
                alias_limits,
                budgets: budgets(&k.budgets, vk.budget_limits, Scope::Key, &k.id),
            };
            keys.insert(vk.digest, key);
        }
        let prev_tenant = prev_tenants.get(t.id.as_str()).copied();
        let mut all = budgets(&t.budgets, v.budget_limits, Scope::Tenant, &t.id);
        for g in &t.groups {
            all.extend(groups.get(g.as_str()).into_iter().flatten().cloned());
        }
        tenants.push(Tenant {
            id: t.id.clone(),
            allowed,
            limiter: limiter(&t.limits, prev_tenant.map(|pt| &pt.limiter)),
            budgets: all,
            trace_content: t.trace_content,
        });
    }

    Ok(Snapshot {
        forwarded: routes.values().fold(ax_wire::canonical::Protocols::NONE, |all, r| all.or(r.protocols)),
        redis: valid.redis_url.map(|url| RedisTarget {
            url,
            cluster: spec.server.redis_cluster,
            sentinel: spec.server.redis_sentinel.clone(),
            prefix: spec.server.redis_prefix.clone(),
            replicas: spec.server.replicas.max(1),
        }),
        response_store: spec.server.response_store,
        budget_tz: valid.budget_tz,
        admin_token: valid.admin_token,
        version,
        params: spec.server.params,
        max_body_bytes: spec.server.max_body_bytes,
        default_max_tokens: spec.server.default_max_tokens,
        upstreams,
        globs: ax_protocol::glob::ordered(routes.keys().map(String::as_str)),
        routes,
        tenants,
        keys,
    })
}

fn compile_upstream(
    u: &UpstreamSpec,
    v: ValidUpstream,
    i: usize,
    prev: Option<&Snapshot>,
) -> Result<Upstream, ConfigError> {
    let mut fp = Sha256::new();
    if let Some(base) = &v.base {
        fp.update(base.as_str().as_bytes());
    }
    fp.update(u.timeouts.connect_ms.to_le_bytes());
    for (n, value) in &v.headers {
        fp.update(n.as_str().as_bytes());
        fp.update([0]);
        fp.update(value.as_bytes());
        fp.update([0]);
    }
    let client_fingerprint: [u8; 32] = fp.finalize().into();
    let threads = crate::worker::count();
    let reused = prev.and_then(|p| {
        p.upstreams
            .iter()
            .find(|o| o.name == u.name && o.client_fingerprint == client_fingerprint)
            .filter(|o| o.client().is_some_and(|c| c.threads() == threads))
    });
    let client = match (reused, &v.base) {
        (Some(o), _) => o.client().cloned(),
        (None, None) => None,
        (None, Some(base)) => Some(Arc::new(
            crate::transport::Client::new(base, v.headers, Duration::from_millis(u.timeouts.connect_ms), threads)
                .map_err(|e| ax_protocol::validate::err(format!("upstreams[{i}].base_url"), e))?,
        )),
    };

    let prev_upstream = prev.and_then(|p| p.upstreams.iter().find(|o| o.name == u.name));
    let models = u
        .models
        .iter()
        .zip(v.models)
        .map(|(m, vm)| Model {
            count_url: match (u.provider, &vm.chat) {
                (ProviderKind::Anthropic, Some(chat)) => format!("{chat}/count_tokens").parse().ok(),
                (ProviderKind::Gemini, Some(chat)) => chat
                    .to_string()
                    .strip_suffix(":generateContent")
                    .and_then(|m| format!("{m}:countTokens").parse().ok()),
                _ => None,
            },
            responses_url: match &vm.chat {
                Some(chat) if u.offers_responses() => chat
                    .to_string()
                    .strip_suffix("/chat/completions")
                    .and_then(|base| format!("{base}/responses").parse().ok()),
                _ => None,
            },
            prices: vm.prices,
            health: prev_upstream
                .and_then(|p| p.models.iter().find(|pm| pm.name == m.name))
                .map_or_else(ModelHealth::new, |pm| pm.health.clone()),
            name: m.name.clone(),
            name_header: header_value(&m.name),
            context_window: m.context_window,
            max_output_tokens: m.max_output_tokens,
            caps: Caps::from_list(&m.capabilities),
            chat_url: vm.chat,
            stream_url: vm.stream,
            embed_url: vm.embed,
        })
        .collect();

    let backend = match (u.provider, client) {
        (ProviderKind::Mock, _) => {
            Backend::Mock(MockUpstream { spec: u.mock.clone().unwrap_or_default(), counter: AtomicU64::new(0) })
        }
        (_, Some(c)) => Backend::Http(c),
        (_, None) => {
            return Err(ax_protocol::validate::err(format!("upstreams[{i}].base_url"), "required for this provider"))
        }
    };

    Ok(Upstream {
        name: u.name.clone(),
        name_header: header_value(&u.name),
        kind: u.provider,
        backend,
        timeouts: u.timeouts.clone(),
        max_concurrency: u.max_concurrency,
        breaker: u.breaker.clone(),
        health: prev_upstream.map_or_else(UpstreamHealth::new, |p| p.health.clone()),
        limiter: limiter(&u.limits, prev_upstream.map(|p| &p.limiter)),
        models,
        max_response_bytes: v.max_response_bytes,
        max_event_bytes: v.max_event_bytes,
        passthrough: u.passthrough.clone(),
        speaks: {
            use ax_wire::canonical::{Protocol, Protocols};
            match u.provider {
                ProviderKind::Openai if u.offers_responses() => {
                    Protocols::NONE.with(Protocol::OpenAiChat).with(Protocol::OpenAiResponses)
                }
                ProviderKind::Openai | ProviderKind::AzureOpenai => Protocols::NONE.with(Protocol::OpenAiChat),
                ProviderKind::Anthropic => Protocols::NONE.with(Protocol::AnthropicMessages),
                ProviderKind::Gemini => Protocols::NONE.with(Protocol::GeminiGenerate),
                ProviderKind::Mock => Protocols::NONE,
            }
        },
        client_fingerprint,
    })
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
    fn every_problem_is_named_at_once() {
        let bad = BASE.replace("context_window: 1000", "context_window: 0").replace("upstream: m,", "upstream: nope,");
        let e = build(&spec(&bad), 1, &|_| None, None).unwrap_err();
        assert_eq!(e.path, "upstreams[0].models[0].context_window", "{e}");
        assert!(e.message.contains("(and 1 more: routes[0].candidates[0].upstream: unknown upstream 'nope')"), "{e}");
    }

    #[test]
    fn env_keys_hash() {
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
    fn clients_and_health_survive_reloads() {
        let s = spec(BASE);
        let a = build(&s, 1, &|_| None, None).unwrap();
        let b = build(&s, 2, &|_| None, Some(&a)).unwrap();
        assert_eq!(a.upstreams[0].client_fingerprint, b.upstreams[0].client_fingerprint);
        assert!(Arc::ptr_eq(&a.upstreams[0].health, &b.upstreams[0].health));
        assert!(Arc::ptr_eq(&a.upstreams[0].models[0].health, &b.upstreams[0].models[0].health));
    }
}
