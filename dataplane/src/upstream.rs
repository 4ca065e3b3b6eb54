//! One call to one upstream.
//!
//! `call` is dispatch: it sends the request to the upstream's backend (`Backend`: the pooled HTTP
//! client of `crate::transport`, or the in-process `mock`) through the provider's adapter,
//! classifies the answer and reads it (whole, or as a stream of canonical items framed by
//! `crate::sse`) under the attempt's deadlines.

pub mod call;
pub mod mock;
