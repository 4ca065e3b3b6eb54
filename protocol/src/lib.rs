//! Types shared by the ax data plane, control plane and UI.
//!
//! `config` is the snapshot schema: what a data plane reads from its YAML file in standalone
//! mode and what the control plane pushes to it later. `validate` (feature `validate`) holds the
//! rules such a configuration must satisfy, applied by both planes; the data plane compiles what
//! passes into its live snapshot. `price` turns configured USD prices into exact integer
//! micro-USD. `usage` is the per-call usage record. `admin` holds the admin API bodies the UI
//! shares with the control plane. `glob`: aliases with `*` in them, and which alias serves a name. `health` is a data plane's health table (its `/admin/health`,
//! and its summary to the control plane). `snapshot` is the websocket between the planes. `cpu` checks
//! that the machine has the instruction sets the binary was built for.

pub mod admin;
pub mod config;
pub mod cpu;
pub mod glob;
pub mod health;
pub mod price;
pub mod snapshot;
pub mod usage;
#[cfg(feature = "validate")]
pub mod validate;
