//! Budgets: spending caps per tenant, key or group of tenants (each optionally for one alias) per
//! day, week or month, in integer micro-USD, and their live spend.
//!
//! A request reserves its maximum possible cost (the most expensive candidate of its route at the
//! prompt estimate plus its output cap) before it is routed, so concurrent requests cannot
//! overspend; the reservation is settled to the actual cost when its usage record is written.
//! Days and months begin in `server.budget_timezone`. The spend here is this process's (atomics,
//! carried across reloads); the fleet-wide spend in Redis is `governance::fleet`'s.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ax_protocol::config::{BudgetAction, BudgetWindow};

/// The live spend of one budget in its current period.
#[derive(Debug, Default)]
pub struct BudgetState {
    /// The period the spend belongs to (days or months since the epoch, in the budget's zone), +1.
    period: AtomicU64,
    /// Micro-USD spent and reserved in that period.
    spent: AtomicU64,
    /// The fleet-wide lease, made on first use with Redis.
    pub lease: std::sync::OnceLock<Arc<super::lease::Lease>>,
}

/// Whose spend a budget caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Tenant,
    Key,
    /// A group of tenants, pooled.
    Group,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Self::Tenant => "tenant",
            Self::Key => "key",
            Self::Group => "group",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Budget {
    pub scope: Scope,
    /// The tenant's, key's or group's id.
    pub subject: String,
    pub window: BudgetWindow,
    pub limit: u64,
    pub alias: Option<String>,
    pub action: BudgetAction,
    pub warn_at: u64,
    /// Fleet-wide: one Redis round trip per request instead of a lease.
    pub exact: bool,
    /// Fleet-wide while Redis is unreachable: spend a local share instead of only what is held.
    pub fail_open: bool,
    /// Its fleet-wide key without the prefix and the period (`budget:acme:day:*`), and the
    /// identity its live spend is carried across reloads by.
    pub stem: String,
    /// Shared by every tenant of a group.
    pub state: Arc<BudgetState>,
}

/// The period number of `now` for a window in a time zone.
pub fn period(window: BudgetWindow, tz: &jiff::tz::TimeZone) -> u64 {
    period_at(window, tz.to_datetime(jiff::Timestamp::now()).date())
}

/// The period number of a civil date (+1, so that 0 means none yet).
pub fn period_at(window: BudgetWindow, date: jiff::civil::Date) -> u64 {
    let days = date.since(jiff::civil::date(1970, 1, 1)).map_or(0, |s| s.get_days().max(0) as u64);
    match window {
        BudgetWindow::Day => days + 1,
        // 1970-01-01 was a Thursday: weeks begin on the Monday three days before.
        BudgetWindow::Week => (days + 3) / 7 + 1,
        BudgetWindow::Month => (date.year().max(1970) as u64 - 1970) * 12 + date.month() as u64 + 1,
    }
}

/// A reservation on one budget's local spend, settled to the actual cost by `settle`; if never
/// settled, the reservation stays counted (the conservative choice when the cost is unknown).
pub struct Reserved {
    state: Arc<BudgetState>,
    period: u64,
    amount: u64,
}

impl Reserved {
    pub fn settle(&mut self, actual: u64) {
        if actual == self.amount {
            return;
        }
        let (amount, period) = (self.amount, self.period);
        let _ = self.state.spent.fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
            // A period that rolled over since the reservation has been reset: leave it.
            (self.state.period.load(Ordering::Acquire) == period).then(|| (s + actual).saturating_sub(amount))
        });
        self.amount = actual;
    }
}

pub enum Verdict {
    /// Reserved; `warn` when the spend is past the budget's threshold.
    Reserved(Reserved, Option<String>),
    Exhausted,
}

/// The fleet-wide key stem of a budget: tenants' as they always were, keys' and groups' apart.
pub fn stem(scope: Scope, subject: &str, window: BudgetWindow, alias: Option<&str>) -> String {
    let kind = match scope {
        Scope::Tenant => "budget",
        Scope::Key => "kbudget",
        Scope::Group => "gbudget",
    };
    format!("{kind}:{subject}:{}:{}", window.name(), alias.unwrap_or("*"))
}

impl Budget {
    /// Reserves `cost` if it fits in the current period.
    pub fn reserve(&self, cost: u64, tz: &jiff::tz::TimeZone) -> Verdict {
        self.reserve_share(cost, tz, 1)
    }

    /// `reserve` against `limit ÷ divisor` (this replica's share while Redis is unreachable).
    pub fn reserve_share(&self, cost: u64, tz: &jiff::tz::TimeZone, divisor: u32) -> Verdict {
        let limit = self.limit / u64::from(divisor.max(1));
        let p = period(self.window, tz);
        let s = &self.state;
        let seen = s.period.load(Ordering::Acquire);
        if seen != p && s.period.compare_exchange(seen, p, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            s.spent.store(0, Ordering::Release);
        }
        let got = s.spent.fetch_update(Ordering::AcqRel, Ordering::Acquire, |spent| {
            (spent.saturating_add(cost) <= limit).then_some(spent + cost)
        });
        match got {
            Ok(before) => {
                let after = before + cost;
                let warn = self.warning(after);
                Verdict::Reserved(Reserved { state: s.clone(), period: p, amount: cost }, warn)
            }
            Err(_) => Verdict::Exhausted,
        }
    }

    /// The `x-ax-budget-warning` value once the spend passes the threshold.
    pub fn warning(&self, spent: u64) -> Option<String> {
        (spent >= self.warn_at).then(|| {
            format!(
                "{}; spent={}; limit={}{}",
                self.window_name(),
                ax_protocol::price::format_usd(spent),
                ax_protocol::price::format_usd(self.limit),
                self.whose()
            )
        })
    }

    /// The `x-ax-budget-warning` value of a `warn` budget past its cap (the request is served).
    pub fn exceeded(&self) -> String {
        format!(
            "{}; exceeded; limit={}{}",
            self.window_name(),
            ax_protocol::price::format_usd(self.limit),
            self.whose()
        )
    }

    /// A key's or group's warning names it (a tenant's is the tenant's own, as before).
    fn whose(&self) -> String {
        match self.scope {
            Scope::Tenant => String::new(),
            scope => format!("; scope={}:{}", scope.name(), self.subject),
        }
    }

    /// `action: warn`: past the cap, requests are served with a warning instead of refused.
    pub fn warns_only(&self) -> bool {
        self.action == BudgetAction::Plain(ax_protocol::config::PlainBudgetAction::Warn)
    }

    pub fn window_name(&self) -> &'static str {
        self.window.name()
    }

    /// How long a fleet-wide spend key must live: its period and a margin.
    pub fn ttl(&self) -> std::time::Duration {
        std::time::Duration::from_secs(match self.window {
            BudgetWindow::Day => 3 * 86_400,
            BudgetWindow::Week => 10 * 86_400,
            BudgetWindow::Month => 40 * 86_400,
        })
    }

    pub fn applies_to(&self, alias: &str) -> bool {
        self.alias.as_deref().is_none_or(|a| a == alias)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(limit: u64) -> Budget {
        Budget {
            scope: Scope::Tenant,
            subject: "acme".to_owned(),
            window: BudgetWindow::Day,
            limit,
            alias: None,
            action: BudgetAction::default(),
            warn_at: limit * 8 / 10,
            exact: false,
            fail_open: false,
            stem: stem(Scope::Tenant, "acme", BudgetWindow::Day, None),
            state: Arc::default(),
        }
    }

    #[test]
    fn reservations_cannot_overspend_and_settle_to_actual() {
        let tz = jiff::tz::TimeZone::UTC;
        let b = budget(1_000);
        let Verdict::Reserved(mut a, warn) = b.reserve(600, &tz) else { panic!("fits") };
        assert!(warn.is_none());
        assert!(matches!(b.reserve(600, &tz), Verdict::Exhausted), "two max costs cannot both fit");
        a.settle(100);
        let Verdict::Reserved(_, warn) = b.reserve(750, &tz) else { panic!("fits after settling") };
        assert_eq!(warn.as_deref(), Some("day; spent=0.000850; limit=0.001000"));
    }

    #[test]
    fn periods_follow_the_time_zone() {
        let day_utc = period(BudgetWindow::Day, &jiff::tz::TimeZone::UTC);
        let tokyo = jiff::tz::TimeZone::get("Asia/Tokyo").unwrap();
        let day_tokyo = period(BudgetWindow::Day, &tokyo);
        assert!(day_tokyo == day_utc || day_tokyo == day_utc + 1);
        assert!(period(BudgetWindow::Month, &tokyo) > 12 * 56);
    }

    #[test]
    fn weeks_begin_on_monday() {
        let week = |y, m, d| period_at(BudgetWindow::Week, jiff::civil::date(y, m, d));
        assert_eq!(week(2026, 11, 30), week(2026, 12, 6), "Monday to Sunday is one week");
        assert_eq!(week(2026, 12, 7), week(2026, 12, 6) + 1, "a Monday begins the next");
        assert_eq!(week(1970, 1, 5), 2, "the epoch's week began on the Monday before it");
        assert_eq!(week(1970, 1, 4), 1);
    }
}
