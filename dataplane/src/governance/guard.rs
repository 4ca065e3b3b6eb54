//! The guard stage: budgets and rate limits, checked after every other reason to refuse a
//! request and before it is routed, so a refused request uses no one's quota.
//!
//! Budgets come first (they may downgrade the request to a cheaper alias), then the rate limits
//! of the key, the tenant and the requested alias. Both reserve worst cases (maximum cost,
//! prompt estimate + output cap), held in `Reservations` and settled to the actual usage when the
//! request's record is written (or given back at once when a later limit refuses).

use ax_protocol::config::BudgetAction;
use ax_protocol::usage::UsageRecord;

use std::sync::Arc;

use crate::config::snapshot::{KeyRef, Route, Snapshot, Tenant};
use crate::error::AxError;
use crate::error::LimitKind as Kind;
use crate::governance::fleet::{self, Fleet};
use crate::state::budget::{Budget, Reserved, Verdict};
use crate::state::lease::{signed, Lease, Shape, Took};
use crate::state::limits::Held;

/// What a request may use, reserved before it is routed: its prompt estimate and the tokens
/// reserved against per-minute token limits (the estimate plus the output cap).
#[derive(Debug, Clone, Copy)]
pub struct Demand {
    pub prompt_tokens: u64,
    pub reserve_tokens: u64,
}

/// One budget reservation: on this process's spend, or on the fleet-wide spend in Redis (exact,
/// or taken from this process's lease on it).
enum BudgetHold {
    Local(Reserved),
    Fleet { fleet: Arc<Fleet>, key: String, amount: u64 },
    Lease { fleet: Arc<Fleet>, lease: Arc<Lease>, period: u64, amount: u64 },
}

impl BudgetHold {
    fn settle(&mut self, actual: u64) {
        match self {
            Self::Local(r) => r.settle(actual),
            Self::Fleet { fleet, key, amount } => {
                if actual != *amount {
                    let delta = signed(actual) - signed(*amount);
                    fleet.adjust(key.clone(), delta);
                    *amount = actual;
                }
            }
            Self::Lease { fleet, lease, period, amount } => {
                if lease.mark() == signed(*period) {
                    lease.give_back(fleet, signed(*amount) - signed(actual));
                }
                *amount = actual;
            }
        }
    }
}

/// What one request (or one upstream attempt) holds against rate limits: local holds
/// (concurrency, and the per-minute limits when they are local) and, with Redis, its fleet-wide
/// reservations.
#[derive(Default)]
pub struct Holds {
    local: Vec<Held>,
    shared: Option<fleet::FleetHeld>,
}

impl Holds {
    /// Replaces every token reservation by `tokens`, the actual usage (0: none was used).
    pub fn settle(&mut self, tokens: u64) {
        for h in &mut self.local {
            h.settle(tokens);
        }
        if let Some(h) = &mut self.shared {
            h.settle(tokens);
        }
    }
}

/// One rate-limited layer: (the layer as the caller reads it, its tag in Redis, the subject,
/// its limiter).
type Layer<'a> = (&'static str, &'static str, &'a str, &'a crate::state::limits::Limiter);

/// The caller-side rate limits, in order: key, the key's for the alias, tenant, alias. All or nothing: a refusal gives
/// back what the earlier layers reserved. With Redis, the per-minute limits are fleet-wide (one
/// round trip) and concurrency is local; without a reachable Redis, every limit is local, divided
/// by `Fleet::replicas` when Redis is configured. The holds settle to the actual usage when the
/// request's record is emitted and free their concurrency slots when the request ends.
async fn check_limits(
    fleet: Option<&Arc<Fleet>>,
    tenant: &Tenant,
    key: &KeyRef,
    route: &Route,
    tokens: u64,
) -> Result<Holds, AxError> {
    let per_alias = key.alias_limits.get(&route.alias);
    let all = [
        Some(("key", "key", key.key_id.as_str(), &key.limiter)),
        per_alias.map(|(subject, l)| ("key's alias", "key_alias", subject.as_str(), l)),
        Some(("tenant", "tenant", tenant.id.as_str(), &tenant.limiter)),
        Some(("alias", "alias", route.alias.as_str(), &route.limiter)),
    ];
    admit_layers(fleet, all.iter().flatten(), tokens).await
}

/// `layers` all or nothing: fleet-wide per-minute limits with a reachable Redis, then each
/// layer's local part (concurrency; every limit, at `limit ÷ replicas`, without Redis).
async fn admit_layers<'a, I>(fleet: Option<&Arc<Fleet>>, layers: I, tokens: u64) -> Result<Holds, AxError>
where
    I: Iterator<Item = &'a Layer<'a>> + Clone,
{
    let mut shared = None;
    let mut divisor = 1;
    if let Some(s) = fleet {
        divisor = s.replicas();
        if !s.is_down() {
            shared = fleet_limits(s, layers.clone(), tokens).await?;
        }
    }
    let rates_local = shared.is_none();
    let mut local = Vec::new();
    for &(layer, _, _, limiter) in layers {
        if limiter.is_unlimited() {
            continue;
        }
        match limiter.admit_scaled(tokens, divisor, rates_local) {
            Ok(h) => local.push(h),
            Err(r) => {
                for h in &mut local {
                    h.cancel();
                }
                if let Some(sh) = &mut shared {
                    sh.cancel();
                }
                let remaining = match r.kind {
                    Kind::Requests => limiter.state.requests.remaining(r.limit),
                    Kind::Tokens => limiter.state.tokens.remaining(r.limit),
                    Kind::Concurrency => 0,
                };
                return Err(AxError::RateLimitExceeded {
                    layer,
                    kind: r.kind,
                    limit: r.limit,
                    remaining,
                    retry_after: r.retry_after,
                });
            }
        }
    }
    Ok(Holds { local, shared })
}

/// An upstream's rate limits for one attempt of `tokens` (the provider's quota it protects), as
/// the caller's layers are held: fleet-wide with Redis, else local. `Err(retry_after)` when the
/// upstream is full (the attempt skips it: a full upstream is not a refusal).
pub async fn upstream_limits(
    fleet: Option<&Arc<Fleet>>,
    name: &str,
    limiter: &crate::state::limits::Limiter,
    tokens: u64,
) -> Result<Holds, std::time::Duration> {
    if limiter.is_unlimited() {
        return Ok(Holds::default());
    }
    let layer = [("upstream", "upstream", name, limiter)];
    admit_layers(fleet, layer.iter(), tokens)
        .await
        .map_err(|e| e.retry_after().unwrap_or(std::time::Duration::from_secs(1)))
}

/// The per-minute limits of `layers` fleet-wide: from each subject's lease, or (`exact`) all
/// in one script call. None when Redis cannot be used now (every limit is then local).
async fn fleet_limits<'a>(
    s: &Arc<Fleet>,
    layers: impl Iterator<Item = &'a Layer<'a>>,
    tokens: u64,
) -> Result<Option<fleet::FleetHeld>, AxError> {
    let mut held = fleet::FleetHeld::empty(s);
    let mut items = Vec::new();
    let mut which = Vec::new();
    for &(layer, tag, subject, l) in layers {
        let kinds = [(Kind::Requests, l.rpm, 1, "rpm"), (Kind::Tokens, l.tpm, tokens, "tpm")];
        for (i, (kind, limit, amount, name)) in kinds.into_iter().enumerate() {
            let Some(limit) = limit.map(u64::from) else { continue };
            if l.exact {
                let stem = format!("rl:{tag}:{subject}:{name}");
                items.push(fleet::Item { stem, limit, amount, tokens: kind == Kind::Tokens });
                which.push((layer, kind, limit));
                continue;
            }
            let lease = s.lease_of(&l.state.leases[i], || format!("rl:{tag}:{subject}:{name}"), Shape::Window);
            match lease.take(s, amount, limit).await {
                Took::Taken => held.leased.push((lease, amount, kind == Kind::Tokens)),
                Took::Refused(retry_after) => {
                    held.cancel();
                    return Err(AxError::RateLimitExceeded { layer, kind, limit, remaining: 0, retry_after });
                }
                Took::Unavailable => {
                    held.cancel();
                    return Ok(None);
                }
            }
        }
    }
    if items.is_empty() {
        return Ok(Some(held));
    }
    match s.admit(&items).await {
        fleet::Decision::Admitted(h) => {
            held.absorb(h);
            Ok(Some(held))
        }
        fleet::Decision::Refused { index, retry_after } => {
            held.cancel();
            let (layer, kind, limit) = which.get(index).copied().unwrap_or(("tenant", Kind::Requests, 0));
            Err(AxError::RateLimitExceeded { layer, kind, limit, remaining: 0, retry_after })
        }
        fleet::Decision::Unavailable => {
            held.cancel();
            Ok(None)
        }
    }
}

/// The request's maximum possible cost on `route`: its most expensive candidate at the prompt
/// estimate plus the output reservation, in micro-USD (rounded up).
fn max_cost(snap: &Snapshot, route: &Route, demand: Demand) -> u64 {
    let output = demand.reserve_tokens.saturating_sub(demand.prompt_tokens);
    let worst = route
        .candidates
        .iter()
        .filter_map(|c| snap.upstream_model(c).1.prices.map(|p| p.estimate(demand.prompt_tokens, output)))
        .max()
        .unwrap_or(0);
    u64::try_from(worst.div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// The route to serve, the budget reservations, `x-ax-degraded` and `x-ax-budget-warning`.
type BudgetOutcome<'s> = (&'s Route, Vec<BudgetHold>, Option<String>, Option<String>);

/// What one budget said of a request's cost.
enum Said {
    Held(BudgetHold, Option<String>),
    /// Past the cap of a `warn` budget: served, with this warning.
    Warned(String),
    Exhausted,
}

/// The budgets that apply to the alias (the tenant's, its groups', the key's): reserve the
/// request's maximum possible cost on each. An exhausted budget rejects (429 `budget_exceeded`)
/// or downgrades once to its cheaper alias, whose own cost is then reserved. Returns the route to
/// serve, the reservations, the `x-ax-degraded` value and the `x-ax-budget-warning` value.
async fn check_budgets<'s>(
    fleet: Option<&Arc<Fleet>>,
    snap: &'s Snapshot,
    tenant: &Tenant,
    key: &KeyRef,
    mut route: &'s Route,
    demand: Demand,
) -> Result<BudgetOutcome<'s>, AxError> {
    let mut degraded = None;
    loop {
        let cost = max_cost(snap, route, demand);
        let mut reserved = Vec::new();
        let mut warning = None;
        let mut refused = None;
        for b in tenant.budgets.iter().chain(&key.budgets).filter(|b| b.applies_to(&route.alias)) {
            match reserve(fleet, snap, b, cost).await {
                Ok(Said::Held(hold, w)) => {
                    reserved.push(hold);
                    warning = warning.or(w);
                }
                Ok(Said::Warned(w)) => warning = warning.or(Some(w)),
                Ok(Said::Exhausted) => {
                    refused = Some(Ok(b));
                    break;
                }
                Err(e) => {
                    refused = Some(Err(e));
                    break;
                }
            }
        }
        let Some(refused) = refused else { return Ok((route, reserved, degraded, warning)) };
        for r in &mut reserved {
            r.settle(0);
        }
        let b = refused?;
        match &b.action {
            BudgetAction::DowngradeTo { downgrade_to: to } if degraded.is_none() => {
                degraded = Some(format!("budget; from={}; to={to}", route.alias));
                route = snap.routes.get(to).ok_or(AxError::Internal)?;
            }
            _ => {
                return Err(AxError::BudgetExceeded { scope: b.scope.name(), window: b.window_name(), limit: b.limit });
            }
        }
    }
}

/// Reserves `cost` on one budget: fleet-wide through Redis when configured and reachable (from
/// this replica's lease, or `exact`: one script call); else, while Redis cannot be used,
/// `fail_open` spends against this replica's share of the budget and `fail_closed` only what
/// its lease already holds (503 `budget_unavailable` past that). Without Redis, the local spend.
async fn reserve(fleet: Option<&Arc<Fleet>>, snap: &Snapshot, b: &Budget, cost: u64) -> Result<Said, AxError> {
    let exhausted = || if b.warns_only() { Said::Warned(b.exceeded()) } else { Said::Exhausted };
    if let Some(shared) = fleet {
        let period = crate::state::budget::period(b.window, &snap.budget_tz);
        if b.exact && !shared.is_down() {
            match shared.spend(&b.stem, period, cost, b.limit, b.ttl()).await {
                fleet::Spend::Reserved { key, spent } => {
                    return Ok(Said::Held(
                        BudgetHold::Fleet { fleet: shared.clone(), key, amount: cost },
                        b.warning(spent),
                    ))
                }
                fleet::Spend::Exhausted => return Ok(exhausted()),
                fleet::Spend::Unavailable => {}
            }
        }
        if !b.exact {
            let ttl_ms = u64::try_from(b.ttl().as_millis()).unwrap_or(u64::MAX);
            let lease = shared.lease_of(&b.state.lease, || b.stem.clone(), Shape::Period { ttl_ms });
            lease.enter_period(period);
            let took = if shared.is_down() { Took::Unavailable } else { lease.take(shared, cost, b.limit).await };
            let hold = |lease| BudgetHold::Lease { fleet: shared.clone(), lease, period, amount: cost };
            match took {
                Took::Taken => return Ok(Said::Held(hold(lease.clone()), b.warning(lease.fleet_total()))),
                Took::Refused(_) => return Ok(exhausted()),
                // Quota this replica holds is counted in Redis already: spending it is safe.
                Took::Unavailable if !b.fail_open && lease.take_held(cost) => return Ok(Said::Held(hold(lease), None)),
                Took::Unavailable => {}
            }
        }
        if !b.fail_open && !b.warns_only() {
            return Err(AxError::BudgetUnavailable { scope: b.scope.name(), window: b.window_name() });
        }
    }
    let divisor = fleet.map_or(1, |s| s.replicas());
    Ok(match b.reserve_share(cost, &snap.budget_tz, divisor) {
        Verdict::Reserved(r, w) => Said::Held(BudgetHold::Local(r), w),
        Verdict::Exhausted => exhausted(),
    })
}

/// What one request holds against budgets and rate limits, from the guard to its end, where it is
/// settled to what the request's record says it used.
pub struct Reservations {
    holds: Holds,
    budgets: Vec<BudgetHold>,
    settled: bool,
}

impl Reservations {
    /// Settles every reservation to the request's record: its cost when it was served or its
    /// tokens are known; its tokens when known, none when it failed before any answer (a stream
    /// cut off with nothing known keeps its worst case). Once; later calls do nothing.
    pub fn settle(&mut self, r: &UsageRecord, tokens_known: bool) {
        if std::mem::replace(&mut self.settled, true) {
            return;
        }
        let cost = r.cost_micro_usd.unwrap_or(0);
        for b in &mut self.budgets {
            b.settle(if r.status == 200 || tokens_known { cost } else { 0 });
        }
        let settle_to = if tokens_known {
            Some(r.prompt_tokens + r.completion_tokens)
        } else if r.status != 200 {
            // Failed or refused before any answer: no tokens were used.
            Some(0)
        } else {
            None
        };
        if let Some(n) = settle_to {
            self.holds.settle(n);
        }
    }
}

/// What a request that passed the guard holds, and where it goes.
pub struct Passed<'s> {
    /// The route to serve (the budget's downgrade alias, if it applied).
    pub route: &'s Route,
    pub reservations: Reservations,
    /// `x-ax-degraded`, when a budget downgraded the request.
    pub degraded: Option<String>,
    /// `x-ax-budget-warning`, past a budget's threshold.
    pub warning: Option<String>,
}

/// The whole stage: budgets on `route` (which may downgrade it), then the rate limits of the key,
/// the tenant and the alias the caller asked for (`requested`).
pub async fn run<'s>(
    fleet: Option<&Arc<Fleet>>,
    snap: &'s Snapshot,
    tenant: &Tenant,
    key: &KeyRef,
    requested: &Route,
    route: &'s Route,
    demand: Demand,
) -> Result<Passed<'s>, AxError> {
    let (route, mut budgets, degraded, warning) = check_budgets(fleet, snap, tenant, key, route, demand).await?;
    let holds = match check_limits(fleet, tenant, key, requested, demand.reserve_tokens).await {
        Ok(h) => h,
        Err(e) => {
            // Refused by a rate limit: the request is not made, so it costs nothing; the budget
            // reservations taken above are given back.
            for b in &mut budgets {
                b.settle(0);
            }
            return Err(e);
        }
    };
    Ok(Passed { route, reservations: Reservations { holds, budgets, settled: false }, degraded, warning })
}
