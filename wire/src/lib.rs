//! ax's wire protocols: one codec per API, and the canonical model between them. No I/O: bytes
//! in, bytes out.
//!
//! - `canonical`: the protocol-neutral request, answer and stream chunk every codec reads and
//!   writes (spelled with OpenAI Chat Completions' names), and the same-protocol path's raw request.
//! - One module per wire protocol, each with both directions: `openai` (Chat Completions and
//!   Embeddings), `anthropic` (Messages), `responses` (OpenAI Responses), `gemini` (as an upstream).
//! - `adapter`: what the upstream sides share (the call's context, error classification);
//!   `upstream`: dispatch by provider kind (encode a request, read an answer, decode a stream,
//!   classify an error); `strict`: the strict tool mode ax keeps for upstreams without one.
//! - `json` (the structural walk, decoding with field paths, the one hand writer) and `sse` (event
//!   framing) under all of them; `error`: what a codec can say went wrong.

pub mod adapter;
pub mod anthropic;
pub mod canonical;
pub mod error;
#[doc(hidden)]
pub mod fuzz;
pub mod gemini;
pub mod json;
pub mod openai;
pub mod responses;
pub mod sse;
pub mod strict;
pub mod upstream;

pub use error::{Error, Reported};
