//! Metering: exactly one usage record per request, and the process's metrics.
//!
//! `meter` builds the record as the request goes and emits it once (also when the caller goes
//! away); `spool` makes it durable and drains it to the configured sinks; `usage_log` writes its
//! line in the log; `traces` exports the request's spans over OTLP when tracing is on, written as
//! protobuf by `otlp`.

pub mod content;
pub mod meter;
mod otlp;
pub mod spool;
pub mod traces;
pub mod usage_log;
