//! Fleet-wide rate limits and budget spend through Redis: a limit configured at N means N for all
//! replicas.
//!
//! One Lua script checks and reserves every requests-per-minute and tokens-per-minute limit of a
//! request in one round trip, atomically (all or nothing), with the same windows as the local
//! limiter (`limits`): one-second buckets, a request admitted while the buckets of the last 61
//! seconds plus its amount stay within the limit. Each subject is one hash (a bucket per second,
//! a running sum, and the oldest second still counted), expired as the window moves, and by
//! key TTL once idle. Seconds are Redis's own clock (`TIME`), so replicas' clocks need not agree.
//! Settling a token reservation is one script call with the difference, sent off the request path.
//!
//! Faults: the connection is made, watched and brought back by one background task
//! (`keep_connected`), never on a request's path. A command that fails or takes longer than
//! `TIMEOUT` marks Redis down (logged once per outage); while it is down, requests do not call
//! it at all and fall back to local limiters at `limit ÷ server.replicas` (budgets: this
//! replica's share of the budget), and the task probes it every `PROBE` until it answers, then
//! logs its return and fleet-wide counting resumes. So no request waits on Redis longer than
//! `TIMEOUT`, and only the requests in flight when it fails wait at all.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::state::lease::{signed, Draw, Drawn, Lease, Shape};

/// The longest a request waits on Redis.
pub const TIMEOUT: Duration = Duration::from_millis(50);
/// How often the background task checks Redis while it is down (and, less often, while up).
const PROBE: Duration = Duration::from_millis(250);
const PROBE_UP: Duration = Duration::from_secs(1);
/// A subject's hash outlives its last write by this much (the window and a margin).
const TTL_MS: u64 = 125_000;

/// Lua shared by `ADMIT` and `LEASE_WINDOW`. `window` moves a subject's hash to second `now`:
/// seconds more than 60 old leave the sum; returns the oldest second counted and the sum.
/// `wait_ms` is how long until `amount` fits under `limit`: until enough of the oldest buckets
/// have left (a minute when it never fits).
const WINDOW: &str = r"
local function window(k, now)
  local low = tonumber(redis.call('HGET', k, 'low') or now)
  local sum = tonumber(redis.call('HGET', k, 's') or '0')
  if now - low > 61 then
    redis.call('DEL', k)
    sum = 0
    low = now - 60
  end
  while low < now - 60 do
    local v = redis.call('HGET', k, low)
    if v then
      sum = sum - tonumber(v)
      redis.call('HDEL', k, low)
    end
    low = low + 1
  end
  return low, sum
end
local function wait_ms(k, low, now, ms_into, sum, amount, limit)
  local wait = 60000 - ms_into
  if amount <= limit then
    local freed = 0
    for s = low, now do
      freed = freed + tonumber(redis.call('HGET', k, s) or '0')
      if sum - freed + amount <= limit then
        wait = (s + 61 - now) * 1000 - ms_into
        break
      end
    end
  end
  return math.max(wait, 1)
end
";

/// KEYS: one hash per subject and kind. ARGV: ttl, then limit and amount per key. Fields: `s` the
/// sum of the buckets counted, `low` the oldest second that may hold one, and a field per second.
/// Returns {0, now} when admitted (the second the amounts were counted in), or {i, wait_ms} when
/// the i-th refused. (After `WINDOW`.)
const ADMIT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1])
local ms_into = math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
for i = 1, #KEYS do
  local k = KEYS[i]
  local limit = tonumber(ARGV[2*i])
  local amount = tonumber(ARGV[2*i+1])
  local low, sum = window(k, now)
  redis.call('HSET', k, 'low', low, 's', sum)
  redis.call('PEXPIRE', k, ttl)
  if sum + amount > limit then
    return {i, wait_ms(k, low, now, ms_into, sum, amount, limit)}
  end
end
for i = 1, #KEYS do
  redis.call('HINCRBY', KEYS[i], now, ARGV[2*i+1])
  redis.call('HINCRBY', KEYS[i], 's', ARGV[2*i+1])
end
return {0, now}
";

/// KEYS[1]: a subject's hash. ARGV: the second of the reservation, the difference to apply.
const SETTLE_BUCKET: &str = r"
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
local new = math.max(0, tonumber(v) + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], ARGV[1], new)
redis.call('HINCRBY', KEYS[1], 's', new - tonumber(v))
return new
";

const SPEND: &str = r"
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
if v + tonumber(ARGV[1]) > tonumber(ARGV[2]) then return -1 end
local n = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return n
";

const SETTLE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local v = redis.call('INCRBY', KEYS[1], ARGV[1])
if v < 0 then redis.call('SET', KEYS[1], 0, 'KEEPTTL') end
return v
";

/// Leases (`lease`) on a per-minute limit. KEYS[1]: the subject's hash, as `ADMIT`'s. ARGV: ttl,
/// limit, want, least, give back (negative: spent past a reservation, counted whatever the
/// limit), the second to give back to. Gives back first, then grants `min(want, room)` if that
/// is at least `least`, counted in the current second. Returns {granted, second, count after} or,
/// refused, {0, wait_ms, count}. (After `WINDOW`.)
const LEASE_WINDOW: &str = r"
local k = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1])
local ms_into = math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local least = tonumber(ARGV[4])
local back = tonumber(ARGV[5])
local low, sum = window(k, now)
if back > 0 then
  local v = redis.call('HGET', k, ARGV[6])
  if v then
    local new = math.max(0, tonumber(v) - back)
    redis.call('HSET', k, ARGV[6], new)
    sum = sum - (tonumber(v) - new)
  end
elseif back < 0 then
  redis.call('HINCRBY', k, now, -back)
  sum = sum - back
end
redis.call('HSET', k, 'low', low, 's', sum)
redis.call('PEXPIRE', k, ttl)
local grant = math.min(want, limit - sum)
if grant < least or grant <= 0 then
  if least == 0 then return {0, now, sum} end
  return {0, wait_ms(k, low, now, ms_into, sum, least, limit), sum}
end
redis.call('HINCRBY', k, now, grant)
redis.call('HINCRBY', k, 's', grant)
return {grant, now, sum + grant}
";

/// Leases on a budget. KEYS[1]: the period's counter. ARGV: ttl, limit, want, least, give back
/// (negative: spent past a reservation).
/// Returns {granted, 0, spend after}; refused, {0, 0, spend}.
const LEASE_PERIOD: &str = r"
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
local back = tonumber(ARGV[5])
if back > 0 and v > 0 then
  v = math.max(0, v - back)
  redis.call('SET', KEYS[1], v, 'KEEPTTL')
elseif back < 0 then
  v = redis.call('INCRBY', KEYS[1], -back)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
local grant = math.min(tonumber(ARGV[3]), tonumber(ARGV[2]) - v)
if grant < tonumber(ARGV[4]) or grant <= 0 then return {0, 0, v} end
v = redis.call('INCRBY', KEYS[1], grant)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return {grant, 0, v}
";

/// One limit to check: the key's stem (subject and kind), the limit and this request's amount.
pub struct Item {
    pub stem: String,
    pub limit: u64,
    pub amount: u64,
    /// A tokens-per-minute limit (its reservation is settled to the actual usage).
    pub tokens: bool,
}

pub enum Decision {
    Admitted(FleetHeld),
    /// The item at this index refused; come back after `retry_after`.
    Refused {
        index: usize,
        retry_after: Duration,
    },
    /// Redis cannot be used now: apply local limits (divided by `replicas`).
    Unavailable,
}

/// The client of a single Redis, of a Redis Cluster, or of the Sentinels that name the master.
enum Client {
    Single(redis::Client),
    Cluster(Box<redis::cluster::ClusterClient>),
    /// Asked by `keep_connected` (never by a request) for the master's address.
    Sentinel(Box<tokio::sync::Mutex<redis::sentinel::SentinelClient>>),
}

/// A connection that comes back by itself: a `ConnectionManager`, or the cluster client's
/// connection (which follows `MOVED`, refreshes its slot map and reconnects after a failover).
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(cmd, offset, count),
            Self::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

pub struct Fleet {
    client: Client,
    /// Made by `keep_connected`; it reconnects by itself (behind Sentinel, `keep_connected`
    /// replaces it when the Sentinels name another master).
    conn: arc_swap::ArcSwapOption<Conn>,
    /// Behind Sentinel: the address of the master `conn` talks to.
    master: std::sync::Mutex<String>,
    prefix: String,
    /// `server.replicas`: what local limits are divided by while Redis cannot be used, until
    /// the control plane says how many data planes are connected (`live`).
    configured: u32,
    live: std::sync::atomic::AtomicU32,
    /// Known down: requests do not call Redis until the background task sees it answer.
    down: AtomicBool,
    /// Set once the first connection attempt has ended (either way); requests that arrive
    /// before wait for it (`ready_wait`), at most `TIMEOUT`.
    ready: AtomicBool,
    ready_wait: tokio::sync::watch::Sender<bool>,
    admit: redis::Script,
    spend: redis::Script,
    settle: redis::Script,
    settle_bucket: redis::Script,
    lease_window: redis::Script,
    lease_period: redis::Script,
    /// Every lease of the process, for the sweep.
    pub leases: crate::state::lease::Leases,
}

/// A budget reservation in Redis.
pub enum Spend {
    /// Reserved; the fleet's spend in this period after the reservation.
    Reserved {
        key: String,
        spent: u64,
    },
    Exhausted,
    /// Redis cannot be used now: use the local budget (divided by `replicas`).
    Unavailable,
}

impl Fleet {
    pub fn new(target: &crate::config::snapshot::RedisTarget) -> Result<Arc<Self>, String> {
        let client = if let Some(name) = &target.sentinel {
            let nodes: Vec<&str> = target.url.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
            redis::sentinel::SentinelClient::build(
                nodes,
                name.clone(),
                None,
                redis::sentinel::SentinelServerType::Master,
            )
            .map(|c| Client::Sentinel(Box::new(tokio::sync::Mutex::new(c))))
        } else if target.cluster {
            let nodes: Vec<&str> = target.url.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
            redis::cluster::ClusterClient::builder(nodes)
                .connection_timeout(TIMEOUT * 4)
                .response_timeout(TIMEOUT * 4)
                .retries(2)
                .min_retry_wait(10)
                .max_retry_wait(TIMEOUT.as_millis() as u64)
                .build()
                .map(|c| Client::Cluster(Box::new(c)))
        } else {
            redis::Client::open(target.url.as_str()).map(Client::Single)
        }
        .map_err(|e| format!("invalid redis_url: {e}"))?;
        Ok(Arc::new(Self {
            client,
            conn: arc_swap::ArcSwapOption::empty(),
            master: std::sync::Mutex::new(String::new()),
            prefix: target.prefix.clone(),
            configured: target.replicas.max(1),
            live: std::sync::atomic::AtomicU32::new(0),
            down: AtomicBool::new(false),
            ready: AtomicBool::new(false),
            ready_wait: tokio::sync::watch::channel(false).0,
            admit: redis::Script::new(&format!("{WINDOW}{ADMIT}")),
            spend: redis::Script::new(SPEND),
            settle: redis::Script::new(SETTLE),
            settle_bucket: redis::Script::new(SETTLE_BUCKET),
            lease_window: redis::Script::new(&format!("{WINDOW}{LEASE_WINDOW}")),
            lease_period: redis::Script::new(LEASE_PERIOD),
            leases: crate::state::lease::Leases::default(),
        }))
    }

    /// What local limits are divided by while Redis cannot be used: the number of data planes
    /// the control plane sees connected, or `server.replicas` before it said (or without one).
    pub fn replicas(&self) -> u32 {
        match self.live.load(Ordering::Relaxed) {
            0 => self.configured,
            n => n,
        }
    }

    /// The control plane's count of connected data planes (`ToNode::Fleet`).
    pub fn set_live_replicas(&self, n: u32) {
        let before = self.live.swap(n, Ordering::Relaxed);
        if before != n {
            tracing::info!(
                replicas = n,
                configured = self.configured,
                "data planes in the fleet, from the control plane"
            );
        }
    }

    /// Known down: requests skip Redis (and its key formatting) altogether.
    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }

    fn mark_down(&self, why: &str) {
        if !self.down.swap(true, Ordering::AcqRel) {
            tracing::warn!(reason = why, "redis unavailable: local limits (divided by replicas) until it answers");
        }
    }

    fn mark_up(&self) {
        if self.down.swap(false, Ordering::AcqRel) {
            tracing::info!("redis reachable again: fleet-wide limits and budgets resume");
        }
    }

    /// The connection for a request: none while Redis is down. Waits (at most `TIMEOUT`) only
    /// for the first connection attempt of the process.
    async fn conn(&self) -> Option<Conn> {
        if !self.ready.load(Ordering::Acquire) {
            let mut ready = self.ready_wait.subscribe();
            let _ = tokio::time::timeout(TIMEOUT, async { drop(ready.wait_for(|r| *r).await) }).await;
            if !self.ready.load(Ordering::Acquire) {
                return None;
            }
        }
        if self.down.load(Ordering::Acquire) {
            return None;
        }
        self.conn.load_full().map(|c| (*c).clone())
    }

    /// For the life of the process (started once, by `App::spawn_upkeep`): makes the connection
    /// and checks Redis with a `PING`, every `PROBE` while it is down and every `PROBE_UP` while
    /// it is up; a failed check marks it down, a good one up.
    pub async fn keep_connected(self: Arc<Self>) {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(TIMEOUT * 4))
            .set_response_timeout(Some(TIMEOUT * 4))
            .set_number_of_retries(1)
            .set_min_delay(TIMEOUT);
        loop {
            let ok = self.check(&config).await;
            match ok {
                Ok(()) => {
                    self.mark_up();
                    self.sweep().await;
                }
                Err(e) => self.mark_down(&e),
            }
            if !self.ready.swap(true, Ordering::AcqRel) {
                self.ready_wait.send_replace(true);
            }
            tokio::time::sleep(if self.down.load(Ordering::Acquire) { PROBE } else { PROBE_UP }).await;
        }
    }

    /// One check of `keep_connected`: the connection made if there is none (behind Sentinel,
    /// made again when the Sentinels name another master), then a `PING`.
    async fn check(&self, config: &ConnectionManagerConfig) -> Result<(), String> {
        if let Client::Sentinel(sentinels) = &self.client {
            let asked = tokio::time::timeout(TIMEOUT * 4, async { sentinels.lock().await.async_get_client().await });
            let client = match asked.await {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => return Err(format!("sentinel: {e}")),
                Err(_) => return Err("no sentinel answered".to_owned()),
            };
            let addr = client.get_connection_info().addr().to_string();
            let moved = self.master.lock().map(|m| *m != addr).unwrap_or(true);
            if moved || self.conn.load().is_none() {
                let c = ConnectionManager::new_lazy_with_config(client, config.clone()).map_err(|e| e.to_string())?;
                self.conn.store(Some(Arc::new(Conn::Single(c))));
                tracing::info!(master = %addr, "redis: following the master the sentinels name");
                if let Ok(mut m) = self.master.lock() {
                    *m = addr;
                }
            }
        } else if self.conn.load().is_none() {
            let c = self.connect(config).await?;
            self.conn.store(Some(Arc::new(c)));
        }
        let c = self.conn.load_full().ok_or("no connection")?;
        ping((*c).clone()).await
    }

    /// The connection `keep_connected` keeps: made lazily for a single Redis; for a cluster, once
    /// a node answers (its slot map is read then).
    async fn connect(&self, config: &ConnectionManagerConfig) -> Result<Conn, String> {
        match &self.client {
            Client::Single(c) => ConnectionManager::new_lazy_with_config(c.clone(), config.clone())
                .map(Conn::Single)
                .map_err(|e| e.to_string()),
            Client::Cluster(c) => match tokio::time::timeout(TIMEOUT * 4, c.get_async_connection()).await {
                Ok(Ok(conn)) => Ok(Conn::Cluster(conn)),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("no cluster node answered".to_owned()),
            },
            Client::Sentinel(_) => Err("behind sentinel the connection is made by `check`".to_owned()),
        }
    }

    fn is_cluster(&self) -> bool {
        matches!(self.client, Client::Cluster(_))
    }

    /// Runs one script call under `TIMEOUT`; a failure marks Redis down.
    async fn call<T: redis::FromRedisValue>(&self, inv: redis::ScriptInvocation<'_>) -> Option<T> {
        let mut conn = self.conn().await?;
        match tokio::time::timeout(TIMEOUT, inv.invoke_async::<T>(&mut conn)).await {
            Ok(Ok(v)) => Some(v),
            Ok(Err(e)) => {
                self.mark_down(&e.to_string());
                None
            }
            Err(_) => {
                self.mark_down("timeout");
                None
            }
        }
    }

    /// The lease of `stem` (`rl:tenant:acme:rpm`, `budget:…`), made and registered on first use.
    pub fn lease_of(&self, slot: &OnceLock<Arc<Lease>>, stem: impl FnOnce() -> String, shape: Shape) -> Arc<Lease> {
        slot.get_or_init(|| {
            let lease = Arc::new(Lease::new(format!("{}:{}", self.prefix, stem()), shape));
            self.leases.register(&lease);
            lease
        })
        .clone()
    }

    /// Once a second while Redis is up: every lease's block follows its traffic, and idle or
    /// excess quota goes back.
    pub async fn sweep(&self) {
        for lease in self.leases.live() {
            lease.sweep(self).await;
        }
    }

    /// At shutdown, after the last request: every lease gives back what it holds (at most
    /// `TIMEOUT` × 4 in all).
    pub async fn release(&self) {
        if self.is_down() {
            return;
        }
        let all = async {
            for lease in self.leases.live() {
                lease.release(self).await;
            }
        };
        let _ = tokio::time::timeout(TIMEOUT * 4, all).await;
    }

    /// Checks and reserves all `items` at once.
    pub async fn admit(self: &Arc<Self>, items: &[Item]) -> Decision {
        if items.is_empty() {
            return Decision::Admitted(FleetHeld::empty(self));
        }
        if self.is_cluster() {
            return self.admit_each(items).await;
        }
        let mut inv = self.admit.prepare_invoke();
        inv.arg(TTL_MS);
        let mut keys = Vec::with_capacity(items.len());
        for it in items {
            let key = format!("{}:{}", self.prefix, it.stem);
            inv.key(&key).arg(it.limit).arg(it.amount);
            keys.push((key, it.amount, it.tokens));
        }
        match self.call::<(i64, i64)>(inv).await {
            Some((0, second)) => Decision::Admitted(FleetHeld {
                shared: self.clone(),
                reserved: keys.into_iter().map(|(k, a, t)| (k, a, t, second)).collect(),
                leased: Vec::new(),
            }),
            Some((i, wait_ms)) => Decision::Refused {
                index: usize::try_from(i - 1).unwrap_or(0),
                retry_after: Duration::from_millis(u64::try_from(wait_ms).unwrap_or(1).max(1)),
            },
            None => Decision::Unavailable,
        }
    }

    /// `admit` on a cluster, whose subjects live in different slots: one call per item, in
    /// order, each exact; a refusal gives back the items before it (all or nothing, though not
    /// one atomic step).
    async fn admit_each(self: &Arc<Self>, items: &[Item]) -> Decision {
        let mut held = FleetHeld::empty(self);
        for (index, it) in items.iter().enumerate() {
            let key = format!("{}:{}", self.prefix, it.stem);
            let mut inv = self.admit.prepare_invoke();
            inv.arg(TTL_MS).key(&key).arg(it.limit).arg(it.amount);
            match self.call::<(i64, i64)>(inv).await {
                Some((0, second)) => held.reserved.push((key, it.amount, it.tokens, second)),
                Some((_, wait_ms)) => {
                    held.cancel();
                    let retry_after = Duration::from_millis(u64::try_from(wait_ms).unwrap_or(1).max(1));
                    return Decision::Refused { index, retry_after };
                }
                None => {
                    held.cancel();
                    return Decision::Unavailable;
                }
            }
        }
        Decision::Admitted(held)
    }

    /// Reserves `cost` micro-USD on the fleet-wide spend `stem` of period `period` if it stays
    /// within `limit`. Keys expire `ttl` after their last write.
    pub async fn spend(&self, stem: &str, period: u64, cost: u64, limit: u64, ttl: Duration) -> Spend {
        if self.is_down() {
            return Spend::Unavailable;
        }
        let key = format!("{}:{stem}:{period}", self.prefix);
        let mut inv = self.spend.prepare_invoke();
        inv.key(&key).arg(cost).arg(limit).arg(ttl.as_millis() as u64);
        match self.call::<i64>(inv).await {
            Some(n) if n < 0 => Spend::Exhausted,
            Some(n) => Spend::Reserved { key, spent: u64::try_from(n).unwrap_or(0) },
            None => Spend::Unavailable,
        }
    }

    /// Corrects a budget reservation by `delta` micro-USD, off the request path.
    pub fn adjust(self: &Arc<Self>, key: String, delta: i64) {
        if delta == 0 {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let mut inv = me.settle.prepare_invoke();
            inv.key(&key).arg(delta);
            let _ = me.call::<i64>(inv).await;
        });
    }

    /// Corrects a token reservation counted in `second`, off the request path.
    fn adjust_bucket(self: &Arc<Self>, key: String, second: i64, delta: i64) {
        if delta == 0 {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let mut inv = me.settle_bucket.prepare_invoke();
            inv.key(&key).arg(second).arg(delta);
            let _ = me.call::<i64>(inv).await;
        });
    }
}

impl Draw for Fleet {
    const TIMEOUT: Duration = TIMEOUT;

    async fn draw(&self, lease: &Lease, want: u64, least: u64, limit: u64, back: i64) -> Option<Drawn> {
        let (mut inv, ttl) = match lease.shape() {
            Shape::Window => (self.lease_window.prepare_invoke(), TTL_MS),
            Shape::Period { ttl_ms } => (self.lease_period.prepare_invoke(), ttl_ms),
        };
        let key;
        let key = match lease.shape() {
            Shape::Window => lease.key(),
            Shape::Period { .. } => {
                key = format!("{}:{}", lease.key(), lease.mark());
                key.as_str()
            }
        };
        inv.key(key).arg(ttl).arg(limit).arg(want).arg(least).arg(back).arg(lease.mark().max(0));
        let (granted, mark, total) = self.call::<(u64, i64, u64)>(inv).await?;
        Some(Drawn {
            granted,
            mark,
            wait_ms: if granted == 0 && lease.shape() == Shape::Window {
                u64::try_from(mark).unwrap_or(1)
            } else {
                1_000
            },
            total,
        })
    }
}

async fn ping(mut c: Conn) -> Result<(), String> {
    let cmd = redis::cmd("PING");
    match tokio::time::timeout(TIMEOUT * 4, cmd.query_async::<String>(&mut c)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer to PING".to_owned()),
    }
}

/// The reservations one request holds in Redis; `settle` corrects token counts to actual usage.
pub struct FleetHeld {
    shared: Arc<Fleet>,
    /// Exact reservations: (key, amount, is a token limit, Redis's second it was counted in).
    reserved: Vec<(String, u64, bool, i64)>,
    /// Taken from leases: (lease, amount, is a token limit).
    pub leased: Vec<(Arc<Lease>, u64, bool)>,
}

impl FleetHeld {
    /// Nothing held yet.
    pub fn empty(shared: &Arc<Fleet>) -> Self {
        Self { shared: shared.clone(), reserved: Vec::new(), leased: Vec::new() }
    }

    /// Adds the exact reservations of `other`.
    pub fn absorb(&mut self, mut other: FleetHeld) {
        self.reserved.append(&mut other.reserved);
    }

    /// The request was refused after all (by a later limit): gives back every reservation.
    pub fn cancel(&mut self) {
        for (key, amount, _, second) in self.reserved.drain(..) {
            self.shared.adjust_bucket(key, second, -signed(amount));
        }
        for (lease, amount, _) in self.leased.drain(..) {
            lease.give_back(&self.shared, signed(amount));
        }
    }

    /// Replaces each token reservation by `actual`; request counts stay.
    pub fn settle(&mut self, actual: u64) {
        for (key, amount, tokens, second) in self.reserved.drain(..) {
            if tokens {
                self.shared.adjust_bucket(key, second, signed(actual) - signed(amount));
            }
        }
        for (lease, amount, tokens) in self.leased.drain(..) {
            if tokens {
                lease.give_back(&self.shared, signed(amount) - signed(actual));
            }
        }
    }
}
