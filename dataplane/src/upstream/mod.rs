//! One call to one upstream.
//!
//! `call` encodes with the provider's adapter, sends through the upstream's pooled `client`,
//! classifies the answer and reads it (whole, or as a stream of canonical items framed by `sse`)
//! under the attempt's deadlines. `health` holds each upstream's breaker and each model's rolling
//! statistics: the live state failover reads.

pub mod call;
pub mod client;
pub mod health;
pub mod sse;
