//! Live state: what the gateway has counted and observed, kept beside the immutable configuration
//! in the snapshot and carried from one snapshot to the next for the same subject (by name).
//!
//! - `limits` — rate-limit counters (sliding minutes, concurrency) and the holds taken on them.
//! - `budget` — each budget's spend in its current period and local reservations on it.
//! - `health` — each upstream's breaker and in-flight count, each model's rolling statistics.
//! - `lease` — fleet-wide quota drawn in blocks and spent here (the draws are `governance::fleet`'s).
//!
//! Nothing here reads the configuration or the request: the types take plain numbers and the
//! `ax_protocol` specs, and every update is an atomic (no lock).

pub mod budget;
pub mod health;
pub mod lease;
pub mod limits;
