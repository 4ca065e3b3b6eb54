//! Google Gemini (Generative Language API), both directions: `upstream` (a Gemini upstream:
//! generateContent, streamGenerateContent?alt=sse, batchEmbedContents; its answers and streams,
//! read into the canonical model or forwarded as they came) and `caller` (Gemini's own API as an
//! ingress: a `GenerateContentRequest` decoded, the answer, its stream events, errors, models and
//! embeddings written in Gemini's shapes).
//!
//! What both share is defined here: the usage block (`usageMetadata`) and the finish reasons.

pub mod caller;
pub mod upstream;

pub use upstream::{
    decode_chat, decode_embeddings, encode_chat, encode_embeddings, error_code, finish_reason, StreamState, SUPPORTED,
};

use serde::{Deserialize, Serialize};

use crate::canonical::{FinishReason, Usage};

/// `usageMetadata`, read from an upstream's answer and stream and written to a caller's.
/// `candidatesTokenCount` excludes the thoughts (`thoughtsTokenCount`); the canonical
/// `completion_tokens` includes them.
#[derive(Deserialize, Serialize, Default, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct UsageMetadata {
    #[serde(default)]
    pub prompt_token_count: u64,
    #[serde(default)]
    pub candidates_token_count: u64,
    #[serde(default)]
    pub total_token_count: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_content_token_count: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub thoughts_token_count: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl From<UsageMetadata> for Usage {
    fn from(u: UsageMetadata) -> Self {
        Usage {
            prompt_tokens: u.prompt_token_count,
            completion_tokens: u.candidates_token_count + u.thoughts_token_count,
            cached_tokens: u.cached_content_token_count,
            cache_write_tokens: 0,
            cache_write_1h_tokens: 0,
            reasoning_tokens: u.thoughts_token_count,
        }
    }
}

impl From<&Usage> for UsageMetadata {
    fn from(u: &Usage) -> Self {
        let thoughts = u.reasoning_tokens.min(u.completion_tokens);
        UsageMetadata {
            prompt_token_count: u.prompt_tokens,
            candidates_token_count: u.completion_tokens - thoughts,
            total_token_count: u.prompt_tokens + u.completion_tokens,
            cached_content_token_count: u.cached_tokens,
            thoughts_token_count: thoughts,
        }
    }
}

/// A canonical finish reason in Gemini's words. A call finishes with `STOP`, as Gemini's do; a
/// reason Gemini has no word for is `OTHER`, one it has is kept.
pub fn finish_reason_out(f: &FinishReason) -> &str {
    match f {
        FinishReason::Stop | FinishReason::ToolCalls => "STOP",
        FinishReason::Length => "MAX_TOKENS",
        FinishReason::ContentFilter => "SAFETY",
        FinishReason::Unmapped(raw) => match raw.as_str() {
            "LANGUAGE" | "MALFORMED_FUNCTION_CALL" | "UNEXPECTED_TOOL_CALL" | "TOO_MANY_TOOL_CALLS" | "OTHER" => raw,
            _ => "OTHER",
        },
    }
}
