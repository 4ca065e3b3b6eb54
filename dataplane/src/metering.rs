//! Metering: exactly one usage record per request, and the process's metrics.
//!
//! `meter` builds the record as the request goes and emits it once (also when the caller goes
//! away); `spool` makes it durable and drains it to the configured sinks; `usage_log` writes its
//! line in the log.

pub mod meter;
pub mod spool;
pub mod usage_log;
