//! W3C trace context: the `traceparent` a caller sends, the ids of a request's spans, the head
//! sampling decision, and the `traceparent` each upstream attempt carries.
//!
//! Off unless traces are exported (`install`, from the binary's start): then `begin` reads the
//! caller's `traceparent` (a new trace when there is none or it is malformed), gives the request a
//! span id, and decides sampling as the configured sampler says (`OTEL_TRACES_SAMPLER`'s names).
//! An attempt's span id is derived from the request's and the attempt's number (`attempt_span`),
//! so the upstream's `traceparent` and the exported attempt span agree without carrying one more
//! id. Spans are made and exported when the request's record is (`metering::traces`); errors are
//! exported whatever the sampling said.
//!
//! Also the request id of the log lines a request writes: `WithRequestId` makes it the serving
//! thread's current one while the request's future runs, and the log format reads it
//! (`current_request_id`). A `tracing` span per request did the same at ~4k instructions a
//! request (the JSON subscriber serializes a span's fields when it is made), 6 % of a small one,
//! for the rare warning line.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

thread_local! {
    /// The id of the request this thread is running now; empty between requests.
    static CURRENT_REQUEST: RefCell<String> = const { RefCell::new(String::new()) };
}

/// A request's (boxed) future, with its id current on the thread for as long as each poll runs.
pub struct WithRequestId<F> {
    id: String,
    inner: Pin<Box<F>>,
}

impl<F: Future> WithRequestId<F> {
    pub fn new(id: String, inner: Pin<Box<F>>) -> Self {
        Self { id, inner }
    }
}

impl<F: Future> Future for WithRequestId<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let set = |id: &str| {
            CURRENT_REQUEST.with(|c| {
                if let Ok(mut c) = c.try_borrow_mut() {
                    c.clear();
                    c.push_str(id);
                }
            })
        };
        set(&this.id);
        let r = this.inner.as_mut().poll(cx);
        set("");
        r
    }
}

/// The id of the request the calling thread is running, if any (for its log lines).
pub fn current_request_id() -> Option<String> {
    CURRENT_REQUEST.with(|c| c.try_borrow().ok().filter(|id| !id.is_empty()).map(|id| id.clone()))
}

/// How requests are sampled at their head: a `ratio` of new traces kept (by trace id, so every
/// service keeps the same ones); with `parent_based`, a caller's `traceparent` decides for its
/// trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampler {
    pub ratio: f64,
    pub parent_based: bool,
}

impl Sampler {
    /// `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG` as every OpenTelemetry SDK reads them
    /// (`parentbased_always_on` when unset); `None` for a name it does not know.
    pub fn from_otel(name: Option<&str>, arg: Option<&str>) -> Option<Self> {
        let ratio =
            || arg.and_then(|a| a.trim().parse::<f64>().ok()).filter(|r| (0.0..=1.0).contains(r)).unwrap_or(1.0);
        let (ratio, parent_based) = match name.map(str::trim).unwrap_or("parentbased_always_on") {
            "always_on" => (1.0, false),
            "always_off" => (0.0, false),
            "traceidratio" => (ratio(), false),
            "parentbased_always_on" => (1.0, true),
            "parentbased_always_off" => (0.0, true),
            "parentbased_traceidratio" => (ratio(), true),
            _ => return None,
        };
        Some(Self { ratio, parent_based })
    }

    fn sampled(self, trace_id: u128, parent: Option<bool>) -> bool {
        let Self { ratio, parent_based } = self;
        match parent {
            Some(flag) if parent_based => flag,
            _ => {
                // The trace id's low 63 bits against the ratio, as the SDKs' TraceIdRatioBased.
                let bound = (ratio * (1u64 << 63) as f64) as u64;
                ratio >= 1.0 || ((trace_id as u64) >> 1) < bound
            }
        }
    }
}

/// What identifies one upstream request: the caller's request id and, when tracing, the
/// attempt's `traceparent`; and where its bytes are counted.
#[derive(Debug, Clone, Copy)]
pub struct Hop<'a> {
    pub request_id: &'a str,
    pub traceparent: Option<&'a [u8]>,
    /// The attempt's byte counts (its record in the request explorer).
    pub io: Option<&'a std::sync::Arc<AttemptIo>>,
}

impl<'a> From<&'a str> for Hop<'a> {
    fn from(request_id: &'a str) -> Self {
        Self { request_id, traceparent: None, io: None }
    }
}

/// The bytes an upstream attempt wrote (request head and body) and read (response head and
/// body, as far as it was read); counted by the transport, read when the attempt is recorded.
#[derive(Debug, Default)]
pub struct AttemptIo {
    sent: std::sync::atomic::AtomicU64,
    received: std::sync::atomic::AtomicU64,
}

impl AttemptIo {
    /// (sent, received) so far.
    pub fn counts(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.sent.load(Relaxed), self.received.load(Relaxed))
    }

    pub fn add_sent(&self, n: usize) {
        self.sent.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn add_received(&self, n: usize) {
        self.received.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

thread_local! {
    /// Where ids come from: a small fast generator per thread, seeded from the thread's
    /// cryptographic one (as the OpenTelemetry SDKs' id generators do). `rand::random` costs
    /// ~170 instructions a draw against ~20 here.
    static IDS: RefCell<rand::rngs::SmallRng> =
        RefCell::new(rand::SeedableRng::from_rng(&mut rand::rng()));
}

/// A random 128-bit id (a trace's, a request's): unique, not secret. What must not be guessed
/// (a stored response's id, a key) draws from `rand::rng()` instead.
pub fn random_id() -> u128 {
    IDS.with(|g| rand::Rng::random(&mut *g.borrow_mut()))
}

static SAMPLER: OnceLock<Sampler> = OnceLock::new();

/// Turns tracing on for the process (once; later calls change nothing).
pub fn install(sampler: Sampler) {
    let _ = SAMPLER.set(sampler);
}

/// Whether traces are on.
pub fn enabled() -> bool {
    SAMPLER.get().is_some()
}

/// A `traceparent` header's value (version 00: always 55 ASCII bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Traceparent([u8; 55]);

impl Traceparent {
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// One request's place in its trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: u128,
    /// The caller's span, when it sent a `traceparent`: the request span's parent.
    pub parent: Option<u64>,
    /// The request's own span.
    pub span: u64,
    /// The head sampling decision (errors are exported either way).
    pub sampled: bool,
}

/// The request's trace context when tracing is on: the caller's `traceparent` continued, or a
/// new trace.
pub fn begin(traceparent: Option<&[u8]>) -> Option<TraceContext> {
    let sampler = SAMPLER.get()?;
    let parent = traceparent.and_then(parse);
    let trace_id = parent.map_or_else(|| nonzero(random_id), |p| p.0);
    Some(TraceContext {
        trace_id,
        parent: parent.map(|p| p.1),
        span: nonzero(|| random_id() as u64),
        sampled: sampler.sampled(trace_id, parent.map(|p| p.2)),
    })
}

fn nonzero<T: PartialEq + From<u8>>(draw: fn() -> T) -> T {
    loop {
        let v = draw();
        if v != T::from(0) {
            return v;
        }
    }
}

/// `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`: (trace id, span id, sampled). Any other
/// version is read by the same layout, as the W3C spec asks; all-zero ids and `ff` are refused.
pub fn parse(v: &[u8]) -> Option<(u128, u64, bool)> {
    let s = std::str::from_utf8(v).ok()?.trim();
    let mut parts = s.split('-');
    let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !hex(version, 2) || version == "ff" || !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
        return None;
    }
    if version == "00" && parts.next().is_some() {
        return None;
    }
    let trace = u128::from_str_radix(trace, 16).ok().filter(|t| *t != 0)?;
    let span = u64::from_str_radix(span, 16).ok().filter(|s| *s != 0)?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some((trace, span, flags & 1 == 1))
}

impl TraceContext {
    /// The span id of attempt `n` (1-based): a fixed mix of the request's span id and `n`, never
    /// zero and never the request's own.
    pub fn attempt_span(&self, n: u32) -> u64 {
        let mut z = self.span ^ (u64::from(n)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        if z == 0 || z == self.span {
            z = self.span.rotate_left(1) | 1;
        }
        z
    }

    /// The `traceparent` attempt `n` sends its upstream, written on the stack.
    pub fn traceparent(&self, n: u32) -> Traceparent {
        let mut b = [0u8; 55];
        b[..3].copy_from_slice(b"00-");
        b[3..35].copy_from_slice(&self.trace_id_digits());
        b[35] = b'-';
        b[36..52].copy_from_slice(&hex16(self.attempt_span(n)));
        b[52..].copy_from_slice(if self.sampled { b"-01" } else { b"-00" });
        Traceparent(b)
    }

    /// The trace id as 32 lowercase hex digits.
    pub fn trace_id_hex(&self) -> String {
        String::from_utf8(self.trace_id_digits().to_vec()).unwrap_or_default()
    }

    fn trace_id_digits(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[..16].copy_from_slice(&hex16((self.trace_id >> 64) as u64));
        b[16..].copy_from_slice(&hex16(self.trace_id as u64));
        b
    }
}

/// Appends the low `digits` (at most 32) lowercase hex digits of `v`, zero-padded, in one copy
/// (`format!("{:032x}")` costs ten times as much, a `push` per digit three times).
pub fn push_hex(out: &mut String, v: u128, digits: usize) {
    let mut buf = [0u8; 32];
    buf[..16].copy_from_slice(&hex16((v >> 64) as u64));
    buf[16..].copy_from_slice(&hex16(v as u64));
    out.push_str(std::str::from_utf8(&buf[32 - digits.min(32)..]).unwrap_or_default());
}

/// The 16 lowercase hex digits of `x`, with no table and no loop: each nibble is spread into a
/// byte of its own (high nibble first), then made a digit with a carry-free add per byte.
fn hex16(x: u64) -> [u8; 16] {
    const fn lanes(byte: u8) -> u128 {
        u128::from_ne_bytes([byte; 16])
    }
    let mut v = u128::from(x);
    // Halve the width of each lane at every step, the high half moving to the upper lane.
    v = (v & 0xffff_ffff) | ((v & 0xffff_ffff_0000_0000) << 32);
    v = (v & 0x0000_ffff_0000_0000_0000_ffff) | ((v & 0xffff_0000_0000_0000_ffff_0000) << 16);
    v = (v & 0x00ff_0000_00ff_0000_00ff_0000_00ff) | ((v & 0xff00_0000_ff00_0000_ff00_0000_ff00) << 8);
    v = (v & lanes(0x0f) & 0x000f_000f_000f_000f_000f_000f_000f_000f)
        | ((v & 0x00f0_00f0_00f0_00f0_00f0_00f0_00f0_00f0) << 4);
    // Byte i (from the low end) now holds nibble i. A nibble over 9 gets 'a' - '0' - 10 more.
    let over9 = ((v + lanes(6)) >> 4) & lanes(1);
    let digits = v + lanes(b'0') + over9 * u128::from(b'a' - b'0' - 10);
    digits.to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_digits_are_formats() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for v in [0u128, 1, 9, 10, 15, 16, 0xabcdef, u128::from(u64::MAX), u128::MAX, 0x0123_4567_89ab_cdef_u128 << 60]
            .into_iter()
            .chain((0..200).map(|_| {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                u128::from(seed) << 64 | u128::from(seed.rotate_left(17))
            }))
        {
            for digits in [16, 32] {
                let mut s = String::new();
                push_hex(&mut s, v, digits);
                let want = format!("{v:032x}");
                assert_eq!(s, want[32 - digits..], "{v:#x}");
            }
        }
    }

    #[test]
    fn a_traceparent_is_read_as_the_spec_writes_it() {
        let t = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(parse(t.as_bytes()), Some((0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7, true)));
        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        assert_eq!(parse(unsampled.as_bytes()).map(|p| p.2), Some(false));
        // A later version may add fields; version 00 may not.
        assert!(parse(b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra").is_some());
        for bad in [
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "",
            "garbage",
        ] {
            assert_eq!(parse(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn attempt_spans_differ_from_each_other_and_from_the_request() {
        let t = TraceContext { trace_id: 7, parent: None, span: 42, sampled: true };
        let spans: Vec<u64> = (1..=5).map(|n| t.attempt_span(n)).collect();
        let mut unique = spans.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 5);
        assert!(!spans.contains(&42) && !spans.contains(&0));
        let text = |t: Traceparent| String::from_utf8(t.as_bytes().to_vec()).unwrap();
        assert_eq!(text(t.traceparent(1)), format!("00-{:032x}-{:016x}-01", 7, spans[0]));
        let big = TraceContext { trace_id: 0x0af7651916cd43dd8448eb211c80319c, sampled: false, ..t };
        assert_eq!(big.trace_id_hex(), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(text(big.traceparent(2)), format!("00-{:032x}-{:016x}-00", big.trace_id, big.attempt_span(2)));
        for (v, digits) in [(0u128, 1), (0xabc, 3), (u128::MAX, 32), (0x0123_4567_89ab_cdef, 16), (0x1f, 40)] {
            let mut s = String::from("x");
            push_hex(&mut s, v, digits);
            let want = format!("x{:032x}", v);
            assert_eq!(s, format!("x{}", &want[want.len() - digits.min(32)..]), "{v:x} in {digits}");
        }
    }

    #[test]
    fn sampling_follows_the_parent_or_the_ratio() {
        let on = Sampler::from_otel(None, None).unwrap();
        assert!(on.sampled(1, None) && !on.sampled(1, Some(false)));
        let none = Sampler::from_otel(Some("traceidratio"), Some("0")).unwrap();
        assert!(!none.sampled(u128::MAX, None) && !none.sampled(1, Some(true)));
        let half = Sampler::from_otel(Some("parentbased_traceidratio"), Some("0.5")).unwrap();
        let kept = (0..10_000u128)
            .filter(|i| half.sampled(i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835), None))
            .count();
        assert!((4_000..6_000).contains(&kept), "{kept}");
        assert!(half.sampled(0, Some(true)));
        assert_eq!(Sampler::from_otel(Some("jaeger_remote"), None), None);
    }
}
