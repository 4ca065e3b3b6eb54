//! Local rate limits: requests per minute, tokens per minute and concurrency, for the tenant (and
//! key), alias and upstream layers.
//!
//! Algorithm: a **sliding window of one-second buckets**. Each per-minute counter keeps what it
//! admitted in each of the last 61 seconds; a request is admitted while the sum of those buckets
//! plus its cost stays within the limit. A bucket is counted whole until its second has left the
//! window entirely, so the count of any 60-second window can never pass the limit (whatever the
//! load did before it, and wherever the minute boundaries fall); the price is that a second on
//! its way out still counts, so a steady overload is admitted at limit × 60/61. (The two-window
//! estimate used before weighted the previous minute as if its load had been even: a burst late
//! in one minute was discounted early in the next, and 99 requests passed an rpm of 60 in one
//! sliding minute.) Tokens are reserved before the call (prompt estimate + `max_tokens`, or the
//! server default) and settled to the actual usage afterwards, so a burst of large requests cannot
//! overshoot. State is 64 packed atomic words (second and count) per counter, made on first use;
//! no locks. Limiter state lives outside the snapshot and survives reloads by name, like health.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

/// Seconds in the window: the buckets of the current second and the 60 before it are counted.
const WINDOW_S: u64 = 60;
/// Ring slots, at least the 61 buckets a window counts.
const SLOTS: usize = 64;

fn pack(second: u64, count: u64) -> u64 {
    (second << 32) | count.min(u64::from(u32::MAX))
}

fn unpack(w: u64) -> (u64, u64) {
    (w >> 32, w & 0xffff_ffff)
}

/// One per-minute counter (requests or tokens).
pub struct SlidingWindow {
    base: Instant,
    /// Slot `s % SLOTS` holds second `s` (counted from `base`, from 1: 0 is never used).
    buckets: OnceLock<Box<[AtomicU64; SLOTS]>>,
}

/// What a successful `try_take` reserved, to settle later.
#[derive(Debug, Clone, Copy)]
pub struct Taken {
    second: u64,
    amount: u64,
}

impl SlidingWindow {
    pub fn new() -> Self {
        Self { base: Instant::now(), buckets: OnceLock::new() }
    }

    /// Milliseconds since `base`.
    fn now_ms(&self) -> u64 {
        u64::try_from(Instant::now().saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX)
    }

    fn buckets(&self) -> &[AtomicU64; SLOTS] {
        self.buckets.get_or_init(|| Box::new(std::array::from_fn(|_| AtomicU64::new(0))))
    }

    /// What the window counts at second `now`, leaving out the slot of `now` itself.
    fn others(buckets: &[AtomicU64; SLOTS], now: u64) -> u64 {
        let oldest = now.saturating_sub(WINDOW_S);
        let mut sum = 0;
        for (i, b) in buckets.iter().enumerate() {
            if i == (now % SLOTS as u64) as usize {
                continue;
            }
            let (s, c) = unpack(b.load(Ordering::Acquire));
            if s >= oldest && s < now {
                sum += c;
            }
        }
        sum
    }

    /// Reserves `amount` if it fits under `limit`; otherwise how long until it would.
    pub fn try_take(&self, amount: u64, limit: u64) -> Result<Taken, Duration> {
        let buckets = self.buckets();
        loop {
            let ms = self.now_ms();
            let now = ms / 1000 + 1;
            let slot = &buckets[(now % SLOTS as u64) as usize];
            let v = slot.load(Ordering::Acquire);
            let (s, c) = unpack(v);
            // A slot of an older second is this second's, from zero.
            let current = if s == now { c } else { 0 };
            let used = Self::others(buckets, now) + current;
            if used + amount > limit {
                return Err(self.wait(buckets, amount, limit, used, ms));
            }
            if slot.compare_exchange(v, pack(now, current + amount), Ordering::AcqRel, Ordering::Acquire).is_ok() {
                return Ok(Taken { second: now, amount });
            }
        }
    }

    /// Time until `amount` fits: the oldest buckets leave first, each once its second is more
    /// than 60 s old.
    fn wait(&self, buckets: &[AtomicU64; SLOTS], amount: u64, limit: u64, used: u64, ms: u64) -> Duration {
        let now = ms / 1000 + 1;
        let mut wait_ms = WINDOW_S * 1000;
        if amount <= limit {
            let mut freed = 0;
            for second in now.saturating_sub(WINDOW_S)..=now {
                let (s, c) = unpack(buckets[(second % SLOTS as u64) as usize].load(Ordering::Acquire));
                if s == second {
                    freed += c;
                }
                if used - freed.min(used) + amount <= limit {
                    // Bucket `second` stops counting at `now` = second + 61, i.e. at ms (second + 60) × 1000.
                    wait_ms = ((second + WINDOW_S) * 1000).saturating_sub(ms);
                    break;
                }
            }
        }
        Duration::from_millis(wait_ms.clamp(1, 2 * WINDOW_S * 1000))
    }

    /// Replaces a reservation by the actual amount (while its bucket is still counted).
    pub fn settle(&self, taken: Taken, actual: u64) {
        if actual == taken.amount {
            return;
        }
        let slot = &self.buckets()[(taken.second % SLOTS as u64) as usize];
        let _ = slot.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
            let (s, c) = unpack(v);
            (s == taken.second).then(|| pack(s, (c + actual).saturating_sub(taken.amount)))
        });
    }

    /// (limit − the window's count), for `x-ratelimit-remaining-*`.
    pub fn remaining(&self, limit: u64) -> u64 {
        let Some(buckets) = self.buckets.get() else { return limit };
        let now = self.now_ms() / 1000 + 1;
        let (s, c) = unpack(buckets[(now % SLOTS as u64) as usize].load(Ordering::Acquire));
        let used = Self::others(buckets, now) + if s == now { c } else { 0 };
        limit.saturating_sub(used)
    }
}

impl Default for SlidingWindow {
    fn default() -> Self {
        Self::new()
    }
}

/// The live counters of one limited subject (a tenant, key, alias or upstream).
#[derive(Default)]
pub struct LimitState {
    pub requests: SlidingWindow,
    pub tokens: SlidingWindow,
    in_flight: AtomicU32,
    /// The fleet-wide leases of the requests and tokens limits, made on first use with Redis.
    pub leases: [OnceLock<Arc<super::lease::Lease>>; 2],
}

impl LimitState {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }
}

impl std::fmt::Debug for LimitState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimitState").field("in_flight", &self.in_flight.load(Ordering::Relaxed)).finish()
    }
}

use crate::error::LimitKind as Kind;

/// A refusal: which kind, the limit, and when to come back.
#[derive(Debug, Clone, Copy)]
pub struct Refusal {
    pub kind: Kind,
    pub limit: u64,
    pub retry_after: Duration,
}

/// A subject's configured limits and its live state.
#[derive(Debug, Clone)]
pub struct Limiter {
    pub rpm: Option<u32>,
    pub tpm: Option<u32>,
    pub concurrency: Option<u32>,
    /// Fleet-wide: one Redis round trip per request instead of leases.
    pub exact: bool,
    pub state: Arc<LimitState>,
}

impl Limiter {
    pub fn is_unlimited(&self) -> bool {
        self.rpm.is_none() && self.tpm.is_none() && self.concurrency.is_none()
    }

    /// Admits one request reserving `tokens`, or says which limit refused. All-or-nothing: a
    /// refusal undoes what this call had already taken.
    pub fn admit(&self, tokens: u64) -> Result<Held, Refusal> {
        self.admit_scaled(tokens, 1, true)
    }

    /// `admit` with every limit divided by `divisor` (the local share of a fleet-wide limit), and
    /// without the per-minute limits when `rates` is false (Redis enforced those).
    pub fn admit_scaled(&self, tokens: u64, divisor: u32, rates: bool) -> Result<Held, Refusal> {
        let share = |v: u32| (v / divisor.max(1)).max(1);
        let s = &self.state;
        let concurrency = match self.concurrency.map(share) {
            Some(max) => {
                let got = s.in_flight.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1));
                if got.is_err() {
                    return Err(Refusal {
                        kind: Kind::Concurrency,
                        limit: u64::from(max),
                        retry_after: Duration::from_secs(1),
                    });
                }
                true
            }
            None => false,
        };
        let mut held = Held { state: s.clone(), concurrency, requests: None, tokens: None };
        if let Some(rpm) = self.rpm.filter(|_| rates).map(share) {
            match s.requests.try_take(1, u64::from(rpm)) {
                Ok(t) => held.requests = Some(t),
                Err(wait) => return Err(Refusal { kind: Kind::Requests, limit: u64::from(rpm), retry_after: wait }),
            }
        }
        if let Some(tpm) = self.tpm.filter(|_| rates).map(share) {
            match s.tokens.try_take(tokens, u64::from(tpm)) {
                Ok(t) => held.tokens = Some(t),
                Err(wait) => {
                    // Give the request slot back: this request is not made.
                    if let Some(r) = held.requests.take() {
                        s.requests.settle(r, 0);
                    }
                    return Err(Refusal { kind: Kind::Tokens, limit: u64::from(tpm), retry_after: wait });
                }
            }
        }
        Ok(held)
    }
}

/// What one admitted request holds on one subject: its concurrency slot and its reservations.
/// `settle` replaces the token reservation by the actual usage; dropping keeps the reservation
/// (the conservative choice when the actual usage is unknown) and frees the concurrency slot.
pub struct Held {
    state: Arc<LimitState>,
    concurrency: bool,
    requests: Option<Taken>,
    tokens: Option<Taken>,
}

impl Held {
    pub fn settle(&mut self, actual_tokens: u64) {
        if let Some(t) = self.tokens.take() {
            self.state.tokens.settle(t, actual_tokens);
        }
    }

    /// The request was never sent: give back its request slot and tokens.
    pub fn cancel(&mut self) {
        if let Some(r) = self.requests.take() {
            self.state.requests.settle(r, 0);
        }
        self.settle(0);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.concurrency {
            self.state.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(rpm: Option<u32>, tpm: Option<u32>, concurrency: Option<u32>) -> Limiter {
        Limiter { rpm, tpm, concurrency, exact: false, state: LimitState::new() }
    }

    /// At three times the limit, accepted requests in every aligned and every sliding 60 s window
    /// stay within 5% of it (simulated over 10 minutes on a paused clock).
    #[tokio::test(start_paused = true)]
    async fn three_times_the_rpm_stays_within_five_percent() {
        let l = limiter(Some(600), None, None);
        let mut accepted = Vec::new(); // ms of each accepted request
        let start = Instant::now();
        // 1,800 offered per minute: one every 33 ms, for 10 minutes.
        for _ in 0..18_000 {
            if l.admit(0).is_ok() {
                accepted.push(start.elapsed().as_millis() as u64);
            }
            tokio::time::advance(Duration::from_micros(33_333)).await;
        }
        for minute in 0..10u64 {
            let n = accepted.iter().filter(|&&t| t / 60_000 == minute).count();
            assert!((570..=630).contains(&n), "minute {minute}: {n} accepted of limit 600");
        }
        for offset in (0..540_000u64).step_by(7_000) {
            let n = accepted.iter().filter(|&&t| t >= offset && t < offset + 60_000).count();
            assert!(n <= 630, "window at {offset} ms: {n} accepted");
        }
    }

    /// Load that starts late in a minute (after an idle spell) and keeps up for two minutes at
    /// three times the limit: no 60-second window, wherever it starts, admits more than the limit.
    #[tokio::test(start_paused = true)]
    async fn no_sliding_minute_passes_the_limit_after_an_idle_spell() {
        let l = limiter(Some(60), None, None);
        tokio::time::advance(Duration::from_millis(47_300)).await;
        let start = Instant::now();
        let mut accepted = Vec::new();
        for _ in 0..360 {
            if l.admit(0).is_ok() {
                accepted.push(start.elapsed().as_millis() as u64);
            }
            tokio::time::advance(Duration::from_millis(333)).await;
        }
        for from in (0..60_000u64).step_by(100) {
            let n = accepted.iter().filter(|&&t| t >= from && t < from + 60_000).count();
            assert!(n <= 60, "the window from {from} ms admitted {n}");
        }
        assert!(accepted.len() >= 115, "two minutes at 3× admit about two limits: {}", accepted.len());
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_is_when_the_oldest_bucket_leaves() {
        let l = limiter(Some(2), None, None);
        l.admit(0).unwrap();
        tokio::time::advance(Duration::from_millis(10_000)).await;
        l.admit(0).unwrap();
        let wait = l.admit(0).err().unwrap().retry_after;
        // The first request's second leaves the window 60 s after it ends: ~51 s from now.
        assert!((50_000..=51_000).contains(&(wait.as_millis() as u64)), "{wait:?}");
        tokio::time::advance(wait).await;
        assert!(l.admit(0).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_are_reserved_then_settled() {
        let l = limiter(None, Some(10_000), None);
        // Large prompts: reservations of 4,000 tokens; the third does not fit.
        let mut a = l.admit(4_000).unwrap();
        let _b = l.admit(4_000).unwrap();
        let refused = l.admit(4_000).err().unwrap();
        assert_eq!(refused.kind, Kind::Tokens);
        assert!(refused.retry_after > Duration::ZERO);
        // The first used only 500: settling frees 3,500, so 4,000 fits again.
        a.settle(500);
        assert!(l.admit(4_000).is_ok());
        // A request larger than the whole limit is refused, never admitted.
        assert!(l.admit(20_000).is_err());
    }

    #[test]
    fn concurrency_is_held_until_drop_and_refusals_undo() {
        let l = limiter(Some(100), Some(1_000), Some(2));
        let a = l.admit(10).unwrap();
        let _b = l.admit(10).unwrap();
        assert_eq!(l.admit(10).err().unwrap().kind, Kind::Concurrency);
        drop(a);
        assert!(l.admit(10).is_ok());
        // A token refusal gives back the request slot it took.
        let l = limiter(Some(1), Some(100), None);
        assert_eq!(l.admit(1_000).err().unwrap().kind, Kind::Tokens);
        assert!(l.admit(10).is_ok(), "the refused request did not use the only slot");
    }
}
