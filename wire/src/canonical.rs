//! The canonical request, response and stream-chunk model every stage works on.
//!
//! It is spelled with OpenAI Chat Completions field names, but every loosely typed OpenAI field
//! (string-or-array content, `stop`, `tool_choice`) is a closed Rust type here. Only the protocol
//! modules (`openai`, `anthropic`, `responses`, `gemini`) translate it to and from wire formats.

// ---------------------------------------------------------------------------------------------
// Estimates

/// Estimated token count of text: UTF-8 bytes / 3, rounded up. Errs high for English (~4 bytes a
/// token) and lands near one token per CJK character (3 bytes). Used for routing decisions and
/// where a provider reports no usage; see `docs/routing.md`.
pub fn estimate_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(3)
}

/// Tokens counted for one image whatever its size (OpenAI bills 85–1,105 for typical images).
pub const IMAGE_TOKENS: u64 = 1_000;
/// Per-message framing overhead, in tokens.
pub const MESSAGE_TOKENS: u64 = 4;

mod answer;
mod content;
mod embeddings;
mod forward;
mod request;
mod stream;
mod text;

pub use answer::*;
pub use content::*;
pub use embeddings::*;
pub use forward::*;
pub use request::*;
pub use stream::*;
pub use text::*;

#[cfg(test)]
mod tests;
