//! One module per page.

pub mod login;
pub mod nodes;
pub mod reports;
pub mod routes;
pub mod tenants;
pub mod versions;
