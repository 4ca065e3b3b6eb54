//! Leases: fleet-wide quota drawn from Redis in blocks and spent locally, so a governed request
//! makes no Redis round trip at steady state.
//!
//! A lease belongs to one subject and kind (a key's requests per minute, a tenant's tokens per
//! minute, a budget's micro-USD in its period). Redis counts what every replica has drawn: a
//! draw adds the block to the subject's count exactly as admitting that many requests would (the
//! same one-second buckets as `fleet`'s exact path, or the period's counter for a budget), and is
//! refused past the limit. The replica then spends the block with one atomic per request, and
//! settles reservations (tokens, cost) back into it.
//!
//! - **Blocks** start small (8 requests' worth), double while draws come less than 125 ms
//!   apart, and follow this replica's traffic: about 125 ms of what it spent in the last second,
//!   at most 1 % of the limit (and at least 1).
//!   The next block is drawn in the background once the lease falls below half a block, so a
//!   request finds quota waiting; a request that finds none waits for one draw (single-flight:
//!   the others wait on the same one), at most `Draw::TIMEOUT`.
//! - **Returns**: a lease that spent nothing for a second gives its quota back (subtracted from
//!   the bucket it was counted in, or from the period's counter), and a lease holding more than
//!   two blocks (reservations settled back) gives the excess back: one call per second at most.
//!   At shutdown (after the requests in flight) every lease gives back what it holds; a replica
//!   killed outright loses what it held (never more than two blocks per subject) for the window
//!   or period: under-admission, never overspend.
//! - **Bound**: Redis never counts less than was spent, so a window or period overshoots its
//!   limit only by quota counted earlier than it was spent: at most one block per replica for a
//!   per-minute limit (a block is counted in the second it was drawn, and spent within about a
//!   second), and nothing for a budget (its period's counter holds every draw). Subjects that
//!   want no slack at all set `exact: true` and pay one round trip per request (`fleet::admit`).
//! - **Small limits are exact anyway**: when a block would not cover the request (a budget of a
//!   few requests' cost, an rpm under 100), the request draws exactly what it lacks and nothing
//!   is drawn ahead.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;

/// Where leases draw from: Redis, through `governance::fleet`.
pub trait Draw: Send + Sync + 'static {
    /// The longest a request waits for another request's draw.
    const TIMEOUT: Duration;

    /// Gives `back` to the lease's subject (negative: counts it, whatever the limit), then draws up to `want` (at least `least`) under
    /// `limit`. None when the store cannot be used.
    fn draw(
        &self,
        lease: &Lease,
        want: u64,
        least: u64,
        limit: u64,
        back: i64,
    ) -> impl std::future::Future<Output = Option<Drawn>> + Send;
}

/// What a lease counts in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A per-minute limit: one-second buckets in a hash, as `fleet`'s exact path.
    Window,
    /// A budget: one counter per period (the key ends in the period), which Redis drops this many
    /// milliseconds after its last draw (the period and a margin: `Budget::ttl`).
    Period { ttl_ms: u64 },
}

/// The outcome of taking quota from a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Took {
    Taken,
    /// The fleet's count leaves no room; come back after this long.
    Refused(Duration),
    /// Redis cannot be used now.
    Unavailable,
}

/// One subject's quota on this replica.
pub struct Lease {
    /// The Redis key (for `Period`, the stem: the period is appended).
    key: String,
    shape: Shape,
    /// Quota drawn and not yet spent (negative after a settle past a reservation).
    avail: AtomicI64,
    /// The size of the next draw; 0 until the first request sets it.
    block: AtomicU64,
    /// The limit the last request saw (config reloads change it).
    limit: AtomicU64,
    /// Spent since the last sweep: the traffic the block follows.
    spent: AtomicU64,
    /// `Window`: Redis's second of the latest draw (returns are subtracted from it).
    /// `Period`: the period the quota belongs to.
    mark: AtomicI64,
    /// The fleet's count after the latest draw (budget warnings read it).
    total: AtomicU64,
    /// Refused by Redis: no draw until this instant (ms since `origin`), unless quota is settled back.
    refused_until: AtomicU64,
    retry_ms: AtomicU64,
    drawing: AtomicBool,
    drawn: Notify,
    /// When the last background draw started (ms since `origin`).
    last_draw: AtomicU64,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("key", &self.key).field("avail", &self.avail.load(Ordering::Relaxed)).finish()
    }
}

/// A count as a signed amount (saturating), for differences and give-backs.
pub fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Milliseconds on a process-wide monotonic clock.
fn now_ms() -> u64 {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let origin = *ORIGIN.get_or_init(std::time::Instant::now);
    u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// A refused subject is asked again after at most this long (others may have given quota back).
const REFUSAL_MEMO: Duration = Duration::from_secs(1);

impl Lease {
    pub fn new(key: String, shape: Shape) -> Self {
        Self {
            key,
            shape,
            avail: AtomicI64::new(0),
            block: AtomicU64::new(0),
            limit: AtomicU64::new(0),
            spent: AtomicU64::new(0),
            mark: AtomicI64::new(-1),
            total: AtomicU64::new(0),
            refused_until: AtomicU64::new(0),
            retry_ms: AtomicU64::new(0),
            drawing: AtomicBool::new(false),
            drawn: Notify::new(),
            last_draw: AtomicU64::new(0),
        }
    }

    /// The fleet's count after this replica's latest draw.
    pub fn fleet_total(&self) -> u64 {
        self.total.load(Ordering::Acquire)
    }

    /// The most a block may be: 1 % of the limit, at least 1.
    fn cap(limit: u64) -> u64 {
        (limit / 100).max(1)
    }

    /// Takes `amount` only from what the lease holds (counted in Redis already), never drawing:
    /// how a `fail_closed` budget spends while Redis is down.
    pub fn take_held(&self, amount: u64) -> bool {
        let ok = self.try_take(amount);
        if ok {
            self.spent.fetch_add(amount, Ordering::Relaxed);
        }
        ok
    }

    fn try_take(&self, amount: u64) -> bool {
        let amount = signed(amount);
        self.avail.fetch_update(Ordering::AcqRel, Ordering::Acquire, |a| (a >= amount).then(|| a - amount)).is_ok()
    }

    /// Gives quota back to this lease (a settled reservation, or a take undone); negative takes
    /// more (a settle past its reservation). What the lease cannot cover is spent already: the
    /// next draw counts it in Redis (a draw adds to what the lease holds), or the sweep does; a
    /// debt larger than a block is counted at once, in the background, whatever the limit.
    pub fn give_back<D: Draw>(self: &Arc<Self>, fleet: &Arc<D>, amount: i64) {
        if amount == 0 {
            return;
        }
        let after = self.avail.fetch_add(amount, Ordering::AcqRel) + amount;
        if amount > 0 {
            self.refused_until.store(0, Ordering::Release);
            return;
        }
        if after >= -signed(self.block.load(Ordering::Acquire)) {
            return;
        }
        let Ok(debt) = self.avail.fetch_update(Ordering::AcqRel, Ordering::Acquire, |a| (a < 0).then_some(0)) else {
            return;
        };
        let (me, fleet) = (self.clone(), fleet.clone());
        tokio::spawn(async move {
            let limit = me.limit.load(Ordering::Acquire);
            if let Some(d) = fleet.draw(&me, 0, 0, limit, debt).await {
                me.total.store(d.total, Ordering::Release);
            }
        });
    }

    /// A budget's lease moves to period `p`: what it held belongs to the old period's counter.
    pub fn enter_period(&self, p: u64) {
        let p = signed(p);
        if self.mark.load(Ordering::Acquire) != p {
            self.avail.store(0, Ordering::Release);
            self.mark.store(p, Ordering::Release);
            self.refused_until.store(0, Ordering::Release);
        }
    }

    /// Takes `amount` under the fleet-wide `limit`: from the lease when it holds enough, else
    /// after one draw from Redis (shared with the other requests that found it short).
    pub async fn take<D: Draw>(self: &Arc<Self>, fleet: &Arc<D>, amount: u64, limit: u64) -> Took {
        if amount == 0 {
            return Took::Taken;
        }
        self.limit.store(limit, Ordering::Release);
        if self.block.load(Ordering::Acquire) == 0 {
            let _ =
                self.block.compare_exchange(0, (amount * 8).min(Self::cap(limit)), Ordering::AcqRel, Ordering::Acquire);
        }
        // Usually one draw; more only when other requests took what a draw brought. Past the
        // deadline the request is decided locally (`Unavailable`), never refused for it.
        let deadline = tokio::time::Instant::now() + D::TIMEOUT;
        loop {
            if self.try_take(amount) {
                self.spent.fetch_add(amount, Ordering::Relaxed);
                self.ahead(fleet, amount);
                return Took::Taken;
            }
            if self.refused_until.load(Ordering::Acquire) > now_ms() {
                return Took::Refused(Duration::from_millis(self.retry_ms.load(Ordering::Acquire).max(1)));
            }
            if tokio::time::Instant::now() >= deadline {
                return Took::Unavailable;
            }
            if self.drawing.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                let lacking = amount.saturating_sub(u64::try_from(self.avail.load(Ordering::Acquire)).unwrap_or(0));
                if lacking == 0 {
                    // Quota came back (a settle) since the take failed: take again, draw nothing.
                    self.drawing.store(false, Ordering::Release);
                    self.drawn.notify_waiters();
                    continue;
                }
                // A block, and at least 8 requests of this size, when 1 % of the limit allows;
                // otherwise only what this request lacks (small limits stay exact).
                let cap = Self::cap(limit);
                let want = if cap >= amount {
                    self.block.load(Ordering::Acquire).max(amount.saturating_mul(8).min(cap)).max(lacking)
                } else {
                    lacking
                };
                let ok = self.draw(fleet.as_ref(), want, lacking).await;
                self.drawing.store(false, Ordering::Release);
                self.drawn.notify_waiters();
                if !ok {
                    return Took::Unavailable;
                }
            } else {
                let wait = self.drawn.notified();
                tokio::pin!(wait);
                wait.as_mut().enable();
                if self.drawing.load(Ordering::Acquire) && tokio::time::timeout_at(deadline, wait).await.is_err() {
                    return Took::Unavailable;
                }
            }
        }
    }

    /// Draws the next block in the background once the lease falls below half a block, when
    /// blocks cover several requests.
    fn ahead<D: Draw>(self: &Arc<Self>, fleet: &Arc<D>, amount: u64) {
        let block = self.block.load(Ordering::Acquire);
        if block < amount.saturating_mul(2) || self.avail.load(Ordering::Acquire) >= signed(block / 2) {
            return;
        }
        if self.refused_until.load(Ordering::Acquire) > now_ms() {
            return;
        }
        if self.drawing.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return;
        }
        // Draws closer than an eighth of a second apart: the block is too small for the traffic.
        let now = now_ms();
        let block = if now.saturating_sub(self.last_draw.swap(now, Ordering::AcqRel)) < 125 {
            let grown = (block * 2).min(Self::cap(self.limit.load(Ordering::Acquire))).max(block);
            self.block.store(grown, Ordering::Release);
            grown
        } else {
            block
        };
        let (me, fleet) = (self.clone(), fleet.clone());
        tokio::spawn(async move {
            me.draw(fleet.as_ref(), block, 1).await;
            me.drawing.store(false, Ordering::Release);
            me.drawn.notify_waiters();
        });
    }

    /// One draw of `want` (granted in part, down to `least`), with nothing given back. False when
    /// Redis could not be used.
    async fn draw<D: Draw>(&self, fleet: &D, want: u64, least: u64) -> bool {
        let limit = self.limit.load(Ordering::Acquire);
        let Some(d) = fleet.draw(self, want, least, limit, 0).await else { return false };
        self.drew(d, least);
        true
    }

    /// A draw's answer: quota added, or (asked for at least `least`) Redis's refusal remembered.
    fn drew(&self, d: Drawn, least: u64) {
        self.total.store(d.total, Ordering::Release);
        if d.granted > 0 {
            if self.shape == Shape::Window {
                self.mark.store(d.mark, Ordering::Release);
            }
            self.avail.fetch_add(signed(d.granted), Ordering::AcqRel);
            self.refused_until.store(0, Ordering::Release);
        } else if least > 0 {
            let wait = d.wait_ms.max(1);
            self.retry_ms.store(wait, Ordering::Release);
            let memo = wait.min(u64::try_from(REFUSAL_MEMO.as_millis()).unwrap_or(1000));
            self.refused_until.store(now_ms() + memo, Ordering::Release);
        }
    }

    /// Once a second (`Fleet::sweep`): the block follows the last second's traffic, and quota
    /// that sits idle or in excess goes back to Redis.
    pub async fn sweep<D: Draw>(&self, fleet: &D) {
        let spent = self.spent.swap(0, Ordering::AcqRel);
        let limit = self.limit.load(Ordering::Acquire);
        if limit == 0 {
            return;
        }
        let block = (spent / 8).clamp(1, Self::cap(limit));
        if spent > 0 {
            self.block.store(block, Ordering::Release);
        }
        if self.drawing.load(Ordering::Acquire) {
            return;
        }
        // Positive: quota given back; negative: spent past reservations, counted now.
        let ret = if spent == 0 {
            self.avail.swap(0, Ordering::AcqRel)
        } else {
            let keep = signed(block * 2);
            let trim = |a: i64| if a > keep { Some(keep) } else { (a < 0).then_some(0) };
            match self.avail.fetch_update(Ordering::AcqRel, Ordering::Acquire, trim) {
                Ok(before) if before < 0 => before,
                Ok(before) => before - keep,
                Err(_) => 0,
            }
        };
        if ret != 0 {
            if let Some(d) = fleet.draw(self, 0, 0, limit, ret).await {
                self.total.store(d.total, Ordering::Release);
            }
        }
    }

    /// At shutdown: everything the lease holds goes back (and an overrun is counted).
    pub async fn release<D: Draw>(&self, fleet: &D) {
        let held = self.avail.swap(0, Ordering::AcqRel);
        if held != 0 {
            let _ = fleet.draw(self, 0, 0, self.limit.load(Ordering::Acquire), held).await;
        }
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// `Window`: the second to give quota back to; `Period`: the period.
    pub fn mark(&self) -> i64 {
        self.mark.load(Ordering::Acquire)
    }
}

/// What one draw got: `granted` (0 when refused: then `wait_ms`), the second it was counted in,
/// and the fleet's count after it.
pub struct Drawn {
    pub granted: u64,
    pub mark: i64,
    pub wait_ms: u64,
    pub total: u64,
}

/// The leases of a process, swept once a second. Registration is once per subject and kind.
#[derive(Default)]
pub struct Leases {
    all: std::sync::Mutex<Vec<Weak<Lease>>>,
}

impl Leases {
    pub fn register(&self, lease: &Arc<Lease>) {
        if let Ok(mut all) = self.all.lock() {
            all.retain(|w| w.strong_count() > 0);
            all.push(Arc::downgrade(lease));
        }
    }

    pub fn live(&self) -> Vec<Arc<Lease>> {
        self.all.lock().map(|all| all.iter().filter_map(Weak::upgrade).collect()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A store with one counter, counting as the budget script does.
    #[derive(Default)]
    struct Store {
        count: Mutex<u64>,
        calls: AtomicU64,
        down: AtomicBool,
    }

    impl Draw for Store {
        const TIMEOUT: Duration = Duration::from_millis(50);

        async fn draw(&self, _: &Lease, want: u64, least: u64, limit: u64, back: i64) -> Option<Drawn> {
            if self.down.load(Ordering::Acquire) {
                return None;
            }
            self.calls.fetch_add(1, Ordering::AcqRel);
            let mut c = self.count.lock().unwrap();
            *c = c.saturating_add_signed(-back);
            let grant = want.min(limit.saturating_sub(*c));
            if grant < least || grant == 0 {
                return Some(Drawn { granted: 0, mark: 0, wait_ms: 1_000, total: *c });
            }
            *c += grant;
            Some(Drawn { granted: grant, mark: 0, wait_ms: 0, total: *c })
        }
    }

    fn lease() -> Arc<Lease> {
        Arc::new(Lease::new("k".into(), Shape::Period { ttl_ms: 1_000 }))
    }

    #[tokio::test]
    async fn steady_takes_draw_in_blocks_and_never_pass_the_limit() {
        let store = Arc::new(Store::default());
        let (a, b) = (lease(), lease());
        let mut taken = 0;
        for i in 0..20_000u64 {
            let l = if i % 3 == 0 { &a } else { &b };
            if l.take(&store, 1, 10_000).await == Took::Taken {
                taken += 1;
            }
            tokio::task::yield_now().await;
        }
        assert!(taken <= 10_000, "two leases admitted {taken} of a limit of 10,000");
        assert!(taken >= 9_900, "quota held by leases stays within a block each: {taken}");
        let calls = store.calls.load(Ordering::Acquire);
        assert!(calls < 2_000, "{calls} draws for {taken} takes");
        assert!(matches!(a.take(&store, 1, 10_000).await, Took::Refused(_) | Took::Taken));
    }

    #[tokio::test]
    async fn a_refusal_stands_until_quota_comes_back() {
        let store = Arc::new(Store::default());
        let l = lease();
        assert_eq!(l.take(&store, 60, 100).await, Took::Taken);
        let calls = store.calls.load(Ordering::Acquire);
        assert!(matches!(l.take(&store, 60, 100).await, Took::Refused(_)));
        // The refusal is remembered: asking again does not call the store.
        let again = store.calls.load(Ordering::Acquire);
        assert!(matches!(l.take(&store, 60, 100).await, Took::Refused(_)));
        assert_eq!(store.calls.load(Ordering::Acquire), again);
        assert!(again > calls);
        // A settle that gives quota back lifts it.
        l.give_back(&store, 50);
        assert_eq!(l.take(&store, 60, 100).await, Took::Taken);
    }

    #[tokio::test]
    async fn spending_past_a_reservation_is_counted() {
        let store = Arc::new(Store::default());
        let l = lease();
        // A small limit: blocks of 1 % (10), so a 100 reservation draws exactly what it lacks.
        assert_eq!(l.take(&store, 100, 1_000).await, Took::Taken);
        assert_eq!(*store.count.lock().unwrap(), 100);
        // It cost 400: the 300 past the reservation is more than a block, counted at once.
        l.give_back(&store, -300);
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        assert_eq!(*store.count.lock().unwrap(), 400);
        // A smaller overrun waits for the sweep.
        assert_eq!(l.take(&store, 5, 1_000).await, Took::Taken);
        l.give_back(&store, -3);
        l.sweep(store.as_ref()).await;
        let c = *store.count.lock().unwrap();
        assert!(c >= 408, "the sweep counts the overrun: {c}");
    }

    /// After a quiet second the block follows that second's small spend; a request larger than
    /// the block still draws blocks of several requests, never one draw per request, and a take
    /// that finds the lease short is never refused while the limit has room.
    #[tokio::test]
    async fn a_small_block_after_a_quiet_second_still_draws_ahead() {
        let store = Arc::new(Store::default());
        let l = lease();
        assert_eq!(l.take(&store, 100, 1_000_000).await, Took::Taken);
        l.sweep(store.as_ref()).await; // spent 100 in the second: the block is 12, under one request
        let before = store.calls.load(Ordering::Acquire);
        for i in 0..80 {
            assert_eq!(l.take(&store, 100, 1_000_000).await, Took::Taken, "take {i}");
            // Settles give some of it back, as requests that cost less than they reserved do.
            l.give_back(&store, 30);
        }
        let draws = store.calls.load(Ordering::Acquire) - before;
        assert!(draws <= 12, "{draws} draws for 80 takes");
    }

    #[tokio::test]
    async fn idle_quota_goes_back_and_a_store_down_says_so() {
        let store = Arc::new(Store::default());
        let l = lease();
        assert_eq!(l.take(&store, 1, 1_000_000).await, Took::Taken);
        let held = *store.count.lock().unwrap();
        assert!(held >= 1);
        l.sweep(store.as_ref()).await; // the second it was used in
        l.sweep(store.as_ref()).await; // a second without use: everything goes back
        assert_eq!(*store.count.lock().unwrap(), 1, "only what was spent stays counted");
        store.down.store(true, Ordering::Release);
        assert_eq!(l.take(&store, 1, 1_000_000).await, Took::Unavailable);
    }
}
