//! Fleet-wide rate limits through Redis: a limit configured at N means N for all replicas.
//!
//! One Lua script checks and reserves every requests-per-minute and tokens-per-minute limit of a
//! request in one round trip, atomically (all or nothing), with the same sliding-window counter as
//! the local limiter (`limits`): keys per subject and minute, the previous minute weighted by the
//! share still inside the window. Every key expires two minutes after its last write, so nothing
//! accumulates. Settling a token reservation is one `INCRBY` of the difference, sent off the
//! request path. Counts are shared at once (no convergence delay).
//!
//! If Redis is unreachable or slow (over `TIMEOUT`), this replica falls back to its local
//! limiters with each limit divided by `server.replicas`, logs it, and tries Redis again after
//! `RETRY`: traffic never waits on a dead Redis. Concurrency limits stay local (divided the same way).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;

const TIMEOUT: Duration = Duration::from_millis(50);
const RETRY: Duration = Duration::from_secs(1);
const WINDOW_MS: u64 = 60_000;
const TTL_MS: u64 = 2 * WINDOW_MS + 5_000;

const ADMIT: &str = r"
local weight = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local n = #KEYS / 2
for i = 1, n do
  local cur = tonumber(redis.call('GET', KEYS[2*i-1]) or '0')
  local prev = tonumber(redis.call('GET', KEYS[2*i]) or '0')
  if prev * weight + cur + tonumber(ARGV[2+2*i]) > tonumber(ARGV[1+2*i]) then
    return i
  end
end
for i = 1, n do
  redis.call('INCRBY', KEYS[2*i-1], ARGV[2+2*i])
  redis.call('PEXPIRE', KEYS[2*i-1], ttl)
end
return 0
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

/// One limit to check: the key's stem (subject and kind), the limit and this request's amount.
pub struct Item {
    pub stem: String,
    pub limit: u64,
    pub amount: u64,
}

pub enum Decision {
    Admitted(SharedHeld),
    /// The item at this index refused; come back after `retry_after`.
    Refused {
        index: usize,
        retry_after: Duration,
    },
    /// Redis cannot be used now: apply local limits (divided by `replicas`).
    Unavailable,
}

pub struct Shared {
    client: redis::Client,
    conn: tokio::sync::OnceCell<ConnectionManager>,
    prefix: String,
    pub replicas: u32,
    /// Unix ms until which Redis is not tried (after a failure).
    down_until: AtomicU64,
    admit: redis::Script,
    spend: redis::Script,
    settle: redis::Script,
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

fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Shared {
    pub fn new(url: &str, prefix: &str, replicas: u32) -> Result<Arc<Self>, String> {
        let client = redis::Client::open(url).map_err(|e| format!("invalid redis_url: {e}"))?;
        Ok(Arc::new(Self {
            client,
            conn: tokio::sync::OnceCell::new(),
            prefix: prefix.to_owned(),
            replicas: replicas.max(1),
            down_until: AtomicU64::new(0),
            admit: redis::Script::new(ADMIT),
            spend: redis::Script::new(SPEND),
            settle: redis::Script::new(SETTLE),
        }))
    }

    /// Whether to try Redis now (not within `RETRY` of a failure).
    pub fn available(&self) -> bool {
        unix_ms() >= self.down_until.load(Ordering::Acquire)
    }

    fn mark_down(&self, why: &str) {
        let prev = self.down_until.swap(unix_ms() + RETRY.as_millis() as u64, Ordering::AcqRel);
        if prev <= unix_ms() {
            tracing::warn!(reason = why, "redis unavailable: local rate limits (divided by replicas) for now");
        }
    }

    async fn conn(&self) -> Option<ConnectionManager> {
        let init = self.conn.get_or_try_init(|| async {
            match tokio::time::timeout(TIMEOUT * 4, ConnectionManager::new(self.client.clone())).await {
                Ok(Ok(c)) => Ok(c),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("connect timeout".to_owned()),
            }
        });
        match init.await {
            Ok(c) => Some(c.clone()),
            Err(e) => {
                self.mark_down(&e);
                None
            }
        }
    }

    /// Checks and reserves all `items` at once.
    pub async fn admit(self: &Arc<Self>, items: &[Item]) -> Decision {
        if items.is_empty() {
            return Decision::Admitted(SharedHeld { shared: self.clone(), reserved: Vec::new() });
        }
        let Some(mut conn) = self.conn().await else { return Decision::Unavailable };
        let now = unix_ms();
        let minute = now / WINDOW_MS;
        let into = now % WINDOW_MS;
        let weight = 1.0 - into as f64 / WINDOW_MS as f64;
        let mut inv = self.admit.prepare_invoke();
        let mut keys = Vec::with_capacity(items.len());
        inv.arg(weight).arg(TTL_MS);
        for it in items {
            let cur = format!("{}:{}:{minute}", self.prefix, it.stem);
            inv.key(&cur).key(format!("{}:{}:{}", self.prefix, it.stem, minute.saturating_sub(1)));
            inv.arg(it.limit).arg(it.amount);
            keys.push((cur, it.amount));
        }
        match tokio::time::timeout(TIMEOUT, inv.invoke_async::<i64>(&mut conn)).await {
            Ok(Ok(0)) => Decision::Admitted(SharedHeld { shared: self.clone(), reserved: keys }),
            Ok(Ok(i)) => Decision::Refused {
                index: usize::try_from(i - 1).unwrap_or(0),
                // The previous minute's weight decays to zero by the next boundary at the latest.
                retry_after: Duration::from_millis((WINDOW_MS - into).max(1)),
            },
            Ok(Err(e)) => {
                self.mark_down(&e.to_string());
                Decision::Unavailable
            }
            Err(_) => {
                self.mark_down("timeout");
                Decision::Unavailable
            }
        }
    }

    /// Reserves `cost` micro-USD on the fleet-wide spend `stem` of period `period` if it stays
    /// within `limit`. Keys expire `ttl` after their last write.
    pub async fn spend(&self, stem: &str, period: u64, cost: u64, limit: u64, ttl: Duration) -> Spend {
        if !self.available() {
            return Spend::Unavailable;
        }
        let Some(mut conn) = self.conn().await else { return Spend::Unavailable };
        let key = format!("{}:{stem}:{period}", self.prefix);
        let mut inv = self.spend.prepare_invoke();
        inv.key(&key).arg(cost).arg(limit).arg(ttl.as_millis() as u64);
        match tokio::time::timeout(TIMEOUT, inv.invoke_async::<i64>(&mut conn)).await {
            Ok(Ok(n)) if n < 0 => Spend::Exhausted,
            Ok(Ok(n)) => Spend::Reserved { key, spent: u64::try_from(n).unwrap_or(0) },
            Ok(Err(e)) => {
                self.mark_down(&e.to_string());
                Spend::Unavailable
            }
            Err(_) => {
                self.mark_down("timeout");
                Spend::Unavailable
            }
        }
    }

    pub fn adjust(self: &Arc<Self>, key: String, delta: i64) {
        if delta == 0 {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let Some(mut conn) = me.conn().await else { return };
            let mut inv = me.settle.prepare_invoke();
            inv.key(&key).arg(delta);
            if let Ok(Err(e)) = tokio::time::timeout(TIMEOUT * 4, inv.invoke_async::<i64>(&mut conn)).await {
                tracing::warn!(error = %e, "redis settle failed");
            }
        });
    }
}

/// The reservations one request holds in Redis; `settle` corrects token counts to actual usage.
pub struct SharedHeld {
    shared: Arc<Shared>,
    reserved: Vec<(String, u64)>,
}

impl SharedHeld {
    /// Replaces each token reservation by `actual`; request counts stay.
    pub fn settle(&mut self, actual: u64) {
        for (key, amount) in self.reserved.drain(..) {
            if key.contains(":tpm:") {
                let delta = i64::try_from(actual).unwrap_or(i64::MAX) - i64::try_from(amount).unwrap_or(i64::MAX);
                self.shared.adjust(key, delta);
            }
        }
    }
}
