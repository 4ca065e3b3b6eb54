//! OpenAI Chat Completions and Embeddings, both directions: what a caller sends and is answered
//! (`caller`, its conversation walked by `walk`), and what an OpenAI-compatible upstream is sent
//! and answers (`upstream`).

pub mod caller;
pub mod upstream;
pub mod walk;
