//! The store: every SQL statement of the control plane, by table group. Handlers decode the
//! request, call the store (inside one transaction when they change anything), and commit; no
//! other module writes SQL (checked by `tests/e2e/layering.rs`). Queries are `sqlx::query!`,
//! checked at build time against `controlplane/.sqlx` (`.ci/sqlx-prepare`); the one dynamic
//! query (the cost report's grouping) is a `QueryBuilder` over fixed names.
//!
//! - `config`    — tenants and API keys, upstreams (models, sealed keys), routes (candidates).
//! - `versions`  — configuration versions (advisory lock, NOTIFY) and the audit log.
//! - `nodes`     — data planes and their websocket connections.
//! - `operators` — operators, sessions, failed logins.
//! - `usage`     — usage events, daily rollups, dead letters, partitions, report queries.

pub mod config;
pub mod nodes;
pub mod operators;
pub mod usage;
pub mod versions;
