//! Local rate limits: requests per minute, tokens per minute and concurrency, for the tenant (and
//! key), alias and upstream layers.
//!
//! Algorithm: a **sliding-window counter**. Each limiter keeps the count of the current and the
//! previous fixed minute; the load of the last 60 s is estimated as
//! `previous × (share of the previous minute still inside the window) + current`, and a request is
//! admitted when that estimate plus its cost stays within the limit. Unlike a token bucket (or
//! GCRA with a one-minute burst), it never admits much more than the limit in any 60-second window.
//! Tokens are reserved before the call (prompt estimate + `max_tokens`, or the server default)
//! and settled to the actual usage afterwards, so a burst of large requests cannot overshoot.
//! State is two packed atomic words per limiter (window number and count); no locks. Limiter state
//! lives outside the snapshot and survives reloads by name, like health.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

const WINDOW_MS: u64 = 60_000;

fn pack(window: u64, count: u64) -> u64 {
    (window << 32) | count.min(u64::from(u32::MAX))
}

fn unpack(w: u64) -> (u64, u64) {
    (w >> 32, w & 0xffff_ffff)
}

/// One sliding-window counter (requests or tokens per minute).
pub struct SlidingWindow {
    base: Instant,
    cur: AtomicU64,
    prev: AtomicU64,
}

/// What a successful `try_take` reserved, to settle later.
#[derive(Debug, Clone, Copy)]
pub struct Taken {
    window: u64,
    amount: u64,
}

impl SlidingWindow {
    pub fn new() -> Self {
        Self { base: Instant::now(), cur: AtomicU64::new(0), prev: AtomicU64::new(0) }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(Instant::now().saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX)
    }

    /// The estimated use of the last 60 s, and the time into the current window.
    fn load(&self, now: u64) -> (f64, u64) {
        let w = now / WINDOW_MS + 1; // +1: window 0 means "never used"
        let (cw, cc) = unpack(self.cur.load(Ordering::Acquire));
        let (pw, pc) = unpack(self.prev.load(Ordering::Acquire));
        let into = now % WINDOW_MS;
        let weight = 1.0 - into as f64 / WINDOW_MS as f64;
        let (current, previous) = if cw == w {
            (cc, if pw + 1 == w { pc } else { 0 })
        } else if cw + 1 == w {
            (0, cc)
        } else {
            (0, 0)
        };
        (previous as f64 * weight + current as f64, into)
    }

    /// Reserves `amount` if it fits under `limit`; otherwise how long until it would.
    pub fn try_take(&self, amount: u64, limit: u64) -> Result<Taken, Duration> {
        loop {
            let now = self.now_ms();
            let w = now / WINDOW_MS + 1;
            let c = self.cur.load(Ordering::Acquire);
            let (cw, cc) = unpack(c);
            if cw != w {
                // Roll over: the current window becomes the previous one (if adjacent).
                let prev = if cw + 1 == w { pack(cw, cc) } else { 0 };
                if self.cur.compare_exchange(c, pack(w, 0), Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    self.prev.store(prev, Ordering::Release);
                }
                continue;
            }
            let (used, into) = self.load(now);
            if used + amount as f64 > limit as f64 {
                return Err(self.wait(amount, limit, into));
            }
            if self.cur.compare_exchange(c, pack(w, cc + amount), Ordering::AcqRel, Ordering::Acquire).is_ok() {
                return Ok(Taken { window: w, amount });
            }
        }
    }

    /// Time until `amount` fits: the previous window's share decays linearly; if that is not
    /// enough, the current window must become the previous one first.
    fn wait(&self, amount: u64, limit: u64, into: u64) -> Duration {
        let (_, pc) = unpack(self.prev.load(Ordering::Acquire));
        let (_, cc) = unpack(self.cur.load(Ordering::Acquire));
        let over = (pc as f64 * (1.0 - into as f64 / WINDOW_MS as f64) + cc as f64 + amount as f64) - limit as f64;
        let ms = if pc > 0 && over <= pc as f64 * (1.0 - into as f64 / WINDOW_MS as f64) {
            (over / pc as f64 * WINDOW_MS as f64).ceil() as u64
        } else {
            WINDOW_MS - into
        };
        Duration::from_millis(ms.clamp(1, 2 * WINDOW_MS))
    }

    /// Replaces a reservation by the actual amount (in whichever window it was taken).
    pub fn settle(&self, taken: Taken, actual: u64) {
        if actual == taken.amount {
            return;
        }
        for slot in [&self.cur, &self.prev] {
            let done = slot
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                    let (w, c) = unpack(v);
                    (w == taken.window).then(|| pack(w, (c + actual).saturating_sub(taken.amount)))
                })
                .is_ok();
            if done {
                return;
            }
        }
    }

    /// (limit − estimated use), for `x-ratelimit-remaining-*`.
    pub fn remaining(&self, limit: u64) -> u64 {
        let (used, _) = self.load(self.now_ms());
        limit.saturating_sub(used.ceil() as u64)
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

/// Which limit refused, for the 429 and its headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Requests,
    Tokens,
    Concurrency,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requests => "requests per minute",
            Self::Tokens => "tokens per minute",
            Self::Concurrency => "concurrent requests",
        }
    }
}

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
        Limiter { rpm, tpm, concurrency, state: LimitState::new() }
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
