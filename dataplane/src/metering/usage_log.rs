//! The usage line: one JSON line per request on stderr (target `ax::usage`, at the default level
//! `info`), `{"timestamp", "level", "target", "fields"}` with the request's `UsageRecord` as its
//! fields: the same record, field for field, that the spool and its sinks get.
//!
//! It is not a `tracing` event: formatting a record's twenty fields through the subscriber cost
//! about a quarter of a request's instructions (a map of JSON values built and serialized per
//! line). Here the record is serialized once, straight into the line. A serving thread collects
//! its lines and hands them to the process's log writer (`install`, which every log line shares)
//! in one piece once it holds `BATCH_BYTES`, or when it is about to go idle (`flush`, tokio's park
//! hook) and its oldest line has waited `BATCH_AGE`: one hand-off, and at most one wake-up of the
//! writer's thread, per batch rather than per request (handing over every line woke the writer
//! for most of them: 3 µs of system time a request at 25,000 a second). A line waits at most
//! about a second (each serving thread wakes every second). The writer's own thread writes them,
//! so a serving thread never waits on the pipe or terminal behind stderr; when that thread falls
//! behind by more than its queue, batches are dropped and counted (`ax_log_lines_dropped_total`),
//! never waited for. The durable record is the spool's, not this line.

use std::cell::RefCell;
use std::io::Write;
use std::sync::OnceLock;

/// A serving thread hands its lines over once it holds this many bytes (about 80 lines)…
/// (`main.rs`'s `LOG_QUEUE` batches of it bound what waits for the writer.) Each hand-over wakes
/// the writer's thread, which spins and yields before it sleeps again: 32 KiB batches woke it
/// ~200 times a second at 35,000 requests a second.
pub const BATCH_BYTES: usize = 64 * 1024;
/// …or when it goes idle with a line this old.
const BATCH_AGE: std::time::Duration = std::time::Duration::from_millis(100);

/// A serving thread's lines not yet handed over, and when the first of them was written.
struct Batch {
    lines: Vec<u8>,
    since: Option<std::time::Instant>,
}

thread_local! {
    static BATCH: RefCell<Batch> = const { RefCell::new(Batch { lines: Vec::new(), since: None }) };
    /// The last second written, and its `YYYY-MM-DDTHH:MM:SS`.
    static SECOND: std::cell::Cell<(u64, [u8; 19])> = const { std::cell::Cell::new((u64::MAX, [0; 19])) };
}

/// `t` as jiff (and `tracing`'s JSON lines) print a timestamp, RFC 3339 in UTC with as many
/// fraction digits as it needs: `2026-12-04T03:21:50.1234Z`. The date and time of day are
/// formatted once a second per thread (through jiff every line, they cost ~900 instructions).
fn timestamp(buf: &mut Vec<u8>, t: std::time::SystemTime) {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
    let (cached, mut text) = SECOND.get();
    if cached != secs {
        let ts = jiff::Timestamp::from_second(i64::try_from(secs).unwrap_or(i64::MAX)).unwrap_or_default();
        let mut w = &mut text[..];
        let _ = write!(w, "{}", ts.strftime("%Y-%m-%dT%H:%M:%S"));
        SECOND.set((secs, text));
    }
    buf.extend_from_slice(&text);
    if nanos > 0 {
        let mut digits = [0u8; 10];
        let mut n = nanos;
        for d in digits[1..].iter_mut().rev() {
            *d = b'0' + (n % 10) as u8;
            n /= 10;
        }
        digits[0] = b'.';
        let len = 10 - digits.iter().rev().take_while(|&&d| d == b'0').count();
        buf.extend_from_slice(&digits[..len]);
    }
    buf.push(b'Z');
}

use ax_protocol::usage::UsageRecord;

static WRITER: OnceLock<tracing_appender::non_blocking::NonBlocking> = OnceLock::new();

/// Sends usage lines to the process's log writer (the binary installs it with its subscriber).
pub fn install(w: tracing_appender::non_blocking::NonBlocking) {
    let _ = WRITER.set(w);
}

/// Lines the log writer dropped because its thread fell behind.
pub fn dropped() -> Option<u64> {
    WRITER.get().map(|w| w.error_counter().dropped_lines() as u64)
}

/// Writes the record's line, when `ax::usage` is logged at `info` (the default).
pub fn line(rec: &UsageRecord) {
    if !tracing::enabled!(target: "ax::usage", tracing::Level::INFO) {
        return;
    }
    let Some(w) = WRITER.get() else {
        // No writer of ours (a library user's own subscriber): an ordinary event.
        tracing::info!(target: "ax::usage", record = %serde_json::to_string(rec).unwrap_or_default(), "usage");
        return;
    };
    let full = BATCH.with(|b| {
        let mut b = b.borrow_mut();
        if b.since.is_none() {
            b.since = Some(std::time::Instant::now());
        }
        let buf = &mut b.lines;
        buf.extend_from_slice(b"{\"timestamp\":\"");
        timestamp(buf, std::time::SystemTime::now());
        buf.extend_from_slice(b"\",\"level\":\"INFO\",\"target\":\"ax::usage\",\"fields\":");
        super::record_json::write(buf, rec);
        buf.extend_from_slice(b"}\n");
        buf.len() >= BATCH_BYTES
    });
    if full {
        hand_over(w);
    }
}

/// The serving threads' park hook (`main.rs`): hands this thread's lines to the writer when the
/// oldest has waited `BATCH_AGE` by `now`.
pub fn flush(now: &mut dyn FnMut() -> std::time::Instant) {
    let due = BATCH.with(|b| b.borrow().since.is_some_and(|t| now().saturating_duration_since(t) >= BATCH_AGE));
    if let (true, Some(w)) = (due, WRITER.get()) {
        hand_over(w);
    }
}

/// Hands this thread's lines to the writer now (a serving thread that is about to end).
pub fn flush_now() {
    if let Some(w) = WRITER.get() {
        hand_over(w);
    }
}

fn hand_over(w: &tracing_appender::non_blocking::NonBlocking) {
    BATCH.with(|b| {
        let mut b = b.borrow_mut();
        b.since = None;
        if !b.lines.is_empty() {
            // One write: the batch goes to the writer's thread whole (or is dropped whole).
            let _ = w.clone().write(&b.lines);
            b.lines.clear();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_read_as_jiffs() {
        let base = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_796_355_710);
        for nanos in [0, 1, 10, 100_000_000, 123_456_789, 500_000_000, 999_999_999, 120_000] {
            for secs in [0, 1, 59, 86_400 * 366] {
                let t = base + std::time::Duration::new(secs, nanos);
                let mut ours = Vec::new();
                timestamp(&mut ours, t);
                let theirs = jiff::Timestamp::try_from(t).unwrap().to_string();
                assert_eq!(String::from_utf8(ours).unwrap(), theirs);
            }
        }
    }
}
