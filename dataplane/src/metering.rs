//! Metering: exactly one usage record per request, and the process's metrics.
//!
//! `meter` builds the record as the request goes and emits it once (also when the caller goes
//! away); `spool` makes it durable and drains it to the configured sinks; `usage_log` writes its
//! line in the log; `traces` exports the request's spans over OTLP when tracing is on, written as
//! protobuf by `otlp`.

pub mod content;
pub mod meter;
mod otlp;
mod record_json;
pub mod spool;
pub mod traces;
pub mod usage_log;

/// The serving threads' park hook: hands over the usage lines and spans whose batches have
/// waited long enough.
pub fn on_park() {
    // One clock read for both batches' ages (a thread parks about twice a request), and none
    // when neither holds anything.
    let mut read = None;
    let mut now = || *read.get_or_insert_with(std::time::Instant::now);
    usage_log::flush(&mut now);
    traces::flush(&mut now);
}

/// Hands over this thread's usage lines and spans now (a serving thread that is about to end).
pub fn flush_now() {
    usage_log::flush_now();
    traces::flush_now();
}
