//! Micro-benchmark of the per-request bookkeeping: breaker admission (closed and open), the
//! concurrency permit, a rate-limit decision, and recording an outcome.
//!
//!   cargo bench -p ax-dataplane --bench health
//!
//! A plain timing loop (no criterion: one more heavy dependency for four numbers); each figure is
//! the best of 5 runs of 2,000,000 iterations, single-threaded, and then the same from 2 threads at
//! once to show contention.
#![allow(clippy::print_stdout, clippy::unwrap_used, reason = "a benchmark prints its results")]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ax_dataplane::error::Outcome;
use ax_dataplane::state::budget::{Budget, Verdict};
use ax_dataplane::state::health::{Breaker, ModelHealth, UpstreamHealth};
use ax_dataplane::state::limits::{LimitState, Limiter};
use ax_protocol::config::BreakerSpec;

const N: u32 = 2_000_000;

fn best_ns(mut f: impl FnMut()) -> f64 {
    (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..N {
                f();
            }
            t.elapsed().as_nanos() as f64 / f64::from(N)
        })
        .fold(f64::INFINITY, f64::min)
}

fn on_two_threads(f: impl Fn() + Send + Sync + 'static) -> f64 {
    let f = Arc::new(f);
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let f = f.clone();
            std::thread::spawn(move || best_ns(|| f()))
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).fold(0.0, f64::max)
}

fn main() {
    let cfg = BreakerSpec::default();
    let closed = Arc::new(Breaker::new());
    let open = Arc::new(Breaker::new());
    for _ in 0..cfg.failures {
        open.record(Outcome::Error, false, &cfg);
    }
    let up = UpstreamHealth::new();
    let model = ModelHealth::new();

    println!("| operation | ns/op, 1 thread | ns/op, 2 threads at once |");
    println!("|---|---:|---:|");
    let c = closed.clone();
    println!(
        "| breaker admit, closed | {:.1} | {:.1} |",
        best_ns(|| {
            black_box(closed.admit());
        }),
        on_two_threads(move || {
            black_box(c.admit());
        })
    );
    let o = open.clone();
    println!(
        "| breaker admit, open (reject) | {:.1} | {:.1} |",
        best_ns(|| {
            black_box(open.admit());
        }),
        on_two_threads(move || {
            black_box(o.admit());
        })
    );
    let u = up.clone();
    println!(
        "| concurrency permit acquire + release | {:.1} | {:.1} |",
        best_ns(|| {
            black_box(up.try_acquire(1024));
        }),
        on_two_threads(move || {
            black_box(u.try_acquire(1024));
        })
    );
    // Limits high enough never to refuse: the cost of the admitted path.
    let limiter = Limiter {
        rpm: Some(u32::MAX),
        tpm: Some(u32::MAX),
        concurrency: Some(u32::MAX),
        exact: false,
        state: LimitState::new(),
    };
    let l2 = limiter.clone();
    println!(
        "| rate-limit decision: rpm + tpm + concurrency, reserve then settle | {:.1} | {:.1} |",
        best_ns(|| {
            // Settling everything back keeps the counters steady across millions of iterations.
            let mut h = limiter.admit(1_500).unwrap();
            h.cancel();
        }),
        on_two_threads(move || {
            let mut h = l2.admit(1_500).unwrap();
            h.cancel();
        })
    );
    let budget = Budget {
        scope: ax_dataplane::state::budget::Scope::Tenant,
        subject: "bench".to_owned(),
        stem: "budget:bench:day:*".to_owned(),
        fail_open: false,
        window: ax_protocol::config::BudgetWindow::Day,
        limit: u64::MAX / 2,
        alias: None,
        action: ax_protocol::config::BudgetAction::default(),
        warn_at: u64::MAX / 2,
        exact: false,
        state: Arc::default(),
    };
    let tz = jiff::tz::TimeZone::get("Europe/Berlin").unwrap();
    println!(
        "| budget decision (period in a time zone, reserve, settle) | {:.1} | – |",
        best_ns(|| {
            if let Verdict::Reserved(mut r, _) = budget.reserve(1_200, &tz) {
                r.settle(0);
            }
        })
    );
    let (b2, m2, cfg2) = (closed.clone(), model.clone(), cfg.clone());
    println!(
        "| record success (breaker window + histograms + EWMA) | {:.1} | {:.1} |",
        best_ns(|| {
            closed.record(Outcome::Success, false, &cfg);
            model.record(Outcome::Success, Duration::from_micros(1500), Some(Duration::from_micros(400)));
        }),
        on_two_threads(move || {
            b2.record(Outcome::Success, false, &cfg2);
            m2.record(Outcome::Success, Duration::from_micros(1500), Some(Duration::from_micros(400)));
        })
    );
}
