//! OpenAI's Responses API, both directions: what a caller (Codex, the Agents SDK) sends and is
//! answered (`caller`, its input walked by `walk`), and what an upstream offering the API answers
//! when a caller's request is forwarded to it (`upstream`).

pub mod caller;
pub mod upstream;

/// One stored response: the input items of its turn (the request's `input` as sent: a string or
/// an array of items) and its response object.
#[derive(Clone, Debug)]
pub struct Link {
    pub id: String,
    pub input: bytes::Bytes,
    pub response: bytes::Bytes,
}
