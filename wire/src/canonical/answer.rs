//! The canonical answer: its choices, why each stopped, and the usage it cost.

use super::*;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Response

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatResponse {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<Choice>,
    pub usage: Option<Usage>,
    pub system_fingerprint: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Choice {
    pub index: u32,
    pub content: Option<String>,
    pub refusal: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: Option<FinishReason>,
    pub logprobs: Option<Value>,
    /// The model's reasoning text, where the provider returns it (OpenAI-compatible
    /// `reasoning_content`, Gemini thought parts, Anthropic thinking blocks).
    pub reasoning: Option<String>,
}

/// A provider's reason for ending the reply, normalized per the table in `docs/translation.md`.
/// A provider value with no faithful OpenAI equivalent is kept as `Unmapped`: it is sent as
/// `finish_reason: null` plus `provider_finish_reason: "<raw>"`, never guessed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
    Unmapped(String),
}

impl FinishReason {
    pub fn openai(&self) -> Option<&'static str> {
        match self {
            Self::Stop => Some("stop"),
            Self::Length => Some("length"),
            Self::ToolCalls => Some("tool_calls"),
            Self::ContentFilter => Some("content_filter"),
            Self::Unmapped(_) => None,
        }
    }

    pub fn raw(&self) -> Option<&str> {
        match self {
            Self::Unmapped(r) => Some(r),
            _ => None,
        }
    }
}

impl FinishReason {
    /// The reason in OpenAI's words where ax maps it, else the provider's own.
    pub fn name(&self) -> &str {
        self.openai().or(self.raw()).unwrap_or_default()
    }
}

/// What a trace says of an answer (`gen_ai.response.id`, `gen_ai.response.finish_reasons`): the
/// provider's id of it and why each choice stopped. Read only for traced requests (and by a
/// stream's decoder, which keeps it as it goes).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AnswerFacts {
    pub id: Option<String>,
    pub finish_reasons: FinishReasons,
}

/// Why each choice stopped: one, nearly always, kept without an allocation of its own.
pub type FinishReasons = smallvec::SmallVec<[FinishReason; 1]>;

impl AnswerFacts {
    /// The answer's id, the first seen (a stream repeats it in every event).
    pub fn saw_id(&mut self, id: &str) {
        if self.id.is_none() && !id.is_empty() {
            self.id = Some(id.to_owned());
        }
    }

    pub fn of(r: &ChatResponse) -> Self {
        Self {
            id: (!r.id.is_empty()).then(|| r.id.clone()),
            finish_reasons: r.choices.iter().filter_map(|c| c.finish_reason.clone()).collect(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// All prompt tokens, cached ones included.
    pub prompt_tokens: u64,
    /// All output tokens, reasoning included.
    pub completion_tokens: u64,
    /// Prompt tokens served from the provider's cache (cache reads).
    pub cached_tokens: u64,
    /// Prompt tokens written to the provider's cache (Anthropic cache creation).
    pub cache_write_tokens: u64,
    /// The part of `cache_write_tokens` kept an hour (Anthropic `ephemeral_1h_input_tokens`).
    pub cache_write_1h_tokens: u64,
    pub reasoning_tokens: u64,
}

impl Usage {
    /// The counts a price applies to.
    pub fn tokens(&self) -> ax_protocol::price::Tokens {
        ax_protocol::price::Tokens {
            prompt: self.prompt_tokens,
            cached: self.cached_tokens,
            cache_write: self.cache_write_tokens,
            cache_write_1h: self.cache_write_1h_tokens,
            completion: self.completion_tokens,
        }
    }
}

/// Seconds since the Unix epoch: `created` of an answer that came without one.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Usage {
    pub fn total(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }
}

impl Serialize for Usage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(5))?;
        m.serialize_entry("prompt_tokens", &self.prompt_tokens)?;
        m.serialize_entry("completion_tokens", &self.completion_tokens)?;
        m.serialize_entry("total_tokens", &self.total())?;
        m.serialize_entry(
            "prompt_tokens_details",
            &PromptDetails { cached_tokens: self.cached_tokens, cache_write_tokens: self.cache_write_tokens },
        )?;
        m.serialize_entry("completion_tokens_details", &CompletionDetails { reasoning_tokens: self.reasoning_tokens })?;
        m.end()
    }
}

#[derive(Serialize)]
struct PromptDetails {
    cached_tokens: u64,
    cache_write_tokens: u64,
}

#[derive(Serialize)]
struct CompletionDetails {
    reasoning_tokens: u64,
}
