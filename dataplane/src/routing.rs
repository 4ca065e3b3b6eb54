//! Routing: from a logical alias to the upstream that answers.
//!
//! `plan` orders the candidates that can serve a request (capabilities, context window,
//! parameters, strategy); `failover` walks that plan, then the fallback aliases' plans, through
//! breakers, concurrency caps and retries, until one attempt succeeds.

pub mod failover;
pub mod plan;
