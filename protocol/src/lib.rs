//! Serde types shared by the ax data plane, control plane and UI.
//!
//! `config` is the snapshot schema: what a data plane reads from its YAML file in standalone
//! mode and what the control plane pushes to it later. `usage` is the per-call usage record.
//! `admin` holds the admin API bodies the UI shares with the control plane.
//! `health` is a data plane's health table (its `/admin/health`, and its summary to the control plane).
//! These types only describe data; validation and compilation into runtime structures happen in
//! the data plane (`ax_dataplane::snapshot`).

pub mod admin;
pub mod config;
pub mod health;
pub mod snapshot;
pub mod usage;
