//! Live upstream health: circuit breaker, concurrency permits, a rolling outcome window,
//! latency histograms and a time-to-first-token EWMA.
//!
//! Everything is atomics (no locks on the request path). Health is runtime state, not
//! configuration: it lives outside the immutable snapshot and is carried across reloads by upstream
//! (and model) name, so a reload neither forgets an open breaker nor resets in-flight counts.
//! Time is `tokio::time::Instant`, so tests drive transitions with a paused clock.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ax_protocol::config::BreakerSpec;
use tokio::time::Instant;

/// Milliseconds since `base`, from tokio's clock.
fn ms_since(base: Instant) -> u64 {
    u64::try_from(Instant::now().saturating_duration_since(base).as_millis()).unwrap_or(u64::MAX)
}

use crate::error::Outcome;

// ---------------------------------------------------------------------------------------------
// Rolling window of outcomes, one bucket per second

const WINDOW_SLOTS: usize = 64;

/// Per-second buckets, each one atomic word: `second << 32 | failures << 16 | successes`.
struct Window {
    slots: [AtomicU64; WINDOW_SLOTS],
}

impl Window {
    fn new() -> Self {
        Self { slots: std::array::from_fn(|_| AtomicU64::new(0)) }
    }

    fn record(&self, now_ms: u64, failure: bool) {
        let sec = now_ms / 1000;
        let slot = &self.slots[(sec % WINDOW_SLOTS as u64) as usize];
        let _ = slot.fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
            let (s, f, ok) = unpack(w);
            let (f, ok) = if s == sec { (f, ok) } else { (0, 0) };
            let (f, ok) = if failure { (f.saturating_add(1), ok) } else { (f, ok.saturating_add(1)) };
            Some(pack(sec, f, ok))
        });
    }

    /// (failures, successes) within the last `span_ms`.
    fn totals(&self, now_ms: u64, span_ms: u64) -> (u32, u32) {
        let now_s = now_ms / 1000;
        let span_s = span_ms.div_ceil(1000).clamp(1, WINDOW_SLOTS as u64);
        self.slots.iter().fold((0, 0), |(tf, tok), slot| {
            let (s, f, ok) = unpack(slot.load(Ordering::Acquire));
            if s <= now_s && now_s - s < span_s && (f, ok) != (0, 0) {
                (tf + u32::from(f), tok + u32::from(ok))
            } else {
                (tf, tok)
            }
        })
    }

    fn clear(&self) {
        for s in &self.slots {
            s.store(0, Ordering::Release);
        }
    }
}

fn pack(sec: u64, failures: u16, successes: u16) -> u64 {
    (sec << 32) | (u64::from(failures) << 16) | u64::from(successes)
}

fn unpack(w: u64) -> (u64, u16, u16) {
    (w >> 32, ((w >> 16) & 0xffff) as u16, (w & 0xffff) as u16)
}

// ---------------------------------------------------------------------------------------------
// Circuit breaker

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Closed: go ahead.
    Pass,
    /// Half-open and this caller won the single probe slot: go ahead, report with `probe: true`.
    Probe,
    /// Open (or half-open with the probe already out): skip this candidate.
    Reject { reopens_in: Duration },
}

pub use ax_protocol::health::{BreakerState, ModelStatus};

/// A per-upstream-instance circuit breaker: a small state machine fed classified outcomes.
///
/// `open_until` is 0 while closed, else the time (ms since `base`) at which the breaker half-opens.
/// In half-open, the first caller to claim `probing` sends the one probe; everybody else is
/// rejected until the probe reports.
pub struct Breaker {
    base: Instant,
    open_until: AtomicU64,
    probing: AtomicBool,
    /// Failed probes in a row: each doubles the cooldown (up to the cap).
    escalation: AtomicU32,
    window: Window,
}

impl Breaker {
    pub fn new() -> Self {
        Self {
            base: Instant::now(),
            open_until: AtomicU64::new(0),
            probing: AtomicBool::new(false),
            escalation: AtomicU32::new(0),
            window: Window::new(),
        }
    }

    /// The hot-path check: one atomic load while closed.
    pub fn admit(&self) -> Admission {
        let until = self.open_until.load(Ordering::Acquire);
        if until == 0 {
            return Admission::Pass;
        }
        let now = ms_since(self.base);
        if now < until {
            return Admission::Reject { reopens_in: Duration::from_millis(until - now) };
        }
        if self.probing.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            Admission::Probe
        } else {
            Admission::Reject { reopens_in: Duration::ZERO }
        }
    }

    /// Gives back a probe slot that was claimed but not used (e.g. the candidate was saturated).
    pub fn release_probe(&self) {
        self.probing.store(false, Ordering::Release);
    }

    pub fn state(&self) -> (BreakerState, Option<Duration>) {
        let until = self.open_until.load(Ordering::Acquire);
        if until == 0 {
            return (BreakerState::Closed, None);
        }
        let now = ms_since(self.base);
        if now < until {
            (BreakerState::Open, Some(Duration::from_millis(until - now)))
        } else {
            (BreakerState::HalfOpen, Some(Duration::ZERO))
        }
    }

    /// Feeds one attempt's outcome. `probe` says whether this attempt was the half-open probe.
    pub fn record(&self, outcome: Outcome, probe: bool, cfg: &BreakerSpec) {
        let now = ms_since(self.base);
        if probe {
            if outcome.is_failure() {
                let esc = self.escalation.fetch_add(1, Ordering::AcqRel) + 1;
                self.open_until.store(now + cooldown(outcome, esc, cfg).max(1), Ordering::Release);
            } else {
                // Success, or the upstream answered a client error properly: it is alive.
                self.escalation.store(0, Ordering::Release);
                self.window.clear();
                self.open_until.store(0, Ordering::Release);
            }
            self.probing.store(false, Ordering::Release);
            return;
        }
        if outcome == Outcome::Neutral {
            return;
        }
        self.window.record(now, outcome.is_failure());
        if !outcome.is_failure() || self.open_until.load(Ordering::Acquire) != 0 {
            return;
        }
        let trip = match outcome {
            // A 429 with Retry-After opens at once, for exactly that long.
            Outcome::RateLimited(Some(_)) => true,
            _ => {
                let (f, ok) = self.window.totals(now, cfg.window_ms);
                let total = f + ok;
                f >= cfg.failures || (total >= cfg.min_requests && f64::from(f) >= cfg.failure_ratio * f64::from(total))
            }
        };
        if trip {
            let esc = self.escalation.load(Ordering::Acquire);
            let until = now + cooldown(outcome, esc, cfg).max(1);
            // Only the first failure to trip sets the time; concurrent ones keep it.
            let _ = self.open_until.compare_exchange(0, until, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}

impl std::fmt::Debug for UpstreamHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamHealth")
            .field("breaker", &self.breaker.state())
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl std::fmt::Debug for ModelHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelHealth").field("ttft_ewma", &self.ewma()).finish()
    }
}

impl Default for Breaker {
    fn default() -> Self {
        Self::new()
    }
}

fn cooldown(outcome: Outcome, escalation: u32, cfg: &BreakerSpec) -> u64 {
    if let Outcome::RateLimited(Some(d)) = outcome {
        return u64::try_from(d.as_millis()).unwrap_or(u64::MAX).min(cfg.max_cooldown_ms);
    }
    let base = if outcome == Outcome::Timeout { cfg.timeout_cooldown_ms } else { cfg.cooldown_ms };
    base.saturating_mul(1u64 << escalation.min(20)).min(cfg.max_cooldown_ms)
}

// ---------------------------------------------------------------------------------------------
// Per-upstream health: breaker + concurrency

pub struct UpstreamHealth {
    pub breaker: Breaker,
    in_flight: AtomicU32,
}

impl UpstreamHealth {
    pub fn new() -> Arc<Self> {
        Arc::new(Self { breaker: Breaker::new(), in_flight: AtomicU32::new(0) })
    }

    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// A slot under `max` concurrent requests, or `None` when saturated (never waits).
    pub fn try_acquire(self: &Arc<Self>, max: u32) -> Option<Permit> {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
            .ok()
            .map(|_| Permit(self.clone()))
    }
}

/// One in-flight request on an upstream; released on drop (for streams, when the stream ends).
pub struct Permit(Arc<UpstreamHealth>);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

// ---------------------------------------------------------------------------------------------
// Per-(upstream, model) statistics for the health table and the latency strategy

/// A rolling latency histogram: log-scale buckets (4 per power of two, in µs) kept for the current
/// and the previous minute.
struct Hist {
    gens: [HistGen; 2],
}

struct HistGen {
    minute: AtomicU64,
    buckets: [AtomicU32; HIST_BUCKETS],
}

const HIST_BUCKETS: usize = 128;

impl Hist {
    fn new() -> Self {
        Self {
            gens: std::array::from_fn(|_| HistGen {
                minute: AtomicU64::new(u64::MAX),
                buckets: std::array::from_fn(|_| AtomicU32::new(0)),
            }),
        }
    }

    fn bucket(us: u64) -> usize {
        ((((us as f64) + 1.0).log2() * 4.0) as usize).min(HIST_BUCKETS - 1)
    }

    fn record(&self, now_ms: u64, d: Duration) {
        let minute = now_ms / 60_000;
        let g = &self.gens[(minute % 2) as usize];
        let seen = g.minute.load(Ordering::Acquire);
        if seen != minute && g.minute.compare_exchange(seen, minute, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            for b in &g.buckets {
                b.store(0, Ordering::Release);
            }
        }
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        g.buckets[Self::bucket(us)].fetch_add(1, Ordering::AcqRel);
    }

    /// The q-quantile over the last one to two minutes, or `None` without samples.
    fn quantile(&self, now_ms: u64, q: f64) -> Option<Duration> {
        let minute = now_ms / 60_000;
        let mut counts = [0u64; HIST_BUCKETS];
        for g in &self.gens {
            let m = g.minute.load(Ordering::Acquire);
            if m == minute || minute.checked_sub(1) == Some(m) {
                for (c, b) in counts.iter_mut().zip(&g.buckets) {
                    *c += u64::from(b.load(Ordering::Acquire));
                }
            }
        }
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let target = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= target {
                // The bucket's upper bound.
                return Some(Duration::from_micros((2f64.powf((i + 1) as f64 / 4.0) - 1.0) as u64));
            }
        }
        None
    }
}

pub struct ModelHealth {
    base: Instant,
    window: Window,
    latency: Hist,
    ttft: Hist,
    /// EWMA of time to first token (or of latency for non-stream calls), in µs, as f64 bits; 0 = no sample.
    ewma_us: AtomicU64,
}

/// Weight of a new sample in the EWMA.
const EWMA_ALPHA: f64 = 0.2;

impl ModelHealth {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            base: Instant::now(),
            window: Window::new(),
            latency: Hist::new(),
            ttft: Hist::new(),
            ewma_us: AtomicU64::new(0),
        })
    }

    /// Records one finished attempt: `latency` to the last byte, `ttft` when it streamed.
    pub fn record(&self, outcome: Outcome, latency: Duration, ttft: Option<Duration>) {
        let now = ms_since(self.base);
        if outcome != Outcome::Neutral {
            self.window.record(now, outcome.is_failure());
        }
        if outcome != Outcome::Success {
            return;
        }
        self.latency.record(now, latency);
        if let Some(t) = ttft {
            self.ttft.record(now, t);
        }
        let sample = ttft.unwrap_or(latency).as_secs_f64() * 1e6;
        let _ = self.ewma_us.fetch_update(Ordering::AcqRel, Ordering::Acquire, |bits| {
            let old = f64::from_bits(bits);
            let new = if bits == 0 { sample } else { old + EWMA_ALPHA * (sample - old) };
            Some(new.max(1.0).to_bits())
        });
    }

    /// The smoothed time to first token, if any call succeeded yet.
    pub fn ewma(&self) -> Option<Duration> {
        let bits = self.ewma_us.load(Ordering::Acquire);
        (bits != 0).then(|| Duration::from_secs_f64(f64::from_bits(bits) / 1e6))
    }

    /// The row of the health table for this model (`model` left for the caller to fill).
    pub fn snapshot(&self, window_ms: u64) -> ModelStatus {
        let now = ms_since(self.base);
        let (f, ok) = self.window.totals(now, window_ms);
        let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1000.0);
        ModelStatus {
            model: String::new(),
            requests: f + ok,
            success_rate: (f + ok > 0).then(|| f64::from(ok) / f64::from(f + ok)),
            latency_p50_ms: ms(self.latency.quantile(now, 0.5)),
            latency_p95_ms: ms(self.latency.quantile(now, 0.95)),
            ttft_p50_ms: ms(self.ttft.quantile(now, 0.5)),
            ttft_p95_ms: ms(self.ttft.quantile(now, 0.95)),
            ttft_ewma_ms: ms(self.ewma()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> BreakerSpec {
        BreakerSpec {
            failures: 3,
            failure_ratio: 0.5,
            min_requests: 10,
            window_ms: 10_000,
            cooldown_ms: 1_000,
            timeout_cooldown_ms: 3_000,
            max_cooldown_ms: 8_000,
        }
    }

    async fn advance(ms: u64) {
        tokio::time::advance(Duration::from_millis(ms)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_n_failures_probes_once_and_escalates() {
        let b = Breaker::new();
        let c = cfg();
        for _ in 0..2 {
            b.record(Outcome::Error, false, &c);
            assert_eq!(b.admit(), Admission::Pass);
        }
        b.record(Outcome::Error, false, &c);
        assert!(matches!(b.admit(), Admission::Reject { .. }), "third failure opens");
        assert_eq!(b.state().0, BreakerState::Open);
        advance(999).await;
        assert!(matches!(b.admit(), Admission::Reject { .. }));
        advance(1).await;
        assert_eq!(b.state().0, BreakerState::HalfOpen);
        assert_eq!(b.admit(), Admission::Probe, "after the cooldown one probe goes through");
        assert!(matches!(b.admit(), Admission::Reject { .. }), "and only one");
        // The probe fails: reopen with the cooldown doubled (2 s).
        b.record(Outcome::Error, true, &c);
        advance(1_999).await;
        assert!(matches!(b.admit(), Admission::Reject { .. }));
        advance(1).await;
        assert_eq!(b.admit(), Admission::Probe);
        b.record(Outcome::Error, true, &c); // 4 s
        advance(4_000).await;
        assert_eq!(b.admit(), Admission::Probe);
        b.record(Outcome::Error, true, &c); // 8 s = the cap
        advance(8_000).await;
        assert_eq!(b.admit(), Admission::Probe);
        b.record(Outcome::Error, true, &c); // would be 16 s: capped at 8
        advance(8_000).await;
        assert_eq!(b.admit(), Admission::Probe);
        // Success closes and resets the escalation and the window.
        b.record(Outcome::Success, true, &c);
        assert_eq!(b.state().0, BreakerState::Closed);
        b.record(Outcome::Error, false, &c);
        b.record(Outcome::Error, false, &c);
        assert_eq!(b.admit(), Admission::Pass, "old failures were forgotten");
        b.record(Outcome::Error, false, &c);
        advance(1_000).await;
        assert_eq!(b.admit(), Admission::Probe, "escalation was reset: back to 1 s");
    }

    #[tokio::test(start_paused = true)]
    async fn failures_outside_the_window_do_not_count() {
        let b = Breaker::new();
        let c = cfg();
        b.record(Outcome::Error, false, &c);
        b.record(Outcome::Error, false, &c);
        advance(11_000).await;
        b.record(Outcome::Error, false, &c);
        assert_eq!(b.admit(), Admission::Pass);
    }

    #[tokio::test(start_paused = true)]
    async fn failure_ratio_over_minimum_volume() {
        let b = Breaker::new();
        let c = BreakerSpec { failures: 100, ..cfg() };
        for i in 0..10 {
            b.record(if i % 2 == 0 { Outcome::Success } else { Outcome::Error }, false, &c);
        }
        assert!(matches!(b.admit(), Admission::Reject { .. }), "5 of 10 failed: ratio 0.5 reached");
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limit_opens_for_retry_after_and_timeouts_cool_longer() {
        let c = cfg();
        let b = Breaker::new();
        b.record(Outcome::RateLimited(Some(Duration::from_millis(2_500))), false, &c);
        advance(2_499).await;
        assert!(matches!(b.admit(), Admission::Reject { .. }));
        advance(1).await;
        assert_eq!(b.admit(), Admission::Probe);

        let t = Breaker::new();
        for _ in 0..3 {
            t.record(Outcome::Timeout, false, &c);
        }
        advance(2_999).await;
        assert!(matches!(t.admit(), Admission::Reject { .. }), "timeouts cool down 3 s, errors 1 s");
        advance(1).await;
        assert_eq!(t.admit(), Admission::Probe);
    }

    #[tokio::test(start_paused = true)]
    async fn client_errors_never_count() {
        let b = Breaker::new();
        for _ in 0..50 {
            b.record(Outcome::Neutral, false, &cfg());
        }
        assert_eq!(b.admit(), Admission::Pass);
    }

    #[tokio::test(start_paused = true)]
    async fn half_open_lets_exactly_one_of_100_concurrent_through() {
        let b = Arc::new(Breaker::new());
        let c = cfg();
        for _ in 0..3 {
            b.record(Outcome::Error, false, &c);
        }
        advance(1_000).await;
        let mut tasks = Vec::new();
        for _ in 0..100 {
            let b = b.clone();
            tasks.push(tokio::spawn(async move { b.admit() == Admission::Probe }));
        }
        let mut probes = 0;
        for t in tasks {
            probes += usize::from(t.await.unwrap());
        }
        assert_eq!(probes, 1);
    }

    #[test]
    fn permits_never_exceed_the_cap() {
        let h = UpstreamHealth::new();
        let permits: Vec<_> = (0..10).filter_map(|_| h.try_acquire(3)).collect();
        assert_eq!(permits.len(), 3);
        assert_eq!(h.in_flight(), 3);
        drop(permits);
        assert_eq!(h.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn histograms_and_ewma() {
        let m = ModelHealth::new();
        for ms in [10, 20, 30, 40, 1000] {
            m.record(Outcome::Success, Duration::from_millis(ms), Some(Duration::from_millis(ms / 2)));
        }
        m.record(Outcome::Error, Duration::from_millis(5), None);
        let s = m.snapshot(10_000);
        assert_eq!(s.requests, 6);
        assert!((s.success_rate.unwrap() - 5.0 / 6.0).abs() < 1e-9);
        let p50 = s.latency_p50_ms.unwrap();
        assert!((30.0..=40.0).contains(&p50), "p50 {p50}");
        assert!(s.latency_p95_ms.unwrap() >= 1000.0);
        assert!(m.ewma().unwrap() > Duration::from_millis(5));
    }
}
