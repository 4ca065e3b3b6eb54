//! One module per page.

pub mod audit;
pub mod login;
pub mod nodes;
pub mod operators;
pub mod overview;
pub mod reports;
pub mod requests;
pub mod routes;
pub mod tenants;
pub mod upstreams;
pub mod versions;
