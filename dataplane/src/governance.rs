//! Governance: what a caller may spend and how fast.
//!
//! `guard` is the stage: it takes budget reservations and rate-limit holds (their counters are
//! live state in `crate::state`; fleet-wide through Redis in `fleet`) before a request is routed,
//! gives them back when the request is refused, and settles them to the actual usage when it ends.

pub mod fleet;
pub mod guard;
