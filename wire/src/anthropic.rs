//! Anthropic Messages, both directions: what a caller (Claude Code, the `anthropic` SDKs) sends
//! and is answered (`caller`, its conversation walked by `walk`), and what an Anthropic upstream is
//! sent and answers (`upstream`).

pub mod caller;
pub mod upstream;
